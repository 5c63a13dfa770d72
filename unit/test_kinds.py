"""Per-kind adapters: what is queued, the demand from realistic manifests, admission patches,
and which pods belong to which job."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from kubequeue.demand import DemandError
from kubequeue.kinds.job import JobKind
from kubequeue.kinds.mpijob import MPIJobKind, MPIJobV1Kind
from kubequeue.kinds.protocol import Preemptible
from kubequeue.kinds.pytorchjob import PyTorchJobKind
from kubequeue.kinds.rayjob import RayJobKind
from kubequeue.kinds.registry import KINDS, UnknownKind, adapters_for
from kubequeue.kinds.spark import SparkApplicationKind, parse_jvm_memory
from kubequeue.kinds.tfjob import TFJobKind
from kubequeue.kinds.workflow import WorkflowKind
from kubequeue.objects import Pod

GPU = "nvidia.com/gpu"
MI = 2**20 * 1000
GI = 2**30 * 1000


def template(cpu: str = "1", memory: str = "1Gi", gpu: int = 0, **spec: Any) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    if gpu:
        requests[GPU] = str(gpu)
    return {
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}],
            **spec,
        }
    }


def meta(name: str = "j", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "ns",
        "uid": "u",
        "resourceVersion": "1",
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "annotations": annotations or {},
    }


def demand(adapter: Any, obj: dict[str, Any]) -> dict[str, tuple[int, dict[str, int]]]:
    return {
        ps.name: (ps.count, {k: v for k, v in ps.request.items() if k != "pods"})
        for ps in adapter.pod_sets(obj)
    }


SUSPEND = {"scheduling.x-k8s.io/suspend": "true"}


def tfjob(**run_policy: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": meta(annotations=SUSPEND),
        "spec": {
            "runPolicy": run_policy,
            "tfReplicaSpecs": {
                "Chief": {"replicas": 1, "template": template("2", "4Gi")},
                "PS": {"replicas": 2, "template": template("1", "2Gi")},
                "Worker": {"replicas": 4, "template": template("4", "16Gi", gpu=2)},
            },
        },
    }


def test_tfjob_every_replica_type_counts() -> None:
    assert demand(TFJobKind(), tfjob()) == {
        "chief": (1, {"cpu": 2000, "memory": 4 * GI}),
        "ps": (2, {"cpu": 1000, "memory": 2 * GI}),
        "worker": (4, {"cpu": 4000, "memory": 16 * GI, GPU: 2000}),
    }


def test_kubeflow_suspend_by_annotation_or_run_policy_and_admission_clears_both() -> None:
    kind = TFJobKind()
    obj = tfjob(suspend=True)
    assert kind.is_suspended(obj)
    assert kind.admission_patch(obj) == {
        "metadata": {"annotations": {"scheduling.x-k8s.io/suspend": "false"}},
        "spec": {"runPolicy": {"suspend": False}},
    }
    only_policy = tfjob(suspend=True)
    only_policy["metadata"]["annotations"] = {}
    assert kind.is_suspended(only_policy)
    assert kind.admission_patch(only_policy) == {"spec": {"runPolicy": {"suspend": False}}}
    running = tfjob()
    running["metadata"]["annotations"] = {"scheduling.x-k8s.io/suspend": "false"}
    assert not kind.is_suspended(running)


def test_kubeflow_finished_and_priority() -> None:
    obj = tfjob()
    obj["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": "high"}}
    obj["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    kind = TFJobKind()
    assert kind.is_finished(obj)
    assert kind.priority_class_name(obj) == "high"


def test_pytorch_elastic_counts_the_replicas_the_operator_creates() -> None:
    obj = {
        "metadata": meta(),
        "spec": {
            "elasticPolicy": {"minReplicas": 2, "maxReplicas": 8},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template(gpu=1)},
                "Worker": {"replicas": 8, "template": template(gpu=1)},
            },
        },
    }
    assert {k: v[0] for k, v in demand(PyTorchJobKind(), obj).items()} == {"master": 1, "worker": 8}


def test_mpijob_launcher_pod_via_labels() -> None:
    obj = {
        "metadata": meta(),
        "spec": {
            "runPolicy": {"suspend": True},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": template("500m", "512Mi")},
                "Worker": {"replicas": 2, "template": template("8", "32Gi", gpu=8)},
            },
        },
    }
    kind = MPIJobKind()
    assert demand(kind, obj)["worker"] == (2, {"cpu": 8000, "memory": 32 * GI, GPU: 8000})
    launcher = msgspec.convert(
        {
            "metadata": {
                "name": "j-launcher-x",
                "namespace": "ns",
                "labels": {
                    "training.kubeflow.org/job-name": "j",
                    "training.kubeflow.org/operator-name": "mpi-operator",
                    "training.kubeflow.org/job-role": "launcher",
                },
                "ownerReferences": [{"kind": "Job", "name": "j-launcher", "controller": True}],
            }
        },
        Pod,
    )
    assert kind.pod_owner(launcher) == ("j", "launcher")
    worker = msgspec.convert(
        {
            "metadata": {
                "name": "j-worker-0",
                "namespace": "ns",
                "labels": {
                    "training.kubeflow.org/job-name": "j",
                    "training.kubeflow.org/operator-name": "mpi-operator",
                    "training.kubeflow.org/job-role": "worker",
                },
                "ownerReferences": [{"kind": "MPIJob", "name": "j", "controller": True}],
            }
        },
        Pod,
    )
    assert kind.pod_owner(worker) == ("j", "worker")
    # Operator kinds claim such pods before the batch Job adapter does.
    adapters = adapters_for(["job", "mpijob"])
    assert [a.info.kind for a in adapters] == ["MPIJob", "Job"]


def test_registry_rejects_two_versions_and_unknown_kinds() -> None:
    with pytest.raises(UnknownKind):
        adapters_for(["mpijob", "mpijob-v1"])
    with pytest.raises(UnknownKind, match="unknown job kind 'volcano'"):
        adapters_for(["volcano"])


def spark(**spec: Any) -> dict[str, Any]:
    base = {
        "type": "Python",
        "driver": {"cores": 1, "memory": "2g"},
        "executor": {
            "instances": 3,
            "cores": 2,
            "memory": "4g",
            "gpu": {"name": GPU, "quantity": 1},
        },
    }
    base.update(spec)
    return {"metadata": meta(annotations=SUSPEND), "spec": base}


def test_spark_demand_with_overheads_and_gpus() -> None:
    d = demand(SparkApplicationKind(), spark())
    # Python: overhead factor 0.4 -> driver 2g + max(384m, 0.8g); executor 4g + 1.6g.
    g = 2**30
    assert d["driver"] == (1, {"cpu": 1000, "memory": (2 * g + int(2 * g * 0.4)) * 1000})
    assert d["executor"] == (
        3,
        {"cpu": 2000, "memory": (4 * g + int(4 * g * 0.4)) * 1000, GPU: 1000},
    )


def test_spark_explicit_overhead_core_request_and_dynamic_allocation() -> None:
    obj = spark(
        type="Scala",
        driver={"coreRequest": "500m", "memory": "512m", "memoryOverhead": "128m"},
        dynamicAllocation={"enabled": True, "minExecutors": 2, "initialExecutors": 5},
    )
    d = demand(SparkApplicationKind(), obj)
    assert d["driver"] == (1, {"cpu": 500, "memory": 640 * MI})
    assert d["executor"][0] == 5


@pytest.mark.parametrize(
    ("text", "mib"), [("512m", 512), ("2g", 2048), ("1024", 1024), ("1G", 1024), ("3gb", 3072)]
)
def test_jvm_memory(text: str, mib: int) -> None:
    assert parse_jvm_memory(text, "x") == mib * 2**20


def test_spark_bad_memory_and_finish_state() -> None:
    kind = SparkApplicationKind()
    with pytest.raises(DemandError, match="not a Spark memory size"):
        kind.pod_sets(spark(driver={"memory": "lots"}))
    done = spark()
    done["status"] = {"applicationState": {"state": "COMPLETED"}}
    assert kind.is_finished(done)
    assert kind.admission_patch(spark()) == {
        "metadata": {"annotations": {"scheduling.x-k8s.io/suspend": "false"}}
    }


def rayjob(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "suspend": True,
        "entrypoint": "python train.py",
        "rayClusterSpec": {
            "headGroupSpec": {"template": template("2", "8Gi")},
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": 3,
                    "minReplicas": 1,
                    "maxReplicas": 5,
                    "template": template("8", "32Gi", gpu=4),
                },
                {
                    "groupName": "tpu-like",
                    "replicas": 1,
                    "numOfHosts": 2,
                    "template": template("1", "1Gi"),
                },
            ],
        },
    }
    base.update(spec)
    return {"metadata": meta(), "spec": base}


def test_rayjob_head_workers_hosts_and_submitter() -> None:
    d = demand(RayJobKind(), rayjob())
    assert {k: v[0] for k, v in d.items()} == {"submitter": 1, "head": 1, "gpu": 3, "tpu-like": 2}
    assert d["submitter"][1] == {"cpu": 500, "memory": 200 * MI}


def test_rayjob_autoscaling_http_mode_and_existing_cluster() -> None:
    auto = rayjob(submissionMode="HTTPMode")
    auto["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    assert {k: v[0] for k, v in demand(RayJobKind(), auto).items()} == {
        "head": 1,
        "gpu": 1,
        "tpu-like": 0,
    }
    existing = rayjob(clusterSelector={"ray.io/cluster": "shared"})
    assert list(demand(RayJobKind(), existing)) == ["submitter"]


def test_rayjob_worker_groups_that_are_not_a_list_are_an_input_error() -> None:
    job = rayjob()
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"] = 1  # found by the adapter fuzz
    with pytest.raises(DemandError, match="workerGroupSpecs is not a list"):
        RayJobKind().pod_sets(job)


def test_rayjob_pods_are_tied_by_cluster_name_and_aliases() -> None:
    def pod(labels: dict[str, str]) -> Pod:
        return msgspec.convert(
            {"metadata": {"name": "p", "namespace": "ns", "labels": labels}}, Pod
        )

    kind = RayJobKind()
    cluster = {"ray.io/cluster": "j-x7k2p"}
    assert kind.pod_owner(pod({**cluster, "ray.io/node-type": "head"})) == ("j-x7k2p", "head")
    assert kind.pod_owner(
        pod({**cluster, "ray.io/node-type": "worker", "ray.io/group": "gpu"})
    ) == ("j-x7k2p", "gpu")
    assert kind.pod_owner(pod({"job-name": "j"})) is None
    obj = rayjob()
    obj["status"] = {"rayClusterName": "j-x7k2p"}
    assert kind.pod_aliases(obj) == [("RayJob", "j-x7k2p", None), ("Job", "j", "submitter")]
    assert kind.pod_aliases(rayjob(submissionMode="HTTPMode")) == []


def _ray_pod(name: str, labels: dict[str, str], owner: str, owner_name: str, gpu: int = 0) -> Pod:
    requests: dict[str, str] = {"cpu": "1", "memory": "1Gi"}
    if gpu:
        requests[GPU] = str(gpu)
    return msgspec.convert(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": name,
                "labels": labels,
                "ownerReferences": [{"kind": owner, "name": owner_name, "controller": True}],
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "c", "resources": {"requests": requests}}],
            },
            "status": {"phase": "Running"},
        },
        Pod,
    )


def _running_ray_pods() -> list[Pod]:
    cluster = {"ray.io/cluster": "j-x7k2p"}
    return [
        _ray_pod("head", {**cluster, "ray.io/node-type": "head"}, "RayCluster", "j-x7k2p", 1),
        *(
            _ray_pod(
                f"w{i}",
                {**cluster, "ray.io/node-type": "worker", "ray.io/group": "gpu"},
                "RayCluster",
                "j-x7k2p",
                1,
            )
            for i in range(2)
        ),
        _ray_pod("submit", {"job-name": "j"}, "Job", "j"),
    ]


def _admitted_rayjob() -> dict[str, Any]:
    """A running RayJob kube-queue admitted: head (1 GPU) + 2 GPU workers + the submitter."""
    small = template("1", "1Gi")
    obj = rayjob(
        suspend=False,
        submitterPodTemplate=small,
        rayClusterSpec={
            "headGroupSpec": {"template": template("1", "1Gi", gpu=1)},
            "workerGroupSpecs": [
                {"groupName": "gpu", "replicas": 2, "template": template("1", "1Gi", gpu=1)}
            ],
        },
    )
    obj["metadata"]["annotations"] = {"kube-queue.io/admitted-at": "2026-01-01T00:00:00Z"}
    obj["status"] = {"rayClusterName": "j-x7k2p"}
    return obj


@pytest.mark.parametrize("kinds", [["job", "rayjob"], ["rayjob"]])
@pytest.mark.parametrize("pods_first", [True, False], ids=["pods-first", "rayjob-first"])
def test_running_rayjob_holds_nothing_twice_in_either_arrival_order(
    pods_first: bool, kinds: list[str]
) -> None:
    """After a restart pods are listed before job kinds, so a Ray pod is counted before its
    RayJob's aliases (status.rayClusterName, the submitter Job) are known. Either order must end
    with the running pods counted once and nothing held for them (regression: the pods-first
    order held every pod again, a 4-GPU node showed -4 free GPUs)."""
    from kubequeue.admission.tracker import JobTracker
    from kubequeue.capacity.cache import CapacityCache
    from kubequeue.capacity.reservations import Reservations
    from kubequeue.handlers import PodHandler, pod_owner_finder
    from kubequeue.queueing.queue import JobQueue
    from unit.builders import node

    cache = CapacityCache()
    cache.upsert_node(node("n1", gpu=4))
    tracker = JobTracker(cache, JobQueue(), Reservations(cache))
    adapters = adapters_for(kinds)
    ray = next(a for a in adapters if a.info.kind == "RayJob")
    pods = PodHandler(cache, tracker, pod_owner_finder(adapters))
    if pods_first:
        for p in _running_ray_pods():
            pods.upsert(p)
        tracker.observe(ray, _admitted_rayjob())
    else:
        tracker.observe(ray, _admitted_rayjob())
        assert tracker.reservations.held_pods(("RayJob", "ns", "j")) == 4
        for p in _running_ray_pods():
            pods.upsert(p)
    assert tracker.reservations.held_pods(("RayJob", "ns", "j")) == 0
    assert cache.nodes["n1"].free[GPU] == 1000
    assert not any(cache.nodes["n1"].reserved.values())
    assert tracker.bound_pods(("RayJob", "ns", "j")) == {"head": 1, "gpu": 2, "submitter": 1}
    # A worker ends while the RayJob still wants it: its slot is held again, once.
    cache_key = pods.owner_of(_running_ray_pods()[1])
    assert cache_key == (("RayJob", "ns", "j-x7k2p"), "gpu"), "the cache keeps the raw owner"
    pods.delete("w0")
    assert tracker.reservations.held_pods(("RayJob", "ns", "j")) == 1
    assert cache.nodes["n1"].free[GPU] == 1000
    # Forgotten (deleted): nothing is held and the pods count as ordinary users.
    tracker.forget(("RayJob", "ns", "j"))
    assert tracker.reservations.held_pods(("RayJob", "ns", "j")) == 0
    assert tracker.owner_of(("RayJob", "ns", "j-x7k2p")) == ("RayJob", "ns", "j-x7k2p")


def workflow(
    annotations: dict[str, str] | None = None, suspend_template: bool = True
) -> dict[str, Any]:
    templates: list[dict[str, Any]] = [{"name": "main", "container": {"image": "x"}}]
    if suspend_template:
        templates.append({"name": "kube-queue-suspend", "suspend": {}})
    return {
        "metadata": meta(annotations=annotations),
        "spec": {"suspend": True, "entrypoint": "main", "templates": templates},
    }


def test_workflow_min_resources_annotation() -> None:
    obj = workflow({"kube-queue/min-resources": "cpu: 5\nmemory: 5G\nnvidia.com/gpu: 1\n"})
    assert demand(WorkflowKind(), obj) == {
        "workflow": (1, {"cpu": 5000, "memory": 5 * 10**9 * 1000, GPU: 1000})
    }


@pytest.mark.parametrize(
    ("obj", "reason", "text"),
    [
        (
            workflow({"kube-queue/min-resources": "cpu: 1"}, suspend_template=False),
            "MissingSuspendTemplate",
            "no template named 'kube-queue-suspend'",
        ),
        (workflow(), "InvalidMinResources", "annotation kube-queue/min-resources is missing"),
        (
            workflow({"kube-queue/min-resources": "cpu: '5"}),
            "InvalidMinResources",
            "not valid YAML",
        ),
        (
            workflow({"kube-queue/min-resources": "cpu: [5"}),
            "InvalidMinResources",
            "found a nested list or map",
        ),
        (
            workflow({"kube-queue/min-resources": "5 cpus"}),
            "InvalidMinResources",
            "must be a non-empty YAML map",
        ),
        (workflow({"kube-queue/min-resources": "cpu: -2"}), "InvalidMinResources", "negative"),
        (
            workflow({"kube-queue/min-resources": "cpu: lots"}),
            "InvalidMinResources",
            "not a valid quantity",
        ),
    ],
)
def test_workflow_bad_input_explains_what_to_add(
    obj: dict[str, Any], reason: str, text: str
) -> None:
    with pytest.raises(DemandError, match=text) as caught:
        WorkflowKind().pod_sets(obj)
    assert caught.value.reason == reason


def _alias_bomb(levels: int) -> str:
    """The "billion laughs" shape: each anchored list holds nine references to the one before,
    all inside the value of ``cpu`` (so echoing the value would expand every level)."""
    parts = ["&a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        parts.append(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "cpu: [" + ", ".join(parts) + "]"


HOSTILE_MIN_RESOURCES = {
    # 344 bytes that took seconds and tens of MB to echo (two more levels: minutes, gigabytes)
    "alias bomb": _alias_bomb(7),
    "anchor only": "cpu: &c 1",
    "deep nesting": "[" * 495 + "]" * 495,
    "nested map": "cpu: {a: {b: 1}}",
    "huge number": "cpu: " + "9" * 4301,
    "long quantity": "cpu: " + "1" * 65,
    "long name": "x" * 300 + ": 1",
    "too big": "cpu: 1\n" + "#" * 5000,
    "many entries": "\n".join(f"r{i}.example.com/x: 1" for i in range(40)),
    "two documents": "cpu: 1\n---\ncpu: 2",
    "duplicate key": "cpu: 1\ncpu: 2",
    "a list": "- cpu\n- 1",
    "a scalar": "1",
    "empty": "",
    "null value": "cpu:",
    "python tag": "cpu: !!python/object/apply:os.system ['true']",
    "non-ascii digit": "cpu: \u0661",
}


@pytest.mark.parametrize(
    "raw", list(HOSTILE_MIN_RESOURCES.values()), ids=list(HOSTILE_MIN_RESOURCES)
)
def test_workflow_hostile_min_resources_is_refused_quickly_and_briefly(raw: str) -> None:
    """The annotation is free text from anyone who may create a Workflow: it must be refused
    with InvalidMinResources, fast, with a short message that does not echo what was parsed."""
    import time

    started = time.perf_counter()
    with pytest.raises(DemandError) as caught:
        WorkflowKind().pod_sets(workflow({"kube-queue/min-resources": raw}))
    assert time.perf_counter() - started < 2.0  # a hang guard: the bomb took 10 s and more
    assert caught.value.reason == "InvalidMinResources"
    message = str(caught.value)
    assert len(message) < 400, message
    assert "x, x" not in message and "*a" not in message


def test_workflow_resumes_the_suspend_step_after_admission() -> None:
    obj = workflow({"kube-queue/min-resources": "cpu: 1"})
    obj["status"] = {
        "nodes": {
            "wf-1": {"templateName": "kube-queue-suspend", "type": "Suspend", "phase": "Running"},
            "wf-2": {"templateName": "main", "type": "Pod", "phase": "Pending"},
        }
    }
    patch = WorkflowKind().follow_up_patch(obj)
    assert patch == {
        "status": {
            "nodes": {
                "wf-1": {"phase": "Succeeded", "message": "resumed by kube-queue on admission"}
            }
        }
    }
    obj["status"]["nodes"]["wf-1"]["phase"] = "Succeeded"
    assert WorkflowKind().follow_up_patch(obj) is None


def test_job_skips_children_of_other_controllers_but_not_cronjobs() -> None:
    kind = JobKind()
    child = {
        "metadata": {"ownerReferences": [{"kind": "JobSet", "name": "js", "controller": True}]}
    }
    cron = {"metadata": {"ownerReferences": [{"kind": "CronJob", "name": "c", "controller": True}]}}
    assert "owned by JobSet js" in (kind.skip_reason(child) or "")
    assert kind.skip_reason(cron) is None


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ({"memoryOverheadFactor": "NaN"}, "memoryOverheadFactor"),
        ({"memoryOverheadFactor": "inf"}, "memoryOverheadFactor"),
        ({"memoryOverheadFactor": "1e308"}, "memoryOverheadFactor"),
        ({"memoryOverheadFactor": -0.5}, "memoryOverheadFactor"),
        ({"memoryOverheadFactor": [1]}, "memoryOverheadFactor"),
        ({"driver": {"memory": "9" * 310}}, "not a Spark memory size"),
        ({"driver": {"memory": 10**400}}, "not a Spark memory size"),
        ({"driver": {"memory": "\u0661g"}}, "not a Spark memory size"),
        ({"driver": []}, "spec.driver is not an object"),
        ({"executor": "x"}, "spec.executor is not an object"),
        ({"dynamicAllocation": [True]}, "spec.dynamicAllocation is not an object"),
        ({"nodeSelector": ["a"]}, "spec.nodeSelector is not an object"),
        ({"driver": {"nodeSelector": {"zone": 1}}}, "nodeSelector values must be strings"),
        ({"driver": {"tolerations": [{"key": ["x"]}]}}, "not a list of tolerations"),
        ({"driver": {"tolerations": 5}}, "not a list of tolerations"),
    ],
)
def test_spark_hostile_fields_are_input_errors(spec: dict[str, Any], text: str) -> None:
    """Values the CRD accepts but that used to raise ValueError / OverflowError / TypeError /
    AttributeError inside the adapter (so the job was silently never queued)."""
    with pytest.raises(DemandError, match=text):
        SparkApplicationKind().pod_sets(spark(**spec))


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        (WorkflowKind(), ("status", "phase")),
        (SparkApplicationKind(), ("status", "applicationState", "state")),
        (RayJobKind(), ("status", "jobDeploymentStatus")),
    ],
)
def test_a_list_where_a_status_string_belongs_is_not_finished(
    kind: Any, path: tuple[str, ...]
) -> None:
    obj: dict[str, Any] = {"metadata": meta()}
    target = obj
    for step in path[:-1]:
        target = target.setdefault(step, {})
    target[path[-1]] = ["Succeeded", "COMPLETED", "Complete"]
    assert kind.is_finished(obj) is False


# ------------------------------------------------------------------ preemption (suspend again)


def _merged(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``patch`` applied to ``obj`` as a JSON merge patch (the API server's part)."""
    out = dict(obj)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merged(out[k], v)
        else:
            out[k] = v
    return out


