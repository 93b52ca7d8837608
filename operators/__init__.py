"""dralloc: Kubernetes Dynamic Resource Allocation with structured parameters, as a kopf operator bundle.

Layers (imports point one way, enforced by import-linter in the test command):
``api`` <- ``cel`` <- ``allocator`` <- ``scheduling`` <- ``cache`` <- ``controllers`` /
``toolkit`` <- ``cli``; what each holds: docs/design.md "Layers".
"""

import sys as _sys

__version__ = "0.1.0"

# `kopf run -m operators` imports this package after kopf: register the controllers' handlers
# then (and only then; importing the package elsewhere has no side effects).
if "kopf" in _sys.modules and _sys.argv[1:2] == ["run"]:
    import operators.process  # noqa: F401
