"""The resource-claim controller: claims made for pods, reserved for bound pods, and released
when nobody uses them (upstream's ``resourceclaim`` controller).

One job per module:

- :mod:`.controller`: the watches keep the queue current; the workers take one pod or one
  claim at a time, and a pod's claim statuses are recorded (or left to the allocation
  controller's write, for a while);
- :mod:`.making`: the claims a pod's template entries and extended resources ask for, each
  made once, never another pod's adopted;
- :mod:`.unserved`: pods asking for extended resources that no claim serves (they came past
  the webhook) are told, or made again by their owner;
- :mod:`.boundpods`: a bound pod's own allocated claims reserved for it, and its devices
  annotation kept in step with them;
- :mod:`.release`: reservations of pods that are gone trimmed, claims nobody uses deallocated,
  and claims made for a done pod deleted.

Only :class:`ClaimController` and the reasons it gives are meant for use outside.
"""

from operators.controllers.claims.boundpods import REASON_DEVICES_CORRECTED
from operators.controllers.claims.controller import (
    REASON_FAILED_CREATION,
    REASON_INVALID_CLAIMS,
    STATUSES_DEFER,
    ClaimController,
    WorkKey,
)
from operators.controllers.claims.unserved import REASON_EXTENDED_NOT_SERVED

__all__ = [
    "REASON_DEVICES_CORRECTED",
    "REASON_EXTENDED_NOT_SERVED",
    "REASON_FAILED_CREATION",
    "REASON_INVALID_CLAIMS",
    "STATUSES_DEFER",
    "ClaimController",
    "WorkKey",
]
