"""CEL for DRA device selectors: parsed with celpy's grammar, compiled to Python.

Public interface (stable; the allocator depends on it)
-----------------------------------------------------
Errors
    ``CELError`` is the base of everything raised here.
    ``CELCompileError``: parse errors ("compilation failed: ERROR: <input>:L:C:
    Syntax error: ..."), undeclared references ("undeclared reference to 'f'
    (in container '')"), "undefined field 'x'", a non-bool result type ("must
    evaluate to bool or the unknown type, not int"), estimated cost over the
    limit ("too complex, exceeds cost limit ..."), a literal regex outside RE2
    syntax ("error parsing regexp: ..."), expressions over 10 Ki chars.
    ``CELEvalError``: runtime errors ("no such key: x. consider using CEL
    optional chaining ...", "CEL result of type int could not be converted to
    bool", overflow, no matching overload, ...).
    ``CELCostError``: the runtime budget ran out ("operation cancelled: actual
    cost limit exceeded"). Deliberately not a CELEvalError subclass, because
    ``||`` / ``&&`` must not absorb it.

Device selectors
    ``compile_selector(expression, *, list_attributes=False,
    consumable_capacity=True, stored=False, check_cost=None) -> CompiledSelector``:
    cached by expression and options; failed compiles are not cached.
    ``list_attributes`` is the DRAListTypeAttributes gate (list values and
    ``includes``), ``consumable_capacity`` the DRAConsumableCapacity gate
    (``device.allowMultipleAllocations``). Like upstream there are two
    environments: a new expression (admission; the default) sees only what
    the gates enable, a ``stored`` one (the allocator, the toolkit) sees every
    field and function whatever the gates. ``check_cost`` rejects selectors
    whose estimated worst-case cost exceeds 1,000,000; by default new
    expressions are checked and stored ones are not (upstream only checks new
    or changed ones).
    ``CompiledSelector.evaluate(device, cost_limit=1_000_000) -> bool``;
    ``CompiledSelector.estimated_cost`` is the worst-case estimate.
    ``DeviceView.build(driver, attributes, capacity, allow_multiple_allocations)``:
    build once per device (per ResourceSlice change). Attribute keys are
    qualified ("domain/id") or unqualified (driver's domain); values are bool,
    int, str, ``Semver`` or lists of those. Capacity values are ``Quantity``
    (strings and ints are parsed).

Derived attributes
    ``compile_derived(expression, *, list_attributes=False,
    consumable_capacity=True, stored=False) -> CompiledDerived``: the same
    environments as selectors, but the result must be a string, int, bool,
    semver or a list of one of them (dyn is checked at runtime).
    ``CompiledDerived.evaluate(device, cost_limit=1_000_000)`` returns the
    value (a list as a tuple) or raises CELEvalError / CELCostError;
    ``estimated_cost`` is the worst-case estimate.

Values
    ``Quantity`` and ``Semver`` are ``operators.api``'s types, re-exported here:
    one quantity (integer nano-units, ``Quantity("80Gi")``, comparable,
    hashable, ``+``/``-``) and one version type (``Semver.parse("1.2.3",
    normalize=False)``) for the API models, CEL and the allocator alike.
    ``UInt``: CEL uint (an ``int`` subclass).

Generic CEL
    ``evaluate(expression, bindings) -> Any``: plain Python values in and out
    (maps as dicts, lists as lists, uint as ``UInt``, optionals as
    ``Optional``, type values as ``CelType``). Unknown names are runtime errors.

Type checking
    Device selectors are type-checked at compile time as upstream checks them
    (``checker``, with upstream's declarations in ``decls``): the ``device``
    variable (``kubernetes.DRADevice``; attribute values are
    ``google.protobuf.Any``, or ``dyn`` with DRAListTypeAttributes), the
    Kubernetes libraries and extensions with their overloads, homogeneous
    list and map literals, optionals, macros and ``cel.bind``. A type error is
    a ``CELCompileError`` with upstream's message ("found no matching overload
    for '_==_' applied to '(int, double)'", "expected type 'int' but found
    'string'"). The checked types drive the cost estimate.

Cost model
    Upstream's. The static estimate (``estimate``) is cel-go's estimator with
    the Kubernetes library's call estimates, the lists extension's and the DRA
    size bounds (a driver name of 63 characters, 32 map entries per level,
    attribute values of 64 characters or elements); it equals upstream's
    ``MaxCost`` (the DRA conformance cases assert it). The actual cost is
    counted as cel-go's tracker counts it (``runtimecost``): 1 per variable,
    selection, index and call, 10 per list literal, a tenth per string
    character compared, concatenated or scanned, and so on, added before each
    operation runs; passing the limit aborts the evaluation. It never exceeds
    the estimate. ``CompiledSelector.evaluate_with_cost`` reports it. A
    second bound (``costs``) stops work that upstream's model does not charge
    but our implementation does (list concatenation copies here), so cost
    bombs stop quickly without changing the reported cost.

Start-up
    ``warm()``: builds the parser now (about a quarter of a second, once per
    process), so that the first expression a process compiles (the first
    pod's allocation, the first webhook request) does not wait for it. The
    operator calls it while it starts.

Regular expressions
    ``matches``/``find``/``findAll`` use RE2 (google-re2): linear time, RE2
    syntax as CEL specifies, so backreferences and look-around are syntax
    errors ("error parsing regexp: ..."), at compile time for a literal
    pattern. Compiled patterns are cached.

Language coverage
    Standard CEL operators with cel-go semantics (heterogeneous numeric
    equality and ordering, int64/uint64 overflow, error-absorbing && and ||),
    macros has/all/exists/exists_one/map/filter plus the two-variable forms
    and transformList/transformMap, cel.bind, optionals (.?, [?], optional.*,
    orValue/or/value/hasValue/optMap/optFlatMap), strings extension, regex
    matches/find/findAll (RE2), lists and sets helpers, timestamps and durations,
    Kubernetes quantity, semver, IP and CIDR libraries, DRA ``includes``.
    Where upstream's own answer is specific, selectors give it: constant type
    conversions that fail refuse the expression ("program instantiation
    failed"), ``x in []`` is false unevaluated, a ``cel.bind`` binding is
    lazy, semver and quantity refuse ``==`` with other types, ``isInteger``
    follows how Kubernetes holds the quantity, and the strings extension has
    no ``reverse`` (its version 2).
    Not supported: protobuf messages and containers, the URL library.
"""

from operators.api.quantity import Quantity
from operators.api.semver import Semver

from .derived import CompiledDerived, DerivedValue, compile_derived
from .device import DeviceView
from .errors import CELCompileError, CELCostError, CELError, CELEvalError
from .parser import warm
from .program import evaluate
from .selector import CompiledSelector, compile_selector
from .values import CelType, Optional, UInt

__all__ = [
    "CELCompileError",
    "CELCostError",
    "CELError",
    "CELEvalError",
    "CelType",
    "CompiledDerived",
    "CompiledSelector",
    "DerivedValue",
    "DeviceView",
    "Optional",
    "Quantity",
    "Semver",
    "UInt",
    "compile_derived",
    "compile_selector",
    "evaluate",
    "warm",
]
