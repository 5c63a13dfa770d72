"""kube/client.py against local servers: every failure is one of two KubeErrors, and a write
whose answer was lost says that it may have been applied."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import base64
import json
import socket
import ssl
from pathlib import Path
from types import MappingProxyType
from typing import Any

import aiohttp
import anyio
import anyio.abc
import pytest
from aiohttp import web
from e2e.webhook import write_serving_cert

from kubequeue.kinds.job import JobKind
from kubequeue.kube import writer
from kubequeue.kube.client import (
    ApiError,
    KubeClient,
    KubeError,
    PoolLimits,
    TransportError,
    environment_proxy,
    open_pool,
)
from kubequeue.kube.credentials import Credentials
from kubequeue.kube.informer import Informer, dict_codec
from kubequeue.labels import ADMITTED_AT, QUEUE_LABEL
from kubequeue.precondition import guard_of, merge_ops
from unit.apiserver import FakeApi, access, client_for, raw_server, read_request, serve
from unit.clock import wait_until
from unit.jsonpatch import PatchFailed, apply_patch

PATH = "/apis/batch/v1/namespaces/default/jobs/j"
PATCH = {"metadata": {"resourceVersion": "1"}, "spec": {"suspend": False}}


async def _drop_after_reading(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)  # the server got the whole request, then the connection dies


async def _cut_body_short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
    writer.write(b"Content-Length: 100\r\n\r\n{")
    await writer.drain()


async def _never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    await asyncio.sleep(30)


async def _break_the_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
    writer.write(b"Transfer-Encoding: chunked\r\n\r\n")
    line = b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"5"}}}\n'
    writer.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
    await writer.drain()  # ... and the connection ends without the last chunk


@pytest.mark.parametrize(
    ("handler", "cause"),
    [
        (_drop_after_reading, aiohttp.ServerDisconnectedError),
        (_cut_body_short, aiohttp.ClientPayloadError),
    ],
)
async def test_a_lost_answer_is_a_transport_error_that_may_have_applied(
    handler: Any, cause: type[BaseException]
) -> None:
    async with raw_server(handler) as url, client_for(url) as client:
        with pytest.raises(TransportError) as caught:
            await client.merge_patch(PATH, PATCH)
    assert isinstance(caught.value, KubeError)
    assert isinstance(caught.value.cause, cause)
    assert caught.value.maybe_applied
    assert caught.value.path == PATH


async def test_a_timeout_is_a_transport_error_that_may_have_applied() -> None:
    async with raw_server(_never_answer) as url, client_for(url) as client:
        with pytest.raises(TransportError) as caught:
            await client.request(
                "PATCH", PATH, body=PATCH, timeout=aiohttp.ClientTimeout(total=0.2)
            )
    assert isinstance(caught.value.cause, TimeoutError)
    assert caught.value.maybe_applied


async def test_a_refused_connection_was_never_sent() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with client_for(f"http://127.0.0.1:{port}") as client:
        for call in (client.get(PATH), client.lease.get(PATH)):
            with pytest.raises(TransportError) as caught:
                await call
            assert isinstance(caught.value.cause, aiohttp.ClientConnectorError)
            assert not caught.value.maybe_applied


async def test_a_broken_watch_stream_is_a_transport_error_while_it_is_read() -> None:
    async def read_to_the_end(client: KubeClient) -> None:
        timeout = aiohttp.ClientTimeout(total=5)
        async with client.stream("/api/v1/pods", [("watch", "1")], timeout) as resp:
            async for _ in resp.content.iter_any():
                pass

    async with raw_server(_break_the_stream) as url, client_for(url) as client:
        with pytest.raises(TransportError) as caught:
            await read_to_the_end(client)
    assert isinstance(caught.value.cause, aiohttp.ClientPayloadError)


async def test_an_answer_is_an_api_error_and_also_a_kube_error() -> None:
    api = FakeApi()
    api.put(PATH, {"metadata": {"name": "j"}})
    async with serve(api.app) as url, client_for(url) as client:
        with pytest.raises(ApiError) as caught:
            await client.merge_patch(PATH, PATCH)  # resourceVersion "1" is stale
        assert caught.value.conflict
        assert isinstance(caught.value, KubeError)
        with pytest.raises(ApiError) as missing:
            await client.get(PATH + "x")
        assert missing.value.not_found


async def test_the_informer_retries_a_transport_error_instead_of_ending() -> None:
    """Before the taxonomy the informer caught aiohttp's errors; now it must catch ours."""
    calls = 0

    async def flaky(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            assert request.transport is not None
            request.transport.close()  # the first list is cut off
        return web.json_response({"metadata": {"resourceVersion": "1"}, "items": []})

    app = web.Application()
    app.router.add_get("/api/v1/nodes", flaky)
    synced: list[bool] = []

    class Handler:
        def upsert(self, obj: Any) -> None: ...

        def delete(self, key: str) -> None: ...

        def synced(self) -> None:
            synced.append(True)

    async with serve(app) as url, client_for(url) as client:
        informer = Informer(client, "nodes", "/api/v1/nodes", dict_codec(), Handler())
        informer.max_backoff = 0.01
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                await tg.start(informer.run)
                tg.cancel_scope.cancel()
    assert synced == [True]
    assert calls >= 2


LEASE = "/apis/coordination.k8s.io/v1/namespaces/kq/leases/kube-queue"
WATCHES = 70  # ~ 3 + kinds x namespaces on a big installation


async def _hold_watches(client: KubeClient, count: int, tg: anyio.abc.TaskGroup) -> None:
    async def watch(i: int) -> None:
        timeout = aiohttp.ClientTimeout(total=60, sock_read=60)
        async with client.stream(f"/api/v1/namespaces/ns{i}/pods", [("watch", "1")], timeout) as r:
            await r.content.read()

    for i in range(count):
        tg.start_soon(watch, i)


async def test_lease_renewals_and_writes_never_wait_behind_watches() -> None:
    api = FakeApi()
    api.put(LEASE, {"metadata": {"name": "kube-queue"}, "spec": {}})
    job = api.put(PATH, {"metadata": {"name": "j"}, "spec": {"suspend": True}})
    limits = PoolLimits(watches=WATCHES + 8, requests=32, lease=2)
    async with (
        serve(api.app) as url,
        client_for(url, limits) as client,
        anyio.create_task_group() as tg,
    ):
        await _hold_watches(client, WATCHES, tg)
        await wait_until(lambda: api.open_watches == WATCHES)
        with anyio.fail_after(5):  # milliseconds when idle; generous for a loaded machine
            lease = await client.lease.get(LEASE)
            await client.lease.replace(LEASE, lease)
            rv = job["metadata"]["resourceVersion"]
            patch = {"metadata": {"resourceVersion": rv}, "spec": {"suspend": False}}
            await client.merge_patch(PATH, patch)
        tg.cancel_scope.cancel()
    assert api.objects[PATH]["spec"]["suspend"] is False


async def test_one_shared_pool_starves_the_lease_behind_watches() -> None:
    """The layout before the pools were split, as a control: the test above is not vacuous."""
    api = FakeApi()
    api.put(LEASE, {"metadata": {"name": "kube-queue"}, "spec": {}})
    async with serve(api.app) as url:
        shared_pool = open_pool(Credentials(access(url)), 64)
        async with shared_pool as shared, anyio.create_task_group() as tg:
            client = KubeClient(shared)
            await _hold_watches(client, WATCHES, tg)
            await wait_until(lambda: api.open_watches == 64)
            with anyio.move_on_after(0.5) as waited:
                await client.lease.get(LEASE)
            assert waited.cancelled_caught, "the renewal should have queued behind watches"
            tg.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("status", "reason", "maybe_applied"),
    [
        (504, "Timeout", True),  # "request did not complete within the allowed duration"
        (500, "ServerTimeout", True),
        (504, "", True),  # a gateway in front of the API server gave up waiting
        (500, "InternalError", False),
        (409, "Conflict", False),
        (422, "Invalid", False),
    ],
)
def test_only_a_timeout_answer_leaves_a_write_in_doubt(
    status: int, reason: str, maybe_applied: bool
) -> None:
    assert ApiError(status, reason, "", PATH).maybe_applied is maybe_applied


