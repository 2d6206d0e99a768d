"""The worker's timing job: one TimeRequest timed and checked again inside the GPU worker process.

Candidates and baselines are timed interleaved (timing.measure), then each timed path runs again
on new inputs into poisoned outputs and is checked, and times under the GPU's speed of light are
rejected (plausibility.py). The job keeps what each mode found, and its reply goes back to the
evaluator over the worker's pipe.
"""

from __future__ import annotations

import importlib.util
import time
from typing import TYPE_CHECKING, Any
from . import baselines as bl
from . import memory
from ..ir.footprint import workspace_bytes
from .correctness import CheckFailure, count_nonfinite, rel_error, verify_output
from .inputs import GuardedOutput
from .inputs import make_operands
from .inputs import torch_dtype
from .plausibility import implausibility
from .plausibility import min_bytes
from .results import Correctness
from .timing import LayerPrelude, measure, neighbours_for

if TYPE_CHECKING:
    from .requests import TimeRequest


class TimingJob:
    """One TimeRequest: its input sets and outputs, its contenders (candidates, then baselines
    named "baseline:<name>"), and what timing each mode found: times, failures, notes, errors."""

    def __init__(self, state, req: "TimeRequest"):
        import torch

        self.state, self.req = state, req
        problem, dev = req.problem, state.device
        self.problem, self.dev = problem, dev
        if state.is_cuda:
            props = torch.cuda.get_device_properties(dev)
            self.l2, self.gpu = getattr(props, "L2_cache_size", 50 << 20), props.name
        else:
            self.l2, self.gpu = 1 << 20, "cpu"
        # the candidates' workspaces: each kernel allocates its own on its first call and keeps it
        self.workspaces = sum(workspace_bytes(problem, r.spec) for r in req.candidates if r.spec is not None)
        spare = memory.spare_bytes(dev, self.workspaces)
        # cuBLASLt's results take room only where nvmath is there to run it
        has_nvmath = importlib.util.find_spec("nvmath") is not None
        has_quack = importlib.util.find_spec("quack") is not None
        sized = tuple(b for b in req.baselines if (has_nvmath or not b.startswith("cublaslt"))
                      and (has_quack or b not in bl.QUACK))
        self.plan = plan = memory.plan_timing(problem, self.l2, spare, len(req.candidates), sized)
        self.n_sets = plan.n_sets
        self.sets = [make_operands(problem, req.seed + 7919 * i, dev) for i in range(self.n_sets)]
        self.per_set = min_bytes(problem)
        self.shared = ([GuardedOutput(problem, dev, seed=req.seed + i) for i in range(self.n_sets)]
                       if plan.shared_outputs else None)
        self.failures: dict[str, tuple[str, str]] = {}
        self.outs: dict[str, list[GuardedOutput]] = {}
        self.contenders: dict[str, Any] = {}
        self.prepared: dict[str, bl.PreparedBaseline] = {}
        self._add_candidates()
        self.setup_s: dict[str, float] = {}  # baseline -> seconds preparing it (cuBLASLt plans, autotune)
        self._add_baselines()
        self.timings: dict[str, dict[str, Any]] = {n: {} for n in self.contenders}
        self.notes: dict[str, str] = {n: plan.note for n in self.outs if plan.note}
        self.post_err: dict[str, float] = {}
        self.reseed = req.seed + 104729

    def _add_candidates(self) -> None:
        sets = self.sets
        for ref in self.req.candidates:
            k = self.state.kernel(ref, self.problem)
            o = self.shared or [GuardedOutput(self.problem, self.dev, seed=self.req.seed + i)
                                for i in range(self.n_sets)]
            for i, g in enumerate(o):
                g.poison(sets[i].c_in)
            self.outs[ref.name] = o
            self.contenders[ref.name] = (lambda i, k=k, o=o: k(sets[i].a, sets[i].b, o[i].c, sets[i].bias))

    def _add_baselines(self) -> None:
        import torch

        problem = self.problem
        for name in self.req.baselines:
            if name in self.plan.dropped:
                self.prepared[name] = bl.PreparedBaseline(name, None, detail=f"not run: {self.plan.note}")
                continue
            b_outs = []  # cuBLASLt (nvmath) allocates its own results
            if name in bl.WRITE_GIVEN_OUTPUT:
                b_outs = [g.c for g in self.shared] if self.shared else [
                    torch.empty(problem.m, problem.n, dtype=torch_dtype(problem.c_dtype), device=self.dev)
                    for _ in range(self.n_sets)]
            start = time.perf_counter()
            self.prepared[name] = p = bl.prepare(name, problem, self.sets, b_outs, self.state.baseline_plans)
            self.setup_s[name] = time.perf_counter() - start
            if p.available:
                self.contenders[f"baseline:{name}"] = p.call

    def time(self, mode: str) -> None:
        """Time every live contender in this mode; then check each timed path again on new inputs
        in the same storage (a cached or stale result, or work the timed path never did, shows up
        there), and reject impossible times."""
        from .correctness import expected_for

        state, req = self.state, self.req
        live = {n: c for n, c in self.contenders.items() if n not in self.failures}
        # The layer prelude's buffers stay alive until the rechecks below have replayed the graphs
        # that read them (a graph holds their addresses, not the tensors).
        modelled = mode in ("layer", "chain", "mlp_chain") and state.is_cuda
        a_operands = [s.a for s in self.sets]
        prelude = LayerPrelude(self.dev, self.l2, a_operands) if modelled else None
        neighbours = neighbours_for(mode, self.dev, a_operands) if modelled else None
        measured = measure(live, self.n_sets, mode, req.timing, self.dev if state.is_cuda else None, prelude,
                           neighbours)
        state.sync()
        # The references are taken first, one per set (on the host where the device cannot hold
        # them); then each contender in turn reruns its timed path into its freshly poisoned outputs
        # and is checked at once (so contenders may share outputs).
        for s in self.sets:
            self.reseed += 1
            s.refill(self.reseed)
        expected = [expected_for(self.problem, s, req.policy, memory.spare_bytes(self.dev, self.workspaces))
                    for s in self.sets]
        for name, m in measured.items():
            self._recheck(name, m, mode, expected)
        if state.is_cuda:
            self._plausible(measured, mode)
        del measured, prelude, neighbours  # the graphs first, then the buffers they read

    def _recheck(self, name: str, m, mode: str, expected: list) -> None:
        if m.timing is None:
            # a chain-mode contender whose own graph could not be captured cannot be timed honestly (as in
            # layer mode); any other failure to time it (the floor's capture) is not the contender's doing
            own = m.error.startswith("graph capture failed")
            self.failures.setdefault(name, ("incorrect" if own else "crash", m.error))
            return
        if m.error and name in self.outs:
            # Kernel time is graph replay; a call that cannot be captured (it launches on
            # another stream, synchronizes or allocates) cannot be timed honestly.
            self.failures[name] = ("incorrect", f"could not be captured in a CUDA graph, so its kernel time "
                                                f"cannot be measured: {m.error}")
            return
        self.timings[name][mode] = m.timing
        if m.error:
            self.notes[name] = f"{self.notes[name]}; {m.error}" if name in self.notes else m.error
        if name in self.outs:
            for i, g in enumerate(self.outs[name]):
                g.poison(self.sets[i].c_in)
            self.state.sync()
            if m.replay is not None:
                m.replay()
            else:
                for i in range(self.n_sets):
                    self.contenders[name](i)
            self.state.sync()
        elif name.startswith("baseline:"):
            p = self.prepared[name.split(":", 1)[1]]
            for i in range(self.n_sets):
                o = p.output(i) if name.split(":", 1)[1] in bl.WRITE_GIVEN_OUTPUT else None
                if o is not None:
                    o.fill_(float("nan"))
                p.call(i)
            self.state.sync()
        for i, exp in enumerate(expected):
            try:
                if name in self.outs:
                    err = verify_output(self.problem, self.outs[name][i], exp)
                else:
                    out = self.prepared[name.split(":", 1)[1]].output(i)
                    if out is None:
                        raise CheckFailure("no output")
                    if count_nonfinite(out):
                        raise CheckFailure("non-finite output (unwritten elements keep the NaN fill)")
                    err = rel_error(out, exp.ref)
                self.post_err[name] = max(self.post_err.get(name, 0.0), err)
            except CheckFailure as e:
                self.failures[name] = ("incorrect", f"timed run ({mode}), input set {i}: {e}")
                break

    def _plausible(self, measured: dict, mode: str) -> None:
        data_from_dram = mode == "server" or self.n_sets * self.per_set >= self.l2
        for name in measured:
            t = self.timings[name].get(mode)
            if t is None or name in self.failures:
                continue
            why = implausibility(self.problem, min(t.kernel_ms, t.call_ms), self.gpu, data_from_dram)
            if why:
                self.failures[name] = ("incorrect", f"{why} ({mode}: kernel {t.kernel_ms * 1e3:.3f} us, "
                                                    f"call {t.call_ms * 1e3:.3f} us)")

    def reply(self) -> dict:
        base_info = {}
        for name, p in self.prepared.items():
            key = f"baseline:{name}"
            corr = None
            if key in self.post_err:
                corr = Correctness(rel_error=self.post_err[key], bound=float("nan"), seeds=self.n_sets,
                                   checks=("finite", "rel-frobenius"))
            detail = p.detail + (f"; {self.notes[key]}" if key in self.notes else "")
            if key in self.failures:
                detail += f"; {self.failures[key][1]}"
            base_info[name] = {"available": p.available and key not in self.failures,
                               "timing": self.timings.get(key, {}), "detail": detail, "correctness": corr}

        def own(d: dict) -> dict:
            return {n: v for n, v in d.items() if not n.startswith("baseline:")}

        return {"timings": own(self.timings), "failures": own(self.failures), "notes": own(self.notes),
                "post_error": own(self.post_err), "baselines": base_info, "n_sets": self.n_sets,
                "baseline_setup_s": sum(self.setup_s.values()),
                "peer_setup_s": sum(t for n, t in self.setup_s.items() if n in bl.QUACK)}
