# Two commands set everything up on a fresh machine:
#   make demo   install into .venv (with the plots extra), then run the main job (train -> evaluate -> save -> search)
#   make test   install into .venv with the [dev] extra, then run the whole test suite
#   make test-min   the same suite in .venv-min, at the lowest versions pyproject.toml admits (constraints-min.txt),
#                   with the CPU's vector units held at SSE level: CI runs two numeric paths (pytest's header
#                   prints the level in force, so a red run says whether the floors or the numerics failed); the
#                   tests marked `once` (the demo's full run) are left to make test
#   make test-avx2  the tests marked `numerics` (orders and equalities of computed floats) at AVX2 level: CI's third
#                   numeric path, for machines whose own level is AVX-512
#   make test-fast  everything but the tests marked `slow`: the quick loop while developing (DEVELOPERS.md)
# Both are idempotent: a second run reuses .venv and only reinstalls when pyproject.toml changed.
# The generated card of the reference model in model_cards/ is refreshed with:
#   make model-cards   run the demo, then copy the card it wrote (results table, citation, training run and its curves)

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
VENV_MIN ?= .venv-min
BIN_MIN := $(VENV_MIN)/bin
# make test runs at the CPU's own vector level (AVX-512 or AVX2); make test-min holds torch's kernels, oneDNN and MKL
# (Intel CPUs only) at SSE level.
VECTOR_LEVEL_MIN ?= ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 MKL_ENABLE_INSTRUCTIONS=SSE4_2
VECTOR_LEVEL_AVX2 ?= ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
# pytest-xdist: one worker per core, each taking whole test files (a module's fixtures are built once), the files
# that hold slow tests handed out first (tests/conftest.py); each worker runs every library's thread pool on one thread.
PYTEST_WORKERS ?= -n auto --dist loadfile
# Where the environment turns bytecode caching off, every worker and every interpreter a test starts would compile
# hf_atr and rewrite the test modules anew.
unexport PYTHONDONTWRITEBYTECODE
# torch first, pinned: here it is a local CPU wheel; letting pip resolve torch itself pulls CUDA builds.
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo model-cards test test-min test-avx2 test-fast install install-dev lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.torch: | $(BIN)/python
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch
	$(BIN)/pip install --quiet -e ".[plots]"
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

# The declared floors: every runtime dependency at the version constraints-min.txt pins. `-c` makes pip fail
# (ResolutionImpossible) rather than install a newer version when something needs one.
$(VENV_MIN)/.installed-min: pyproject.toml constraints-min.txt
	$(PYTHON) -m venv $(VENV_MIN)
	$(BIN_MIN)/python -m pip install --quiet --upgrade pip
	$(BIN_MIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN_MIN)/pip install --quiet -c constraints-min.txt -e ".[dev]"
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

demo: install
	$(BIN)/hf-atr demo --output-dir outputs/demo

model-cards: demo
	mkdir -p model_cards/demo-contrastive
	cp outputs/demo/model/README.md outputs/demo/model/training_curves.png model_cards/demo-contrastive/

# Not -q: pytest's header names the vector level in force (tests/vector_level.py).
test: install-dev
	$(BIN)/python -m pytest $(PYTEST_WORKERS)

# The tests marked `once` (the demo's full run, whose figures README quotes from make test's setting) run in make test.
test-min: $(VENV_MIN)/.installed-min
	$(VECTOR_LEVEL_MIN) $(BIN_MIN)/python -m pytest -m "not once" $(PYTEST_WORKERS)

test-avx2: install-dev
	$(VECTOR_LEVEL_AVX2) $(BIN)/python -m pytest -m numerics $(PYTEST_WORKERS)

test-fast: install-dev
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_WORKERS)

lint: install-dev
	$(BIN)/ruff check hf_atr tests benchmarks examples datasets_scripts
	$(BIN)/ruff format --check hf_atr tests benchmarks examples datasets_scripts

clean:
	rm -rf $(VENV) $(VENV_MIN) outputs
