"""The platform spec: schema, loading, and the checks that span fields."""

from tenantry.spec.load import load_spec, load_spec_text, stack_name_of
from tenantry.spec.schema import Spec

__all__ = ["Spec", "load_spec", "load_spec_text", "stack_name_of"]
