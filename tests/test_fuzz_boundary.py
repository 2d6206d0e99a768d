"""The untrusted boundary, fuzzed: what an LLM reply (or a spec file) holds reaches a kernel only as a
validated KernelSpec.

- KernelSpec.from_dict / from_json, fed random JSON, mutated valid specs and hostile strings (`}}{{`,
  `__import__('os')`, newlines, 10 MB) in every field, give a spec or a SpecError that names the field;
  nothing else is ever raised.
- The LLM reply parser and the LLM proposer, fed such replies, never raise: each proposal is a valid
  spec the problem and its backend accept.
- Every valid spec renders with both backends (CPU-only Jinja2), and its source holds nothing of the
  reply but validated enum and integer values.
"""

from __future__ import annotations

import json
import os
import typing

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from cudal2 import GemmProblem, KernelSpec, SpecError, get_backend
from cudal2.codegen import templates
from cudal2.ir import capabilities
from cudal2.proposers import space
from cudal2.proposers.llm import LLMProposer
from cudal2.proposers.llm_client import Reply, parse_json

# Moderate example counts and a fixed seed: the file runs in well under a minute on two cores, and
# a failure in CI is reproducible. CUDAL2_FUZZ_PROFILE=deep explores more, with fresh randomness.
settings.register_profile("boundary", max_examples=150, deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.filter_too_much])
settings.register_profile("deep", parent=settings.get_profile("boundary"), max_examples=1000, derandomize=False)
PROFILE = settings.get_profile(os.environ.get("CUDAL2_FUZZ_PROFILE", "boundary"))

ARCH = "sm_90a"
BACKENDS = ("triton", "cute_dsl")
PROBLEM = GemmProblem(m=256, n=512, k=1024)
FIELDS = tuple(KernelSpec.model_fields)
TEN_MB = "A" * (10 * 1024 * 1024)
# Marked injections: no template or canonical spec text holds this marker.
MARK = "qzxINJ"
HOSTILE = ("}}{{", "{{ 7*7 }}", "{% for x in range(9**9) %}", "{#", "__import__('os')",
           "__import__('os').system('id')", "\nimport os\nos.system('id')\n", "tma\n", " tma", "TMA", "128 ",
           "1e2", "0x80", "NaN", "Infinity", "-0", "\x00", "\u202e", "'''", '"""', "\\", "${HOME}", "$(id)",
           "triton\n", "triton; import os", f"{MARK}}}}}{{{{", f"{MARK}__import__('os')", f"{MARK}\n")


def allowed_literals() -> dict[str, set]:
    """Per field, the string values a valid spec may hold: its Literal's strings (backend: the known ones)."""
    out = {}
    for name, info in KernelSpec.model_fields.items():
        if typing.get_origin(info.annotation) is typing.Literal:
            out[name] = {v for v in typing.get_args(info.annotation) if isinstance(v, str)}
    out["backend"] = set(capabilities.known_backends())
    return out


ALLOWED = allowed_literals()

# ---- strategies -----------------------------------------------------------------------------------
json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=40)
random_json = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)
hostile_strings = st.sampled_from(HOSTILE) | st.text(max_size=30).map(lambda s: MARK + s)
# What a field may be set to: a value its backend accepts, a neighbour of one, a hostile string, anything.
wild_values = (hostile_strings | random_json | st.integers(-2**70, 2**70)
               | st.sampled_from([True, False, None, 0, -1, 3.0, 2.5, "3", " 8 ", "true", "none", [], {}]))


