"""RE2 regexes: Go/RE2 semantics where Python's ``re`` differs, linear time, syntax errors."""

from __future__ import annotations

from typing import Any

import pytest

from operators.cel import CELCompileError, CELEvalError, compile_selector, evaluate
from operators.cel.regex import RegexSyntaxError, compile_regex
from tests.steps import step_limit


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


#: What runs a match: RE2's C++ search (linear in the text by construction); its inner
#: steps cannot be observed, so the test counts what can be: the calls into it and ours.
RE2_MATCH = "re2._re2.PyCapsule.Match"


def match_steps(pattern: str, text: str) -> tuple[int, dict[str, int]]:
    expression = f"s.matches('{pattern}')"
    evaluate(expression, {"s": "a!"}, cost_limit=10**9)  # compiled and cached first
    with step_limit(10_000) as steps:
        assert evaluate(expression, {"s": text}, cost_limit=10**9) is False
    return steps.count, steps.c_functions


@pytest.mark.parametrize("pattern", ["(a+)+$", "(a|aa)+$", "(a*)*b", "(a+a+)+y"])
def test_catastrophic_patterns_run_in_linear_time(pattern: str) -> None:
    # A short text first: a backtracking engine would be seen here before it could stall.
    short_count, short_calls = match_steps(pattern, "a" * 10 + "!")
    assert short_calls.get(RE2_MATCH) == 1, f"the match did not run in RE2: {short_calls}"
    assert not [name for name in short_calls if "Pattern" in name or "_sre" in name]
    # Then 20,000 characters: one RE2 search, and no more of our work than for 11.
    count, calls = match_steps(pattern, "a" * 20_000 + "!")
    assert calls.get(RE2_MATCH) == 1
    assert count == short_count
