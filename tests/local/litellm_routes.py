"""Print every route LiteLLM's proxy registers, as JSON: `python -m tests.local.litellm_routes`.

FastAPI 0.165 keeps included routers as routers (`/routes` and `app.routes` list 21 entries), and
/openapi.json leaves out the routes registered with include_in_schema=False; fastapi.routing's
iter_route_contexts walks every one of them, WebSocket routes and mounts included. Importing the proxy takes
about 20 s of CPU, so the live route test runs this once, in a process of its own.
"""

from __future__ import annotations

import json
import os


def registered() -> list[dict]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no cost-map download on import
    from fastapi.routing import iter_route_contexts
    from litellm.proxy import proxy_server

    routes = []
    for context in iter_route_contexts(proxy_server.app.routes):
        kind = type(context.original_route).__name__
        kind = "websocket" if "WebSocket" in kind else "mount" if kind == "Mount" else "http"
        routes.append({"path": context.path, "methods": sorted(context.methods or ()), "kind": kind})
    return routes


if __name__ == "__main__":
    print(json.dumps(registered()))
