"""Configuration rendered from the Plan for the processes that run it: vLLM's
arguments, LiteLLM's config, the tenant-policy settings. Shared by the
Kubernetes program (deploy/) and the local stack, so both run the same thing."""
