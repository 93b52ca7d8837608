"""Device selectors: CEL evaluated through operators.cel, with caches.

A compiled program is cached by expression (in operators.cel); the result
for a device is cached on the compiled device itself, so it lives exactly as
long as that version of the slice. Errors are cached too: a broken selector
fails the same way every time without being evaluated again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from operators import cel
from operators.allocator.compiled import AttributeValue, CompiledDevice
from operators.allocator.errors import DecisionTimeout
from operators.allocator.features import Features
from operators.api.semver import Semver


class SelectorCompileError(Exception):
    """The expression does not compile; the message is the CEL error."""


class SelectorRuntimeError(Exception):
    """The expression failed on one device; the message is the CEL error."""


def _plain_value(attr: AttributeValue) -> Any:
    """An attribute as operators.cel wants it: bool, int, str, Semver or a tuple."""
    if not attr.kind:
        return None  # no usable value: CEL reports "unsupported attribute value"
    if attr.kind == "version":
        values: tuple[Any, ...] = tuple(Semver.parse(v) for v in attr.values)
    else:
        values = attr.values
    return values if attr.is_list else values[0]


def _attribute_value(value: cel.DerivedValue) -> AttributeValue:
    """A derived value in the form of a published attribute (versions as their text)."""
    items = value if isinstance(value, tuple) else (value,)
    if not items:
        return AttributeValue("", (), False)  # an empty list: no value, like no attribute set
    first = items[0]
    if isinstance(first, bool):
        kind = "bool"
    elif isinstance(first, int):
        kind = "int"
    elif isinstance(first, str):
        kind = "string"
    else:
        kind, items = "version", tuple(str(v) for v in items)
    return AttributeValue(kind, items, isinstance(value, tuple))


# Prefix of derived-attribute results among a view's selector results: an expression that
# starts with NUL does not compile, so no selector result is ever kept under such a key.
_DERIVED_KEY = "\x00derived:"

# Kinds of device whose view is kept for sharing; past it the table starts again (devices
# keep the view they have, so a cluster of more kinds only shares less).
MAX_SHARED_VIEWS = 50_000


class _BoundedResults(dict[str, Any]):
    """Results of one kind of device by expression: they outlive devices, so their number
    is bounded (expressions made per pod would otherwise grow them without end)."""

    __slots__ = ()
    LIMIT = 4_096

    def keep(self, expression: str, result: Any) -> None:
        if len(self) >= self.LIMIT:
            self.clear()
        self[expression] = result


class SelectorEvaluator:
    """Evaluates selector expressions against devices, caching per device."""

    def __init__(self, features: Features) -> None:
        self._features = features
        self._programs: dict[str, Any] = {}
        self._derived_programs: dict[str, Any] = {}  # derived attributes (see ``derive``)
        # Devices that look the same to a selector (driver, attributes, capacities) share
        # one view and its results: the devices of a node, of a model, are mostly alike,
        # so a selector runs once per kind of device rather than once per device.
        # Keyed by the device's look (compiled.py), an object shared by such devices.
        self._views: dict[tuple[int, bool], tuple[Any, Any, _BoundedResults]] = {}
        self.evaluations = 0  # CEL evaluations actually run (cache misses)
        self.deadline: tuple[float, float] | None = None
        """(monotonic deadline, budget in seconds) of the decision running now, if any:
        checked before each evaluation that is not cached (results already computed stay
        valid, so a decision that runs out resumes from them the next time)."""

    def _program(self, expression: str) -> Any:
        # Stored selectors, as upstream's allocator compiles them: every field and function
        # declared whatever the gates, and the estimated cost only checked when an
        # expression is created or changed, so not here.
        return self._compiled(self._programs, cel.compile_selector, expression)

    def _derived_program(self, expression: str) -> Any:
        # Stored, like selectors: a claim's expressions were checked when it was made.
        return self._compiled(self._derived_programs, cel.compile_derived, expression)

    def _compiled(
        self, programs: dict[str, Any], compile_stored: Callable[..., Any], expression: str
    ) -> Any:
        """The expression compiled as stored (once; a compile error is kept and raised
        anew each time)."""
        program = programs.get(expression)
        if program is None:
            try:
                program = compile_stored(
                    expression,
                    list_attributes=self._features.list_type_attributes,
                    consumable_capacity=self._features.consumable_capacity,
                    stored=True,
                )
            except cel.CELError as err:
                program = SelectorCompileError(str(err))
            programs[expression] = program
        if isinstance(program, SelectorCompileError):
            raise SelectorCompileError(*program.args)  # a new one per raise (see matches)
        return program

    def derive(self, expression: str, device: CompiledDevice) -> AttributeValue:
        """A derived attribute's value on the device, as constraints compare attributes;
        raises SelectorCompileError/SelectorRuntimeError. Kept with the device's shared
        view (devices that look alike get one value), under a key no selector has."""
        view, results = self._shared(device)
        key = _DERIVED_KEY + expression
        cached = results.get(key)
        if cached is None:
            program = self._derived_program(expression)
            if isinstance(view, SelectorRuntimeError):
                cached = view
            else:
                if self.deadline is not None and time.monotonic() > self.deadline[0]:
                    raise DecisionTimeout(self.deadline[1])
                self.evaluations += 1
                try:
                    cached = _attribute_value(program.evaluate(view))
                except cel.CELError as err:
                    cached = SelectorRuntimeError(str(err))
            results.keep(key, cached)
        if isinstance(cached, SelectorRuntimeError):
            raise SelectorRuntimeError(*cached.args)
        return cached  # type: ignore[no-any-return]

    def compile_error(self, expression: str) -> str | None:
        """The compile error of an expression, or None if it compiles."""
        try:
            self._program(expression)
        except SelectorCompileError as err:
            return str(err)
        return None

    def view(self, device: CompiledDevice) -> Any:
        """The CEL view of a device, built once per kind of device (see ``_shared``)."""
        return self._shared(device)[0]

    def _shared(self, device: CompiledDevice) -> tuple[Any, _BoundedResults]:
        """(view, results by expression), shared by every device that looks the same."""
        if device.view_cache:
            return device.view_cache[0]  # type: ignore[no-any-return]
        allow_multiple = device.allow_multiple if self._features.consumable_capacity else False
        look = device.look
        key = (id(look), allow_multiple)
        kept = self._views.get(key) if look else None  # a device made without a look: its own
        if kept is not None and kept[0] is look:  # not a later object under a reused id
            shared = kept[1], kept[2]
        else:
            try:
                view: Any = cel.DeviceView.build(
                    device.id[0],
                    {name: _plain_value(attr) for name, attr in device.attributes.items()},
                    {name: entry.quantity for name, entry in device.capacity.items()},
                    allow_multiple,
                )
            except (cel.CELError, ValueError) as err:
                # ValueError: a version attribute that is not semver; upstream reports
                # it when a selector runs on the device, not when the slice is read.
                view = SelectorRuntimeError(str(err))
            shared = view, _BoundedResults()
            if look:
                if len(self._views) >= MAX_SHARED_VIEWS:
                    self._views.clear()
                self._views[key] = (look, *shared)
        device.view_cache.append(shared)
        return shared

    def matches(self, expression: str, device: CompiledDevice) -> bool:
        """Whether the device passes; raises SelectorCompileError/SelectorRuntimeError."""
        cached = device.selector_cache.get(expression)
        if cached is None:
            view, results = self._shared(device)
            cached = results.get(expression)
            if cached is None:
                program = self._program(expression)
                if isinstance(view, SelectorRuntimeError):
                    cached = view
                else:
                    if self.deadline is not None and time.monotonic() > self.deadline[0]:
                        raise DecisionTimeout(self.deadline[1])
                    self.evaluations += 1
                    try:
                        cached = bool(program.evaluate(view))
                    except cel.CELError as err:
                        cached = SelectorRuntimeError(str(err))
                results.keep(expression, cached)
            device.selector_cache[expression] = cached
        if isinstance(cached, SelectorRuntimeError):
            # A new exception per raise: raising the kept one would chain every search that
            # met it into its traceback, and keep them all alive with it.
            raise SelectorRuntimeError(*cached.args)
        return bool(cached)
