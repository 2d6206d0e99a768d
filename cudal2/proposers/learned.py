"""The learned proposer: a cost model trained on measured speed ranks the spec catalog, and a
bandit over its predictions picks each batch from what the search has measured so far.

- The first batch is the model's best predictions (its first pick is what `cudal2.matmul` would use
  for a shape never searched).
- Every later call sees the search's history: measured speeds correct the model's predictions for
  the specs it treats alike (cudal2/proposers/bandit.py), and the next batch goes by upper confidence.
- Candidates are the shape-generic specs of the catalogs (cudal2/proposers/catalog.py) the model was
  trained on, for each backend it was trained on, less those the problem or the backend refuses.
- The rules proposer fills the other half of each batch after the first pick: the kernels of a
  backend the model has never seen, and kernels beyond the catalog (specialized to the shape,
  narrower tiles, deeper split-K) for the backends it ranks. beyond_catalog=False leaves the
  ranked backends to the model alone.

The model is the one passed as model=, else the first of: the file $CUDAL2_COST_MODEL names, the
user's model for the live GPU (`cudal2 train --store`), the one shipped for the arch
(cudal2/proposers/model_files.py); its repr and first proposals say which.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from cudal2.bench.results import CandidateResult
from cudal2.ir import ARCHS, DeviceProfile, GemmProblem, KernelSpec, SpecError, check_compatible
from cudal2.proposers.proposal import Proposal, ProposerUnavailable
from ..ir.hardware import DEFAULT_ARCH
from .rules import RulesProposer, split_k_reduction_first
from cudal2.proposers import bandit
from cudal2.proposers.catalog import CATALOG_SPLIT_K_REDUCTION, catalog
from cudal2.proposers.catalog import names_for
from cudal2.proposers.cost_model import ModelError, TreeModel
from cudal2.proposers.model_files import find_model


def load_model(model=None, arch: str = DEFAULT_ARCH, device: DeviceProfile | None = None):
    """A TreeModel: the one given, read from a path, or the one find_model picks for arch on device
    ($CUDAL2_COST_MODEL's, the user's for the GPU, the shipped one)."""
    return load_model_from(model, arch, device)[0]


def load_model_from(model=None, arch: str = DEFAULT_ARCH, device: DeviceProfile | None = None):
    """(TreeModel, where it came from: a sentence for a repr or a proposal's reasoning)."""
    source = None
    if model is None:
        source = find_model(arch, device)
        if source is None:
            raise ProposerUnavailable(f"no cost model is shipped for {arch}; train one with 'cudal2 train' "
                                      "and pass it with --model")
        model = source.path
    if isinstance(model, (str, Path)):
        try:
            loaded = TreeModel.load(Path(model))
        except ModelError as e:
            raise ProposerUnavailable(str(e)) from None
        return loaded, str(source) if source is not None else f"{model} (given)"
    return model, "given"


def trained_backends(model) -> frozenset[str]:
    """The backends whose measurements a cost model was trained on, from its provenance (a model
    trained before provenance named them learned from the Triton sweep alone)."""
    backends = ((getattr(model, "info", None) or {}).get("data") or {}).get("backends")
    return frozenset(backends) if backends else frozenset({"triton"})


def trained_catalogs(model) -> tuple[str, ...]:
    """The spec catalogs a cost model was trained on, from its provenance (a model trained before
    provenance named them learned from the base catalog alone)."""
    names = ((getattr(model, "info", None) or {}).get("data") or {}).get("catalogs")
    return tuple(names) if names else ("base",)


class LearnedProposer:
    name = "learned"
    adaptive = True  # ask again after every batch: each batch learns from the ones before

    def __init__(self, backends: Sequence[str] = ("triton",), arch: str = DEFAULT_ARCH, *, model=None,
                 beta: float | None = None, seed: int = 0, device: DeviceProfile | None = None,
                 beyond_catalog: bool = True):
        if isinstance(backends, str):
            backends = (backends,)
        if arch not in ARCHS:
            raise ValueError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}")
        self.arch, self.backends, self.seed = arch, tuple(backends), seed
        self.beta = bandit.BETA if beta is None else beta
        # the features see the GPU the kernels will run on (the model was trained on model.device)
        self.device = device or DeviceProfile.live(arch)
        self.model, self.model_source = load_model_from(model, arch, self.device)
        self._cache: dict[str, tuple[list[KernelSpec], np.ndarray, np.ndarray]] = {}
        self._index: dict[str, int] = {}  # kernel key -> position among the cached candidates
        # The rules fill half of each batch after the first pick: for a backend the model never saw,
        # all of its specs; for one it ranks, the kernels beyond the catalog it was trained on
        # (specialized to the shape, narrower tiles, deeper split-K), which it cannot rank. Without
        # them the search never reached the small shapes' winners (docs/learning.md, "Scope").
        ruled = list(self.backends) if beyond_catalog else [b for b in self.backends if b not in self.charted]
        self.rules = RulesProposer(ruled, arch, device=self.device) if ruled else None

    @property
    def charted(self) -> tuple[str, ...]:
        """The backends this proposer ranks itself: those with a spec catalog whose measurements the
        model was trained on (a model that never saw a backend's kernels cannot rank them); the rules
        propose for the others."""
        return tuple(b for b in self.backends if names_for(b) and b in trained_backends(self.model))

    def __repr__(self) -> str:
        return f"LearnedProposer(backends={list(self.backends)}, arch={self.arch!r}, model={self.model_source!r})"

    def candidates(self, problem: GemmProblem) -> tuple[list[KernelSpec], np.ndarray, np.ndarray]:
        """The catalog specs that can run problem, their predicted log speedups and their leaves."""
        key = problem.label()
        if key not in self._cache:
            from cudal2.codegen import get_backend
            from cudal2.proposers.features import matrix
            from cudal2.proposers.catalog import names_for

            specs: list[KernelSpec] = []
            keys: list[str] = []
            for backend in self.charted:
                be = get_backend(backend)
                names = tuple(name for name in trained_catalogs(self.model) if name in names_for(backend))
                for spec, spec_key in _catalog_union(backend, self.arch, names):
                    try:
                        check_compatible(problem, spec)
                    except SpecError:
                        continue
                    if be.supports(problem, spec):
                        specs.append(spec)
                        keys.append(spec_key)
            x = matrix(problem, specs, self.device)
            self._cache = {key: (specs, *self.model.predict_with_leaves(x))}
            self._index = {k: i for i, k in enumerate(keys)}
        return self._cache[key]

    def ranked(self, problem: GemmProblem, n: int = 1) -> list[tuple[KernelSpec, float]]:
        """The model's n best specs for problem with their predicted speedup over torch.matmul, best
        first (as proposed: split-K with the reduction the rules rank first): no measurement involved."""
        specs, mu, _ = self.candidates(problem)
        order = np.argsort(-mu, kind="stable")[:n]
        return [(self._reduced_first(problem, specs[i]), float(np.exp(mu[i]))) for i in order]

    def propose(self, problem: GemmProblem, history: Sequence[CandidateResult] = (), n: int = 8, *,
                pending: Sequence[KernelSpec] = ()) -> list[Proposal]:
        specs = self.candidates(problem)[0]
        if self.rules is None or not specs:
            mine = n if specs else 0
        else:
            mine = max(1, n // 2)
        ruled = self.rules.propose(problem, history, n - mine, pending=pending) \
            if self.rules is not None and n > mine else []
        return self._learned(problem, history, mine, pending) + ruled

    def _learned(self, problem: GemmProblem, history: Sequence[CandidateResult], n: int,
                 pending: Sequence[KernelSpec] = ()) -> list[Proposal]:
        specs, mu, leaves = self.candidates(problem)
        if not specs or n < 1:
            return []
        index = self._index  # of the problem's candidates, built with them
        measured, y, tried = [], [], set()
        for r in history:
            i = index.get(_kernel_key(r.spec))
            if i is None:
                continue
            tried.add(i)
            ms = r.kernel_ms() if r.ok else None
            if ms:
                measured.append(i)
                y.append(-float(np.log(ms)))  # log speed; the shape's torch time is the constant left out
        tried -= set(measured)
        tried |= {i for s in pending if (i := index.get(_kernel_key(s))) is not None}  # under measurement
        sd = float(self.model.info.get("residual_sd", 0.3))
        picks = bandit.choose(mu, leaves, measured, y, n, prior_sd=sd, beta=self.beta, exclude=sorted(tried))
        why = f"best prediction of the model {self.model_source}" if not measured else \
            f"upper bound after {len(measured)} measured"
        return [Proposal(spec=self._reduced_first(problem, specs[i]), source=self.name,
                         reasoning=f"{why}: predicted {np.exp(mu[i]):.2f}x torch.matmul") for i in picks]

    def _reduced_first(self, problem: GemmProblem, spec: KernelSpec) -> KernelSpec:
        """spec with the split-K reduction the rules' model ranks first on this arch (the catalogs hold the
        workspace's; Triton's serial twin on sm_90a gives the same bits in one launch, and measured ahead), where
        the problem allows it; the model cannot tell them apart (no feature does), and _kernel_key takes both for
        one."""
        if spec.decomposition != "split_k" or spec.split_k < 2:
            return spec
        first = split_k_reduction_first(spec.backend, self.arch)
        if first is None or first == spec.split_k_reduction:
            return spec
        twin = spec.model_copy(update={"split_k_reduction": first})
        try:
            check_compatible(problem, twin)
        except SpecError:
            return spec
        return twin


@lru_cache(maxsize=None)
def _catalog_union(backend: str, arch: str, names: tuple[str, ...]) -> tuple[tuple[KernelSpec, str], ...]:
    """The specs of the named catalogs with their kernel keys, each spec once (catalogs may share
    specs): the same for every problem, so a search of a new shape does not build it again."""
    union = {s.key(): s for name in names for s in catalog(backend, arch, name)}
    return tuple((s, _kernel_key(s)) for s in union.values())


def _kernel_key(spec: KernelSpec) -> str:
    """A spec's key whatever its shape specialization and split-K reduction: a search measures a catalog
    spec as the backend's own (static) kernel, and with the reduction the rules rank first
    (LearnedProposer._reduced_first), and that measurement still tells about the catalog spec (whose
    reduction is the workspace's). A key, not a spec to run: not validated (a backend may declare no
    shape-generic kernels)."""
    update = {}
    if spec.shape_specialization != "dynamic":
        update["shape_specialization"] = "dynamic"
    if spec.decomposition == "split_k" and spec.split_k_reduction != CATALOG_SPLIT_K_REDUCTION:
        update["split_k_reduction"] = CATALOG_SPLIT_K_REDUCTION
    return spec.model_copy(update=update).key() if update else spec.key()
