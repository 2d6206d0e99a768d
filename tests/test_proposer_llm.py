"""The LLM proposer against a real HTTP server on loopback that replays recorded replies:
structured output, repair round-trips, fallback to plain JSON, retries, timeouts, Anthropic's
format, the fallback proposer when the endpoint fails, and the API key (and credentials in the
base URL) kept out of everything but the request header."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cudal2.bench.results import CandidateResult, Correctness, Timing
from cudal2.ir import GemmProblem, KernelSpec, check_compatible
from cudal2.proposers import FallbackProposer, ProposerUnavailable, get_proposer
from cudal2.proposers.llm_client import LLMConfig, LLMError

REPLIES = Path(__file__).parent / "llm_replies"
KEY = "sk-test-7f3a9c1e5b2d4f60-secret"
PROBLEM = GemmProblem(m=4096, n=4096, k=4096)


def recorded(name: str) -> dict:
    return json.loads((REPLIES / name).read_text())


class Replay:
    """A loopback HTTP server answering POSTs from a script of (status, body, headers, delay)
    and recording what it received."""

    def __init__(self, script):
        self.script = list(script)
        self.received: list[dict] = []
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                replay.received.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                        "body": json.loads(raw)})
                status, body, headers, delay = replay.script.pop(0) if replay.script else (
                    500, {"error": "script exhausted"}, {}, 0)
                time.sleep(delay)
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def ok(name: str, **headers):
    return (200, recorded(name), headers, 0)


def user_texts(request: dict) -> list[str]:
    """Every user-visible text of a request, whatever the wire format."""
    out = []
    body = request["body"]
    if "system" in body:
        out.append(body["system"])
    for m in body["messages"]:
        c = m["content"]
        if isinstance(c, str):
            out.append(c)
        else:
            for block in c:
                out.append(block.get("text") or block.get("content") or json.dumps(block.get("input", "")))
    return out


def history() -> list[CandidateResult]:
    def result(ms, err, **fields):
        return CandidateResult(spec=KernelSpec(**fields), status="ok",
                               correctness=Correctness(rel_error=err, bound=1e-3, seeds=3),
                               timing={"offline": Timing(kernel_ms=ms, call_ms=ms + 0.01, groups=25)})
    return [
        result(0.1712, 2.1e-4, block_m=128, block_n=256, block_k=64, num_warps=8, stages=4),
        result(0.4321, 2.0e-4, block_m=64, block_n=64, block_k=32, num_warps=4, stages=2),
        result(0.2050, 2.2e-4, block_m=128, block_n=128, block_k=64, num_warps=4, stages=3),
        CandidateResult(spec=KernelSpec(block_m=256, block_n=256, block_k=32, num_warps=16, stages=3),
                        status="compile_error", reason="out of resource: shared memory, Required: 262144"),
    ]


def proposer(url: str, provider: str = "openai", **kw):
    """The LLM proposer itself (fatal: endpoint failures raise, no fallback)."""
    kw.setdefault("timeout_s", 5.0)
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("fatal", True)
    return get_proposer("llm", provider=provider, model="test-model", base_url=url, api_key=KEY,
                        gpu_name="NVIDIA H100 80GB HBM3", **kw)


def assert_valid(proposals, n_max):
    assert 0 < len(proposals) <= n_max
    assert len({p.spec.key() for p in proposals}) == len(proposals)
    for p in proposals:
        check_compatible(PROBLEM, p.spec)


# ---- the happy path ----------------------------------------------------------------------------

def test_structured_reply_becomes_proposals_and_the_request_carries_everything():
    with Replay([ok("openai_valid.json")]) as srv:
        llm = proposer(srv.url)
        props = llm.propose(PROBLEM, history(), n=3)
    assert_valid(props, 3)
    assert [(p.spec.block_m, p.spec.block_n) for p in props] == [(128, 256), (128, 128), (256, 128)]
    assert props[0].spec.load_path == "tma" and props[0].spec.persistent
    assert all(p.source == "llm:test-model" and "waves on 132 SMs" in p.reasoning for p in props)
    assert llm.rejected == [] and llm.turns == 1

    (req,) = srv.received
    assert req["path"] == "/chat/completions"
    assert req["headers"]["authorization"] == f"Bearer {KEY}"
    body = req["body"]
    assert body["model"] == "test-model"
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    schema = fmt["json_schema"]["schema"]
    assert list(schema["properties"]) == ["analysis", "specs"]  # analysis is written first
    item = schema["properties"]["specs"]["items"]
    assert item["additionalProperties"] is False
    assert item["properties"]["arch"]["enum"] == ["sm_90a"]
    assert item["properties"]["warp_specialization"]["enum"] == ["none"]  # narrowed to triton's declaration
    assert schema["properties"]["specs"]["maxItems"] == 3
    prompt = body["messages"][1]["content"]
    assert body["messages"][0]["role"] == "system"
    # contrastive: the best and the worst with their times, the failure with its reason
    assert "0.1712 ms" in prompt and "0.4321 ms" in prompt
    assert prompt.index("Best so far") < prompt.index("0.1712 ms") < prompt.index("Worst so far") < prompt.index("0.4321 ms")
    assert "out of resource: shared memory" in prompt and "compile_error" in prompt
    assert "rel_error 2.1e-04" in prompt
    assert "NVIDIA H100 80GB HBM3" in prompt and "132 SMs" in prompt and "227 KiB" in prompt
    assert "load_path: [\"pointer\", \"tma\"]" in prompt  # the capabilities table
    assert prompt.index("`analysis`") < prompt.index("`specs`")
    assert "JSON Schema" not in prompt  # structured mode: the schema travels in response_format


def test_specs_already_measured_are_not_proposed_again():
    measured = CandidateResult(spec=KernelSpec(block_m=128, block_n=128, block_k=64, num_warps=4, stages=4,
                                               raster_group=8), status="ok",
                               timing={"offline": Timing(kernel_ms=0.2, call_ms=0.21, groups=25)})
    with Replay([ok("openai_valid.json"), ok("openai_valid.json")]) as srv:
        llm = proposer(srv.url)
        props = llm.propose(PROBLEM, [measured], n=3)
    assert measured.spec.key() not in {p.spec.key() for p in props}
    assert len(props) == 2
    # the repeat was sent back once as an error
    assert len(srv.received) == 2 and "already measured" in user_texts(srv.received[1])[-1]


def test_specs_under_measurement_are_shown_and_not_proposed_again():
    """A search that looks ahead asks while a batch is timed: the prompt names the specs in flight,
    and a reply that repeats one is sent back as a repeat."""
    busy = KernelSpec(block_m=128, block_n=128, block_k=64, num_warps=4, stages=4, raster_group=8,
                      shape_specialization="dynamic")  # what the search measures for the reply's "auto" spec
    with Replay([ok("openai_valid.json"), ok("openai_valid.json")]) as srv:
        llm = proposer(srv.url)
        props = llm.propose(PROBLEM, [], n=3, pending=[busy])
    assert len(props) == 2 and busy.replace(shape_specialization="auto").key() not in {p.spec.key() for p in props}
    first = srv.received[0]["body"]["messages"][1]["content"]
    assert "Being measured now" in first and first.index("Being measured now") < first.index("## Task")
    assert "already measured" in user_texts(srv.received[1])[-1]


# ---- invalid replies: one repair round-trip, then drop --------------------------------------------

def test_invalid_json_is_sent_back_once_then_the_repaired_reply_is_used():
    with Replay([ok("openai_invalid_json.json"), ok("openai_valid.json")]) as srv:
        llm = proposer(srv.url)
        props = llm.propose(PROBLEM, history(), n=3)
    assert_valid(props, 3)
    assert len(props) == 3
    assert len(srv.received) == 2
    second = srv.received[1]["body"]["messages"]
    assert second[-2]["role"] == "assistant" and second[-2]["content"].startswith('{"analysis"')
    assert "not valid JSON" in second[-1]["content"]
    assert [r.attempt for r in llm.rejected] == [1] and "not valid JSON" in llm.rejected[0].reason


def test_unknown_field_repair_names_the_field():
    with Replay([ok("openai_unknown_field.json"), ok("openai_valid.json")]) as srv:
        llm = proposer(srv.url)
        props = llm.propose(PROBLEM, [], n=3)
    assert len(props) == 3
    repair = srv.received[1]["body"]["messages"][-1]["content"]
    assert "block_size" in repair and "use_wgmma" in repair and "unknown key" in repair
    assert "fix:" in repair


def test_smem_overflow_twice_is_dropped_and_recorded():
    with Replay([ok("openai_smem_overflow.json"), ok("openai_smem_overflow.json")]) as srv:
        llm = proposer(srv.url)
        props = llm.propose(PROBLEM, [], n=4)
    # the valid spec of the first reply survives; the overflow is dropped after one repair
    assert [(p.spec.block_m, p.spec.block_n, p.spec.block_k) for p in props] == [(128, 256, 64)]
    assert len(srv.received) == 2
    repair = srv.received[1]["body"]["messages"][-1]["content"]
    assert "specs[1]" in repair and "KiB exceeds 227 KiB" in repair and "use at most" in repair
    assert [r.attempt for r in llm.rejected] == [1, 2]
    assert all("stages" in r.reason and '"block_k": 128' in r.item for r in llm.rejected)


# ---- transport: timeouts, 429, fallback ---------------------------------------------------------------

def test_timeout_then_success():
    with Replay([(200, recorded("openai_valid.json"), {}, 1.5), ok("openai_valid.json")]) as srv:
        llm = proposer(srv.url, timeout_s=0.3)
        props = llm.propose(PROBLEM, [], n=3)
    assert len(props) == 3 and len(srv.received) == 2
    assert llm.client.waits == [0.01]


def test_timeouts_exhaust_retries_with_a_clear_error():
    with Replay([(200, recorded("openai_valid.json"), {}, 1.0)] * 3) as srv:
        llm = proposer(srv.url, timeout_s=0.2, max_retries=1)
        with pytest.raises(LLMError, match=r"gave up after 2 attempt\(s\); last: no reply within 0.2 s"):
            llm.propose(PROBLEM, [], n=3)


def test_429_honours_retry_after_then_succeeds():
    slept = []
    with Replay([(429, recorded("openai_429.json"), {"retry-after": "7"}, 0),
                 (503, {"error": "overloaded"}, {}, 0),
                 ok("openai_valid.json")]) as srv:
        llm = proposer(srv.url, sleep=slept.append, backoff_s=0.5)
        props = llm.propose(PROBLEM, [], n=3)
    assert len(props) == 3 and len(srv.received) == 3
    assert slept == [7.0, 1.0]  # Retry-After, then exponential backoff (0.5 * 2**1)


def test_retry_after_is_bounded():
    slept = []
    with Replay([(429, recorded("openai_429.json"), {"retry-after": "3600"}, 0), ok("openai_valid.json")]) as srv:
        proposer(srv.url, sleep=slept.append, max_wait_s=20).propose(PROBLEM, [], n=3)
    assert slept == [20]


def test_400_for_response_format_falls_back_to_json_in_the_prompt():
    with Replay([(400, recorded("openai_400_response_format.json"), {}, 0),
                 ok("openai_plain_json_fenced.json")]) as srv:
        llm = proposer(srv.url)
        props = llm.propose(PROBLEM, history(), n=3)
    assert len(props) == 3 and llm.structured is False
    first, second = (r["body"] for r in srv.received)
    assert "response_format" in first and "response_format" not in second
    prompt = second["messages"][-1]["content"]
    assert "JSON Schema" in prompt and '"additionalProperties":false' in prompt and '"analysis"' in prompt
    assert "0.1712 ms" in prompt


def test_other_400_is_an_error_not_a_fallback():
    with Replay([(400, {"error": {"message": "model 'x' does not exist"}}, {}, 0)]) as srv:
        with pytest.raises(LLMError, match="HTTP 400"):
            proposer(srv.url).propose(PROBLEM, [], n=3)
        assert len(srv.received) == 1


# ---- Anthropic ---------------------------------------------------------------------------------------

def test_anthropic_forced_tool_use():
    with Replay([ok("anthropic_tool_use.json")]) as srv:
        llm = proposer(srv.url, provider="anthropic")
        props = llm.propose(PROBLEM, history(), n=3)
    assert_valid(props, 3)
    assert len(props) == 3
    (req,) = srv.received
    assert req["path"] == "/v1/messages"
    assert req["headers"]["x-api-key"] == KEY and req["headers"]["anthropic-version"] == "2023-06-01"
    assert "authorization" not in req["headers"]
    body = req["body"]
    (tool,) = body["tools"]
    assert body["tool_choice"] == {"type": "tool", "name": tool["name"]}
    assert tool["input_schema"]["properties"]["specs"]["items"]["properties"]["block_m"]["enum"] == [16, 32, 64, 128, 256]
    assert body["max_tokens"] > 0 and "expert GPU performance engineer" in body["system"]
    assert "0.1712 ms" in body["messages"][0]["content"]


def test_anthropic_repair_goes_back_as_a_tool_result():
    with Replay([ok("anthropic_smem_overflow.json"), ok("anthropic_tool_use.json")]) as srv:
        llm = proposer(srv.url, provider="anthropic")
        props = llm.propose(PROBLEM, [], n=3)
    assert len(props) == 3
    msgs = srv.received[1]["body"]["messages"]
    assert msgs[-2]["role"] == "assistant" and msgs[-2]["content"][0]["type"] == "tool_use"
    (result,) = msgs[-1]["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_01Bad" and result["is_error"]
    assert "KiB exceeds 227 KiB" in result["content"]


# ---- configuration and the key ------------------------------------------------------------------------

def test_the_key_never_appears_in_reprs_logs_or_errors(caplog):
    caplog.set_level(logging.DEBUG)
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}"}}
    with Replay([(429, recorded("openai_429.json"), {"retry-after": "0"}, 0), (401, echo, {}, 0)]) as srv:
        llm = proposer(srv.url)
        with pytest.raises(LLMError) as e:
            llm.propose(PROBLEM, [], n=3)
    assert srv.received[0]["headers"]["authorization"] == f"Bearer {KEY}"  # it was sent
    assert "check the API key" in str(e.value) and "***" in str(e.value)
    texts = [str(e.value), repr(e.value), repr(llm), repr(llm.client), repr(llm.config), str(llm.config),
             caplog.text] + [r.getMessage() for r in caplog.records]
    assert caplog.records  # the retry was logged
    assert not any(KEY in t for t in texts)


def test_config_from_environment(monkeypatch):
    for var in ("CUDAL2_LLM_PROVIDER", "CUDAL2_LLM_BASE_URL", "CUDAL2_LLM_MODEL", "CUDAL2_LLM_API_KEY",
                "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "CUDAL2_LLM_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="CUDAL2_LLM_MODEL"):
        LLMConfig.from_env()
    monkeypatch.setenv("CUDAL2_LLM_MODEL", "m1")
    monkeypatch.setenv("OPENAI_API_KEY", "k-openai")
    c = LLMConfig.from_env()
    assert (c.provider, c.base_url, c.model, c.api_key.get_secret_value()) == (
        "openai", "https://api.openai.com/v1", "m1", "k-openai")
    monkeypatch.setenv("CUDAL2_LLM_PROVIDER", "anthropic")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k-anthropic")
    monkeypatch.setenv("CUDAL2_LLM_BASE_URL", "http://localhost:9/")
    monkeypatch.setenv("CUDAL2_LLM_TIMEOUT", "12.5")
    c = LLMConfig.from_env()
    assert (c.provider, c.base_url, c.api_key.get_secret_value(), c.timeout_s) == (
        "anthropic", "http://localhost:9", "k-anthropic", 12.5)
    monkeypatch.setenv("CUDAL2_LLM_API_KEY", "k-cudal2")
    assert LLMConfig.from_env().api_key.get_secret_value() == "k-cudal2"
    monkeypatch.setenv("CUDAL2_LLM_RETRIES", "0")
    monkeypatch.setenv("CUDAL2_LLM_BACKOFF", "0.25")
    c = LLMConfig.from_env()
    assert (c.max_retries, c.backoff_s) == (0, 0.25)
    monkeypatch.setenv("CUDAL2_LLM_RETRIES", "two")
    with pytest.raises(ValueError, match="CUDAL2_LLM_RETRIES='two': give a whole number of attempts"):
        LLMConfig.from_env()
    with pytest.raises(ValueError, match="unknown LLM provider"):
        LLMConfig.from_env("gemini")


def test_credentials_in_the_base_url_go_as_basic_auth_and_nowhere_else(caplog):
    import base64

    caplog.set_level(logging.DEBUG)
    user, password = "sentinel-user-4e1d", "sentinel-pass-9b2c"
    echo = {"error": {"message": f"bad credentials {user}:{password} and key {KEY}"}}
    with Replay([(503, echo, {}, 0), (401, echo, {}, 0)]) as srv:
        url = srv.url.replace("http://", f"http://{user}:{password}@") + "/v1"
        llm = proposer(url, max_retries=1)
        with pytest.raises(LLMError) as e:
            llm.propose(PROBLEM, [], n=3)
    # sent as basic auth, which takes the place of the bearer key (as httpx does for a URL's credentials)
    sent = srv.received[0]["headers"]["authorization"]
    assert sent == "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    assert srv.received[0]["path"] == "/v1/chat/completions"
    assert llm.config.base_url == srv.url + "/v1" and e.value.endpoint == srv.url + "/v1/chat/completions"
    texts = [str(e.value), repr(e.value), repr(llm), repr(llm.client), repr(llm.config), str(llm.config),
             caplog.text]
    assert "HTTP 401" in str(e.value) and "bad credentials ***" in str(e.value)
    assert not any(secret in t for t in texts for secret in (user, password, KEY))


def test_the_key_is_a_secret_str_whatever_it_was_given_as():
    from pydantic import SecretStr

    c = LLMConfig(provider="openai", base_url="http://h", model="m", api_key=KEY)
    assert isinstance(c.api_key, SecretStr) and c.api_key.get_secret_value() == KEY
    assert KEY not in repr(c.api_key) and KEY not in str(c.api_key) and KEY not in repr(c)


@pytest.mark.parametrize("body, why", [
    ({"id": "x", "object": "chat.completion"}, "no choices[0].message"),
    ({"choices": []}, "no choices[0].message"),
    ({"choices": [{"message": "text"}]}, "no choices[0].message"),
    ({"choices": [{"message": {"role": "assistant", "content": None}}]}, "no text in choices[0].message.content"),
    ("<html>bad gateway</html>", "a body that is not JSON"),
])
def test_replies_of_the_wrong_shape_are_endpoint_failures(body, why):
    with Replay([(200, body, {}, 0)]) as srv:
        with pytest.raises(LLMError, match=re.escape(why)) as e:
            proposer(srv.url).propose(PROBLEM, [], n=3)
    assert isinstance(e.value, ProposerUnavailable) and e.value.endpoint == srv.url + "/chat/completions"
    assert "\n" not in str(e.value)


def test_a_failed_endpoint_falls_back_to_the_rules_proposals_with_their_source_marked():
    warnings = []
    with Replay([(500, {"error": "boom\non two lines"}, {}, 0)] * 2) as srv:
        llm = proposer(srv.url, fatal=False, max_retries=1, warn=warnings.append)
        props = llm.propose(PROBLEM, [], n=4)
    assert isinstance(llm, FallbackProposer) and len(srv.received) == 2
    assert len(props) == 4 and all(p.source == "rules (fallback: llm failed)" for p in props)
    assert llm.turns == 1 and llm.rejected == [] and llm.config.model == "test-model"  # the LLM's own interface
    (line,) = warnings
    assert line.startswith(f"llm endpoint {srv.url}/chat/completions failed (gave up after 2 attempt(s); "
                           "last: HTTP 500: {")
    assert line.endswith("); falling back to rules proposals, then Optuna") and "\n" not in line
    assert len(llm.failures) == 1


def test_without_a_fallback_a_failed_round_gives_no_proposals_and_is_counted():
    warnings = []
    with Replay([(500, {"error": "boom"}, {}, 0)] * 2 + [ok("openai_valid.json")]) as srv:
        llm = proposer(srv.url, fatal=False, fallback=None, max_retries=0, warn=warnings.append)
        assert llm.propose(PROBLEM, [], n=3) == [] and llm.propose(PROBLEM, [], n=3) == []
        again = llm.propose(PROBLEM, [], n=3)  # every round asks the endpoint again
    assert len(again) == 3 and all(p.source == "llm:test-model" for p in again)
    assert len(llm.failures) == 2 and len(warnings) == 2
    assert warnings[0].endswith("failed (gave up after 1 attempt(s); last: HTTP 500: {\"error\": \"boom\"}); "
                                "no proposals this round; Optuna alone fills the budget")


def test_a_failure_that_is_not_the_endpoint_is_not_hidden_by_the_fallback():
    class Broken:
        name = "broken"

        def propose(self, problem, history, n):
            raise ZeroDivisionError("a bug")

    fallback = FallbackProposer(Broken(), get_proposer("rules"))
    with pytest.raises(ZeroDivisionError):
        fallback.propose(PROBLEM, [], 3)


def test_importing_cudal2_does_not_import_httpx():
    import subprocess
    import sys

    code = "import sys, cudal2, cudal2.proposers; print('httpx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_recorded_replies_are_well_formed_wire_format():
    """The replayed bodies parse with the official SDKs' response types (where installed)."""
    openai_types = pytest.importorskip("openai.types.chat")
    anthropic_types = pytest.importorskip("anthropic.types")
    for path in sorted(REPLIES.glob("*.json")):
        body = recorded(path.name)
        if path.name.startswith("anthropic_"):
            msg = anthropic_types.Message.model_validate(body)
            assert msg.content[0].type == "tool_use"
        elif "choices" in body:
            completion = openai_types.ChatCompletion.model_validate(body)
            assert completion.choices[0].message.content
        else:
            assert "error" in body and body["error"]["message"]


