"""The fault campaign (issue 13): an independent invariant checker, a fault-injecting TCP proxy,
and seeded fault scenarios run against the real local control plane and the real controller.
``python -m e2e.chaos`` (``make chaos``) runs the campaign; e2e/test_chaos.py a short version."""
