"""ray.io/v1 RayJob: head + worker groups + the submitter pod, held by ``spec.suspend``.

Worker groups count ``replicas`` x ``numOfHosts`` pods, or ``minReplicas`` x ``numOfHosts`` when
the in-tree autoscaler is on (the job starts at its floor). In the default K8sJobMode KubeRay runs
``ray job submit`` in a separate pod (``submitterPodTemplate``, else KubeRay's default of
500m CPU / 200Mi); a RayJob that targets an existing cluster (``clusterSelector``) needs only that.
KubeRay (v1.5) labels the RayCluster it creates, not its pods, with the RayJob's name: head and
worker pods carry ``ray.io/cluster=<status.rayClusterName>`` (``<rayjob>-<5 random chars>``),
and the submitter pod belongs to a batch Job named after the RayJob. So pods are matched by
cluster name, and the RayJob declares both names as aliases once its status names the cluster.
"""

from __future__ import annotations

from typing import Any

from kubequeue.demand import DemandError, PodSet, pod_set_from_template
from kubequeue.identity import KindInfo
from kubequeue.kinds.common import dig, labels_of, opted_out, text_at
from kubequeue.kinds.protocol import Obj, PodAlias, PodOwnership
from kubequeue.objects import Pod

__all__ = ["RayJobKind"]

_FINISHED = frozenset({"Complete", "Failed"})
_CLUSTER = "ray.io/cluster"
_NODE_TYPE = "ray.io/node-type"
_GROUP = "ray.io/group"
_KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_DEFAULT_SUBMITTER = {
    "spec": {
        "containers": [
            {
                "name": "ray-job-submitter",
                "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}},
            }
        ]
    }
}


class RayJobKind:
    info = KindInfo(name="rayjob", kind="RayJob", group="ray.io", version="v1", plural="rayjobs")
    alias_kinds = ("RayJob", "Job")

    def is_suspended(self, obj: Obj) -> bool:
        return dig(obj, "spec", "suspend") is True

    def is_finished(self, obj: Obj) -> bool:
        return text_at(obj, "status", "jobDeploymentStatus") in _FINISHED

    def pod_sets(self, obj: Obj) -> list[PodSet]:
        spec = dig(obj, "spec")
        if not isinstance(spec, dict):
            raise DemandError("spec is missing")
        out: list[PodSet] = []
        mode = spec.get("submissionMode") or "K8sJobMode"
        if mode == "K8sJobMode":
            template = spec.get("submitterPodTemplate") or _DEFAULT_SUBMITTER
            out.append(pod_set_from_template("submitter", 1, template, "spec.submitterPodTemplate"))
        if spec.get("clusterSelector"):
            return out
        cluster = spec.get("rayClusterSpec")
        if not isinstance(cluster, dict):
            raise DemandError("spec.rayClusterSpec is missing (and no clusterSelector is set)")
        head = dig(cluster, "headGroupSpec", "template")
        out.append(pod_set_from_template("head", 1, head, "spec.rayClusterSpec.headGroupSpec"))
        autoscaling = cluster.get("enableInTreeAutoscaling") is True
        groups = cluster.get("workerGroupSpecs") or []
        if not isinstance(groups, list):
            raise DemandError("spec.rayClusterSpec.workerGroupSpecs is not a list")
        for i, group in enumerate(groups):
            where = f"spec.rayClusterSpec.workerGroupSpecs[{i}]"
            if not isinstance(group, dict):
                raise DemandError(f"{where} is not an object")
            if group.get("suspend") is True:
                continue
            replicas = group.get("minReplicas", 0) if autoscaling else group.get("replicas", 0)
            hosts = group.get("numOfHosts", 1)
            if not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (replicas, hosts)
            ):
                raise DemandError(f"{where}: replicas/numOfHosts must be non-negative integers")
            name = str(group.get("groupName") or f"workers-{i}")
            out.append(pod_set_from_template(name, replicas * hosts, group.get("template"), where))
        return out

    def priority_class_name(self, obj: Obj) -> str | None:
        found = dig(
            obj, "spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "priorityClassName"
        )
        return found if isinstance(found, str) and found else None

    def admission_patch(self, obj: Obj) -> dict[str, Any]:
        return {"spec": {"suspend": False}}

    def preemption_patch(self, obj: Obj) -> dict[str, Any] | None:
        # KubeRay deletes the RayCluster and the submitter of a suspended RayJob.
        return {"spec": {"suspend": True}}

    def pod_owner(self, pod: Pod) -> PodOwnership | None:
        """Head and worker pods, by their RayCluster's name (an alias of the RayJob)."""
        labels = pod.metadata.labels
        cluster = labels.get(_CLUSTER)
        node_type = labels.get(_NODE_TYPE)
        if not cluster or not node_type:
            return None
        return cluster, "head" if node_type == "head" else labels.get(_GROUP)

    def pod_aliases(self, obj: Obj) -> list[PodAlias]:
        name = str(dig(obj, "metadata", "name") or "")
        aliases: list[PodAlias] = []
        cluster = dig(obj, "status", "rayClusterName")
        if isinstance(cluster, str) and cluster and cluster != name:
            aliases.append(("RayJob", cluster, None))
        if (dig(obj, "spec", "submissionMode") or "K8sJobMode") == "K8sJobMode" and name:
            aliases.append(("Job", name, "submitter"))
        return aliases

    def skip_reason(self, obj: Obj) -> str | None:
        if _KUEUE_LABEL in labels_of(obj):
            return f"label {_KUEUE_LABEL} is set: Kueue manages this job"
        return opted_out(obj)
