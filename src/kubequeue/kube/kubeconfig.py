"""Where the API server is and how to prove who we are: from kubeconfig files, as kubectl reads
them, or from the pod's service account.

Every file is read as untrusted input: anything missing, of the wrong type or unreadable is a
``ConfigError`` that names the file, the entry and the field. Only the selected context's
cluster and user are validated, so a broken entry elsewhere in a merged config does not matter
(as with kubectl).

Which files (``kubeconfig_paths``): an explicit path alone (it must exist); else every file
listed in ``$KUBECONFIG`` (``:``-separated, missing ones skipped); else ``~/.kube/config``.
Several files merge as kubectl merges them: the first ``current-context`` set wins, and for each
cluster, user and context name the first file that defines it wins. Relative paths in an entry
resolve against the directory of the file that entry came from.

Supported, for the selected context:

- cluster: ``server`` (without a scheme: https if any TLS setting is given, else http, as
  client-go), ``certificate-authority`` / ``-data`` (data wins; when given, it is the only
  trusted root, else the system's), ``insecure-skip-tls-verify`` (not together with a CA),
  ``tls-server-name``, ``proxy-url`` (http/https proxies only), and for exec plugins with
  ``provideClusterInfo`` the ``client.authentication.k8s.io/exec`` extension;
- user: ``token`` / ``tokenFile`` (the file is reread every minute and wins while readable, as
  client-go), ``client-certificate`` / ``-data`` and ``client-key`` / ``-data``, ``username`` /
  ``password`` (basic auth; not together with a token), and ``exec`` plugins of
  ``client.authentication.k8s.io/v1`` and ``v1beta1`` (``command`` - relative to the file when it
  contains a ``/``, else looked up on PATH -, ``args``, ``env``, ``provideClusterInfo``,
  ``installHint``; run non-interactively). As in client-go, an exec plugin is used only when the
  user has no token, basic auth or client certificate.

Refused with a ``ConfigError`` rather than ignored, because ignoring them would connect as
someone else or not at all: ``auth-provider`` (gcp, azure, oidc: removed from kubectl; use their
exec plugins), impersonation (``as``, ``as-groups``, ``as-uid``, ``as-user-extra``), exec
``interactiveMode: Always``, exec API version ``v1alpha1``, and socks proxies. Ignored:
``preferences``, a context's ``namespace``, ``disable-compression`` and unknown fields.

In-cluster (``in_cluster``): ``KUBERNETES_SERVICE_HOST`` / ``_PORT``, and the service account's
``token`` (a bound token that the kubelet rotates: reread every minute) and ``ca.crt``.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

__all__ = [
    "EXEC_API_VERSIONS",
    "SERVICE_ACCOUNT_DIR",
    "ClusterAccess",
    "ConfigError",
    "ExecPlugin",
    "from_kubeconfig",
    "in_cluster",
    "kubeconfig_paths",
    "load",
]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
_EXEC_EXTENSION = "client.authentication.k8s.io/exec"
_IMPERSONATION = ("as", "as-uid", "as-groups", "as-user-extra")


class ConfigError(Exception):
    """The kubeconfig or in-cluster configuration is missing, malformed or unsupported."""


@dataclass(frozen=True, slots=True)
class ExecPlugin:
    """A credential plugin to run (client.authentication.k8s.io ExecCredential)."""

    command: str
    api_version: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cluster: Mapping[str, Any] | None = None
    """``spec.cluster`` handed to the plugin, if the config says provideClusterInfo."""
    install_hint: str = ""
    where: str = ""
    """Which user of which file, for error messages."""


@dataclass(frozen=True, slots=True)
class ClusterAccess:
    """One API server and the credentials to use with it."""

    server: str
    """Base URL, without a trailing slash (it may have a path prefix)."""
    ca: bytes | None = None
    """PEM roots to trust instead of the system's."""
    insecure: bool = False
    tls_server_name: str | None = None
    proxy: str | None = None
    token: str | None = None
    token_file: Path | None = None
    client_cert: bytes | None = None
    client_key: bytes | None = None
    basic: tuple[str, str] | None = None
    exec: ExecPlugin | None = None
    source: str = ""
    """Where this came from (file and context, or in-cluster), for messages."""


