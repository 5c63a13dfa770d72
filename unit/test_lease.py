"""kube/lease.py in virtual time: failed requests never end the process, a leader whose renewals
fail stops before its renew deadline, and two candidates are never leaders at once."""

from __future__ import annotations

import anyio
import anyio.abc
import pytest

from kubequeue.kube.lease import LeaderElector
from kubequeue.observability import metrics
from unit.clock import FakeClock
from unit.fakes import FAILURES, FakeClient, Store

PATH = "/apis/coordination.k8s.io/v1/namespaces/kq/leases/kube-queue"
DURATION, DEADLINE, RETRY = 15.0, 10.0, 2.0


class Leads:
    """When each candidate's ``lead()`` ran, in virtual time."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.current: dict[str, float] = {}
        self.spans: list[tuple[str, float, float]] = []

    def lead_for(self, name: str) -> object:
        async def lead() -> None:
            self.current[name] = self.clock()
            try:
                await anyio.sleep_forever()
            finally:
                self.spans.append((name, self.current.pop(name), self.clock()))

        return lead

    def ended(self, name: str) -> list[float]:
        return [end for who, _, end in self.spans if who == name]


def elector(client: FakeClient, clock: FakeClock, identity: str = "a") -> LeaderElector:
    return LeaderElector(
        client,  # type: ignore[arg-type]
        "kq",
        "kube-queue",
        identity,
        lease_duration=DURATION,
        renew_deadline=DEADLINE,
        retry_period=RETRY,
        clock=clock,
        sleep=clock.sleep,
    )


def transport_errors() -> float:
    return metrics.TRANSPORT_ERRORS.labels("lease")._value.get()


async def start(
    tg: anyio.abc.TaskGroup, e: LeaderElector, leads: Leads, name: str | None = None
) -> None:
    tg.start_soon(e.run, leads.lead_for(name or e.identity))
    await leads.clock.advance(0)


@pytest.mark.parametrize("mode", ["refuse", "drop", "reject"])
@pytest.mark.parametrize("call", ["GET", "POST", "PUT"])
async def test_a_failed_call_while_campaigning_is_retried(mode: str, call: str) -> None:
    clock = FakeClock()
    client = FakeClient()
    if call != "POST":  # a lease exists, free: taking it is a get and a replace
        client.store.put(PATH, {"metadata": {"name": "kube-queue"}, "spec": {}})
    client.fail[call] = [mode, mode]
    e, leads = elector(client, clock), Leads(clock)
    before = transport_errors()
    async with anyio.create_task_group() as tg:
        await start(tg, e, leads)
        await clock.advance(3 * RETRY)
        assert e.leading, f"still campaigning after {client.calls}"
        assert "a" in leads.current
        tg.cancel_scope.cancel()
    if mode == "reject":
        assert transport_errors() == before
    else:  # a create that was applied before its answer was lost is found by the next get
        assert transport_errors() > before


@pytest.mark.parametrize("mode", FAILURES)
async def test_failed_renewals_stop_the_leader_before_the_deadline(mode: str) -> None:
    clock = FakeClock()
    client = FakeClient()
    e, leads = elector(client, clock), Leads(clock)
    async with anyio.create_task_group() as tg:
        await start(tg, e, leads)
        assert e.leading
        await clock.advance(5 * RETRY)  # some renewals succeed
        last_renewal = clock()
        client.broken = mode  # from now on every call fails
        await clock.run_for(DEADLINE + 5 * RETRY, step=0.25)
        # The last successful renewal was started at or before last_renewal (within one retry).
        [ended] = leads.ended("a")
        assert ended <= last_renewal + DEADLINE
        assert ended > last_renewal + DEADLINE - RETRY - 0.25
        assert not e.leading
        tg.cancel_scope.cancel()  # run() itself never ended: it went back to campaigning


@pytest.mark.parametrize(
    "failures", [["drop", "refuse", "reject"], ["hang"]], ids=["three-quick", "one-hung"]
)
async def test_a_few_failed_renewals_are_not_a_loss(failures: list[str]) -> None:
    """A hung renewal is given up halfway to the deadline, so the next one still fits in."""
    clock = FakeClock()
    client = FakeClient()
    e, leads = elector(client, clock), Leads(clock)
    async with anyio.create_task_group() as tg:
        await start(tg, e, leads)
        client.fail["PUT"] = list(failures)
        await clock.run_for(3 * DURATION, step=0.5)
        assert client.fail["PUT"] == []
        assert e.leading
        assert leads.spans == []
        tg.cancel_scope.cancel()


async def test_the_leader_does_not_sleep_past_its_deadline() -> None:
    """With a retry period that does not divide the deadline (3 s into 10 s) the next attempt
    would be due at 12 s; the leader must stop at 10 s, not oversleep (as it once did)."""
    clock = FakeClock()
    client = FakeClient()
    e, leads = elector(client, clock, "a"), Leads(clock)
    e.retry_period = 3.0
    async with anyio.create_task_group() as tg:
        await start(tg, e, leads)
        started = clock()
        client.broken = "refuse"
        await clock.run_for(DEADLINE + 4, step=0.25)
        [ended] = leads.ended("a")
        assert ended == started + DEADLINE
        tg.cancel_scope.cancel()


async def test_a_renewal_cut_off_at_the_deadline_by_a_hung_request() -> None:
    """Renewals that fail fast, then one that hangs: the hung one is cut off (on the injected
    clock) in time for the leader to stop at the deadline, not when the request times out."""
    clock = FakeClock()
    client = FakeClient()
    e, leads = elector(client, clock, "a"), Leads(clock)
    e.retry_period = 3.0
    async with anyio.create_task_group() as tg:
        await start(tg, e, leads)
        started = clock()
        client.fail["GET"] = ["refuse", "refuse", "hang"]
        await clock.run_for(DEADLINE + 4, step=0.25)
        [ended] = leads.ended("a")
        assert ended <= started + DEADLINE
        # The release on the way out hangs too (the last "hang"): it gives up on its own.
        await clock.run_for(e.release_timeout, step=0.25)
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("mode", FAILURES)
async def test_never_two_leaders_when_the_leader_is_cut_off(mode: str) -> None:
    clock = FakeClock()
    store = Store()
    a_client, b_client = FakeClient(store), FakeClient(store)
    a, b = elector(a_client, clock, "a"), elector(b_client, clock, "b")
    leads = Leads(clock)
    async with anyio.create_task_group() as tg:
        await start(tg, a, leads)
        await start(tg, b, leads)
        await clock.run_for(4 * RETRY, step=0.5)
        assert list(leads.current) == ["a"]
        a_client.broken = mode  # a cannot reach the server any more; b can
        for _ in range(int(4 * DURATION / 0.25)):
            await clock.advance(0.25)
            assert len(leads.current) <= 1, f"two leaders at {clock()}: {leads.current}"
        assert list(leads.current) == ["b"]
        [(_, _, a_ended)] = leads.spans
        assert a_ended < leads.current["b"]
        a_client.broken = None  # a heals: b keeps the lease, a keeps campaigning
        await clock.run_for(2 * DURATION, step=0.5)
        assert list(leads.current) == ["b"]
        tg.cancel_scope.cancel()


async def test_shutdown_releases_the_lease_for_a_successor() -> None:
    clock = FakeClock()
    client = FakeClient()
    e, leads = elector(client, clock), Leads(clock)
    async with anyio.create_task_group() as tg:
        await start(tg, e, leads)
        tg.cancel_scope.cancel()
    spec = client.store.objects[PATH]["spec"]
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1


@pytest.mark.parametrize("mode", FAILURES)
async def test_a_failed_release_is_logged_not_raised(mode: str) -> None:
    clock = FakeClock()
    client = FakeClient()
    e, leads = elector(client, clock), Leads(clock)
    async with anyio.create_task_group() as outer, anyio.create_task_group() as tg:
        await start(tg, e, leads)
        client.broken = mode
        outer.start_soon(clock.run_for, 2 * e.release_timeout)
        tg.cancel_scope.cancel()
    assert client.store.objects[PATH]["spec"]["holderIdentity"] in ("a", "")
    assert not e.leading
