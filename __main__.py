"""`pulumi up`: read the stack's spec, plan it, build the platform.

A spec error or a plan that does not fit stops the program before any
resource is registered, with the same field-path reasons `tenantry plan`
prints (pulumi.RunError: the message, no Python traceback).
"""

import pulumi

from tenantry.deploy.platform import Platform, PlatformArgs
from tenantry.findings import PlanRefused, SpecError
from tenantry.stacks import plan_stack, require_fit

try:
    plan = require_fit(plan_stack(pulumi.Config().require("spec")))
except (SpecError, PlanRefused) as error:
    reasons = "\n".join(f"  {finding}" for finding in error.findings)
    raise pulumi.RunError(f"{error.headline}\n{reasons}") from None

platform = Platform("tenantry", PlatformArgs(plan))
pulumi.export("gateway_url", platform.gateway_url)
pulumi.export("tenant_namespaces", platform.tenant_namespaces)
