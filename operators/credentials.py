"""Credentials kept current while the process runs, as client-go keeps them.

A service-account token is a projected file that the kubelet rotates, a ``tokenFile`` may be
rotated by whoever wrote it, and an exec plugin's token or certificate expires. Read once,
each would be used until the API server refuses it, and then until a restart. So, as
client-go does:

- a token read from a file is read again when it is older than a minute (client-go caches
  it for about that long), and at once after the API server refused it (401);
- an exec plugin runs again shortly before its credential's ``expirationTimestamp`` and
  after a 401 (a credential without expiry is kept until refused).

:class:`CredentialSource` holds the current :class:`Auth` of one process. Both API clients
take theirs from it: dralloc's own ``KubeClient`` before each request (and on each watch
(re)connect), kopf's through the login handler, which kopf calls again after a 401. Only
one renewal runs at a time: whoever asks while it runs waits for it, and a caller holding
credentials older than the current ones gets the current ones without a renewal. A plugin
is a subprocess and reading a file is I/O: both run in a thread, off the event loop.

Neither tokens nor a plugin's output are logged; ``KubeconfigError`` messages quote neither.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

from operators import kubeconfig
from operators.kubeconfig import Credentials, KubeconfigError

log = structlog.get_logger(__name__)

TOKEN_FILE_MAX_AGE_S = 60.0
"""Read a token file again once its token is this old (client-go: about a minute)."""
EXPIRY_MARGIN_S = 10.0
"""Run an exec plugin again this long before its credential expires: a request sent just
before the expiry must not arrive just after it."""
RETRY_AFTER_FAILURE_S = 5.0
"""After a renewal failed, the previous credentials are used and the next try waits this
long: a broken plugin is not run again for every request. While the previous credentials
still work, each further failure in a row doubles the wait before a renewal is due again, up
to :data:`RETRY_AFTER_FAILURE_MAX_S`; a refused request or expired credentials try again
after this wait whatever came before."""
RETRY_AFTER_FAILURE_MAX_S = 60.0
"""The longest wait between due renewals that keep failing (as long as a token file's age)."""
WARN_AGAIN_AFTER_S = 600.0
"""A renewal failure that repeats is warned about again after this long (debug between)."""


@dataclass(frozen=True, eq=False)
class Auth:
    """What requests authenticate with at one time. Compared by identity: a refusal renews
    only the Auth the refused request was sent with."""

    credentials: Credentials
    headers: Mapping[str, str] = field(repr=False)  # the token
    ssl_context: ssl.SSLContext  # carries the client certificate, if any
    renew_at: float | None  # clock time after which to renew; None: only when refused


def renew_at(
    credentials: Credentials,
    obtained: float,
    *,
    token_file_max_age: float = TOKEN_FILE_MAX_AGE_S,
    expiry_margin: float = EXPIRY_MARGIN_S,
) -> float | None:
    """When credentials obtained at ``obtained`` (clock seconds) are due for renewal.

    An exec credential is renewed ``expiry_margin`` before it expires, but not before half
    its lifetime has passed: a plugin that hands out credentials living shorter than the
    margin is not run again for every request.
    """
    if credentials.exec_plugin is not None:
        if credentials.expires is None:
            return None  # as client-go: kept until the API server refuses it
        expires = credentials.expires.timestamp()
        # Never sooner than a failed renewal would wait: a plugin that hands out credentials
        # already expired (a stale cache of its own, a clock ahead) is not run per request.
        return max(
            expires - expiry_margin,
            obtained + (expires - obtained) / 2,
            obtained + RETRY_AFTER_FAILURE_S,
        )
    if credentials.token_file is not None:
        return obtained + token_file_max_age
    return None


class CredentialSource:
    """The current credentials of one process, renewed when due or refused."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        token_file_max_age: float = TOKEN_FILE_MAX_AGE_S,
        expiry_margin: float = EXPIRY_MARGIN_S,
        clock: Callable[[], float] = time.time,  # wall clock: expiry times are wall times
    ) -> None:
        self._token_file_max_age = token_file_max_age
        self._expiry_margin = expiry_margin
        self._clock = clock
        self._current = self._auth(credentials, credentials.ssl_context())
        self._renewal: asyncio.Task[Auth] | None = None
        self._next_try = 0.0  # after a failed renewal: a refused request not before then
        self._next_due = 0.0  # after failed renewals: a due renewal not before then
        self._failures = 0  # renewals failed in a row
        self._last_error = ""  # what the last of them said: a repeat is not warned again
        self._warned_at = 0.0  # ... until this long after it was

    @classmethod
    async def load(
        cls, kubeconfig_path: str | None = None, context: str | None = None
    ) -> CredentialSource:
        """From the kubeconfig (see ``operators.kubeconfig.load``), read in a thread: an exec
        plugin may run."""
        credentials = await asyncio.to_thread(kubeconfig.load, kubeconfig_path, context)
        return cls(credentials)

    @property
    def current(self) -> Auth:
        """The latest credentials, due or not (for a client about to be made)."""
        return self._current

    def due(self) -> bool:
        renew_time = self._current.renew_at
        now = self._clock()
        if renew_time is None or now < renew_time or now < self._next_try:
            return False
        expires = self._current.credentials.expires
        return now >= self._next_due or (expires is not None and now >= expires.timestamp())

    async def get(self) -> Auth:
        """The credentials for a request: the current ones, renewed when due.

        While they are still good (a token file read a minute ago, an exec credential not
        expired yet), the renewal runs in the background and the request goes on with
        them: the Lease renewal must not wait for a slow plugin. Only expired ones wait.
        """
        current = self._current
        if not self.due():
            return current
        expires = current.credentials.expires
        if expires is not None and self._clock() >= expires.timestamp():
            return await self.renew(current)
        self._start_renewal(current)
        return current

    async def settled(self) -> Auth:
        """The current credentials once the renewal under way, if any, is done."""
        if self._renewal is not None:
            await asyncio.shield(self._renewal)
        return self._current

    async def renew(self, stale: Auth) -> Auth:
        """Credentials to use instead of ``stale`` (refused by the API server, or due).

        If they were renewed since ``stale`` was handed out, the new ones, without renewing
        again (a burst of refused requests renews once). Else one renewal, shared by every
        caller that asks while it runs; a caller cancelled meanwhile does not cancel it. When
        nothing can renew them, or renewing failed, ``stale`` itself: the caller's request
        stays refused.
        """
        if self._current is not stale:
            return self._current
        if not stale.credentials.renewable or self._clock() < self._next_try:
            return stale
        return await asyncio.shield(self._start_renewal(stale))

    def _start_renewal(self, stale: Auth) -> asyncio.Task[Auth]:
        """The renewal under way, or a new one (one at a time)."""
        if self._renewal is None:
            self._renewal = asyncio.get_running_loop().create_task(
                self._renew(stale), name="dralloc-credentials-renewal"
            )
        return self._renewal

    async def _renew(self, stale: Auth) -> Auth:
        try:
            credentials = await asyncio.to_thread(kubeconfig.renew, stale.credentials)
            context = stale.ssl_context
            old = stale.credentials
            if (credentials.client_cert_pem, credentials.client_key_pem) != (
                old.client_cert_pem,
                old.client_key_pem,
            ):
                context = await asyncio.to_thread(credentials.ssl_context)
        except Exception as error:  # a plugin's odd answer must not end every request either
            now = self._clock()
            self._failures += 1
            self._next_try = now + RETRY_AFTER_FAILURE_S
            doublings = min(self._failures - 1, 8)  # 5 s * 2**8 is past the cap already
            self._next_due = now + min(
                RETRY_AFTER_FAILURE_S * 2**doublings, RETRY_AFTER_FAILURE_MAX_S
            )
            # Only our own messages are quoted: any other text may hold what a plugin said
            # or a file held (ssl.SSLError, an OSError, is named by its type too).
            said = str(error) if isinstance(error, KubeconfigError) else type(error).__name__
            # A state that lasts (a token file gone while an inline token stands in) is
            # warned about once in a while, not at every try.
            repeat = said == self._last_error and now - self._warned_at < WARN_AGAIN_AFTER_S
            report = log.debug if repeat else log.warning
            if not repeat:
                self._warned_at = now
            self._last_error = said
            report(
                "credentials not renewed; the previous ones stay in use",
                source=stale.credentials.source,
                error=said,
                failures=self._failures,
            )
            return stale
        finally:
            self._renewal = None
        if self._failures:
            log.info("credentials renewed again", source=credentials.source, after=self._failures)
        self._failures, self._last_error = 0, ""
        self._current = self._auth(credentials, context)
        log.debug("credentials renewed", source=credentials.source)
        return self._current

    def _auth(self, credentials: Credentials, context: ssl.SSLContext) -> Auth:
        return Auth(
            credentials=credentials,
            headers=credentials.headers(),
            ssl_context=context,
            renew_at=renew_at(
                credentials,
                self._clock(),
                token_file_max_age=self._token_file_max_age,
                expiry_margin=self._expiry_margin,
            ),
        )
