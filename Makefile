# The two commands of the README, and what they need. Safe to run twice.
#   make local   plan the local stack (the local processes arrive with issue 4)
#   make test    everything in tests/ (what .ci/run runs)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# checkov has many dependencies of its own: it lives in a separate environment.
TOOLS := .venv-tools
PYTEST_ARGS ?=

.PHONY: local test bench docs venv clean

venv: $(VENV)/.installed $(TOOLS)/.installed

# Reinstalled whenever the pins change; pip itself is pinned too.
$(VENV)/.installed: pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
	  { echo "tenantry needs Python 3.11; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null || scripts/ensure-debian-packages.sh python3-venv
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check pip==25.3
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[test,deploy]'
	touch $@

$(TOOLS)/.installed: requirements-tools.lock
	test -x $(TOOLS)/bin/python || $(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check pip==25.3
	$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-tools.lock
	touch $@

local: venv
	$(BIN)/tenantry plan stacks/local.yaml
	@echo
	@echo "The plan above is what the local stack will run. Starting it (vLLM CPU engines, LiteLLM, PostgreSQL,"
	@echo "Redis and Prometheus on 127.0.0.1) is not built yet: see the README's 'Status' section."

test: venv
	$(BIN)/pytest $(PYTEST_ARGS)

bench: venv
	$(BIN)/python benchmarks/plan_scale.py
	$(BIN)/python benchmarks/render.py

# Regenerate the README's spec reference after changing tenantry/spec/schema.py.
docs: venv
	$(BIN)/python -m tenantry.docs

clean:
	rm -rf $(VENV) $(TOOLS) .pytest_cache .hypothesis *.egg-info
