"""The Dask cluster a sweep or a search runs on: what `--workers` (and `cluster=`) name, how the
cluster is started or reached, the runner each worker keeps, and searches sent to it.

    auto                one worker per visible GPU (dask-cuda's LocalCUDACluster); with a runner
                        that needs no GPU (the recorded one), one worker per CPU core
    N                   N such workers
    tcp://host:8786     the workers of an existing Dask scheduler, on any number of hosts

Dask (distributed, and dask-cuda for local GPUs) is an optional extra, `pip install
'cudal2[dask]'`, imported only here and in the modules that this one loads: without it, and
without --workers, nothing changes. Every worker runs one task at a time (one evaluator per GPU)
and is started as a non-daemon process, so that its evaluator may start its own GPU worker and
compile pool. A worker that dies loses only the task it was running, which the scheduler gives
to another worker (Dask's allowed-failures); the sweep resubmits a batch whose workers all died
(cluster_sweep.py). docs/scale_out.md tells how to start a scheduler, workers and a PostgreSQL
store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from ..ir import GemmProblem
from cudal2.store.store import Store
from cudal2.store.store import sqlite_path

EXTRA = "pip install 'cudal2[dask]'"
START_HINT = ("start one with 'dask scheduler' and one worker per GPU with "
              "'DASK_DISTRIBUTED__WORKER__DAEMON=False dask cuda worker ADDRESS' (docs/scale_out.md)")
CONNECT_TIMEOUT_S = 10.0  # for a scheduler to answer
WORKER_WAIT_S = 60.0  # for a scheduler that answers to have a worker
_ADDRESS = re.compile(r"^([a-z][a-z0-9+]*://)?[\w.\-\[\]:]+:\d+$")


class ClusterError(Exception):
    """A cluster that cannot be used as asked: one line naming the problem and the fix."""


@dataclass(frozen=True)
class Workers:
    """What --workers asked for: `count` local workers (None: auto), or a scheduler's address."""

    count: int | None = None
    address: str = ""
    what: str = "--workers"  # how the caller named it, for messages

    def __str__(self) -> str:
        return f"{self.what} {self.address or self.count or 'auto'}"

    @property
    def where(self) -> str:
        return self.address or "local"


def parse_workers(text: str | int, what: str = "--workers") -> Workers:
    """auto, a positive number, or a scheduler address (tcp://host:8786, or host:8786). what: the
    option or argument that gave it, as messages name it."""
    value = str(text).strip()
    if value == "auto":
        return Workers(what=what)
    if value.isdigit() and int(value) > 0:
        return Workers(count=int(value), what=what)
    if _ADDRESS.match(value):
        return Workers(address=value if "://" in value else f"tcp://{value}", what=what)
    raise ClusterError(f"{what} {value!r}: give auto (one worker per GPU), a number of workers, or a Dask "
                       "scheduler's address such as tcp://host:8786")


def require_dask(what: str = "--workers") -> None:
    import importlib.util

    if importlib.util.find_spec("distributed") is None:
        raise ClusterError(f"{what} needs Dask, which is not installed: {EXTRA} (or run without {what}: one process, "
                           "one GPU)")


@contextlib.contextmanager
def open_cluster(workers: Any, *, gpus: bool = True, what: str = "--workers", connect_timeout_s: float | None = None,
                 worker_wait_s: float | None = None) -> Iterator[Any]:
    """A distributed.Client for `workers`: a Client (used as it is, left open), or what
    parse_workers reads (what: how messages name it). A cluster started here (auto, N) is closed
    on leaving. gpus: whether the runner needs GPUs (a local cluster is then one worker per GPU).
    Raises ClusterError."""
    if _is_client(workers):
        yield workers
        return
    request = workers if isinstance(workers, Workers) else parse_workers(workers, what)
    require_dask(request.what)
    import dask
    from distributed import Client

    if request.address:
        client = _connect(request, connect_timeout_s or CONNECT_TIMEOUT_S, worker_wait_s or WORKER_WAIT_S)
        try:
            yield client
        finally:
            client.close()
        return
    # Workers of our own: non-daemon (their evaluator starts processes), one task each, logs quiet.
    # The setting stays for the cluster's life: a nanny reads it again when it restarts a worker
    # that died, and a daemon worker could not start its evaluator.
    with dask.config.set({"distributed.worker.daemon": False}):
        with _interrupt_left_to_this_process():
            cluster = _local_gpu_cluster(request) if gpus else _local_cpu_cluster(request.count)
        try:
            with Client(cluster) as client:
                yield client
        finally:
            cluster.close()


