"""`pulumi up`: read the stack's spec, plan it, refuse what does not fit.

A spec error or a plan that does not fit stops the program before any
resource is registered, with the same field-path reasons `tenantry plan`
prints (pulumi.RunError: the message, no Python traceback).
"""

import pulumi

from tenantry.findings import PlanRefused, SpecError
from tenantry.stacks import plan_stack, require_fit

try:
    plan = require_fit(plan_stack(pulumi.Config().require("spec")))
except (SpecError, PlanRefused) as error:
    reasons = "\n".join(f"  {finding}" for finding in error.findings)
    raise pulumi.RunError(f"{error.headline}\n{reasons}") from None

pulumi.export("engines", {e.name: {"replicas": e.replicas, e.gpu_resource or "cpu": e.gpu_resource_count} for e in plan.engines})
pulumi.export("tenant_namespaces", [t.namespace for t in plan.tenants])
