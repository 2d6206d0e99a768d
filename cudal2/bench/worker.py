"""The worker: one process per GPU that compiles, checks and times kernels, so that a kernel
that crashes, hangs or corrupts the CUDA context takes down only this process.

The parent talks to it through a multiprocessing Pipe (spawn context: a fresh interpreter
that never inherited a CUDA context). Every request is a (kind, payload) tuple; the worker
answers with tuples:
    ("compiled", seconds)           after a kernel compiled (the parent's compile timeout ends)
    ("ok", payload)                 the request's result
    ("fail", status, reason)        a recorded failure (compile_error, incorrect, crash, ...)
and after a CUDA error that poisons the context (illegal address, launch failure) it sends
("fail", "crash", reason) and exits; the parent starts a new worker. If the process dies
without a word (segfault, abort) or does not answer within the timeout, the parent kills it,
records crash or timeout, and starts a new one.

The device is injectable: device="cpu" runs the same machinery on the CPU, which is how the
tests exercise crashes and hangs without a GPU.
"""

from __future__ import annotations

import importlib
import importlib.util
import multiprocessing as mp
import os
import secrets
import signal
import traceback
from dataclasses import dataclass, field
from typing import Any

from ..ir import GemmProblem, KernelSpec

# ------------------------------------------------------------------------------------------
# What the parent sends


@dataclass
class KernelRef:
    """A candidate as the worker receives it: a spec (with the Source the compile pool
    rendered, if any), or a prebuilt kernel: a picklable callable or "module:attr"."""

    name: str
    spec: KernelSpec | None = None
    source: Any = None  # codegen.base.Source
    kernel: Any = None

    @property
    def key(self) -> str:
        if self.spec is not None:
            return f"{self.name}:{self.spec.key()}:{getattr(self.source, 'digest', '')}"
        return f"{self.name}:{self.kernel if isinstance(self.kernel, str) else id(self.kernel)}"


@dataclass
class TimeRequest:
    problem: GemmProblem
    candidates: list[KernelRef]
    baselines: tuple[str, ...]
    modes: tuple[str, ...]
    timing: Any  # timing.TimingConfig
    policy: Any  # correctness.AccuracyPolicy
    seed: int = field(default_factory=lambda: secrets.randbits(31))