def _interrupt_left_to_this_process():
    """Start local workers that ignore Ctrl-C. It reaches every process of the terminal's group, and
    each worker printed a KeyboardInterrupt traceback while this process, which handles it, was
    already shutting them down. A process started while SIGINT is ignored keeps ignoring it (Python
    and asyncio install no handler of their own then). Ctrl-C waits while the workers start."""
    return _on_sigint(signal.SIG_IGN)


# The flags of the ctrl_c_deferred blocks open now, innermost last (signals reach the main thread only).
_DEFERRED: list[threading.Event] = []


@contextlib.contextmanager
def ctrl_c_deferred() -> Iterator[threading.Event]:
    """Inside the block, Ctrl-C sets the flag this yields instead of raising KeyboardInterrupt
    wherever the main thread happens to be. Raised inside one of Dask's callbacks (its submissions,
    its garbage-collection diagnosis), KeyboardInterrupt was swallowed ("Exception ignored in ...")
    and a sweep interrupted while it planned or submitted its batches went on to the end. The code
    in the block stops where stopping is safe: finished() and stop_if_interrupted(). The sweep and
    the searches on a cluster hold one from before they plan until their last batch is in."""
    pressed = threading.Event()
    with _on_sigint(lambda *_: pressed.set()):
        _DEFERRED.append(pressed)
        try:
            yield pressed
        finally:
            _DEFERRED.remove(pressed)