def kubeconfig_paths(
    explicit: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] = os.environ,
    home: Path | None = None,
) -> tuple[list[Path], bool]:
    """The files to read and whether each must exist (only an explicit one must)."""
    if explicit:
        return [Path(explicit)], True
    listed = environ.get("KUBECONFIG", "")
    if listed:
        paths: list[Path] = []
        for entry in listed.split(os.pathsep):
            if entry and Path(entry) not in paths:
                paths.append(Path(entry))
        if paths:
            return paths, False
    return [(home if home is not None else Path.home()) / ".kube" / "config"], False


def load(
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    environ: Mapping[str, str] = os.environ,
    account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> ClusterAccess:
    """An explicit kubeconfig; else in-cluster when running in a pod; else $KUBECONFIG or
    ~/.kube/config."""
    if kubeconfig or "KUBERNETES_SERVICE_HOST" not in environ:
        return from_kubeconfig(kubeconfig, context, environ)
    return in_cluster(environ, account_dir)


def in_cluster(
    environ: Mapping[str, str] = os.environ, account_dir: Path = SERVICE_ACCOUNT_DIR
) -> ClusterAccess:
    """The pod's service account, as client-go's InClusterConfig."""
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError(
            "in-cluster configuration needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT"
        )
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6
    token_file = account_dir / "token"
    try:
        if not token_file.read_text().strip():
            raise ConfigError(f"in-cluster token file {token_file} is empty")
        ca = (account_dir / "ca.crt").read_bytes()
    except OSError as exc:
        raise ConfigError(f"in-cluster configuration: {exc}") from None
    return ClusterAccess(
        server=f"https://{host}:{port}", ca=ca, token_file=token_file, source="in-cluster"
    )


@dataclass(frozen=True, slots=True)
class _Entry:
    """A named cluster, user or context, with the file it came from."""

    body: Mapping[str, Any]
    path: Path
    where: str


class _Merged:
    def __init__(self) -> None:
        self.current_context = ""
        self.sections: dict[str, dict[str, _Entry]] = {"clusters": {}, "users": {}, "contexts": {}}
        self.files: list[Path] = []

    def add(self, path: Path, doc: Any) -> None:
        self.files.append(path)
        if doc is None:
            return  # an empty file is an empty config
        if not isinstance(doc, Mapping):
            raise ConfigError(f"{path}: not a kubeconfig (top level is not a mapping)")
        current = doc.get("current-context")
        if current is not None and not isinstance(current, str):
            raise ConfigError(f"{path}: current-context must be a string")
        if current and not self.current_context:
            self.current_context = current
        for section, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            items = doc.get(section)
            if items is None:
                continue
            if not isinstance(items, list):
                raise ConfigError(f"{path}: {section} must be a list")
            for i, item in enumerate(items):
                if not isinstance(item, Mapping):
                    raise ConfigError(f"{path}: {section}[{i}] must be a mapping")
                name = item.get("name")
                if not isinstance(name, str) or not name:
                    raise ConfigError(f"{path}: {section}[{i}] has no name")
                where = f"{inner} {name!r} in {path}"
                body = item.get(inner)
                if body is None and inner == "user":
                    body = {}  # a user without credentials
                if not isinstance(body, Mapping):
                    raise ConfigError(f"{where}: {inner} must be a mapping")
                self.sections[section].setdefault(name, _Entry(body, path, where))

    def named(self, section: str, name: str) -> _Entry:
        entry = self.sections[section].get(name)
        if entry is None:
            kind = section[:-1]
            raise ConfigError(f"{kind} {name!r} not found in {_files(self.files)}")
        return entry


def _files(paths: Sequence[Path]) -> str:
    return ", ".join(str(p) for p in paths)


def from_kubeconfig(
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    environ: Mapping[str, str] = os.environ,
    home: Path | None = None,
) -> ClusterAccess:
    """The selected context (``context``, else current-context) of the kubeconfig files."""
    paths, must_exist = kubeconfig_paths(kubeconfig, environ, home)
    merged = _Merged()
    for path in (Path(os.path.abspath(p)) for p in paths):
        try:
            text = path.read_text()
        except FileNotFoundError:
            if must_exist:
                raise ConfigError(f"kubeconfig {path} does not exist") from None
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read kubeconfig {path}: {exc}") from None
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"kubeconfig {path} is not valid YAML: {exc}") from None
        merged.add(path, doc)
    if not merged.files:
        raise ConfigError(
            f"no kubeconfig: {_files(paths)} not found (and not running in a cluster: "
            "KUBERNETES_SERVICE_HOST is unset)"
        )
    name = context or merged.current_context
    if not name:
        raise ConfigError(
            f"no current-context in {_files(merged.files)}; choose one with --context"
        )
    ctx = merged.named("contexts", name)
    cluster_name = _string(ctx, "cluster")
    if not cluster_name:
        raise ConfigError(f"{ctx.where}: no cluster")
    cluster = merged.named("clusters", cluster_name)
    user_name = _string(ctx, "user")
    user = merged.named("users", user_name) if user_name else None
    return _access(cluster, user, f"context {name!r} of {_files(merged.files)}")


