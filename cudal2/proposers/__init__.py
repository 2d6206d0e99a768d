"""Proposers: turn a problem and what was measured so far into new KernelSpecs.

    get_proposer("rules", backends=("triton",), arch="sm_90a")   # expert heuristics, offline
    get_proposer("llm", model="...", backends=("triton",))        # an LLM, structured output; when
                                                                  # its endpoint fails: rules, then Optuna
    get_proposer("llm", model="...", fatal=True)                  # endpoint failures raise (LLMError)
    get_proposer("random", seed=0)                                # the baseline to beat
    get_proposer("auto", arch="sm_90a")                           # learned where a cost model exists
                                                                  # for the arch, else rules
    get_proposer("learned", arch="sm_90a")                        # a cost model trained on measured
                                                                  # speed, with a bandit over it
    get_proposer("llm+learned", model="...")                      # the LLM, shown the model's best,
                                                                  # and the bandit, half a batch each

Modules are imported on first use, so that `import cudal2` never pulls in httpx.
"""

from __future__ import annotations

import importlib

from cudal2.proposers.proposal import Proposal, Proposer, ProposerUnavailable
from .fallback import FallbackProposer
from .model_files import find_model
from ..ir.hardware import DEFAULT_ARCH

PROPOSERS: dict[str, str] = {
    "rules": "cudal2.proposers.rules:RulesProposer",
    "llm": "cudal2.proposers.llm:LLMProposer",
    "random": "cudal2.proposers.random:RandomProposer",
    "learned": "cudal2.proposers.learned:LearnedProposer",
    "llm+learned": "cudal2.proposers.mixed:LlmWithLearned",
}


def available_proposers() -> list[str]:
    return sorted(PROPOSERS)


# Proposers that depend on an outside service, and the proposer asked when it fails.
DEFAULT_FALLBACK = {"llm": "rules", "llm+learned": "learned"}


def default_proposer(arch: str) -> str:
    """"learned" where a cost model for arch is at hand (one ships for sm_90a; $CUDAL2_COST_MODEL
    or the user's model for the live GPU is another: model_files.find_model), else "rules". What "auto",
    the default of cudal2.search and the CLI, means."""
    return "learned" if find_model(arch) is not None else "rules"


def get_proposer(name: str, *, fatal: bool = False, fallback: str | Proposer | None = "default",
                 warn=None, **kw) -> Proposer:
    """A new proposer by name; other keyword arguments go to its constructor.

    For a proposer with an outside service ("llm"), a failure of that service (after its own
    retries) gives one warning line (to `warn`, a callable taking the line; default: logging)
    and the proposals of `fallback` instead: by default the "rules" proposer; a name or a
    Proposer; None for no proposals, Optuna alone then. fatal=True: the failure raises (an
    LLMError, a ProposerUnavailable), for benchmarking the LLM itself."""
    if name == "auto":
        name = default_proposer(kw.get("arch", DEFAULT_ARCH))
    proposer = _construct(name, **kw)
    if name not in DEFAULT_FALLBACK or fatal:
        return proposer
    if fallback == "default":
        fallback = DEFAULT_FALLBACK[name]
    if isinstance(fallback, str):
        fallback = _construct(fallback, **{k: kw[k] for k in ("backends", "arch", "device") if k in kw})
    return FallbackProposer(proposer, fallback, warn=warn)


def _construct(name: str, **kw) -> Proposer:
    try:
        target = PROPOSERS[name]
    except KeyError:
        raise KeyError(f"unknown proposer {name!r}; available: {', '.join(available_proposers())}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)(**kw)


__all__ = ["PROPOSERS", "FallbackProposer", "Proposal", "Proposer", "ProposerUnavailable", "available_proposers",
           "default_proposer", "get_proposer"]