@st.composite
def spec_fields(draw, mutations: int = 3) -> dict:
    """A spec as an LLM might write it: every field drawn from what its backend accepts (so a fair
    share are valid), then up to `mutations` fields (or unknown keys) set to wild values, some dropped."""
    backend = draw(st.sampled_from(BACKENDS))
    caps = get_backend(backend).capabilities
    fields = space.base_fields(backend, caps, ARCH)
    for name in FIELDS:
        domain = space.domain(caps, name, ARCH)
        if domain and name not in ("backend", "arch") and draw(st.booleans()):
            fields[name] = draw(st.sampled_from(domain))
    for _ in range(draw(st.integers(0, mutations))):
        key = draw(st.sampled_from(FIELDS) | st.sampled_from(["self", "__class__", "model_config", "spec"])
                   | st.text(max_size=10))
        fields[key] = draw(wild_values)
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=2)):
        fields.pop(name, None)
    return fields


def texts_of(value) -> list[str]:
    """Every string value in a JSON value (the keys of a valid spec are its field names)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in texts_of(v)]
    if isinstance(value, list):
        return [t for v in value for t in texts_of(v)]
    return []


# ---- what must hold ---------------------------------------------------------------------------------
def names(err: SpecError, field: str) -> bool:
    """Whether a violation names the field (pydantic may add a part: 'producer_registers.int')."""
    return any(v.field == field or v.field.startswith(field + ".") for v in err.violations)


def build(make, data):
    """make(data) -> a KernelSpec, or None after a SpecError that names a field; anything else fails."""
    try:
        spec = make(data)
    except SpecError as e:
        assert e.violations and all(isinstance(v.field, str) and v.field for v in e.violations)
        assert len(str(e)) < 2000 * len(e.violations), "a message quotes an input whole"
        return None
    assert isinstance(spec, KernelSpec)
    return spec


def assert_only_validated_values(spec: KernelSpec) -> None:
    """Every field holds an int, a bool, None, or one of the literal strings the IR lists for it."""
    for name, value in spec:
        if isinstance(value, str):
            assert value in ALLOWED[name], (name, value)
        else:
            assert value is None or isinstance(value, (bool, int)), (name, value)


def assert_renders_only_validated_values(spec: KernelSpec, reply) -> None:
    """Where its backend supports the spec for PROBLEM, both its render and the render of its canonical
    form (rebuilt from to_json) give the same text, and no injected string reaches it."""
    backend = get_backend(spec.backend)
    if not backend.supports(PROBLEM, spec):
        event(f"{spec.backend}: valid, not for this problem")
        with pytest.raises(SpecError):
            backend.render(PROBLEM, spec)
        return
    event(f"{spec.backend}: rendered")
    text = backend.render(PROBLEM, spec).text
    assert text == backend.render(PROBLEM, KernelSpec.from_json(spec.to_json())).text
    assert MARK not in text and "__import__" not in text
    for s in texts_of(reply):
        if s not in ALLOWED.get("backend", set()) and not any(s in values for values in ALLOWED.values()):
            assert len(s.strip()) < 8 or s.strip().lstrip("-+").replace("_", "").isdigit() or s not in text, s


# ---- KernelSpec ---------------------------------------------------------------------------------------
@PROFILE
@given(random_json)
@example({"self": 1})
@example({1: 2})
@example({"block_m": [[[[[[[[[[1]]]]]]]]]]})
def test_random_json_gives_a_spec_or_a_spec_error(data):
    spec = build(KernelSpec.from_dict, data)
    if spec is not None:
        assert_only_validated_values(spec)
    elif isinstance(data, dict):
        try:
            KernelSpec.from_dict(data)
        except SpecError as e:
            keys = {str(k) for k in data} | {repr(k) for k in data}
            derived = {"block_m*block_n", "cluster_m*cluster_n"}
            for v in e.violations:  # a field of the spec (or a product of two), or a key as given
                assert v.field in keys | derived or v.field.split(".")[0] in FIELDS, v.field


@PROFILE
@given(spec_fields())
def test_mutated_specs_give_a_spec_or_a_spec_error_and_every_valid_one_renders(fields):
    spec = build(KernelSpec.from_dict, fields)
    again = build(KernelSpec.from_json, json.dumps(fields))
    assert spec == again
    event("valid" if spec is not None else "SpecError")
    if spec is not None:
        assert_only_validated_values(spec)
        assert_renders_only_validated_values(spec, fields)


@PROFILE
@given(st.data())
def test_a_hostile_string_in_any_field_is_a_spec_error_naming_that_field(data):
    backend = data.draw(st.sampled_from(BACKENDS))
    fields = space.base_fields(backend, get_backend(backend).capabilities, ARCH)
    name = data.draw(st.sampled_from(FIELDS))
    fields[name] = data.draw(st.sampled_from([h for h in HOSTILE if not h.strip(" \n").lstrip("-").isdigit()
                                              and h.strip().lower() not in ("nan", "infinity", "1e2", "0x80")]))
    for make, given_as in ((KernelSpec.from_dict, fields), (KernelSpec.from_json, json.dumps(fields))):
        with pytest.raises(SpecError) as err:
            make(given_as)
        assert names(err.value, name), (name, fields[name], str(err.value))


@pytest.mark.parametrize("name", FIELDS)
def test_a_ten_megabyte_string_in_a_field_is_a_short_spec_error_naming_it(name):
    fields = space.base_fields("triton", get_backend("triton").capabilities, ARCH)
    fields[name] = TEN_MB
    for make, given_as in ((KernelSpec.from_dict, fields), (KernelSpec.from_json, json.dumps(fields))):
        with pytest.raises(SpecError) as err:
            make(given_as)
        assert names(err.value, name)
        assert len(str(err.value)) < 2000


def test_a_ten_megabyte_key_or_document_is_a_short_spec_error():
    # (an integer past 4300 digits has no repr(): Python refuses to convert it)
    for given_as in ({TEN_MB: 1}, json.dumps({TEN_MB: 1}), TEN_MB, "[" * 100_000, '{"stages": ' + "9" * 5000 + "}",
                     {"stages": 10**5000}, {"block_m": [[[[[[[[[[1]]]]]]]]]]}, b"\xff\xfe\x00", b"\x80{}"):
        make = KernelSpec.from_dict if isinstance(given_as, dict) else KernelSpec.from_json
        with pytest.raises(SpecError) as err:
            make(given_as)
        assert len(str(err.value)) < 2000


@PROFILE
@given(spec_fields(mutations=0), st.data())
def test_mutated_json_text_of_a_valid_spec_gives_a_spec_or_a_spec_error(fields, data):
    text = json.dumps(fields)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, min(len(text), start + 20)))
    mutated = text[:start] + data.draw(hostile_strings | st.text(max_size=5)) + text[end:]
    spec = build(KernelSpec.from_json, mutated)
    if spec is not None:
        assert_only_validated_values(spec)


# ---- the LLM reply parser and proposer -------------------------------------------------------------
class FakeClient:
    """Stands in for the chat client: each complete() answers the next scripted reply text, parsed
    by the client's own parser, as the real client does with the body of a chat completion."""

    def __init__(self, texts: list[str]):
        self.texts = list(texts)

    def complete(self, system, messages, schema, schema_name="reply") -> Reply:
        text = self.texts.pop(0) if self.texts else "no more replies"
        data, error = parse_json(text)
        return Reply(text=text, data=data, message={"role": "assistant", "content": text}, parse_error=error)

    def followup(self, reply: Reply, text: str) -> list[dict]:
        return [reply.message, {"role": "user", "content": text}]

    def close(self) -> None:
        pass


