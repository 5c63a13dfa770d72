"""precondition.py: the admission write's tests and its change as JSON-patch ops."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubequeue.labels import ADMITTED_AT, IGNORE, QUEUE_LABEL
from kubequeue.precondition import annotation_ops, guard_of, guard_tests, merge_ops
from unit.jsonpatch import PatchFailed, apply_patch


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386, as the API server's merge patch does it (the reference for merge_ops)."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            here = out.get(key)
            out[key] = _merge(here if isinstance(here, dict) else {}, value)
        else:
            out[key] = value
    return out


_keys = st.sampled_from(["a", "b", "x/y", "t~z", "spec"])
_leaves = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text("ab", max_size=2))
_trees = st.recursive(
    _leaves, lambda inner: st.dictionaries(_keys, inner, max_size=3), max_leaves=8
)
_objects = st.dictionaries(_keys, _trees, max_size=4)


@settings(max_examples=300, deadline=None)
@given(_objects, _objects)
def test_merge_ops_do_what_the_merge_patch_does(obj: dict[str, Any], patch: dict[str, Any]) -> None:
    obj = _merge({}, obj)  # a stored object holds no nulls
    assert apply_patch(obj, merge_ops(obj, patch)) == _merge(obj, patch)


def _job(**meta: Any) -> dict[str, Any]:
    return {"metadata": {"uid": "u", "generation": 4, **meta}, "spec": {"suspend": True}}


def test_the_guard_holds_what_the_decision_reads_and_nothing_else() -> None:
    obj = _job(
        labels={QUEUE_LABEL: "team-a", "app": "x"},
        annotations={"kube-queue.io/requeues": "1", "kube-queue/min-resources": "cpu=1",
                     "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
    )
    guard = guard_of(obj)
    assert guard.uid == "u" and guard.generation == 4
    assert dict(guard.labels or ()) == {QUEUE_LABEL: "team-a", IGNORE: None}
    tested = dict(guard.annotations or ())
    assert tested["kube-queue.io/requeues"] == "1"
    assert tested["kube-queue/min-resources"] == "cpu=1"
    assert tested[ADMITTED_AT] is None  # the idempotency key: tested absent
    assert "kubectl.kubernetes.io/last-applied-configuration" not in tested
    ops = guard_tests(guard)
    apply_patch(obj, ops)  # passes on the object it was read from

    moved = copy.deepcopy(obj)  # status, resourceVersion, unrelated metadata: still passes
    moved["status"] = {"conditions": [{"type": "Suspended"}]}
    moved["metadata"]["resourceVersion"] = "99"
    moved["metadata"]["labels"]["app"] = "y"
    moved["metadata"]["annotations"]["other.io/x"] = "1"
    apply_patch(moved, ops)
    assert guard_of(moved) == guard


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.update(uid="other"),  # deleted and re-created under the same name
        lambda m: m.update(generation=5),  # the spec changed
        lambda m: m["labels"].update({QUEUE_LABEL: "team-b"}),
        lambda m: m["labels"].pop(QUEUE_LABEL),
        lambda m: m["labels"].update({IGNORE: "true"}),
        lambda m: m["annotations"].update({ADMITTED_AT: "2026-01-01T00:00:00Z"}),
        lambda m: m["annotations"].update({"kube-queue.io/requeues": "2"}),
        lambda m: m.pop("annotations"),
    ],
)
def test_a_change_the_decision_depends_on_fails_the_tests(change: Any) -> None:
    obj = _job(labels={QUEUE_LABEL: "team-a"}, annotations={"kube-queue.io/requeues": "1"})
    ops = guard_tests(guard_of(obj))
    changed = copy.deepcopy(obj)
    change(changed["metadata"])
    assert guard_of(changed) != guard_of(obj)
    with pytest.raises(PatchFailed):
        apply_patch(changed, ops)


def test_missing_maps_are_tested_missing_and_created_whole() -> None:
    obj = _job()  # no labels, no annotations
    guard = guard_of(obj)
    ops = guard_tests(guard) + annotation_ops(guard, {ADMITTED_AT: "now", "x": None}, [])
    assert apply_patch(obj, ops)["metadata"]["annotations"] == {ADMITTED_AT: "now"}
    labelled = _job(labels={"app": "x"})
    with pytest.raises(PatchFailed):  # a labels map appeared: it may name a queue now
        apply_patch(labelled, guard_tests(guard))


def test_annotations_are_added_under_a_map_the_kind_change_created() -> None:
    obj = _job()
    guard = guard_of(obj)
    kind = merge_ops(obj, {"metadata": {"annotations": {"k": "v"}}})
    ops = kind + annotation_ops(guard, {ADMITTED_AT: "now"}, kind)
    assert apply_patch(obj, ops)["metadata"]["annotations"] == {"k": "v", ADMITTED_AT: "now"}
