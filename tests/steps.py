"""Work measured in steps, not seconds: a wall-clock limit on a loaded 2-core machine proves
little either way (a slow run fails a correct program, a fast one hides a regression).

``step_limit`` counts every function call (Python or C) made while its block runs and stops
the block with ``TooManySteps`` once the count exceeds the limit, so a program that does not
stop fails quickly instead of hanging. The count is deterministic for the same code.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any


class TooManySteps(BaseException):  # BaseException: no `except Exception` eats it
    """The block made more calls than its limit."""


@dataclass
class Steps:
    limit: int
    count: int = 0
    c_functions: dict[str, int] = field(default_factory=dict)


@contextmanager
def step_limit(limit: int) -> Iterator[Steps]:
    steps = Steps(limit)

    def profile(_frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "c_call"):
            return
        steps.count += 1
        if event == "c_call":
            name = f"{getattr(arg, '__module__', None) or ''}.{arg.__qualname__}"
            steps.c_functions[name] = steps.c_functions.get(name, 0) + 1
        if steps.count > limit:
            raise TooManySteps(f"more than {limit} calls")

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield steps
    finally:
        sys.setprofile(previous)
