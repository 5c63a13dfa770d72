"""The webhook under hostile input, on a real TLS listener: plain HTTP gets no answer, a review
that is not one gets an AdmissionReview back (allowed, with a warning), never a 500 or a dead
server; and the pure mutation code never raises on any JSON a client could send."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from e2e.controller import free_port
from e2e.webhook import write_serving_cert
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubequeue.webhook.mutations import auto_queue, native_suspend
from kubequeue.webhook.server import WebhookServer, review_response

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=30,
)
KINDS = st.sampled_from(
    ["Job", "TFJob", "PyTorchJob", "MPIJob", "RayJob", "SparkApplication", "Workflow", ""]
) | st.text(max_size=10)


def _object() -> st.SearchStrategy[Any]:
    """Mostly job-shaped (so the mutators get deep), with hostile values anywhere."""
    meta = st.fixed_dictionaries(
        {},
        optional={
            "name": JSON,
            "annotations": st.dictionaries(st.text(max_size=40), JSON, max_size=3) | JSON,
            "labels": JSON,
            "ownerReferences": st.lists(st.dictionaries(st.text(max_size=12), JSON)) | JSON,
        },
    )
    spec = st.fixed_dictionaries(
        {},
        optional={
            "suspend": JSON,
            "runPolicy": JSON | st.fixed_dictionaries({}, optional={"suspend": JSON}),
        },
    )
    return st.fixed_dictionaries({}, optional={"metadata": meta | JSON, "spec": spec | JSON}) | JSON


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=KINDS, obj=_object())
def test_mutators_never_raise(kind: str, obj: Any) -> None:
    for mutate in (native_suspend, auto_queue):
        if isinstance(obj, dict):
            ops = mutate(kind, obj)
            assert isinstance(ops, list)
            json.dumps(ops)  # the patch is serialisable


@settings(max_examples=400, deadline=None)
@given(
    review=st.fixed_dictionaries(
        {},
        optional={
            "request": st.fixed_dictionaries(
                {},
                optional={
                    "uid": JSON,
                    "operation": st.just("CREATE") | JSON,
                    "kind": JSON,
                    "object": _object(),
                    "namespace": JSON,
                },
            )
        },
    )
    | JSON
)
def test_review_response_never_raises(review: Any) -> None:
    if isinstance(review, dict):
        out = review_response(review, auto_queue)
        assert out["response"]["allowed"] is True


@asynccontextmanager
async def _webhook(
    tmp_path: Path, **server_kw: Any
) -> AsyncIterator[tuple[str, ssl.SSLContext, int]]:
    ca = await asyncio.to_thread(write_serving_cert, tmp_path)
    trust = ssl.create_default_context(cadata=ca.decode())
    port = free_port()
    server = WebhookServer("127.0.0.1", port, tmp_path, **server_kw)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.run)
        for _ in range(200):
            try:
                await anyio.connect_tcp("127.0.0.1", port)
                break
            except OSError:
                await anyio.sleep(0.02)
        yield f"https://127.0.0.1:{port}/mutate/auto-queue", trust, port
        tg.cancel_scope.cancel()


async def test_plain_http_gets_no_answer_and_the_server_keeps_serving(tmp_path: Path) -> None:
    async with _webhook(tmp_path) as (url, trust, port), aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.post(f"http://127.0.0.1:{port}/mutate/auto-queue", json={}) as r:
                pytest.fail(f"plain HTTP answered {r.status}")
        async with session.post(url, json={"request": {"uid": "u1"}}, ssl=trust) as resp:
            assert resp.status == 200
            assert (await resp.json())["response"] == {"uid": "u1", "allowed": True}


BAD_BODIES = [
    b"",
    b"not json",
    b"[1, 2, 3]",
    b'"a string"',
    b'{"request": "nope"}',
    b'{"request": {"uid": "u", "operation": "CREATE", "kind": "Job", "object": [1]}}',
    b'{"request": {"uid": "u", "operation": "CREATE", "kind": 7, "object": {"metadata": 5}}}',
    b"[" * 100_000 + b"]" * 100_000,  # nesting deeper than the JSON parser's recursion
    b'{"request": {"uid": "u", "operation": "CREATE", "kind": "Job", "object": '
    b'{"metadata": {"annotations": {"kube-queue.io/ignore": ' + b"9" * 5000 + b"}}}}}",
]


@pytest.mark.parametrize("body", BAD_BODIES, ids=lambda b: repr(b[:30]))
async def test_a_malformed_review_gets_a_review_back(tmp_path: Path, body: bytes) -> None:
    async with _webhook(tmp_path) as (url, trust, _), aiohttp.ClientSession() as session:
        headers = {"Content-Type": "application/json"}
        async with session.post(url, data=body, headers=headers, ssl=trust) as resp:
            assert resp.status == 200, await resp.text()
            answer = await resp.json()
        assert answer["kind"] == "AdmissionReview"
        assert answer["response"]["allowed"] is True
        # Still serving.
        async with session.post(url, json={"request": {"uid": "after"}}, ssl=trust) as resp:
            assert (await resp.json())["response"]["uid"] == "after"


async def test_an_oversized_review_is_refused_not_buffered(tmp_path: Path) -> None:
    async with _webhook(tmp_path) as (url, trust, _), aiohttp.ClientSession() as session:
        huge = b'{"x": "' + b"a" * (9 * 2**20) + b'"}'
        async with session.post(url, data=huge, ssl=trust) as resp:
            assert resp.status == 413


async def test_the_pod_webhook_pins_through_the_leaders_plan_but_never_on_a_dry_run(
    tmp_path: Path,
) -> None:
    """A dry run must not take a slot of the plan: it gets the gate, as from a standby. And
    the pod's namespace, absent from a created object, comes from the request."""
    asked: list[str] = []

    def pin(obj: dict[str, Any]) -> str | None:
        asked.append(obj["metadata"]["namespace"])
        return "node-1"

    pod = {"metadata": {"generateName": "j-",
                        "ownerReferences": [{"kind": "Job", "name": "j", "controller": True}]},
           "spec": {"containers": []}}
    async with _webhook(tmp_path, pin_pod=pin) as (url, trust, _), aiohttp.ClientSession() as s:
        url = url.replace("auto-queue", "pod-gate")
        for dry in (False, True):
            review = {"request": {"uid": "u", "operation": "CREATE", "kind": {"kind": "Pod"},
                                  "namespace": "team-a", "dryRun": dry, "object": pod}}
            async with s.post(url, json=review, ssl=trust) as resp:
                patch = json.loads(base64.b64decode((await resp.json())["response"]["patch"]))
            paths = {op["path"] for op in patch}
            if dry:
                assert "/spec/schedulingGates" in paths and "/spec/nodeSelector" not in paths
            else:
                assert "/spec/nodeSelector" in paths and "/spec/schedulingGates" not in paths
    assert asked == ["team-a"], "asked once: the dry run did not reach the plan"
