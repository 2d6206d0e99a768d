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

A killed or interrupted worker leaves trials RUNNING. They are failed and queued again by
Optuna's own machinery: its heartbeat finds them (fail_stale_trials) and the store's
RetryFailedTrialCallback queues a copy with the same params; on this host a trial whose process
is gone is handed to the same callback at once (Refiner.recover). A spec measured before the kill
is in the kernel table, so its retry is told from there, not measured again, and
`measured_spec_keys` still counts it for the study that paid for it.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Sequence

from ..bench.results import DEFAULT_MODE
from ..ir import GemmProblem, KernelSpec, SpecError, Violation, check_compatible
from cudal2.proposers.proposal import Proposal
from .space import Option, choose, params_of, search_space
from cudal2.store.store import Store
from .trials import close_queue, measured_spec_keys, recover
from ..codegen import get_backend

SAMPLERS = ("tpe", "gp", "random")
WORKER = f"{socket.gethostname()}:{os.getpid()}"


# What a trial's value is: kernel time over the reference baseline's (torch.matmul) timed in the same
# evaluator call. Studies of stores written before it held raw kernel times; the marker in the study
# name keeps the two apart (such a store starts new studies, and reuses its measurements untimed).
OBJECTIVE = "relative"


def study_name(problem: GemmProblem, backends: Sequence[str], tag: str = "", mode: str = DEFAULT_MODE) -> str:
    """Readable and unique: label, problem key (covers every problem field), backends, objective and
    its timing mode, tag. A study ranks in one mode; offline's name is the one studies had before
    modes were named, so those studies resume."""
    objective = OBJECTIVE if mode == "offline" else f"{OBJECTIVE}@{mode}"
    name = f"{problem.label()}|{problem.key()}|{'+'.join(backends)}|{objective}"
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
    ok = get_backend(spec.backend).supports(problem, spec)
    if not ok:
        raise SpecError(Violation("backend", spec.backend, ok.reason, "choose a spec this backend supports"),
                        what=f"{spec.backend} support")


def shape_generic_kernel(problem: GemmProblem, spec: KernelSpec) -> KernelSpec:
    """The shape-generic kernel ("dynamic") of a spec that leaves the choice to its backend ("auto"),
    where the backend renders one for problem; else spec itself (a spec that names its
    specialization, or one with no shape-generic kernel for this problem, e.g. stream-K, or from a
    backend that declares none: its own kernels are what it is searched with)."""
    if spec.shape_specialization != "auto":
        return spec
    try:
        generic = spec.replace(shape_specialization="dynamic")  # refused where the backend declares no "dynamic"
        validate(problem, generic)
    except SpecError:
        return spec
    return generic