class WorkerDied(Exception):
    """The worker process died or was killed; .status is "crash" or "timeout"."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


# ------------------------------------------------------------------------------------------
# Parent side


class Worker:
    """A handle on one worker process bound to one device."""

    def __init__(self, device: str = "cuda:0", env: dict[str, str] | None = None):
        self.device = device
        self.env = env or {}
        self.proc = None
        self.conn = None
        self.restarts = 0
        self.start()

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)  # spawn copies the environment at start
        try:
            self.proc = ctx.Process(target=serve, args=(child, self.device), daemon=True,
                                    name=f"cudal2-worker-{self.device}")
            self.proc.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        child.close()
        self.conn = parent

    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        try:
            self.conn.close()
        except OSError:
            pass
        self.proc = None

    def restart(self) -> None:
        self.kill()
        self.restarts += 1
        self.start()

    def send(self, kind: str, payload: Any = None) -> None:
        if not self.alive():
            self.restart()
        try:
            self.conn.send((kind, payload))
        except (BrokenPipeError, ConnectionResetError):  # it died just now: once more on a new one
            self.restart()
            self.conn.send((kind, payload))

    def receive(self, timeout: float, what: str) -> tuple:
        """The next message, or WorkerDied after killing the worker (and starting a new one)."""
        try:
            ready = self.conn.poll(timeout)
        except (EOFError, OSError):
            ready = True
        if not ready:
            self.restart()
            raise WorkerDied("timeout", f"{what} did not finish within {timeout:g} s (worker killed and replaced)")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(5)
            code = self.proc.exitcode
            if code is not None and code < 0:
                try:
                    sig = signal.Signals(-code).name
                except ValueError:
                    sig = str(-code)
                how = f"killed by {sig}"
            else:
                how = f"exit code {code}"
            self.restart()
            raise WorkerDied("crash", f"worker died during {what} ({how}); worker replaced") from None

    def request(self, kind: str, payload: Any, timeout: float, what: str) -> tuple:
        self.send(kind, payload)
        msg = self.receive(timeout, what)
        if msg[0] == "fail" and msg[1] == "crash" and not self._answering():
            self.restart()
        return msg

    def _answering(self) -> bool:
        if self.proc is None:
            return False
        self.proc.join(0.5)  # a worker that reported a fatal CUDA error exits right after
        return self.proc.is_alive()

    def close(self) -> None:
        if self.alive():
            try:
                self.conn.send(("stop", None))
                self.proc.join(5)
            except (OSError, BrokenPipeError):
                pass
        self.kill()


# ------------------------------------------------------------------------------------------
# Worker side


class _State:
    def __init__(self, device: str):
        import torch

        self.device = torch.device(device)
        self.is_cuda = self.device.type == "cuda"
        if self.is_cuda:
            torch.cuda.set_device(self.device)
        self.kernels: dict[str, Any] = {}  # compiled in a check, reused by the timing job
        self.max_kernels = 64
        self.baseline_plans: dict = {}  # cuBLASLt plans of the current problem (baselines.prepare)

    def sync(self) -> None:
        if self.is_cuda:
            import torch

            torch.cuda.synchronize()  # the whole device, every stream

    def healthy(self) -> bool:
        """False once the CUDA context is poisoned (a sticky error such as an illegal address)."""
        if not self.is_cuda:
            return True
        import torch

        try:
            torch.cuda.synchronize()
            return torch.ones(1, device=self.device).add_(1).item() == 2.0
        except Exception:  # noqa: BLE001
            return False

    def release(self) -> None:
        """Give the memory of the last request's operands, outputs and graphs back to the device."""
        if self.is_cuda:
            import gc

            import torch

            gc.collect()
            torch.cuda.empty_cache()

    def kernel(self, ref: KernelRef, problem: GemmProblem):
        if ref.key in self.kernels:
            return self.kernels[ref.key]
        if ref.kernel is not None:
            k = ref.kernel
            if isinstance(k, str):
                module, _, attr = k.partition(":")
                k = importlib.import_module(module)
                for part in attr.split("."):
                    k = getattr(k, part)
        else:
            from ..codegen import get_backend

            backend = get_backend(ref.spec.backend)
            source = ref.source if ref.source is not None else backend.render(problem, ref.spec)
            k = backend.compile(source)
        self.kernels[ref.key] = k
        while len(self.kernels) > self.max_kernels:  # kernels may own workspace on the device
            self.kernels.pop(next(iter(self.kernels)))
        return k


def _status_of(e: BaseException) -> str:
    """Exceptions a first launch raises when the JIT compile fails are compile errors."""
    name = type(e).__name__
    if any(s in name for s in ("Compilation", "OutOfResources", "CompileError", "PTXAS")):
        return "compile_error"
    return "crash"


