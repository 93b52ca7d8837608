"""The allocation controller: it chooses a node and devices for the pods at dralloc's gate (and
for bound pods, and in-tree for pods that passed the gate by), writes them, and lifts the gate.

One job per module, in the order a pod goes through them:

- :mod:`.controller`: the watches keep the allocator state and the queue current; the worker
  takes one pod at a time and answers what its decision came to (:mod:`.outcomes`);
- :mod:`.gangdecision`: a member of a gang is decided with its whole gang, all or nothing;
- :mod:`.decide`: one pod's decision, its claims read, the node filter on the event loop and
  the device search in the decision thread (:mod:`.thread`);
- :mod:`.commit`: the devices counted as used at once, then the writes in the background, on
  one path for a pod alone and a gang;
- :mod:`.writes`: the write protocol (claims first, the pod last, each conditional) and what
  is being written now;
- :mod:`.reporting`: why a pod waits, on its condition, its claims' conditions and Events.

Only :class:`AllocationController` and :func:`allocator_features` are meant for use outside.
"""

from operators.controllers.allocation.controller import (
    AllocationController,
    allocator_features,
)

__all__ = ["AllocationController", "allocator_features"]
