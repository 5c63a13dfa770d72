"""List-then-watch on raw streams, decoded by us, resumed from the last resourceVersion.

The contract (as in client-go's reflector and kopf's watcher):
- an initial paginated list delivers every object, then ``synced`` fires (the caller's
  ``task_status.started()``): nothing may decide before every informer has listed once;
- the watch resumes from the newest resourceVersion seen, bookmarks included, so a reconnect
  replays nothing and misses nothing;
- "410 Gone" (from the watch or an expired continue token) means our resourceVersion fell out of
  the server's window: list again, and report objects that vanished meanwhile as deleted;
- any other failure (network, 5xx, 403 while RBAC is being fixed, a missing CRD) backs off with
  jitter and retries; it never ends the task, so one broken kind cannot take the others down;
- with ``resync``, the list is repeated at that period (after the watch in progress ends), so
  every object is judged again from the server's copy even if an earlier handling failed.
Every watch has a server-side timeout and a client-side read timeout: a half-open connection is
noticed within ``read_timeout`` seconds rather than never.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import aiohttp
import anyio
import anyio.lowlevel
import msgspec
import structlog
from anyio.abc import TaskStatus

from kubequeue.kube.client import ApiError, KubeClient, TransportError
from kubequeue.kube.gate import DecisionGate
from kubequeue.objects import ObjectList, WatchEvent
from kubequeue.observability import metrics

__all__ = ["Codec", "Handler", "Informer", "dict_codec", "struct_codec"]

log = structlog.get_logger(__name__)

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)

# A list page is handed to the handler in stretches of about this long (checked every
# LIST_CHECK_EVERY objects), the event loop getting a turn between them.
LIST_SLICE_S = 0.02
LIST_CHECK_EVERY = 32


class Handler(Protocol[T_contra]):
    def upsert(self, obj: T_contra) -> None: ...

    def delete(self, key: str) -> None: ...

    def synced(self) -> None: ...


class _Event(msgspec.Struct, Generic[T]):
    """A watch line with its object decoded in the same pass (the usual ADDED/MODIFIED/DELETED
    line); anything that does not fit this shape takes the two-step path in _dispatch."""

    type: str
    object: T


@dataclass(frozen=True, slots=True)
class Codec(Generic[T]):
    """How to decode one resource's objects and tell their identity and version."""

    list_decoder: msgspec.json.Decoder[ObjectList[T]]
    item_decoder: msgspec.json.Decoder[T]
    key: Callable[[T], str]
    resource_version: Callable[[T], str]
    event_decoder: msgspec.json.Decoder[_Event[T]] | None = None


class _HasMeta(Protocol):
    @property
    def metadata(self) -> Any: ...


S = TypeVar("S", bound=_HasMeta)


def struct_codec(cls: type[S], key: Callable[[S], str]) -> Codec[S]:
    return Codec(
        list_decoder=msgspec.json.Decoder(ObjectList[cls]),  # type: ignore[valid-type]
        item_decoder=msgspec.json.Decoder(cls),
        key=key,
        resource_version=lambda o: str(o.metadata.resourceVersion),
        event_decoder=msgspec.json.Decoder(_Event[cls]),  # type: ignore[valid-type]
    )


def _dict_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def dict_codec() -> Codec[dict[str, Any]]:
    """Objects as plain dicts, for job kinds whose adapters read arbitrary paths."""
    return Codec(
        list_decoder=msgspec.json.Decoder(ObjectList[dict[str, Any]]),
        item_decoder=msgspec.json.Decoder(dict[str, Any]),
        key=_dict_key,
        resource_version=lambda o: str((o.get("metadata") or {}).get("resourceVersion", "")),
        event_decoder=msgspec.json.Decoder(_Event[dict[str, Any]]),
    )


class _Gone(Exception):
    """Our resourceVersion is too old for the server: relist."""


class _Bookmark(msgspec.Struct):
    class _Meta(msgspec.Struct):
        resourceVersion: str = ""

    metadata: _Meta = msgspec.field(default_factory=_Meta)


class _WatchStatus(msgspec.Struct):
    code: int = 0
    reason: str = ""
    message: str = ""


_event_decoder = msgspec.json.Decoder(WatchEvent)
_bookmark_decoder = msgspec.json.Decoder(_Bookmark)
_status_decoder = msgspec.json.Decoder(_WatchStatus)


