"""The gateway as a hostile or careless tenant finds it: every route LiteLLM registers, tried with a
tenant's key and with none; models, requests and keys a tenant should not get through; and no
key in any log. The expected answers are docs/security.md's route table. Requests a tenant may send on
the routes it reaches: tests/local/test_hostile_requests.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid

import httpx
import pytest

from tenantry.configs import litellm as gateway_config
from tenantry.configs.litellm import OPEN_ROUTES
from tenantry.configs.teams import CHAT_ROUTES, COMPLETION_ROUTES, MODEL_LIST_ROUTES, SPEND_VIEW_ROUTES, TENANT_ROUTES
from tenantry.gateway import tenant_policy  # noqa: F401 - puts the plugin's folder on sys.path
from tests.local.conftest import raw_http

import tenant_policy_front_door  # noqa: E402 - the plugin's own neighbour, found through that folder
import tenant_policy_settings as plugin_settings  # noqa: E402

INFERENCE = (*CHAT_ROUTES, *COMPLETION_ROUTES)
MODELS = MODEL_LIST_ROUTES
PROBE_MODEL = "globex-legal"
"""What a route's path parameters are filled with: another tenant's adapter, where a model goes."""


@pytest.fixture(scope="module")
def registered(stack) -> list[dict]:
    """Every route LiteLLM 1.108.7 registers (tests/local/litellm_routes.py: included routers, routes kept out
    of its OpenAPI document, WebSockets and mounts), with those its running gateway's /openapi.json adds."""
    listed = subprocess.run([sys.executable, "-m", "tests.local.litellm_routes"], capture_output=True, text=True,
                            check=True, timeout=300)
    routes = json.loads(listed.stdout)
    with stack.client() as operator:
        served = operator.get("/openapi.json").json()["paths"]
    known = {r["path"] for r in routes}
    routes += [{"path": path, "methods": sorted(m.upper() for m in operations), "kind": "http"}
               for path, operations in served.items() if path not in known]
    assert len(routes) > 600 and sum(r["kind"] == "websocket" for r in routes) >= 5, "the route list looks truncated"
    return routes


def _filled(path: str) -> str:
    return re.sub(r"\{[^}]*\}", PROBE_MODEL, path)


def _front_door(stack):
    settings = plugin_settings.parse_settings(gateway_config.tenant_policy_settings(stack.up.plan))
    return tenant_policy_front_door.FrontDoor(None, settings.front_door, master_key="")


def _tenant_pairs(stack, routes: list[dict]) -> set[tuple[str, str]]:
    """(method, path) of the registered routes the front door lets a tenant call: a POST route of chat or text
    completions, or a GET of the model list, one model, the spend view or a probe."""
    door, allowed = _front_door(stack), set()
    for route in routes:
        kind = door.route(_filled(route["path"])) if route["kind"] == "http" else None
        for method in route["methods"]:
            if kind and method == ("POST" if kind in ("chat", "completion") else "GET"):
                allowed.add((method, route["path"]))
    return allowed


def test_the_front_door_lets_a_tenant_call_exactly_the_inference_api_its_models_its_spend_and_the_probes(
        stack, registered):
    assert _tenant_pairs(stack, registered) == {
        *(("POST", p) for p in INFERENCE), *(("GET", p) for p in (*MODELS, *SPEND_VIEW_ROUTES, *OPEN_ROUTES)),
        ("GET", "/v1/models/{model_id}"), ("GET", "/models/{model_id}")}


@pytest.mark.parametrize("path", INFERENCE)
def test_each_inference_route_on_the_allow_list_serves_the_tenants_own_models_only(stack, path):
    """The one rule on every POST route the front door lets through: another tenant's adapter is a 403, its own
    model is served."""
    asked = ({"messages": [{"role": "user", "content": "hi"}]} if path in CHAT_ROUTES else {"prompt": "hi"})
    with stack.client("acme") as acme:
        other = acme.post(path, json={"model": PROBE_MODEL, "max_tokens": 1, **asked})
        own = acme.post(path, json={"model": "acme-support", "max_tokens": 1, **asked})
    assert (other.status_code, other.headers.get("X-Tenantry-Error")) == (403, "permission_denied"), other.text[:300]
    assert f"model '{PROBE_MODEL}' is not available for this API key" in other.json()["error"]["message"]
    assert own.status_code == 200, own.text[:300]


