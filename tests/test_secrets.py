"""Secrets are redacted at the boundary, in every form, and remote text cannot drive the terminal:
an LLM reply that quotes the key (raw, URL-encoded, base64, JSON-escaped) is stored and printed
without it; an endpoint's error body that echoes it is printed without it and without its control
characters; store URLs are printed through SQLAlchemy's rendering with the password hidden (query
passwords too); odd Retry-After and timeout values fall back or are one error line."""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote, quote_plus

import pytest
from test_llm_faults import BASIC, KEY, PASSWORD, USER, run_cli, unused_port
from test_proposer_llm import Replay, recorded

from cudal2.redact import Redactor, escape_controls, forms, shown_url
from cudal2.store.store import Store


def encoded(secret: str) -> list[str]:
    """The forms a service or a model might echo a secret in (the tests' own list, not the code's)."""
    b64 = base64.b64encode(secret.encode()).decode()
    return [secret, quote(secret, safe=""), quote_plus(secret), b64, b64.rstrip("="),
            json.dumps(secret)[1:-1].replace("/", "\\/")]


SLASHED_KEY = "sk-sentinel/4f+b=9c2e71d05a"  # characters that change under URL and JSON encoding
ALL_FORMS = [f for s in (SLASHED_KEY, PASSWORD, f"{USER}:{PASSWORD}") for f in encoded(s)] + [BASIC]


def _assert_nowhere(tmp_path, *texts):
    for text in texts:
        assert not [f for f in ALL_FORMS if f in text], text
    for path in (p for p in tmp_path.rglob("*") if p.is_file()):
        data = path.read_bytes()
        assert not [f for f in ALL_FORMS if f.encode() in data], path


def _reply_quoting_the_secrets() -> dict:
    reply = recorded("openai_valid.json")
    content = json.loads(reply["choices"][0]["message"]["content"])
    content["analysis"] = "I was configured with " + " and ".join(encoded(SLASHED_KEY) + encoded(PASSWORD)) \
        + " and Basic " + BASIC
    reply["choices"][0]["message"]["content"] = json.dumps(content)
    return reply


def _env_cli(monkeypatch, tmp_path, base_url, *args, **extra):
    """run_cli with further environment variables, which win over run_cli's own."""
    import subprocess

    real = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda cmd, env=None, **kw: real(cmd, env={**(env or {}), **extra}, **kw))
    return run_cli(tmp_path, base_url, *args)


def test_a_reply_that_quotes_the_secrets_is_stored_and_printed_without_them(tmp_path, monkeypatch):
    monkeypatch.setattr("test_llm_faults.KEY", SLASHED_KEY)
    with Replay([(200, _reply_quoting_the_secrets(), {}, 0)] * 4) as server:
        base = f"http://{USER}:{PASSWORD}@127.0.0.1:{server.server.server_address[1]}/v1"
        out = run_cli(tmp_path, base, "search", "1024x1024x1024", "--proposer", "llm", "--runner", "recorded",
                      "--budget", "4", "--store", str(tmp_path / "store.db"))
        shown = run_cli(tmp_path, base, "show", "--store", str(tmp_path / "store.db"))
    assert out.returncode == 0, out.stderr
    assert server.received  # the model was asked, and its analysis reached the study
    journal = (tmp_path / "store.db.optuna-journal").read_text()
    assert "I was configured with ***" in journal
    _assert_nowhere(tmp_path, out.stdout, out.stderr, shown.stdout, shown.stderr)


