import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubequeue.objects import PodSpec, Taint, Toleration
from kubequeue.scheduling import ConstraintError, constraints_of, tolerates


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


# ------------------------------------------------- requirements the scheduler cannot build
# component-helpers nodeaffinity: a term whose labels.NewRequirement fails has parseErrs and
# matches no node. NewRequirement parses Gt/Lt values with strconv.ParseInt(v, 10, 64) and
# checks every value with IsValidLabelValue; Requirement.Matches parses the node's label the
# same way and is false when that fails.
def expr(key: str, operator: str, values: list[str] | None = None) -> dict:
    found: dict = {"key": key, "operator": operator}
    if values is not None:
        found["values"] = values
    return found


@pytest.mark.parametrize(
    ("requirement", "label", "allowed"),
    [
        (expr("n", "Gt", ["1_0"]), "11", False),  # Python int() took "1_0" as 10
        (expr("n", "Gt", ["1_0"]), "1_0", False),
        (expr("n", "Gt", ["+5"]), "6", False),  # ParseInt takes "+5", the label check does not
        (expr("n", "Lt", [" 5"]), "4", False),
        (expr("n", "Gt", ["99999999999999999999"]), "99999999999999999999", False),
        (expr("n", "Lt", ["99999999999999999999"]), "1", False),
        (expr("n", "Gt", ["-3"]), "1", False),  # a label value cannot start with "-"
        (expr("n", "Gt", ["abc"]), "1", False),  # was a ConstraintError; the API server takes it
        (expr("n", "Gt", ["007"]), "8", True),
        (expr("n", "Gt", ["007"]), "7", False),
        (expr("n", "Lt", ["9223372036854775807"]), "9223372036854775806", True),
        (expr("n", "Gt", ["5"]), "007", True),  # node label values parse the same way
        (expr("n", "Gt", ["5"]), "1_0", False),
        (expr("n", "Gt", ["5"]), "99999999999999999999", False),
        (expr("n", "Gt", ["5"]), "+9", True),
        (expr("n", "Lt", ["5"]), "-9", True),
        (expr("n", "Gt", ["5"]), None, False),
        (expr("zone", "In", ["a b"]), "a b", False),  # not a label value: the term is void
        (expr("zone", "NotIn", ["a b"]), "c", False),  # ... even for NotIn
        (expr("zone", "NotIn", ["a b"]), None, False),
        (expr("zone", "NotIn", ["a", "x" * 64]), "b", False),
        (expr("zone", "NotIn", ["a", "x" * 63]), "b", True),
        (expr("zone", "In", ["", "a"]), "", True),  # the empty string is a label value
    ],
)
def test_a_requirement_the_scheduler_cannot_build_matches_no_node(
    requirement: dict, label: str | None, allowed: bool
) -> None:
    labels = {} if label is None else {requirement["key"]: label}
    assert constraints(affinity=affinity(requirement)).allows("n1", labels, ()) is allowed


def test_a_void_term_leaves_the_other_terms_alone() -> None:
    c = constraints(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [expr("n", "Gt", ["1_0"])]},
                        {"matchExpressions": [expr("zone", "In", ["a"])]},
                    ]
                }
            }
        }
    )
    assert c.allows("n1", {"zone": "a", "n": "99"}, ())
    assert not c.allows("n1", {"zone": "b", "n": "99"}, ())


# ValidateNodeSelectorRequirement / ValidateNodeFieldSelectorRequirement: the API server
# refuses these, so they stay ConstraintErrors.
@pytest.mark.parametrize(
    ("term", "message"),
    [
        ({"matchExpressions": [expr("zone", "In", [])]}, "at least one value"),
        ({"matchExpressions": [expr("zone", "NotIn")]}, "at least one value"),
        ({"matchExpressions": [expr("gpu", "Exists", ["a"])]}, "takes no values"),
        ({"matchExpressions": [expr("gpu", "DoesNotExist", [""])]}, "takes no values"),
        ({"matchExpressions": [expr("n", "Gt", ["1", "2"])]}, "exactly one value"),
        ({"matchExpressions": [expr("n", "Lt")]}, "exactly one value"),
        ({"matchExpressions": [expr("", "Exists")]}, "not a valid label key"),
        ({"matchExpressions": [expr("a/b/c", "Exists")]}, "not a valid label key"),
        ({"matchExpressions": [expr("Example.com/x", "Exists")]}, "not a valid label key"),
        ({"matchExpressions": [expr("x" * 64, "Exists")]}, "not a valid label key"),
        ({"matchExpressions": [expr("zone", "Near", ["a"])]}, "operator 'Near'"),
        ({"matchFields": [expr("metadata.name", "Exists")]}, "In or NotIn"),
        ({"matchFields": [expr("metadata.name", "In", ["a", "b"])]}, "exactly one value"),
        ({"matchFields": [expr("metadata.name", "In", ["Node_1"])]}, "not a valid node name"),
        ({"matchFields": [expr("metadata.uid", "In", ["a"])]}, "only metadata.name"),
    ],
)
def test_what_the_api_server_refuses_is_a_constraint_error(term: dict, message: str) -> None:
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    }
    with pytest.raises(ConstraintError, match=message):
        constraints(**spec)