def _running(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": meta(annotations=annotations), "spec": spec}


ADMITTED_ANNOTATION = {"scheduling.x-k8s.io/suspend": "false"}  # as admission left it
SPEC_SUSPEND = {"spec": {"suspend": True}}
RUN_POLICY = {"spec": {"runPolicy": {"suspend": True}}}
RUN_POLICY_AND_ANNOTATION = {
    "spec": {"runPolicy": {"suspend": True}},
    "metadata": {"annotations": {"scheduling.x-k8s.io/suspend": "true"}},
}


KUBEFLOW = [
    ("TFJob", TFJobKind()),
    ("PyTorchJob", PyTorchJobKind()),
    ("MPIJob", MPIJobKind()),
    ("MPIJob-v1", MPIJobV1Kind()),
]


@pytest.mark.parametrize(
    ("adapter", "running", "patch"),
    [
        pytest.param(JobKind(), _running({"suspend": False}), SPEC_SUSPEND, id="Job"),
        pytest.param(RayJobKind(), _running({"suspend": False}), SPEC_SUSPEND, id="RayJob"),
        *(
            pytest.param(kind, _running({"runPolicy": {"suspend": False}}), RUN_POLICY, id=name)
            for name, kind in KUBEFLOW
        ),
        # Held by the annotation before admission: operator builds that watch only it stop too.
        *(
            pytest.param(
                kind,
                _running({"runPolicy": {}}, ADMITTED_ANNOTATION),
                RUN_POLICY_AND_ANNOTATION,
                id=f"{name}-annotation",
            )
            for name, kind in KUBEFLOW
        ),
    ],
)
def test_each_suspendable_kind_is_stopped_by_its_own_suspend_field(
    adapter: Any, running: dict[str, Any], patch: dict[str, Any]
) -> None:
    """What preemption and requeue write, and that it does stop the job (the kind's own
    is_suspended agrees) and that admission undoes it (the job can run again)."""
    assert isinstance(adapter, Preemptible)
    assert not adapter.is_suspended(running)
    assert adapter.preemption_patch(running) == patch
    stopped = _merged(running, patch)
    assert adapter.is_suspended(stopped)
    assert not adapter.is_suspended(_merged(stopped, adapter.admission_patch(stopped)))


def test_spark_and_argo_workflows_have_no_suspend_once_running() -> None:
    """Their operators do not stop a running application or workflow on suspend: never
    preempted or requeued. Every other kind can be; a new kind must take a side."""
    preemptible = {name for name, make in KINDS.items() if isinstance(make(), Preemptible)}
    assert set(KINDS) - preemptible == {"sparkapplication", "workflow"}
    for adapter in (SparkApplicationKind(), WorkflowKind()):
        assert not hasattr(adapter, "preemption_patch")
