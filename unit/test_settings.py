"""Flags a user can get dangerously wrong are refused before the controller starts."""

from __future__ import annotations

import pytest

from kubequeue import cli
from kubequeue.settings import Settings


def test_default_lease_timings_are_safe() -> None:
    assert Settings().lease_problem() is None


@pytest.mark.parametrize(
    ("duration", "deadline", "retry"),
    [(10, 10, 2), (10, 12, 2), (15, 10, 10), (15, 10, 0), (0, 0, 0)],
)
def test_a_renew_deadline_not_below_the_lease_duration_is_refused(
    duration: float, deadline: float, retry: float, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        [
            "run",
            f"--lease-duration={duration}",
            f"--renew-deadline={deadline}",
            f"--retry-period={retry}",
        ]
    )
    assert code == 2
    assert "leader election needs 0 < --retry-period" in capsys.readouterr().err


def test_without_leader_election_the_timings_do_not_matter() -> None:
    assert Settings(leader_elect=False, renew_deadline=99).lease_problem() is None


@pytest.mark.parametrize("levels", ["zone,rack please", "example.com/rack,example.com/rack"])
def test_topology_levels_must_be_distinct_node_label_keys(
    levels: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        cli.main(["run", f"--topology-levels={levels}"])
    assert refused.value.code == 2
    assert "--topology-levels" in capsys.readouterr().err
