"""cudal2.native_build: a library compiled once into its cache folder; its failures as one-line errors; the
outputs of compilers whose process ended mid-build removed."""

import os
import shutil
import subprocess
import sys

import pytest

from cudal2 import native_build

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) here")


@needs_cc
def test_a_library_is_compiled_once_and_found_after(tmp_path):
    source = tmp_path / "answer.c"
    source.write_text("int answer(void) { return 42; }\n")
    args = (["-O2", "-shared", "-fPIC"], [], ["key"], tmp_path / "cache", "answer", ".so")
    first = native_build.library(source, shutil.which("cc"), *args)
    assert first.exists() and first.parent == tmp_path / "cache"
    again = native_build.library(source, shutil.which("cc"), *args)
    assert again == first and list(first.parent.iterdir()) == [first]


def test_a_compiler_that_cannot_run_or_fails_is_one_line(tmp_path):
    source = tmp_path / "bad.c"
    source.write_text("this is not C\n")
    with pytest.raises(RuntimeError, match="^no-such-cc could not run"):
        native_build.library(source, str(tmp_path / "no-such-cc"), [], [], [], tmp_path, "bad", ".so")
    if shutil.which("cc"):
        with pytest.raises(RuntimeError, match="^cc failed on bad.c: ") as failed:
            native_build.library(source, shutil.which("cc"), ["-shared"], [], [], tmp_path, "bad", ".so")
        assert "\n" not in str(failed.value)
    assert not list(tmp_path.glob("*.tmp"))


@needs_cc
def test_the_output_of_a_process_that_ended_mid_build_is_removed(tmp_path):
    """A compiler's output named for a process that no longer runs is removed at the next build; one named for
    a live process (another build under way) is left to it."""
    source = tmp_path / "answer.c"
    source.write_text("int answer(void) { return 42; }\n")
    args = (["-O2", "-shared", "-fPIC"], [], [], tmp_path / "cache", "answer", ".so")
    out = native_build.library(source, shutil.which("cc"), *args)
    out.unlink()
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, alive = int(ended.stdout), os.getppid()
    for pid in (dead, alive):
        (out.parent / f"{out.name}.{pid}.tmp").write_text("half a library")
    assert native_build.library(source, shutil.which("cc"), *args) == out and out.exists()
    assert sorted(p.name for p in out.parent.glob("*.tmp")) == [f"{out.name}.{alive}.tmp"]
