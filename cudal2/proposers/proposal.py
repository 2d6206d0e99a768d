"""The proposer interface: a proposer turns a problem and what has been measured so far into
new KernelSpecs, each with the reasoning that led to it."""

from __future__ import annotations

import inspect
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

    def propose(self, problem: GemmProblem, history: Sequence[CandidateResult], n: int, *,
                pending: Sequence[KernelSpec] = ()) -> list[Proposal]:
        """Up to n new, valid, distinct specs for problem, most promising first.
        history holds every earlier measured candidate for this problem (failed ones included);
        pending, the specs under measurement now (a search that looks ahead asks for the next
        batch while one is timed): they are not new either. A proposer without the keyword is
        asked for that many more, and its repeats are dropped."""
        ...


def seen_key(spec: KernelSpec) -> str:
    """The key under which a proposer tells a spec from those measured or pending: a search measures
    a spec that leaves the shape specialization to its backend ("auto") as its shape-generic kernel
    (Refiner.kernel_of), so the two are one spec to a proposer."""
    if spec.shape_specialization != "auto":
        return spec.key()
    # a key, not a spec to run: no validation (a backend may have no shape-generic kernels)
    return spec.model_copy(update={"shape_specialization": "dynamic"}).key()


def seen_keys(history: Sequence[CandidateResult], pending: Sequence[KernelSpec] = ()) -> set[str]:
    return {seen_key(r.spec) for r in history} | {seen_key(s) for s in pending}


def takes_pending(proposer) -> bool:
    """Whether proposer.propose accepts the `pending` keyword (a proposer written to the older
    interface does not)."""
    try:
        params = inspect.signature(proposer.propose).parameters
    except (TypeError, ValueError):
        return False
    return "pending" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def propose_excluding(proposer, problem: GemmProblem, history: Sequence[CandidateResult], n: int,
                      pending: Sequence[KernelSpec] = ()) -> list[Proposal]:
    """proposer's next n proposals, none of them a pending spec: through its `pending` keyword, or
    for a proposer without it, n + len(pending) asked and the pending ones dropped."""
    if not pending:
        return proposer.propose(problem, history, n)
    if takes_pending(proposer):
        return proposer.propose(problem, history, n, pending=pending)
    busy = {seen_key(s) for s in pending}
    return [p for p in proposer.propose(problem, history, n + len(pending)) if seen_key(p.spec) not in busy][:n]
