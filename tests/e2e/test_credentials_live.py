"""dralloc's own API client renews its credentials against a real API server.

Two service accounts, A and B, with tokens from the TokenRequest API (``kubectl create
token``). Who the client is comes from the API server itself (a SelfSubjectReview), so a
credential that was not renewed shows as the wrong identity or as a 401. Time is a clock the
test moves on (the credentials' ages and expiries are measured with it), so the test does not
wait a minute for a token file to be read again; it does wait, up to 10 s, for a revoked
token to be refused (the API server caches a successful authentication that long).
"""

from __future__ import annotations

import asyncio
import base64
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from operators import kubeconfig
from operators.credentials import CredentialSource
from operators.kube import ApiError, Connection, KubeClient, Resource
from operators.kubeconfig import Credentials

from .kube_helpers import Testbed

REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", True)
# The plugin's credentials: longer than the wait for a revocation, so that afterwards the
# plugin runs because its credentials were refused, not because they expired.
EXPIRES_IN_S = 60


@dataclass(frozen=True)
class Token:
    """A service account's token, kept out of failure reports."""

    value: str = field(repr=False)


class Clock:
    """Wall time plus however far the test has moved it on."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


async def whoami(client: KubeClient) -> str:
    review = await client.request(
        "POST",
        REVIEWS,
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(review["status"]["userInfo"]["username"])


def user_config(testbed: Testbed, path: Path, user: dict[str, Any]) -> Path:
    """A kubeconfig for the testbed's API server with ``user`` as its one user."""
    admin = kubeconfig.load(str(testbed.kubeconfig), environ={})
    assert admin.ca_pem
    cluster = {
        "server": admin.server,
        "certificate-authority-data": base64.b64encode(admin.ca_pem.encode()).decode(),
    }
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    return path


async def revoke(testbed: Testbed, namespace: str, name: str, token: Token) -> None:
    """Delete the service account, and wait until the API server refuses its token (it
    caches a successful authentication for 10 s)."""
    testbed.kubectl("delete", "serviceaccount", name, "-n", namespace)
    admin = kubeconfig.load(str(testbed.kubeconfig), environ={})
    # The CA only: with the admin's client certificate the token would not be looked at.
    tls = Credentials(admin.server, ca_pem=admin.ca_pem).ssl_context()
    fixed = Connection(admin.server, tls, {"Authorization": f"Bearer {token.value}"})
    async with KubeClient(fixed) as client:

        async def refused() -> bool:
            try:
                await whoami(client)
            except ApiError as error:
                return error.status == 401
            return False

        deadline = time.monotonic() + 15
        while not await refused():
            assert time.monotonic() < deadline, f"the token of {name} is still accepted"
            await asyncio.sleep(0.2)


def accounts(testbed: Testbed, namespace: str) -> tuple[Token, Token]:
    """Tokens of service accounts a and b (TokenRequest); a may watch service accounts."""
    tokens = []
    for name in ("a", "b"):
        testbed.kubectl("create", "serviceaccount", name, "-n", namespace)
        made = testbed.kubectl("create", "token", name, "-n", namespace)
        tokens.append(Token(made.stdout.strip()))
    testbed.kubectl("create", "role", "watcher", "--verb=list,watch",
                    "--resource=serviceaccounts", "-n", namespace)  # fmt: skip
    testbed.kubectl("create", "rolebinding", "watcher", "--role=watcher",
                    f"--serviceaccount={namespace}:a", "-n", namespace)  # fmt: skip
    return tokens[0], tokens[1]


def plugin_user(tmp_path: Path, token_file: Path, runs: Path) -> dict[str, Any]:
    """An exec plugin that gives the token in ``token_file``, expiring EXPIRES_IN_S later, and
    counts its runs in ``runs``."""
    script = tmp_path / "plugin.py"
    script.write_text(
        "import datetime, json, sys\n"
        "token_file, runs = sys.argv[1:]\n"
        "open(runs, 'a').write('.')\n"
        "expires = datetime.datetime.now(datetime.UTC)"
        f" + datetime.timedelta(seconds={EXPIRES_IN_S})\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1',\n"
        "    'kind': 'ExecCredential', 'status': {'token': open(token_file).read().strip(),\n"
        "    'expirationTimestamp': expires.strftime('%Y-%m-%dT%H:%M:%SZ')}}))\n"
    )
    spec = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": [str(script), str(token_file), str(runs)],
        "interactiveMode": "Never",
    }
    return {"exec": spec}


async def test_token_files_and_exec_plugins_are_renewed_when_due_and_when_refused(
    testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    token_a, token_b = accounts(testbed, namespace)
    token, runs = tmp_path / "token", tmp_path / "runs"
    token.write_text(token_a.value)
    runs.write_text("")
    clock = Clock()
    from_file = CredentialSource(
        kubeconfig.load(str(user_config(testbed, tmp_path / "file", {"tokenFile": str(token)}))),
        clock=clock,
    )
    from_plugin = CredentialSource(
        kubeconfig.load(
            str(user_config(testbed, tmp_path / "exec", plugin_user(tmp_path, token, runs)))
        ),
        clock=clock,
        expiry_margin=1.0,
    )
    sa = f"system:serviceaccount:{namespace}"
    async with (
        KubeClient(Connection.from_source(from_file)) as file_client,
        KubeClient(Connection.from_source(from_plugin)) as plugin_client,
    ):
        assert await whoami(file_client) == await whoami(plugin_client) == f"{sa}:a"

        token.write_text(token_b.value)  # rotated
        # Not due yet: the token read less than a minute ago, the plugin's not expired.
        assert await whoami(file_client) == await whoami(plugin_client) == f"{sa}:a"
        assert runs.read_text() == "."
        clock.ahead += max(61, EXPIRES_IN_S)
        # The plugin's credential has expired: the request waits for a new one.
        assert await whoami(plugin_client) == f"{sa}:b"
        # The token read a minute ago is due, and still good: the request goes on with it
        # while the file is read again; the next one has the new token.
        assert await whoami(file_client) == f"{sa}:a"
        await from_file.settled()
        assert await whoami(file_client) == f"{sa}:b"
        assert runs.read_text() == ".."

        # Refused before either is due: renewed at once, the request sent again.
        await revoke(testbed, namespace, "b", token_b)
        token.write_text(token_a.value)
        # A watch (re)connects with the current credentials, renewed after the refusal.
        watch = file_client.watch(SERVICE_ACCOUNTS, "0", namespace=namespace, timeout_seconds=1)
        added = [e.object["metadata"]["name"] async for e in watch if e.type == "ADDED"]
        assert "a" in added
        assert await whoami(file_client) == await whoami(plugin_client) == f"{sa}:a"
        assert runs.read_text() == "..."
