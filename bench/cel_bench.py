"""Micro-benchmark: device-selector evaluations per second, ours vs celpy's interpreter.

Run with ``python -m bench.cel_bench``. Both engines evaluate the same few
typical DRA selectors against the same device in the same process; the
device view is built once (as the allocator does per ResourceSlice change),
celpy gets its activation built once too, so only evaluation is timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from fractions import Fraction
from functools import partial
from typing import Any, cast

import celpy
from celpy import celtypes

from operators.cel import DeviceView, Quantity, Semver, compile_selector

DRIVER = "gpu.example.com"
SELECTORS = {
    "driver equality": f'device.driver == "{DRIVER}"',
    "attribute + quantity": (
        f'device.attributes["{DRIVER}"].model == "A100" && '
        f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'
    ),
    "macro over list attribute": (
        f'device.attributes["{DRIVER}"].interconnects.exists(x, x.startsWith("nvlink"))'
    ),
    # RE2 (linear time) costs more per call than Python's backtracking re.
    "regex on attribute": f'device.attributes["{DRIVER}"].model.matches("^A[0-9]+$")',
}
ATTRIBUTES: dict[str, Any] = {
    "model": "A100",
    "cores": 108,
    "driverVersion": Semver.parse("535.104.5"),
    "interconnects": ["pcie-gen4", "nvlink-3", "nvlink-4", "ib"],
    "numa.example.com/node": 1,
}
CAPACITY = {"memory": "80Gi", "sm": "108"}


class _CelpyQuantity(celtypes.IntType):
    """Minimal quantity for celpy: a Fraction of units (the python-stack prototype's approach)."""

    fraction: Fraction

    def __new__(cls, text: str) -> _CelpyQuantity:
        value = Quantity(text)
        obj = cast(_CelpyQuantity, super().__new__(cls, 0))
        obj.fraction = Fraction(value.nanos, 10**9)
        return obj


def _celpy_compare(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType((a.fraction > b.fraction) - (a.fraction < b.fraction))


def _celpy_runner(expression: str) -> Callable[[], Any]:
    env = celpy.Environment()
    program = env.program(
        env.compile(expression),
        functions={"quantity": lambda s: _CelpyQuantity(str(s)), "compareTo": _celpy_compare},
    )
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in ATTRIBUTES.items():
        domain, _, ident = name.rpartition("/")
        attributes.setdefault(domain or DRIVER, {})[ident] = (
            str(value) if isinstance(value, Semver) else value
        )
    device = cast(
        celtypes.MapType,
        celpy.json_to_cel({"driver": DRIVER, "attributes": attributes, "capacity": {}}),
    )
    device[celtypes.StringType("capacity")] = celtypes.MapType(
        {
            celtypes.StringType(DRIVER): celtypes.MapType(
                {celtypes.StringType(k): _CelpyQuantity(v) for k, v in CAPACITY.items()}
            )
        }
    )
    activation = {"device": device}
    return lambda: program.evaluate(activation)


def _rate(fn: Callable[[], Any], min_seconds: float = 0.3) -> float:
    """Best-of-3 evaluations per second."""
    best = 0.0
    for _ in range(3):
        count, start = 0, time.perf_counter()
        while True:
            for _ in range(50):
                fn()
            count += 50
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        best = max(best, count / elapsed)
    return best


def main() -> None:
    device = DeviceView.build(DRIVER, ATTRIBUTES, CAPACITY, False)
    print(f"{'selector':28} {'ours eval/s':>14} {'celpy eval/s':>14} {'ratio':>8}")
    for label, expression in SELECTORS.items():
        selector = compile_selector(expression, list_attributes=True)
        ours = _rate(partial(selector.evaluate, device))
        celpy_run = _celpy_runner(expression)
        assert bool(celpy_run()) == selector.evaluate(device), label
        theirs = _rate(celpy_run)
        print(f"{label:28} {ours:14,.0f} {theirs:14,.0f} {ours / theirs:7.0f}x")
    start = time.perf_counter()
    for _ in range(1000):
        DeviceView.build(DRIVER, ATTRIBUTES, CAPACITY, False)
    per_view = (time.perf_counter() - start) / 1000 * 1e6
    print(f"DeviceView.build: {per_view:.1f} µs per device")


if __name__ == "__main__":
    main()
