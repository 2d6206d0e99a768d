"""Backends plug in through the `cudal2.backends` entry-point group; nothing in cudal2 changes."""

import sys
import textwrap

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
