"""Where the API server is and how to authenticate to it: a kubeconfig, or the pod's
service account.

Read here rather than with kubernetes_asyncio's loader: that package is a generated client
of some 850 modules, and kopf imports its models whenever it is installed, which cost the
operator about 60 MiB of memory for what is a page of reading. Both the operator's own
client (``operators.kube``) and kopf's (the login handler in ``operators.process``) take
their credentials from :func:`load`.

What is read, as kubectl reads it:

- the files: an explicit path, else every file of ``$KUBECONFIG`` (merged: the first file
  that names a cluster, user or context wins, and the first ``current-context``), else the
  service account when running in a pod, else ``~/.kube/config``;
- the context given by name, else the current one, and its namespace;
- a cluster's ``server``, ``certificate-authority`` or ``-data`` and
  ``insecure-skip-tls-verify``;
- a user's ``client-certificate``/``client-key`` or their ``-data``, ``token``, ``tokenFile``,
  and ``exec`` credential plugins (``client.authentication.k8s.io`` v1 and v1beta1, giving
  a token or a client certificate; run only when the user has no token or certificate of its
  own, as client-go);
- file paths relative to the kubeconfig that names them; files of ``$KUBECONFIG`` that do
  not exist are skipped, an explicit path must exist.

What is refused with a :class:`KubeconfigError` that says so: ``auth-provider`` plugins
(gcp and azure left kubectl in 1.26; for OIDC use an exec plugin such as kubelogin), basic
auth (removed from the API server in 1.19), ``proxy-url`` and ``tls-server-name``. Error
messages never quote a file's content or a plugin's output: either may hold a secret.

Credentials that can go stale say how to get them again: a token read from a file (the
service account's, a ``tokenFile``) names the file, and an exec plugin's credentials carry the
plugin (:class:`ExecPlugin`); :func:`renew` reads or runs it again. When to renew is
``operators.credentials``' business.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import json
import os
import ssl
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = "~/.kube/config"
EXEC_TIMEOUT_S = 60
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class KubeconfigError(RuntimeError):
    """The credentials cannot be loaded; the message says which file, entry and why."""


@dataclass(frozen=True)
class Credentials:
    """An API server and what authenticates to it. PEM texts are held in memory only, and
    the secrets are left out of the repr (a traceback or a log may show it)."""

    server: str
    ca_pem: str | None = None
    insecure: bool = False
    client_cert_pem: str | None = None
    client_key_pem: str | None = dataclasses.field(default=None, repr=False)
    token: str | None = dataclasses.field(default=None, repr=False)
    namespace: str | None = None
    expires: datetime.datetime | None = None  # an exec plugin's token or certificate
    source: str = ""  # "service account" or the kubeconfig file(s): for messages
    # How to renew them (see renew): the file the token was read from, which its owner may
    # rotate (the kubelet rotates a projected service-account token), or the exec plugin that
    # gave them. At most one is set: a plugin only runs for a user without a token.
    token_file: Path | None = None
    exec_plugin: ExecPlugin | None = None

    @property
    def renewable(self) -> bool:
        return self.token_file is not None or self.exec_plugin is not None

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context: the cluster's CA (or none checked when insecure) and the
        client certificate, if any."""
        if self.insecure:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context = (
                ssl.create_default_context(cadata=self.ca_pem)
                if self.ca_pem
                else (ssl.create_default_context())
            )
        if self.client_cert_pem and self.client_key_pem:
            _load_client_cert(context, self.client_cert_pem, self.client_key_pem)
        return context

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


@dataclass(frozen=True)
class ExecPlugin:
    """An exec credential plugin as a user entry names it, with what running it needs, so
    that it can run again when its credentials expire or are refused."""

    # Not in the repr: the spec's env and the process's may hold secrets.
    spec: Mapping[str, Any] = dataclasses.field(repr=False)
    server: str
    ca_pem: str | None = dataclasses.field(repr=False)
    base: Path  # the directory of the kubeconfig that names it
    env: Mapping[str, str] = dataclasses.field(repr=False)
    where: str  # "kubeconfig FILE, context NAME": for messages

    def run(self) -> tuple[str | None, str | None, str | None, datetime.datetime | None]:
        return run_exec_plugin(self.spec, self.server, self.ca_pem, self.base, self.env, self.where)


