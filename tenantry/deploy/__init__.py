"""Pulumi components, one per concern, composed by Platform. A Plan goes in,
Kubernetes resources come out: every figure that sizes or places something
comes from the Plan, and a component only writes it as Kubernetes wants it
(whole MiB rounded up, millicores, CPU limits at twice the request, probe
periods, a disruption budget one below the replicas) or carries the fixed size
of a platform helper such as a fetch container (docs/decisions.md: Components
convert the Plan's figures, they do not plan). Offline rendering and the checks
over it live in tenantry.manifests; nothing here imports the local stack."""
