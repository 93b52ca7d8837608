from __future__ import annotations

import sys

import pytest

from operators.cel import CELCompileError, evaluate
from operators.cel.parser import parse


def test_syntax_error_reports_line_and_column() -> None:
    with pytest.raises(CELCompileError) as raised:
        parse("a &&\n  + b")
    message = str(raised.value)
    assert "Syntax error" in message
    assert "<input>:2:" in message


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("'\\x41\\101\\u0041\\U00000041'", "AAAA"),
        ("b'\\xff\\000'", b"\xff\x00"),
        ("r'\\n'", "\\n"),
        ("'''multi\nline'''", "multi\nline"),
        ("0x1F", 31),
        ("1e3", 1000.0),
        ("[1, 2,]", [1, 2]),
        ("{'a': 1,}", {"a": 1}),
        ("{'a.b': 1}.`a.b`", 1),
    ],
)
def test_literals(source: str, value: object) -> None:
    assert evaluate(source) == value


@pytest.mark.parametrize("source", ["'\\q'", "'\\u12'", "99999999999999999999", "'unterminated"])
def test_invalid_literals(source: str) -> None:
    with pytest.raises(CELCompileError):
        evaluate(source)


def test_reserved_identifiers_are_rejected_but_allowed_as_fields() -> None:
    with pytest.raises(CELCompileError, match="reserved identifier"):
        evaluate("while")
    assert evaluate("{'while': 1}.while") == 1


def test_excessive_nesting_is_a_compile_error_not_a_crash() -> None:
    with pytest.raises(CELCompileError, match="nests too deeply"):
        evaluate("(" * 1000 + "1" + ")" * 1000)
    # Nested macros: tests/unit/cel/test_deep_nesting.py.


@pytest.mark.parametrize("recursion_limit", [1000, 5000])
def test_nesting_limit_does_not_depend_on_the_recursion_limit(recursion_limit: int) -> None:
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(recursion_limit)
    try:
        with pytest.raises(CELCompileError, match="nests too deeply"):
            evaluate("(" * 300 + "1" + ")" * 300)
        assert evaluate("(" * 100 + "1" + ")" * 100) == 1
    finally:
        sys.setrecursionlimit(saved)


# Unary operators as cel-go's grammar reads them (`'-'+ member`, `'!'+ member`), each
# answer checked against upstream with bench/celdiff (issue 22).
@pytest.mark.parametrize(
    ("source", "value"),
    [
        ('--"a" == "a"', True),  # an even run cancels out, whatever the operand's type
        ("!!1 == 1", True),
        ("!!!true", False),
        ("--5u == 5u", True),
        ("---5 == -5", True),
        ("-- -5 == -5", True),
        ("- 5 == -5", True),
        ("-9223372036854775808 < 0", True),
    ],
)
def test_unary_runs(source: str, value: object) -> None:
    assert evaluate(source) == value


@pytest.mark.parametrize(
    ("source", "message"),
    [
        # Both minus signs are operators, so the literal is 9223372036854775808.
        ("--9223372036854775808 == 0", "<input>:1:3: invalid int literal"),
        ("- -9223372036854775808 == 0", "invalid int literal"),
        ("-!true", "Syntax error: no viable alternative at input '-!'"),
        ("!-x", "Syntax error"),
    ],
)
def test_unary_syntax_errors(source: str, message: str) -> None:
    with pytest.raises(CELCompileError, match=message):
        parse(source)


def test_a_parenthesised_number_is_negated_not_signed() -> None:
    assert parse("-(5)") != parse("-5")
    assert parse("- 5") == parse("-5")
    # A lone minus before a number is its sign, also after another operator.
    assert parse("!-1") == parse("!(-1)")


def test_warm_builds_the_parser_that_the_first_compile_then_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator warms it while it starts: the first pod's allocation must not build it."""
    from operators import cel
    from operators.cel import parser

    monkeypatch.setattr(parser, "_parser", None)
    cel.warm()
    assert parser._parser is not None

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the parser was built again")

    monkeypatch.setattr(parser, "Lark", refused)
    assert evaluate("device.driver == 'a'", {"device": {"driver": "a"}}) is True