# ---- with the learned proposer -------------------------------------------------------------------

def test_llm_plus_learned_shows_the_models_best_and_mixes_the_batch():
    from cudal2.proposers.learned import LearnedProposer

    with Replay([ok("openai_valid.json")]) as srv:
        mixed = get_proposer("llm+learned", provider="openai", model="test-model", base_url=srv.url, api_key=KEY,
                             timeout_s=5.0, backoff_s=0.01, fatal=True)
        props = mixed.propose(PROBLEM, history(), n=6)
    assert_valid(props, 6)
    sources = [p.source for p in props]
    assert sources[:3] == ["llm:test-model"] * 3 and sources[3:] == ["learned"] * 3  # the LLM writes half
    best = LearnedProposer(arch="sm_90a").ranked(PROBLEM, 6)
    (req,) = srv.received
    prompt = req["body"]["messages"][1]["content"]
    assert "A cost model's best specs" in prompt
    assert f"predicted {best[0][1]:.2f}x torch.matmul" in prompt
    assert prompt.index("Measured so far") < prompt.index("A cost model's best") < prompt.index("## Task")
    assert mixed.adaptive and mixed.turns == 1  # reads through to the LLM proposer


def test_llm_plus_learned_falls_back_to_the_learned_proposals_when_the_endpoint_fails():
    lines = []
    with Replay([(503, {"error": "down"}, {}, 0)]) as srv:
        mixed = get_proposer("llm+learned", provider="openai", model="test-model", base_url=srv.url, api_key=KEY,
                             timeout_s=5.0, backoff_s=0.01, max_retries=0, warn=lines.append)
        props = mixed.propose(PROBLEM, history(), n=4)
    assert_valid(props, 4)
    # the learned proposer's batch: the model's picks and, for half of it, the rules' beyond its catalog
    assert props[0].source == "learned (fallback: llm+learned failed)"
    assert {p.source for p in props} <= {"learned (fallback: llm+learned failed)", "rules (fallback: llm+learned failed)"}
    assert len(lines) == 1 and "falling back to learned proposals" in lines[0]
