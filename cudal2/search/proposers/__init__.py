"""Proposers: turn a problem and what was measured so far into new KernelSpecs.

    get_proposer("rules", backends=("triton",), arch="sm_90a")   # expert heuristics, offline
    get_proposer("llm", model="...", backends=("triton",))        # an LLM, structured output
    get_proposer("random", seed=0)                                # the baseline to beat

Modules are imported on first use, so that `import cudal2` never pulls in httpx.
"""

from __future__ import annotations

import importlib

from ..proposal import Proposal, Proposer

PROPOSERS: dict[str, str] = {
    "rules": "cudal2.search.proposers.rules:RulesProposer",
    "llm": "cudal2.search.proposers.llm:LLMProposer",
    "random": "cudal2.search.proposers.random:RandomProposer",
}


def available_proposers() -> list[str]:
    return sorted(PROPOSERS)


def get_proposer(name: str, **kw) -> Proposer:
    """A new proposer by name; keyword arguments go to its constructor."""
    try:
        target = PROPOSERS[name]
    except KeyError:
        raise KeyError(f"unknown proposer {name!r}; available: {', '.join(available_proposers())}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)(**kw)


__all__ = ["PROPOSERS", "Proposal", "Proposer", "available_proposers", "get_proposer"]