def fake_proposer(texts: list[str]) -> LLMProposer:
    proposer = LLMProposer(BACKENDS, ARCH, provider="openai", model="fuzz-model", base_url="http://127.0.0.1:9/v1",
                           api_key="sk-fuzz")
    proposer.client.close()
    proposer.client = FakeClient(texts)
    return proposer


@st.composite
def reply_texts(draw) -> str:
    """A reply as a model might send it: the schema's object (specs mutated), another JSON value, or
    text around it (fences, prose), or a cut or spliced copy."""
    body = draw(st.sampled_from(["object", "object", "object", "other", "hostile"]))
    if body == "object":
        doc = {"analysis": draw(hostile_strings | st.text(max_size=30)),
               "specs": draw(st.lists(spec_fields(mutations=2) | spec_fields(mutations=0) | random_json,
                                       max_size=4))}
        text = json.dumps(doc)
    elif body == "other":
        text = json.dumps(draw(random_json))
    else:
        text = draw(hostile_strings)
    wrap = draw(st.sampled_from(["bare", "fenced", "prose", "cut", "spliced"]))
    if wrap == "fenced":
        text = f"```json\n{text}\n```"
    elif wrap == "prose":
        text = "Here are my specs }}{{ :\n" + text + "\nHope this helps {{"
    elif wrap == "cut":
        text = text[:draw(st.integers(0, len(text)))]
    elif wrap == "spliced":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(hostile_strings) + text[at:]
    return text


