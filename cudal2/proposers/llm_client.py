"""A small chat client over httpx for the two wire formats cudal2 speaks: OpenAI-compatible
chat completions (OpenAI, vLLM, SGLang, llama.cpp, Ollama, OpenRouter, ...) and Anthropic's
messages API. Structured output is requested the way each one defines it:

- OpenAI: `response_format = {"type": "json_schema", "json_schema": {"name", "schema"}}`;
- Anthropic: one tool whose `input_schema` is the schema, forced with `tool_choice`.

Retries 429/5xx (honouring Retry-After / retry-after-ms, bounded) and timeouts with
exponential backoff; what still fails is an LLMError (a ProposerUnavailable: the search can go
on without the LLM). Secrets - the API key and a `user:pass@` in the base URL - are held as
pydantic SecretStr, taken out of the URL, and put on a request only as it is sent (`_authorize`).
They are in no repr, log line or exception message (every message passes through `_redact`).
"""

from __future__ import annotations

import base64
import email.utils
import json
import logging
import os
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import SecretStr

from cudal2.redact import Redactor
from cudal2.settings import settings
from cudal2.proposers.proposal import ProposerUnavailable

log = logging.getLogger("cudal2.llm")

Provider = Literal["openai", "anthropic"]
DEFAULT_BASE_URL = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
ANTHROPIC_VERSION = "2023-06-01"
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
# words in a 400 reply that say the endpoint does not do structured output
STRUCTURED_OUTPUT_WORDS = ("response_format", "json_schema", "tool_choice", "tools")


class LLMError(ProposerUnavailable):
    """The endpoint could not be used (after retries, where retrying made sense)."""


class StructuredOutputUnsupported(LLMError):
    """HTTP 400 that names the structured-output parameter: retry with plain JSON."""


