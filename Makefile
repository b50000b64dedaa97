# The two commands of the README, and what they need. Safe to run twice.
#   make local   install what is missing, start the local stack, one request per tenant
#   make test    everything in tests/, tests/local beside the rest (tests/lanes.py; what .ci/run runs)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# checkov and vLLM each bring many dependencies of their own: separate environments.
TOOLS := .venv-tools
VLLM := .venv-vllm
# Ansible and ansible-lint pin their own Jinja2, PyYAML and cryptography: a third environment.
ANSIBLE := .venv-ansible
# network-config-analyzer pins its PyYAML, networkx and lxml exactly: a fourth (tenantry/manifests/connectivity.py).
NCA := .venv-nca
# mmdebstrap, podman and runc build and boot the throwaway node tests/ansible/ hardens; qemu and mkfs.ext4 boot its
# hardened tree with its own kernel (tests/ansible/vm.py).
DEBIAN_PACKAGES := postgresql redis-server prometheus prometheus-alertmanager nodejs:node npm:npm chromium \
  mmdebstrap podman runc procps:pgrep qemu-system-x86:qemu-system-x86_64 e2fsprogs:mkfs.ext4
PYTEST_ARGS ?=

.PHONY: local test bench docs venv environments system freeze-vllm clean

ENVIRONMENTS := $(VENV)/.installed $(TOOLS)/.installed $(VLLM)/.installed $(ANSIBLE)/.installed $(NCA)/.installed

# The five environments install two at a time (pip spends much of its time unpacking and compiling, one core each):
# benchmarks/install.py measures it against one at a time.
venv: system
	@$(MAKE) --no-print-directory -j2 environments

environments: $(ENVIRONMENTS)

system:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
	  { echo "tenantry needs Python 3.11; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	@scripts/ensure-debian-packages.sh $(DEBIAN_PACKAGES)
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null || scripts/ensure-debian-packages.sh python3-venv

# Reinstalled whenever the pins change; pip itself is pinned too.
$(VENV)/.installed: pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check pip==25.3
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[test,deploy,gateway,local,gate]'
	touch $@

$(TOOLS)/.installed: requirements-tools.lock
	test -x $(TOOLS)/bin/python || $(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check pip==25.3
	$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-tools.lock
	touch $@

$(ANSIBLE)/.installed: requirements-ansible.lock
	test -x $(ANSIBLE)/bin/python || $(PYTHON) -m venv $(ANSIBLE)
	$(ANSIBLE)/bin/python -m pip install --quiet --disable-pip-version-check pip==25.3
	$(ANSIBLE)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-ansible.lock
	touch $@

$(NCA)/.installed: requirements-nca.lock
	test -x $(NCA)/bin/python || $(PYTHON) -m venv $(NCA)
	$(NCA)/bin/python -m pip install --quiet --disable-pip-version-check pip==25.3
	$(NCA)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-nca.lock
	touch $@

# torch comes from PyTorch's CPU wheels (pip finds them through its configured
# indexes or find-links; elsewhere set PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu).
$(VLLM)/.installed: requirements-vllm.lock
	test -x $(VLLM)/bin/python || $(PYTHON) -m venv $(VLLM)
	$(VLLM)/bin/python -m pip install --quiet --disable-pip-version-check pip==25.3
	$(VLLM)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-vllm.lock
	touch $@

local: venv
	$(BIN)/tenantry local up stacks/local.yaml
	$(BIN)/tenantry local smoke

test: venv
	$(BIN)/python -m tests.lanes $(PYTEST_ARGS)

bench: venv
	$(PYTHON) benchmarks/install.py
	$(BIN)/python benchmarks/plan_scale.py
	$(BIN)/python benchmarks/render.py
	$(BIN)/python benchmarks/local_up.py
	$(BIN)/python benchmarks/gateway_policy.py
	$(BIN)/python benchmarks/front_door.py
	$(BIN)/python benchmarks/noisy_neighbour.py
	$(BIN)/python benchmarks/request_size.py
	$(BIN)/python benchmarks/spot_frontier.py
	$(BIN)/python benchmarks/gateway_soak.py --minutes 10

# Regenerate docs/platform.md's spec reference after changing the spec's models (tenantry/spec/).
docs: venv
	$(BIN)/python -m tenantry.docs

freeze-vllm:
	$(VLLM)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec || true
	{ head -3 requirements-vllm.lock; $(VLLM)/bin/pip freeze | grep -v '^-e'; } > requirements-vllm.lock.new
	mv requirements-vllm.lock.new requirements-vllm.lock

clean:
	rm -rf $(VENV) $(TOOLS) $(VLLM) $(ANSIBLE) .pytest_cache .hypothesis *.egg-info
