"""`llm+learned`: the LLM and the learned proposer in one search.

Each batch, the LLM writes about half of it. It sees the measured history, as always, and the
cost model's best specs with their predicted speedups. The learned proposer fills the rest by
its bandit, without repeating the LLM's specs. When the LLM's endpoint fails, the search's
fallback (the learned proposer alone) takes the batch, as for `llm` alone.
"""

from __future__ import annotations

from typing import Sequence

from cudal2.bench.results import CandidateResult
from cudal2.ir import GemmProblem, KernelSpec
from cudal2.proposers.proposal import Proposal
from ..ir.hardware import DEFAULT_ARCH
from .llm import LLMProposer


class LlmWithLearned:
    name = "llm+learned"
    adaptive = True  # both halves learn from each measured batch

    def __init__(self, backends: Sequence[str] = ("triton",), arch: str = DEFAULT_ARCH, *, cost_model=None,
                 device=None, **llm_options):
        from .learned import LearnedProposer

        self.learned = LearnedProposer(backends, arch, model=cost_model, device=device)  # model= is the LLM's
        self.llm = LLMProposer(backends, arch, advisor=self.learned, device=device, **llm_options)

    def __getattr__(self, attr: str):
        # what only the LLM proposer has (rejected, last_analysis, turns, config) reads through
        if attr == "llm":
            raise AttributeError(attr)
        return getattr(self.llm, attr)

    def propose(self, problem: GemmProblem, history: Sequence[CandidateResult] = (), n: int = 8, *,
                pending: Sequence[KernelSpec] = ()) -> list[Proposal]:
        # an endpoint failure propagates
        written = self.llm.propose(problem, history, max(1, n // 2), pending=pending)
        taken = {p.spec.key() for p in written}
        rest = [p for p in self.learned.propose(problem, history, n + len(written), pending=pending)
                if p.spec.key() not in taken]
        return (written + rest)[:n]

    def close(self) -> None:
        self.llm.close()
