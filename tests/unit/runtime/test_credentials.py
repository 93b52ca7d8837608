"""When credentials are renewed, and that a burst of callers renews them once."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import sys
import threading
from pathlib import Path

import pytest

from operators import kubeconfig
from operators.credentials import (
    EXPIRY_MARGIN_S,
    RETRY_AFTER_FAILURE_MAX_S,
    RETRY_AFTER_FAILURE_S,
    TOKEN_FILE_MAX_AGE_S,
    WARN_AGAIN_AFTER_S,
    CredentialSource,
    renew_at,
)
from operators.kubeconfig import Credentials, ExecPlugin

NOW = 1_800_000_000.0  # clock seconds (wall time: expiry times are wall times)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def at(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC)


PLUGIN = ExecPlugin({"command": "plugin"}, "https://k", None, Path("."), {}, "kubeconfig x")


def test_a_token_file_is_due_after_a_minute_a_plugins_credential_before_it_expires() -> None:
    from_file = Credentials("https://k", token="t", token_file=Path("token"))
    assert renew_at(from_file, NOW) == NOW + TOKEN_FILE_MAX_AGE_S
    assert renew_at(from_file, NOW, token_file_max_age=2) == NOW + 2

    hour = Credentials("https://k", token="t", exec_plugin=PLUGIN, expires=at(NOW + 3600))
    assert renew_at(hour, NOW) == NOW + 3600 - EXPIRY_MARGIN_S
    # Shorter-lived than the margin: renewed half-way, not for every request.
    brief = Credentials("https://k", token="t", exec_plugin=PLUGIN, expires=at(NOW + 16))
    assert renew_at(brief, NOW) == NOW + 8
    # Expired already when given (a plugin's stale cache, a clock ahead): not run again
    # sooner than after a failure.
    stale = Credentials("https://k", token="t", exec_plugin=PLUGIN, expires=at(NOW - 10))
    assert renew_at(stale, NOW) == NOW + RETRY_AFTER_FAILURE_S

    # Without an expiry, or nothing to renew them with: only a refusal renews them.
    assert renew_at(Credentials("https://k", token="t", exec_plugin=PLUGIN), NOW) is None
    assert renew_at(Credentials("https://k", token="t"), NOW) is None


async def test_a_token_file_is_read_again_once_its_token_is_old(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    clock = Clock()
    source = CredentialSource(
        Credentials("https://k", token="one", token_file=token), token_file_max_age=60, clock=clock
    )
    token.write_text("two\n")
    clock.now += 59
    assert (await source.get()).headers == {"Authorization": "Bearer one"}
    clock.now += 1
    # Due, and still good: the request goes on with it while the file is read again.
    assert (await source.get()).headers == {"Authorization": "Bearer one"}
    assert (await source.settled()).headers == {"Authorization": "Bearer two"}
    token.write_text("three\n")
    clock.now += 59  # the age counts from the last read
    assert (await source.get()).headers == {"Authorization": "Bearer two"}
    assert (await source.settled()).headers == {"Authorization": "Bearer two"}


async def test_an_empty_token_file_keeps_the_token_there_was(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    clock = Clock()
    source = CredentialSource(Credentials("https://k", token="one", token_file=token), clock=clock)
    token.write_text("")  # being rewritten
    clock.now += TOKEN_FILE_MAX_AGE_S
    await source.get()
    assert (await source.settled()).headers == {"Authorization": "Bearer one"}


async def test_refused_credentials_are_renewed_at_once_and_only_if_still_current(
    tmp_path: Path,
) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    source = CredentialSource(
        Credentials("https://k", token="one", token_file=token), clock=Clock()
    )
    refused = await source.get()
    token.write_text("two")
    renewed = await source.renew(refused)  # not due by age: refused
    assert renewed.headers == {"Authorization": "Bearer two"}
    token.write_text("three")
    # A request sent with the old ones, refused after the renewal: the renewed ones.
    assert await source.renew(refused) is renewed

    fixed = CredentialSource(Credentials("https://k", token="t"))
    assert await fixed.renew(fixed.current) is fixed.current  # nothing to renew them with


async def test_a_failed_renewal_keeps_the_old_credentials_and_waits_to_try_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "token"
    token.write_text("secret-one")
    clock = Clock()
    source = CredentialSource(
        Credentials("https://k", token="secret-one", token_file=token), clock=clock
    )
    first = source.current
    token.unlink()
    clock.now += TOKEN_FILE_MAX_AGE_S
    assert await source.get() is first
    assert await source.settled() is first  # the renewal failed
    token.write_text("secret-two")
    clock.now += RETRY_AFTER_FAILURE_S - 1
    assert await source.get() is first  # not tried again yet
    assert await source.renew(first) is first
    clock.now += 1
    await source.get()
    assert (await source.settled()).headers == {"Authorization": "Bearer secret-two"}
    logged = capsys.readouterr()
    assert "not renewed" in logged.out + logged.err
    assert "secret-" not in logged.out + logged.err + repr(source.current)


async def test_one_renewal_runs_however_many_ask_and_a_cancelled_caller_does_not_stop_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    calls: list[Credentials] = []

    def slow_renew(credentials: Credentials) -> Credentials:
        calls.append(credentials)
        release.wait(5)
        return Credentials(
            "https://k", token=f"t{len(calls)}", exec_plugin=PLUGIN, expires=at(NOW + 3600)
        )

    monkeypatch.setattr(kubeconfig, "renew", slow_renew)
    clock = Clock()
    source = CredentialSource(
        Credentials("https://k", token="t0", exec_plugin=PLUGIN, expires=at(NOW + 60)), clock=clock
    )
    clock.now += 60  # expired
    stale = source.current
    waiters = [asyncio.create_task(source.get()) for _ in range(3)]
    waiters.append(asyncio.create_task(source.renew(stale)))  # and a refusal meanwhile
    cancelled = asyncio.create_task(source.get())
    await asyncio.sleep(0.05)
    cancelled.cancel()
    await asyncio.sleep(0.05)
    release.set()
    results = await asyncio.gather(*waiters)
    assert len(calls) == 1
    assert all(result is source.current for result in results)
    assert source.current.headers == {"Authorization": "Bearer t1"}
    assert (await source.get()) is source.current  # not due again: no second run
    assert len(calls) == 1


async def test_an_exec_plugin_runs_again_when_its_credential_is_about_to_expire(
    tmp_path: Path,
) -> None:
    script = tmp_path / "plugin.py"
    runs = tmp_path / "runs"
    runs.write_text("")
    script.write_text(
        "import json, sys\n"
        f"open({str(runs)!r}, 'a').write('.')\n"
        "n = len(open(" + repr(str(runs)) + ").read())\n"
        "print(json.dumps({'status': {'token': f't{n}', 'expirationTimestamp': sys.argv[1]}}))\n"
    )
    expiry = at(NOW + 600).strftime("%Y-%m-%dT%H:%M:%SZ")
    spec = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": [str(script), expiry],
    }
    plugin = ExecPlugin(spec, "https://k", None, tmp_path, {}, "kubeconfig x")
    token, _, _, expires = plugin.run()
    clock = Clock()
    source = CredentialSource(
        Credentials("https://k", token=token, exec_plugin=plugin, expires=expires), clock=clock
    )
    clock.now += 600 - EXPIRY_MARGIN_S - 1
    assert (await source.get()).headers == {"Authorization": "Bearer t1"}
    assert runs.read_text() == "."
    clock.now += 1
    # Due but not expired: the request does not wait for the plugin, which runs meanwhile.
    assert (await source.get()).headers == {"Authorization": "Bearer t1"}
    assert (await source.settled()).headers == {"Authorization": "Bearer t2"}
    assert runs.read_text() == ".."
    # Expired: a request waits for the new credential.
    clock.now += 600
    assert (await source.get()).headers == {"Authorization": "Bearer t3"}
    assert runs.read_text() == "..."


def test_a_connection_shows_no_token() -> None:
    from operators.kube import Connection

    source = CredentialSource(Credentials("https://k", token="SECRET-TOKEN"))
    assert "SECRET-TOKEN" not in repr(Connection.from_source(source))


async def test_renewals_that_keep_failing_back_off_and_warn_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An inline token beside a token file that is gone: the inline one stands in, and the
    # log does not repeat the same warning at every try.
    token = tmp_path / "token"
    token.write_text("secret-one")
    clock = Clock()
    source = CredentialSource(
        Credentials("https://k", token="secret-one", token_file=token), clock=clock
    )
    token.unlink()
    clock.now += TOKEN_FILE_MAX_AGE_S
    tries = []
    for _ in range(400):  # ten minutes, a look every 1.5 s
        if source.due():
            tries.append(clock.now)
        await source.get()
        await source.settled()
        clock.now += 1.5
    waits = [later - earlier for earlier, later in itertools.pairwise(tries)]
    assert waits[:4] == sorted(waits[:4]) and waits[0] < waits[3]  # each wait longer
    assert max(waits) <= RETRY_AFTER_FAILURE_MAX_S + 1.5
    assert len(tries) < 20
    logged = capsys.readouterr()
    warnings = [line for line in (logged.out + logged.err).splitlines() if "warning" in line]
    assert len([line for line in warnings if "not renewed" in line]) == 1
    token.write_text("secret-two")
    clock.now += RETRY_AFTER_FAILURE_MAX_S
    await source.get()
    assert (await source.settled()).headers == {"Authorization": "Bearer secret-two"}
    token.unlink()
    clock.now += TOKEN_FILE_MAX_AGE_S
    await source.get()
    await source.settled()
    clock.now += RETRY_AFTER_FAILURE_S  # after a success, the first wait again
    assert source.due()


async def test_a_refused_request_tries_again_soon_however_long_renewals_kept_failing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "token"
    token.write_text("secret-one")
    clock = Clock()
    source = CredentialSource(
        Credentials("https://k", token="secret-one", token_file=token), clock=clock
    )
    first = source.current
    token.unlink()
    clock.now += TOKEN_FILE_MAX_AGE_S
    for _ in range(1100):  # far past the cap, and past where 5 * 2**n overflows a float
        await source.get()
        await source.settled()
        clock.now += RETRY_AFTER_FAILURE_MAX_S + 1
    assert source.current is first
    warnings = [line for line in capsys.readouterr().out.splitlines() if "not renewed" in line]
    # Once at first, then once per WARN_AGAIN_AFTER_S of the same failure.
    expected = 1100 * (RETRY_AFTER_FAILURE_MAX_S + 1) / WARN_AGAIN_AFTER_S
    assert expected - 2 <= len([w for w in warnings if "warning" in w]) <= expected + 2
    token.write_text("secret-two")  # still renewing, still due once a minute
    await source.get()
    assert (await source.settled()).headers == {"Authorization": "Bearer secret-two"}


async def test_refused_credentials_try_again_after_the_short_wait_while_due_ones_back_off(
    tmp_path: Path,
) -> None:
    token = tmp_path / "token"
    token.write_text("secret-one")
    clock = Clock()
    source = CredentialSource(
        Credentials("https://k", token="secret-one", token_file=token), clock=clock
    )
    first = source.current
    token.unlink()
    clock.now += TOKEN_FILE_MAX_AGE_S
    for _ in range(5):  # five failures in a row: the next due renewal is a minute away
        assert await source.renew(first) is first
        clock.now += RETRY_AFTER_FAILURE_S
    assert source._failures == 5
    token.write_text("secret-two")
    assert not source.due()  # backing off
    renewed = await source.renew(first)  # refused: tried at once, the short wait is over
    assert renewed.headers == {"Authorization": "Bearer secret-two"}
