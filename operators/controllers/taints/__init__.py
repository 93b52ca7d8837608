"""The device-taint eviction controller: pods whose devices carry a NoExecute taint they do not
tolerate are evicted, and each DeviceTaintRule says what it caused (upstream's
``devicetainteviction``).

- :mod:`.controller`: the watches keep each pod's eviction deadline current; the worker evicts
  when it is due, at a limited rate (:mod:`operators.controllers.eviction`);
- :mod:`.rulestatus`: each rule's ``EvictionInProgress`` condition (or Events, where the rule
  has no status);
- :mod:`.ledger`: what was scheduled, done and refused, which the worker writes and the rules'
  conditions count.

The rules themselves (which taints hold, which deadline) are pure: operators.controllers.taintrules.
"""

from operators.controllers.taints.controller import REASON_EVICTION, TaintController
from operators.controllers.taints.rulestatus import CONDITION, RULE_STATUS_PERIOD

__all__ = ["CONDITION", "REASON_EVICTION", "RULE_STATUS_PERIOD", "TaintController"]
