"""The proposer interface: a proposer turns a problem and what has been measured so far into
new KernelSpecs, each with the reasoning that led to it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from ..bench.results import CandidateResult
from ..ir import GemmProblem, KernelSpec


@dataclass(frozen=True)
class Proposal:
    spec: KernelSpec
    reasoning: str = ""
    source: str = ""  # which proposer made it: "rules", "llm:<model>", "random", "rules (fallback: llm failed)"


class ProposerUnavailable(RuntimeError):
    """A proposer's outside service (an LLM endpoint) could not be used, after its own retries.
    The search can go on without it (see FallbackProposer). `endpoint` is safe to show: it holds
    no credentials; `reason` is one line."""

    def __init__(self, reason: str, endpoint: str = ""):
        self.reason = " ".join(reason.split())  # one line, whatever the server sent
        self.endpoint = endpoint
        super().__init__(f"{endpoint}: {self.reason}" if endpoint else self.reason)


class Proposer(Protocol):
    name: str

    def propose(self, problem: GemmProblem, history: Sequence[CandidateResult], n: int) -> list[Proposal]:
        """Up to n new, valid, distinct specs for problem, most promising first.
        history holds every earlier measured candidate for this problem (failed ones included)."""
        ...