@pytest.mark.parametrize("who", ["acme", None], ids=["tenant-key", "no-key"])
def test_every_other_registered_route_is_refused_at_the_front_door(stack, registered, who):
    """Management, spend, key, team, user, config, cache, debug, UI, pass-through, Google-, Anthropic- and
    OpenAI-shaped inference routes and every method but the one a tenant route answers: 404 or 405 from the
    front door (its error header and message), with a tenant's key and with none, before LiteLLM reads a byte.
    WebSockets are closed (403)."""
    allowed, wrong = _tenant_pairs(stack, registered), []
    headers = {"Authorization": f"Bearer {stack.key(who)}"} if who else {}
    with httpx.Client(base_url=stack.url, headers=headers, timeout=30) as client:
        for route in registered:
            path = _filled(route["path"])
            if route["kind"] == "websocket":
                answer = raw_http(stack.url, f"GET {path} HTTP/1.1\r\nHost: g\r\nUpgrade: websocket\r\nConnection: "
                                             "Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                             "Sec-WebSocket-Version: 13\r\n\r\n".encode())
                if not answer.startswith(b"HTTP/1.1 403"):
                    wrong.append(f"WebSocket {path}: {answer[:60]!r}")
                continue
            for method in route["methods"] or ["GET", "POST"]:
                if (method, route["path"]) in allowed:
                    continue  # the inference routes, their one rule and the spend view: tested by their own
                asked = path + ("/x" if route["kind"] == "mount" else "")
                answer = client.request(method, asked, json={} if method in ("POST", "PUT", "PATCH") else None)
                refusal = answer.headers.get("X-Tenantry-Error") in ("not_found_error", "method_not_allowed")
                if answer.status_code not in (404, 405) or not refusal:
                    wrong.append(f"{method} {asked}: {answer.status_code} {answer.text[:80]}")
    assert wrong == [], wrong


def test_the_routes_a_tenant_key_may_call_are_the_inference_api_its_model_list_and_its_spend():
    assert set(TENANT_ROUTES) == set(INFERENCE) | set(MODELS)
    assert SPEND_VIEW_ROUTES == {"/key/info": (), "/team/info": ("team_id",)}


@pytest.mark.parametrize("path", ["/model/info", "/v1/model/info", "/health", "/routes", "/ui", "/sso/key/generate",
                                  "/key/list", "/team/list", "/global/spend/logs", "/spend/logs", "/user/info",
                                  "/config/yaml", "/cache/ping", "/openapi.json", "/public/model_hub"])
def test_the_routes_found_open_to_a_tenant_are_a_404_naming_the_tenant_routes(stack, path):
    with stack.client("acme") as acme:
        answer = acme.get(path)
    assert answer.status_code == 404, (path, answer.text[:200])
    assert answer.json()["error"]["message"] == f"no route {path} here: a tenant's key calls {_front_door(stack).described()}"


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
    "malformed JSON": ('{"model": "tiny", "messages": [}', 400, "invalid JSON"),
    "a JSON array": ("[]", 400, "must be a JSON object"),
    "a number": ("42", 400, "must be a JSON object"),
    "max_tokens of the wrong type": (_chat("tiny", max_tokens="many"), 400, "max_tokens must be an integer"),
    "a model that is a list": (_chat(["tiny"]), 400, "model must name one model"),
    "a NUL byte in the model": (_chat("tiny\u0000"), 403, "not available for this API key"),
    "a path in the model": (_chat("../tiny"), 403, "not available for this API key"),
    "another tenant's adapter behind a path": (_chat("tiny/../globex-legal"), 403, "not available for this API key"),
    "the engine's provider prefix": (_chat("hosted_vllm/tiny"), 403, "not available for this API key"),
    "another tenant's adapter": (_chat("globex-legal"), 403, "not available for this API key"),
    "no body": ("", 400, "the request has no body"),
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
    assert "prompt must be a string (or a list of one string)" in answer.json()["error"]["message"]


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
