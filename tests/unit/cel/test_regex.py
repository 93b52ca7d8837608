"""RE2 regexes: Go/RE2 semantics where Python's ``re`` differs, linear time, syntax errors."""

from __future__ import annotations

import time
from typing import Any

import pytest

from operators.cel import CELCompileError, CELEvalError, compile_selector, evaluate
from operators.cel.regex import RegexSyntaxError, compile_regex


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # RE2's $ is the end of text; Python's also matches before a final newline.
        ("'a\\n'.matches('a$')", False),
        # \d and \s are ASCII in RE2; Python's are Unicode.
        ("'\u0663'.matches('\\\\d')", False),
        ("'\\v'.matches('\\\\s')", False),
        ("'x1'.matches('\\\\d')", True),
        # Go skips an empty match right after the previous match; Python keeps it.
        ("'baaab'.findAll('a*')", ["", "aaa", ""]),
        ("'héllo'.findAll('')", ["", "", "", "", "", ""]),
        ("'héllo wörld'.findAll('[a-zö]+', 1)", ["h"]),
        ("'héllo wörld'.findAll('\\\\pL+')", ["héllo", "wörld"]),
        ("'a1b22c333'.findAll('[0-9]+', 0)", []),
        ("'🐱😀x'.find('x|😀')", "😀"),
        ("'abc'.find('z')", ""),
        ("'🐱😀😀'.matches('(a|😀){2}')", True),
        ("'AbC'.matches('(?i)^abc$')", True),
        ("matches('gpu-7', '^gpu-[0-9]$')", True),
        ("'x'.matches(p)", True),
    ],
)
def test_regex_semantics(expression: str, expected: Any) -> None:
    assert evaluate(expression, {"p": "^x$"}) == expected


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(a)\\\\1", "invalid escape sequence"),
        ("(?=a)", "invalid or unsupported Perl syntax"),
        ("(?<!a)b", "invalid or unsupported Perl syntax"),
        ("[a", "missing closing ]"),
        ("a**", "invalid nested repetition operator"),
        ("a{1001}", "invalid repeat count"),
        ("\\\\C", "invalid escape sequence"),
    ],
)
def test_literal_patterns_outside_re2_syntax_are_compile_errors(pattern: str, reason: str) -> None:
    with pytest.raises(CELCompileError, match=f"error parsing regexp: {reason}"):
        compile_selector(f'device.driver.matches("{pattern}")')
    with pytest.raises(CELCompileError, match="error parsing regexp"):
        evaluate(f"'x'.find('{pattern}')")


def test_dynamic_bad_pattern_is_a_runtime_error() -> None:
    with pytest.raises(CELEvalError, match="error parsing regexp: invalid escape sequence"):
        evaluate("'aa'.matches(p)", {"p": "(a)\\1"})


def test_bad_pattern_writes_nothing_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RegexSyntaxError):
        compile_regex("(?=unlogged)")
    assert capfd.readouterr().err == ""


def test_compiled_patterns_are_cached() -> None:
    assert compile_regex("^cached-[0-9]+$") is compile_regex("^cached-[0-9]+$")


@pytest.mark.parametrize("pattern", ["(a+)+$", "(a|aa)+$", "(a*)*b", "(a+a+)+y"])
def test_catastrophic_patterns_run_in_linear_time(pattern: str) -> None:
    text = "a" * 20_000 + "!"
    start = time.perf_counter()
    result = evaluate(f"s.matches('{pattern}')", {"s": text}, cost_limit=10**9)
    assert result is False
    assert time.perf_counter() - start < 1.0
