"""The backend protocol: a backend is a small subclass that sets a few attributes and
implements render() and compile(). Everything common (template lookup, support checks,
the disk cache of rendered sources) lives here, once."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from ..ir import Capabilities, GemmProblem, KernelSpec, SpecError, Violation, check_compatible
from . import templates
from .templates import TemplateSource


@dataclass(frozen=True)
class Source:
    """Rendered code, kept for inspection and for the store."""

    backend: str
    problem: GemmProblem
    spec: KernelSpec
    text: str
    language: str  # "python" (Triton, CuTe DSL) or "cuda"
    entry: str  # name of the launcher the compiled module exposes
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


class Kernel(Protocol):
    """A compiled GEMM: kernel(a, b, c=None, bias=None) -> c, for torch tensors laid out as
    the problem says. If c is None a new output is allocated; with beta != 0, c is read."""

    source: Source

    def __call__(self, a, b, c=None, bias=None): ...


@dataclass(frozen=True)
class Support:
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


class Backend:
    name: ClassVar[str]
    version: ClassVar[str] = "0"
    language: ClassVar[str] = "python"
    capabilities: ClassVar[Capabilities] = Capabilities()
    # template file per kernel family: under cudal2's templates/<name>/, or under templates_from
    templates: ClassVar[dict[str, str]] = {}
    # where a backend that ships its own templates keeps them: a folder (a Path, e.g.
    # Path(__file__).parent / "templates"), or a package name whose templates/ folder holds them
    # (read as package resources); None: cudal2's own templates/<name>/
    templates_from: ClassVar[TemplateSource] = None

    # --- what subclasses override -------------------------------------------------------
    def family(self, problem: GemmProblem, spec: KernelSpec) -> str:
        """Which template renders this spec."""
        return next(iter(self.templates))

    def context(self, problem: GemmProblem, spec: KernelSpec) -> dict[str, Any]:
        """Variables handed to the template beyond problem and spec (it may also replace those two,
        as the cute_dsl backend does with the transposed problem of a swap_ab spec)."""
        return {}

    def compile(self, source: Source) -> Kernel:
        raise NotImplementedError

    def precompile(self, source: Source) -> None:
        """Do the expensive compilation ahead, in a CPU worker process, so that compile() in
        the timing process finds it in the toolchain's disk cache. Default: nothing."""

    def record_device_facts(self, device: str) -> None:
        """Record what this backend's compiles read about the GPU and only a process holding a CUDA
        context can learn, where the compile processes (which hold none) read it. The GPU worker
        calls this before it answers its first request for the environment, which a search makes
        before it hands any compile to the pool. Default: nothing."""

    def toolchain_version(self) -> str:
        """Version of the compiler stack; part of the compiled-kernel cache key."""
        return "none"

    # the pip requirements its compiles need: what a dry run tells a machine that lacks them to install
    requirements: ClassVar[tuple[str, ...]] = ()

    def usable(self) -> tuple[bool, str]:
        """Whether this machine has what the backend needs to compile its kernels, and why not."""
        return True, ""

    @classmethod
    def install_line(cls) -> str:
        """The command that installs the backend's requirements ("" where it names none)."""
        return "pip install " + " ".join(f'"{r}"' for r in cls.requirements) if cls.requirements else ""

    def compiled_as(self) -> str:
        """What compile() and precompile() amount to on this machine, in a few words: a dry run's
        table names it ("compiled" unless the backend does less here, as Triton's CPU interpreter
        only imports the module)."""
        return "compiled"

    def shape_key(self, problem: GemmProblem, spec: KernelSpec) -> str:
        """What of the problem a compiled kernel depends on: the problem itself (its shape baked
        in), or, for a backend whose kernel takes the shape at run time, the problem's class."""
        return problem.key()

    def variant_key(self, problem: GemmProblem, spec: KernelSpec) -> str:
        """Which compiled variant of a shape-generic kernel a shape selects, where the toolchain
        compiles one per class of values (Triton: an extent of 1, or a multiple of 16). "" where one
        binary serves every shape of the class."""
        return ""

    def compile_unit(self, problem: GemmProblem, spec: KernelSpec) -> tuple[str, str, str] | None:
        """What one compile of spec serves: (spec, problem class, variant), one key for every shape
        that runs the same binary; None for a kernel compiled for this one shape (it serves no other)."""
        shape_key = self.shape_key(problem, spec)
        if shape_key == problem.key():
            return None
        return spec.key(), shape_key, self.variant_key(problem, spec)

    # --- shared behaviour -----------------------------------------------------------------
    def supports(self, problem: GemmProblem, spec: KernelSpec) -> Support:
        if spec.backend != self.name:
            return Support(False, f"spec is for backend {spec.backend!r}, not {self.name!r}")
        try:
            check_compatible(problem, spec)
        except SpecError as e:
            return Support(False, str(e))
        return Support(True)

    def render(self, problem: GemmProblem, spec: KernelSpec) -> Source:
        ok = self.supports(problem, spec)
        if not ok:
            raise SpecError(Violation("backend", spec.backend, ok.reason, "choose a spec this backend supports"),
                            what=f"{self.name} render")
        fam = self.family(problem, spec)
        variables = {"problem": problem, "spec": spec, **self.context(problem, spec)}
        text = self.render_template(self.templates[fam], **variables)
        return Source(backend=self.name, problem=problem, spec=spec, text=text,
                      language=self.language, entry="launch", meta={"family": fam})

    def render_template(self, name: str, **variables) -> str:
        """One of this backend's templates, by its file name (as in `templates`), rendered."""
        if self.templates_from is None:
            return templates.render(f"{self.name}/{name}", **variables)
        return templates.environment(self.templates_from).get_template(name).render(**variables)

    def cache_key(self, source: Source) -> str:
        parts = [source.backend, self.version, self.toolchain_version(), source.spec.key(),
                 self.shape_key(source.problem, source.spec), source.digest]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:20]
