"""Pulumi components, one per concern, composed by Platform. A Plan goes in,
Kubernetes resources come out; no component computes a number."""
