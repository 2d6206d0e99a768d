"""A proposer that degrades instead of aborting: when the primary proposer's outside service (an
LLM endpoint) fails after its own retries, the search is told in one warning line and goes on
with another proposer's specs, or with none, leaving Optuna to fill the budget.

    FallbackProposer(llm, rules)   # `cudal2 search --proposer llm`: rules proposals, then Optuna
    FallbackProposer(llm, None)    # the llm arm of `cudal2 compare`: Optuna alone, failures counted
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable, Sequence

from cudal2.bench.results import CandidateResult
from cudal2.ir import GemmProblem, KernelSpec
from cudal2.proposers.proposal import Proposal, Proposer, ProposerUnavailable, propose_excluding

log = logging.getLogger("cudal2.search")

REASON_CHARS = 300  # the warning stays one readable line, however long the server's answer


class FallbackProposer:
    """Proposals of `primary`; when it raises ProposerUnavailable, one warning line (the
    endpoint, the reason, what happens next) goes to `warn` (default: the "cudal2.search"
    logger) and the proposals of `fallback` are returned instead, each with the source
    "<fallback> (fallback: <primary> failed)". fallback=None returns no proposals, so Optuna
    alone fills that search. Each failure is kept in `failures`; every propose() asks the
    primary first again (an outage may be over by the next shape of a sweep)."""

    def __init__(self, primary: Proposer, fallback: Proposer | None = None, *,
                 warn: Callable[[str], None] | None = None):
        self.primary = primary
        self.fallback = fallback
        self.name = primary.name
        self.failures: list[ProposerUnavailable] = []
        self._warn = warn or log.warning

    def __getattr__(self, attr: str):
        # What only the primary has (an LLM proposer's rejected, last_analysis, turns, config)
        # reads through, so that get_proposer("llm") keeps the LLM proposer's own interface.
        if attr == "primary":  # not set yet (copy, pickle): no recursion
            raise AttributeError(attr)
        return getattr(self.primary, attr)

    def __repr__(self) -> str:
        return f"FallbackProposer({self.primary!r}, fallback={self.fallback.name if self.fallback else None!r})"

    def propose(self, problem: GemmProblem, history: Sequence[CandidateResult], n: int, *,
                pending: Sequence[KernelSpec] = ()) -> list[Proposal]:
        try:
            return propose_excluding(self.primary, problem, history, n, pending)
        except ProposerUnavailable as e:
            self.failures.append(e)
            self._warn(failure_line(self.primary.name, e, self.next_step()))
        if self.fallback is None:
            return []
        marked = f"(fallback: {self.primary.name} failed)"
        return [replace(p, source=f"{p.source or self.fallback.name} {marked}")
                for p in propose_excluding(self.fallback, problem, history, n, pending)]

    def next_step(self) -> str:
        if self.fallback is None:
            return "no proposals this round; Optuna alone fills the budget"
        return f"falling back to {self.fallback.name} proposals, then Optuna"

    def close(self) -> None:
        for p in (self.primary, self.fallback):
            if hasattr(p, "close"):
                p.close()


def failure_line(name: str, error: ProposerUnavailable, next_step: str) -> str:
    """`<name> endpoint <url> failed (<reason>); <next step>`, on one line."""
    reason = error.reason if len(error.reason) <= REASON_CHARS else error.reason[:REASON_CHARS] + "..."
    where = f" {error.endpoint}" if error.endpoint else ""
    return f"{name} endpoint{where} failed ({reason}); {next_step}"
