"""Every LLM endpoint fault, through the real command line, against a loopback server: the search
warns in one line, falls back to the rules proposals, then Optuna, and spends its whole budget;
--llm-fatal makes the fault a one-line error instead; `compare` counts the llm arm's failures and
never fills that arm with another proposer's specs. In no case does the API key, or a
user:pass given in the base URL, reach the output, the store or any file under HOME or the cache."""

from __future__ import annotations

import base64
import os
import re
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_proposer_llm import Replay, recorded

from cudal2.store.store import Store

KEY = "sk-sentinel-5d8e2a7c91b34f06"
USER, PASSWORD = "sentinel-user-31c7", "sentinel-pass-a04f"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
SECRETS = (KEY, USER, PASSWORD, BASIC)
SHAPE, BUDGET = "1024x1024x1024", 8
FALLBACK = "falling back to rules proposals, then Optuna"


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# fault -> (the server's script, whether the base URL carries user:pass, a fragment of the reason,
#           requests the server should see: 1 + retries where the client retries)
FAULTS = {
    "http 500 after retries": ([(500, {"error": {"message": f"internal error; got key {KEY} and Basic {BASIC}"}},
                                 {}, 0)] * 2, True, "gave up after 2 attempt(s); last: HTTP 500: ", 2),
    "200 with a body that is not JSON": ([(200, f"<html>upstream down; key={KEY}</html>", {}, 0)], False,
                                         "answered 200 with a body that is not JSON: <html>upstream down; key=***", 1),
    "reply without choices": ([(200, {"id": "chatcmpl-1", "object": "chat.completion", "echo": KEY}, {}, 0)],
                              False, "unexpected chat completion (no choices[0].message)", 1),
    "no answer within the timeout": ([(200, recorded("openai_valid.json"), {}, 60)] * 2, False,
                                     "gave up after 2 attempt(s); last: no reply within 0.5 s", 2),
    "refused connection": (None, True, "last: ConnectError: ", 0),
}


