"""What leaves the process from outside it: secrets taken out, control characters made visible, store
URLs shown without their passwords.

A Redactor is built once from the configured secrets (an API key, a URL's password, the Basic token
of user:password) and removes each of them in every form a remote service or a model could echo it
in: raw, URL-encoded, base64 and JSON-escaped. The LLM proposer passes everything it stores or
prints through one (proposal reasoning, rejected replies, error messages). Any remote text is also
stripped of terminal control sequences (escape_controls) before it can reach a terminal.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Iterable
from urllib.parse import quote, quote_plus

MASK = "***"
# C0 controls except tab and newline, DEL, and the C1 range: what can move a cursor, retitle a
# window or clear a screen when printed
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# query-string parameters that carry a secret (?password=..., &sslpassword=..., &token=...)
_SECRET_PARAM = re.compile(r"(?i)([?&][^=&#]*(?:password|passwd|pwd|secret|token|key)[^=&#]*=)[^&#]*")


def escape_controls(text: str) -> str:
    """text with each control character shown as a \\xNN escape."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def forms(secret: str) -> set[str]:
    """The forms in which a secret can come back in a text: as written, URL-encoded (either way),
    base64 (standard and URL-safe, with and without padding) and as inside a JSON string (with
    and without an escaped '/')."""
    if not secret:
        return set()
    out = {secret, quote(secret, safe=""), quote_plus(secret, safe="")}
    for enc in (base64.b64encode, base64.urlsafe_b64encode):
        b64 = enc(secret.encode()).decode()
        out |= {b64, b64.rstrip("=")}
    escaped = json.dumps(secret)[1:-1]
    out |= {escaped, escaped.replace("/", "\\/"), json.dumps(secret, ensure_ascii=False)[1:-1]}
    return {s for s in out if s}


class Redactor:
    """Removes every form of the given secrets from a text (longest first, so that a secret that
    holds another is removed whole) and escapes control characters."""

    def __init__(self, secrets: Iterable[str] = ()):
        found: set[str] = set()
        for s in secrets:
            found |= forms(s)
        self.forms = sorted(found, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.forms:
            text = text.replace(secret, MASK)
        return escape_controls(text)

    def __repr__(self) -> str:
        return f"Redactor({len(self.forms)} forms)"


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")


def mask_urls(text: str) -> str:
    """text with every URL in it shown as shown_url shows it (an exception's message that quotes a
    store URL, say)."""
    return _URL_IN_TEXT.sub(lambda m: shown_url(m.group()), text)


def shown_url(url: str) -> str:
    """A database URL as it may be printed: SQLAlchemy's own rendering with the password hidden, and
    secret-bearing query parameters masked. A URL SQLAlchemy cannot parse loses everything between
    '://' and its last '@'."""
    authority = url.partition("://")[2].split("?")[0]
    try:
        if authority.count("@") > 1:  # an unencoded '@' in the password: SQLAlchemy would show a part
            raise ValueError
        from sqlalchemy.engine import make_url

        shown = make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - any URL it cannot parse is masked by hand below
        head, sep, rest = url.partition("://")
        if sep and "@" in rest:
            rest = MASK + rest[rest.rindex("@"):]
        shown = head + sep + rest
    return escape_controls(_SECRET_PARAM.sub(lambda m: m.group(1) + MASK, shown))
