"""The only code that speaks HTTP to the API server.

Every call is raw aiohttp: we choose the path, headers and timeouts, read bytes, and decode them
ourselves (generated models would cost ~5x the CPU on the watch hot path). Where the server is
and how to authenticate come from ``kubeconfig`` (a kubeconfig or the pod's service account);
``credentials`` keeps the TLS context and the Authorization header current (token file rereads,
exec plugins).

Every failure leaves as one of two ``KubeError``s, so a caller catches one thing and still knows
what it may conclude:

- ``ApiError``: the server answered, with a non-2xx status. It decided, and nothing was
  applied - except when the answer is itself "I ran out of time" (504, or the Status reasons
  Timeout and ServerTimeout), after which the write may still complete.
- ``TransportError``: no (complete) answer - refused, reset or dropped connection, timeout,
  truncated body. Always worth retrying, and the outcome of a write is unknown unless the
  connection was never established (then the server never saw it).

``KubeError.maybe_applied`` says which: a write that may have been applied must be settled by
observing the object again, never assumed to have failed.

Three connection pools, one per class of traffic, so none can starve another: watch streams
(each holds a connection for minutes), ordinary requests (lists, writes, Events) and the leader
Lease (a renewal queued behind anything would cost the leadership). They share one
``Credentials``: the same TLS context, token and token refresh.
"""

from __future__ import annotations

import asyncio.sslproto
import base64
import ipaddress
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit
from urllib.request import getproxies_environment

import aiohttp
import anyio
import msgspec

from kubequeue import __version__
from kubequeue.kube.credentials import CredentialError, Credentials
from kubequeue.kube.gate import DecisionGate
from kubequeue.kube.kubeconfig import ClusterAccess, load

__all__ = [
    "ApiError",
    "KubeClient",
    "KubeError",
    "Pool",
    "PoolLimits",
    "TransportError",
    "backoff",
    "connect",
    "environment_proxy",
    "open_client",
    "open_pool",
]

_JSON = "application/json"
_MERGE_PATCH = "application/merge-patch+json"
_JSON_PATCH = "application/json-patch+json"
# What the API server says, with 422, when a JSON patch does not apply: one of its ``test`` ops
# failed or a path it names is missing. The message carries nothing more specific (field
# validation failures carry their causes in another message).
_PATCH_NOT_APPLIED = "the server rejected our request due to an error in our request"
# Ordinary requests: connect fast, never hang a decision on a silent socket.
DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=30, sock_connect=10)
_USER_AGENT = f"kube-queue/{__version__}"
# Watch events with large objects exceed aiohttp's default read buffer; etcd's request limit is
# 1.5 MiB.
_READ_BUFSIZE = 2**21

# asyncio gives every TLS connection a read buffer of SSLProtocol.max_size (256 KiB), allocated
# and zeroed when the connection opens and kept for its life; it only stages the socket's
# ciphertext on its way to decryption, so any size reads the same bytes, in more or fewer socket
# reads. With the ~80 connections the pools keep open under load the default was up to 20 MiB
# of an 87 MiB controller. At 64 KiB a 2 MiB LIST page still reads within ~10% of the default's
# speed and CPU; at 16 KiB (one TLS record) it took twice the CPU per MiB (`python -m
# bench.tls_read`; docs/benchmarks.md, "Backlog again, and the controller's memory").
_TLS_READ_SIZE = 2**16


class _Status(msgspec.Struct):
    reason: str = ""
    message: str = ""
    code: int = 0


class KubeError(Exception):
    """A request to the API server did not succeed (see the module docstring for the two kinds)."""

    path: str
    maybe_applied: bool
    """A write may have taken effect although it did not succeed."""


class ApiError(KubeError):
    """A non-2xx answer from the API server, with its Status reason and message."""

    def __init__(self, status: int, reason: str, message: str, path: str) -> None:
        super().__init__(f"{status} {reason}: {message} ({path})")
        self.status = status
        self.reason = reason
        self.message = message
        self.path = path
        self.maybe_applied = status == 504 or reason in ("Timeout", "ServerTimeout")

    @property
    def conflict(self) -> bool:
        """The object is not what the write was conditioned on: a stale resourceVersion (409),
        or a JSON patch whose tests failed (422, see _PATCH_NOT_APPLIED)."""
        return self.status == 409 or (self.status == 422 and self.message == _PATCH_NOT_APPLIED)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def gone(self) -> bool:
        return self.status == 410