async def test_the_writer_patches_with_a_precondition_and_reads_with_list_only() -> None:
    api = FakeApi()
    job = api.put(PATH, {"metadata": {"name": "j", "uid": "u1", "generation": 1,
                                      "annotations": {}}, "spec": {"suspend": True}})
    info = JobKind().info
    guard = guard_of(job)
    kind_ops = merge_ops(job, {"spec": {"suspend": False}})
    async with serve(api.app) as url, client_for(url) as client:
        # A status write moves the resourceVersion: not something the decision read.
        api.put(PATH, {**job, "status": {"conditions": [{"type": "Suspended"}]}})
        admitted = await writer.admit(client, info, "default", "j", guard, kind_ops, {})
        assert admitted["spec"]["suspend"] is False
        assert ADMITTED_AT in admitted["metadata"]["annotations"]
        with pytest.raises(ApiError) as again:  # the same write twice: the precondition holds
            await writer.admit(client, info, "default", "j", guard, kind_ops, {})
        assert again.value.conflict
        read = await writer.read(client, info, "default", "j")
        assert read is not None
        assert read["metadata"]["resourceVersion"] == admitted["metadata"]["resourceVersion"]
        assert await writer.read(client, info, "default", "missing") is None
        # A change the decision did read (the queue label) makes it refused too.
        other = api.put(f"{PATH}2", {"metadata": {"name": "j2", "uid": "u2", "generation": 1},
                                     "spec": {"suspend": True}})
        stale = guard_of(other)
        api.put(f"{PATH}2", {**other, "metadata": {**other["metadata"],
                                                   "labels": {QUEUE_LABEL: "team-b"}}})
        with pytest.raises(ApiError) as moved:
            await writer.admit(client, info, "default", "j2", stale, kind_ops, {})
        assert moved.value.conflict and moved.value.status == 422
    # Only list (a GET on the collection), never a GET on the object: RBAC grants no "get".
    assert ("GET", PATH) not in api.requests


