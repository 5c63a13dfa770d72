"""Hostile manifests against every adapter and the Argo annotation parser (issue 13, bad input):
random JSON anywhere a field is read, wrong types, huge and negative numbers, quantities like
"1e309", "NaN", "1.5.5", deep nesting. The property: an adapter either answers or raises the
project's own input error (DemandError) — never anything else, never a hang — and the tracker
turns whatever happens into a verdict on the job (queued, with a reason), never a lost job."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubequeue.admission.tracker import JobTracker
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.reservations import Reservations
from kubequeue.demand import DemandError
from kubequeue.kinds.registry import KINDS
from kubequeue.queueing.queue import JobQueue
from unit.test_kinds import meta, rayjob, spark, template, tfjob, workflow

ADAPTERS = {name: factory() for name, factory in KINDS.items()}

NASTY_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            "1e309",
            "NaN",
            "inf",
            "-1",
            "1.5.5",
            "1e-3000000",
            "1e999997",
            "9" * 400,
            "",
            " 1",
            "\u0661",
            "500m",
            "4Gi",
            "2",
            "Never",
            "Always",
        ]
    ),
    st.text(max_size=20),
)
NASTY = st.recursive(
    NASTY_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.text(max_size=8), children, max_size=3),
    ),
    max_leaves=12,
)


def _good_objects() -> dict[str, dict[str, Any]]:
    job = {
        "metadata": meta(),
        "spec": {"suspend": True, "parallelism": 2, "completions": 4, "template": template(gpu=1)},
    }
    job["status"] = {
        "succeeded": 1,
        "active": 1,
        "conditions": [{"type": "Suspended", "status": "True"}],
    }
    sp = spark(
        memoryOverheadFactor="0.2",
        nodeSelector={"zone": "a"},
        dynamicAllocation={"enabled": False, "minExecutors": 1, "initialExecutors": 2},
        batchSchedulerOptions={"priorityClassName": "p"},
    )
    sp["spec"]["driver"].update(
        {
            "coreRequest": "500m",
            "memoryOverhead": "128m",
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "nodeSelector": {"gpu": "yes"},
        }
    )
    sp["status"] = {"applicationState": {"state": "RUNNING"}}
    ray = rayjob(submissionMode="K8sJobMode")
    ray["status"] = {"jobDeploymentStatus": "Running", "rayClusterName": "j-abc"}
    wf = workflow({"kube-queue/min-resources": "cpu: 1"})
    wf["status"] = {
        "phase": "Running",
        "nodes": {
            "n1": {"templateName": "kube-queue-suspend", "type": "Suspend", "phase": "Running"}
        },
    }
    return {
        "job": job,
        "tfjob": tfjob(),
        "pytorchjob": {
            "metadata": meta(),
            "spec": {
                "runPolicy": {"suspend": True},
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": template()},
                    "Worker": {"replicas": 2, "template": template(gpu=1)},
                },
            },
        },
        "mpijob": {
            "metadata": meta(),
            "spec": {
                "runPolicy": {"suspend": True},
                "mpiReplicaSpecs": {
                    "Launcher": {"replicas": 1, "template": template()},
                    "Worker": {"replicas": 2, "template": template(gpu=1)},
                },
            },
        },
        "sparkapplication": sp,
        "rayjob": ray,
        "workflow": wf,
    }


GOOD = _good_objects()
GOOD["mpijob-v1"] = GOOD["mpijob"]


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _replace(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    target = obj
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return obj


@st.composite
def mangled(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    kind = draw(st.sampled_from(sorted(GOOD)))
    obj = copy.deepcopy(GOOD[kind])
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(obj) if (p and p[0] != "metadata") or len(p) > 1]
        path = draw(st.sampled_from(paths))
        obj = _replace(obj, path, draw(NASTY))
        if not isinstance(obj, dict):
            obj = {"metadata": meta(), "spec": obj}
    return kind, obj


@settings(max_examples=600, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(mangled())
def test_adapters_answer_or_raise_their_own_input_error(case: tuple[str, dict[str, Any]]) -> None:
    kind, obj = case
    adapter = ADAPTERS[kind]
    # The gate is total: any JSON reads as a verdict.
    adapter.skip_reason(obj)
    adapter.is_finished(obj)
    adapter.is_suspended(obj)
    with contextlib.suppress(DemandError):
        adapter.pod_sets(obj)
    adapter.admission_patch(obj)
    adapter.priority_class_name(obj)


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(mangled())
def test_the_tracker_never_loses_a_suspended_job(case: tuple[str, dict[str, Any]]) -> None:
    kind, obj = case
    adapter = ADAPTERS[kind]
    cache = CapacityCache()
    tracker = JobTracker(cache, JobQueue(), Reservations(cache))
    tracker.register(adapter)
    tracker.set_priority_classes({}, 0)
    if adapter.skip_reason(obj) is not None or adapter.is_finished(obj):
        return
    suspended = adapter.is_suspended(obj)
    tracker.observe(adapter, obj)
    if suspended:
        [job] = tracker.queue.ordered()
        # Either judged sound (demand known) or a problem with a reason the user sees.
        assert job.problem is None or job.problem_reason, job.problem
