"""`pulumi up`: read the stack's spec, plan it, build the platform.

A spec error or a plan that does not fit stops the program before any
resource is registered, with the same field-path reasons `tenantry plan`
prints (pulumi.RunError: the message, no Python traceback); so does an
engine whose weights come from a gated Hub repository while no Hub token is
configured (`pulumi config set --secret tenantry:hfToken ...`).
"""

import pulumi

from tenantry.deploy.model_cache import HF_TOKEN_CONFIG, gated_engines, missing_hub_token_message
from tenantry.deploy.platform import Platform, PlatformArgs
from tenantry.findings import PlanRefused, SpecError
from tenantry.stacks import plan_stack, require_fit

config = pulumi.Config()
try:
    plan = require_fit(plan_stack(config.require("spec")))
except (SpecError, PlanRefused) as error:
    reasons = "\n".join(f"  {finding}" for finding in error.findings)
    raise pulumi.RunError(f"{error.headline}\n{reasons}") from None

hub_token = config.get_secret(HF_TOKEN_CONFIG)
if hub_token is None and (gated := gated_engines(plan)):
    raise pulumi.RunError(missing_hub_token_message(gated, pulumi.get_stack()))

platform = Platform("tenantry", PlatformArgs(plan, hub_token=hub_token))
pulumi.export("gateway_url", platform.gateway_url)
pulumi.export("tenant_namespaces", platform.tenant_namespaces)
