"""A small chat client over httpx for the two wire formats cudal2 speaks: OpenAI-compatible
chat completions (OpenAI, vLLM, SGLang, llama.cpp, Ollama, OpenRouter, ...) and Anthropic's
messages API. Structured output is requested the way each one defines it:

- OpenAI: `response_format = {"type": "json_schema", "json_schema": {"name", "schema"}}`;
- Anthropic: one tool whose `input_schema` is the schema, forced with `tool_choice`.

Retries 429/5xx (honouring Retry-After / retry-after-ms, bounded) and timeouts with
exponential backoff. The API key travels only in the request header: it is not part of any
repr, log line or exception message (every message passes through `_redact`).
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

log = logging.getLogger("cudal2.llm")

Provider = Literal["openai", "anthropic"]
DEFAULT_BASE_URL = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
ANTHROPIC_VERSION = "2023-06-01"
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
# words in a 400 reply that say the endpoint does not do structured output
STRUCTURED_OUTPUT_WORDS = ("response_format", "json_schema", "tool_choice", "tools")


class LLMError(RuntimeError):
    """The endpoint could not be used (after retries, where retrying made sense)."""


class StructuredOutputUnsupported(LLMError):
    """HTTP 400 that names the structured-output parameter: retry with plain JSON."""


@dataclass(frozen=True)
class LLMConfig:
    provider: Provider
    base_url: str
    model: str
    api_key: str = field(default="", repr=False)
    timeout_s: float = 120.0
    max_retries: int = 4  # extra attempts after the first
    backoff_s: float = 1.0  # first backoff; doubles per attempt
    max_wait_s: float = 60.0  # cap on one wait (Retry-After included)
    max_tokens: int = 8192
    temperature: float | None = None

    @classmethod
    def from_env(cls, provider: str | None = None, *, model: str | None = None, base_url: str | None = None,
                 api_key: str | None = None, **overrides: Any) -> "LLMConfig":
        """Fill what was not given from the environment:
        CUDAL2_LLM_PROVIDER (openai | anthropic; default openai), CUDAL2_LLM_BASE_URL,
        CUDAL2_LLM_MODEL, CUDAL2_LLM_API_KEY, else OPENAI_API_KEY / ANTHROPIC_API_KEY,
        CUDAL2_LLM_TIMEOUT (seconds)."""
        env = os.environ
        provider = (provider or env.get("CUDAL2_LLM_PROVIDER") or "openai").lower()
        if provider not in DEFAULT_BASE_URL:
            raise ValueError(f"unknown LLM provider {provider!r}; use 'openai' (any OpenAI-compatible "
                             f"endpoint) or 'anthropic' (set CUDAL2_LLM_PROVIDER or pass provider=)")
        model = model or env.get("CUDAL2_LLM_MODEL")
        if not model:
            raise ValueError("no LLM model given: pass model= or set CUDAL2_LLM_MODEL "
                             "(e.g. gpt-4.1, claude-sonnet-4-5, or the name a local server serves)")
        base_url = (base_url or env.get("CUDAL2_LLM_BASE_URL") or DEFAULT_BASE_URL[provider]).rstrip("/")
        if api_key is None:
            fallback = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
            api_key = env.get("CUDAL2_LLM_API_KEY") or env.get(fallback) or ""
        if "timeout_s" not in overrides and env.get("CUDAL2_LLM_TIMEOUT"):
            overrides["timeout_s"] = float(env["CUDAL2_LLM_TIMEOUT"])
        return cls(provider=provider, base_url=base_url, model=model, api_key=api_key, **overrides)


@dataclass
class Reply:
    text: str  # what the model wrote (for a tool call: the tool input as JSON)
    data: Any  # the parsed JSON object, or None when the text is not JSON
    message: dict  # the assistant turn, in the provider's format, for a follow-up
    tool_use_id: str | None = None
    parse_error: str = ""


class ChatClient:
    def __init__(self, config: LLMConfig, *, sleep: Callable[[float], None] = time.sleep):
        import httpx  # lazily: `import cudal2` must not need it

        self.config = config
        self._sleep = sleep
        self._http = httpx.Client(timeout=httpx.Timeout(config.timeout_s))
        self.waits: list[float] = []  # seconds slept before each retry (for inspection)

    def __repr__(self) -> str:
        c = self.config
        return f"ChatClient(provider={c.provider!r}, base_url={c.base_url!r}, model={c.model!r})"

    def close(self) -> None:
        self._http.close()

    # ---- one turn ---------------------------------------------------------------------------
    def complete(self, system: str, messages: list[dict], schema: dict | None, schema_name: str = "reply") -> Reply:
        """Send the conversation; with a schema, ask for structured output that follows it."""
        if self.config.provider == "anthropic":
            return self._anthropic(system, messages, schema, schema_name)
        return self._openai(system, messages, schema, schema_name)

    def followup(self, reply: Reply, text: str) -> list[dict]:
        """The turns to append after `reply` to tell the model `text` (e.g. validation errors)."""
        if self.config.provider == "anthropic" and reply.tool_use_id:
            return [reply.message, {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": reply.tool_use_id, "content": text, "is_error": True}]}]
        return [reply.message, {"role": "user", "content": text}]

    # ---- wire formats -------------------------------------------------------------------------
    def _openai(self, system: str, messages: list[dict], schema: dict | None, schema_name: str) -> Reply:
        c = self.config
        body: dict[str, Any] = {"model": c.model, "messages": [{"role": "system", "content": system}, *messages]}
        if schema is not None:
            # strict mode would require every property in `required`; the IR has defaults
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": schema_name, "schema": schema, "strict": False}}
        if c.temperature is not None:
            body["temperature"] = c.temperature
        headers = {"Authorization": f"Bearer {c.api_key}"} if c.api_key else {}
        out = self._post(f"{c.base_url}/chat/completions", body, headers)
        try:
            msg = out["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise LLMError(f"unexpected chat completion: {self._redact(json.dumps(out)[:300])}") from None
        if msg.get("refusal"):
            raise LLMError(f"the model refused: {self._redact(str(msg['refusal'])[:300])}")
        text = msg.get("content") or ""
        data, err = parse_json(text)
        return Reply(text=text, data=data, message={"role": "assistant", "content": text}, parse_error=err)

    def _anthropic(self, system: str, messages: list[dict], schema: dict | None, schema_name: str) -> Reply:
        c = self.config
        body: dict[str, Any] = {"model": c.model, "max_tokens": c.max_tokens, "system": system, "messages": messages}
        if schema is not None:
            body["tools"] = [{"name": schema_name, "description": "Submit the performance analysis and the kernel specs.",
                              "input_schema": schema}]
            body["tool_choice"] = {"type": "tool", "name": schema_name}
        if c.temperature is not None:
            body["temperature"] = c.temperature
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if c.api_key:
            headers["x-api-key"] = c.api_key
        out = self._post(f"{c.base_url}/v1/messages", body, headers)
        blocks = out.get("content") if isinstance(out, dict) else None
        if not isinstance(blocks, list):
            raise LLMError(f"unexpected messages reply: {self._redact(json.dumps(out)[:300])}")
        message = {"role": "assistant", "content": blocks}
        for b in blocks:
            if b.get("type") == "tool_use":
                return Reply(text=json.dumps(b.get("input")), data=b.get("input"), message=message,
                             tool_use_id=b.get("id"))
        text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        data, err = parse_json(text)
        return Reply(text=text, data=data, message=message, parse_error=err)

    # ---- transport ----------------------------------------------------------------------------
    def _post(self, url: str, body: dict, headers: dict) -> Any:
        import httpx

        c = self.config
        last = ""
        for attempt in range(c.max_retries + 1):
            wait = c.backoff_s * 2**attempt
            log.debug("POST %s (attempt %d of %d)", url, attempt + 1, c.max_retries + 1)
            try:
                resp = self._http.post(url, json=body, headers=headers)
            except httpx.TimeoutException:
                last = f"no reply within {c.timeout_s:g} s"
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {self._redact(str(e))}"
            else:
                if resp.status_code == 200:
                    try:
                        return resp.json()
                    except ValueError:
                        raise LLMError(f"{url} answered 200 with a body that is not JSON: "
                                       f"{self._redact(resp.text[:300])}") from None
                detail = self._redact(resp.text[:500])
                if resp.status_code in RETRY_STATUSES:
                    last = f"HTTP {resp.status_code}: {detail}"
                    asked = _retry_after(resp.headers)
                    wait = asked if asked is not None else wait
                elif resp.status_code == 400 and any(w in resp.text for w in STRUCTURED_OUTPUT_WORDS) \
                        and ("response_format" in body or "tools" in body):
                    raise StructuredOutputUnsupported(f"{url} rejected structured output (HTTP 400): {detail}")
                else:
                    hint = " (check the API key)" if resp.status_code in (401, 403) else ""
                    raise LLMError(f"{url} answered HTTP {resp.status_code}{hint}: {detail}")
            if attempt == c.max_retries:
                break
            wait = min(max(wait, 0.0), c.max_wait_s)
            log.info("LLM request failed (%s); retrying in %.1f s", last, wait)
            self.waits.append(wait)
            self._sleep(wait)
        raise LLMError(f"{url}: gave up after {c.max_retries + 1} attempt(s); last: {last}")

    def _redact(self, text: str) -> str:
        key = self.config.api_key
        return text.replace(key, "***") if key else text


def _retry_after(headers) -> float | None:
    """Seconds to wait from retry-after-ms, or Retry-After as seconds or an HTTP date."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return None if when is None else max(0.0, when.timestamp() - time.time())


def parse_json(text: str) -> tuple[Any, str]:
    """(object, "") from a reply that is JSON, possibly fenced or wrapped in prose; else (None, why)."""
    s = text.strip()
    if s.startswith("```"):
        s = s.split("\n", 1)[1] if "\n" in s else ""
        s = s.rsplit("```", 1)[0]
    try:
        return json.loads(s), ""
    except json.JSONDecodeError as e:
        first = f"{e.msg} at line {e.lineno} column {e.colno}"
    start, end = s.find("{"), s.rfind("}")
    if 0 <= start < end:
        try:
            return json.loads(s[start:end + 1]), ""
        except json.JSONDecodeError:
            pass
    return None, f"the reply is not valid JSON ({first})"