def stop_if_interrupted() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed in the innermost ctrl_c_deferred block."""
    if _DEFERRED and _DEFERRED[-1].is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def _on_sigint(handler) -> Iterator[None]:
    """SIGINT handled by handler inside the block, as before it after; nothing changes off the main
    thread (only the main thread gets signals, and only it may set their handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _is_client(obj: Any) -> bool:
    try:
        from distributed import Client
    except ImportError:
        return False
    return isinstance(obj, Client)


def _connect(request: Workers, connect_timeout_s: float, worker_wait_s: float):
    from distributed import Client

    address = request.address
    try:
        client = Client(address, timeout=connect_timeout_s)
    except Exception as e:  # noqa: BLE001 - OSError, TimeoutError, a malformed address: one line either way
        reason = " ".join(str(e).split())[:200] or type(e).__name__
        raise ClusterError(f"{request}: no Dask scheduler answered there ({reason}); check the address, "
                           f"or {START_HINT}") from None
    try:
        client.wait_for_workers(1, timeout=worker_wait_s)
    except Exception:  # noqa: BLE001 - TimeoutError, in whatever form this version raises it
        client.close()
        raise ClusterError(f"{request}: the scheduler has had no worker for {worker_wait_s:.0f} s; start "
                           f"one per GPU with 'DASK_DISTRIBUTED__WORKER__DAEMON=False dask cuda worker {address}'"
                           ) from None
    return client


def _visible_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


POLL_S = 0.05  # how often a wait on a cluster looks for finished futures and for Ctrl-C

# The log level of the Dask clusters we start (their scheduler here, their workers): none. What
# fails on a worker reaches the sweep or search as a result, and ClusterError names it in one line.
# What Dask logs while such a cluster shuts down under Ctrl-C (a heartbeat to a scheduler already
# gone, a plugin already removed, a result for a client already closed, some of it at CRITICAL) is
# tracebacks with nothing for the user to do.
QUIET = logging.CRITICAL + 1


def _local_gpu_cluster(request: Workers):
    visible, count = _visible_gpus(), request.count
    if visible == 0:
        raise ClusterError(f"{request}: no CUDA GPU is visible here, so a local cluster has nothing to time "
                           "on; give the address of a scheduler whose workers have GPUs (tcp://host:8786)")
    if count is not None and count > visible:
        raise ClusterError(f"{request}: {visible} GPU(s) are visible here; give at most {visible}, or auto")
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError:
        raise ClusterError(f"one local worker per GPU needs dask-cuda, which is not installed: {EXTRA}") from None
    # dask-cuda gives each worker its own CUDA_VISIBLE_DEVICES (its GPU first) and one thread.
    return LocalCUDACluster(n_workers=count, threads_per_worker=1, dashboard_address=":0",
                            silence_logs=QUIET)


def _local_cpu_cluster(count: int | None):
    from distributed import LocalCluster

    return LocalCluster(n_workers=count or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                        dashboard_address=":0", silence_logs=QUIET)


@contextlib.contextmanager
def runner_on_workers(client, make_runner: Callable[[], Any]) -> Iterator[str]:
    """Give every worker of client (and every worker that joins later, a restarted one too) a
    runner made by make_runner, under a name of this run's own (two runs on one cluster keep
    theirs apart); yields the name that tasks pass. The runners are closed on leaving."""
    from .cluster_worker import RunnerPlugin

    name = f"cudal2-runner-{uuid.uuid4().hex[:12]}"
    client.register_plugin(RunnerPlugin(make_runner), name=name)
    try:
        yield name
    finally:
        with contextlib.suppress(Exception):  # a cluster already gone has nothing to close
            client.unregister_worker_plugin(name)


def worker_count(client) -> int:
    return len(client.scheduler_info().get("workers", {}))


def check_store_reachable(client, url: str) -> None:
    """Raise ClusterError where workers on other hosts would have to write an SQLite file of this
    one (a search writes its trials from the worker that runs it)."""
    path = sqlite_path(url)
    if path is None:
        return
    here = socket.gethostname()
    others = sorted(set(client.run(socket.gethostname).values()) - {here})
    if others:
        raise ClusterError(f"store {path} is an SQLite file on {here}, which workers on {', '.join(others)} cannot "
                           "write; give a database every host reaches, such as --store "
                           "postgresql://user@host/cudal2 (docs/scale_out.md)")


def lost_worker(e: BaseException) -> bool:
    """Whether a task failed because the workers that ran it died, rather than raising."""
    from distributed import KilledWorker

    return isinstance(e, KilledWorker)


def run_searches(problems: Sequence[GemmProblem], client, make_runner: Callable[[], Any], store_url: str,
                 **options) -> list:
    """One search per problem, all at once, each on a worker of client (a worker runs one at a
    time, so as many run together as there are workers). Each writes its trials into the store at
    store_url as it goes; SearchResults come back in the order of problems. options: run_search's
    (backends, arch, proposer, budget, modes, batch_size, confirm, ...); a proposer is a name,
    made on the worker for its GPU, or an object that pickles."""
    from distributed import as_completed

    from .cluster_worker import search_task

    check_store_reachable(client, store_url)
    with ctrl_c_deferred(), runner_on_workers(client, make_runner) as name:
        stop_if_interrupted()
        futures = [client.submit(search_task, name, p, store_url, options, pure=False) for p in problems]
        try:
            for _ in finished(as_completed(futures)):  # Ctrl-C is seen while they run
                pass
            done = [_result_of(f, p) for f, p in zip(futures, problems)]
        finally:
            client.cancel([f for f in futures if not f.done()])
    for searched in done:
        if searched.refused is not None:
            raise searched.refused
    return _with_studies(done, store_url)


def finished(flow) -> Iterator:
    """The futures of flow (distributed.as_completed) as they finish; Ctrl-C raises
    KeyboardInterrupt here. While the main thread waits on a cluster, Ctrl-C only sets a flag (that
    of the ctrl_c_deferred block around, or this loop's own), and this loop raises it."""
    with contextlib.ExitStack() as stack:
        pressed = _DEFERRED[-1] if _DEFERRED else stack.enter_context(ctrl_c_deferred())
        while not flow.is_empty():
            if pressed.is_set():
                raise KeyboardInterrupt
            done = flow.next_batch(block=False)
            if not done:
                time.sleep(POLL_S)
            yield from done


def _result_of(future, problem: GemmProblem):
    from concurrent.futures import CancelledError

    try:
        return future.result()
    except CancelledError:
        raise ClusterError(f"search {problem.label()}: the cluster went away before it finished; what it measured "
                           "is in the store, and the same search resumes there") from None
    except Exception as e:
        if lost_worker(e):
            raise ClusterError(f"search {problem.label()}: every worker that ran it died ({e}); what it measured "
                               "is in the store, and the same search resumes there") from None
        raise


def _with_studies(done: list, store_url: str) -> list:
    """The SearchResults, each with its study opened again from the store (one connection)."""
    import optuna

    storage = Store(store_url).optuna_storage
    results = []
    for searched in done:
        searched.result.study = optuna.load_study(study_name=searched.study_name, storage=storage)
        results.append(searched.result)
    return results
