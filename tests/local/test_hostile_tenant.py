"""The gateway as a hostile or careless tenant finds it: every route LiteLLM serves, tried with a
tenant's key and with none; models, requests and keys a tenant should not get through; and no
key in any log. The expected answers are docs/security.md's route table."""

from __future__ import annotations

import json
import re
import uuid

import httpx
import pytest

from tenantry.configs.litellm import OPEN_ROUTES
from tenantry.configs.teams import SPEND_VIEW_ROUTES, TENANT_ROUTES

INFERENCE = ("/chat/completions", "/v1/chat/completions", "/completions", "/v1/completions")
MODELS = ("/models", "/v1/models")


def _under(path: str, routes: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in routes)


@pytest.fixture(scope="module")
def every_route(stack) -> list[tuple[str, str]]:
    """(method, path) of every operation in LiteLLM's own OpenAPI document, path parameters filled in."""
    with stack.client() as admin:
        paths = admin.get("/openapi.json").json()["paths"]
    routes = []
    for path, operations in paths.items():
        methods = [m.upper() for m in operations if m in ("get", "post", "put", "patch", "delete")]
        routes += [(method, re.sub(r"\{[^}]*\}", "x", path)) for method in methods]
    assert len(routes) > 500, "LiteLLM's route table looks truncated"
    return routes


@pytest.mark.parametrize("who", ["acme", None], ids=["tenant-key", "no-key"])
def test_every_route_but_the_inference_api_is_closed(stack, every_route, who):
    """Management, spend, key, team, user, model, config, cache, debug, UI and pass-through routes
    answer 401, 403 or 404; only /models (the tenant's own list, or 401 without a key), the tenant's
    own key row (/key/info) and the probes answer 200 (/team/info without the tenant's team id is
    LiteLLM's 422; tests/local/test_spend_view_live.py reads it with one); nothing answers 5xx."""
    answers: dict[int, list[str]] = {}
    headers = {"Authorization": f"Bearer {stack.key(who)}"} if who else {}
    with httpx.Client(base_url=stack.url, headers=headers, timeout=30) as client:
        for method, path in every_route:
            if _under(path, INFERENCE):
                continue  # tried below with real requests
            status = client.request(method, path, json={} if method != "GET" else None).status_code
            answers.setdefault(status, []).append(f"{method} {path}")
    opened = [r for s, routes in answers.items() if 200 <= s < 400 for r in routes]
    expected_open = {f"GET {p}" for p in OPEN_ROUTES} | ({f"GET {p}" for p in (*MODELS, "/key/info")} if who else set())
    assert set(opened) == expected_open, opened
    assert not [s for s in answers if s >= 500], {s: answers[s] for s in answers if s >= 500}
    assert answers.pop(422, []) == (["GET /team/info"] if who else []), answers.get(422)
    assert set(answers) - {200} <= {401, 403, 404, 405}, {s: answers[s][:5] for s in answers}


def test_the_routes_a_tenant_key_may_call_are_the_inference_api_its_model_list_and_its_spend():
    assert set(TENANT_ROUTES) == set(INFERENCE) | set(MODELS)
    assert SPEND_VIEW_ROUTES == ("/key/info", "/team/info")


@pytest.mark.parametrize("path", ["/model/info", "/v1/model/info", "/health", "/routes", "/ui", "/sso/key/generate",
                                  "/key/list", "/team/list", "/global/spend/logs", "/spend/logs", "/user/info",
                                  "/config/yaml", "/cache/ping", "/openapi.json", "/public/model_hub"])
def test_the_routes_found_open_to_a_tenant_are_a_404_naming_the_tenant_routes(stack, path):
    with stack.client("acme") as acme:
        answer = acme.get(path)
    assert answer.status_code == 404, (path, answer.text[:200])
    routes = ", ".join((*TENANT_ROUTES, *SPEND_VIEW_ROUTES))
    assert answer.json()["error"]["message"] == f"no route {path} here: a tenant's key calls {routes}"


def test_models_lists_exactly_what_the_tenant_may_call(stack):
    for tenant in stack.up.plan.tenants:
        with stack.client(tenant.name) as client:
            listed = {m["id"] for m in client.get("/v1/models").json()["data"]}
            others = {a for t in stack.up.plan.tenants for a in t.adapters} - set(tenant.adapters)
            for other in sorted(others - listed)[:2]:
                assert client.get(f"/v1/models/{other}").status_code == 404
        assert listed == {*tenant.models, *tenant.adapters, *tenant.fallback_models}, tenant.name


def test_the_open_routes_tell_nothing_about_tenants_models_or_engines(stack):
    plan = stack.up.plan
    secrets = {t.name for t in plan.tenants} | {a for t in plan.tenants for a in t.adapters}
    secrets |= {str(port) for port in stack.up.ports.engines.values()}
    for path in OPEN_ROUTES:
        body = httpx.get(stack.url + path, timeout=30).text
        assert not [s for s in secrets if re.search(rf"\b{re.escape(s)}\b", body)], (path, body[:300])


