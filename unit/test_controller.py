"""controller.py: the pools are sized for what it runs, and it wires up and shuts down cleanly
against a local API server."""

from __future__ import annotations

from typing import Any

import pytest

from kubequeue.controller import Controller, pool_limits, watch_count
from kubequeue.settings import Settings


@pytest.mark.parametrize(
    "settings",
    [
        Settings(),
        Settings(kinds=("job", "tfjob", "rayjob")),
        Settings(kinds=("job", "workflow"), namespaces=("a", "b", "c")),
        Settings(kinds=("job", "job")),
    ],
)
def test_the_watch_pool_has_a_connection_for_every_informer(settings: Settings) -> None:
    client: Any = object()
    informers = Controller(settings, client).informers
    assert watch_count(settings) == len(informers)
    assert pool_limits(settings).watches > len(informers)


def test_sixty_watched_kind_namespace_pairs_get_their_own_connections() -> None:
    settings = Settings(
        kinds=("job", "tfjob", "pytorchjob"), namespaces=tuple("abcdefghijklmnopqrst")
    )
    limits = pool_limits(settings)
    assert watch_count(settings) == 63
    assert limits.watches >= 63
    assert limits.requests >= settings.max_inflight
    assert limits.lease >= 1
