"""The LLM proposer's prompt and reply schema.

The prompt is contrastive, as in CUDA-L1: the model sees the problem, the hardware, what
each backend can do, and the best and worst earlier candidates with their measured times
(and the failures with their reasons), and writes a performance analysis before it proposes
specs. The reply schema puts `analysis` before `specs`, so a model that generates in schema
order reasons first.
"""

from __future__ import annotations

import copy
import json
from typing import Sequence

from cudal2.bench.results import DEFAULT_MODE, CandidateResult
from cudal2.ir import ARCHS, DTYPE_BYTES, GemmProblem, KernelSpec
from . import space
from cudal2.codegen import get_backend

SCHEMA_NAME = "propose_kernel_specs"
# Fields shown for every candidate; the rest only where they differ from the IR default.
CORE_FIELDS = ("backend", "block_m", "block_n", "block_k", "num_warps", "stages")

SYSTEM = """\
You are an expert GPU performance engineer who tunes GEMM kernels (CUTLASS, Triton, CuTe).
You do not write code: you choose the parameters of a structured kernel description
(KernelSpec) that a code generator renders and an evaluator compiles, checks for
correctness against an fp32 reference, and times with CUDA events against cuBLAS.
Reason from the hardware numbers and the measurements you are given. Be concrete:
count tiles and waves, shared-memory bytes, K iterations. Every spec you propose must be
valid for the hardware limits and for the backend's supported values listed."""


def spec_schema(backends: Sequence[str], arch: str) -> dict:
    """KernelSpec's JSON Schema narrowed to what these backends support on arch."""
    schema = copy.deepcopy(KernelSpec.json_schema())
    props = schema["properties"]
    caps = [get_backend(b).capabilities for b in backends]
    for name, prop in props.items():
        prop.pop("title", None)
        if name == "backend":
            prop["enum"] = list(backends)
            prop["default"] = backends[0]
            continue
        if name == "arch":
            prop.update(enum=[arch], default=arch)
            continue
        domains = [space.domain(c, name, arch) for c in caps]
        if any(d is None for d in domains) or space.ir_domain(name) is None:
            continue
        values = [v for v in space.ir_domain(name) if any(v in d for d in domains)]
        if values == list(space.ir_domain(name)) and "enum" not in prop:
            continue  # a plain range the backends leave whole: keep minimum/maximum
        for key in ("anyOf", "minimum", "maximum", "enum"):
            prop.pop(key, None)
        prop["enum"] = values
        if prop.get("default") not in values:
            prop.pop("default", None)
    schema.pop("title", None)
    return schema


def reply_schema(backends: Sequence[str], arch: str, n: int) -> dict:
    return {
        "type": "object",
        "properties": {
            "analysis": {"type": "string",
                         "description": "performance analysis written before choosing the specs"},
            "specs": {"type": "array", "items": spec_schema(backends, arch), "minItems": 1, "maxItems": n,
                      "description": f"{n} diverse KernelSpecs, most promising first"},
        },
        "required": ["analysis", "specs"],
        "additionalProperties": False,
    }


def compact(spec: KernelSpec) -> str:
    """A spec as JSON: the core fields, then only those that differ from the defaults."""
    d = spec.to_dict()
    defaults = {name: f.default for name, f in KernelSpec.model_fields.items()}
    shown = {k: d[k] for k in CORE_FIELDS}
    shown.update({k: v for k, v in d.items() if k not in shown and k != "arch" and v != defaults[k]})
    return json.dumps(shown, separators=(",", ":"))


def _ms(r: CandidateResult) -> float | None:
    return r.kernel_ms(DEFAULT_MODE) if r.kernel_ms(DEFAULT_MODE) is not None else next(
        (t.kernel_ms for t in r.timing.values()), None)


