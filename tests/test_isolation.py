"""cudal2 writes only where it is told: one environment variable ($CUDAL2_CACHE_DIR) moves every
file it writes by default (both backends' caches and the default store), and the command line run
with an empty HOME leaves HOME empty apart from that folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudal2 import paths
from cudal2.codegen import cute_dsl, triton
from cudal2.store import store

ROOT = Path(__file__).resolve().parents[1]

# Variables that move a cache or the store somewhere: the test's child process gets none of them
# from the test session (conftest sets several), so it shows where the CLI writes on its own.
_REDIRECTING = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "MPLCONFIGDIR",
                "TRITON_HOME", "TRITON_CACHE_DIR", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR", "CUTE_DSL_CACHE_DIR")


def test_one_variable_moves_the_caches_and_the_default_store(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAL2_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("CUDAL2_STORE", raising=False)
    assert paths.cache_dir() == tmp_path / "c"
    assert triton.cache_dir() == tmp_path / "c" / "triton"
    assert cute_dsl._cache_root() == tmp_path / "c" / "cute_dsl"
    assert store.default_url() == f"sqlite:///{(tmp_path / 'c' / 'store.db').resolve()}"


def test_an_explicit_store_still_wins_over_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAL2_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("CUDAL2_STORE", str(tmp_path / "elsewhere.db"))
    assert store.default_url() == f"sqlite:///{(tmp_path / 'elsewhere.db').resolve()}"


def test_without_the_variable_the_user_cache_folder_is_used(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDAL2_CACHE_DIR", raising=False)
    monkeypatch.delenv("CUDAL2_STORE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    expected = tmp_path / "xdg" / "cudal2" if sys.platform.startswith("linux") else None
    if expected is not None:
        assert paths.cache_dir() == expected
    assert triton.cache_dir() == paths.cache_dir() / "triton"
    assert store.default_url() == f"sqlite:///{(paths.cache_dir() / 'store.db').resolve()}"


def test_the_test_session_itself_writes_no_user_cache():
    home = Path.home().resolve()
    cache = Path(os.environ["CUDAL2_CACHE_DIR"]).resolve()
    assert home not in cache.parents and cache != home
    assert "CUDAL2_STORE" not in os.environ
    assert store.default_url() == f"sqlite:///{(cache / 'store.db').resolve()}"


@pytest.mark.slow
def test_the_cli_leaves_home_empty_apart_from_the_folder_it_was_given(tmp_path):
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    asked = home / "asked"  # the only thing under HOME the CLI may create: its cache folder
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAL2_") and k not in _REDIRECTING}
    env.update(HOME=str(home), TMPDIR=str(tmp), CUDAL2_CACHE_DIR=str(asked), PYTHONPATH=str(ROOT),
               # matplotlib keeps a font cache in ~/.cache/matplotlib, a third-party write the CLI does
               # not own, so the test names its folder (under the asked one) as a user would.
               MPLCONFIGDIR=str(asked / "matplotlib"), COLUMNS="200")
    commands = [
        ["search", "256x256x256", "--runner", "recorded", "--budget", "3", "--proposer", "random"],
        ["show"],
        ["export", "-o", str(tmp_path / "table.json")],
        ["compare", "256x256x256", "--runner", "recorded", "--budget", "3", "--proposers", "random,rules",
         "-o", str(tmp_path / "compare.png"), "--store-dir", str(tmp_path / "stores")],
    ]
    for args in commands:
        r = subprocess.run([sys.executable, "-m", "cudal2.cli", *args], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
    assert "256x256x256" in r.stdout  # compare ran its arms
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert written and all(w == "asked" or w.startswith("asked" + os.sep) for w in written), written
    assert (asked / "recorded.db").is_file()  # the recorded runner's own store followed $CUDAL2_CACHE_DIR
    assert not list(tmp.iterdir()), sorted(p.name for p in tmp.iterdir())
