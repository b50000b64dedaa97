"""The Kubernetes manifests a stack would apply, and everything they must pass
before anyone applies them, without a cluster or the Pulumi CLI
(`tenantry manifests STACK --out DIR`):

- offline.py: the Pulumi program (__main__.py and tenantry.deploy) run under
  Pulumi's mock runtime, every registered resource recorded and written out
  one YAML file per object, secrets redacted;
- validate.py: those objects against the Kubernetes schemas, strictly, and
  tenantry's custom resources against their structure;
- policies.py, crd_policies.py, engine_policies.py (over resources.py): the deployment policies, shared with
  the Pulumi policy pack under policy/;
- checks.py: schemas and policies together, as the command runs them;
- scan.py: checkov over the written files, with the waivers in
  policy/checkov-waivers.yaml.

This room may import tenantry.deploy (it renders it); deploy never imports it.
"""
