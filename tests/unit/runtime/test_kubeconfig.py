"""Credentials from kubeconfig files and the service account, read as kubectl reads them."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import kopf
import pytest
import yaml

from operators import kubeconfig
from operators.certificates import build_self_signed_certificate
from operators.kubeconfig import KubeconfigError
from operators.settings import Settings

CERT, KEY = (part.decode() for part in build_self_signed_certificate(["localhost"]))


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def write(
    path: Path, clusters: list[Any], users: list[Any], contexts: list[Any], current: str | None
) -> Path:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters,
        "users": users,
        "contexts": contexts,
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


def cluster(name: str, server: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "cluster": {"server": server, **fields}}


def user(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "user": fields}


def context(name: str, cluster_name: str, user_name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "context": {"cluster": cluster_name, "user": user_name, **fields}}


def test_inline_data_gives_a_tls_context_with_the_client_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    path = write(
        tmp_path / "config",
        [cluster("c", "https://10.0.0.1:6443/", **{"certificate-authority-data": b64(CERT)})],
        [user("u", **{"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)})],
        [context("ctx", "c", "u", namespace="team-a")],
        "ctx",
    )
    found = kubeconfig.load(str(path), environ={})
    assert (found.server, found.ca_pem, found.client_cert_pem, found.client_key_pem) == (
        "https://10.0.0.1:6443",
        CERT,
        CERT,
        KEY,
    )
    assert found.namespace == "team-a" and found.token is None and found.headers() == {}
    context_ = found.ssl_context()
    assert context_.verify_mode == ssl.CERT_REQUIRED and context_.check_hostname
    assert context_.get_ca_certs()  # the cluster's CA is the one trusted
    assert not list(scratch.iterdir())  # the key was in a file only while it was loaded


def test_files_are_read_relative_to_the_kubeconfig_and_a_token_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_text(CERT)
    (tmp_path / "token").write_text("secret-token\n")
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k:6443", **{"certificate-authority": "pki/ca.crt"})],
        [user("u", tokenFile="token")],
        [context("ctx", "c", "u")],
        "ctx",
    )
    found = kubeconfig.load(str(path), environ={})
    assert found.ca_pem == CERT
    assert found.headers() == {"Authorization": "Bearer secret-token"}
    # Read again when renewed (the file's owner rotates it), relative to the kubeconfig too.
    assert found.token_file == tmp_path / "token"
    (tmp_path / "token").write_text("rotated\n")
    assert kubeconfig.renew(found).headers() == {"Authorization": "Bearer rotated"}


def test_a_token_file_wins_over_an_inline_token_while_it_can_be_read(tmp_path: Path) -> None:
    """As client-go: the inline token only stands in for a file that cannot be read."""
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k:6443")],
        [user("u", token="inline", tokenFile="token")],
        [context("ctx", "c", "u")],
        "ctx",
    )
    assert kubeconfig.load(str(path), environ={}).headers() == {"Authorization": "Bearer inline"}
    (tmp_path / "token").write_text("from-file\n")
    found = kubeconfig.load(str(path), environ={})
    assert found.headers() == {"Authorization": "Bearer from-file"}
    (tmp_path / "token").write_text("rotated\n")
    assert kubeconfig.renew(found).headers() == {"Authorization": "Bearer rotated"}
    (tmp_path / "token").write_bytes(b"\xff\xfe not text")  # as unreadable: the inline one
    assert kubeconfig.load(str(path), environ={}).headers() == {"Authorization": "Bearer inline"}
    (tmp_path / "token").write_bytes(b"\xff\xfe not text")  # as unreadable: the inline one
    assert kubeconfig.load(str(path), environ={}).headers() == {"Authorization": "Bearer inline"}


def test_a_token_file_that_is_not_text_is_a_kubeconfig_error(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k:6443")],
        [user("u", tokenFile="token")],
        [context("ctx", "c", "u")],
        "ctx",
    )
    (tmp_path / "token").write_bytes(b"\xff\xfe")
    with pytest.raises(kubeconfig.KubeconfigError, match="not text"):
        kubeconfig.load(str(path), environ={})


def test_kubeconfig_files_merge_with_the_first_name_and_current_context_winning(
    tmp_path: Path,
) -> None:
    first = write(
        tmp_path / "a",
        [cluster("c", "https://first:6443", **{"insecure-skip-tls-verify": True})],
        [user("u", token="first-token")],
        [context("ctx", "c", "u")],
        None,
    )
    second = write(
        tmp_path / "b",
        [cluster("c", "https://second:6443"), cluster("other", "https://other:6443")],
        [user("u", token="second-token")],
        [context("ctx", "c", "u"), context("elsewhere", "other", "u")],
        "ctx",
    )
    env = {"KUBECONFIG": f"{first}:{second}"}
    found = kubeconfig.load(environ=env)
    assert (found.server, found.token, found.insecure) == (
        "https://first:6443",
        "first-token",
        True,
    )
    assert found.ssl_context().verify_mode == ssl.CERT_NONE
    chosen = kubeconfig.load(context="elsewhere", environ=env)
    assert (chosen.server, chosen.token) == ("https://other:6443", "first-token")


def plugin(tmp_path: Path, body: str) -> str:
    script = tmp_path / "bin" / "plugin.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(f"#!{sys.executable}\nimport json, os, sys\n{body}\n")
    script.chmod(0o755)
    return "bin/plugin.py"  # relative with a separator: from the kubeconfig's directory


def _exec_config(tmp_path: Path, body: str, args: list[str]) -> Path:
    spec = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": plugin(tmp_path, body),
        "args": args,
    }
    return write(
        tmp_path / "config",
        [cluster("c", "https://k")],
        [user("u", exec=spec)],
        [context("ctx", "c", "u")],
        "ctx",
    )


def test_a_plugin_that_hangs_is_named_without_its_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubeconfig, "EXEC_TIMEOUT_S", 0.5)
    path = _exec_config(tmp_path, "import time; time.sleep(5)", ["--client-secret=HUNTER2"])
    with pytest.raises(kubeconfig.KubeconfigError) as raised:
        kubeconfig.load(str(path))
    assert "no answer within 0.5s" in str(raised.value)
    assert "HUNTER2" not in str(raised.value)


@pytest.mark.parametrize("printed", ['{"status": "x"}', '{"status": 1}', '["x"]', "{}"])
def test_a_plugin_that_prints_no_credential_object_is_refused(tmp_path: Path, printed: str) -> None:
    path = _exec_config(tmp_path, f"print({printed!r})", [])
    with pytest.raises(kubeconfig.KubeconfigError):
        kubeconfig.load(str(path))


def test_an_exec_plugin_gets_the_cluster_its_env_and_args_and_gives_a_token(tmp_path: Path) -> None:
    command = plugin(
        tmp_path,
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "assert info['spec']['cluster']['server'] == 'https://k:6443', info\n"
        "assert not info['spec']['interactive']\n"
        "token = os.environ['REGION'] + '-' + sys.argv[1]\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',"
        " 'status': {'token': token, 'expirationTimestamp': '2030-01-02T03:04:05Z'}}))",
    )
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k:6443", **{"certificate-authority-data": b64(CERT)})],
        [
            user(
                "u",
                exec={
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": command,
                    "args": ["token-for-c"],
                    "env": [{"name": "REGION", "value": "eu"}],
                    "provideClusterInfo": True,
                    "interactiveMode": "Never",
                },
            )
        ],
        [context("ctx", "c", "u")],
        "ctx",
    )
    found = kubeconfig.load(str(path), environ={"PATH": "/usr/bin:/bin"})
    assert found.token == "eu-token-for-c"
    assert found.expires is not None and found.expires.year == 2030


def test_an_exec_plugin_can_give_a_client_certificate(tmp_path: Path) -> None:
    status = json.dumps({"clientCertificateData": CERT, "clientKeyData": KEY})
    command = plugin(tmp_path, f"print(json.dumps({{'status': json.loads({status!r})}}))")
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k:6443")],
        [
            user(
                "u", exec={"apiVersion": "client.authentication.k8s.io/v1beta1", "command": command}
            )
        ],
        [context("ctx", "c", "u")],
        "ctx",
    )
    found = kubeconfig.load(str(path), environ={})
    assert (found.client_cert_pem, found.client_key_pem, found.token) == (CERT, KEY, None)
    found.ssl_context()


def test_a_failing_exec_plugin_says_why_and_how_to_install_it(tmp_path: Path) -> None:
    command = plugin(tmp_path, "print('no credentials here', file=sys.stderr)\nsys.exit(3)")
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k:6443")],
        [
            user(
                "u",
                exec={
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": command,
                    "installHint": "install the cloud CLI",
                },
            )
        ],
        [context("ctx", "c", "u")],
        "ctx",
    )
    with pytest.raises(KubeconfigError, match=r"exited with 3 \(install the cloud CLI\)") as err:
        kubeconfig.load(str(path), environ={})
    assert "no credentials here" not in str(err.value)  # a plugin's output may hold tokens


@pytest.mark.parametrize(
    ("users", "clusters", "message"),
    [
        (
            [user("u", **{"auth-provider": {"name": "oidc"}})],
            [],
            "auth-provider plugins are not supported",
        ),
        ([user("u", username="admin", password="x")], [], "basic auth is not supported"),
        (
            [
                user(
                    "u",
                    exec={"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"},
                )
            ],
            [],
            "apiVersion",
        ),
        (
            [user("u")],
            [cluster("c", "https://k", **{"proxy-url": "http://proxy:3128"})],
            "proxy-url is not supported",
        ),
        (
            [user("u", **{"client-key": "missing.key", "client-certificate": "missing.crt"})],
            [],
            "missing.crt",
        ),
    ],
)
def test_what_is_not_supported_or_not_there_is_refused_with_the_reason(
    tmp_path: Path, users: list[Any], clusters: list[Any], message: str
) -> None:
    path = write(
        tmp_path / "config",
        clusters or [cluster("c", "https://k")],
        users,
        [context("ctx", "c", "u")],
        "ctx",
    )
    with pytest.raises(KubeconfigError, match=message):
        kubeconfig.load(str(path), environ={})


def test_a_missing_context_file_or_current_context_is_named(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k")],
        [user("u")],
        [context("ctx", "c", "u")],
        None,
    )
    with pytest.raises(KubeconfigError, match="no current-context"):
        kubeconfig.load(str(path), environ={})
    with pytest.raises(KubeconfigError, match="context 'nope' not found"):
        kubeconfig.load(str(path), "nope", environ={})
    with pytest.raises(KubeconfigError, match="absent"):
        kubeconfig.load(str(tmp_path / "absent"), environ={})


def test_in_a_pod_the_service_account_is_used(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa-token\n")
    (tmp_path / "ca.crt").write_text(CERT)
    (tmp_path / "namespace").write_text("dralloc-system")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    found = kubeconfig.load(environ=env, service_account=tmp_path)
    assert (found.server, found.token, found.ca_pem, found.namespace) == (
        "https://[fd00::1]:443",
        "sa-token",
        CERT,
        "dralloc-system",
    )
    # An explicit kubeconfig or context wins over the service account.
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k")],
        [user("u", token="t")],
        [context("ctx", "c", "u")],
        "ctx",
    )
    # The kubelet rotates the projected token: it is read again when renewed.
    (tmp_path / "token").write_text("rotated\n")
    assert kubeconfig.renew(found).token == "rotated"
    assert kubeconfig.load(str(path), environ=env, service_account=tmp_path).server == "https://k"
    with pytest.raises(KubeconfigError, match="cannot read its token"):
        kubeconfig.load(environ=env, service_account=tmp_path / "absent")


async def login(memo: kopf.Memo) -> kopf.ConnectionInfo:
    """dralloc's login handler, called as kopf calls it (it reads the memo only)."""
    from operators import process

    # kopf.on.login types the handler as kopf's generic ActivityFn (every keyword of an
    # activity required, any result): this one is async and returns a ConnectionInfo.
    handler = cast(Callable[..., Awaitable[kopf.ConnectionInfo]], process.login)
    return await handler(memo=memo)


