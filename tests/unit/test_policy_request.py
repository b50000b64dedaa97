"""What a tenant's inference request may carry (tenant_policy_request.checked_body), field by field: each
field LiteLLM would act on is refused by name, each allowed one is held to its type, and LiteLLM reads the
object checked. Live: tests/local/test_hostile_requests.py."""

from __future__ import annotations

import json

import pytest

from tests.unit.policy_plugin import request

MESSAGES = [{"role": "user", "content": "hi"}]


def chat(**fields) -> bytes:
    return json.dumps({"model": "tiny", "messages": MESSAGES, **fields}).encode()


def text(**fields) -> bytes:
    return json.dumps({"model": "tiny", "prompt": "hi", **fields}).encode()


def refused(kind: str, body: bytes) -> str:
    with pytest.raises(request.Refused) as refusal:
        request.checked_body(kind, body)
    assert refusal.value.status == 400
    return refusal.value.message


@pytest.mark.parametrize(("field", "value", "says"), [
    ("extra_body", {"max_tokens": 1500}, "send its fields at the top level"),
    ("extra_headers", {"x": "y"}, "the gateway sets the engine's headers itself"),
    ("metadata", {"tenantry_rerouted": "x"}, "keeps no client metadata"),
    ("custom_llm_provider", "lm_studio", "the gateway chooses how it reaches each engine"),
    ("api_key", "sk-x", "the gateway chooses how it reaches each engine"),
    ("api_base", "http://elsewhere", "the gateway chooses how it reaches each engine"),
    ("base_url", "http://elsewhere", "the gateway chooses how it reaches each engine"),
    ("timeout", 0.001, "the gateway's timeouts are the platform's"),
    ("num_retries", 8, "does not retry a request on the client's say"),
    ("fallbacks", ["globex-legal"], "not asked for"),
    ("user_config", {"model_list": []}, "a chat request takes"),
    ("mock_response", "hi", "a chat request takes"),
    ("litellm_metadata", {}, "a chat request takes"),
    ("functions", [], "a chat request takes"),
])
def test_a_field_litellm_would_act_on_is_refused_by_name(field, value, says):
    message = refused("chat", chat(**{field: value}))
    assert message.startswith(f"{field}: not accepted by this gateway") and says in message


@pytest.mark.parametrize(("kind", "body", "says"), [
    ("chat", chat(model="tiny,tiny"), "model must name one model, not a comma list"),
    ("chat", chat(model=["tiny"]), "model must name one model"),
    ("chat", chat(n=8), "n must be 1"),
    ("completion", text(n=2), "n must be 1"),
    ("completion", text(prompt=["a"] * 8), "prompt must be one prompt: a list of 8 would run 8 sequences"),
    ("completion", text(prompt=[1, 2, 3]), "takes no token ids"),
    ("completion", text(prompt=5), "prompt must be a string"),
    ("completion", text(max_completion_tokens=5), "text completions take max_tokens"),
    ("completion", text(best_of=4), "one sequence per request"),
    ("chat", chat(max_tokens="many"), "max_tokens must be an integer"),
    ("chat", chat(max_tokens=0), "max_tokens must be at least 1"),
    ("chat", chat(max_completion_tokens=True), "max_completion_tokens must be an integer"),
    ("chat", chat(temperature="hot"), "temperature must be a number"),
    ("chat", chat(seed=2**60), "seed must be an integer"),
    ("chat", chat(stream="yes"), "stream must be true or false"),
    ("chat", chat(stream_options={"include_usage": True, "x": 1}), "stream_options must be an object"),
    ("chat", chat(stop=5), "stop must be a string or a list of strings"),
    ("chat", chat(logit_bias={"5": "x"}), "logit_bias must be an object of token ids to numbers"),
    ("chat", chat(tools=[{"type": "code"}]), "tools[0] must be an object with type \"function\""),
    ("chat", chat(tools=[{"type": "function", "function": {}}]), "tools[0].function.name must be a string"),
    ("chat", chat(response_format="json"), "response_format must be an object"),
    ("chat", chat(messages="hello"), "messages must be a non-empty list of message objects"),
    ("chat", chat(messages=[]), "messages must be a non-empty list of message objects"),
    ("chat", chat(messages=[None]), "messages[0] must be an object with a role and content"),
    ("chat", chat(messages=[*MESSAGES, {"role": 1, "content": "hi"}]), "messages[1].role must be one of"),
    ("chat", chat(messages=[{"role": "user", "content": 5}]), "messages[0].content must be a string or a list"),
    ("chat", chat(messages=[{"role": "user", "content": [{"text": "hi"}]}]), "messages[0].content[0] must be an object"),
    ("chat", chat(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}]),
     "messages[0].content[0].text must be a string"),
    ("chat", chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]),
     "messages[0].content[0].type: only text parts are served here"),
    ("chat", chat(messages=[{"role": "user", "content": "hi", "cache_control": {}}]),
     "messages[0].cache_control: not accepted in a message"),
    ("chat", json.dumps({"model": "tiny"}).encode(), "messages: missing"),
    ("completion", json.dumps({"prompt": "hi"}).encode(), "model: missing"),
])
def test_a_field_of_the_wrong_shape_is_a_400_naming_it(kind, body, says):
    assert says in refused(kind, body)


