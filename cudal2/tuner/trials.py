"""A trial's life in a search's Optuna study: the attributes it is told with, the heartbeat while
it is measured, and what happens when it cannot finish: failed, queued again for another worker, or
recovered from a worker that died. The search (loop.py) and the refiner (refiner.py) call these."""

from __future__ import annotations

import copy
import datetime as _dt
import os
import socket
import threading
import warnings
from typing import Any, Callable, Sequence

from cudal2.store.store import STALE_RETRIES, retry_callback


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover(study, store) -> int:
    """Fail the trials that dead workers left RUNNING and queue them again; returns how many.
    Optuna's heartbeat finds those of any host once stale (fail_stale_trials); a trial of a
    process on this host that is gone is failed at once, through the same retry callback.
    Trials of live processes are left alone."""
    from optuna.trial import TrialState

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "experimental feature" notices
        import optuna

        optuna.storages.fail_stale_trials(study)
    grace = _dt.timedelta(seconds=getattr(store.optuna_storage, "grace_period", None) or 600)
    now = _dt.datetime.now()
    dead = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        host, _, pid = str(t.user_attrs.get("worker", "")).rpartition(":")
        if host == socket.gethostname() and pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            dead.append(t)
        elif not host and t.datetime_start is not None and now - t.datetime_start > grace:
            dead.append(t)  # killed before its first write (no worker, no heartbeat): stale by its start
    return requeue(study, store.optuna_storage, dead, "its worker died; queued again")

def close_queue(study, store, reason: str) -> int:
    """Fail the trials still WAITING (a search that ends on its own leaves none behind); returns
    how many. A later proposal of their spec is queued again (enqueue)."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    storage = store.optuna_storage
    claimed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        try:  # taken from the queue first, as Study.ask does: another worker may be taking it too
            if storage.set_trial_state_values(t._trial_id, TrialState.RUNNING):
                claimed.append(t)
        except UpdateFinishedTrialError:
            pass
    return len(fail_trials(storage, claimed, reason))


def measured_spec_keys(study, stored: set[str]) -> set[str]:
    """The specs this study paid to measure, each once: the spec keys of its trials that were not
    told from an earlier measurement (reused), among those the kernel table holds. A trial killed
    after its measurement was stored counts through that record, whichever trial is told it later;
    one killed before counts only once its spec is measured."""
    return {t.user_attrs["spec_key"] for t in study.get_trials(deepcopy=False)
            if "spec_key" in t.user_attrs and not t.user_attrs.get("reused")} & stored


def stale_trial_callback(storage):
    """The storage's retry callback for a dead worker's trial (Optuna renamed its getter in 4.9); a
    storage without heartbeats (a SQLite store's journal) gets Optuna's retry callback, as a
    PostgreSQL store configures it."""
    getter = getattr(storage, "get_heartbeat_stale_trial_callback", None) or getattr(
        storage, "get_failed_trial_callback", None)
    return getter() if getter is not None else retry_callback(max_retry=STALE_RETRIES)


def fail_trials(storage, trials: Sequence[Any], reason: str) -> list[int]:
    """Fail each trial that is not finished yet, with `reason` as its error; returns their ids
    (a trial told or failed by another worker meanwhile is left as it is)."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    failed = []
    for t in trials:
        try:
            storage.set_trial_user_attr(t._trial_id, "error", reason)
            if storage.set_trial_state_values(t._trial_id, TrialState.FAIL):
                failed.append(t._trial_id)
        except UpdateFinishedTrialError:
            pass
    return failed


def requeue(study, storage, trials: Sequence[Any], reason: str, callback=None) -> int:
    """Fail the trials (fail_trials) and hand each to `callback` (default: the storage's
    RetryFailedTrialCallback, which queues a copy with the same params and user attributes and
    records the retry history): what Optuna's fail_stale_trials does to a trial whose heartbeat
    stopped. Returns how many were failed."""
    callback = callback or stale_trial_callback(storage)
    failed = fail_trials(storage, trials, reason)
    for trial_id in failed:
        if callback is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "experimental feature" notices
                callback(study, copy.deepcopy(storage.get_trial(trial_id)))
    return len(failed)


def speedups_of(result, baselines: dict) -> dict[str, dict[str, float]]:
    """mode -> baseline -> baseline kernel ms / candidate kernel ms (only where both exist)."""
    out: dict[str, dict[str, float]] = {}
    if not result.ok:
        return out
    for mode, t in result.timing.items():
        for name, b in baselines.items():
            bms = b.kernel_ms(mode) if b.available else None
            if bms is not None and t.kernel_ms > 0:
                out.setdefault(mode, {})[name] = bms / t.kernel_ms
    return out


def reference_of(baselines: dict) -> str | None:
    """The baseline that speedups and the objective are taken against: torch.matmul when timed."""
    return "torch" if "torch" in baselines else next(iter(baselines), None)


def trial_attrs(result, baselines: dict, measured_now: bool, reused: bool = False) -> dict[str, Any]:
    # (reused before spec_key: a trial killed while its attributes are written never counts a
    # reused spec as measured, see measured_spec_keys)
    return {
        "reused": reused, "measured": measured_now,
        "spec": result.spec.to_json(), "spec_key": result.spec.key(), "status": result.status,
        "error": result.reason[:2000],
        "kernel_ms": {m: t.kernel_ms for m, t in result.timing.items()},
        "speedups": speedups_of(result, baselines),
    }


def queued(study) -> int:
    """How many trials wait in the study's queue (enqueued proposals not yet asked for)."""
    import optuna

    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))


class Heartbeat:
    """Record Optuna heartbeats for trials under measurement, so that workers on other hosts
    (fail_stale_trials) do not take a long batch for a dead one. trial_ids() names them at each beat
    (batches asked ahead during the measurement join them)."""

    def __init__(self, storage, trial_ids: Callable[[], list[int]], every_s: float = 30.0):
        self._done = threading.Event()

        def beat() -> None:
            while not self._done.wait(every_s):
                for tid in trial_ids():
                    try:
                        storage.record_heartbeat(tid)
                    except Exception:  # noqa: BLE001 - a missed heartbeat only risks a retry
                        pass

        self._thread = threading.Thread(target=beat, name="cudal2-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)
