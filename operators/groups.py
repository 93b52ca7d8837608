"""The API groups dralloc runs on: the one home of their names.

dralloc's own CRDs (``resource.dralloc.dev``, the default) or the in-tree kinds
(``resource.k8s.io``); what the two modes do differently for pods is
:mod:`operators.api.podprotocol`'s. This module imports nothing, so that the CLI's ``--help``
can name the choices without loading the models.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "resource.dralloc.dev"
KUBERNETES_GROUP: Final = "resource.k8s.io"
VERSION: Final = "v1"
"""The version both groups serve the DRA kinds at (dralloc's CRDs mirror ``resource.k8s.io/v1``)."""
API_GROUPS: Final = (GROUP, KUBERNETES_GROUP)
"""Both, dralloc's first (the default)."""
