# kube-queue developer entry points. Everything runs from a local virtualenv (.venv) and, for the
# cluster, binaries built once from pinned Go modules into ~/.cache/kube-queue/bin.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
IMAGE ?= kube-queue:dev

.PHONY: help venv cluster-binaries run test unit e2e lint image bench bench-e2e chaos clean

help:
	@echo "make run     - local cluster with fake GPU nodes + controller + example jobs (or the cluster in \$$KUBECONFIG)"
	@echo "make test    - unit tests + e2e tests against a real local control plane"
	@echo "make unit    - unit tests only (no cluster)"
	@echo "make e2e     - e2e tests only (E2E_CLUSTER=kind to use your kind cluster)"
	@echo "make lint    - ruff, mypy --strict, import layering (lint-imports), helm lint"
	@echo "make bench   - admission-core benchmark (prints numbers; BENCH_ARGS=--scale for 10x, --huge for 65k nodes, --giant for 130k, --pin)"
	@echo "make bench-e2e - end-to-end benchmark on the local cluster, kube-queue and Kueue side by side (BENCH_E2E_ARGS=...)"
	@echo "make chaos   - fault campaign + scale soak on the local cluster, judged by an independent checker (CHAOS_ARGS=...)"
	@echo "make image   - build the container image with podman or docker"

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,lint]'
	touch $(STAMP)

venv: $(STAMP)

cluster-binaries: $(STAMP)
	$(PY) -m e2e.cluster build

run: $(STAMP)
ifdef KUBECONFIG
	$(VENV)/bin/kube-queue run --kubeconfig "$(KUBECONFIG)" --log-format console
else
	$(PY) -m e2e.demo
endif

# Unit tests are independent of each other: one worker per core (pytest-xdist). The e2e tests
# share one local cluster and the controller's Lease, so they run in one process.
test: $(STAMP) cluster-binaries
	$(PY) -m pytest -n auto unit
	$(PY) -m pytest e2e

unit: $(STAMP)
	$(PY) -m pytest -n auto unit

e2e: $(STAMP) cluster-binaries
	$(PY) -m pytest e2e

lint: $(STAMP) cluster-binaries
	$(VENV)/bin/ruff check src unit e2e bench
	$(VENV)/bin/ruff format --check src
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$$($(PY) -c 'from e2e.cluster.build import ensure_binaries; print(ensure_binaries().helm)') lint helm/kube-queue

# BENCH_ARGS=--scale: 20,000 nodes / 200,000 pods / 100,000 queued jobs (~11 min); --quick: seconds.
BENCH_ARGS ?=
bench: $(STAMP)
	$(PY) -m bench $(BENCH_ARGS)

# Long (tens of minutes with every scenario and Kueue; Kueue is built on first use). Not part of
# `make test`. Narrow it with e.g. BENCH_E2E_ARGS='--scenarios backlog --systems kube-queue'.
BENCH_E2E_ARGS ?=
bench-e2e: $(STAMP) cluster-binaries
	$(PY) -m bench.e2e $(BENCH_E2E_ARGS)

# The fault campaign of docs/reliability.md: every fault, 3 seeds, plus the scale soak (500 nodes,
# 5,000 jobs); about 40 min on 2 cores. `make test` runs each fault once on a small burst.
# Narrow it with e.g. CHAOS_ARGS='--faults leader-cutoff --runs 5' or CHAOS_ARGS='--faults ""
# --scale'.
CHAOS_ARGS ?= --runs 3 --jobs 60 --scale
chaos: $(STAMP) cluster-binaries
	$(PY) -m e2e.chaos $(CHAOS_ARGS)

image:
	@if command -v podman >/dev/null; then podman build -f Containerfile -t $(IMAGE) .; \
	else docker build -f Containerfile -t $(IMAGE) .; fi

clean:
	rm -rf $(VENV) .cluster .pytest_cache .mypy_cache .ruff_cache
