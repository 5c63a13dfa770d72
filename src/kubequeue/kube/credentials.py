"""The credentials every request to the API server carries, kept current while we run.

One ``Credentials`` serves every connection pool: one TLS context (trusted roots, client
certificate) and the Authorization header, which is

- static for a kubeconfig token or basic auth;
- read from a token file, reread every ``token_period`` seconds (the service account's bound
  token is rotated by the kubelet; client-go rereads it every minute). A failed reread keeps the
  last good token (or the kubeconfig's ``token``, as client-go) and says so in the log;
- obtained from an exec plugin (ExecCredential, client.authentication.k8s.io v1 or v1beta1): run
  on first use, again once its ``expirationTimestamp`` has passed, and again after the server
  answered 401 to it (``rejected``). A token, a client certificate or both; a new certificate
  gets a TLS context of its own. The plugin runs without a terminal, for at most
  ``exec_timeout`` seconds, with the kubeconfig's ``env`` and ``KUBERNETES_EXEC_INFO``.

Failing to get credentials while running is a ``CredentialError`` (the client reports it as a
transport error that was never sent); a configuration that can never work is a ``ConfigError``.

Python's ssl reads a client certificate and key only from files: they are written to an
anonymous in-memory file (Linux memfd) or else to 0600 files in a private temporary directory,
and are gone as soon as the context has loaded them.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from kubequeue.kube.kubeconfig import ClusterAccess, ConfigError, ExecPlugin

__all__ = ["Auth", "CredentialError", "Credentials", "tls_context"]

log = structlog.get_logger(__name__)

TOKEN_PERIOD = 60.0
EXEC_TIMEOUT = 30.0


class CredentialError(Exception):
    """Credentials could not be obtained now (exec plugin failed, token file unreadable)."""


@dataclass(frozen=True, slots=True)
class Auth:
    """What one request carries: its headers and, for https, the TLS context to connect with."""

    headers: Mapping[str, str]
    ssl: ssl.SSLContext | bool  # True: aiohttp's default (an http server)


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key.
    raise ValueError("encrypted client keys are not supported")


@contextmanager
def _pem_files(cert: bytes, key: bytes, memory: bool = True) -> Iterator[tuple[str, str]]:
    """Paths ssl can load ``cert`` and ``key`` from, gone when the block ends."""
    if memory and hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fds: list[int] = []
        try:
            for data in (cert, key):
                fds.append(os.memfd_create("kube-queue-client-tls", os.MFD_CLOEXEC))
                with open(fds[-1], "wb", closefd=False) as f:
                    f.write(data)
            yield f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}"
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="kube-queue-tls-") as private:  # mode 0700
        paths = (os.path.join(private, "client.crt"), os.path.join(private, "client.key"))
        for path, data in zip(paths, (cert, key), strict=True):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "wb") as f:
                f.write(data)
        yield paths


def tls_context(
    access: ClusterAccess,
    cert: bytes | None = None,
    key: bytes | None = None,
    *,
    memory: bool = True,
) -> ssl.SSLContext:
    """Trusting ``access.ca`` only if given, else the system's roots; presenting ``cert``."""
    if access.ca is not None:
        try:
            pem = access.ca.decode("ascii")
            if not pem.strip():
                raise ValueError("empty")
            context = ssl.create_default_context(cadata=pem)
        except (UnicodeDecodeError, ValueError, ssl.SSLError) as exc:
            raise ConfigError(
                f"{access.source}: the certificate authority is not PEM certificates ({exc})"
            ) from None
    else:
        context = ssl.create_default_context()
    if access.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert is not None and key is not None:
        try:
            with _pem_files(cert, key, memory) as (cert_path, key_path):
                context.load_cert_chain(cert_path, key_path, password=_no_password)
        except (ValueError, ssl.SSLError) as exc:
            raise ConfigError(
                f"{access.source}: the client certificate or key is not usable ({exc})"
            ) from None
    return context


