"""What a tenant reads for each kind of error LiteLLM 1.108.7 answers (tenant_policy_errors): tenantry's
words, the tenant's own figures kept, nothing of the platform's map or internals. The LiteLLM texts below
are what the local stack's gateway answered for each case."""

from __future__ import annotations

import json

import pytest

from tests.unit.policy_plugin import errors


def litellm(message: str, kind: str | None = None, code: str = "400") -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


FALLBACK_FAILED = litellm(
    'litellm.BadRequestError: Hosted_vllmException - {"error":{"message":"min_tokens must be less than or equal to '
    'max_tokens=4, got 9.","type":"BadRequestError","param":null,"code":400}}\n\nLiteLLM: model group \'tiny\' failed '
    "with the error above. Fallback to micro also failed: Received Model Group=globex-legal\nAvailable Model Group "
    "Fallbacks={'globex-legal': ['micro']}", "invalid_request_error")
CONTEXT = litellm(
    'litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: Hosted_vllmException - '
    '{"error":{"message":"This model\'s maximum context length is 2048 tokens. However, your prompt contains at least '
    '2049 input tokens.","type":"BadRequestError","param":null,"code":400}}\n\nAvailable Model Group Fallbacks='
    "{'globex-legal': ['micro']}")
TEXT_CONTEXT = litellm(
    "litellm.ContextWindowExceededError: OpenAIException - Error code: 400 - This model's maximum context length is "
    "2048 tokens. However, your prompt contains at least 2049 input tokens.\nAvailable Model Group Fallbacks="
    "{'globex-legal': ['micro']}")
DICT_REPR = litellm("litellm.BadRequestError: OpenAIException - Error code: 400 - {'error': {'message': 'top_k must be "
                    "-1 (disable), or at least 1, got 0.', 'type': 'BadRequestError', 'param': None, 'code': 400}}")
PROVIDER_404 = litellm(
    "litellm.NotFoundError: NotFoundError: Lm_studioException - The model `hosted_vllm/tiny` does not exist. Valid "
    "aliases: tiny.\n\nLiteLLM: model group 'tiny' failed with the error above. Fallback to micro also failed", code="404")
TYPE_ERROR = litellm("dictionary update sequence element #0 has length 1; 2 is required", "internal_server_error", "500")
CONNECTION = litellm("litellm.APIConnectionError: Hosted_vllmException - Cannot connect to host 127.0.0.1:19310 "
                     "ssl:default [Connect call failed ('127.0.0.1', 19310)]", code="500")
MISSING_KEY = litellm("litellm.AuthenticationError: The api_key client option must be set either by passing api_key "
                      "to the client or by setting the OPENAI_API_KEY environment variable", code="500")
RPM = litellm("Rate limit exceeded for team: ca2526b4-b782-4a06-b465-997fd8316731. Limit type: requests. Current "
              "limit: 5, Remaining: 0. Limit resets at: 2026-12-05 08:01:43 UTC", "throttling_error", "429")
BUDGET = litellm("Budget has been exceeded! Team=2b74b653-6e67-444b-99ff-1b1fef2b0d7c Current cost: "
                 "4.256944444445e-05, Max budget: 2e-05", "budget_exceeded", "422")
NOT_AVAILABLE = litellm("The requested model 'globex-legal' is not available for this API key, or the model name is "
                        "invalid.", "team_model_access_denied", "403")
TEAM_404 = litellm("{'message': 'Team not found, passed team id: abc.'}", "auth_error", "404")
DATABASE_DOWN = litellm("Service Unavailable, the authentication database is temporarily unreachable. Please retry "
                        "shortly.", "no_db_connection", "503")
MODEL_404 = json.dumps({"detail": "The model `globex-legal` does not exist or is not accessible"}).encode()

LEAKS = ("globex-legal", "micro", "127.0.0.1", "19310", "Exception", "LiteLLM", "litellm", "OPENAI_API_KEY",
         "dictionary update", "Fallback", "ca2526b4", "2b74b653")


def tenant(status: int, raw: bytes, route: str = "chat", model: str | None = "tiny") -> tuple[int, str, str]:
    answer = errors.tenant_error(status, raw, route=route, model=model, call_id="c-1")
    assert not [leak for leak in LEAKS if leak in answer[2]], answer
    return answer


