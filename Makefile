# dralloc — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
## WORKERS: pytest-xdist workers of `make test`; each starts control planes of its own
WORKERS ?= 2

.PHONY: test deps docs testbed image lint unit e2e matrix crds chart-files demo bench robustness celdiff upstream-table clean

## test: install everything the tests need (Python deps, testbed binaries), lint, then run every test
## (lint failures do not hide test results: both run, either one fails the target)
test: deps testbed
	@lint=0; $(MAKE) --no-print-directory lint || lint=$$?; \
	$(BIN)/pytest -n $(WORKERS) --dist loadscope --no-loadscope-reorder --durations=15; tests=$$?; \
	if [ $$lint -ne 0 ]; then echo "lint failed (see above)"; fi; \
	if [ $$tests -ne 0 ] || [ $$lint -ne 0 ]; then exit 1; fi

## deps: the project's virtualenv with the package and its dev tools
deps: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

## testbed: build (or reuse from the cache outside the repo) the control-plane binaries, the real
## nodes' parts, the operator image, the benchmarks' Go harnesses (their smoke tests run them) and
## helm (for the chart's tests). On a developer machine a failed build does not stop the run: the
## tests that need it then skip and print why. With CI=true (as CI runs) a failed build fails the
## target, and tests/conftest.py turns any skip for a missing build into a failure.
TESTBED_BUILDS := testbed/build testbed/image bench/upstream/build bench/celdiff/build \
	tests/conformance/upstream_table/build testbed/helm
testbed:
	@failed=""; for build in $(TESTBED_BUILDS); do \
	  $$build || failed="$$failed $$build"; \
	done; \
	if [ -n "$$failed" ]; then \
	  echo "build failed:$$failed"; \
	  if [ "$$CI" = "true" ]; then exit 1; fi; \
	  echo "(not CI: the tests that need them skip and say why)"; \
	fi

## image: the operator image from the Dockerfile, with buildah on a locally made Debian base (no
## Docker, no registry; cached outside the repo). Last stdout line: `<ref> <OCI archive path>`.
image:
	testbed/image

lint: deps
	$(BIN)/ruff check operators tests bench robustness scripts
	$(BIN)/ruff format --check operators tests bench robustness scripts
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/mkdocs build --strict --quiet

## docs: the documentation site (README.md is the landing page; docs/ the rest) into .site/
docs: deps
	$(BIN)/mkdocs build --strict

unit: deps
	$(BIN)/pytest tests/unit tests/conformance

e2e: deps testbed
	$(BIN)/pytest tests/e2e

## matrix: the version matrix, not part of `test`: for Kubernetes 1.34-1.37 build that version's
## testbed (testbed/build --k8s MINOR; about 7 min each when cold) and run the whole e2e suite
## (but the real-node tests) in both API modes against it; prints the table (testbed/matrix).
## MATRIX_VERSIONS=1.36,1.37, MATRIX_TESTS="tests/e2e/test_x.py ..." and MATRIX_SUBSET=1 (the
## four files of testbed/matrix's SUBSET) narrow it.
matrix: deps
	DRALLOC_PYTEST=$(BIN)/pytest testbed/matrix $(if $(MATRIX_VERSIONS),--versions $(MATRIX_VERSIONS)) $(if $(MATRIX_SUBSET),--subset) $(if $(MATRIX_TESTS),--tests $(MATRIX_TESTS))

## demo: a local control plane, the operator and manifests/examples; prints the allocations.
## Tear down with `scripts/demo down`. `make demo REAL_NODE=1`: the operator in-cluster from its
## image on a real node (kubelet, containerd, upstream's DRA test driver; needs root), see
## scripts/demo-real-node; tear down with `scripts/demo-real-node down`.
demo: deps
	$(if $(REAL_NODE),scripts/demo-real-node,scripts/demo)

## crds: regenerate crds/ from operators/api, and the chart's copy (charts/dralloc/files/crds)
crds: deps
	$(BIN)/python -m operators.api.crdgen crds/
	$(BIN)/python -m operators.api.crdgen charts/dralloc/files/crds/

## chart-files: the chart's copies of manifests/monitoring's PrometheusRule and dashboard
## (charts/dralloc/files/monitoring; Helm reads no file outside the chart; a unit test checks)
chart-files:
	cp manifests/monitoring/prometheusrule.yaml manifests/monitoring/dralloc-dashboard.json charts/dralloc/files/monitoring/

## robustness: seeded runs with random faults, the whole history checked (robustness/, not a
## test); ROBUSTNESS_ARGS="--mode in-tree --seeds 1-8 --duration 240" for a long run
robustness: deps testbed
	$(BIN)/python -m robustness $(ROBUSTNESS_ARGS)

## bench: every benchmark (engine vs upstream Go allocator, end to end vs in-tree DRA); not a test
bench: deps testbed
	$(BIN)/python -m bench

## upstream-table: the port of upstream's allocator table run through another version of upstream's
## allocator (DRA_VERSION=v0.38.0): the failures are the cases that version answers otherwise
upstream-table: deps
	@test -n "$(DRA_VERSION)" || { echo "usage: make upstream-table DRA_VERSION=v0.38.0" >&2; exit 2; }
	@work=$$(mktemp -d) && trap 'rm -rf "$$work"' EXIT && \
	cp tests/conformance/upstream_table/main.go tests/conformance/upstream_table/go.mod \
	  tests/conformance/upstream_table/go.sum "$$work"/ && \
	(cd "$$work" && go get k8s.io/dynamic-resource-allocation@$(DRA_VERSION) && go mod tidy) && \
	binary=$$(bench/gobuild "$$work" upstream-table | tail -1) && \
	DRALLOC_UPSTREAM_TABLE=$$binary $(BIN)/pytest -q -p no:cacheprovider \
	  tests/conformance/test_allocator_table_upstream.py

## celdiff: the CEL differential test, dralloc vs upstream's DRA CEL on random selectors (not a
## test: it prints mismatches by category; CELDIFF_ARGS="--cases 500 --seed 3" to vary it)
celdiff: deps
	$(BIN)/python -m bench celdiff $(CELDIFF_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