class TransportError(KubeError):
    """No complete answer from the API server; whether it acted on the request is unknown
    unless ``maybe_applied`` is false."""

    reason = "Transport"  # the label callers count it under, beside ApiError's Status reasons

    def __init__(self, method: str, path: str, cause: BaseException) -> None:
        detail = str(cause) or type(cause).__name__
        super().__init__(f"{method} {path}: {type(cause).__name__}: {detail}")
        self.method = method
        self.path = path
        self.cause = cause
        # Only a connection that was never established (or credentials that could not be
        # obtained) proves the request was never sent. A pooled connection the server closed, a
        # reset, a timeout or a cut-off body all may come after the server applied it.
        self.maybe_applied = not isinstance(
            cause, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError | CredentialError
        )


# Everything that means "the conversation broke", as opposed to a bug in how we called it (an
# invalid URL is configuration, retrying cannot fix it).
_TRANSPORT = (aiohttp.ClientError, OSError, TimeoutError)


def _is_transport(exc: BaseException) -> bool:
    return isinstance(exc, _TRANSPORT) and not isinstance(exc, aiohttp.InvalidURL)


def _error(status: int, body: bytes, path: str) -> ApiError:
    try:
        st = msgspec.json.decode(body, type=_Status)
        return ApiError(status, st.reason or str(status), st.message or body[:200].decode(), path)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return ApiError(status, str(status), body[:200].decode(errors="replace"), path)


async def backoff(failures: int, base: float, cap: float) -> None:
    """Before retrying a request that failed ``failures`` times: exponential from ``base``,
    capped at ``cap``, jittered, so a flapping server is not hammered in lockstep."""
    delay = min(cap, base * 2 ** min(failures - 1, 10))
    await anyio.sleep(delay * random.uniform(0.5, 1.0))


class RateLimit:
    """A token bucket, as client-go's --kube-api-qps / --kube-api-burst: up to ``burst``
    requests at once, then ``qps`` a second. Protects a busy API server from a burst of
    admissions, and lets a benchmark give kube-queue exactly the limits it gives others."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._stamp = clock()
        self._lock = anyio.Lock()

    async def acquire(self) -> None:
        async with self._lock:  # waiters are served in turn
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
            self._stamp = now
            if self._tokens < 1.0:
                await self._sleep((1.0 - self._tokens) / self.qps)
                self._tokens = 1.0
                self._stamp = self._clock()
            self._tokens -= 1.0


def environment_proxy(
    server: str, environ: Mapping[str, str] | None = None
) -> tuple[str, dict[str, str]] | None:
    """The proxy ``HTTPS_PROXY`` / ``HTTP_PROXY`` name for ``server`` unless ``NO_PROXY``
    exempts it, with its credentials moved from the URL into a Proxy-Authorization header;
    None for a direct connection.

    Read once per pool, as client-go reads the environment once per process: aiohttp's
    ``trust_env`` would read the environment and ~/.netrc again in a worker thread on every
    request (two thread hops per admission write, a third of the controller's time in a
    backlog), and would add netrc credentials that clash with our Authorization header."""
    url = urlsplit(server)
    if environ is None:
        proxies = getproxies_environment()
    else:
        proxies = {
            k.lower()[: -len("_proxy")]: v
            for k, v in environ.items()
            if k.lower().endswith("_proxy") and v
        }
    if not url.hostname or url.scheme not in proxies:
        return None
    if _bypassed(url.hostname, url.port, proxies.get("no", "")):
        return None
    proxy = urlsplit(proxies[url.scheme])
    userinfo, _, hostport = proxy.netloc.rpartition("@")
    headers = {}
    if userinfo:
        user, _, password = userinfo.partition(":")
        pair = f"{unquote(user)}:{unquote(password)}".encode()
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
    return proxy._replace(netloc=hostport).geturl(), headers


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """NO_PROXY as Go's net/http reads it: ``*``, a host or domain suffix (``corp`` and
    ``.corp`` both match ``api.corp``), an IP address or CIDR block, each optionally with a
    port."""
    host = host.lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in no_proxy.lower().split(","):
        entry = raw.strip()
        if not entry:
            continue
        if entry == "*":
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry.strip("[]"), strict=False):
                    return True
                continue
            except ValueError:
                pass  # not an address or block: maybe "[fd00::1]:6443" or a name
        name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry_port and entry_port != str(port):
            continue
        name = name.strip("[]").lstrip("*").lstrip(".")
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


class Pool:
    """One connection pool to the API server: an aiohttp session with a connector of its own,
    sending the shared ``credentials``. Made by ``open_pool``."""

    def __init__(self, credentials: Credentials, session: aiohttp.ClientSession) -> None:
        access = credentials.access
        self.credentials = credentials
        self.session = session
        self.server = access.server
        self._extra: dict[str, Any] = {}
        self._headers: dict[str, str] = {}
        if access.tls_server_name:
            self._extra["server_hostname"] = access.tls_server_name
        if access.proxy:  # the kubeconfig's proxy-url wins over the environment, as in kubectl
            self._extra["proxy"] = access.proxy
        elif (env := environment_proxy(access.server)) is not None:
            self._extra["proxy"] = env[0]
            if access.server.startswith("https:"):  # sent on the CONNECT that opens the tunnel
                self._extra["proxy_headers"] = env[1]
            else:  # a plain-HTTP server: the proxy reads every request itself
                self._headers = env[1]

    async def send(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        body: bytes | None,
        content_type: str,
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """The response, whatever its status; aiohttp's exceptions or CredentialError."""
        auth = await self.credentials.current()
        url = self.server + path
        if query:
            url += "?" + urlencode(query)
        headers = (
            {"Content-Type": content_type, **auth.headers} if body is not None else auth.headers
        )
        if self._headers:
            headers = {**headers, **self._headers}
        resp = await self.session.request(
            method, url, data=body, headers=headers, timeout=timeout, ssl=auth.ssl, **self._extra
        )
        if resp.status == 401:
            self.credentials.rejected(auth)
        return resp


