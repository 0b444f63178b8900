# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build of torch where no NVIDIA driver is present; otherwise the user's (PyPI default) build.
TORCH_SPEC ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo torch || echo torch==2.13.0)
DEMO_ARGS ?=

.PHONY: install demo demo-pilotrl test clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check "$(TORCH_SPEC)"
	$(PY) -m pip install -q --disable-pip-version-check -e ".[test]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/coalign demo $(DEMO_ARGS)

demo-pilotrl: install
	$(VENV)/bin/coalign demo pilotrl $(DEMO_ARGS)

test: install
	$(VENV)/bin/python -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache
