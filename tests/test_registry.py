"""Backends plug in through the `cudal2.backends` entry-point group; nothing in cudal2 changes."""

import re
import sys
import textwrap
from pathlib import Path

import pytest

from cudal2 import codegen
from cudal2.codegen import ENTRY_POINT_GROUP, available_backends, get_backend
from cudal2.ir import GemmProblem, KernelSpec, SpecError

TOY_MODULE = '''
from cudal2.codegen.base import Backend, Source
from cudal2.ir import Capabilities, options


class ToyBackend(Backend):
    """Computes the GEMM with torch, so a test can run it anywhere."""
    name = "toy"
    version = "7"
    capabilities = Capabilities(options=options(load_path=["pointer"], block_k=[32, 64]))

    def render(self, problem, spec):
        return Source(backend=self.name, problem=problem, spec=spec, text="# torch.matmul",
                      language="python", entry="launch")

    def compile(self, source):
        import torch

        def kernel(a, b, c=None, bias=None):
            out = (a.float() @ b.float()).to(a.dtype)
            if c is None:
                return out
            c.copy_(out)
            return c
        kernel.source = source
        return kernel
'''


@pytest.fixture
def toy_distribution(tmp_path, monkeypatch):
    """A package installed the way pip would leave it: a module plus a dist-info with entry points."""
    (tmp_path / "cudal2_toy_backend.py").write_text(TOY_MODULE)
    dist = tmp_path / "cudal2_toy_backend-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: cudal2-toy-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent(f"""
        [{ENTRY_POINT_GROUP}]
        toy = cudal2_toy_backend:ToyBackend
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    codegen.refresh()
    yield
    sys.modules.pop("cudal2_toy_backend", None)
    codegen.refresh()


def test_builtin_backends_are_listed():
    names = available_backends()
    assert "triton" in names and "cute_dsl" in names
    assert get_backend("triton").name == "triton"


def test_unknown_backend_error_lists_available():
    with pytest.raises(KeyError, match="available: .*triton"):
        get_backend("nope")


def test_third_party_backend_found_through_entry_point(toy_distribution):
    assert "toy" in available_backends()
    toy = get_backend("toy")
    assert toy.version == "7"
    # The IR validates against the toy backend's own declaration.
    spec = KernelSpec(backend="toy", block_k=32)
    with pytest.raises(SpecError) as e:
        KernelSpec(backend="toy", block_k=128)
    assert e.value.fields == ["block_k"] and "backend 'toy'" in str(e.value)
    # swap_ab came after backends like this one: it renders A @ B whatever the spec says, so a
    # backend that does not declare the field gets only its default
    with pytest.raises(SpecError, match="swap_ab=True: backend 'toy'"):
        KernelSpec(backend="toy", swap_ab=True)
    # And it renders and runs through the common protocol.
    import torch

    problem = GemmProblem(m=5, n=7, k=9)
    kernel = toy.compile(toy.render(problem, spec))
    a = torch.randn(5, 9).half()
    b = torch.randn(9, 7).half()
    ref = (a.float() @ b.float())
    assert torch.allclose(kernel(a, b).float(), ref, atol=1e-2, rtol=1e-2)


def test_toy_backend_gone_after_uninstall(toy_distribution, monkeypatch, tmp_path):
    assert "toy" in available_backends()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    codegen.refresh()
    assert "toy" not in available_backends()
    with pytest.raises(SpecError, match="unknown backend"):
        KernelSpec(backend="toy")


def test_a_search_covers_every_backend_that_declares_the_arch_and_can_compile_here(monkeypatch):
    from cudal2.codegen import get_backend
    from cudal2.codegen.registry import default_backends

    usable = {name: get_backend(name).usable()[0] for name in ("triton", "cute_dsl", "cuda_cpp")}
    want_hopper = tuple(b for b in ("triton", "cute_dsl") if usable[b])
    assert default_backends("sm_90a") == (want_hopper or ("triton",))  # cuda_cpp declares sm_80 only
    assert default_backends("sm_80") == (tuple(b for b in ("triton", "cuda_cpp") if usable[b]) or ("triton",))
    # a backend that cannot compile here is left out, with the reason it gives
    monkeypatch.setattr(type(get_backend("cute_dsl")), "usable", lambda self: (False, "no DSL here"))
    assert "cute_dsl" not in default_backends("sm_90a")


# ---- the backend docs/backends.md walks through, installed as pip would ---------------------------
DOC = Path(__file__).resolve().parent.parent / "docs" / "backends.md"


def documented_files() -> dict[str, str]:
    """The files docs/backends.md shows, by path: each fenced block under a "File `path`:" line."""
    found = re.findall(r"^File `([^`]+)`:\n\n```\w*\n(.*?)^```", DOC.read_text(), flags=re.M | re.S)
    return dict(found)


@pytest.fixture
def documented_toy(tmp_path, monkeypatch):
    """The package of docs/backends.md in site-packages form: its module folder, and the dist-info
    with the entry points its pyproject.toml declares."""
    import tomllib

    files = documented_files()
    for path, text in files.items():
        if path != "pyproject.toml":
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(text)
    project = tomllib.loads(files["pyproject.toml"])["project"]
    dist = tmp_path / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (dist / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
        for group, eps in project["entry-points"].items()))
    monkeypatch.syspath_prepend(str(tmp_path))
    codegen.refresh()
    yield
    for name in [m for m in sys.modules if m == "cudal2_toy" or m.startswith("cudal2_toy.")]:
        sys.modules.pop(name)
    codegen.refresh()


def test_the_documented_backend_renders_its_own_templates_and_runs(documented_toy):
    import torch

    assert set(documented_files()) == {"pyproject.toml", "cudal2_toy/__init__.py", "cudal2_toy/templates/matmul.py.j2"}
    toy = get_backend("toy")
    problem = GemmProblem(m=5, n=7, k=9)
    source = toy.render(problem, KernelSpec(backend="toy", block_m=32, block_n=64, block_k=32))
    assert source.text.startswith("# toy GEMM 5x7x9, tile 32x64x32\n")  # from the package, not cudal2's folder
    a, b = torch.randn(5, 9).half(), torch.randn(9, 7).half()
    assert torch.allclose(toy.compile(source)(a, b).float(), a.float() @ b.float(), atol=1e-2, rtol=1e-2)


def test_a_backend_with_a_template_folder_path(tmp_path, monkeypatch):
    from cudal2.codegen.base import Backend

    (tmp_path / "gemm.j2").write_text("# {{ spec.block_k }}\n")

    class FolderBackend(Backend):
        name = "folder_toy"
        templates = {"gemm": "gemm.j2"}
        templates_from = tmp_path

    codegen.register("folder_toy", FolderBackend)
    try:
        assert FolderBackend().render(GemmProblem(m=64, n=64, k=64),
                                      KernelSpec(backend="folder_toy", block_k=32)).text == "# 32\n"
    finally:
        codegen.refresh()


def test_a_backend_without_shape_generic_kernels_is_searched_with_its_own(documented_toy, tmp_path):
    """Installed, the toy joins the default backends; declaring only shape_specialization "auto", its
    trials are its own kernels while the built-ins' stay shape-generic, and the search runs through."""
    import cudal2
    from cudal2.codegen.registry import default_backends
    from cudal2.tuner.recorded import RecordedRunner

    assert "toy" in default_backends("sm_90a")
    runner = RecordedRunner()
    res = cudal2.search("512x512x512", runner=runner, store=tmp_path / "s.db", budget=40, seed=0,
                        arch="sm_90a", progress=False, confirm=None)
    assert "toy" in res.study.study_name
    toy_specs = [s for s in runner.calls if s.backend == "toy"]
    assert toy_specs and {s.shape_specialization for s in toy_specs} == {"auto"}
    assert {s.shape_specialization for s in runner.calls if s.backend == "triton"} == {"dynamic"}
    errors = [t.user_attrs.get("error", "") for t in res.study.get_trials(deepcopy=False)]
    assert not [e for e in errors if "shape_specialization" in e]
    # resumed, the proposers read the toy's measurements among the history
    again = cudal2.search("512x512x512", runner=runner, store=tmp_path / "s.db", budget=48, seed=1,
                          arch="sm_90a", progress=False, confirm=None)
    assert again.evaluations == 48

