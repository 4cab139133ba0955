# capa-py developer entry points. `make run` and `make test` work on a fresh clone on their own:
# both depend on `setup`, which builds .venv once and is a no-op afterwards.

PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' && echo $$p && break; done)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
STATE  ?= .capa/state.db
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (the suite mostly waits on servers and subprocesses, so more workers
# than cores pay off); PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 4
# Options of the controller benchmark (it runs 0, 20 and 200 clusters by default, about 45 minutes), e.g.
# CONTROLLER_BENCH_ARGS="--clusters 0,5 --sync-period 20s" for a quick look, "--store kube-apiserver --clusters 20"
CONTROLLER_BENCH_ARGS ?=
# Options of the scale and AWS-like delay benchmarks, e.g. SCALE_BENCH_ARGS="--quick" DELAY_BENCH_ARGS="--quick"
SCALE_BENCH_ARGS ?=
DELAY_BENCH_ARGS ?=

.PHONY: setup run test lint docs-gen bench localstack-test e2e clean proto peers peer-cluster

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "capa-py needs Python 3.11 or newer on PATH" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: setup
	$(BIN)/capa --state $(STATE) apply -f examples/aws-cluster.yaml --aws-endpoint local
	$(BIN)/capa --state $(STATE) resources --aws-endpoint local

test: setup
	$(BIN)/python -m tests.peers build --optional
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=30 $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check capa_py capa_app resources controllers tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	@site=$$(mktemp -d) && NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir "$$site"; \
		status=$$?; rm -rf "$$site"; exit $$status

# Regenerates the CLI reference, the spec reference and the ctrlkit diagrams in docs/ (tests/docs fails when
# they are stale).
docs-gen: setup
	$(BIN)/python -m capa_app.docsgen

bench: setup
	$(BIN)/python -m benchmarks.startup
	$(BIN)/python -m benchmarks.run
	$(BIN)/python -m benchmarks.store
	$(BIN)/python -m benchmarks.scale $(SCALE_BENCH_ARGS)
	$(BIN)/python -m benchmarks.delays $(DELAY_BENCH_ARGS)
	$(BIN)/python -m benchmarks.controller $(CONTROLLER_BENCH_ARGS)
	$(BIN)/python -m benchmarks.hegel
	$(BIN)/python -m benchmarks.tink_server
	$(BIN)/python -m benchmarks.tink_agent
	$(BIN)/python -m benchmarks.large_bodies

# Regenerates the checked-in gRPC code of the workflow service, and the messages capa serve reads and writes
# (OpenAPI v2, Kubernetes' protobuf bodies), from their protobufs (tests/tinkerbell/test_proto.py and
# tests/apiserver/test_apiserver_proto.py fail when it is stale).
PROTO := capa_py/tinkerbell/proto/workflow.proto
APISERVER_PROTOS := capa_py/apiserver/proto/openapi_v2.proto capa_py/apiserver/proto/kubernetes.proto

proto: setup
	$(BIN)/python -m grpc_tools.protoc -I . \
		--plugin=protoc-gen-mypy=$(BIN)/protoc-gen-mypy --plugin=protoc-gen-mypy_grpc=$(BIN)/protoc-gen-mypy_grpc \
		--python_out=. --grpc_python_out=. --mypy_out=. --mypy_grpc_out=. $(PROTO)
	$(BIN)/python -m grpc_tools.protoc -I . --plugin=protoc-gen-mypy=$(BIN)/protoc-gen-mypy \
		--python_out=. --mypy_out=. $(APISERVER_PROTOS)

# LocalStack runs without Docker only on Python 3.13: found on PATH or through pyenv, or named here.
LOCALSTACK_PYTHON ?=

localstack-test: setup
	LOCALSTACK_PYTHON="$(LOCALSTACK_PYTHON)" bash localstack/run-tests.sh $(PYTEST_ARGS)

# The upstream peers (etcd, kube-apiserver, kube-controller-manager from tests/peers; Cluster API's manager and
# clusterctl from tests/peers/capi), built with Go into a cache outside the repository ($$CAPA_PEERS_CACHE, else
# ~/.cache/capa-py/peers), once per version. `make test` builds them first when the cache lacks them (and only
# says so where Go is missing).
# `make peer-cluster KUBECONFIG_OUT=PATH` runs a real API server in the foreground until Ctrl-C, with an
# admin kubeconfig at PATH.
peers: setup
	$(BIN)/python -m tests.peers build

peer-cluster: setup
	@test -n "$(KUBECONFIG_OUT)" || { echo "usage: make peer-cluster KUBECONFIG_OUT=PATH" >&2; exit 2; }
	$(BIN)/python -m tests.peers cluster --kubeconfig-out "$(KUBECONFIG_OUT)"

# The end-to-end tests; with KUBECONFIG set, also the controller against that cluster
# (tests/e2e/test_against_cluster.py). `make e2e KUBECONFIG=path` names one explicitly.
e2e: setup
	CAPA_E2E_KUBECONFIG="$(KUBECONFIG)" $(BIN)/python -m pytest -q -m slow tests $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .venv-localstack .capa .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