@pytest.mark.parametrize("body", [
    {"error": {"message": f"invalid key {quote(SLASHED_KEY, safe='')}"}},
    {"error": {"message": f"invalid key {base64.b64encode(SLASHED_KEY.encode()).decode()}"}},
    json.dumps({"error": {"message": f"invalid key {SLASHED_KEY}"}}).replace("/", "\\/"),
    "\x1b]0;pwned\x07\x1b[2Jinvalid key " + SLASHED_KEY,
])
def test_an_error_body_that_echoes_the_key_or_drives_the_terminal_is_printed_safely(tmp_path, monkeypatch, body):
    monkeypatch.setattr("test_llm_faults.KEY", SLASHED_KEY)
    with Replay([(401, body, {}, 0)]) as server:
        out = run_cli(tmp_path, f"{server.url}/v1", "search", "1024x1024x1024",
                      "--proposer", "llm", "--runner", "recorded", "--budget", "2")
    assert "HTTP 401 (check the API key)" in out.stderr
    assert "\x1b" not in out.stderr and "\x07" not in out.stderr
    _assert_nowhere(tmp_path, out.stdout, out.stderr)


@pytest.mark.parametrize("header", ["nan", "inf", "-5", "1e400"])
def test_an_odd_retry_after_falls_back_like_any_endpoint_fault(tmp_path, header):
    with Replay([(429, {"error": {"message": "slow down"}}, {"Retry-After": header}, 0)] * 3) as server:
        out = run_cli(tmp_path, f"{server.url}/v1", "search", "1024x1024x1024",
                      "--proposer", "llm", "--runner", "recorded", "--budget", "4")
    assert out.returncode == 0, out.stderr
    assert "falling back to rules proposals" in out.stderr and "bug" not in out.stderr
    assert re.search(r"specs measured, by source: .*4", out.stdout.replace("\n", " ")) or "4 evaluations" in out.stdout


@pytest.mark.parametrize("var,value", [("CUDAL2_LLM_TIMEOUT", "inf"), ("CUDAL2_LLM_TIMEOUT", "nan"),
                                       ("CUDAL2_LLM_BACKOFF", "-1"), ("CUDAL2_LLM_RETRIES", "2.5"),
                                       ("CUDAL2_LLM_RETRIES", "1000"), ("CUDAL2_LLM_TIMEOUT", "0"),
                                       ("CUDAL2_LLM_BACKOFF", "7200")])
def test_an_odd_llm_setting_is_one_error_line(tmp_path, monkeypatch, var, value):
    out = _env_cli(monkeypatch, tmp_path, f"http://127.0.0.1:{unused_port()}/v1", "search", "1024x1024x1024",
                   "--proposer", "llm",
                   "--runner", "recorded", "--budget", "2", **{var: value})
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2, out.stderr
    assert len(lines) == 1 and var in lines[0] and "bug" not in lines[0]


@pytest.mark.parametrize("url,secret", [
    ("postgresql://u:pa/ss@127.0.0.1:1/db", "pa/ss"),
    ("postgresql://user:S3c@ret@127.0.0.1:1/db", "S3c@ret"),
    ("postgresql://127.0.0.1:1/db?password=hunter2&sslmode=disable", "hunter2"),
    ("postgresql+psycopg://cudal2:change-me@127.0.0.1:1/cudal2", "change-me"),
])
def test_store_urls_are_shown_without_their_passwords(tmp_path, url, secret):
    assert secret not in shown_url(url) and "***" in shown_url(url)
    assert secret not in repr(Store(url)) and secret not in Store(url).studies_at()
    for args in (["show", "--store", url], ["export", "--out", str(tmp_path / "t.json"), "--store", url],
                 ["search", "64x64x64", "--runner", "recorded", "--budget", "1", "--store", url]):
        out = run_cli(tmp_path, "http://127.0.0.1:1/v1", *args)
        assert out.returncode == 2 and secret not in out.stdout + out.stderr, (args, out.stderr)


def test_the_redactor_covers_every_form_and_escapes_controls():
    r = Redactor([SLASHED_KEY])
    for form in encoded(SLASHED_KEY):
        assert r(f"a {form} b") == "a *** b"
    assert forms("") == set()
    assert escape_controls("ok\x1b[2J\x9b\tend\n") == "ok\\x1b[2J\\x9b\tend\n"