def _describe(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text if len(text) < 2000 else text[:2000] + " ..."


def serve(conn, device: str) -> None:
    """The worker's loop (runs in the child process)."""
    try:
        state = _State(device)
    except Exception as e:  # noqa: BLE001
        conn.send(("fail", "crash", f"worker could not start on {device}: {_describe(e)}"))
        return
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            return
        if kind == "stop":
            return
        try:
            handler = {"check": _check, "time": _time, "env": _env, "env_end": _env_end, "memory": _memory}[kind]
            handler(state, conn, payload)
            state.release()
        except Exception as e:  # noqa: BLE001 - report it; the parent decides
            fatal = not state.healthy()
            detail = _describe(e)
            if os.environ.get("CUDAL2_DEBUG"):
                detail += "\n" + traceback.format_exc()
            conn.send(("fail", "crash" if fatal else _status_of(e), detail))
            if fatal:
                os._exit(3)  # the CUDA context is gone: the parent starts a fresh worker


def _env(state: _State, conn, payload) -> None:
    from . import environment

    conn.send(("ok", environment.capture(str(state.device))))


def _env_end(state: _State, conn, env) -> None:
    from . import environment

    conn.send(("ok", environment.finish(env, str(state.device))))


def _memory(state: _State, conn, problem: GemmProblem | None) -> None:
    """The device's free and total bytes as this worker can use them (None on the CPU), once
    what it keeps between requests for other problems (cuBLASLt plans holding their operands)
    and compiled kernels (holding workspaces) are let go."""
    from . import memory

    state.kernels.clear()
    keep = problem.key() if problem is not None else None
    for key in [k for k in state.baseline_plans if k[0] != keep]:
        del state.baseline_plans[key]
    state.release()
    mem = memory.device_memory(state.device)
    if mem is None:
        conn.send(("ok", None))
        return
    import torch

    conn.send(("ok", memory.DeviceMemory(free=mem[0], total=mem[1], name=torch.cuda.get_device_name(state.device))))


def _check(state: _State, conn, payload) -> None:
    """Compile one candidate, then run the correctness checks before any timing."""
    import time

    from ..ir.footprint import workspace_bytes
    from .correctness import CheckFailure, check_kernel

    ref, problem, policy = payload["ref"], payload["problem"], payload["policy"]
    workspace = workspace_bytes(problem, ref.spec) if ref.spec is not None else 0
    t0 = time.perf_counter()
    try:
        kernel = state.kernel(ref, problem)
    except Exception as e:  # noqa: BLE001
        conn.send(("fail", "compile_error", _describe(e)))
        return
    compile_s = time.perf_counter() - t0
    conn.send(("compiled", compile_s))
    try:
        corr = check_kernel(kernel, problem, state.device, policy, state.sync, reserved=workspace)
    except CheckFailure as e:
        if not state.healthy():
            conn.send(("fail", "crash", f"CUDA context lost after a check: {e}"))
            os._exit(3)
        conn.send(("fail", "incorrect", str(e)))
        return
    conn.send(("ok", {"correctness": corr, "compile_s": compile_s}))


def _time(state: _State, conn, req: TimeRequest) -> None:
    """Time candidates and baselines interleaved, then check the outputs of the timed path
    again on new inputs, and reject physically impossible times. Buffers are laid out to the
    free memory (memory.plan_timing): one output per contender and input set where it fits,
    shared outputs and fewer sets where it does not."""
    import torch

    from ..ir.footprint import workspace_bytes
    from . import baselines as bl
    from . import memory
    from .correctness import CheckFailure, count_nonfinite, expected_for, rel_error, verify_output
    from .inputs import GuardedOutput, make_operands, torch_dtype
    from .plausibility import implausibility, min_bytes
    from .results import Correctness
    from .timing import measure

    problem, dev = req.problem, state.device
    if state.is_cuda:
        props = torch.cuda.get_device_properties(dev)
        l2, gpu = getattr(props, "L2_cache_size", 50 << 20), props.name
    else:
        l2, gpu = 1 << 20, "cpu"
    # the candidates' workspaces: each kernel allocates its own on its first call and keeps it
    workspaces = sum(workspace_bytes(problem, r.spec) for r in req.candidates if r.spec is not None)
    spare = memory.spare_bytes(dev, workspaces)
    # cuBLASLt's results take room only where nvmath is there to run it
    has_nvmath = importlib.util.find_spec("nvmath") is not None
    sized = tuple(b for b in req.baselines if has_nvmath or not b.startswith("cublaslt"))
    plan = memory.plan_timing(problem, l2, spare, len(req.candidates), sized)
    n_sets = plan.n_sets
    sets = [make_operands(problem, req.seed + 7919 * i, dev) for i in range(n_sets)]
    per_set = min_bytes(problem)
    shared = ([GuardedOutput(problem, dev, seed=req.seed + i) for i in range(n_sets)]
              if plan.shared_outputs else None)

    failures: dict[str, tuple[str, str]] = {}
    outs: dict[str, list[GuardedOutput]] = {}
    contenders: dict[str, Any] = {}
    for ref in req.candidates:
        k = state.kernel(ref, problem)
        o = shared or [GuardedOutput(problem, dev, seed=req.seed + i) for i in range(n_sets)]
        for i, g in enumerate(o):
            g.poison(sets[i].c_in)
        outs[ref.name] = o
        contenders[ref.name] = (lambda i, k=k, o=o: k(sets[i].a, sets[i].b, o[i].c, sets[i].bias))
    prepared: dict[str, bl.PreparedBaseline] = {}
    for name in req.baselines:
        if name in plan.dropped:
            prepared[name] = bl.PreparedBaseline(name, None, detail=f"not run: {plan.note}")
            continue
        b_outs = []  # cuBLASLt (nvmath) allocates its own results
        if name == "torch":
            b_outs = [g.c for g in shared] if shared else [
                torch.empty(problem.m, problem.n, dtype=torch_dtype(problem.c_dtype), device=dev)
                for _ in range(n_sets)]
        prepared[name] = p = bl.prepare(name, problem, sets, b_outs, state.baseline_plans)
        if p.available:
            contenders[f"baseline:{name}"] = p.call

    timings: dict[str, dict[str, Any]] = {n: {} for n in contenders}
    notes: dict[str, str] = {n: plan.note for n in outs if plan.note}
    post_err: dict[str, float] = {}
    reseed = req.seed + 104729
    for mode in req.modes:
        live = {n: c for n, c in contenders.items() if n not in failures}
        measured = measure(live, n_sets, mode, req.timing, dev if state.is_cuda else None)
        state.sync()
        # Check the timed path again on new inputs in the same storage: a cached or stale
        # result, or work the timed path never did, shows up here. The references are taken
        # first, one per set (on the host where the device cannot hold them); then each
        # contender in turn reruns its timed path into its freshly poisoned outputs and is
        # checked at once (so contenders may share outputs).
        for s in sets:
            reseed += 1
            s.refill(reseed)
        expected = []
        for s in sets:
            expected.append(expected_for(problem, s, req.policy, memory.spare_bytes(dev, workspaces)))
        for name, m in measured.items():
            if m.timing is None:
                failures.setdefault(name, ("crash", m.error))
                continue
            if m.error and name in outs:
                # Kernel time is graph replay; a call that cannot be captured (it launches on
                # another stream, synchronizes or allocates) cannot be timed honestly.
                failures[name] = ("incorrect", f"could not be captured in a CUDA graph, so its kernel time "
                                               f"cannot be measured: {m.error}")
                continue
            timings[name][mode] = m.timing
            if m.error:
                notes[name] = f"{notes[name]}; {m.error}" if name in notes else m.error
            if name in outs:
                for i, g in enumerate(outs[name]):
                    g.poison(sets[i].c_in)
                state.sync()
                if m.replay is not None:
                    m.replay()
                else:
                    for i in range(n_sets):
                        contenders[name](i)
                state.sync()
            elif name.startswith("baseline:"):
                p = prepared[name.split(":", 1)[1]]
                for i in range(n_sets):
                    o = p.output(i) if name == "baseline:torch" else None
                    if o is not None:
                        o.fill_(float("nan"))
                    p.call(i)
                state.sync()
            for i, exp in enumerate(expected):
                try:
                    if name in outs:
                        err = verify_output(problem, outs[name][i], exp)
                    else:
                        out = prepared[name.split(":", 1)[1]].output(i)
                        if out is None:
                            raise CheckFailure("no output")
                        if count_nonfinite(out):
                            raise CheckFailure("non-finite output (unwritten elements keep the NaN fill)")
                        err = rel_error(out, exp.ref)
                    post_err[name] = max(post_err.get(name, 0.0), err)
                except CheckFailure as e:
                    failures[name] = ("incorrect", f"timed run ({mode}), input set {i}: {e}")
                    break
        expected = []
        data_from_dram = mode == "server" or n_sets * per_set >= l2
        if state.is_cuda:
            for name in measured:
                t = timings[name].get(mode)
                if t is None or name in failures:
                    continue
                why = implausibility(problem, min(t.kernel_ms, t.call_ms), gpu, data_from_dram)
                if why:
                    failures[name] = ("incorrect", f"{why} ({mode}: kernel {t.kernel_ms * 1e3:.3f} us, "
                                                   f"call {t.call_ms * 1e3:.3f} us)")
    base_info = {}
    for name, p in prepared.items():
        key = f"baseline:{name}"
        corr = None
        if key in post_err:
            corr = Correctness(rel_error=post_err[key], bound=float("nan"), seeds=n_sets, checks=("finite", "rel-frobenius"))
        detail = p.detail + (f"; {notes[key]}" if key in notes else "")
        if key in failures:
            detail += f"; {failures[key][1]}"
        base_info[name] = {"available": p.available and key not in failures, "timing": timings.get(key, {}),
                           "detail": detail, "correctness": corr}
    conn.send(("ok", {"timings": {n: t for n, t in timings.items() if not n.startswith("baseline:")},
                      "failures": {n: f for n, f in failures.items() if not n.startswith("baseline:")},
                      "notes": {n: v for n, v in notes.items() if not n.startswith("baseline:")},
                      "post_error": {n: v for n, v in post_err.items() if not n.startswith("baseline:")},
                      "baselines": base_info, "n_sets": n_sets}))
    state.kernels.clear()  # timed: done with them (and with any workspace they hold)
