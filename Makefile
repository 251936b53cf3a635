# nmt-specdec developer entry points. Everything runs inside ./.venv, which
# `make setup` creates on demand, so `make test` works on a fresh clone.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

VENV := .venv
VPY := $(VENV)/bin/python
# The setup stamp is keyed on pyproject.toml: editing the dependencies makes a
# new stamp name, so the next `make setup` reinstalls; otherwise it is a no-op.
PYPROJECT_HASH := $(shell sha256sum pyproject.toml | cut -c1-16)
STAMP := $(VENV)/.setup-$(PYPROJECT_HASH)
# torch is installed on its own first, pinned to the CPU wheel: an unpinned
# torch pulled in by fairseq would be a multi-GB CUDA build. GPU users install
# their CUDA torch before `make setup`; an importable torch is left alone.
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup test quickstart quickstart-train

setup: $(STAMP)

$(STAMP): pyproject.toml
	@if ! { [ -x $(VPY) ] && $(VPY) -c 'import sys; sys.exit(sys.version_info < (3, 11))'; }; then \
	  py=""; \
	  for cand in python3.11 python3.12 python3.13 python3; do \
	    if command -v $$cand >/dev/null && $$cand -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then \
	      py=$$cand; break; \
	    fi; \
	  done; \
	  if [ -z "$$py" ]; then echo "error: Python >= 3.11 not found" >&2; exit 1; fi; \
	  echo "creating $(VENV) with $$py"; \
	  rm -rf $(VENV); $$py -m venv $(VENV); \
	fi
	@$(VPY) -c 'import torch' 2>/dev/null || $(VPY) -m pip install '$(TORCH_SPEC)'
	$(VPY) -m pip install -e '.[dev]'
	@rm -f $(VENV)/.setup-*
	@touch $@

# pytest exits 5 when it collects nothing; that must fail, not pass quietly.
# Test modules are spread over one worker per core (at most 4; pytest-xdist), a
# module's tests staying together so that its fixtures are built once.
test: setup
	$(VPY) -m pytest -q -n auto --maxprocesses 4 --dist loadfile tests

# Decode the gettext test set with a shipped model: MODEL=base (the default,
# models/gettext-de-en-base, Transformer-base) or MODEL=tiny (models/gettext-de-en-tiny).
MODEL ?= base
quickstart: setup
	$(VPY) scripts/quickstart.py --model $(MODEL)

# Train a tiny joint model from scratch on the CPU instead (minutes; it will not translate well).
quickstart-train: setup
	$(VPY) scripts/quickstart.py --train