def shrink_tls_read_buffers() -> None:
    """Shrink asyncio's per-connection TLS read buffer to _TLS_READ_SIZE (see there).
    A process-wide class attribute, so this affects every asyncio TLS connection the process
    opens afterwards; only the size of each socket read changes, never what is read (the loop
    reads again while the socket has more)."""
    protocol = getattr(asyncio.sslproto, "SSLProtocol", None)
    if protocol is not None and getattr(protocol, "max_size", 0) > _TLS_READ_SIZE:
        protocol.max_size = _TLS_READ_SIZE


@asynccontextmanager
async def open_pool(credentials: Credentials, connections: int) -> AsyncIterator[Pool]:
    """A pool of at most ``connections`` connections, closed when the block ends."""
    shrink_tls_read_buffers()
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections),
        headers={"Accept": _JSON, "User-Agent": _USER_AGENT},
        trust_env=False,  # the proxy environment is read once, by Pool (environment_proxy)
        cookie_jar=aiohttp.DummyCookieJar(),  # the API server sets none worth keeping
        read_bufsize=_READ_BUFSIZE,
    )
    async with session:
        yield Pool(credentials, session)


class KubeClient:
    """Requests go through ``api``'s pool, watch streams through ``watch_api``'s; ``lease`` is
    a client of its own for the leader Lease. Without them everything shares ``api``'s pool.
    ``rate`` limits requests (not watch streams, and not the Lease's own client)."""

    def __init__(
        self,
        api: Pool,
        *,
        watch_api: Pool | None = None,
        lease: KubeClient | None = None,
        rate: RateLimit | None = None,
    ) -> None:
        self._api = api
        self._watch_api = watch_api if watch_api is not None else api
        self.lease: KubeClient = lease if lease is not None else self
        self._rate = rate
        # Answers wait here while an admission cycle runs in slices (kube/gate.py): the code
        # that asked changes the state with them. The Lease's own client has none.
        self.gate: DecisionGate | None = None

    @property
    def host(self) -> str:
        return self._api.server

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | list[Any] | None = None,
        content_type: str = _JSON,
        timeout: aiohttp.ClientTimeout = DEFAULT_TIMEOUT,
        api: Pool | None = None,
    ) -> aiohttp.ClientResponse:
        """The raw response, whatever its status, or TransportError."""
        data = None
        if body is not None:
            data = msgspec.json.encode(body if isinstance(body, list) else dict(body))
        try:
            return await (api if api is not None else self._api).send(
                method, path, query, data, content_type, timeout
            )
        except CredentialError as exc:  # nothing was sent
            raise TransportError(method, path, exc) from exc
        except Exception as exc:
            if _is_transport(exc):
                raise TransportError(method, path, exc) from exc
            raise

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | list[Any] | None = None,
        content_type: str = _JSON,
        timeout: aiohttp.ClientTimeout = DEFAULT_TIMEOUT,
    ) -> bytes:
        """One request; returns the body, raises ApiError on any non-2xx status and
        TransportError when no complete answer arrived. Either comes back only while the
        decision gate is open."""
        try:
            data = await self._request(method, path, query, body, content_type, timeout)
        except KubeError:
            gate = self.gate
            if gate is not None and gate.closed:
                await gate.wait_open()
            raise
        gate = self.gate
        if gate is not None and gate.closed:
            await gate.wait_open()
        return data

    async def _request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        body: Mapping[str, Any] | list[Any] | None,
        content_type: str,
        timeout: aiohttp.ClientTimeout,
    ) -> bytes:
        if self._rate is not None:
            await self._rate.acquire()
        resp = await self._call(
            method, path, query=query, body=body, content_type=content_type, timeout=timeout
        )
        async with resp:
            try:
                data = await resp.read()
            except Exception as exc:
                if _is_transport(exc):
                    raise TransportError(method, path, exc) from exc
                raise
            if not 200 <= resp.status < 300:
                raise _error(resp.status, data, path)
            return data

    async def get(self, path: str, query: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        result: dict[str, Any] = msgspec.json.decode(await self.request("GET", path, query=query))
        return result

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = msgspec.json.decode(await self.request("POST", path, body=body))
        return result

    async def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = msgspec.json.decode(await self.request("PUT", path, body=body))
        return result

    async def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A JSON merge patch; ``metadata.resourceVersion`` in the body is a precondition."""
        data = await self.request("PATCH", path, body=body, content_type=_MERGE_PATCH)
        result: dict[str, Any] = msgspec.json.decode(data)
        return result

    async def json_patch(
        self, path: str, ops: list[dict[str, Any]], *, answer: bool = True
    ) -> dict[str, Any]:
        """A JSON patch (RFC 6902), applied atomically; its ``test`` ops are preconditions (a
        failed one raises an ApiError whose ``conflict`` is true). ``answer=False``: the
        updated object is not decoded ({} is returned; a pod is kilobytes, per pod)."""
        data = await self.request("PATCH", path, body=ops, content_type=_JSON_PATCH)
        if not answer:
            return {}
        result: dict[str, Any] = msgspec.json.decode(data)
        return result

    @asynccontextmanager
    async def stream(
        self, path: str, query: Sequence[tuple[str, str]], timeout: aiohttp.ClientTimeout
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A streaming GET (watch) on the watch pool; raises ApiError before yielding if the
        status is not 2xx, and TransportError if the stream breaks, also while it is read."""
        resp = await self._call("GET", path, query=query, timeout=timeout, api=self._watch_api)
        try:
            async with resp:
                if not 200 <= resp.status < 300:
                    raise _error(resp.status, await resp.read(), path)
                yield resp
        except Exception as exc:
            if _is_transport(exc):
                raise TransportError("GET", path, exc) from exc
            raise


@dataclass(frozen=True, slots=True)
class PoolLimits:
    """Connections per pool (each pool is its own aiohttp connector)."""

    watches: int = 64
    """Watch streams: one per informer, held for minutes; size it to the informers + headroom."""
    requests: int = 32
    """Lists, admission and follow-up writes, Events: short requests."""
    lease: int = 2
    """Lease get/create/replace: one at a time, plus a spare while a dead one is closed."""
    qps: float = 0.0
    """Requests a second once ``burst`` is spent (0: no client-side limit)."""
    burst: int = 0


@asynccontextmanager
async def open_client(
    access: ClusterAccess | Credentials, limits: PoolLimits = PoolLimits()
) -> AsyncIterator[KubeClient]:
    """A client for ``access`` (or for existing credentials), with one pool per traffic class,
    all sharing one ``Credentials``."""
    credentials = access if isinstance(access, Credentials) else Credentials(access)
    async with AsyncExitStack() as stack:
        api = await stack.enter_async_context(open_pool(credentials, limits.requests))
        watch_api = await stack.enter_async_context(open_pool(credentials, limits.watches))
        lease_api = await stack.enter_async_context(open_pool(credentials, limits.lease))
        rate = RateLimit(limits.qps, limits.burst or int(limits.qps * 2)) if limits.qps else None
        yield KubeClient(api, watch_api=watch_api, lease=KubeClient(lease_api), rate=rate)


@asynccontextmanager
async def connect(
    kubeconfig: str | None = None,
    context: str | None = None,
    limits: PoolLimits = PoolLimits(),
) -> AsyncIterator[KubeClient]:
    """A client from an explicit kubeconfig; else in-cluster when running in a pod; else
    $KUBECONFIG / ~/.kube/config (see ``kubeconfig``). ConfigError if that configuration cannot
    work, CredentialError if its credentials cannot be obtained now (e.g. the exec plugin
    fails): both before anything is sent."""
    credentials = Credentials(load(kubeconfig, context))
    await credentials.current()
    async with open_client(credentials, limits) as client:
        yield client