async def test_kopfs_login_gets_the_same_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operators import process
    from operators.controllers import runtime

    path = write(
        tmp_path / "config",
        [cluster("c", "https://k:6443", **{"certificate-authority-data": b64(CERT)})],
        [user("u", token="t0k")],
        [context("ctx", "c", "u", namespace="ns")],
        "ctx",
    )
    monkeypatch.setattr(
        runtime, "_configured_settings", Settings(kubeconfig=str(path), identity="t")
    )
    info = await login(kopf.Memo())
    assert (info.server, info.ca_data, info.scheme, info.token, info.default_namespace) == (
        "https://k:6443",
        CERT,
        "Bearer",
        "t0k",
        "ns",
    )
    monkeypatch.setattr(
        runtime, "_configured_settings", Settings(kubeconfig=str(tmp_path / "x"), identity="t")
    )
    with pytest.raises(process.kopf.LoginError, match="x"):
        await login(kopf.Memo())


async def test_one_load_serves_both_clients_and_kopfs_login_after_a_401_renews(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kopf logs in while the startup handlers make dralloc's client: the exec plugin runs
    once for both. kopf logs in again when its token was refused: the plugin runs again,
    unless dralloc's client has renewed the token since."""
    from operators.controllers import runtime

    runs = tmp_path / "runs"
    command = plugin(
        tmp_path,
        f"open({str(runs)!r}, 'a').write('.')\n"
        f"n = len(open({str(runs)!r}).read())\n"
        "print(json.dumps({'status': {'token': f'token-{n}'}}))",
    )
    spec = {"apiVersion": "client.authentication.k8s.io/v1", "command": command}
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k")],
        [user("u", exec=spec)],
        [context("ctx", "c", "u")],
        "ctx",
    )
    monkeypatch.setattr(
        runtime, "_configured_settings", Settings(kubeconfig=str(path), identity="t")
    )
    monkeypatch.setenv("KUBECONFIG", str(path))  # the same file, whoever reads which
    memo = kopf.Memo()
    info, ours = await asyncio.gather(login(memo), runtime.runtime_from(memo))
    try:
        assert runs.read_text() == "."
        assert info.token == "token-1"
        source = ours.client.connection.credentials
        assert source is not None
        first = source.current
        assert first.headers == {"Authorization": "Bearer token-1"}
        assert (await login(memo)).token == "token-2"  # kopf's was refused
        assert runs.read_text() == ".."
        # dralloc's client, refused later with token-1, takes token-2 without a run.
        assert (await source.renew(first)).headers == {"Authorization": "Bearer token-2"}
    finally:
        await ours.client.close()
    assert runs.read_text() == ".."


