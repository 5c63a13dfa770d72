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
from kubequeue.kinds.common import annotations_of, dig, opted_out, text_at
from kubequeue.kinds.protocol import Obj, PodOwnership
from kubequeue.objects import Pod
from kubequeue.resources import PODS, intern

__all__ = ["MIN_RESOURCES", "SUSPEND_TEMPLATE", "WorkflowKind", "read_flat_map"]

MIN_RESOURCES = "kube-queue/min-resources"
SUSPEND_TEMPLATE = "kube-queue-suspend"
_FINISHED = frozenset({"Succeeded", "Failed", "Error"})
_WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
_EXAMPLE = f'{MIN_RESOURCES}: "cpu: 5\\nmemory: 5G"'


# Bounds on the annotation, which any user who may create a Workflow writes: a YAML alias bomb of
# 300 bytes expands to gigabytes, deep nesting exhausts the recursion limit, and a 5,000-digit
# number is slow to convert. The map we need is small and flat, so anything else is refused
# before it is built.
_MAX_BYTES = 2048
_MAX_ENTRIES = 32
_MAX_NAME = 253  # a resource name is a qualified name
_MAX_QUANTITY = 64  # characters of one quantity's text


def read_flat_map(raw: str) -> dict[str, str]:
    """The annotation as ``{resource: quantity text}``, read from the YAML *event stream*.

    Nothing is constructed from the YAML: anchors and aliases, nesting, several documents and
    oversized text are refused while parsing, in time linear in the (bounded) input, and every
    message is short and never echoes what was parsed.
    """
    size = len(raw.encode("utf-8", errors="replace"))
    if size > _MAX_BYTES:
        raise DemandError(f"annotation {MIN_RESOURCES} is {size} bytes; at most {_MAX_BYTES}")
    out: dict[str, str] = {}
    key: str | None = None
    depth = 0
    documents = 0
    try:
        for event in yaml.parse(raw, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise DemandError(
                    f"annotation {MIN_RESOURCES} uses a YAML anchor or alias (& or *); "
                    f"write a plain map like {_EXAMPLE}"
                )
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
            elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
                depth += 1
                if depth > 1 or isinstance(event, yaml.SequenceStartEvent):
                    raise DemandError(_not_a_flat_map("a nested list or map"))
            elif isinstance(event, yaml.MappingEndEvent):
                depth -= 1
            elif isinstance(event, yaml.ScalarEvent):
                if depth == 0:
                    raise DemandError(_not_a_flat_map("a single value"))
                key = _take_scalar(out, key, event.value)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = str(getattr(exc, "problem", None) or "syntax error")[:80]
        raise DemandError(
            f"annotation {MIN_RESOURCES} is not valid YAML ({problem}{where}); expected "
            f"a map like {_EXAMPLE}"
        ) from None
    if documents > 1:
        raise DemandError(_not_a_flat_map("several YAML documents"))
    if not out:
        raise DemandError(_not_a_flat_map("nothing"))
    return out


def _take_scalar(out: dict[str, str], key: str | None, value: str) -> str | None:
    """Consume one scalar of the map: a key (returned, awaiting its value) or a value."""
    if key is None:
        if len(value) > _MAX_NAME:
            raise DemandError(
                f"annotation {MIN_RESOURCES} names a resource of {len(value)} characters; "
                f"resource names have at most {_MAX_NAME}"
            )
        if value in out:
            raise DemandError(f"annotation {MIN_RESOURCES} names {value} twice")
        if len(out) >= _MAX_ENTRIES:
            raise DemandError(
                f"annotation {MIN_RESOURCES} names more than {_MAX_ENTRIES} resources"
            )
        return value
    if len(value) > _MAX_QUANTITY:
        raise DemandError(
            f"annotation {MIN_RESOURCES}: the quantity of {key} is {len(value)} characters long; "
            f"at most {_MAX_QUANTITY}"
        )
    out[key] = value
    return None


def _not_a_flat_map(found: str) -> str:
    return (
        f"annotation {MIN_RESOURCES} must be a non-empty YAML map of resource: quantity like "
        f"{_EXAMPLE}, found {found}"
    )


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
        return text_at(obj, "status", "phase") in _FINISHED

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
        if not isinstance(raw, str):
            raise DemandError(
                f"annotation {MIN_RESOURCES} is not text", reason="InvalidMinResources"
            )
        try:
            request = parse_resource_map(read_flat_map(raw), f"annotation {MIN_RESOURCES}")
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
