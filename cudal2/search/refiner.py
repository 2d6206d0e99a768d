"""The refiner: one Optuna study per problem and backend set.

Proposals are enqueued as the first trials (their fields become fixed params); then a sampler
(TPE by default, GP on request) explores the space of space.py around what was measured. A
trial whose spec fails validation (the IR, check_compatible, the backend's supports()) is
pruned with the reason as a user attribute and never reaches a GPU.

User attributes of a trial: worker ("host:pid", to find trials left RUNNING by a killed
process), spec (canonical JSON), spec_key, status ("ok", "invalid", or the evaluator's failure
status), error, measured (True when this trial paid for a GPU measurement), reused (True when
the measurement came from the kernel table), kernel_ms (mode -> ms), speedups (mode -> baseline
-> ratio).
"""

from __future__ import annotations

import os
import socket
from typing import Any, Sequence

from ..ir import GemmProblem, KernelSpec, SpecError, Violation, check_compatible
from .proposal import Proposal
from .space import Option, params_of, search_space
from .store import Store

SAMPLERS = ("tpe", "gp", "random")
WORKER = f"{socket.gethostname()}:{os.getpid()}"


# What a trial's value is: kernel time over the reference baseline's (torch.matmul) timed in the same
# evaluator call. Studies of stores written before it held raw kernel times; the marker in the study
# name keeps the two apart (such a store starts new studies, and reuses its measurements untimed).
OBJECTIVE = "relative"


def study_name(problem: GemmProblem, backends: Sequence[str], tag: str = "") -> str:
    """Readable and unique: label, problem key (covers every problem field), backends, objective, tag."""
    name = f"{problem.label()}|{problem.key()}|{'+'.join(backends)}|{OBJECTIVE}"
    return f"{name}|{tag}" if tag else name


# Completed trials the TPE sampler needs before it samples from its model rather than at random
# (its n_startup_trials); the search loop asks ahead only once a study has them.
SAMPLER_WARMUP = 8


def make_sampler(name: str = "tpe", seed: int | None = None):
    import optuna

    if name == "tpe":
        import warnings

        # multivariate + group: tile sizes, warps and stages interact, and the space is conditional
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "experimental feature" notices
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                              n_startup_trials=SAMPLER_WARMUP, constant_liar=True)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"unknown sampler {name!r}; use one of {', '.join(SAMPLERS)}")


