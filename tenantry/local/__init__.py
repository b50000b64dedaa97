"""The local stack: the same Plan as processes on one machine (real vLLM on
CPU, LiteLLM in database mode, PostgreSQL, Redis, Prometheus), run by
supervisord. See `tenantry local --help`."""
