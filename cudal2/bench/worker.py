"""The worker: one process per GPU that compiles, checks and times kernels, so that a kernel
that crashes, hangs or corrupts the CUDA context takes down only this process.

The parent talks to it through a multiprocessing Pipe (spawn context: a fresh interpreter
that never inherited a CUDA context). Every request is a (kind, payload) tuple; the worker
answers with tuples:
    ("compiled", name, seconds)     check_many: a candidate compiled (the parent's compile timeout
                                    ends, its check timeout starts)
    ("checked", name, status, reason, correctness, compile seconds)
                                    check_many: one candidate's checks, as each finishes
    ("ok", payload)                 the request's result
    ("fail", status, reason)        the request failed (compile_error, crash, ...)
and after a CUDA error that poisons the context (illegal address, launch failure) it sends
("fail", "crash", reason) and exits; the parent starts a new worker. If the process dies
without a word (segfault, abort) or does not answer within the timeout, the parent kills it,
records crash or timeout, and starts a new one.

The device is injectable: device="cpu" runs the same machinery on the CPU, which is how the
tests exercise crashes and hangs without a GPU.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import multiprocessing as mp
import os
import signal
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from cudal2.settings import settings
from ..ir import GemmProblem
from .requests import CheckBatch, KernelRef, TimeRequest  # noqa: F401 - what the parent sends
from . import baselines as bl
from . import memory
from ..codegen import available_backends, get_backend
from ..ir.footprint import workspace_bytes
from .correctness import CheckFailure
from .correctness import SCRATCH_MIN, check_kernel, stream_order_many
from .inputs import GuardedOutput, guard_elements, make_operands
from .timing_job import TimingJob

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
        # What the worker started, in the group it leads (serve), goes with it: a worker that
        # hung or crashed never ran its own cleanup.
        with contextlib.suppress(AttributeError, OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
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
        self.collected_for: str | None = None  # the problem of the last full garbage collection

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

    def release(self, thorough: bool = False) -> None:
        """Give the memory of the last request's operands, outputs and graphs back to the device.
        What a request drops is freed by reference counting, or else is young: the young generations
        are collected after every request. A full collection walks every object torch, Triton and
        the DSL keep (0.13 s on an H100 host, a fifth of a sweep's worker time when it ran after
        every request), so it runs when asked (thorough), where the memory request moves to another
        problem and lets the last one's kernels and plans go."""
        if self.is_cuda:
            import gc

            import torch

            gc.collect() if thorough else gc.collect(1)
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
    """The worker's loop (runs in the child process). With $CUDAL2_PROFILE_WORKER=DIR it runs under
    cProfile and writes DIR/worker-<pid>.prof when it stops (to see where a sweep's time goes).

    The worker leads a process group of its own and ends that group when it stops. What it runs
    may start processes of its own (quack-kernels' autotuner starts a forkserver and a compile
    pool), and those would outlive it: orphans that keep memory and the caller's stdout, so a
    shell pipe reading a finished sweep's output never ends."""
    own_group = _lead_own_group()
    try:
        _serve_maybe_profiled(conn, device)
    finally:
        if own_group:
            _end_own_group()


def _lead_own_group() -> bool:
    try:
        os.setpgrp()
        return True
    except (AttributeError, OSError):  # not POSIX: the processes it starts are its own business
        return False


