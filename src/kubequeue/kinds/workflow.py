"""argoproj.io/v1alpha1 Workflow: whole workflows are queued, never single steps.

Queued when ``spec.suspend: true`` AND the workflow has a template named ``kube-queue-suspend``
with ``suspend: {}`` (the opt-in marker: a workflow suspended for other reasons is not ours to
start). Its demand cannot be derived from the steps (they run over time), so the user declares it
in the annotation ``kube-queue/min-resources`` as a YAML map (``cpu: 5``, ``memory: 5G``,
``nvidia.com/gpu: 1``); kube-queue admits the workflow when one node can hold that much, so
declare what must fit together (the largest concurrent step), not a sum over nodes.

Admission sets ``spec.suspend: false``; if the workflow then reaches a running
``kube-queue-suspend`` step, kube-queue resumes that step (as ``argo resume`` would), so the
marker template can also be used as the workflow's first step.
"""

from __future__ import annotations

from typing import Any

import yaml

from kubequeue.demand import DemandError, PodSet, parse_resource_map
from kubequeue.identity import KindInfo
from kubequeue.kinds.common import annotations_of, dig, opted_out
from kubequeue.kinds.protocol import Obj, PodOwnership
from kubequeue.objects import Pod
from kubequeue.resources import PODS, intern

__all__ = ["MIN_RESOURCES", "SUSPEND_TEMPLATE", "WorkflowKind"]

MIN_RESOURCES = "kube-queue/min-resources"
SUSPEND_TEMPLATE = "kube-queue-suspend"
_FINISHED = frozenset({"Succeeded", "Failed", "Error"})
_WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
_EXAMPLE = f'{MIN_RESOURCES}: "cpu: 5\\nmemory: 5G"'


def _has_suspend_template(obj: Obj) -> bool:
    templates = dig(obj, "spec", "templates")
    return isinstance(templates, list) and any(
        isinstance(t, dict)
        and t.get("name") == SUSPEND_TEMPLATE
        and isinstance(t.get("suspend"), dict)
        for t in templates
    )


class WorkflowKind:
    info = KindInfo(
        name="workflow",
        kind="Workflow",
        group="argoproj.io",
        version="v1alpha1",
        plural="workflows",
    )

    def is_suspended(self, obj: Obj) -> bool:
        return dig(obj, "spec", "suspend") is True

    def is_finished(self, obj: Obj) -> bool:
        return dig(obj, "status", "phase") in _FINISHED

    def pod_sets(self, obj: Obj) -> list[PodSet]:
        if not _has_suspend_template(obj):
            raise DemandError(
                f"the workflow is suspended but has no template named {SUSPEND_TEMPLATE!r} with "
                f"'suspend: {{}}'; add one to spec.templates to let kube-queue queue it (or set "
                f'kube-queue.io/ignore: "true" if you suspended it yourself)',
                reason="MissingSuspendTemplate",
            )
        raw = annotations_of(obj).get(MIN_RESOURCES)
        if raw is None:
            raise DemandError(
                f"annotation {MIN_RESOURCES} is missing; declare what the workflow needs at once, "
                f"e.g. {_EXAMPLE}",
                reason="InvalidMinResources",
            )
        try:
            declared = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise DemandError(
                f"annotation {MIN_RESOURCES} is not valid YAML ({exc}); expected "
                f"a map like {_EXAMPLE}",
                reason="InvalidMinResources",
            ) from None
        if not isinstance(declared, dict) or not declared:
            raise DemandError(
                f"annotation {MIN_RESOURCES} must be a non-empty YAML map like "
                f"{_EXAMPLE}, got {raw!r}",
                reason="InvalidMinResources",
            )
        try:
            request = parse_resource_map(declared, f"annotation {MIN_RESOURCES}")
        except DemandError as exc:
            raise DemandError(str(exc), reason="InvalidMinResources") from None
        request[PODS] = 1000
        return [PodSet("workflow", 1, intern(request))]

    def priority_class_name(self, obj: Obj) -> str | None:
        found = dig(obj, "spec", "podPriorityClassName")
        return found if isinstance(found, str) and found else None

    def admission_patch(self, obj: Obj) -> dict[str, Any]:
        return {"spec": {"suspend": False}}

    def follow_up_patch(self, obj: Obj) -> dict[str, Any] | None:
        """Resume a running kube-queue-suspend step of an admitted workflow (like argo resume)."""
        nodes = dig(obj, "status", "nodes")
        if not isinstance(nodes, dict):
            return None
        resumed = {
            node_id: {"phase": "Succeeded", "message": "resumed by kube-queue on admission"}
            for node_id, node in nodes.items()
            if isinstance(node, dict)
            and node.get("templateName") == SUSPEND_TEMPLATE
            and node.get("type") == "Suspend"
            and node.get("phase") == "Running"
        }
        return {"status": {"nodes": resumed}} if resumed else None

    def pod_owner(self, pod: Pod) -> PodOwnership | None:
        name = pod.metadata.labels.get(_WORKFLOW_LABEL)
        return (name, "workflow") if name else None

    def skip_reason(self, obj: Obj) -> str | None:
        return opted_out(obj)
