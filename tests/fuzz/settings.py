"""Shared hypothesis settings for the fuzz suite: modest in CI, larger on request.

``DRALLOC_FUZZ_EXAMPLES`` raises the number of examples per property (default 200) for a
longer local run. The per-example deadline is generous because the machine is shared; the
tests that guard against runaway work also measure wall time themselves.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Final

from hypothesis import HealthCheck, settings

EXAMPLES: Final = int(os.environ.get("DRALLOC_FUZZ_EXAMPLES", "200"))
DEADLINE: Final = timedelta(seconds=5)

FUZZ: Final = settings(
    max_examples=EXAMPLES,
    deadline=DEADLINE,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