def validate(problem: GemmProblem, spec: KernelSpec) -> None:
    """Raise SpecError if spec cannot run problem on its backend (no GPU involved)."""
    check_compatible(problem, spec)
    from ..codegen import get_backend

    ok = get_backend(spec.backend).supports(problem, spec)
    if not ok:
        raise SpecError(Violation("backend", spec.backend, ok.reason, "choose a spec this backend supports"),
                        what=f"{spec.backend} support")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Refiner:
    def __init__(self, problem: GemmProblem, backends: Sequence[str], store: Store, arch: str,
                 sampler: str = "tpe", seed: int | None = None, tag: str = ""):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.problem = problem
        self.backends = tuple(backends)
        self.arch = arch
        self.store = store
        self.space: list[Option] = search_space(self.backends, arch)
        self.study = optuna.create_study(study_name=study_name(problem, self.backends, tag),
                                         storage=store.optuna_storage, sampler=make_sampler(sampler, seed),
                                         direction="minimize", load_if_exists=True)
        attrs = self.study.user_attrs
        if "problem" not in attrs:
            self.study.set_user_attr("problem", problem.to_dict())
            self.study.set_user_attr("backends", list(self.backends))
            self.study.set_user_attr("arch", arch)

    # ---- proposals ---------------------------------------------------------------------------
    def enqueue(self, proposals: Sequence[Proposal]) -> int:
        """Enqueue proposals as the next trials; skips specs already in the study. Returns how many
        were enqueued. A proposal for another arch or backend is re-targeted by validation (pruned)."""
        n = 0
        seen = self.trial_spec_keys()
        for p in proposals:
            spec = p.spec
            if spec.key() in seen:
                continue
            seen.add(spec.key())
            params = params_of(spec, self.space)
            outside = {k: v for k, v in params.items() if not _option(self.space, k).contains(v)}
            if outside or spec.arch != self.arch or spec.backend not in self.backends:
                # Not expressible in this study's space: record it as a pruned trial with the reason.
                self._add_pruned(spec, f"outside the search space of {'+'.join(self.backends)} on {self.arch}: "
                                 f"{outside or {'arch': spec.arch, 'backend': spec.backend}}", p)
                continue
            self.study.enqueue_trial(params, user_attrs={"proposal": p.source or "proposer",
                                                         "reasoning": p.reasoning[:2000]},
                                     skip_if_exists=True)
            n += 1
        return n

    def _add_pruned(self, spec: KernelSpec, reason: str, p: Proposal | None = None) -> None:
        import optuna

        self.study.add_trial(optuna.trial.create_trial(
            state=optuna.trial.TrialState.PRUNED, params={}, distributions={},
            user_attrs={"spec": spec.to_json(), "spec_key": spec.key(), "status": "invalid", "error": reason,
                        "proposal": (p.source if p else "") or "proposer"}))

    def trial_spec_keys(self) -> set[str]:
        return {t.user_attrs["spec_key"] for t in self.study.get_trials(deepcopy=False) if "spec_key" in t.user_attrs}

    # ---- one trial -----------------------------------------------------------------------------
    def suggest(self, trial) -> KernelSpec:
        """The spec of a trial (fixed params for enqueued proposals, sampled otherwise).
        Raises SpecError when the combination is invalid."""
        fields: dict[str, Any] = {"arch": self.arch}
        for o in self.space:
            if o.constant:
                fields[o.name] = o.choices[0] if o.choices is not None else o.low
            elif not o.active(fields):
                continue
            elif o.choices is not None:
                fields[o.name] = trial.suggest_categorical(o.name, list(o.choices))
            else:
                fields[o.name] = trial.suggest_int(o.name, o.low, o.high, log=o.log)
        spec = KernelSpec(**fields)
        validate(self.problem, spec)
        return spec

    # ---- recovery ------------------------------------------------------------------------------
    def recover(self) -> dict[str, int]:
        """Settle trials left RUNNING by a process that died (SIGKILL, power loss) on this host:
        a trial whose spec was measured (it is in the kernel table) is completed with that
        measurement; any other is marked failed and its params are enqueued again.
        Trials of live processes and of other hosts are left alone (Optuna's heartbeat,
        enabled on the store, fails those once stale and re-queues them)."""
        from optuna.trial import TrialState

        storage = self.store.optuna_storage
        done = {"completed": 0, "requeued": 0, "failed": 0}
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            host, _, pid = str(t.user_attrs.get("worker", "")).rpartition(":")
            if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid() or _pid_alive(int(pid)):
                continue
            spec_json = t.user_attrs.get("spec")
            measured = None
            if spec_json:
                measured = self.store.measurement(self.problem, KernelSpec.from_json(spec_json))
            if measured is not None:
                against = self.store.kernel_baselines(self.problem, measured.spec) or self.store.baselines(self.problem)
                for k, v in trial_attrs(measured, against, measured_now=True).items():
                    storage.set_trial_user_attr(t._trial_id, k, v)
                mode = _objective_mode(measured)
                ms = measured.kernel_ms(mode)
                if measured.ok and ms is not None:
                    value = relative_time(ms, against, reference_of(against), mode)
                    storage.set_trial_state_values(t._trial_id, TrialState.COMPLETE, [value])
                else:
                    storage.set_trial_state_values(t._trial_id, TrialState.PRUNED)
                done["completed"] += 1
                continue
            storage.set_trial_user_attr(t._trial_id, "error", "worker died during the trial; re-queued")
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            pending = [w.system_attrs.get("fixed_params") for w in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))]
            if t.params and t.params not in pending:
                # (not skip_if_exists: Optuna counts the FAIL trial just written as existing)
                self.study.enqueue_trial(t.params, user_attrs={"proposal": t.user_attrs.get("proposal", "requeued")})
                done["requeued"] += 1
            else:
                done["failed"] += 1
        return done

    # ---- reading the study ---------------------------------------------------------------------
    def measured_count(self) -> int:
        return sum(1 for t in self.study.get_trials(deepcopy=False) if t.user_attrs.get("measured"))


def _option(space: Sequence[Option], name: str) -> Option:
    return next(o for o in space if o.name == name)


def _objective_mode(result) -> str:
    return "offline" if "offline" in result.timing else next(iter(result.timing), "offline")


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


def relative_time(kernel_ms: float, baselines: dict, reference: str | None, mode: str) -> float:
    """kernel_ms over the reference baseline's time among `baselines` (lower is better); the raw
    time when that baseline is missing, so that a search without baselines still ranks."""
    ref = baselines.get(reference) if reference else None
    ref_ms = ref.kernel_ms(mode) if ref is not None and ref.available else None
    return kernel_ms / ref_ms if ref_ms else kernel_ms


def trial_attrs(result, baselines: dict, measured_now: bool, reused: bool = False) -> dict[str, Any]:
    return {
        "spec": result.spec.to_json(), "spec_key": result.spec.key(), "status": result.status,
        "error": result.reason[:2000], "measured": measured_now, "reused": reused,
        "kernel_ms": {m: t.kernel_ms for m, t in result.timing.items()},
        "speedups": speedups_of(result, baselines),
    }
