"""Process entry point: settings, logging, metrics, then kopf running the controllers.

``python -m operators`` and ``dralloc run`` call :func:`main`; ``kopf run -A -m operators``
imports this module through the package and uses the same handlers with settings from the
environment. Importing this module registers, in order: each controller module's handlers
(they add their controller to the shared runtime), the webhook, and last the handler that
starts the runtime, so that every controller is known before the cache starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

import kopf
import structlog

from operators import cel, gcpause, kubeconfig, logs, metrics, webhooks
from operators.controllers import (  # noqa: F401  (handlers)
    allocation,
    claims,
    doubles,
    released,
    taints,
)
from operators.controllers.runtime import (
    MEMO_KEY,
    Runtime,
    configure,
    credentials_from,
    current_settings,
    runtime_from,
)
from operators.credentials import Auth
from operators.leader import LeaseUnusable
from operators.settings import Settings

log = structlog.get_logger(__name__)

TASK_KEY = "dralloc_runtime_task"
EXIT_SETUP = 2  # the operator cannot run as configured (the message says why)
_setup_errors: list[str] = []


LOGIN_KEY = "dralloc_login"  # the Auth last given to kopf
LOGIN_RETRY_S = 5.0  # kopf asks again after this, while refused credentials are not renewed


@kopf.on.login(id="dralloc.login")
async def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
    """kopf's own client (leader lease, events, webhooks) authenticates with dralloc's own
    credentials (``credentials_from``): one load for both, and no client library loaded for
    kopf's.

    kopf calls this again when its credentials were refused (401) or have expired: then
    they are renewed, unless dralloc's client renewed them already since kopf got them.
    """
    try:
        source = await credentials_from(memo)
    except kubeconfig.KubeconfigError as err:
        raise kopf.LoginError(str(err)) from None
    given: Auth | None = memo.get(LOGIN_KEY)
    auth = await source.get()
    if given is not None and _same_secrets(auth, given):
        # kopf is back with the credentials it was refused (or that expired): renew them.
        # Handing them over again would leave kopf none at all (it drops an answer equal to
        # the one refused, and then never asks again): until they are renewed, kopf retries.
        auth = await source.renew(auth)
        if _same_secrets(auth, given):
            raise kopf.TemporaryError(
                "the API server refused the credentials, and no new ones yet",
                delay=LOGIN_RETRY_S,
            )
    memo[LOGIN_KEY] = auth
    found = auth.credentials
    return kopf.ConnectionInfo(
        server=found.server,
        ca_data=found.ca_pem,
        insecure=found.insecure or None,
        scheme="Bearer" if found.token else None,
        token=found.token,
        certificate_data=found.client_cert_pem,
        private_key_data=found.client_key_pem,
        default_namespace=found.namespace,
        expiration=found.expires,
    )


def _same_secrets(one: Auth, other: Auth) -> bool:
    """Whether two credentials authenticate alike (a token file read again may give the
    same token in a new object)."""
    a, b = one.credentials, other.credentials
    return (a.server, a.token, a.client_cert_pem, a.client_key_pem) == (
        b.server,
        b.token,
        b.client_cert_pem,
        b.client_key_pem,
    )


@kopf.on.startup(id="dralloc.runtime")
async def start_runtime(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    ours = current_settings()
    settings.posting.enabled = False  # we post our own Events, about our own objects
    settings.peering.standalone = True  # leadership is the Lease's job, not kopf peering
    settings.networking.request_timeout = ours.request_timeout
    gcpause.configure(ours.gc_young_threshold)  # here, so that `kopf run` gets it too
    webhooks.configure_admission(settings, ours)
    runtime = await runtime_from(memo)
    if runtime.elector is not None:
        try:
            await runtime.elector.preflight()
        except LeaseUnusable as error:
            # One line where a person looks, whatever the log format; kopf then stops with a
            # failed startup (`kopf run` exits non-zero, main() with EXIT_SETUP).
            _setup_errors.append(str(error))
            log.error("leader election impossible", error=str(error))
            print(f"dralloc: {error}", file=sys.stderr, flush=True)
            raise kopf.PermanentError(str(error)) from None
    memo[TASK_KEY] = asyncio.create_task(_supervise(runtime), name="dralloc-runtime")


async def _supervise(runtime: Runtime) -> None:
    try:
        await runtime.run()
    except* Exception:
        log.exception("runtime failed; stopping the process")
        os.kill(os.getpid(), signal.SIGTERM)


@kopf.on.cleanup(id="dralloc.runtime")
async def stop_runtime(memo: kopf.Memo, **_: Any) -> None:
    task: asyncio.Task[None] | None = memo.get(TASK_KEY)
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    runtime: Runtime | None = memo.get(MEMO_KEY)
    if runtime is not None:
        await runtime.close()


@kopf.on.probe(id="dralloc.cache")
def probe(memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    runtime: Runtime | None = memo.get(MEMO_KEY)
    if runtime is None:
        return {"starting": True}
    return {"synced": runtime.cache.synced, "leader": runtime.leading.is_set()}


async def operate(settings: Settings, stop_flag: asyncio.Event | None = None) -> None:
    """Run kopf with dralloc's handlers until stopped (the in-process entry point)."""
    configure(settings)  # the login handler and the runtime read the kubeconfig from these
    liveness = f"http://0.0.0.0:{settings.probe_port}/healthz" if settings.probe_port else None
    await kopf.operator(
        clusterwide=True,
        standalone=True,
        liveness_endpoint=liveness,
        stop_flag=stop_flag,
        memo=kopf.Memo(),
    )


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop ``main`` runs on: uvloop's (libuv: its polling, transports and TLS cost
    the operator less per pod than asyncio's, measured in #42), or asyncio's (None). Without
    uvloop installed, asyncio's, with a warning."""
    if name != "uvloop":
        return None
    try:
        import uvloop
    except ImportError:
        log.warning("uvloop is not installed: running on asyncio's event loop")
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m operators [flags]``: see ``--help`` for every setting."""
    settings = Settings.from_argv(argv)
    logs.configure(settings.log_level, settings.log_format)
    metrics.serve(settings.metrics_port, settings.metrics_addr)
    log.info(
        "dralloc operator starting",
        controllers={
            "claims": settings.claims_controller,
            "allocation": settings.allocation_controller,
            "taints": settings.taints_controller,
            "webhook": settings.webhook,
        },
        feature_gates=settings.feature_gates.render(),
        node_policy=str(settings.node_policy),
        device_policy=str(settings.device_policy),
    )
    cel.warm()  # before the cache syncs: else the first pod's allocation waits for it
    try:
        with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
            runner.run(operate(settings))
    except Exception:  # kopf's ActivityError for a failed startup handler (not public API)
        if not _setup_errors:
            raise
        sys.exit(EXIT_SETUP)  # the reason is on stderr already