def _end_own_group() -> None:
    """SIGTERM to every other process of this worker's group (this one ignores it: it is exiting)."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.killpg(os.getpgrp(), signal.SIGTERM)
    except (AttributeError, OSError):
        pass


def _serve_maybe_profiled(conn, device: str) -> None:
    where = settings().profile_worker
    if not where:
        return _serve(conn, device)
    import cProfile

    prof = cProfile.Profile()
    try:
        prof.runcall(_serve, conn, device)
    finally:
        Path(where).mkdir(parents=True, exist_ok=True)
        prof.dump_stats(str(Path(where) / f"worker-{os.getpid()}.prof"))


def _serve(conn, device: str) -> None:
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
            handler = {"check_many": _check_many, "time": _time, "env": _env, "env_end": _env_end, "memory": _memory,
                       "plan_baselines": _plan_baselines}[kind]
            handler(state, conn, payload)
            state.release()
        except Exception as e:  # noqa: BLE001 - report it; the parent decides
            fatal = not state.healthy()
            detail = _describe(e)
            if settings().debug:
                detail += "\n" + traceback.format_exc()
            try:
                conn.send(("fail", "crash" if fatal else _status_of(e), detail))
            except OSError:  # the parent died (BrokenPipeError): nobody is left to answer
                os._exit(0)
            if fatal:
                os._exit(3)  # the CUDA context is gone: the parent starts a fresh worker


def _env(state: _State, conn, payload) -> None:
    from . import environment

    _record_device_facts(state)
    conn.send(("ok", environment.capture(str(state.device))))


def _record_device_facts(state: _State) -> None:
    """Each backend's record of what its compiles read about this GPU (Backend.record_device_facts),
    before the environment is answered: a search asks for it before it hands compiles to the pool."""
    if not state.is_cuda:
        return
    for name in available_backends():
        try:
            get_backend(name).record_device_facts(str(state.device))
        except Exception:  # noqa: BLE001 - a fact not recorded costs a compile here, not the run
            pass


def _env_end(state: _State, conn, env) -> None:
    from . import environment

    conn.send(("ok", environment.finish(env, str(state.device))))


def _memory(state: _State, conn, problem: GemmProblem | None) -> None:
    """The device's free and total bytes as this worker can use them (None on the CPU), once
    what it keeps between requests for other problems (cuBLASLt plans holding their operands)
    and compiled kernels (holding workspaces) are let go."""
    state.kernels.clear()
    keep = problem.key() if problem is not None else None
    for key in [k for k in state.baseline_plans if k[0] != keep]:
        del state.baseline_plans[key]
    if keep is None or keep != state.collected_for:  # the same problem: the last request's release will do
        state.release(thorough=True)
    state.collected_for = keep
    mem = memory.device_memory(state.device)
    if mem is None:
        conn.send(("ok", None))
        return
    import torch

    conn.send(("ok", memory.DeviceMemory(free=mem[0], total=mem[1], name=torch.cuda.get_device_name(state.device))))


def _plan_baselines(state: _State, conn, req: tuple[GemmProblem, tuple[str, ...], int]) -> None:
    """Make the baselines' plans for a problem (cuBLASLt's, autotune included) ahead of the timing
    job that times them, which then binds the plan to its own operands (baselines.prepare keeps it
    in state.baseline_plans). Answers the seconds it took and the baselines that are available."""
    problem, names, seed = req
    t0 = time.perf_counter()
    sets = [make_operands(problem, seed, state.device)]
    ready = [name for name in names if bl.prepare(name, problem, sets, [], state.baseline_plans).available]
    state.sync()
    conn.send(("ok", {"seconds": time.perf_counter() - t0, "ready": ready}))


def _check_many(state: _State, conn, req: CheckBatch) -> None:
    """Compile and check each candidate of a CheckBatch in turn, answering as each finishes, so that
    the parent knows which candidate a crash or a hang belongs to. A candidate's failure is its
    own; one that poisons the CUDA context ends the worker after its answer."""
    problem, dev, policy = req.problem, state.device, req.policy
    probe_policy = replace(policy, seeds=1, stream_order=False)
    storage: dict[str, tuple] = {}  # problem key -> (operands, output), allocated once per request
    # The candidates of a request are checked on the same fresh inputs (the request's random seeds,
    # written anew before each call), so each input set's fp32 reference is taken once, not once a
    # candidate (on the H100, a CuTe DSL search of 1000x17920x1536 checked in 1.4-1.6 s, not 1.8-2.0).
    references: dict[tuple, Any] = {}

    def checked(kernel, prob: GemmProblem, pol, seed: int, reserved: int):
        key = prob.key()
        if key not in storage:
            storage[key] = (make_operands(prob, seed, dev), GuardedOutput(prob, dev))
        return check_kernel(kernel, prob, dev, pol, state.sync, seed, reserved=reserved, storage=storage[key],
                            stream_order=False, references=references)

    passed: dict[str, Any] = {}
    reserved: dict[str, int] = {}
    seed = (req.seed + 7919) % (1 << 31)  # the request's fresh inputs (req.seed is random per request)
    for ref in req.candidates:
        t0 = time.perf_counter()
        try:
            kernel = state.kernel(ref, problem)
        except Exception as e:  # noqa: BLE001
            conn.send(("checked", ref.name, "compile_error", _describe(e), None, 0.0))
            continue
        compile_s = time.perf_counter() - t0
        conn.send(("compiled", ref.name, compile_s))  # the parent's compile timeout ends, the check's starts
        ws = workspace_bytes(problem, ref.spec) if ref.spec is not None else 0
        try:
            corr = checked(kernel, problem, policy, seed, ws)
            if ref.name in req.probes:
                corr = _probe_one(state, req.probes[ref.name], probe_policy, seed + 1, corr, checked)
        except Exception as e:  # noqa: BLE001 - a failed check, or a launch that raises
            failed = isinstance(e, CheckFailure)
            if not state.healthy():  # the CUDA context is gone: say so, then end (the parent starts a new worker)
                why = f"CUDA context lost after a check: {e}" if failed else _describe(e)
                conn.send(("checked", ref.name, "crash", why, None, compile_s))
                os._exit(3)
            status, why = ("incorrect", str(e)) if failed else (_status_of(e), _describe(e))
            conn.send(("checked", ref.name, status, why, None, compile_s))
            continue
        passed[ref.name], reserved[ref.name] = kernel, ws
        conn.send(("checked", ref.name, "ok", "", corr, compile_s))
    storage.clear()
    references.clear()
    order: dict[str, float | str] = {}
    if passed and policy.stream_order and state.is_cuda:
        ops = make_operands(problem, req.seed, dev)
        spare = memory.spare_bytes(dev, max(reserved.values()))
        need = memory.input_set_bytes(problem) + SCRATCH_MIN
        per_out = memory.output_bytes(problem) + 2 * 4 * guard_elements(problem)  # guards: <= 4 bytes an element
        chunk = max(1, min(req.stream_chunk, (spare - need) // per_out if spare is not None else req.stream_chunk))
        if spare is not None and need + per_out > spare:
            order = {n: (f"skipped: a second input set ({memory.input_set_bytes(problem)} bytes) does not fit in "
                         f"the {spare} bytes left") for n in passed}
        else:
            names = list(passed)
            pending = [names[j:j + chunk] for j in range(0, len(names), chunk)]
            while pending:
                group = pending.pop(0)
                found = stream_order_many({n: passed[n] for n in group}, problem, ops, policy,
                                          (req.seed + 104729 + len(order)) % (1 << 31), reserved=max(reserved[n] for n in group))
                for n, v in found.items():
                    if isinstance(v, str) and v.startswith("inconclusive"):
                        pending.append([n])  # alone, the launch cannot outlast the delay
                    else:
                        order[n] = v
    conn.send(("ok", order))


def _probe_one(state: _State, probe: tuple, policy, seed: int, corr, checked):
    """The long-K accumulator probe of a candidate that passed (see EvalConfig.accumulator_probe_k):
    one input set of the K=probe variant, through the same checks. A probe that cannot run is noted,
    not held against the candidate; one that runs wrong fails it."""
    prob, pref = probe
    try:
        kernel = state.kernel(pref, prob)
        checked(kernel, prob, policy, seed, 0)
    except CheckFailure as e:
        raise CheckFailure(f"long-K accumulator probe (same spec, K={prob.k}): {e}") from None
    except Exception as e:  # noqa: BLE001
        if not state.healthy():
            raise
        return replace(corr, checks=corr.checks + (f"long-k-probe failed to run ({_status_of(e)})",))
    return replace(corr, checks=corr.checks + (f"long-k-probe(K={prob.k})",))


def _time(state: _State, conn, req: TimeRequest) -> None:
    """Time candidates and baselines interleaved, then check the outputs of the timed path
    again on new inputs, and reject physically impossible times. Buffers are laid out to the
    free memory (memory.plan_timing): one output per contender and input set where it fits,
    shared outputs and fewer sets where it does not."""
    job = TimingJob(state, req)
    for mode in req.modes:
        job.time(mode)
    conn.send(("ok", job.reply()))
    state.kernels.clear()  # timed: done with them (and with any workspace they hold)