def describe_problem(problem: GemmProblem) -> str:
    lead = problem.leading_dims()
    elt = DTYPE_BYTES[problem.dtype]
    aligned = {op: lead[op] * elt % 16 == 0 for op in ("a", "b")}
    e = problem.epilogue
    lines = [
        f"D = alpha * op(A) @ op(B) + beta * C (+ bias, activation): M={problem.m}, N={problem.n}, K={problem.k}",
        f"dtype {problem.dtype} in, {problem.c_dtype} out, {problem.accumulator} accumulation",
        f"layout {problem.layout}: A is {'row' if problem.a_row_major else 'column'}-major, "
        f"B is {'row' if problem.b_row_major else 'column'}-major",
        f"epilogue alpha={e.alpha:g}, beta={e.beta:g}, bias={e.bias}, activation={e.activation}",
        f"{problem.flops / 1e9:.3f} GFLOP; operands {(problem.m * problem.k + problem.k * problem.n) * elt / 2**20:.2f} MiB",
        f"leading dimensions A={lead['a']} ({'16-byte aligned' if aligned['a'] else 'NOT 16-byte aligned'}), "
        f"B={lead['b']} ({'16-byte aligned' if aligned['b'] else 'NOT 16-byte aligned'}); "
        f"load_path='tma' needs both aligned",
    ]
    return "\n".join(f"- {x}" for x in lines)


def describe_hardware(arch: str, gpu_name: str | None) -> str:
    hw = ARCHS[arch]
    lines = [
        f"GPU: {gpu_name or 'unknown (limits of the reference part of ' + arch + ')'}; arch {arch}",
        f"{hw.sm_count} SMs; L2 {hw.l2_bytes / 2**20:.0f} MiB",
        f"shared memory {hw.smem_per_block / 1024:.0f} KiB per block, {hw.smem_per_sm / 1024:.0f} KiB per SM",
        f"registers: {hw.regs_per_sm} per SM, at most {hw.regs_per_thread} per thread; "
        f"{hw.max_threads_per_block} threads per block",
        f"clusters up to {hw.max_cluster_size} block(s); TMA {'yes' if hw.has_tma else 'no'}; "
        f"wgmma {'yes' if hw.has_wgmma else 'no'}",
        "shared memory of a spec = (block_m + block_n) * (block_k + smem_padding) * stages * 2 bytes "
        "(+ block_m * block_n * 2 / epilogue_subtile when the epilogue is staged)",
    ]
    return "\n".join(f"- {x}" for x in lines)


def describe_backends(backends: Sequence[str], arch: str) -> str:
    """Each backend's Capabilities.as_table for arch, values in the IR's order."""
    out = []
    for b in backends:
        caps = get_backend(b).capabilities
        rows = []
        for name, per in caps.as_table([arch]).items():
            if arch not in per:
                continue
            values = per[arch]
            if not name.startswith("problem.") and space.ir_domain(name) is not None:
                values = list(space.domain(caps, name, arch))
            rows.append(f"  - {name}: {json.dumps(values)}")
        out.append(f"- backend {b!r} on {arch} supports only these values (other fields: any value the "
                   f"schema allows):\n" + ("\n".join(rows) if rows else "  - (no restrictions declared)"))
    return "\n".join(out)