def _access(cluster: _Entry, user: _Entry | None, source: str) -> ClusterAccess:
    ca = _file_or_data(cluster, "certificate-authority", "certificate-authority-data")
    insecure = _bool(cluster, "insecure-skip-tls-verify")
    if ca is not None and insecure:
        raise ConfigError(
            f"{cluster.where}: insecure-skip-tls-verify cannot be used with a certificate-authority"
        )
    cert = key = None
    token = basic = exec_plugin = None
    token_file: Path | None = None
    if user is not None:
        _refuse_unsupported(user)
        cert = _file_or_data(user, "client-certificate", "client-certificate-data")
        key = _file_or_data(user, "client-key", "client-key-data")
        if (cert is None) != (key is None):
            raise ConfigError(f"{user.where}: a client certificate needs both certificate and key")
        token = _string(user, "token") or None
        token_file = _path(user, "tokenFile")
        if token_file is not None:
            _read_token(token_file, user.where)  # readable now; reread while running
        username, password = _string(user, "username"), _string(user, "password")
        if username or password:
            if token or token_file:
                raise ConfigError(
                    f"{user.where}: more than one authentication method (token and "
                    "username/password); only one is allowed"
                )
            basic = (username, password)
    server = _server(cluster, tls=ca is not None or insecure or cert is not None)
    if user is not None and not (token or token_file or basic or cert):
        exec_plugin = _exec(user, cluster, server, ca, insecure)
    return ClusterAccess(
        server=server,
        ca=ca,
        insecure=insecure,
        tls_server_name=_string(cluster, "tls-server-name") or None,
        proxy=_proxy(cluster),
        token=token,
        token_file=token_file,
        client_cert=cert,
        client_key=key,
        basic=basic,
        exec=exec_plugin,
        source=source,
    )


def _refuse_unsupported(user: _Entry) -> None:
    provider = user.body.get("auth-provider")
    if provider is not None:
        name = provider.get("name", "") if isinstance(provider, Mapping) else ""
        raise ConfigError(
            f"{user.where}: auth-provider {name!r} is not supported (kubectl removed auth "
            "providers); use an exec credential plugin instead (e.g. gke-gcloud-auth-plugin, "
            "kubelogin for Azure or OIDC)"
        )
    for key in _IMPERSONATION:
        if user.body.get(key):
            raise ConfigError(f"{user.where}: impersonation ({key}) is not supported")


def _server(cluster: _Entry, tls: bool) -> str:
    raw = _string(cluster, "server")
    if not raw:
        raise ConfigError(f"{cluster.where}: no server")
    url = urlsplit(raw if "://" in raw else ("https://" if tls else "http://") + raw)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ConfigError(f"{cluster.where}: server {raw!r} is not an http(s) URL")
    try:
        url.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise ConfigError(f"{cluster.where}: server {raw!r} has an invalid port") from None
    if url.query or url.fragment:
        raise ConfigError(f"{cluster.where}: server {raw!r} must not have a query or fragment")
    return url.geturl().rstrip("/")


