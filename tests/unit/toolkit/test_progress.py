from __future__ import annotations

import io

from operators.toolkit.progress import Progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_always_draws_and_ends_with_the_total() -> None:
    stream = io.StringIO()
    with Progress(3, "simulating", mode="always", stream=stream) as bar:
        for _ in range(3):
            bar.advance()
    text = stream.getvalue()
    assert "simulating [" in text
    assert text.rstrip().endswith("s") and "3/3 100%" in text
    assert text.endswith("\n")


def test_auto_is_silent_when_not_a_terminal_or_short() -> None:
    piped = io.StringIO()
    with Progress(3, "x", mode="auto", stream=piped) as bar:
        bar.advance(3)
    assert piped.getvalue() == ""
    terminal = FakeTerminal()
    with Progress(3, "x", mode="auto", stream=terminal, delay=60.0) as bar:
        bar.advance(3)
    assert terminal.getvalue() == ""  # finished before the delay


def test_never_is_silent_on_a_terminal() -> None:
    terminal = FakeTerminal()
    with Progress(2, "x", mode="never", stream=terminal) as bar:
        bar.advance(2)
    assert terminal.getvalue() == ""
