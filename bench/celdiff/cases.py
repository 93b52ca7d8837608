"""Random DRA device selectors over random devices, reproducible from a seed.

The generator writes expressions by the type they should have (bool at the top), drawing
from what DRA selectors use and where CEL implementations tend to differ: attributes of
every kind (int, bool, string, version, lists; lists also with the list gate off, as a
slice keeps them from a time it was on), quantities and semvers, missing attributes and
domains, optional chaining (``?.``, ``orValue``),
``cel.bind``, the strings and lists extensions, macros, regexes, ``in``, integer edge cases
(overflow, division by zero, the int64 minimum) and, on purpose, some ill-typed pieces
(mixed-type literals, wrong argument types, functions a version may lack). A case also
carries the device and the two DRA feature gates that reach CEL compilation.

Same seed, same cases: the differential runs are comparable across commits.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

DRIVER = "dra.example.com"
OTHER = "other.example.com"

INT_EDGES = (
    "0",
    "1",
    "-1",
    "7",
    "9223372036854775807",
    "-9223372036854775808",
    "4611686018427387904",
)
QUANTITIES = ("0", "1", "2", "100m", "1.5", "1Gi", "1.5Gi", "40Gi", "999Ti", "1k", "1e3", "8Ei")
VERSIONS = ("0.0.1", "1.0.0", "1.2.3", "2.0.0-rc.1", "10.4.0", "1.2.3+build.5", "535.104.5")
STRINGS = ("", "a", "abc", "A100", "nvlink-3", "pcie-gen4", "héllo", "a,b,c", "1", "-12", "1.5")
REGEXES = ("^A[0-9]+$", "a", "^$", "[a-c]+", "(nv|pc)", "1", ".*-[0-9]", "^(a|b)*c")


@dataclass(frozen=True)
class Device:
    """A device as in a ResourceSlice: attribute values keep their API kind."""

    driver: str
    #: qualified or plain name -> (kind, value): kind is int/bool/string/version or a plural.
    attributes: dict[str, tuple[str, Any]]
    #: name -> quantity text
    capacity: dict[str, str]
    allow_multiple_allocations: bool | None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "driver": self.driver,
            "attributes": {name: {kind: value} for name, (kind, value) in self.attributes.items()},
            "capacity": {name: {"value": value} for name, value in self.capacity.items()},
        }
        if self.allow_multiple_allocations is not None:
            out["allowMultipleAllocations"] = self.allow_multiple_allocations
        return out


@dataclass(frozen=True)
class Features:
    consumable_capacity: bool = True
    list_type_attributes: bool = False

    def to_json(self) -> dict[str, bool]:
        return {
            "consumableCapacity": self.consumable_capacity,
            "listTypeAttributes": self.list_type_attributes,
        }


@dataclass(frozen=True)
class Case:
    id: int
    expression: str
    device: Device
    features: Features = field(default_factory=Features)

    def to_json_line(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "expression": self.expression,
                "device": self.device.to_json(),
                "features": self.features.to_json(),
            },
            ensure_ascii=False,
        )


# Names the generator knows the kinds of (a device has a random subset of them).
SCALAR_ATTRIBUTES = {
    "i": "int",
    "n": "int",
    "b": "bool",
    "s": "string",
    "m": "string",
    "v": "version",
}
LIST_ATTRIBUTES = {"li": "ints", "ls": "strings", "lb": "bools", "lv": "versions"}


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


class Generator:
    """Writes one case at a time from its own ``random.Random``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        # List values on devices while the list gate is off come from a stream of their own,
        # so that the main one, and with it every case of earlier runs, stays the same.
        self.stale = random.Random(f"{seed}/stale-lists")
        self.features = Features()
        self.device: Device = self.random_device()

    # --- devices ----------------------------------------------------------------------------

    def random_features(self) -> Features:
        r = self.rng.random()
        # Mostly the 1.37 defaults (consumable capacity on, list attributes off).
        if r < 0.6:
            return Features()
        if r < 0.85:
            return Features(True, True)
        if r < 0.95:
            return Features(False, False)
        return Features(False, True)

    def scalar_value(self, kind: str, rng: random.Random | None = None) -> Any:
        rng = rng or self.rng
        if kind == "int":
            return rng.choice((0, 1, -1, 3, 8, 100, 2**62, 2**63 - 1, -(2**63)))
        if kind == "bool":
            return rng.random() < 0.5
        if kind == "string":
            return rng.choice(STRINGS)
        return rng.choice(VERSIONS)

    def random_device(self) -> Device:
        rng = self.rng
        attributes: dict[str, tuple[str, Any]] = {}
        for name, kind in SCALAR_ATTRIBUTES.items():
            if rng.random() < 0.7:
                qualified = f"{OTHER}/{name}" if rng.random() < 0.15 else name
                attributes[qualified] = (kind, self.scalar_value(kind))
        if self.features.list_type_attributes:
            for name, kind in LIST_ATTRIBUTES.items():
                if rng.random() < 0.6:
                    # At least one value: the API refuses an attribute without one.
                    size = rng.choice((1, 1, 2, 3, 5))
                    values = [self.scalar_value(kind[:-1]) for _ in range(size)]
                    attributes[name] = (kind, values)
        elif self.stale.random() < 0.3:
            # The API server drops list values from a new slice while the gate is off, not
            # from one stored before; upstream's CEL still sees them.
            name, kind = self.stale.choice(list(LIST_ATTRIBUTES.items()))
            size = self.stale.choice((1, 2, 3))
            values = [self.scalar_value(kind[:-1], self.stale) for _ in range(size)]
            attributes[name] = (kind, values)
        capacity = {
            name: rng.choice(QUANTITIES)
            for name in ("mem", "cores", f"{OTHER}/bw")
            if rng.random() < 0.7
        }
        allow = rng.choice((None, True, False))
        return Device(DRIVER, attributes, capacity, allow)

    # --- expressions by type ----------------------------------------------------------------

    def pick(self, *options: Any) -> Any:
        return self.rng.choice(options)

    def domain(self) -> str:
        r = self.rng.random()
        if r < 0.75:
            return _quote(DRIVER)
        if r < 0.85:
            return "device.driver"
        if r < 0.95:
            return _quote(OTHER)
        return _quote("missing.example.com")

    def attr(self, kinds: tuple[str, ...]) -> str:
        """A reference to an attribute of one of ``kinds`` (or a missing one, sometimes)."""
        names = [n for n, k in {**SCALAR_ATTRIBUTES, **LIST_ATTRIBUTES}.items() if k in kinds]
        if not names or self.rng.random() < 0.08:
            names = ["missing"]
        name = self.rng.choice(names)
        base = f"device.attributes[{self.domain()}]"
        if self.rng.random() < 0.05:
            base = f'device.attributes["{DRIVER}"]'
            return f'{base}["{name}"]'
        return f"{base}.{name}"

    def opt_attr(self, kinds: tuple[str, ...], default: str) -> str:
        ref = self.attr(kinds)
        head, _, name = ref.rpartition(".")
        return f"{head}.?{name}.orValue({default})"

    def capacity(self) -> str:
        name = self.pick("mem", "mem", "cores", "missing")
        return f"device.capacity[{self.domain()}].{name}"

    def e_bool(self, depth: int) -> str:
        rng = self.rng
        if depth <= 0:
            return self.pick(
                "true",
                "false",
                self.attr(("bool",)),
                f"device.driver == {_quote(DRIVER)}",
                f"has({self.attr(('int', 'string', 'bool'))})",
                "device.allowMultipleAllocations",
                self.opt_attr(("bool",), "false"),
            )
        d = depth - 1
        choice = rng.randrange(26)
        if choice == 0:
            return f"{self.e_bool(d)} && {self.e_bool(d)}"
        if choice == 1:
            return f"({self.e_bool(d)} || {self.e_bool(d)})"
        if choice == 2:
            return f"!{self.e_bool(d)}"
        if choice == 3:
            return f"{self.e_int(d)} {self.pick('<', '<=', '>', '>=', '==', '!=')} {self.e_int(d)}"
        if choice == 4:
            return f"{self.e_string(d)} {self.pick('==', '!=', '<', '>=')} {self.e_string(d)}"
        if choice == 5:
            fn = self.pick("startsWith", "endsWith", "contains", "matches")
            arg = _quote(self.pick(*REGEXES)) if fn == "matches" else self.e_string(d)
            return f"{self.e_string(d)}.{fn}({arg})"
        if choice == 6:
            return f"{self.e_quantity(d)}.{self.pick('isGreaterThan', 'isLessThan')}({self.e_quantity(d)})"
        if choice == 7:
            return f"{self.e_quantity(d)}.compareTo({self.e_quantity(d)}) {self.pick('>=', '<', '==')} 0"
        if choice == 8:
            return (
                f"{self.e_semver(d)}.{self.pick('isGreaterThan', 'isLessThan')}({self.e_semver(d)})"
            )
        if choice == 9:
            return (
                f"{self.e_semver(d)}.compareTo({self.e_semver(d)}) {self.pick('>', '<=', '==')} 0"
            )
        if choice == 10:
            macro = self.pick("all", "exists", "exists_one")
            return f"{self.e_list_int(d)}.{macro}(x, {self.int_pred('x', d)})"
        if choice == 11:
            macro = self.pick("all", "exists")
            return f"{self.e_list_string(d)}.{macro}(s, s.{self.pick('startsWith', 'contains', 'endsWith')}({self.e_string(0)}))"
        if choice == 12:
            return f"{self.e_int(d)} in {self.e_list_int(d)}"
        if choice == 13:
            return f"{self.e_string(d)} in {self.e_list_string(d)}"
        if choice == 14:
            return f"cel.bind(a, {self.e_int(d)}, a {self.pick('>', '==', '<=')} {self.e_int(0)})"
        if choice == 15:
            unused = self.pick("1 / 0", self.attr(("int",)), 'int("x")', "[1][3]", self.e_int(d))
            return f"cel.bind(u, {unused}, {self.e_bool(d)})"
        if choice == 16:
            return f"{self.e_bool(d)} ? {self.e_bool(d)} : {self.e_bool(d)}"
        if choice == 17:
            return self.odd_bool(d)
        if choice == 18:
            return (
                f"isQuantity({self.e_string(d)})"
                if rng.random() < 0.5
                else f"isSemver({self.e_string(d)})"
            )
        if choice == 19:
            return f"{self.e_quantity(d)}.isInteger()"
        if choice == 20:
            return f"{self.e_list_int(d)}.{self.pick('isSorted()', 'distinct().size() > 1')}"
        if choice == 21:
            return f"sets.{self.pick('contains', 'intersects', 'equivalent')}({self.e_list_int(d)}, {self.e_list_int(d)})"
        if choice == 22:
            attr = self.attr(("ints", "strings"))
            return f"{attr}.{self.pick('exists(x, x == x)', 'all(x, false)', 'distinct().exists(x, true) && false', 'size() > 0')}"
        if choice == 23:
            return f"{self.attr(('ints',))}.includes({self.e_int(0)})"
        if choice == 24:
            return f"{self.e_double(d)} {self.pick('<', '==', '>=')} {self.e_double(d)}"
        literal = self.pick("true", "1", "1u", "1.0", '"1"', "null")
        return f"{self.attr(('bool', 'int'))} == {literal}"

    def odd_bool(self, d: int) -> str:
        """Expressions that are bool only if the implementation agrees about types."""
        return self.pick(
            '[1, "a"].size() == 2',
            f"[1, {self.attr(('int',))}].size() == 2",
            "1 == 1.0",
            "2u != 0",
            '"gpu".startsWith(1)',
            f"({self.e_int(d)} / {self.opt_attr(('int',), '-1')})",
            f"{self.e_semver(d)} == 1",
            f"{self.e_quantity(d)} == {self.e_quantity(d)}",
            f"{self.e_semver(d)} == {self.e_semver(d)}",
            f"{self.e_quantity(d)}.add({self.e_quantity(0)}) == {self.e_quantity(d)}.sub(1)",
            f"{self.attr(('missing',))} in []",
            "int(1e308) > 0",
            'int("") == 0',
            "--9223372036854775808 == 0",
            "-9223372036854775808 < 0",
            f'{self.attr(("string",))}.reverse() == ""',
            'quantity("1").sign() == 1',
            f'string({self.e_quantity(0)}) != ""',
            f'string({self.e_semver(0)}) != ""',
            f"{self.attr(('string', 'int', 'bool', 'version'))}",
            f"{self.e_int(d)}",
            f"{self.e_string(0)}",
            "dyn(1) == dyn(1u)",
            f"type({self.attr(('int', 'string'))}) == int",
            f"{self.attr(('string',))}.matches({self.e_string(0)})",
        )

    def int_pred(self, var: str, d: int) -> str:
        return self.pick(
            f"{var} > {self.e_int(0)}",
            f"{var} % 2 == 0",
            f"{var} / {self.e_int(0)} < 3",
            f"string({var}).matches({_quote(self.pick(*REGEXES))})",
            f"{var} + {self.e_int(0)} != 0",
            f"{var} == {var}",
        )

    def e_int(self, depth: int) -> str:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.3:
            return self.pick(
                self.pick(*INT_EDGES),
                self.attr(("int",)),
                self.opt_attr(("int",), self.pick("0", "-1")),
                str(rng.randrange(-5, 50)),
            )
        d = depth - 1
        choice = rng.randrange(16)
        if choice < 5:
            return f"({self.e_int(d)} {self.pick('+', '-', '*', '/', '%')} {self.e_int(d)})"
        if choice == 5:
            return f"-{self.e_int(d)}"
        if choice == 6:
            return f"{self.e_string(d)}.size()"
        if choice == 7:
            return f"size({self.e_list_int(d)})"
        if choice == 8:
            return f"int({self.pick(self.e_string(d), self.e_double(d), 'uint(3)', self.e_int(d))})"
        if choice == 9:
            return f"{self.e_semver(d)}.{self.pick('major', 'minor', 'patch')}()"
        if choice == 10:
            return f"{self.e_quantity(d)}.asInteger()"
        if choice == 11:
            return f"{self.e_list_int(d)}.{self.pick('sum()', 'min()', 'max()', 'indexOf(1)', 'lastIndexOf(0)')}"
        if choice == 12:
            return f"{self.e_string(d)}.indexOf({self.e_string(0)})"
        if choice == 13:
            return f"{self.e_list_int(d)}[{self.pick('0', '1', '-1', '2')}]"
        if choice == 14:
            return f"cel.bind(k, {self.e_int(d)}, k * k)"
        return f"{self.e_bool(d)} ? {self.e_int(d)} : {self.e_int(d)}"

    def e_double(self, depth: int) -> str:
        if depth <= 0 or self.rng.random() < 0.5:
            return self.pick(
                "1.5",
                "0.0",
                "-2.5",
                "1e308",
                "double(3)",
                f"{self.e_quantity(0)}.asApproximateFloat()",
            )
        d = depth - 1
        return f"({self.e_double(d)} {self.pick('+', '-', '*', '/')} {self.e_double(d)})"

    def e_string(self, depth: int) -> str:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.35:
            return self.pick(
                _quote(self.pick(*STRINGS)),
                self.attr(("string",)),
                self.opt_attr(("string",), '""'),
                "device.driver",
            )
        d = depth - 1
        choice = rng.randrange(12)
        if choice < 2:
            return f"{self.e_string(d)} + {self.e_string(d)}"
        if choice == 2:
            return f"{self.e_string(d)}.{self.pick('lowerAscii()', 'upperAscii()', 'trim()')}"
        if choice == 3:
            return f"{self.e_string(d)}.substring({self.pick('0', '1', '2', '5')})"
        if choice == 4:
            return f"{self.e_string(d)}.replace({self.e_string(0)}, {self.e_string(0)})"
        if choice == 5:
            return f"string({self.pick(self.e_int(d), 'true', '1u', '2.5')})"
        if choice == 6:
            separator = self.pick("", '","')
            return f"{self.e_list_string(d)}.join({separator})"
        if choice == 7:
            return f"{self.e_string(d)}.charAt({self.pick('0', '1', '3')})"
        if choice == 8:
            return f"{self.e_string(d)}.find({_quote(self.pick(*REGEXES))})"
        if choice == 9:
            return f"{self.e_list_string(d)}[{self.pick('0', '1')}]"
        if choice == 10:
            return f'"%s-%d".format([{self.e_string(d)}, {self.e_int(0)}])'
        return f"{self.e_bool(d)} ? {self.e_string(d)} : {self.e_string(d)}"

    def e_list_int(self, depth: int) -> str:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.4:
            items = ", ".join(self.e_int(0) for _ in range(rng.randrange(0, 4)))
            return self.pick(
                f"[{items}]",
                f"lists.range({self.pick('0', '1', '3', '10')})",
                self.attr(("ints",)),
                self.opt_attr(("ints",), "[]"),
            )
        d = depth - 1
        choice = rng.randrange(8)
        if choice == 0:
            return f"{self.e_list_int(d)} + {self.e_list_int(d)}"
        if choice == 1:
            return f"{self.e_list_int(d)}.map(x, {self.pick('x * 2', 'x + 1', '-x', 'x / 0')})"
        if choice == 2:
            return f"{self.e_list_int(d)}.filter(x, {self.int_pred('x', 0)})"
        if choice == 3:
            return f"{self.e_list_int(d)}.{self.pick('sort()', 'distinct()', 'reverse()', 'slice(0, 1)')}"
        if choice == 4:
            return f"{self.e_list_string(d)}.map(s, s.size())"
        if choice == 5:
            return f"[{self.e_list_int(d)}, {self.e_list_int(d)}].flatten()"
        if choice == 6:
            return f"{self.e_list_int(d)}.transformList(i, v, i + v)"
        return f"lists.range({self.pick('300', '50', '5')}).filter(a, {self.e_list_int(0)}.exists(b, a + b < 0) || true)"

    def e_list_string(self, depth: int) -> str:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.5:
            items = ", ".join(self.e_string(0) for _ in range(rng.randrange(0, 4)))
            return self.pick(
                f"[{items}]",
                self.attr(("strings",)),
                f"{self.e_string(0)}.split({_quote(self.pick(',', '', 'a'))})",
                f"{self.e_string(0)}.findAll({_quote(self.pick(*REGEXES))})",
            )
        d = depth - 1
        return self.pick(
            f"{self.e_list_string(d)} + {self.e_list_string(d)}",
            f"{self.e_list_int(d)}.map(x, string(x))",
            f"{self.e_list_string(d)}.sort()",
            f'{self.e_list_string(d)}.filter(s, s != "")',
        )

    def e_quantity(self, depth: int) -> str:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.5:
            return self.pick(
                f"quantity({_quote(self.pick(*QUANTITIES))})",
                self.capacity(),
                f'device.capacity[{self.domain()}].?mem.orValue(quantity("0"))',
            )
        d = depth - 1
        return self.pick(
            f"{self.e_quantity(d)}.add({self.pick(self.e_quantity(d), self.e_int(0))})",
            f"{self.e_quantity(d)}.sub({self.pick(self.e_quantity(d), self.e_int(0))})",
            f"quantity({self.e_string(d)})",
        )

    def e_semver(self, depth: int) -> str:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.6:
            return self.pick(
                f"semver({_quote(self.pick(*VERSIONS))})",
                self.attr(("version",)),
                f"semver({_quote(self.pick('v1.2', '1.02.3', '1'))}, true)",
            )
        return f"semver({self.e_string(depth - 1)})"

    # --- cases ------------------------------------------------------------------------------

    def case(self, case_id: int) -> Case:
        self.features = self.random_features()
        self.device = self.random_device()
        depth = self.rng.choice((1, 2, 2, 3, 3, 4))
        return Case(case_id, self.e_bool(depth), self.device, self.features)


def generate(count: int, seed: int) -> list[Case]:
    """``count`` cases from ``seed`` (the same list every time)."""
    gen = Generator(seed)
    return [gen.case(i) for i in range(count)]