def _post(stack, tenant: str | None, path: str, content: bytes | str, headers: dict | None = None) -> httpx.Response:
    token = stack.key(tenant) if tenant else "sk-" + uuid.uuid4().hex
    return httpx.post(stack.url + path, content=content, timeout=60,
                      headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", **(headers or {})})


def _chat(model, **fields) -> str:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **fields})


BAD_REQUESTS = {
    "malformed JSON": ('{"model": "tiny", "messages": [}', 400, "Invalid JSON"),
    "a JSON array": ("[]", 400, "must be a JSON object"),
    "a number": ("42", 400, "must be a JSON object"),
    "max_tokens of the wrong type": (_chat("tiny", max_tokens="many"), 400, "max_tokens"),
    "a model that is a list": (_chat(["tiny"]), 400, "'model' must be a string"),
    "a NUL byte in the model": (_chat("tiny\u0000"), 403, "not available for this API key"),
    "a path in the model": (_chat("../tiny"), 403, "not available for this API key"),
    "another tenant's adapter behind a path": (_chat("tiny/../globex-legal"), 403, "not available for this API key"),
    "the engine's provider prefix": (_chat("hosted_vllm/tiny"), 403, "not available for this API key"),
    "another tenant's adapter": (_chat("globex-legal"), 403, "not available for this API key"),
    "no body": ("", 400, "Missing required parameter"),
    # LiteLLM 1.108.7 answered these three with a 500 or its own exception text, after calling the engine
    # and its fallback: the front door refuses them first.
    "content that is a number": (json.dumps({"model": "tiny", "messages": [{"role": "user", "content": 5}]}), 400,
                                 "messages[0].content must be a string or a list of content parts"),
    "messages that are a string": (json.dumps({"model": "tiny", "messages": "hello"}), 400,
                                   "messages must be a non-empty list of message objects"),
    "a role that is a number": (json.dumps({"model": "tiny", "messages": [{"role": 1, "content": "hi"}]}), 400,
                                "messages[0].role must be one of"),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_a_bad_request_is_a_clean_4xx_with_what_was_wrong(stack, case):
    body, status, message = BAD_REQUESTS[case]
    answer = _post(stack, "acme", "/v1/chat/completions", body)
    assert answer.status_code == status, (case, answer.text[:300])
    assert message in answer.json()["error"]["message"] and "Traceback" not in answer.text


@pytest.mark.parametrize("prompt", [5, [1, 2, 3]], ids=["number", "token-ids"])
def test_a_completion_prompt_that_is_not_text_is_a_400_not_litellms_500(stack, prompt):
    answer = _post(stack, "acme", "/v1/completions", json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 4}))
    assert answer.status_code == 400, answer.text[:300]
    assert "prompt must be a string or a non-empty list of strings" in answer.json()["error"]["message"]


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_a_multi_megabyte_prompt_is_refused_before_it_is_read(stack, chunked):
    limit = stack.up.plan.gateway.max_request_bytes
    body = json.dumps({"model": "tiny", "prompt": "token " * 800_000, "max_tokens": 4})  # 4.8 MB
    content = iter([body[i:i + 65536].encode() for i in range(0, len(body), 65536)]) if chunked else body
    answer = _post(stack, "acme", "/v1/completions", content)
    assert answer.status_code == 413, answer.text[:300]
    assert answer.json()["error"]["message"].startswith(f"request body larger than {limit} bytes")


def test_a_prompt_within_the_body_limit_but_beyond_the_engines_context_is_a_400_naming_it(stack):
    """The tests' stack caps no tier's prompt (tests/unit cover the caps); the engine's context still bounds it."""
    context = stack.up.plan.engine("tiny").kv.max_context
    answer = _post(stack, "acme", "/v1/completions",
                   json.dumps({"model": "tiny", "prompt": "token " * (2 * context), "max_tokens": 4}))
    assert answer.status_code == 400, answer.text[:300]
    assert str(context) in answer.json()["error"]["message"]


def test_unknown_and_blocked_keys_are_refused_with_401(stack):
    unknown = _post(stack, None, "/v1/chat/completions", _chat("tiny"))
    assert unknown.status_code == 401, unknown.text
    with stack.client() as admin:
        team = admin.post("/team/new", json={"team_alias": f"blocked-{uuid.uuid4().hex[:6]}", "models": ["tiny"]}).json()
        key = admin.post("/key/generate", json={"team_id": team["team_id"]}).json()["key"]
        assert admin.post("/key/block", json={"key": key}).status_code == 200
    answer = httpx.post(stack.url + "/v1/chat/completions", content=_chat("tiny"), timeout=60,
                        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    assert answer.status_code == 401 and "blocked" in answer.json()["error"]["message"].lower(), answer.text


def test_no_log_of_the_stack_holds_a_key(stack):
    """Every process's log, after every test of this module has sent keys good and bad."""
    keys = {**stack.up.keys, "master": stack.master_key}
    for log in stack.layout.logs.rglob("*"):
        if log.is_file():
            text = log.read_text(errors="replace")
            leaked = [name for name, key in keys.items() if key in text]
            assert not leaked, f"{log.name} holds the key of {leaked}"
