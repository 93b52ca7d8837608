"""Property tests of the CEL compiler: any input gives a result or a CELError, in bounded time.

Selectors are user input that the operator compiles into Python and runs on every device;
a crash there would be a crash of the operator, and a slow expression a stall of every
allocation. So: random text, expressions from a small CEL grammar (well- and ill-typed),
and deliberate cost bombs, each must end in a value or a ``CELError`` quickly. Literals
must survive the trip through the code generator unchanged (it writes Python source, so a
quoting slip would be code injection).
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any, Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cel import (
    CELCompileError,
    CELCostError,
    CELError,
    DeviceView,
    compile_selector,
    evaluate,
)

from .settings import FUZZ

INT64_MAX: Final = 2**63 - 1
INT64_MIN: Final = -(2**63)
SECONDS_PER_EXAMPLE: Final = 2.0

BINDINGS: Final[dict[str, Any]] = {
    "x": 7,
    "d": 2.5,
    "s": "héllo",
    "b": True,
    "l": [1, 2, 3],
    "m": {"a": 1, "b": 2},
    "n": None,
}


def cel_string(text: str) -> str:
    """A CEL double-quoted string literal for any text."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch.isprintable() and ch not in "\r\t":
            out.append(ch)
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


# -- a small CEL grammar -------------------------------------------------------------------

_atoms = st.one_of(
    st.integers(-1000, 1000).map(str),
    st.integers(0, 2**64 - 1).map(lambda n: f"{n}u"),
    st.integers(INT64_MIN + 1, INT64_MAX).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=64).map(repr),
    st.text(max_size=8).map(cel_string),
    st.binary(max_size=4).map(lambda b: "b" + cel_string(b.decode("latin-1"))),
    st.sampled_from(["true", "false", "null", "x", "d", "s", "b", "l", "m", "n", "undefined_var"]),
)

_BINARY_OPS: Final = ["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "in"]
_METHODS: Final = ["startsWith", "endsWith", "contains", "lowerAscii", "size", "split", "join"]
_FUNCTIONS: Final = ["size", "string", "int", "uint", "double", "bool", "type", "bytes"]
_MACROS: Final = ["all", "exists", "exists_one", "map", "filter"]


def _extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    pair = st.tuples(children, children)
    return st.one_of(
        st.tuples(children, st.sampled_from(_BINARY_OPS), children).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        children.map(lambda c: f"!{c}"),
        children.map(lambda c: f"-{c}"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
        st.lists(children, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(pair, max_size=2).map(
            lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}"
        ),
        st.tuples(st.sampled_from(_FUNCTIONS), children).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(children, st.sampled_from(_METHODS), st.lists(children, max_size=1)).map(
            lambda t: f"{t[0]}.{t[1]}({', '.join(t[2])})"
        ),
        st.tuples(children, st.sampled_from(_MACROS), children).map(
            lambda t: f"{t[0]}.{t[1]}(v, {t[2].replace('x', 'v')})"
        ),
        pair.map(lambda t: f"{t[0]}[{t[1]}]"),
        st.tuples(children, st.sampled_from(["a", "b", "size", "model"])).map(
            lambda t: f"{t[0]}.{t[1]}"
        ),
        st.tuples(children, st.sampled_from(["a", "b"])).map(lambda t: f"has({t[0]}.{t[1]})"),
        st.tuples(children, st.sampled_from(["a", "b"])).map(lambda t: f"{t[0]}.?{t[1]}"),
    )


expressions: Final = st.recursive(_atoms, _extend, max_leaves=12)

_device_atoms = st.one_of(
    st.sampled_from(
        [
            "device.driver",
            'device.attributes["gpu.example.com"].model',
            'device.attributes["gpu.example.com"].index',
            'device.attributes["gpu.example.com"].missing',
            'device.attributes["other.example.com"]',
            'device.capacity["gpu.example.com"].memory',
            "device.allowMultipleAllocations",
            'quantity("40Gi")',
            'semver("1.2.3")',
        ]
    ),
    _atoms,
)
selector_expressions: Final = st.recursive(_device_atoms, _extend, max_leaves=10)

devices: Final = st.builds(
    DeviceView.build,
    driver=st.just("gpu.example.com"),
    attributes=st.dictionaries(
        st.sampled_from(["model", "index", "numa", "other.example.com/x"]),
        st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=10)),
        max_size=4,
    ),
    capacity=st.dictionaries(
        st.sampled_from(["memory", "cores"]),
        st.sampled_from(["40Gi", "1", "500m", "0"]),
        max_size=2,
    ),
    allow_multiple_allocations=st.booleans(),
)


def _timed(call: Any, *args: Any, **kwargs: Any) -> tuple[Any, BaseException | None]:
    start = time.perf_counter()
    try:
        result, error = call(*args, **kwargs), None
    except CELError as exc:
        result, error = None, exc
    elapsed = time.perf_counter() - start
    assert elapsed < SECONDS_PER_EXAMPLE, f"took {elapsed:.2f}s"
    return result, error


# -- properties ----------------------------------------------------------------------------


@FUZZ
@given(st.text(max_size=200))
def test_random_text_evaluates_or_raises_cel_error(text: str) -> None:
    _timed(evaluate, text, BINDINGS)


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("()[]{}.,?:!<>=&|+-*/%\"'\\ x1u.e_")), max_size=60))
def test_punctuation_soup_evaluates_or_raises_cel_error(text: str) -> None:
    _timed(evaluate, text, BINDINGS)


@FUZZ
@given(expressions)
def test_grammar_expressions_evaluate_or_raise_cel_error(expression: str) -> None:
    _timed(evaluate, expression, BINDINGS)