def _proxy(cluster: _Entry) -> str | None:
    raw = _string(cluster, "proxy-url")
    if not raw:
        return None
    url = urlsplit(raw)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ConfigError(
            f"{cluster.where}: proxy-url {raw!r} is not supported (only http and https proxies)"
        )
    return raw


def _exec(
    user: _Entry, cluster: _Entry, server: str, ca: bytes | None, insecure: bool
) -> ExecPlugin | None:
    spec = user.body.get("exec")
    if spec is None:
        return None
    where = f"{user.where}: exec"
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where} must be a mapping")
    entry = _Entry(spec, user.path, where)
    command = _string(entry, "command")
    if not command:
        raise ConfigError(f"{where}: no command")
    if os.sep in command and not os.path.isabs(command):
        command = str(user.path.parent / command)  # as kubectl: relative to the file
    api_version = _string(entry, "apiVersion")
    if api_version not in EXEC_API_VERSIONS:
        raise ConfigError(
            f"{where}: apiVersion {api_version!r} is not supported (use one of "
            f"{', '.join(EXEC_API_VERSIONS)})"
        )
    args = spec.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}: args must be a list of strings")
    if not isinstance(spec.get("env") or [], list):
        raise ConfigError(f"{where}: env must be a list")
    env: list[tuple[str, str]] = []
    for i, item in enumerate(spec.get("env") or []):
        name = item.get("name") if isinstance(item, Mapping) else None
        value = item.get("value", "") if isinstance(item, Mapping) else None
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise ConfigError(f"{where}: env[{i}] needs a name and a string value")
        env.append((name, value))
    mode = _string(entry, "interactiveMode") or "IfAvailable"
    if mode not in ("Never", "IfAvailable", "Always"):
        raise ConfigError(f"{where}: interactiveMode {mode!r} is not Never, IfAvailable or Always")
    if mode == "Always":
        raise ConfigError(
            f"{where}: interactiveMode Always is not supported (plugins run without a terminal)"
        )
    info = None
    if _bool(entry, "provideClusterInfo"):
        info = {"server": server, "insecure-skip-tls-verify": insecure}
        if ca is not None:
            info["certificate-authority-data"] = base64.b64encode(ca).decode()
        for key in ("tls-server-name", "proxy-url"):
            if value := _string(cluster, key):
                info[key] = value
        extensions = cluster.body.get("extensions") or []
        for ext in extensions if isinstance(extensions, list) else []:
            if isinstance(ext, Mapping) and ext.get("name") == _EXEC_EXTENSION:
                info["config"] = ext.get("extension")
    return ExecPlugin(
        command=command,
        api_version=api_version,
        args=tuple(args),
        env=tuple(env),
        cluster=info,
        install_hint=_string(entry, "installHint"),
        where=user.where,
    )


def _string(entry: _Entry, key: str) -> str:
    value = entry.body.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"{entry.where}: {key} must be a string, not {type(value).__name__}")
    return value


def _bool(entry: _Entry, key: str) -> bool:
    value = entry.body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ConfigError(f"{entry.where}: {key} must be true or false")
    return value


def _path(entry: _Entry, key: str) -> Path | None:
    value = _string(entry, key)
    return entry.path.parent / value if value else None  # an absolute value stays as it is


def _file_or_data(entry: _Entry, file_key: str, data_key: str) -> bytes | None:
    data = _string(entry, data_key)
    if data:
        try:
            # Go's base64 (how kubectl reads these) skips line breaks; nothing else.
            return base64.b64decode(data.replace("\n", "").replace("\r", ""), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"{entry.where}: {data_key} is not valid base64") from None
    path = _path(entry, file_key)
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{entry.where}: cannot read {file_key} {path}: {exc}") from None


def _read_token(path: Path, where: str) -> str:
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read tokenFile {path}: {exc}") from None
    if not token:
        raise ConfigError(f"{where}: tokenFile {path} is empty")
    return token