def test_a_write_body_never_aliases_the_kind_ops_it_is_built_from() -> None:
    """Kinds' ops are shared between jobs: building one job's body must leave the shared ops as
    they were (a value of one job leaking into the next one's)."""
    obj = {"metadata": {"uid": "u", "generation": 3,
                        "annotations": {"scheduling.x-k8s.io/suspend": "true",
                                        "kube-queue.io/preempted-by": "Job/a/b"}},
           "spec": {"runPolicy": {"suspend": True}}}
    kind_ops = tuple(MappingProxyType(op) for op in merge_ops(obj, {
        "metadata": {"annotations": {"scheduling.x-k8s.io/suspend": "false"}},
        "spec": {"runPolicy": {"suspend": False}}}))
    before = json.dumps([dict(op) for op in kind_ops], sort_keys=True)
    guard = guard_of(obj)
    ops = writer.admission_ops(
        guard, kind_ops, writer.admission_annotations({}, "2026-12-04T00:00:00Z"))
    assert json.dumps([dict(op) for op in kind_ops], sort_keys=True) == before
    admitted = apply_patch(obj, ops)
    assert admitted["metadata"]["annotations"] == {
        "scheduling.x-k8s.io/suspend": "false", ADMITTED_AT: "2026-12-04T00:00:00Z"
    }  # preempted-by removed: a job admitted again is not preempted
    assert admitted["spec"]["runPolicy"]["suspend"] is False
    with pytest.raises(PatchFailed):  # the same write again: it tests admitted-at is absent
        apply_patch(admitted, ops)
    for op in ops:
        op["value"] = "edited"  # a later edit of the body stays in the body
    assert json.dumps([dict(op) for op in kind_ops], sort_keys=True) == before