class Refiner:
    def __init__(self, problem: GemmProblem, backends: Sequence[str], store: Store, arch: str,
                 sampler: str = "tpe", seed: int | None = None, tag: str = "", shape_generic: bool = True,
                 mode: str = DEFAULT_MODE):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.problem = problem
        self.backends = tuple(backends)
        self.arch = arch
        self.store = store
        self.shape_generic = shape_generic
        self.space: list[Option] = search_space(self.backends, arch)
        self.study = optuna.create_study(study_name=study_name(problem, self.backends, tag, mode),
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
        from optuna.trial import TrialState

        n = 0
        # The specs and params of the trials that stand (what Optuna's skip_if_exists compares, less
        # the failed trials: one killed, interrupted, or closed unmeasured when a search ended does
        # not hold its spec, so a later proposal of it is queued again).
        standing = [t for t in self.study.get_trials(deepcopy=False) if t.state != TrialState.FAIL]
        seen = {t.user_attrs["spec_key"] for t in standing if "spec_key" in t.user_attrs}
        taken = [t.system_attrs.get("fixed_params", t.params) for t in standing]
        for p in proposals:
            spec = self.kernel_of(p.spec)
            if spec.key() in seen:
                continue
            seen.add(spec.key())
            params = params_of(spec, self.space)
            if params in taken:
                continue
            taken.append(params)
            outside = {k: v for k, v in params.items() if not _option(self.space, k).contains(v)}
            if outside or spec.arch != self.arch or spec.backend not in self.backends:
                # Not expressible in this study's space: record it as a pruned trial with the reason.
                self._add_pruned(spec, f"outside the search space of {'+'.join(self.backends)} on {self.arch}: "
                                 f"{outside or {'arch': spec.arch, 'backend': spec.backend}}", p)
                continue
            self.study.enqueue_trial(params, user_attrs={"proposal": p.source or "proposer",
                                                         "reasoning": p.reasoning[:2000]})
            n += 1
        return n

    def _add_pruned(self, spec: KernelSpec, reason: str, p: Proposal | None = None) -> None:
        import optuna

        self.study.add_trial(optuna.trial.create_trial(
            state=optuna.trial.TrialState.PRUNED, params={}, distributions={},
            user_attrs={"spec": spec.to_json(), "spec_key": spec.key(), "status": "invalid", "error": reason,
                        "proposal": (p.source if p else "") or "proposer"}))

    # ---- one trial -----------------------------------------------------------------------------
    def suggest(self, trial) -> KernelSpec:
        """The spec of a trial (fixed params for enqueued proposals, sampled otherwise).
        Raises SpecError when the combination is invalid.

        A sampled stage count is a ceiling: where the spec does not fit at that depth (most often
        its shared memory), the deepest pipeline below it that the IR and the backend accept is
        taken, as CUTLASS's StageCountAutoCarveout and quack size a config's pipeline to what fits.
        (Over a CuTe DSL search, 22 of 69 pruned trials had exceeded shared memory by their stages;
        each pruned trial costs a sampler step and store writes.) A proposal's own stages are kept."""
        fields = choose(self.space, self.arch, lambda o: trial.suggest_categorical(o.name, list(o.choices))
                        if o.choices is not None else trial.suggest_int(o.name, o.low, o.high, log=o.log))
        try:
            spec = KernelSpec(**fields)
            validate(self.problem, spec)
        except SpecError:
            if "proposal" in trial.user_attrs or "stages" not in fields:  # a proposal is taken as it is
                raise
            spec = self._shallower(fields)
            if spec is None:
                raise
        return self.kernel_of(spec)

    def _shallower(self, fields: dict[str, Any]) -> KernelSpec | None:
        """The spec of `fields` at the deepest valid stage count below its own, or None."""
        low = next((o.low for o in self.space if o.target == "stages" and o.low is not None), 1)
        for stages in range(fields["stages"] - 1, low - 1, -1):
            try:
                spec = KernelSpec(**{**fields, "stages": stages})
                validate(self.problem, spec)
                return spec
            except SpecError:
                continue
        return None

    def kernel_of(self, spec: KernelSpec) -> KernelSpec:
        """The spec whose kernel the search measures: with shape_generic, the shape-generic kernel
        ("dynamic") of a spec that leaves the choice to its backend ("auto") where the backend renders
        one for this problem. One compile then serves every shape of the problem's class (a new token
        count, a new weight of the same dtype and layout), so a search of a new shape finds most of
        its kernels compiled. Static kernels stay an IR option for a final winner
        (shape_specialization="static", the confirmation's static twin, confirm.py): on the H100 the
        shape-generic ones measured 0.993 (Triton) and 0.987 (CuTe DSL) of their speed over the 48
        probe shapes (docs/results.md)."""
        return shape_generic_kernel(self.problem, spec) if self.shape_generic else spec

    # ---- recovery ------------------------------------------------------------------------------
    def recover(self) -> int:
        """Fail the trials that dead workers left RUNNING and queue them again (trials.recover)."""
        return recover(self.study, self.store)

    def close_queue(self, reason: str) -> int:
        """Fail the trials still WAITING (trials.close_queue); a later proposal of their spec is
        queued again (enqueue)."""
        return close_queue(self.study, self.store, reason)

    # ---- reading the study ---------------------------------------------------------------------
    def measured_count(self) -> int:
        return len(measured_spec_keys(self.study, self.store.measured_spec_keys(self.problem)))


def _option(space: Sequence[Option], name: str) -> Option:
    return next(o for o in space if o.name == name)
