"""What the evaluator returns: plain dataclasses that pickle across processes and turn into
JSON for the store. The search layer consumes these and nothing else of bench/."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, get_args

from ..ir import GemmProblem, KernelSpec

Status = Literal[
    "ok",  # correct, and timed
    "unsupported",  # the backend refused the problem/spec (supports() said no)
    "compile_error",  # rendering or compilation failed, or compile timed out
    "incorrect",  # ran, but failed a correctness check (reason says which)
    "crash",  # the worker died (illegal address, segfault, abort)
    "timeout",  # the kernel hung past the run timeout
]

Mode = Literal["layer", "chain", "mlp_chain", "offline", "server", "sustained"]
MODES: tuple[str, ...] = get_args(Mode)  # the one list of timing modes (docs/evaluation.md, Timing)
# The one objective: what the search ranks, the confirmation rounds, the tuned table and the op's
# serving rule, sweeps, the dataset's label and the cost model's target. "chain" times each call
# after the work a model's layer does before its GEMM and between two GEMMs of its input, as a whole
# replay against the same work without it (timing.py); the others stay available.
DEFAULT_MODE: Mode = "chain"


@dataclass(frozen=True)
class Timing:
    """Milliseconds per GEMM. kernel_ms: CUDA-graph replay (device time, what speedups use);
    call_ms: the Python call path timed with events. spread: (max - min) / median of groups."""

    kernel_ms: float
    call_ms: float
    groups: int
    spread: float = 0.0
    # how kernel_ms was taken: "cuda-graph" (replay of a captured graph of calls), "launches"
    # (events around many back-to-back calls, when capture failed), "cpu-wallclock" (CPU tests)
    method: str = "cuda-graph"


@dataclass(frozen=True)
class Correctness:
    rel_error: float  # worst relative Frobenius error over all seeds and the timed-run check
    bound: float  # the bound it had to stay under
    seeds: int
    checks: tuple[str, ...] = ()  # names of the checks that ran (poison, guard, nan, ...)


@dataclass(frozen=True)
class CandidateResult:
    spec: KernelSpec
    status: Status
    reason: str = ""
    correctness: Correctness | None = None
    timing: dict[str, Timing] = field(default_factory=dict)  # mode -> Timing
    compile_s: float = 0.0
    source_digest: str = ""
    name: str = ""  # the caller's name for a prebuilt kernel, or a short label of the spec
    detail: str = ""  # notes that are not failures (e.g. how kernel time was taken)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def kernel_ms(self, mode: Mode = DEFAULT_MODE) -> float | None:
        t = self.timing.get(mode)
        return t.kernel_ms if t else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spec"] = self.spec.to_dict()
        return d


@dataclass(frozen=True)
class BaselineResult:
    name: str  # "torch", "cublaslt_heuristic", "cublaslt_autotune", ...
    timing: dict[str, Timing]
    correctness: Correctness | None = None
    detail: str = ""  # e.g. which cuBLASLt algorithm won, or why the baseline is unavailable
    available: bool = True

    def kernel_ms(self, mode: Mode = DEFAULT_MODE) -> float | None:
        t = self.timing.get(mode)
        return t.kernel_ms if t else None


# The GPU name the recorded runner (cudal2.tuner.recorded) gives its synthetic numbers: a model's, not
# a GPU's. Every place that shows or uses stored timings tells them apart by it.
RECORDED_GPU = "recorded"


def is_synthetic(gpu_name: str | None) -> bool:
    """Whether timings of this GPU name are the recorded runner's synthetic numbers."""
    return gpu_name == RECORDED_GPU


@dataclass(frozen=True)
class Environment:
    gpu_name: str
    sm_count: int
    driver: str
    cuda: str
    torch: str
    triton: str
    cudal2: str
    clocks_start: dict[str, float] = field(default_factory=dict)  # MHz: sm, mem
    clocks_end: dict[str, float] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)  # nvmath, cutlass-dsl, ... versions
    # The physical GPU ("GPU-8c3f..."): one model's cards differ a little, and a sweep over several
    # GPUs says which one timed each pair. Empty where none was (a CPU run, the recorded runner).
    gpu_uuid: str = ""


@dataclass(frozen=True)
class EvalReport:
    problem: GemmProblem
    candidates: list[CandidateResult]
    baselines: dict[str, BaselineResult]
    environment: Environment | None

    def speedup(self, candidate: CandidateResult, baseline: str, mode: Mode = DEFAULT_MODE) -> float | None:
        """baseline kernel time / candidate kernel time (>1 means the candidate is faster)."""
        b = self.baselines.get(baseline)
        c = candidate.kernel_ms(mode)
        if not b or not b.available or c is None or b.kernel_ms(mode) is None:
            return None
        return b.kernel_ms(mode) / c


class Runner(Protocol):
    """What the search needs from an evaluator. The GPU evaluator implements it; tests
    implement it with a recorded table of measurements."""

    def evaluate(self, problem: GemmProblem, specs: list[KernelSpec],
                 modes: tuple[Mode, ...] = (DEFAULT_MODE,)) -> list[CandidateResult]: ...
    # A runner for `cudal2 sweep` also takes with_baselines=False: these specs without the
    # baselines, which an earlier call on the same problem timed (baselines() returns those).

    def baselines(self, problem: GemmProblem, modes: tuple[Mode, ...] = (DEFAULT_MODE,)) -> dict[str, BaselineResult]: ...

    def environment(self) -> Environment | None: ...

    # Optional: prefetch(problem, specs) starts compiling specs for a later evaluate() (the search's
    # look-ahead); prefetch_concurrent = True says it may be called from another thread while
    # evaluate() runs, and the search then asks for its next batches while this one is measured.


def relative_time(kernel_ms: float, baselines: dict, reference: str | None, mode: str) -> float:
    """kernel_ms over the reference baseline's time among `baselines` (lower is better); the raw
    time when that baseline is missing, so that a search without baselines still ranks."""
    ref = baselines.get(reference) if reference else None
    ref_ms = ref.kernel_ms(mode) if ref is not None and ref.available else None
    return kernel_ms / ref_ms if ref_ms else kernel_ms