@FUZZ
@given(selector_expressions, devices)
def test_selectors_compile_and_evaluate_or_raise_cel_error(
    expression: str, device: DeviceView
) -> None:
    selector, error = _timed(compile_selector, expression)
    if error is not None:
        assert isinstance(error, CELCompileError), f"compile raised {type(error).__name__}"
        return
    result, _ = _timed(selector.evaluate, device)
    assert result is None or isinstance(result, bool)


@FUZZ
@given(st.text(max_size=100))
def test_string_literals_survive_code_generation(text: str) -> None:
    assert evaluate(cel_string(text)) == text
    assert evaluate(f"s == {cel_string(text)}", {"s": text}) is True


@FUZZ
@given(st.integers(INT64_MIN, INT64_MAX), st.integers(INT64_MIN, INT64_MAX))
def test_int_arithmetic_is_exact_or_an_overflow_error(a: int, b: int) -> None:
    total, error = _timed(evaluate, "a + b", {"a": a, "b": b})
    if INT64_MIN <= a + b <= INT64_MAX:
        assert error is None and total == a + b
    else:
        assert error is not None and "overflow" in str(error)


@FUZZ
@given(st.integers(0, 2**70))
def test_int_literals_parse_exactly_or_fail_cleanly(n: int) -> None:
    value, error = _timed(evaluate, str(n))
    if n <= INT64_MAX:
        assert error is None and value == n
    else:
        assert error is not None


@FUZZ
@given(st.integers(1, 4), st.integers(2, 60))
def test_nested_comprehensions_finish_or_hit_the_cost_limit(depth: int, width: int) -> None:
    expression = "1"
    for level in range(depth):
        expression = f"l.map(v{level}, {expression})"
    result, error = _timed(evaluate, f"size({expression}) >= 0", {"l": list(range(width))})
    assert result is True or isinstance(error, CELCostError)
    if width**depth * depth > 2_000_000:
        assert isinstance(error, CELCostError), "a run far over the budget must be stopped"


COST_BOMBS: Final = {
    "nested map": "l.map(a, l.map(b, l.map(c, a + b + c))).size() > 0",
    "nested all": "l.all(a, l.all(b, l.all(c, a + b + c >= 0)))",
    "exists over filter": "l.exists(a, l.filter(b, l.exists(c, b == c)).size() > a)",
    "long string scans": "l.all(a, l.all(b, !s.contains(string(a) + string(b))))",
}


@pytest.mark.parametrize("expression", COST_BOMBS.values(), ids=list(COST_BOMBS))
def test_cost_bombs_are_stopped_quickly(expression: str) -> None:
    start = time.perf_counter()
    with pytest.raises(CELCostError, match="cost limit exceeded"):
        evaluate(expression, {"l": list(range(1000)), "s": "x" * 1000})
    assert time.perf_counter() - start < SECONDS_PER_EXAMPLE


def test_cost_bomb_selector_is_refused_at_compile_time() -> None:
    attributes = 'device.attributes["gpu.example.com"]'
    bomb = "true"
    for name in "abcde":
        bomb = f"{attributes}.all({name}, {bomb})"
    with pytest.raises(CELCompileError, match="cost limit"):
        compile_selector(bomb)


def doubling(seed: str, levels: int) -> str:
    """cel.bind chains that double a value at each level: tiny text, 2**levels growth."""
    expression = f"size(v{levels}) > 0"
    for level in range(levels, 0, -1):
        expression = f"cel.bind(v{level}, v{level - 1} + v{level - 1}, {expression})"
    return expression.replace("v0 ", f"{seed} ").replace("v0,", f"{seed},")


def _run_bounded(code: str, seconds: float = 20, memory_bytes: int = 2 * 2**30) -> str:
    """Run Python code in a child with a wall-clock and address-space limit; its stdout."""
    preamble = (
        "import resource\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({memory_bytes}, {memory_bytes}))\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", preamble + code],
            timeout=seconds,
            capture_output=True,
            text=True,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {seconds:.0f}s")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


SIZE_BOMBS: Final = {
    "string doubling": doubling("device.driver", 32),
    "list doubling": doubling("[device.driver]", 32),
}


@pytest.mark.parametrize("expression", SIZE_BOMBS.values(), ids=list(SIZE_BOMBS))
def test_size_bombs_are_stopped_by_the_cost_limit(expression: str) -> None:
    code = (
        "from operators.cel import CELCompileError, CELCostError, DeviceView, compile_selector\n"
        "try:\n"
        f"    s = compile_selector({expression!r})\n"
        "    s.evaluate(DeviceView.build('gpu.example.com', {}, {}, False))\n"
        "    print('evaluated')\n"
        "except (CELCompileError, CELCostError) as exc:\n"
        "    print('stopped:', exc)\n"
    )
    assert _run_bounded(code).startswith("stopped:")


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("a()+*?|[]^$.{}1,\\dw-")), max_size=24))
def test_any_pattern_matches_in_bounded_time_or_fails_cleanly(pattern: str) -> None:
    text = "a" * 2000 + "!"
    for template in ("s.matches(p)", "s.findAll(p).size() >= 0", f"s.find({cel_string(pattern)})"):
        result, error = _timed(evaluate, template, {"s": text, "p": pattern})
        assert error is not None or isinstance(result, (bool, str))


REGEX_BOMB: Final = '"' + "a" * 40 + '!".matches("(a+)+$")'


def test_regex_bomb_is_bounded() -> None:
    code = (
        "from operators.cel import CELError, evaluate\n"
        f"try:\n    evaluate({REGEX_BOMB!r})\nexcept CELError:\n    pass\n"
    )
    _run_bounded(code, seconds=10)
