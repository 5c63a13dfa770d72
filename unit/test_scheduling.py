import msgspec
import pytest

from kubequeue.objects import PodSpec, Taint, Toleration
from kubequeue.scheduling import constraints_of, tolerates


def constraints(**spec):
    return constraints_of(msgspec.convert(spec, PodSpec))


def affinity(*exprs):
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]
            }
        }
    }


NOSCHED = Taint(key="gpu", value="true", effect="NoSchedule")


@pytest.mark.parametrize(
    ("spec", "labels", "taints", "allowed"),
    [
        pytest.param({}, {}, (), True, id="no-constraints-untainted"),
        pytest.param({}, {}, (NOSCHED,), False, id="untolerated-NoSchedule"),
        pytest.param(
            {},
            {},
            (Taint(key="x", effect="PreferNoSchedule"),),
            True,
            id="PreferNoSchedule-is-soft",
        ),
        pytest.param(
            {"tolerations": [{"key": "gpu", "operator": "Exists"}]},
            {},
            (NOSCHED,),
            True,
            id="exists-toleration",
        ),
        pytest.param(
            {"tolerations": [{"key": "gpu", "value": "false"}]},
            {},
            (NOSCHED,),
            False,
            id="equal-toleration-wrong-value",
        ),
        pytest.param(
            {"tolerations": [{"operator": "Exists"}]},
            {},
            (NOSCHED,),
            True,
            id="tolerate-everything",
        ),
        pytest.param(
            {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}]},
            {},
            (NOSCHED,),
            False,
            id="toleration-wrong-effect",
        ),
        pytest.param({"nodeSelector": {"zone": "a"}}, {"zone": "a"}, (), True, id="selector-match"),
        pytest.param({"nodeSelector": {"zone": "a"}}, {"zone": "b"}, (), False, id="selector-miss"),
        pytest.param(
            {"affinity": affinity({"key": "zone", "operator": "In", "values": ["a", "b"]})},
            {"zone": "b"},
            (),
            True,
            id="In",
        ),
        pytest.param(
            {"affinity": affinity({"key": "zone", "operator": "NotIn", "values": ["a"]})},
            {"zone": "a"},
            (),
            False,
            id="NotIn",
        ),
        pytest.param(
            {"affinity": affinity({"key": "zone", "operator": "NotIn", "values": ["a"]})},
            {},
            (),
            True,
            id="NotIn-absent-label",
        ),
        pytest.param(
            {"affinity": affinity({"key": "gpu", "operator": "Exists"})},
            {"gpu": ""},
            (),
            True,
            id="Exists",
        ),
        pytest.param(
            {"affinity": affinity({"key": "gpu", "operator": "DoesNotExist"})},
            {"gpu": ""},
            (),
            False,
            id="DoesNotExist",
        ),
        pytest.param(
            {"affinity": affinity({"key": "mem", "operator": "Gt", "values": ["64"]})},
            {"mem": "128"},
            (),
            True,
            id="Gt",
        ),
        pytest.param(
            {"affinity": affinity({"key": "mem", "operator": "Lt", "values": ["64"]})},
            {"mem": "128"},
            (),
            False,
            id="Lt",
        ),
    ],
)
def test_node_filters(spec, labels, taints, allowed) -> None:
    assert constraints(**spec).allows("n1", labels, taints) is allowed


def test_terms_are_ored_expressions_are_anded() -> None:
    c = constraints(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "zone", "operator": "In", "values": ["a"]},
                                {"key": "gpu", "operator": "Exists"},
                            ]
                        },
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                    ]
                }
            }
        }
    )
    assert c.allows("n", {"zone": "a", "gpu": "1"}, ())
    assert not c.allows("n", {"zone": "a"}, ())
    assert c.allows("n", {"zone": "b"}, ())


def test_match_fields_on_node_name() -> None:
    c = constraints(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["n2"]}
                            ]
                        }
                    ]
                }
            }
        }
    )
    assert c.allows("n2", {}, ())
    assert not c.allows("n1", {}, ())


def test_equal_constraints_are_equal_and_hashable() -> None:
    a = constraints(nodeSelector={"a": "1", "b": "2"})
    b = constraints(nodeSelector={"b": "2", "a": "1"})
    assert a == b
    assert hash(a) == hash(b)


def test_tolerates_empty_effect_matches_all_effects() -> None:
    assert tolerates([Toleration(key="gpu", operator="Exists")], NOSCHED)
