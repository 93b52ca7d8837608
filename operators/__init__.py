"""dralloc: Kubernetes Dynamic Resource Allocation with structured parameters, as a kopf operator bundle.

Layers (imports point one way, enforced by import-linter in the test command):
``api`` <- ``cel`` <- ``allocator`` <- ``cache`` <- ``controllers`` / ``toolkit``.
"""

__version__ = "0.1.0"
