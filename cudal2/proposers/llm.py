"""The LLM proposer: an OpenAI-compatible endpoint or Anthropic's API writes a performance
analysis and KernelSpecs, constrained to the IR's JSON Schema.

One propose() is at most two model turns: the request, and - when the reply is not valid
JSON, breaks the schema, or holds a spec the validator or the backend refuses - one repair
turn that quotes the validation errors (SpecError names the field, value, limit and fix).
What is still invalid after that is dropped and kept in `rejected` with its reason. When the
endpoint refuses structured output (HTTP 400 naming response_format), the proposer falls
back, for good, to the schema spelled out in the prompt and bare JSON in the reply.

An endpoint that still fails after the client's retries (transport, HTTP status, a body that is
not JSON, a reply of the wrong shape) raises LLMError, a ProposerUnavailable: get_proposer("llm")
wraps this proposer in a FallbackProposer that warns and asks the rules proposer instead, unless
fatal=True.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from cudal2.bench.results import CandidateResult
from cudal2.ir import ARCHS, GemmProblem, KernelSpec, SpecError, check_compatible
from cudal2.ir.errors import short_repr
from cudal2.proposers.proposal import Proposal, seen_key, seen_keys
from . import prompt, space
from .llm_client import ChatClient, LLMConfig, LLMError, Reply, StructuredOutputUnsupported
from ..ir.hardware import DEFAULT_ARCH
from cudal2.codegen import get_backend

log = logging.getLogger("cudal2.llm")


@dataclass(frozen=True)
class Rejection:
    """A reply, or one spec of a reply, that could not be used."""

    attempt: int  # 1: the first reply; 2: the reply to the repair request
    reason: str
    item: str  # the offending spec as the model wrote it, or an excerpt of the whole reply


class LLMProposer:
    """Keyword arguments not given come from the environment (see LLMConfig.from_env).

    backends / arch: what to propose for; gpu_name: named in the prompt when known;
    baselines: {name: kernel ms} to show the model (e.g. {"torch.matmul": 0.123});
    structured: start with structured output (falls back by itself when refused); advisor: a
    proposer with ranked(problem, n) (the learned one), whose best specs go into the prompt."""

    name = "llm"

    def __init__(self, backends: Sequence[str] = ("triton",), arch: str = DEFAULT_ARCH, *,
                 provider: str | None = None, model: str | None = None, base_url: str | None = None,
                 api_key: str | None = None, gpu_name: str | None = None,
                 baselines: dict[str, float] | None = None, structured: bool = True,
                 n_best: int = 4, n_worst: int = 2, n_failures: int = 4, advisor: Any = None, n_advice: int = 6,
                 device: Any = None,
                 sleep: Callable[[float], None] = time.sleep, **client_options: Any):
        if isinstance(backends, str):
            backends = (backends,)
        if arch not in ARCHS:
            raise ValueError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}")
        self.backends = [b for b in backends if space.backend_runs_on(get_backend(b).capabilities, arch)]
        if not self.backends:
            raise ValueError(f"none of the backends {list(backends)} supports {arch}; pick another arch or backend")
        self.arch = arch
        self.config = LLMConfig.from_env(provider, model=model, base_url=base_url, api_key=api_key, **client_options)
        self.redact = self.config.redactor()  # what the proposer stores or prints carries no secret
        self.client = ChatClient(self.config, sleep=sleep, redact=self.redact)
        self.gpu_name = gpu_name or (device.name if device is not None and not device.name.startswith("reference")
                                     else None)
        self.baselines = dict(baselines or {})
        self.structured = structured
        self.n_best, self.n_worst, self.n_failures = n_best, n_worst, n_failures
        self.advisor, self.n_advice = advisor, n_advice
        self.rejected: list[Rejection] = []  # cumulative over propose() calls
        self.last_analysis = ""
        self.turns = 0  # model turns so far

    @property
    def source(self) -> str:
        return f"llm:{self.config.model}"

    def __repr__(self) -> str:
        c = self.config
        return (f"LLMProposer(provider={c.provider!r}, model={c.model!r}, base_url={c.base_url!r}, "
                f"backends={self.backends}, arch={self.arch!r}, structured={self.structured})")

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self.client.close()

    # ---- public ---------------------------------------------------------------------------------
    def propose(self, problem: GemmProblem, history: Sequence[CandidateResult] = (), n: int = 8, *,
                pending: Sequence[KernelSpec] = ()) -> list[Proposal]:
        seen = seen_keys(history, pending)
        schema = prompt.reply_schema(self.backends, self.arch, n)
        messages = [{"role": "user", "content": self._user_prompt(problem, history, n, schema, pending)}]
        try:
            reply = self._turn(messages, schema)
        except StructuredOutputUnsupported as e:
            log.info("endpoint refused structured output; falling back to JSON in the prompt (%s)", e)
            self.structured = False
            messages = [{"role": "user", "content": self._user_prompt(problem, history, n, schema, pending)}]
            reply = self._turn(messages, schema)

        specs, errors, analysis = self._check(problem, reply, seen, attempt=1)
        if errors:
            messages += self.client.followup(reply, prompt.repair_prompt(errors, n, not self.structured))
            try:
                again = self._turn(messages, schema)
            except LLMError as e:  # keep what the first reply gave
                self.rejected.append(Rejection(2, f"repair request failed: {e}", ""))
            else:
                more, _errors, analysis2 = self._check(problem, again, seen, attempt=2,
                                                       proposed={seen_key(s) for s in specs})
                specs += more
                analysis = analysis2 or analysis
        self.last_analysis = analysis
        return [Proposal(spec=s, reasoning=analysis, source=self.source) for s in specs[:n]]

    # ---- internals ------------------------------------------------------------------------------
    def _user_prompt(self, problem, history, n, schema, pending=()) -> str:
        return prompt.user_prompt(problem, history, n, self.backends, self.arch, gpu_name=self.gpu_name,
                                  pending=pending, n_best=self.n_best, n_worst=self.n_worst, n_failures=self.n_failures,
                                  baselines=self.baselines, schema=None if self.structured else schema,
                                  predictions=self.advisor.ranked(problem, self.n_advice) if self.advisor else None)

    def _turn(self, messages: list[dict], schema: dict) -> Reply:
        self.turns += 1
        return self.client.complete(prompt.SYSTEM, messages, schema if self.structured else None,
                                    prompt.SCHEMA_NAME)

    def _check(self, problem: GemmProblem, reply: Reply, seen: set[str], attempt: int,
               proposed: set[str] = frozenset()) -> tuple[list[KernelSpec], list[str], str]:
        """Valid new specs of a reply, the error of each invalid item, and the analysis.
        seen: keys already measured (an error to repeat); proposed: keys already taken from an
        earlier reply of this propose() (dropped quietly)."""
        data = reply.data
        if data is None:
            return self._reject_all(attempt, reply.parse_error or "the reply is not valid JSON", reply.text)
        if not isinstance(data, dict) or not isinstance(data.get("specs"), list):
            return self._reject_all(attempt, 'the reply must be a JSON object {"analysis": "...", "specs": [...]}',
                                    reply.text)
        # the model's own words are stored (the study journal) and printed: no secret in any form
        analysis = self.redact(data["analysis"]) if isinstance(data.get("analysis"), str) else ""
        good: list[KernelSpec] = []
        errors: list[str] = []
        keys = set(seen) | set(proposed)
        for i, item in enumerate(data["specs"]):
            why = ""
            if not isinstance(item, dict):
                why = "a spec must be a JSON object of KernelSpec fields"
            else:
                item = {"backend": self.backends[0], "arch": self.arch, **item}
                why = self._invalid(problem, item)
            if not why:
                spec = KernelSpec.from_dict(item)
                if seen_key(spec) in keys:
                    why = ("repeats a spec that was already measured or proposed; propose a different one"
                           if seen_key(spec) in seen else "")
                    if not why:
                        continue  # a duplicate inside the reply: drop quietly
                else:
                    keys.add(seen_key(spec))
                    good.append(spec)
                    continue
            errors.append(f"specs[{i}]: {why}")
            self.rejected.append(Rejection(attempt, self.redact(why), self.redact(json.dumps(item))[:500]))
        return good, errors, analysis

    def _reject_all(self, attempt: int, why: str, text: str):
        self.rejected.append(Rejection(attempt, self.redact(why), self.redact(text)[:500]))
        return [], [why], ""

    def _invalid(self, problem: GemmProblem, item: dict) -> str:
        if item.get("backend") not in self.backends:
            return f"backend={short_repr(item.get('backend'))}: use one of {self.backends}"
        if item.get("arch") != self.arch:
            return f"arch={short_repr(item.get('arch'))}: the target is {self.arch!r}"
        try:
            spec = KernelSpec.from_dict(item)
            check_compatible(problem, spec)
        except SpecError as e:
            return str(e)
        spec, why = space.validate(problem, item)
        return why