def split_credentials(url: str) -> tuple[str, str, str]:
    """(the URL without its `user:pass@`, user, password); user and password are "" if absent."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, "", ""
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=host)), unquote(user), unquote(password)


def basic_credentials(user: str, password: str) -> str:
    """The token of an HTTP basic `Authorization` header."""
    return base64.b64encode(f"{user}:{password}".encode()).decode()


@dataclass(frozen=True)
class LLMConfig:
    """Where and how to ask. A base URL given with `user:pass@` is kept without them; they go
    in `url_user` / `url_password` and are sent as HTTP basic auth (as httpx would have)."""

    provider: Provider
    base_url: str
    model: str
    api_key: SecretStr = field(default=SecretStr(""), repr=False)  # a plain str is converted
    url_user: str = field(default="", repr=False)
    url_password: SecretStr = field(default=SecretStr(""), repr=False)
    timeout_s: float = 120.0
    max_retries: int = 4  # extra attempts after the first
    backoff_s: float = 1.0  # first backoff; doubles per attempt
    max_wait_s: float = 60.0  # cap on one wait (Retry-After included)
    max_tokens: int = 8192
    temperature: float | None = None

    def __post_init__(self):
        if not isinstance(self.api_key, SecretStr):
            object.__setattr__(self, "api_key", SecretStr(self.api_key or ""))
        if not isinstance(self.url_password, SecretStr):
            object.__setattr__(self, "url_password", SecretStr(self.url_password or ""))
        url, user, password = split_credentials(self.base_url)
        if user or password:
            object.__setattr__(self, "base_url", url)
            object.__setattr__(self, "url_user", user)
            object.__setattr__(self, "url_password", SecretStr(password))

    def secrets(self) -> list[str]:
        """The secrets of this config as written: the key, the URL's password, user:password (the
        Basic token's content). A user name shorter than 4 characters is left out: replacing it would
        mangle ordinary words, and a user name alone grants nothing. redactor() removes each of them
        in every form (cudal2.redact.forms)."""
        key, password, user = self.api_key.get_secret_value(), self.url_password.get_secret_value(), self.url_user
        out = {key}
        if password:
            out |= {password, f"{user}:{password}", basic_credentials(user, password)}
        if len(user) >= 4:
            out.add(user)
        return sorted((s for s in out if s), key=len, reverse=True)

    def redactor(self) -> Redactor:
        return Redactor(self.secrets())

    @classmethod
    def from_env(cls, provider: str | None = None, *, model: str | None = None, base_url: str | None = None,
                 api_key: str | None = None, **overrides: Any) -> "LLMConfig":
        """Fill what was not given from the environment:
        CUDAL2_LLM_PROVIDER (openai | anthropic; default openai), CUDAL2_LLM_BASE_URL,
        CUDAL2_LLM_MODEL, CUDAL2_LLM_API_KEY, else OPENAI_API_KEY / ANTHROPIC_API_KEY,
        CUDAL2_LLM_TIMEOUT (seconds), CUDAL2_LLM_RETRIES (extra attempts after the first),
        CUDAL2_LLM_BACKOFF (seconds before the first retry; doubles per retry)."""
        env = settings()
        provider = (provider or env.llm_provider or "openai").lower()
        if provider not in DEFAULT_BASE_URL:
            raise ValueError(f"unknown LLM provider {provider!r}; use 'openai' (any OpenAI-compatible "
                             f"endpoint) or 'anthropic' (set CUDAL2_LLM_PROVIDER or pass provider=)")
        model = model or env.llm_model
        if not model:
            raise ValueError("no LLM model given: pass model= or set CUDAL2_LLM_MODEL "
                             "(e.g. gpt-4.1, claude-sonnet-4-5, or the name a local server serves)")
        base_url = (base_url or env.llm_base_url or DEFAULT_BASE_URL[provider]).rstrip("/")
        if api_key is None:
            fallback = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
            api_key = env.llm_api_key or os.environ.get(fallback) or ""
        for var, text, name, kind in (("CUDAL2_LLM_TIMEOUT", env.llm_timeout, "timeout_s", float),
                                      ("CUDAL2_LLM_RETRIES", env.llm_retries, "max_retries", int),
                                      ("CUDAL2_LLM_BACKOFF", env.llm_backoff, "backoff_s", float)):
            if name not in overrides and text:
                overrides[name] = _env_number(var, text, kind)
        return cls(provider=provider, base_url=base_url, model=model, api_key=api_key, **overrides)


@dataclass
class Reply:
    text: str  # what the model wrote (for a tool call: the tool input as JSON)
    data: Any  # the parsed JSON object, or None when the text is not JSON
    message: dict  # the assistant turn, in the provider's format, for a follow-up
    tool_use_id: str | None = None
    parse_error: str = ""


class ChatClient:
    def __init__(self, config: LLMConfig, *, sleep: Callable[[float], None] = time.sleep,
                 redact: Redactor | None = None):
        import httpx  # lazily: `import cudal2` must not need it

        self.config = config
        # every secret in every form, and control characters (the proposer's own, where it has one)
        self.redact = redact or config.redactor()
        self._sleep = sleep
        self._http = httpx.Client(timeout=httpx.Timeout(config.timeout_s), auth=self._authorize)
        self.waits: list[float] = []  # seconds slept before each retry (for inspection)

    def __repr__(self) -> str:
        c = self.config
        return f"ChatClient(provider={c.provider!r}, base_url={c.base_url!r}, model={c.model!r})"

    def close(self) -> None:
        self._http.close()

    def _authorize(self, request):
        """httpx auth hook: the secrets go on the request only as it is sent. Credentials of the
        base URL become basic auth and then take the place of a bearer key, as they did when
        httpx read them from the URL itself."""
        c = self.config
        key = c.api_key.get_secret_value()
        if key and c.provider == "anthropic":
            request.headers["x-api-key"] = key
        elif key:
            request.headers["Authorization"] = f"Bearer {key}"
        password = c.url_password.get_secret_value()
        if c.url_user or password:
            request.headers["Authorization"] = "Basic " + basic_credentials(c.url_user, password)
        return request

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
        url = f"{c.base_url}/chat/completions"
        out = self._post(url, body, {})
        try:
            msg = out["choices"][0]["message"]
            refusal, text = msg.get("refusal"), msg.get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise LLMError(f"unexpected chat completion (no choices[0].message): "
                           f"{self._redact(json.dumps(out))[:300]}", url) from None
        if refusal:
            raise LLMError(f"the model refused: {self._redact(str(refusal))[:300]}", url)
        if not isinstance(text, str):
            raise LLMError(f"unexpected chat completion (no text in choices[0].message.content): "
                           f"{self._redact(json.dumps(out))[:300]}", url)
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
        url = f"{c.base_url}/v1/messages"
        out = self._post(url, body, {"anthropic-version": ANTHROPIC_VERSION})
        blocks = out.get("content") if isinstance(out, dict) else None
        if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
            raise LLMError(f"unexpected messages reply (no content blocks): "
                           f"{self._redact(json.dumps(out))[:300]}", url)
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
                        raise LLMError(f"answered 200 with a body that is not JSON: "
                                       f"{self._redact(resp.text)[:300]}", url) from None
                detail = self._redact(resp.text)[:500]
                if resp.status_code in RETRY_STATUSES:
                    last = f"HTTP {resp.status_code}: {detail}"
                    asked = _retry_after(resp.headers)
                    wait = asked if asked is not None else wait
                elif resp.status_code == 400 and any(w in resp.text for w in STRUCTURED_OUTPUT_WORDS) \
                        and ("response_format" in body or "tools" in body):
                    raise StructuredOutputUnsupported(f"rejected structured output (HTTP 400): {detail}", url)
                else:
                    hint = " (check the API key)" if resp.status_code in (401, 403) else ""
                    raise LLMError(f"answered HTTP {resp.status_code}{hint}: {detail}", url)
            if attempt == c.max_retries:
                break
            wait = min(max(wait, 0.0), c.max_wait_s)
            log.info("LLM request failed (%s); retrying in %.1f s", last, wait)
            self.waits.append(wait)
            self._sleep(wait)
        raise LLMError(f"gave up after {c.max_retries + 1} attempt(s); last: {last}", url)

    def _redact(self, text: str) -> str:
        return self.redact(text)


# The ranges the client's settings are taken in: a timeout of 0 never waits for a reply, and a
# thousand retries or an hour's backoff would stall a search for hours before it falls back.
_RANGES = {"CUDAL2_LLM_TIMEOUT": (0.0, 86400.0, False), "CUDAL2_LLM_RETRIES": (0, 100, True),
           "CUDAL2_LLM_BACKOFF": (0.0, 3600.0, True)}


def _env_number(var: str, text: str, kind: type) -> float:
    """The number `text` of environment variable `var` (an int or a float), within its _RANGES."""
    low, high, low_ok = _RANGES.get(var, (0, math.inf, True))
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value > high or value < low or (value == low and not low_ok):
        whole, unit = ("whole ", "attempts") if kind is int else ("", "seconds")
        bound = f"{low:g} to {high:g}" if low_ok else f"more than {low:g} and at most {high:g}"
        raise ValueError(f"{var}={text!r}: give a {whole}number of {unit}, {bound}")
    return value


def _seconds(text: str, scale: float = 1.0) -> float | None:
    """A header's number of seconds; None for one that is not a finite number 0 or more (nan, inf
    and negative values are ignored like any unreadable header)."""
    try:
        seconds = float(text) * scale
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _retry_after(headers) -> float | None:
    """Seconds to wait from retry-after-ms, or Retry-After as seconds or an HTTP date."""
    ms = headers.get("retry-after-ms")
    seconds = _seconds(ms, 1e-3) if ms else None
    if seconds is not None:
        return seconds
    value = headers.get("retry-after")
    if not value:
        return None
    seconds = _seconds(value)
    if seconds is not None:
        return seconds
    try:  # an HTTP date (a number that is no wait, such as nan or -5, is no date either)
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
    except (ValueError, RecursionError) as e:  # an integer of too many digits, nesting too deep
        return None, f"the reply is not usable JSON ({str(e).split(';')[0][:200] or type(e).__name__})"
    start, end = s.find("{"), s.rfind("}")
    if 0 <= start < end:
        try:
            return json.loads(s[start:end + 1]), ""
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
            pass
    return None, f"the reply is not valid JSON ({first})"