@pytest.mark.parametrize(("status", "raw", "expected"), [
    (400, FALLBACK_FAILED, (400, "invalid_request_error", "the engine refused the request: min_tokens must be less "
                                                          "than or equal to max_tokens=4, got 9.")),
    (400, CONTEXT, (400, "invalid_request_error", "the engine refused the request: This model's maximum context "
                                                  "length is 2048 tokens. However, your prompt contains at least 2049 "
                                                  "input tokens.")),
    (400, TEXT_CONTEXT, (400, "invalid_request_error", "the engine refused the request: This model's maximum context "
                                                       "length is 2048 tokens. However, your prompt contains at least "
                                                       "2049 input tokens.")),
    (400, DICT_REPR, (400, "invalid_request_error", "the engine refused the request: top_k must be -1 (disable), or at "
                                                    "least 1, got 0.")),
    (404, PROVIDER_404, (404, "invalid_request_error", "the engine refused the request: The model `hosted_vllm/tiny` "
                                                       "does not exist. Valid aliases: tiny.")),
    (429, RPM, (429, "rate_limit_error", "the tenant is over its limit of 5 requests a minute; the window ends at "
                                         "2026-12-05 08:01:43 UTC")),
    # the local stack's answer to a key its gateway had not cached, PostgreSQL stopped: it read "an engine failed"
    (503, DATABASE_DOWN, (503, "service_unavailable", "the gateway cannot check this key now: its database is "
                                                      "unreachable (keys used within the last minute keep working); "
                                                      "retry in a minute")),
    (422, BUDGET, (422, "budget_exceeded", "the tenant's budget for this window is spent: 4.25694e-05 USD of 2e-05 USD")),
])
def test_what_the_tenant_needs_is_kept_in_tenantrys_words(status, raw, expected):
    assert tenant(status, raw) == expected


@pytest.mark.parametrize("raw", [TYPE_ERROR, CONNECTION, MISSING_KEY, b"Internal Server Error"])
def test_a_failure_says_what_failed_and_its_call_id_and_nothing_else(raw):
    status, kind, message = tenant(500, raw)
    assert (status, kind) == (500, "engine_error") and "(call id c-1)" in message


def test_a_model_outside_the_tenants_list_is_named_with_where_to_look():
    assert tenant(403, NOT_AVAILABLE, model="../tiny") == (
        403, "permission_denied", "model '../tiny' is not available for this API key; GET /v1/models lists the models "
                                  "it may call")
    assert tenant(404, MODEL_404, route="model", model="other")[:2] == (404, "not_found_error")


def test_another_teams_id_and_a_missing_team_answer_alike():
    assert tenant(404, TEAM_404, route="spend") == tenant(403, litellm("not allowed", code="403"), route="spend") == (
        403, "permission_denied", "a key reads its own key and team only: pass the team_id GET /key/info shows")


def test_a_probe_that_fails_says_only_that_the_gateway_is_not_ready():
    readiness = json.dumps({"status": "unhealthy", "db": "Not connected", "litellm_version": "1.108.7"}).encode()
    assert tenant(503, readiness, route="probe") == (503, "unavailable", "the gateway is not ready")


def test_keys_refused_say_why_without_echoing_the_key():
    unknown = litellm("Authentication Error, Invalid API key provided. Received API Key = sk-...abcd", code="401")
    blocked = litellm("Authentication Error, Key is blocked. Update via `/key/unblock` if you're an admin.", code="401")
    assert "not valid here" in tenant(401, unknown)[2] and "sk-" not in tenant(401, unknown)[2]
    assert tenant(401, blocked)[2].startswith("this key is blocked")


def test_an_engines_message_loses_addresses_and_paths():
    raw = litellm('OpenAIException - {"error": {"message": "Loading lora x failed: No adapter found at '
                  '/models/adapters/x, fetched from http://10.0.0.7:8000/v1 and engine-0.engine:8000"}}', code="400")
    message = tenant(400, raw)[2]
    assert "<path>" in message and message.count("<address>") == 2
    assert not [leak for leak in ("/models/adapters", "10.0.0.7", "engine-0.engine:8000") if leak in message]


def test_a_streams_error_event_is_rewritten_and_its_other_events_kept():
    chunk = (b'data: {"choices": [{"delta": {"content": "\\"error\\""}}]}\n\n'
             b'data: {"error": {"message": "litellm.APIConnectionError: Hosted_vllmException - Cannot connect to host '
             b'127.0.0.1:19310", "code": "500"}}\n\n')
    lines = errors.stream_chunk(chunk, model="tiny", call_id="c-1").split(b"\n")
    assert lines[0] == chunk.split(b"\n")[0]
    event = json.loads(lines[2][6:])["error"]
    assert event["type"] == "engine_error" and "127.0.0.1" not in event["message"] and event["code"] == "500"
