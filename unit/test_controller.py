"""controller.py: the pools are sized for what it runs, and it wires up and shuts down cleanly
against a local API server."""

from __future__ import annotations

import os
import signal
import types
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from kubequeue import controller
from kubequeue.controller import Controller, pool_limits, watch_count
from kubequeue.labels import ADMITTED_AT
from kubequeue.settings import Settings
from unit import builders as b
from unit.apiserver import FakeApi, client_for, serve
from unit.clock import wait_until


@pytest.mark.parametrize(
    "settings",
    [
        Settings(),
        Settings(kinds=("job", "tfjob", "rayjob")),
        Settings(kinds=("job", "workflow"), namespaces=("a", "b", "c")),
        Settings(kinds=("job", "job")),
    ],
)
def test_the_watch_pool_has_a_connection_for_every_informer(settings: Settings) -> None:
    client: Any = types.SimpleNamespace()  # never called: only the wiring is read
    informers = Controller(settings, client).informers
    assert watch_count(settings) == len(informers)
    assert pool_limits(settings).watches > len(informers)


def test_sixty_watched_kind_namespace_pairs_get_their_own_connections() -> None:
    settings = Settings(
        kinds=("job", "tfjob", "pytorchjob"), namespaces=tuple("abcdefghijklmnopqrst")
    )
    limits = pool_limits(settings)
    # 60 kind/namespace pairs, plus nodes, bound and unbound pods, classes, namespaces, queues
    assert watch_count(settings) == 66
    assert limits.watches >= 66
    assert limits.requests >= settings.max_inflight
    assert limits.lease >= 1


NODE = {
    "metadata": {"name": "n", "labels": {}},
    "spec": {},
    "status": {
        "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}
JOB_PATH = "/apis/batch/v1/namespaces/default/jobs/a"
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kq/leases/kube-queue"


def seeded() -> FakeApi:
    api = FakeApi()
    api.put("/api/v1/nodes/n", NODE)
    api.put(JOB_PATH, b.job("a", {"cpu": "1"}))
    return api


def settings_for(**kw: Any) -> Settings:
    return Settings(
        metrics_port=0, lease_namespace="kq", identity="kq-test", retry_period=0.5, **kw
    )


def lease_holder(api: FakeApi) -> str | None:
    lease = api.objects.get(LEASE_PATH)
    return None if lease is None else lease["spec"]["holderIdentity"]


def admitted(api: FakeApi) -> bool:
    return api.objects[JOB_PATH]["spec"]["suspend"] is False


async def test_the_controller_syncs_leads_admits_and_shuts_down_cleanly() -> None:
    api = seeded()
    settings = settings_for()
    async with serve(api.app) as url, client_for(url, pool_limits(settings)) as client:
        controller = Controller(settings, client)
        async with anyio.create_task_group() as tg:
            tg.start_soon(controller.run)
            await wait_until(lambda: controller.ready)
            await wait_until(lambda: api.open_watches == watch_count(settings))
            await wait_until(lambda: lease_holder(api) == "kq-test")
            await wait_until(lambda: admitted(api))
            tg.cancel_scope.cancel()
        assert lease_holder(api) == ""  # released on the way out, for a successor
        await wait_until(lambda: api.open_watches == 0)
    annotations = api.objects[JOB_PATH]["metadata"]["annotations"]
    assert ADMITTED_AT in annotations


async def test_run_connects_from_a_kubeconfig_and_stops_on_sigterm(tmp_path: Path) -> None:
    api = seeded()
    async with serve(api.app) as url:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": url}}],
                    "users": [{"name": "u", "user": {"token": "t0ken"}}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            )
        )
        settings = settings_for(kubeconfig=str(kubeconfig))
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(controller.run, settings)
                await wait_until(lambda: admitted(api))
                # The signal receiver was installed before anything else started.
                os.kill(os.getpid(), signal.SIGTERM)
        # The task group ended because run() returned on its own, after releasing the Lease.
        assert lease_holder(api) == ""
        await wait_until(lambda: api.open_watches == 0)
    # Watches, requests and the Lease each have their own pool, all with the same credentials.
    assert api.authorization == {"Bearer t0ken"}
    assert ("PUT", LEASE_PATH) in api.requests


async def test_a_dropped_admission_patch_does_not_end_the_controller() -> None:
    """The reported crash, end to end through the real HTTP client: the API server drops the
    connection of the admission PATCH; the controller keeps running and admits the job."""
    api = seeded()
    api.drop = ["PATCH"]
    settings = settings_for()
    async with serve(api.app) as url, client_for(url, pool_limits(settings)) as client:
        controller = Controller(settings, client)
        controller.loop.settle_timeout = 0.2
        async with anyio.create_task_group() as tg:
            tg.start_soon(controller.run)
            await wait_until(lambda: admitted(api))
            tg.cancel_scope.cancel()
    patches = [path for method, path in api.requests if method == "PATCH" and path == JOB_PATH]
    assert len(patches) == 2
    assert ("GET", "/apis/batch/v1/namespaces/default/jobs") in api.requests  # the read
