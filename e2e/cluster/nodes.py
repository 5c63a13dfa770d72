"""Declarative fake nodes: what a test asks for, turned into Node manifests KWOK will manage.

A fake node is a Node object carrying the annotation KWOK's controller is started to select, and a
status with the capacity the test wants. KWOK keeps an existing capacity when it initialises the
node (stages/node-initialize.yaml), marks it Ready and renews its Lease; the scheduler then binds
pods to it as to any node, counting ``nvidia.com/gpu`` like every extended resource.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
FAKE_NODE_VALUE = "fake"
FAKE_NODE_SELECTOR = f"{FAKE_NODE_ANNOTATION}={FAKE_NODE_VALUE}"
# Label on every fake node, so kubectl can select them (annotations are not selectable).
FAKE_NODE_LABEL = "type"
FAKE_NODE_LABEL_VALUE = "kwok"
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    @classmethod
    def parse(cls, text: str) -> Taint:
        """Parse kubectl's taint syntax ``key[=value]:Effect``."""
        key_value, _, effect = text.partition(":")
        key, _, value = key_value.partition("=")
        return cls(key=key, value=value, effect=effect or "NoSchedule")

    def to_api(self) -> dict[str, str]:
        taint = {"key": self.key, "effect": self.effect}
        if self.value:
            taint["value"] = self.value
        return taint


@dataclass(frozen=True)
class NodeSpec:
    """A fake node: capacity equals allocatable, as on a node without system reservations."""

    name: str
    cpu: str = "32"
    memory: str = "256Gi"
    pods: int = 110
    gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Taint] = ()

    def resources(self) -> dict[str, str]:
        resources = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        if self.gpus:
            resources[GPU_RESOURCE] = str(self.gpus)
        return resources

    def manifest(
        self, name: str | None = None, extra_labels: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """The Node object, optionally under another name and with more labels."""
        node_name = name or self.name
        labels = {
            "kubernetes.io/hostname": node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            FAKE_NODE_LABEL: FAKE_NODE_LABEL_VALUE,
            **self.labels,
            **(extra_labels or {}),
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node_name,
                "labels": labels,
                "annotations": {FAKE_NODE_ANNOTATION: FAKE_NODE_VALUE},
            },
            "spec": {"taints": [taint.to_api() for taint in self.taints]},
            "status": {"capacity": self.resources(), "allocatable": self.resources()},
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> list[NodeSpec]:
        """One spec per ``count`` (default 1); with a count, names get a ``-<i>`` suffix."""
        fields = dict(data)
        count = int(fields.pop("count", 1))
        fields["taints"] = tuple(
            Taint.parse(t) if isinstance(t, str) else Taint(**t) for t in fields.get("taints", ())
        )
        fields["labels"] = dict(fields.get("labels", {}))
        for key in ("pods", "gpus"):
            if key in fields:
                fields[key] = int(fields[key])
        for key in ("cpu", "memory"):
            if key in fields:
                fields[key] = str(fields[key])
        spec = cls(**fields)
        if "count" not in data:
            return [spec]
        return [cls(**{**fields, "name": f"{spec.name}-{index}"}) for index in range(count)]


def parse_node_specs(text: str) -> list[NodeSpec]:
    """Parse ``--nodes``: a YAML file (a list of NodeSpec mappings) or inline specs.

    Inline: ``NAME:key=value,...`` separated by ``;``, keys cpu, memory, pods, gpus, count, e.g.
    ``gpu:cpu=32,memory=256Gi,gpus=8,count=2;cpu:cpu=16,memory=64Gi``.
    """
    path = Path(text)
    if path.is_file():
        entries = yaml.safe_load(path.read_text()) or []
        return [spec for entry in entries for spec in NodeSpec.from_mapping(entry)]
    specs: list[NodeSpec] = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, _, options = item.partition(":")
        fields: dict[str, Any] = {"name": name}
        for option in filter(None, options.split(",")):
            key, sep, value = option.partition("=")
            if not sep:
                raise ValueError(f"node option {option!r} in {item!r} is not key=value")
            fields[key.strip()] = value.strip()
        specs.extend(NodeSpec.from_mapping(fields))
    return specs


def node_list_json(manifests: Iterable[Mapping[str, Any]]) -> str:
    """A v1 List, to create many nodes with one ``kubectl create -f -``."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(manifests)})
