"""The local stack: the same Plan as processes on one machine (real vLLM on
CPU, LiteLLM in database mode, PostgreSQL, Redis, Prometheus with the
Plan's alert rules, Alertmanager), run by supervisord. See `tenantry local --help`.

    layout.py         where things live; the one map of process name to port
    stack.py          `local up | status | down | logs`: the life cycle
    services.py       each process's configuration, rendered from the Plan
    supervisor.py     talking to supervisord; stopping and restarting an engine
    health.py         ports, health URLs, PIDs; LocalStackError
    postgres.py       the database cluster, role and database
    credentials.py    secrets, tenant keys, the gateways' environment
    models.py         the engines' small random-weight models, built once
    smoke.py          `local smoke`: one request per tenant
    alert_receiver.py the webhook Alertmanager delivers to: what would page, what would be a ticket
    side_gateways.py  LiteLLM processes beside the stack's own, for comparisons
    target.py         the local stack as the gate's Target
    prisma/           LiteLLM's database client through a bridge
"""