class Informer(Generic[T]):
    def __init__(
        self,
        client: KubeClient,
        name: str,
        path: str,
        codec: Codec[T],
        handler: Handler[T],
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        page_size: int = 500,
        watch_timeout: int = 300,
        read_timeout: float = 90.0,
        max_backoff: float = 30.0,
        optional: bool = False,
        missing_poll: float = 10.0,
        resync: float = 0.0,
        gate: DecisionGate | None = None,
        on_page: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        # Watch events wait here while an admission cycle runs in slices (kube/gate.py).
        self.gate = gate
        # Called after each list page has been handed over (the controller freezes the heap
        # built so far out of the cyclic collector until it is synced).
        self.on_page = on_page
        self.name = name
        self.path = path
        self.codec = codec
        self.handler = handler
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.read_timeout = read_timeout
        self.max_backoff = max_backoff
        # Optional resources (job kinds from CRDs) may be absent: 404 counts as "synced, empty".
        # Polling the list (instead of watching CRDs) needs no extra RBAC.
        self.optional = optional
        self.missing_poll = missing_poll
        # Relist at least this often (seconds; 0: only on 410 Gone), so an object whose
        # handling failed, or whose judgement depends on something outside the object, is
        # judged again from the server's copy (client-go's resync, done by listing: we do not
        # keep the objects themselves).
        self.resync = resync
        self._listed_at = 0.0
        self._missing_logged = False
        self.resource_version = ""
        self._known: set[str] = set()
        self._failures = 0
        self._events = {
            t: metrics.WATCH_EVENTS.labels(name, t) for t in ("ADDED", "MODIFIED", "DELETED")
        }
        self._cached = metrics.CACHED_OBJECTS.labels(name)
        # Watch events per type since the metrics were last brought up to date (_flush_metrics).
        self._unflushed: dict[str, int] = {}

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        started = False
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                    if not started:
                        started = True
                        task_status.started()
                await self._watch()
                self._failures = 0
                if self.resync and anyio.current_time() - self._listed_at >= self.resync:
                    log.debug("informer.resync", resource=self.name)
                    need_list = True
            except _Gone:
                metrics.WATCH_RESTARTS.labels(self.name, "gone").inc()
                log.info("informer.relist", resource=self.name, why="resourceVersion expired (410)")
                need_list = True
            except ApiError as exc:
                if not (exc.not_found and self.optional):
                    metrics.WATCH_RESTARTS.labels(self.name, "error").inc()
                    await self._backoff(exc)
                    continue
                # The CRD is not installed (or was removed): nothing of this kind exists, which
                # is a complete, synced answer. Poll until it appears.
                self._resource_missing()
                if not started:
                    started = True
                    task_status.started()
                need_list = True
                await anyio.sleep(self.missing_poll)
            except (TransportError, aiohttp.ClientError, TimeoutError, msgspec.DecodeError) as exc:
                metrics.WATCH_RESTARTS.labels(self.name, "error").inc()
                await self._backoff(exc)

    def _resource_missing(self) -> None:
        for key in self._known:
            self._deliver(self.handler.delete, key, key)
        if self._known or not self._missing_logged:
            log.error(
                "informer.resource_missing",
                resource=self.name,
                path=self.path,
                why="the API server does not serve this resource: install its CRD (the other "
                "kinds keep being queued; this one starts as soon as the CRD appears)",
                poll_s=self.missing_poll,
            )
        self._known = set()
        self._missing_logged = True
        self._cached.set(0)

    async def _backoff(self, exc: BaseException) -> None:
        self._failures += 1
        delay = min(self.max_backoff, 0.5 * 2 ** min(self._failures, 8))
        delay *= random.uniform(0.5, 1.0)  # jitter: replicas must not reconnect in lockstep
        hint = ""
        if isinstance(exc, ApiError) and exc.status == 403:
            hint = "the controller's RBAC does not allow list/watch on this resource"
        elif isinstance(exc, ApiError) and exc.not_found:
            hint = "the resource does not exist on this cluster (is its CRD installed?)"
        log_fn = log.warning if self._failures <= 3 or self._failures % 20 == 0 else log.debug
        log_fn(
            "informer.retry",
            resource=self.name,
            error=str(exc) or type(exc).__name__,
            hint=hint or None,
            retry_in=round(delay, 2),
            failures=self._failures,
        )
        await anyio.sleep(delay)

    # ----------------------------------------------------------------- list
    async def _list(self) -> None:
        metrics.RELISTS.labels(self.name).inc()
        seen: set[str] = set()
        token = ""
        while True:
            query = [("limit", str(self.page_size))]
            if token:
                query.append(("continue", token))
            if self.field_selector:
                query.append(("fieldSelector", self.field_selector))
            if self.label_selector:
                query.append(("labelSelector", self.label_selector))
            try:
                data = await self.client.request("GET", self.path, query=query)
            except ApiError as exc:
                if exc.gone:  # the continue token expired mid-list: start over
                    seen.clear()
                    token = ""
                    continue
                raise
            gate = self.gate
            if gate is not None and gate.closed:
                await gate.wait_open()
            try:
                page = self.codec.list_decoder.decode(data)
            except msgspec.ValidationError:
                page = self._decode_page_leniently(data)
            # A page of 500 objects can take 60 ms to hand over (Jobs: decoding their specs):
            # long enough to matter to the webhook and the Lease, so the event loop gets a turn
            # every LIST_SLICE_S (a relist while leading interleaves with cycles as watch events
            # do: between objects, and never while the decision gate is closed).
            started = time.perf_counter()
            for i, obj in enumerate(page.items, 1):
                key = self.codec.key(obj)
                seen.add(key)
                self._deliver(self.handler.upsert, obj, key)
                if not i % LIST_CHECK_EVERY and time.perf_counter() - started > LIST_SLICE_S:
                    await anyio.lowlevel.checkpoint()
                    if gate is not None and gate.closed:
                        await gate.wait_open()
                    started = time.perf_counter()
            if self.on_page is not None:
                self.on_page()
            token = page.metadata.continue_
            if not token:
                self.resource_version = page.metadata.resourceVersion
                break
        if self._missing_logged:
            log.info("informer.resource_appeared", resource=self.name, path=self.path)
            self._missing_logged = False
        for key in self._known - seen:
            self._deliver(self.handler.delete, key, key)
        self._known = seen
        self._listed_at = anyio.current_time()
        self.handler.synced()
        self._cached.set(len(seen))
        log.info("informer.listed", resource=self.name, objects=len(seen))

    def _decode_page_leniently(self, data: bytes) -> ObjectList[T]:
        """One object we cannot read must not hide the rest of the page."""
        raw_page = msgspec.json.decode(data, type=ObjectList[msgspec.Raw])
        items: list[T] = []
        for raw in raw_page.items:
            try:
                items.append(self.codec.item_decoder.decode(raw))
            except msgspec.ValidationError as exc:
                log.warning("informer.undecodable", resource=self.name, error=str(exc))
        return ObjectList(metadata=raw_page.metadata, items=items)

    # ----------------------------------------------------------------- watch
    async def _watch(self) -> None:
        server_timeout = int(self.watch_timeout * random.uniform(1.0, 1.5))
        query = [
            ("watch", "1"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self.resource_version),
            ("timeoutSeconds", str(server_timeout)),
        ]
        if self.field_selector:
            query.append(("fieldSelector", self.field_selector))
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        timeout = aiohttp.ClientTimeout(
            total=server_timeout + 30, sock_connect=10, sock_read=self.read_timeout
        )
        async with self.client.stream(self.path, query, timeout) as resp:
            buffer = b""
            # iter_any instead of readline: a single huge object must not hit aiohttp's line cap.
            async for chunk in resp.content.iter_any():
                buffer += chunk
                if b"\n" not in chunk:
                    continue
                *lines, buffer = buffer.split(b"\n")
                gate = self.gate
                if gate is not None and gate.closed:
                    await gate.wait_open()
                try:
                    for line in lines:
                        if line:
                            self._dispatch(line)
                finally:
                    # Nothing else runs while a chunk is dispatched (no await), so metrics
                    # brought up to date once per chunk read exactly as if updated per event.
                    self._flush_metrics()
                self._failures = 0
            if buffer.strip():
                gate = self.gate
                if gate is not None and gate.closed:
                    await gate.wait_open()
                try:
                    self._dispatch(buffer)
                finally:
                    self._flush_metrics()

    def _flush_metrics(self) -> None:
        for kind, count in self._unflushed.items():
            self._events[kind].inc(count)
        self._unflushed.clear()
        self._cached.set(len(self._known))

    def _dispatch(self, line: bytes) -> None:
        """One watch line in: decode, track, hand to the handler. The per-event hot path; the
        metrics it counts are published by _flush_metrics."""
        codec = self.codec
        obj: Any = None
        kind = ""
        if codec.event_decoder is not None:
            try:
                event = codec.event_decoder.decode(line)
            except msgspec.ValidationError:
                pass  # a bookmark, an error or an unreadable object: the two-step path below
            else:
                kind = event.type
                if kind != "BOOKMARK" and kind != "ERROR":
                    obj = event.object
        if obj is None:
            raw_event = _event_decoder.decode(line)
            kind = raw_event.type
            raw = raw_event.object
            if kind == "BOOKMARK":
                self.resource_version = _bookmark_decoder.decode(raw).metadata.resourceVersion
                return
            if kind == "ERROR":
                status = _status_decoder.decode(raw)
                if status.code == 410:
                    raise _Gone()
                raise ApiError(status.code, status.reason, status.message, self.path)
            try:
                obj = codec.item_decoder.decode(raw)
            except msgspec.ValidationError as exc:
                log.warning("informer.undecodable", resource=self.name, error=str(exc))
                return
        self.resource_version = codec.resource_version(obj)
        key = codec.key(obj)
        if kind in self._events:
            unflushed = self._unflushed
            unflushed[kind] = unflushed.get(kind, 0) + 1
        handler = self.handler
        try:  # as _deliver, inline: a bug on one object must not stop the watch
            if kind == "DELETED":
                self._known.discard(key)
                handler.delete(key)
            else:
                self._known.add(key)
                handler.upsert(obj)
        except Exception:
            metrics.HANDLER_ERRORS.labels(self.name).inc()
            log.exception("informer.handler_failed", resource=self.name, key=key)

    def _deliver(self, fn: Callable[[Any], None], arg: Any, key: str) -> None:
        """Hand one object to the handler; a bug on one object must not stop the watch."""
        try:
            fn(arg)
        except Exception:
            metrics.HANDLER_ERRORS.labels(self.name).inc()
            log.exception("informer.handler_failed", resource=self.name, key=key)
