"""Every config derived from the Plan lives here: vLLM's arguments
(vllm.py), LiteLLM's config and the tenant-policy plugin's settings
(litellm.py), the reconciler's desired teams (teams.py), and from now on
alert rules, dashboards and inventories. Each is a pure function of the Plan,
shared by the Kubernetes program (tenantry.deploy) and the local stack
(tenantry.local), so both run the same thing; nothing here imports either."""