def renew(credentials: Credentials) -> Credentials:
    """The credentials with their token read again from its file, or with what their exec
    plugin gives when run again; the same object when there is nothing to renew.

    Blocking (a file read, a subprocess): callers on an event loop run it in a thread.
    Raises :class:`KubeconfigError` (no secret in its message).
    """
    if credentials.exec_plugin is not None:
        token, cert, key, expires = credentials.exec_plugin.run()
        return replace(
            credentials, token=token, client_cert_pem=cert, client_key_pem=key, expires=expires
        )
    if credentials.token_file is not None:
        path = credentials.token_file
        try:
            token = path.read_text().strip()
        except OSError as err:
            raise KubeconfigError(
                f"{credentials.source}: token file {path}: {err.strerror}"
            ) from None
        except UnicodeDecodeError:
            raise KubeconfigError(f"{credentials.source}: token file {path}: not text") from None
        if not token:
            # As client-go: an empty file (one being rewritten) keeps the token there was.
            raise KubeconfigError(f"{credentials.source}: token file {path} is empty")
        return replace(credentials, token=token)
    return credentials


def _load_client_cert(context: ssl.SSLContext, cert_pem: str, key_pem: str) -> None:
    # ssl only loads a certificate chain from a file: a private one, removed right away.
    descriptor, path = tempfile.mkstemp(prefix="dralloc-client-", suffix=".pem")
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(cert_pem.rstrip("\n") + "\n" + key_pem)
        context.load_cert_chain(path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def load(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    service_account: Path = SERVICE_ACCOUNT_DIR,
) -> Credentials:
    """The credentials to use (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    if kubeconfig:
        return from_files([Path(kubeconfig).expanduser()], context, env)
    paths = env.get("KUBECONFIG") or ""
    if not paths and context is None and env.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster(env, service_account)
    if not paths:
        return from_files([Path(DEFAULT_KUBECONFIG).expanduser()], context, env)
    listed = [Path(p).expanduser() for p in paths.split(os.pathsep) if p]
    present = [p for p in listed if p.exists()]  # client-go skips the missing ones
    if not present:
        raise KubeconfigError(f"KUBECONFIG: none of {', '.join(map(str, listed))} exists")
    return from_files(present, context, env)


def in_cluster(env: Mapping[str, str], directory: Path = SERVICE_ACCOUNT_DIR) -> Credentials:
    """The pod's service account (the API server from the environment kubelet sets)."""
    host = env.get("KUBERNETES_SERVICE_HOST", "")
    port = env.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = f"[{host}]"  # IPv6
    try:
        token = (directory / "token").read_text().strip()
    except OSError as err:
        raise KubeconfigError(f"service account: cannot read its token: {err}") from None
    ca = directory / "ca.crt"
    namespace = directory / "namespace"
    return Credentials(
        server=f"https://{host}:{port}",
        ca_pem=ca.read_text() if ca.exists() else None,
        token=token or None,
        namespace=namespace.read_text().strip() if namespace.exists() else None,
        source="service account",
        token_file=directory / "token",  # a projected token: the kubelet rotates it
    )


def from_files(
    files: list[Path], context: str | None = None, env: Mapping[str, str] | None = None
) -> Credentials:
    """Merge kubeconfig files as kubectl does and read the chosen context."""
    env = os.environ if env is None else env
    source = ", ".join(str(f) for f in files)
    current: str | None = None
    # name -> (entry, directory of the file that named it first)
    entries: dict[str, dict[str, tuple[dict[str, Any], Path]]] = {
        "contexts": {},
        "clusters": {},
        "users": {},
    }
    for path in files:
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except OSError as err:
            raise KubeconfigError(f"kubeconfig {path}: {err.strerror or err}") from None
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark is not None else ""
            # Not the parser's message: it quotes the line, which may hold a token.
            raise KubeconfigError(f"kubeconfig {path}: not valid YAML{at}") from None
        if not isinstance(data, dict):
            raise KubeconfigError(f"kubeconfig {path}: not a mapping")
        current = current or data.get("current-context") or None
        for kind, field in (("contexts", "context"), ("clusters", "cluster"), ("users", "user")):
            for item in data.get(kind) or ():
                if isinstance(item, dict) and str(item.get("name")) not in entries[kind]:
                    entries[kind][str(item.get("name"))] = (
                        item.get(field) or {},
                        Path(os.path.abspath(path)).parent,  # as client-go: no symlinks followed
                    )
    name = context or current
    if not name:
        raise KubeconfigError(f"kubeconfig {source}: no context given and no current-context")
    if name not in entries["contexts"]:
        raise KubeconfigError(f"kubeconfig {source}: context {name!r} not found")
    ctx, _ = entries["contexts"][name]
    cluster_name, user_name = str(ctx.get("cluster")), ctx.get("user")
    if cluster_name not in entries["clusters"]:
        raise KubeconfigError(
            f"kubeconfig {source}: cluster {cluster_name!r} not found for context {name!r}"
        )
    cluster, cluster_dir = entries["clusters"][cluster_name]
    if user_name is not None and str(user_name) not in entries["users"]:
        raise KubeconfigError(
            f"kubeconfig {source}: user {user_name!r} not found for context {name!r}"
        )
    user, user_dir = entries["users"][str(user_name)] if user_name is not None else ({}, Path.cwd())
    where = f"kubeconfig {source}, context {name!r}"
    for unsupported in ("proxy-url", "tls-server-name"):
        if cluster.get(unsupported):
            raise KubeconfigError(f"{where}: cluster {unsupported} is not supported")
    if user.get("auth-provider"):
        raise KubeconfigError(
            f"{where}: auth-provider plugins are not supported (removed from kubectl in 1.26); "
            "use an exec credential plugin"
        )
    if user.get("username") or user.get("password"):
        raise KubeconfigError(f"{where}: basic auth is not supported (removed in 1.19)")
    server = str(cluster.get("server") or "")
    if not server:
        raise KubeconfigError(f"{where}: the cluster has no server")
    ca = _pem(cluster, "certificate-authority", cluster_dir, where)
    cert = _pem(user, "client-certificate", user_dir, where)
    key = _pem(user, "client-key", user_dir, where)
    token = user.get("token") or None
    token_path = None
    if user.get("tokenFile"):
        # As client-go: the file's token wins whenever it can be read (it is read again as
        # it rotates); an inline token beside it only stands in while it cannot.
        token_path = _relative(str(user["tokenFile"]), user_dir)
        try:
            token = token_path.read_text().strip() or token
        except (OSError, UnicodeDecodeError) as err:
            if not token:
                why = err.strerror if isinstance(err, OSError) else "not text (UTF-8)"
                raise KubeconfigError(f"{where}: tokenFile {token_path}: {why}") from None
    if bool(cert) != bool(key):
        raise KubeconfigError(
            f"{where}: a client certificate needs its key, and a key its certificate"
        )
    expires = None
    plugin = None
    if user.get("exec") and not token and not cert:
        # client-go runs the plugin only for a user without credentials of its own
        plugin = ExecPlugin(user["exec"], server, ca, user_dir, env, where)
        token, cert, key, expires = plugin.run()
    return Credentials(
        server=server.rstrip("/"),
        ca_pem=ca,
        insecure=_true(cluster.get("insecure-skip-tls-verify")),
        client_cert_pem=cert,
        client_key_pem=key,
        token=str(token) if token else None,
        namespace=ctx.get("namespace") or None,
        expires=expires,
        source=source,
        token_file=token_path,
        exec_plugin=plugin,
    )


def _true(value: Any) -> bool:
    """A YAML boolean, also when written as a string ("true")."""
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return value is True


def _from_begin(pem: str) -> str:
    """PEM text from its first block on: what precedes it (``subject=`` lines that openssl
    prints, bag attributes) is not read the same way by every TLS loader (kopf's is strict)."""
    start = pem.find("-----BEGIN ")
    return pem[start:] if start > 0 else pem


def _relative(path: str, base: Path) -> Path:
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else base / candidate


def _pem(entry: Mapping[str, Any], field: str, base: Path, where: str) -> str | None:
    """The PEM text of ``field``-data (base64) or of the file ``field`` names."""
    data = entry.get(f"{field}-data")
    if data:
        try:
            # line breaks are allowed, as Go's decoder allows them (a YAML block, wrapped output)
            text = base64.b64decode("".join(str(data).split()), validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            raise KubeconfigError(f"{where}: {field}-data is not base64 PEM") from None
        return _from_begin(text)
    if entry.get(field):
        path = _relative(str(entry[field]), base)
        try:
            return _from_begin(path.read_text())
        except OSError as err:
            raise KubeconfigError(f"{where}: {field} {path}: {err.strerror}") from None
        except UnicodeDecodeError:
            raise KubeconfigError(f"{where}: {field} {path}: not PEM text") from None
    return None


def run_exec_plugin(
    spec: Mapping[str, Any],
    server: str,
    ca_pem: str | None,
    base: Path,
    env: Mapping[str, str],
    where: str,
) -> tuple[str | None, str | None, str | None, datetime.datetime | None]:
    """(token, client certificate, client key, expiry) from an exec credential plugin."""
    api_version = str(spec.get("apiVersion") or "")
    if api_version not in EXEC_API_VERSIONS:
        raise KubeconfigError(
            f"{where}: exec plugin apiVersion {api_version!r} is not one of "
            f"{', '.join(EXEC_API_VERSIONS)}"
        )
    command = str(spec.get("command") or "")
    if not command:
        raise KubeconfigError(f"{where}: exec plugin without a command")
    if os.sep in command and not Path(command).is_absolute():
        command = str(base / command)  # kubectl: relative to the kubeconfig's directory
    info: dict[str, Any] = {"interactive": False}
    if spec.get("provideClusterInfo"):
        cluster: dict[str, Any] = {"server": server}
        if ca_pem:
            cluster["certificate-authority-data"] = base64.b64encode(ca_pem.encode()).decode()
        info["cluster"] = cluster
    if spec.get("interactiveMode") == "Always":
        raise KubeconfigError(f"{where}: exec plugin needs a terminal (interactiveMode Always)")
    child_env = dict(env)
    for item in spec.get("env") or ():
        if not isinstance(item, dict):
            raise KubeconfigError(f"{where}: exec plugin env entries are name/value pairs")
        child_env[str(item.get("name"))] = str(item.get("value", ""))
    child_env["KUBERNETES_EXEC_INFO"] = json.dumps(
        {"apiVersion": api_version, "kind": "ExecCredential", "spec": info}
    )
    hint = f" ({spec['installHint'].strip()})" if spec.get("installHint") else ""
    try:
        proc = subprocess.run(
            [command, *(str(a) for a in spec.get("args") or ())],
            env=child_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=EXEC_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        # Not the exception's text: it quotes the arguments, which may hold a client secret.
        raise KubeconfigError(
            f"{where}: exec plugin {command}: no answer within {EXEC_TIMEOUT_S:g}s{hint}"
        ) from None
    except OSError as err:
        raise KubeconfigError(
            f"{where}: exec plugin {command}: {err.strerror or type(err).__name__}{hint}"
        ) from None
    if proc.returncode != 0:
        # Its output is not quoted: a plugin may print tokens.
        raise KubeconfigError(f"{where}: exec plugin {command} exited with {proc.returncode}{hint}")
    try:
        status = json.loads(proc.stdout).get("status") or {}
    except (ValueError, AttributeError):
        status = None
    if not isinstance(status, dict):
        raise KubeconfigError(f"{where}: exec plugin {command} printed no ExecCredential")
    token = status.get("token") or None
    cert = (
        _from_begin(status["clientCertificateData"])
        if status.get("clientCertificateData")
        else None
    )
    key = _from_begin(status["clientKeyData"]) if status.get("clientKeyData") else None
    if not token and not (cert and key):
        raise KubeconfigError(
            f"{where}: exec plugin {command} gave neither a token nor a client certificate"
        )
    expires = None
    if status.get("expirationTimestamp"):
        with contextlib.suppress(ValueError):
            expires = datetime.datetime.fromisoformat(
                str(status["expirationTimestamp"]).replace("Z", "+00:00")
            )
    return token, cert, key, expires