# ------------------------------------------------- property: the Go rules, written out plainly
_INT64 = (-(2**63), 2**63 - 1)
_ALNUM = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def go_parse_int(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64): optional sign, ASCII digits, in range."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or any(ch not in "0123456789" for ch in digits):
        return None
    value = int(digits) * (-1 if text[:1] == "-" else 1)
    return value if _INT64[0] <= value <= _INT64[1] else None


def go_label_value(text: str) -> bool:
    """validation.IsValidLabelValue: empty, or <= 63 alphanumerics, '-', '_', '.' inside."""
    if text == "":
        return True
    if len(text) > 63 or text[0] not in _ALNUM or text[-1] not in _ALNUM:
        return False
    return all(ch in _ALNUM or ch in "-_." for ch in text)


def reference_allows(operator: str, values: list[str], label: str | None) -> bool | str:
    """One matchExpression on key "k": "refused" by the API server, else whether it matches."""
    counts_ok = {
        "In": len(values) > 0,
        "NotIn": len(values) > 0,
        "Exists": len(values) == 0,
        "DoesNotExist": len(values) == 0,
        "Gt": len(values) == 1,
        "Lt": len(values) == 1,
    }
    if not counts_ok[operator]:
        return "refused"
    builds = all(go_label_value(v) for v in values)
    if operator in ("Gt", "Lt"):
        builds = builds and go_parse_int(values[0]) is not None
    if not builds:
        return False
    if operator == "In":
        return label is not None and label in values
    if operator == "NotIn":
        return label is None or label not in values
    if operator == "Exists":
        return label is not None
    if operator == "DoesNotExist":
        return label is None
    have = None if label is None else go_parse_int(label)
    if have is None:
        return False
    want = go_parse_int(values[0])
    assert want is not None
    return have > want if operator == "Gt" else have < want


_numberish = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.text(alphabet="0123456789+-_ .abcA", max_size=22),
    st.sampled_from(["007", "+5", " 5", "1_0", "-3", "", "9223372036854775808", "x" * 64]),
)


@settings(max_examples=600, deadline=None)
@given(
    operator=st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
    values=st.lists(_numberish, max_size=3),
    label=st.none() | _numberish,
)
def test_matches_a_reference_of_the_go_rules(
    operator: str, values: list[str], label: str | None
) -> None:
    expected = reference_allows(operator, values, label)
    requirement = expr("k", operator, values)
    if expected == "refused":
        with pytest.raises(ConstraintError):
            constraints(affinity=affinity(requirement))
        return
    labels = {} if label is None else {"k": label}
    assert constraints(affinity=affinity(requirement)).allows("n1", labels, ()) is expected


def test_small_constraints_are_one_shared_object_and_big_ones_are_not_kept() -> None:
    """Every queued job holds its constraints: equal small ones are shared; a huge one (any user
    can write one) is not kept by the table that outlives its job."""
    small = {"nodeSelector": {"zone": "a"}, "tolerations": [{"key": "k", "operator": "Exists"}]}
    a = constraints_of(msgspec.convert(small, PodSpec))
    assert constraints_of(msgspec.convert(small, PodSpec)) is a
    values = [f"v{i}" for i in range(100)]
    term = {"matchExpressions": [{"key": "k", "operator": "In", "values": values}]}
    big = {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}}
    first = constraints_of(msgspec.convert(big, PodSpec))
    again = constraints_of(msgspec.convert(big, PodSpec))
    assert again == first and again is not first
