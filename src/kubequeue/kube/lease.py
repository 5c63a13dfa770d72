"""Leader election on a coordination.k8s.io/v1 Lease, with deadlines that are really enforced.

Only the leader admits. The rules, as client-go's leaderelection applies them:
- a lease is free when nobody holds it, or when its record has not changed for
  ``lease_duration`` as measured on *our* monotonic clock since we first saw that record (clock
  skew between machines cannot make a live leader look expired);
- every write carries the resourceVersion we read, so two candidates can never both win;
- the leader renews every ``retry_period``; if no renewal has succeeded for ``renew_deadline``
  (shorter than ``lease_duration``) it stops leading *before* anyone else may take over, and
  the work it was doing is cancelled. The deadline counts from the *start* of the last renewal
  that succeeded (the earliest moment anyone else can have seen it), the loop never sleeps past
  it, and a renewal that hangs is given up after half of it, so a second attempt still fits;
- any failed request (the server said no, or the connection broke and the outcome is unknown)
  is a failed attempt: while campaigning, try again; while leading, it counts against the
  renew deadline. Neither ends the process;
- on orderly shutdown the lease is released so a successor starts at once.

Time comes from an injectable monotonic clock and sleep (anyio's by default) so tests can run
the deadlines in virtual time.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import structlog

from kubequeue.kube.client import ApiError, KubeClient, KubeError, TransportError
from kubequeue.observability import metrics

__all__ = ["LeaderElector"]

log = structlog.get_logger(__name__)


def _micro_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        release_timeout: float = 5.0,
        clock: Callable[[], float] = anyio.current_time,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("need retry_period < renew_deadline < lease_duration")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.release_timeout = release_timeout
        self._clock = clock
        self._sleep = sleep
        self.leading = False
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at = 0.0  # on our clock: when the last successful write was started

    @property
    def _path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Campaign forever; while leading, run ``lead()`` (cancelled when leadership is lost)."""
        while True:
            await self._acquire()
            log.info(
                "leader.acquired", lease=f"{self.namespace}/{self.name}", identity=self.identity
            )
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._renew_until_lost, tg.cancel_scope)
                    await lead()
                    tg.cancel_scope.cancel()
            finally:
                # Everything lead() started has ended by now: this is the moment this replica
                # stopped acting as leader, so it is logged before the (bounded, possibly
                # hanging) release, and fault tests can compare it with a successor's start.
                was_leading = self.leading
                self.leading = False
                metrics.IS_LEADER.set(0)
                log.warning("leader.lost", lease=f"{self.namespace}/{self.name}")
                if was_leading:
                    with anyio.CancelScope(shield=True):
                        await self._release()

    async def _acquire(self) -> None:
        while True:
            started = self._clock()
            try:
                if await self._try_acquire_or_renew():
                    self._renewed_at = started
                    self.leading = True
                    metrics.IS_LEADER.set(1)
                    return
            except KubeError as exc:
                _failed("leader.acquire_failed", exc)
            await self._sleep(self.retry_period)

    async def _renew_until_lost(self, scope: anyio.CancelScope) -> None:
        while True:
            deadline = self._renewed_at + self.renew_deadline
            await self._sleep(min(self.retry_period, max(0.0, deadline - self._clock())))
            started = self._clock()
            ok = False
            if started < deadline:
                # A hung request (a half-open connection) is given up halfway to the deadline,
                # so the next attempt, on a fresh connection, still fits in before it.
                limit = min(deadline - started, self.renew_deadline / 2)
                try:
                    ok = await self._bounded(limit, self._try_acquire_or_renew)
                except KubeError as exc:
                    _failed("leader.renew_failed", exc)
            if ok:
                self._renewed_at = started
            elif self._clock() >= deadline:
                log.error("leader.renew_deadline_passed", deadline=self.renew_deadline)
                scope.cancel()
                return

    async def _bounded(self, seconds: float, attempt: Callable[[], Awaitable[bool]]) -> bool:
        """``attempt()``, cut off after ``seconds`` on our clock (then False); the same as
        ``anyio.move_on_after`` but on the injected clock."""
        result = False
        error: KubeError | None = None
        async with anyio.create_task_group() as tg:

            async def expire() -> None:
                await self._sleep(seconds)
                tg.cancel_scope.cancel()

            tg.start_soon(expire)
            try:
                result = await attempt()
            except KubeError as exc:
                error = exc  # raised below: inside the group it would become an ExceptionGroup
            tg.cancel_scope.cancel()
        if error is not None:
            raise error
        return result

    async def _try_acquire_or_renew(self) -> bool:
        now = _micro_now()
        try:
            lease = await self.client.get(self._path)
        except ApiError as exc:
            if not exc.not_found:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, now, transitions=0),
            }
            try:
                await self.client.create(
                    f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases", body
                )
            except ApiError as create_exc:
                if create_exc.conflict:
                    return False
                raise
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        clock = self._clock()
        if record != self._observed:
            self._observed = record
            self._observed_at = clock
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and clock - self._observed_at < duration:
            return False  # someone else holds a live lease
        transitions = int(spec.get("leaseTransitions") or 0)
        acquire = spec.get("acquireTime") or now
        if holder != self.identity:
            transitions += 1
            acquire = now
        lease["spec"] = self._spec(acquire, now, transitions)
        try:
            await self.client.replace(self._path, lease)  # carries resourceVersion: a CAS
        except ApiError as exc:
            if exc.conflict:
                return False
            raise
        self._observed = (self.identity, now, int(self.lease_duration))
        self._observed_at = clock
        return True

    def _spec(self, acquire: str, renew: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": acquire,
            "renewTime": renew,
            "leaseTransitions": transitions,
        }

    async def _release(self) -> None:
        try:
            await self._bounded(self.release_timeout, self._give_up_lease)
        except KubeError as exc:
            _failed("leader.release_failed", exc)

    async def _give_up_lease(self) -> bool:
        lease = await self.client.get(self._path)
        if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return False
        lease["spec"]["holderIdentity"] = ""
        lease["spec"]["leaseDurationSeconds"] = 1
        await self.client.replace(self._path, lease)
        log.info("leader.released", lease=f"{self.namespace}/{self.name}")
        return True


def _failed(event: str, exc: KubeError) -> None:
    if isinstance(exc, TransportError):
        metrics.TRANSPORT_ERRORS.labels("lease").inc()
    log.warning(event, error=str(exc))