@pytest.mark.parametrize(("body", "says"), [
    (b"", "the request has no body"),
    (b"[]", "must be a JSON object"),
    (b" 42", "must be a JSON object"),
    (b"null", "must be a JSON object"),
    (b'{"model": "tiny", "messages": [}', "invalid JSON"),
    (b'{"model": "tiny", "model": "globex-legal", "messages": []}', "the key 'model' appears twice in one object"),
    (b'{"model": "tiny", "messages": [], "temperature": NaN}', "NaN is not a JSON number"),
    (b'{"model": "tiny", "temperature": 1e999, "messages": []}', "1e999 is not a finite number"),
    (b'{"model": "tiny", "logit_bias": {"5": -1e400}, "messages": []}', "-1e400 is not a finite number"),
    (b'{"model": "tiny", "seed": 123456789012345678901234567890, "messages": []}', "does not fit in 64 bits"),
    (b'{"model":"tiny","messages":[{"role":"user","content":"\\ud800"}]}', "a lone surrogate"),
    (b'{"model":"tiny","x":' + b"[" * 5000 + b"]" * 5000 + b"}", "deeper than 32 levels"),
    (b'{"model":"tiny","messages":' + b"[" * 40 + b"]" * 40 + b"}", "deeper than 32 levels"),
    (b'\xff\xfe{"model": "tiny"}', "invalid JSON"),
])
def test_a_body_two_parsers_could_read_apart_is_refused(body, says):
    assert says in refused("chat", body)


def test_what_a_tenant_may_send_reaches_litellm_as_sent_but_the_end_user():
    fields = dict(max_tokens=4, max_completion_tokens=4, temperature=0.5, top_p=0.9, top_k=5, min_p=0.1, n=1,
                  stream=True, stream_options={"include_usage": True}, stop=["zz"], presence_penalty=0.1,
                  frequency_penalty=0.1, repetition_penalty=1.1, logit_bias={"5": 1}, seed=3, min_tokens=2,
                  ignore_eos=True, priority=-5, cache_salt="forged", logprobs=True, top_logprobs=2,
                  response_format={"type": "json_object"}, tool_choice="none", parallel_tool_calls=False,
                  tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
                  messages=[{"role": "system", "content": None}, {"role": "user", "content": [
                      {"type": "text", "text": "h\u00e9"}]}, {"role": "tool", "content": "x", "tool_call_id": "1"}])
    body, model = request.checked_body("chat", chat(**fields, user="end-user-1", safety_identifier="s"))
    assert model == "tiny" and json.loads(body) == {"model": "tiny", **fields}
    body, _ = request.checked_body("completion", text(prompt=["one"], echo=False, logprobs=2))
    assert json.loads(body) == {"model": "tiny", "prompt": ["one"], "echo": False, "logprobs": 2}


def test_depth_counts_objects_and_lists_without_recursion():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert request.depth(deep) == 5001 and request.depth({"a": [1, {"b": 2}]}) == 3 and request.depth(7) == 0