async def test_the_rate_limit_lets_a_burst_through_then_paces_requests() -> None:
    from kubequeue.kube.client import RateLimit

    now = [0.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    rate = RateLimit(qps=50, burst=5, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        await rate.acquire()
    assert slept == [], "a burst of 5 goes through at once"
    for _ in range(10):
        await rate.acquire()
    assert len(slept) == 10 and abs(now[0] - 0.2) < 1e-9, "then 50 a second"
    now[0] += 10.0  # idle: the bucket refills, but only to the burst
    slept.clear()
    for _ in range(6):
        await rate.acquire()
    assert len(slept) == 1


# ------------------------------------------------------------------------- proxy environment
@pytest.mark.parametrize(
    ("server", "environ", "expected"),
    [
        ("https://10.0.0.1:6443", {}, None),
        ("https://10.0.0.1:6443", {"HTTPS_PROXY": "http://proxy:3128"}, "http://proxy:3128"),
        ("https://10.0.0.1:6443", {"https_proxy": "http://proxy:3128"}, "http://proxy:3128"),
        ("https://10.0.0.1:6443", {"HTTP_PROXY": "http://proxy:3128"}, None),  # scheme's own
        ("http://10.0.0.1:8080", {"HTTP_PROXY": "http://proxy:3128"}, "http://proxy:3128"),
        ("https://10.0.0.1:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "10.0.0.1"}, None),
        ("https://api.corp:6443", {"HTTPS_PROXY": "http://p:1", "no_proxy": ".corp"}, None),
        ("https://api.corp:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
        ("https://api.corp:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "x.io"}, "http://p:1"),
        ("https://api.corp:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "corp"}, None),
        ("https://notcorp:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "corp"}, "http://p:1"),
        ("https://10.1.2.3:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "10.0.0.0/8"}, None),
        ("https://11.1.2.3", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "10.0.0.0/8"}, "http://p:1"),
        ("https://[fd00::1]:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "fd00::/8"}, None),
        ("https://api.corp:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "api.corp:6443"}, None),
        ("https://api.corp:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "api.corp:443"}, "http://p:1"),
        ("https://api.corp:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": " x , *.corp"}, None),
    ],
)
def test_the_proxy_environment_is_read_as_kubectl_reads_it(
    server: str, environ: dict[str, str], expected: str | None
) -> None:
    found = environment_proxy(server, environ)
    assert (found[0] if found else None) == expected


def test_proxy_credentials_leave_the_url_for_proxy_auth() -> None:
    found = environment_proxy("https://k:6443", {"HTTPS_PROXY": "http://us%40er:p%3Aw@px:3128"})
    assert found is not None
    url, headers = found
    assert url == "http://px:3128"
    assert headers == {"Proxy-Authorization": "Basic " + base64.b64encode(b"us@er:p:w").decode()}


async def test_requests_go_through_the_environment_proxy_read_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A forwarding proxy in front of the API server sees every request with the credentials
    from HTTP_PROXY; changing the environment afterwards changes nothing (read once, as
    client-go), and NO_PROXY would have sent it direct."""
    api = FakeApi()
    api.put(PATH, {"metadata": {"name": "j", "resourceVersion": "1"}})
    seen: list[tuple[str, str | None]] = []

    async def forward(request: web.Request) -> web.StreamResponse:
        seen.append((str(request.url), request.headers.get("Proxy-Authorization")))
        async with aiohttp.ClientSession() as s, s.get(str(request.url)) as upstream:
            return web.Response(
                body=await upstream.read(), status=upstream.status, content_type="application/json"
            )

    proxy_app = web.Application()
    proxy_app.router.add_route("*", "/{tail:.*}", forward)
    async with serve(api.app) as url, serve(proxy_app) as proxy_url:
        monkeypatch.setenv("HTTP_PROXY", proxy_url.replace("http://", "http://u:pw@"))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with client_for(url) as client:
            monkeypatch.setenv("NO_PROXY", "*")  # too late: the pool has read the environment
            obj = await client.get(PATH)
    assert obj["metadata"]["name"] == "j"
    assert seen == [(url + PATH, "Basic " + base64.b64encode(b"u:pw").decode())]


async def test_a_netrc_entry_for_the_server_does_not_break_bearer_tokens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """aiohttp's trust_env would add Basic auth from ~/.netrc next to our Authorization header
    and refuse every request; the API server must see exactly the kubeconfig's token."""
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    monkeypatch.setenv("NETRC", str(netrc))
    api = FakeApi()
    api.put(PATH, {"metadata": {"name": "j", "resourceVersion": "1"}})
    async with serve(api.app) as url, client_for(url, token="t0ken") as client:
        assert (await client.get(PATH))["metadata"]["name"] == "j"
    assert api.authorization == {"Bearer t0ken"}


async def test_tls_answers_arrive_whole_through_a_small_read_buffer(tmp_path: Path) -> None:
    """Socket reads of the pools' small TLS read buffer still deliver a body many times its
    size, and the buffer asyncio keeps per connection is that small."""
    ca = await asyncio.to_thread(write_serving_cert, tmp_path)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    items = [{"metadata": {"name": f"job-{i}", "labels": {"x": "y" * 200}}} for i in range(8000)]

    async def big(_: web.Request) -> web.Response:
        return web.json_response({"kind": "JobList", "items": items})

    app = web.Application()
    app.router.add_get("/big", big)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=served)
    await site.start()
    try:
        url = f"https://127.0.0.1:{runner.addresses[0][1]}"
        async with client_for(url, ca=ca) as client:
            got = await client.get("/big")
        assert asyncio.sslproto.SSLProtocol.max_size == 2**16
        assert got["items"] == items  # ~2 MiB: over a hundred records, every byte arrived
    finally:
        await runner.cleanup()