def describe_history(problem: GemmProblem, history: Sequence[CandidateResult], n_best: int, n_worst: int,
                     n_failures: int, baselines: dict[str, float] | None = None) -> str:
    lines = []
    for name, ms in (baselines or {}).items():
        lines.append(f"- baseline {name}: {ms:.4f} ms ({problem.flops / (ms * 1e-3) / 1e12:.1f} TFLOP/s)")
    timed = sorted(((ms, r) for r in history if r.ok and (ms := _ms(r)) is not None), key=lambda x: x[0])
    failed = [r for r in history if not r.ok]
    if not history:
        lines.append("- nothing measured yet for this problem")
        return "\n".join(lines)
    lines.append(f"- {len(history)} candidate(s) measured: {len(timed)} correct and timed, {len(failed)} failed")

    def row(i: int, ms: float, r: CandidateResult) -> str:
        err = f", rel_error {r.correctness.rel_error:.1e}" if r.correctness else ""
        return (f"  {i}. {ms:.4f} ms ({problem.flops / (ms * 1e-3) / 1e12:.1f} TFLOP/s{err}): "
                f"{compact(r.spec)}")

    # contrast needs both ends: the slowest n_worst first, the fastest from what is left
    worst = timed[len(timed) - min(n_worst, len(timed) - 1):] if len(timed) > 1 else []
    best = timed[:min(n_best, len(timed) - len(worst))]
    if best:
        lines.append("Best so far (fastest first):")
        lines += [row(i + 1, ms, r) for i, (ms, r) in enumerate(best)]
    if worst:
        lines.append("Worst so far (slowest last):")
        lines += [row(len(timed) - len(worst) + i + 1, ms, r) for i, (ms, r) in enumerate(worst)]
    if failed:
        lines.append("Failures (status: reason):")
        for r in failed[-n_failures:]:
            reason = " ".join(r.reason.split())[:300]
            lines.append(f"  - {r.status}: {reason}: {compact(r.spec)}")
    return "\n".join(lines)


def describe_predictions(ranked: Sequence[tuple[KernelSpec, float]]) -> str:
    """A cost model's best specs for the problem with their predicted speedup over torch.matmul."""
    if not ranked:
        return "(the model has no candidate for this problem)"
    return "\n".join(f"{i}. {compact(spec)}: predicted {x:.2f}x torch.matmul" for i, (spec, x) in enumerate(ranked, 1))


def user_prompt(problem: GemmProblem, history: Sequence[CandidateResult], n: int, backends: Sequence[str],
                arch: str, *, gpu_name: str | None = None, n_best: int = 4, n_worst: int = 2, n_failures: int = 4,
                baselines: dict[str, float] | None = None, schema: dict | None = None,
                predictions: Sequence[tuple[KernelSpec, float]] | None = None,
                pending: Sequence[KernelSpec] = ()) -> str:
    """The request. With `schema` (no structured output available), the JSON Schema is
    spelled out and the model is asked for bare JSON. With `predictions`, a cost model's best
    specs and their predicted speedups come before the task."""
    parts = [
        "## Problem\n" + describe_problem(problem),
        "## Hardware\n" + describe_hardware(arch, gpu_name),
        "## Backends\n" + describe_backends(backends, arch),
        "## Measured so far (kernel time, median of CUDA-graph replays)\n"
        + describe_history(problem, history, n_best, n_worst, n_failures, baselines),
    ]
    if pending:
        parts.append("## Being measured now (no result yet; do not propose these again)\n"
                     + "\n".join(f"- {compact(s)}" for s in pending))
    if predictions is not None:
        parts.append("## A cost model's best specs (trained on measured speed on other shapes; predictions, not "
                     "measurements: where the measurements above disagree, trust them)\n"
                     + describe_predictions(predictions))
    parts += [
        "## Task\n"
        "First write `analysis`: what bounds this problem on this GPU (tensor-core throughput or memory "
        "bandwidth), how the tile grid quantizes into waves over the SMs, whether K is deep enough to "
        "need split-K, how deep the pipeline can be in the shared memory left, and - comparing the best "
        "with the worst candidates - what made the difference and what should change next.\n"
        f"Then give `specs`: {n} diverse KernelSpecs, most promising first, that you expect to beat the "
        "best so far. Do not repeat a measured spec. Omitted fields take their defaults.",
    ]
    if schema is not None:
        parts.append("## Reply format\nReply with one JSON object and nothing else (no prose, no code "
                     "fence), matching this JSON Schema:\n" + json.dumps(schema, separators=(",", ":")))
    return "\n\n".join(parts)


def repair_prompt(errors: list[str], n: int, plain_json: bool) -> str:
    body = "\n".join(f"- {e}" for e in errors)
    tail = " Reply with the JSON object only." if plain_json else ""
    return (f"Your reply could not be used:\n{body}\n"
            f"Send the complete reply again - `analysis` and up to {n} `specs` - with every problem "
            f"fixed as the messages say.{tail}")