async def test_kopf_is_never_handed_back_the_credentials_it_was_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token file read again may hold the refused token still (not rotated yet): kopf
    would drop an answer equal to the refused one and never ask again, so it is told to
    retry instead, and gets the new token once the file has it."""
    from operators.controllers import runtime

    token = tmp_path / "token"
    token.write_text("token-1")
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k")],
        [user("u", tokenFile=str(token))],
        [context("ctx", "c", "u")],
        "ctx",
    )
    monkeypatch.setattr(
        runtime, "_configured_settings", Settings(kubeconfig=str(path), identity="t")
    )
    memo = kopf.Memo()
    assert (await login(memo)).token == "token-1"
    with pytest.raises(kopf.TemporaryError):
        await login(memo)  # refused, and the file has nothing newer
    token.write_text("token-2")
    assert (await login(memo)).token == "token-2"


def test_base64_data_may_be_wrapped_as_in_a_yaml_block(tmp_path: Path) -> None:
    text = b64(CERT)
    lines = "".join(f"      {text[i : i + 76]}\n" for i in range(0, len(text), 76))
    path = tmp_path / "config"
    path.write_text(
        "current-context: ctx\n"
        "contexts: [{name: ctx, context: {cluster: c, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "clusters:\n- name: c\n  cluster:\n    server: https://k\n"
        f"    certificate-authority-data: |\n{lines}"
    )
    assert kubeconfig.load(str(path), environ={}).ca_pem == CERT


def test_missing_files_of_kubeconfig_are_skipped_but_not_an_explicit_one(tmp_path: Path) -> None:
    good = write(
        tmp_path / "good",
        [cluster("c", "https://k")],
        [user("u")],
        [context("ctx", "c", "u")],
        "ctx",
    )
    env = {"KUBECONFIG": f"{tmp_path / 'absent'}:{good}"}
    assert kubeconfig.load(environ=env).server == "https://k"
    with pytest.raises(KubeconfigError, match="none of"):
        kubeconfig.load(environ={"KUBECONFIG": str(tmp_path / "absent")})
    with pytest.raises(KubeconfigError, match="absent"):
        kubeconfig.load(str(tmp_path / "absent"), environ=env)


def test_a_context_naming_a_missing_user_is_refused_not_anonymous(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k")],
        [user("u", token="t")],
        [context("ctx", "c", "typo")],
        "ctx",
    )
    with pytest.raises(KubeconfigError, match="user 'typo' not found for context 'ctx'"):
        kubeconfig.load(str(path), environ={})
    anonymous = write(
        tmp_path / "anon",
        [cluster("c", "https://k")],
        [],
        [{"name": "ctx", "context": {"cluster": "c"}}],
        "ctx",
    )
    assert kubeconfig.load(str(anonymous), environ={}).headers() == {}


def test_a_user_with_a_token_of_its_own_does_not_run_its_exec_plugin(tmp_path: Path) -> None:
    command = plugin(tmp_path, "print(json.dumps({'status': {'token': 'from-exec'}}))")
    spec = {"apiVersion": "client.authentication.k8s.io/v1", "command": command}
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k")],
        [user("static", token="own", exec=spec), user("plain", exec=spec)],
        [context("a", "c", "static"), context("b", "c", "plain")],
        "a",
    )
    assert kubeconfig.load(str(path), environ={}).token == "own"
    assert kubeconfig.load(str(path), "b", environ={}).token == "from-exec"


def test_errors_do_not_quote_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("users:\n- name: u\n  user:\n    token: SECRET123: [\n")
    with pytest.raises(KubeconfigError, match="not valid YAML at line 4") as err:
        kubeconfig.load(str(path), environ={})
    assert "SECRET123" not in str(err.value)


def test_text_before_a_pem_block_is_dropped_for_every_tls_loader(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("subject=CN = localhost\n\n" + CERT)
    (tmp_path / "client.key").write_text("Bag Attributes\n    localKeyID: 01\n" + KEY)
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k", **{"certificate-authority": "ca.crt"})],
        [user("u", **{"client-certificate-data": b64(CERT), "client-key": "client.key"})],
        [context("ctx", "c", "u")],
        "ctx",
    )
    found = kubeconfig.load(str(path), environ={})
    assert (found.ca_pem, found.client_key_pem) == (CERT, KEY)
    info = kopf.ConnectionInfo(
        server=found.server,
        ca_data=found.ca_pem,
        certificate_data=found.client_cert_pem,
        private_key_data=found.client_key_pem,
    )
    assert info.as_ssl_context().get_ca_certs()  # kopf's own loader takes them


@pytest.mark.parametrize(
    ("written", "insecure"), [(True, True), ("true", True), ("false", False), (False, False)]
)
def test_insecure_skip_tls_verify_is_read_as_a_boolean(
    tmp_path: Path, written: object, insecure: bool
) -> None:
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k", **{"insecure-skip-tls-verify": written})],
        [user("u")],
        [context("ctx", "c", "u")],
        "ctx",
    )
    assert kubeconfig.load(str(path), environ={}).insecure is insecure


def test_a_client_certificate_without_its_key_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config",
        [cluster("c", "https://k")],
        [user("u", **{"client-certificate-data": b64(CERT)})],
        [context("ctx", "c", "u")],
        "ctx",
    )
    with pytest.raises(KubeconfigError, match="needs its key"):
        kubeconfig.load(str(path), environ={})
