"""Admission-core benchmark (issue 6): the real decode, cache, queue, fit and admission cycle,
driven by a seeded synthetic cluster fed as raw watch-event lines, with no API server.

Run it with ``python -m bench`` (``--quick`` for a few-second smoke run); docs/benchmarks.md has
the commands and the results.
"""