def run_cli(tmp_path: Path, base_url: str, *args: str) -> subprocess.CompletedProcess:
    """`cudal2 <args>` in a fresh process whose HOME, cache and store are under tmp_path."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CUDAL2_") and k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "home" / ".cache"),
               CUDAL2_CACHE_DIR=str(tmp_path / "cache"), CUDAL2_STORE=str(tmp_path / "store.db"),
               CUDAL2_LLM_BASE_URL=base_url, CUDAL2_LLM_MODEL="test-model", CUDAL2_LLM_API_KEY=KEY,
               CUDAL2_LLM_TIMEOUT="0.5", CUDAL2_LLM_RETRIES="1", CUDAL2_LLM_BACKOFF="0")
    (tmp_path / "home").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "cudal2.cli", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def assert_no_secret(tmp_path: Path, *texts: str) -> None:
    for text in texts:
        assert not [s for s in SECRETS if s in text]
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".db" for p in files)  # the store is among them
    for path in files:
        data = path.read_bytes()
        assert not [s for s in SECRETS if s.encode() in data], path


def endpoint(fault: str, tmp_path: Path):
    """The loopback server of a fault (None for the refused connection) and the base URL to give."""
    script, credentials, _, _ = FAULTS[fault]
    server = Replay(script) if script is not None else None
    host = f"127.0.0.1:{server.server.server_address[1] if server else unused_port()}"
    userinfo = f"{USER}:{PASSWORD}@" if credentials else ""
    return server, f"http://{userinfo}{host}/v1", f"http://{host}/v1/chat/completions"


def search_against(fault: str, tmp_path: Path, *extra: str):
    """`cudal2 search SHAPE --proposer llm` against the fault's loopback server (up for the run
    only): (the finished process, the server or None, the base URL given, the endpoint's URL)."""
    server, base_url, url = endpoint(fault, tmp_path)
    if server:
        server.__enter__()
    try:
        out = run_cli(tmp_path, base_url, "search", SHAPE, "--proposer", "llm", "--runner", "recorded",
                      "--budget", str(BUDGET), "--store", str(tmp_path / "store.db"), *extra)
    finally:
        if server:
            server.__exit__(None, None, None)
    return out, server, base_url, url


@pytest.mark.parametrize("fault", list(FAULTS))
def test_an_endpoint_fault_warns_falls_back_and_spends_the_budget(fault, tmp_path):
    _, _, reason, requests = FAULTS[fault]
    out, server, base_url, url = search_against(fault, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    (warning,) = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert warning.startswith(f"warning: llm endpoint {url} failed (") and warning.endswith(f"); {FALLBACK}")
    assert reason in warning
    if server:
        assert len(server.received) == requests
        auth = server.received[0]["headers"]["authorization"]
        assert auth == (f"Basic {BASIC}" if USER in base_url else f"Bearer {KEY}")  # the secrets were sent
    # the whole budget: 8 measurements in the store, 4 of them the rules' proposals marked as the fallback
    assert f"best of {BUDGET} evaluations" in out.stdout
    assert re.search(r"specs measured, by source: 4 rules \(fallback: llm failed\), 4 optuna", out.stdout)
    with sqlite3.connect(tmp_path / "store.db") as db:
        assert db.execute("SELECT COUNT(*) FROM cudal2_kernels").fetchone() == (BUDGET,)
    assert _proposal_sources(tmp_path / "store.db") == ["rules (fallback: llm failed)"] * 4
    assert_no_secret(tmp_path, out.stdout, out.stderr)


@pytest.mark.parametrize("fault", ["http 500 after retries", "reply without choices", "refused connection"])
def test_with_llm_fatal_an_endpoint_fault_is_a_one_line_error(fault, tmp_path):
    _, _, reason, _ = FAULTS[fault]
    out, _, _, url = search_against(fault, tmp_path, "--llm-fatal")
    assert out.returncode == 1
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert len(lines) <= 4 and "Traceback" not in out.stdout + out.stderr
    (error,) = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert error.startswith(f"error: llm endpoint {url} failed (") and reason in error
    assert error.endswith("stopping, as --llm-fatal asks (without it: rules proposals, then Optuna)")
    assert_no_secret(tmp_path, out.stdout, out.stderr)


def test_compare_counts_the_llm_arms_failures_and_never_falls_back_to_another_proposer(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import cudal2.cli as cli
    import cudal2.cli.compare as cli_compare

    for var in [v for v in os.environ if v.startswith("CUDAL2_")]:
        monkeypatch.delenv(var)
    url = f"http://{USER}:{PASSWORD}@127.0.0.1:{unused_port()}/v1"
    for var, value in (("CUDAL2_LLM_BASE_URL", url), ("CUDAL2_LLM_MODEL", "test-model"),
                       ("CUDAL2_LLM_API_KEY", KEY), ("CUDAL2_LLM_RETRIES", "0"),
                       ("CUDAL2_CACHE_DIR", str(tmp_path / "cache")), ("CUDAL2_STORE", str(tmp_path / "store.db"))):
        monkeypatch.setenv(var, value)
    plotted = {}
    real_plot = cli_compare._plot_compare
    monkeypatch.setattr(cli_compare, "_plot_compare", lambda curves, out, labels=None, **kw: (
        plotted.update(labels or {}), real_plot(curves, out, labels, **kw)))
    result = CliRunner().invoke(cli.app, ["compare", "512x512x512", "1024x1024x1024", "--proposers", "rules,llm",
                                          "--runner", "recorded", "--budget", "4", "--out", str(tmp_path / "c.png"),
                                          "--store-dir", str(tmp_path / "stores")])
    assert result.exit_code == 0, result.output
    assert plotted == {"rules": "rules", "llm": "llm (2 failures)"}  # the legend
    header = next(line for line in result.stdout.splitlines() if "shape" in line)
    assert "llm (2 failures)" in header  # the table
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2 and all(w.endswith("no proposals this round; Optuna alone fills the budget")
                                      for w in warnings)
    with sqlite3.connect(tmp_path / "stores" / "llm.db") as db:
        assert db.execute("SELECT COUNT(*) FROM cudal2_kernels").fetchone() == (8,)  # 2 shapes x budget 4
    assert _proposal_sources(tmp_path / "stores" / "llm.db") == []
    assert (tmp_path / "c.png").stat().st_size > 0
    assert_no_secret(tmp_path, result.stdout, result.stderr)


def _proposal_sources(db) -> list[str]:
    """The `proposal` attribute of every trial in the studies of the store at db."""
    storage = Store(db).optuna_storage
    return [t.user_attrs["proposal"] for study in storage.get_all_studies()
            for t in storage.get_all_trials(study._study_id) if "proposal" in t.user_attrs]
