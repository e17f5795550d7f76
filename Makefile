# The two commands in README.md are the contract: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export BELAY_CACHE ?= $(HOME)/.cache/belay

.PHONY: setup demo test lint typecheck bench crds testenv-build testenv-up testenv-down kind-demo clean

# Local sandboxes need bubblewrap, the report test Chromium: installed here as root, or named as
# missing otherwise.
setup: $(VENV)/.installed
	@bash hack/install-sandbox-tools.sh
	@bash hack/install-report-tools.sh

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,openai,anthropic]'
	touch $@

# The main job: a real session on the embedded default, then its briefing, then the drill.
demo: setup
	$(BIN)/belay run examples/parser-fix/session.yaml
	$(BIN)/belay brief parser-fix
	$(BIN)/belay drill examples/parser-fix/session.yaml

# The manifests too: helm lint --strict, and kubeconform over the rendered chart and the examples
# (hack/kubeconform.sh builds helm and kubeconform first on a fresh machine).
lint: setup
	$(BIN)/ruff check operator tests bench
	$(BIN)/ruff format --check operator tests bench
	$(BIN)/lint-imports --no-cache
	@unformatted=$$(PATH="$$PATH:/usr/local/go/bin" gofmt -l hack/tools); \
	  if [ -n "$$unformatted" ]; then echo "not gofmt-formatted: $$unformatted"; exit 1; fi
	PYTHON=$(BIN)/python bash hack/kubeconform.sh

typecheck: setup
	$(BIN)/mypy

# Builds (or reuses from $(BELAY_CACHE)) the real components the tests start on loopback.
testenv-build:
	bash hack/build-all.sh

testenv-up: setup testenv-build
	$(BIN)/python -m tests.testenv up

testenv-down: setup
	$(BIN)/python -m tests.testenv down

# For a machine with a registry: the example session on a kind cluster (docs/quickstart-kind.md).
kind-demo:
	bash hack/kind-demo.sh

# The builds (hack/build-all.sh) beside every test but the node's, then the node's tests alone: see
# hack/run-tests.sh. A pytest run that collected nothing (exit 5) is a failure, never a pass.
test: setup lint typecheck
	bash hack/run-tests.sh

# The benchmarks' own extra (LangGraph, measured side by side with Belay) goes into the same
# .venv, but only here: setup and the tests never install it.
bench: setup testenv-build $(VENV)/.bench-installed
	$(BIN)/python -m bench

$(VENV)/.bench-installed: pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,openai,anthropic,bench]'
	touch $@

crds: setup
	$(BIN)/python -m belay.api.generate

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
