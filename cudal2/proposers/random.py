"""Uniform random valid specs from a backend's declared search space: the baseline every
smarter proposer has to beat. Seeded, so a comparison can be repeated exactly."""

from __future__ import annotations

import random as _random
from typing import Sequence

from cudal2.bench.results import CandidateResult
from cudal2.ir import ARCHS, GemmProblem, KernelSpec
from cudal2.proposers.proposal import Proposal, seen_key, seen_keys
from . import space
from ..ir.hardware import DEFAULT_ARCH
from cudal2.codegen import get_backend

# Fields the sampler leaves at their base value: they only mean something together with
# warp specialization, which a backend opts into through its capabilities.
_FIXED = {"backend", "arch", "producer_registers", "consumer_registers", "split_k"}
MAX_TRIES_PER_SPEC = 200


class RandomProposer:
    """Each field drawn uniformly from its domain (IR values narrowed by the backend's
    Capabilities on arch); invalid combinations are rejected and drawn again, so what comes
    out is uniform over the valid specs. split_k is drawn from 2..K/block_k when the
    decomposition is split_k."""

    name = "random"

    def __init__(self, backends: Sequence[str] = ("triton",), arch: str = DEFAULT_ARCH, *, seed: int = 0,
                 device=None):  # device: taken for a uniform interface; a random draw needs none
        if isinstance(backends, str):
            backends = (backends,)
        if arch not in ARCHS:
            raise ValueError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}")
        self.arch = arch
        self.backends = [b for b in backends if space.backend_runs_on(get_backend(b).capabilities, arch)]
        if not self.backends:
            raise ValueError(f"none of the backends {list(backends)} supports {arch}; pick another arch or backend")
        self.seed = seed
        self.rng = _random.Random(seed)

    def __repr__(self) -> str:
        return f"RandomProposer(backends={self.backends}, arch={self.arch!r}, seed={self.seed})"

    def propose(self, problem: GemmProblem, history: Sequence[CandidateResult] = (), n: int = 8, *,
                pending: Sequence[KernelSpec] = ()) -> list[Proposal]:
        seen = seen_keys(history, pending)
        out: list[Proposal] = []
        for _ in range(n * MAX_TRIES_PER_SPEC):
            if len(out) >= n:
                break
            backend = self.rng.choice(self.backends)
            caps = get_backend(backend).capabilities
            base = space.base_fields(backend, caps, self.arch)
            fields = dict(base)
            for name in sorted(fields):
                if name in _FIXED:
                    continue
                d = space.domain(caps, name, self.arch)
                if d:
                    fields[name] = self.rng.choice(d)
            if fields["decomposition"] != "split_k":  # a reduction without K slices is the same kernel
                fields["split_k_reduction"] = base["split_k_reduction"]
            else:
                k_blocks = -(-problem.k // fields["block_k"])
                splits = [s for s in (space.domain(caps, "split_k", self.arch) or ()) if 2 <= s <= k_blocks]
                if not splits:
                    continue
                fields["split_k"] = self.rng.choice(splits)
            spec, _why = space.validate(problem, fields)
            if spec is None or seen_key(spec) in seen:
                continue
            seen.add(seen_key(spec))
            out.append(Proposal(spec=spec, reasoning=f"uniform random draw (seed {self.seed})", source=self.name))
        return out