def _header_safe(value: str, what: str) -> str:
    if not value or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise CredentialError(f"{what} is empty or contains control characters")
    return value


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class Credentials:
    """See the module docstring. ``current()`` for each request, ``rejected()`` after a 401."""

    def __init__(
        self,
        access: ClusterAccess,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        token_period: float = TOKEN_PERIOD,
        exec_timeout: float = EXEC_TIMEOUT,
    ) -> None:
        self.access = access
        self._clock = clock
        self._monotonic = monotonic
        self._token_period = token_period
        self._exec_timeout = exec_timeout
        self._https = access.server.startswith("https:")
        self._tls: ssl.SSLContext | bool = (
            tls_context(access, access.client_cert, access.client_key) if self._https else True
        )
        self._cached: Auth | None = None
        self._static = access.token_file is None and access.exec is None
        if self._static:
            headers: dict[str, str] = {}
            if access.token:
                headers = _bearer(self._checked(access.token, "token"))
            elif access.basic is not None:
                pair = f"{access.basic[0]}:{access.basic[1]}".encode()
                headers = {"Authorization": f"Basic {base64.b64encode(pair).decode()}"}
            self._cached = Auth(headers, self._tls)
        self._next_read = 0.0  # token file: when to read it again
        self._expiry: float | None = None  # exec: when its credential expires (wall clock)
        self._exec_tls: tuple[bytes, bytes, ssl.SSLContext] | None = None
        self._lock = anyio.Lock()

    def _checked(self, token: str, what: str) -> str:
        try:
            return _header_safe(token, what)
        except CredentialError as exc:
            raise ConfigError(f"{self.access.source}: {exc}") from None

    async def current(self) -> Auth:
        """The headers and TLS context for a request now; CredentialError if there are none."""
        cached = self._cached
        if self._static:
            assert cached is not None
            return cached
        if self.access.token_file is not None:
            return self._from_token_file()
        if cached is not None and (self._expiry is None or self._clock() < self._expiry):
            return cached
        async with self._lock:  # one plugin run for all the requests that found it expired
            cached = self._cached
            if cached is None or (self._expiry is not None and self._clock() >= self._expiry):
                cached = self._cached = await self._run_exec()
            return cached

    def rejected(self, auth: Auth) -> None:
        """The server answered 401 to a request made with ``auth``: get fresh credentials for
        the next request (a plugin rerun, a token file reread), unless that happened already."""
        if auth is self._cached and not self._static:
            if self.access.token_file is not None:
                self._next_read = 0.0
            else:
                self._cached = None

    def _from_token_file(self) -> Auth:
        now = self._monotonic()
        cached = self._cached
        if cached is not None and now < self._next_read:
            return cached
        self._next_read = now + self._token_period
        path = self.access.token_file
        assert path is not None
        try:
            token = _header_safe(path.read_text().strip(), f"token file {path}")
        except (OSError, UnicodeDecodeError, CredentialError) as exc:
            if cached is None and self.access.token:
                cached = Auth(_bearer(self.access.token), self._tls)
            if cached is None:
                raise CredentialError(f"cannot read token file {path}: {exc}") from None
            log.warning("kube.token_file_unreadable", path=str(path), error=str(exc))
            self._cached = cached
            return cached
        if cached is None or cached.headers.get("Authorization") != f"Bearer {token}":
            cached = self._cached = Auth(_bearer(token), self._tls)
        return cached

    def _environment(self, plugin: ExecPlugin) -> dict[str, str]:
        spec: dict[str, Any] = {"interactive": False}
        if plugin.cluster is not None:
            spec["cluster"] = dict(plugin.cluster)
        info = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": spec}
        return {**os.environ, **dict(plugin.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}

    async def _run_exec(self) -> Auth:
        plugin = self.access.exec
        assert plugin is not None
        name = f"exec plugin {plugin.command!r} ({plugin.where})"
        try:
            with anyio.fail_after(self._exec_timeout):
                done = await anyio.run_process(
                    [plugin.command, *plugin.args],
                    env=self._environment(plugin),
                    stdin=subprocess.DEVNULL,
                    check=False,
                )
        except TimeoutError:
            raise CredentialError(f"{name} did not finish in {self._exec_timeout:g}s") from None
        except OSError as exc:
            hint = f"; {plugin.install_hint}" if plugin.install_hint else ""
            raise CredentialError(f"{name} could not be started: {exc}{hint}") from None
        if done.returncode != 0:
            stderr = done.stderr.decode(errors="replace").strip()[-1000:]
            raise CredentialError(f"{name} exited with status {done.returncode}: {stderr}")
        token, cert, key, expiry = self._parse(done.stdout, plugin, name)
        tls = self._tls
        if cert is not None and key is not None and self._https:
            if self._exec_tls is None or self._exec_tls[:2] != (cert, key):
                try:
                    self._exec_tls = (cert, key, tls_context(self.access, cert, key))
                except ConfigError as exc:
                    raise CredentialError(f"{name}: {exc}") from None
            tls = self._exec_tls[2]
        self._expiry = expiry
        log.debug("kube.exec_credential", command=plugin.command, expires=expiry)
        return Auth(_bearer(token) if token else {}, tls)

    def _parse(
        self, stdout: bytes, plugin: ExecPlugin, name: str
    ) -> tuple[str | None, bytes | None, bytes | None, float | None]:
        try:
            cred = json.loads(stdout)
        except ValueError:
            raise CredentialError(f"{name} did not print an ExecCredential as JSON") from None
        if not isinstance(cred, dict) or cred.get("kind") != "ExecCredential":
            raise CredentialError(f"{name} did not print an ExecCredential")
        if cred.get("apiVersion") != plugin.api_version:
            raise CredentialError(
                f"{name} printed apiVersion {cred.get('apiVersion')!r}, "
                f"configured {plugin.api_version!r}"
            )
        status = cred.get("status")
        if not isinstance(status, dict):
            raise CredentialError(f"{name}: the ExecCredential has no status")
        token, cert, key, stamp = (
            status.get(k)
            for k in ("token", "clientCertificateData", "clientKeyData", "expirationTimestamp")
        )
        for field, value in (
            ("token", token),
            ("clientCertificateData", cert),
            ("clientKeyData", key),
            ("expirationTimestamp", stamp),
        ):
            if value is not None and not isinstance(value, str):
                raise CredentialError(f"{name}: status.{field} must be a string")
        if bool(cert) != bool(key):
            raise CredentialError(
                f"{name}: status.clientCertificateData and clientKeyData come together"
            )
        if not token and not cert:
            raise CredentialError(f"{name}: status has neither a token nor a client certificate")
        if token:
            _header_safe(token, f"{name}: status.token")
        expiry = None
        if stamp:
            try:
                moment = datetime.datetime.fromisoformat(stamp)
            except ValueError:
                moment = None
            if moment is None or moment.tzinfo is None:
                raise CredentialError(
                    f"{name}: status.expirationTimestamp {stamp!r} is not RFC 3339"
                )
            expiry = moment.timestamp()
        return (
            token or None,
            cert.encode() if cert else None,
            key.encode() if key else None,
            expiry,
        )