@PROFILE
@given(st.text(max_size=200) | reply_texts())
@example("```")
@example("}{")
@example("```json\n{\"specs\": []}")
def test_the_reply_parser_returns_json_or_a_reason(text):
    data, why = parse_json(text)
    assert isinstance(why, str)
    assert why == "" or data is None  # parsed (JSON null included), or None and the reason


# json.loads raises ValueError (not JSONDecodeError) for an integer past 4300 digits and RecursionError
# for deep nesting; parse_json must turn both into its (None, why), or a reply holding one ends the search.
TOO_LONG_OR_TOO_DEEP = ['{"analysis": "", "specs": [{"stages": ' + "1" * 5000 + "}]}", "[" * 100_000 + "]" * 100_000]


@pytest.mark.parametrize("text", TOO_LONG_OR_TOO_DEEP, ids=["5000-digit integer", "nested 100000 deep"])
def test_the_reply_parser_survives_numbers_too_long_and_nesting_too_deep(text):
    data, why = parse_json(text)
    assert data is None and why
    assert fake_proposer([text, text]).propose(PROBLEM, [], n=4) == []


@PROFILE
@given(st.lists(reply_texts(), min_size=2, max_size=2))
@example([json.dumps({"analysis": "x", "specs": [{"self": 1}, {"backend": TEN_MB}, {"stages": TEN_MB}]})] * 2)
@example([json.dumps({"analysis": TEN_MB, "specs": [{"block_m": 128, "block_n": 128}]}), "{}"])
def test_the_llm_proposer_turns_any_reply_into_valid_proposals_or_rejections(texts):
    proposer = fake_proposer(texts)
    proposals = proposer.propose(PROBLEM, [], n=4)
    assert len(proposals) <= 4
    event(f"{len(proposals)} proposal(s)")
    for p in proposals:
        assert p.spec.backend in BACKENDS and p.spec.arch == ARCH
        assert_only_validated_values(p.spec)
        assert get_backend(p.spec.backend).supports(PROBLEM, p.spec)
        assert_renders_only_validated_values(p.spec, [parse_json(t)[0] for t in texts])
    for r in proposer.rejected:
        assert isinstance(r.reason, str) and r.reason


@pytest.mark.parametrize("field", ["backend", "arch"])
def test_a_rejection_quotes_a_ten_megabyte_value_briefly(field):
    """The reason goes back to the model in the repair request: a huge value must not go with it."""
    proposer = fake_proposer([json.dumps({"analysis": "", "specs": [{field: TEN_MB}]})] * 2)
    assert proposer.propose(PROBLEM, [], n=4) == []
    assert proposer.rejected and all(len(r.reason) < 5000 for r in proposer.rejected)


# ---- the template environment ----------------------------------------------------------------------
def test_templates_refuse_undefined_variables():
    import jinja2

    env = templates.environment()
    assert env.undefined is jinja2.StrictUndefined
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ spec.no_such_field }}").render(spec=KernelSpec())
