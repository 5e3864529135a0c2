# The workbook's commands. `make lab` and `make test` create the environment first if needed.
#
# The environment is a virtual environment in .venv, installed from uv.lock with uv (fetched
# into .tools/ if it is not on PATH). uv installs the standard torch and torchvision builds
# from PyPI, which run on a CPU as well as on an NVIDIA GPU. Their bytecode is compiled at install
# (--compile-bytecode): a new Python process (each Jupyter kernel, each measuring process) then
# imports torch, Numba and plotly in about half the time, even where Python may not write .pyc
# files itself (PYTHONDONTWRITEBYTECODE, a read-only install).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
UV     := $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)
PORT   ?= 8888
# pytest-xdist workers for make test and make test-fast (each notebook stays on one worker): one
# more than the cores, because many tests spend part of their time waiting (on a notebook's
# kernel, a measuring process, the ranks, the browser) and an extra worker keeps the cores busy
# meanwhile (on two cores: 717 s instead of 846 s for make test). WORKERS=0: one process.
WORKERS ?= $(shell $(PYTHON) -c 'import os; print(len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) + 1)')

# The test commands let Python keep bytecode even where the environment says not to
# (PYTHONDONTWRITEBYTECODE, set empty for them): pytest then keeps each test module with its
# assertions rewritten in __pycache__/ (which git ignores), and every later pytest process reads it
# instead of parsing and rewriting some 140 test modules again. Each worker collects them all:
# about 13 CPU-seconds a worker on two cores, make test-fast 142 s instead of 165 s. Notebook
# kernels and measuring processes read the workbook's own modules compiled the same way.
KEEP_BYTECODE := PYTHONDONTWRITEBYTECODE=
# The test commands also let an idle OpenMP thread (torch's and Numba's, both GNU OpenMP) sleep at
# once instead of spinning for a while first (OMP_WAIT_POLICY=PASSIVE), and give numpy's OpenBLAS
# one thread (OPENBLAS_NUM_THREADS=1), unless the caller set either: the tests run more processes
# than there are cores, and a spinning thread takes a core another process is waiting for.
# Measured on two cores, paired runs of a part of make test on three workers: 20 % fewer
# CPU-seconds and 15 % less time with the first; the second saves another 3 % and 2 %.
# Learners' runs keep the defaults, which answer sooner on an idle machine.
TEST_ENV := $(KEEP_BYTECODE) OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE} \
	OPENBLAS_NUM_THREADS=$${OPENBLAS_NUM_THREADS:-1}

.PHONY: help env lab test test-pythons test-gpu test-gpu-bare test-fast gpu-reference gpu-lease run outputs book readme-picture clean

help:
	@echo "make lab     start JupyterLab on your copies in my-work/ (creates the environment if missing)"
	@echo "make test    run the whole test suite, notebooks included (nbval)"
	@echo "make test-fast  the quick tests: no browser, no notebooks, nothing marked slow (for iterating)"
	@echo "make test-pythons  the tests that depend on the Python: on 3.12 and 3.13 when found, and a bare GPU server's numpy 2.5"
	@echo "make test-gpu the same on an NVIDIA GPU: real kernels and timings, GPU-only tests included"
	@echo "make test-gpu-bare  the tests marked gpu with the machine's python3 and pytest alone (no environment), within ARGS=\"--budget-s N\" (170 s)"
	@echo "make gpu-lease  on a GPU lent for minutes, one call: record tier one, run the GPU tests, then tier two, within ARGS=\"--budget-s N\" (540 s) into build/gpu-lease/"
	@echo "make gpu-reference  on an NVIDIA GPU: record the GPU references, most needed first, within ARGS=\"--budget-s N\" (480 s) into build/gpu-reference/"
	@echo "make run     execute every notebook headless into build/ (ipynb + html)"
	@echo "make outputs re-execute the notebooks, labs and solutions in place, refreshing stored outputs"
	@echo "make book    render the notebooks and labs (stored outputs) as HTML into build/book/"
	@echo "make readme-picture  re-take the README's picture of the explorer in JupyterLab (needs Chromium)"
	@echo "make env     create or update the environment only"
	@echo "make clean   remove build outputs (keeps the environment)"

.tools/bin/uv:
	$(PYTHON) -m venv .tools
	.tools/bin/python -m pip install --quiet --disable-pip-version-check uv

$(VENV)/.synced: pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --compile-bytecode --python "$$($(PYTHON) -c 'import sys; print(sys.executable)')"
	@touch $@

env: $(VENV)/.synced

# JupyterLab on the learner's copies in my-work/ (made from notebooks/ and labs/ on first start),
# opening notebooks/00_start_here.ipynb there (tools/lab.py).
lab: env
	@$(PY) -m tools.lab --port $(PORT)

# make test runs the tests marked alone last, by themselves: they time something under a load
# they set up (notebook 06's explorer beside two busy cores), which other tests running beside
# them would add to. ALONE names the files that hold them. Both parts run; either failing fails.
ALONE := tests/test_browser.py

test: env
	@status=0; \
	$(TEST_ENV) $(PY) -m pytest -n $(WORKERS) --dist loadfile -m "not alone" || status=$$?; \
	$(TEST_ENV) $(PY) -m pytest -m alone $(ALONE) || status=$$?; \
	exit $$status

# The tests that depend on the Python and numpy a learner has (tools/test_pythons.py): the tests
# marked each_python and notebooks 03 and 07 on Python 3.12 and 3.13 where this machine has them
# (.venv-py3.12, .venv-py3.13, from uv.lock), then a bare GPU server's combination (Python 3.12,
# numpy 2.5, numba-cuda 0.30.4, torch; no plotly or Jupyter) in .venv-gpu-server.
test-pythons: env
	$(TEST_ENV) UV=$(UV) $(PY) -m tools.test_pythons $(ARGS)

# On a GPU machine: the same suite with the kernels on the GPU (NUMBA_ENABLE_CUDASIM=0), so the
# tests marked gpu run instead of being skipped. Notebooks and solutions are executed top to bottom
# and any error fails, but their outputs are not compared (--nbval-lax): a GPU prints other
# timings, device names and numbers of measured points than the stored CPU outputs.
test-gpu: env
	@NUMBA_ENABLE_CUDASIM=0 $(PY) -W ignore -c "import sys, helpers.device.backend as b; \
	sys.exit(0 if b.MODE == 'gpu' else 'make test-gpu needs an NVIDIA GPU that Numba can use (without one, run make test): ' + b.MODE_REASON)"
	NUMBA_ENABLE_CUDASIM=0 $(PY) -m pytest --nbval-lax

# On a GPU machine: the measurements the notebooks read from results/, most needed first, in one
# process that ends within its budget (ARGS="--budget-s N", default 480), leaving in --out
# (default build/gpu-reference/) only a summary and one archive, rewritten after every part
# (helpers/experiments/gpu_reference/). It needs only python3 with numpy, numba, numba-cuda
# and torch, so it uses the workbook's environment when there is one and the machine's python3
# otherwise. ARGS="--dry-run" tries the same path on a CPU at tiny sizes; ARGS="--list" prints
# the parts and their tiers; ARGS="--resume" keeps what an earlier run in --out recorded.
gpu-reference:
	PYTHONPATH=. $(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m helpers.experiments.gpu_reference $(ARGS)

# The tests marked gpu with the machine's own python3 and pytest, without .venv, nbval or any
# plugin (tools/gpu_tests.py): for a GPU server with no network. Interrupted at ARGS="--budget-s N".
test-gpu-bare:
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m tools.gpu_tests $(ARGS)

# One command for a GPU lent for a few minutes (tools/gpu_lease.py): the recording's preflight and
# tier one, then the GPU tests, then tier two while time is left, within ARGS="--budget-s N"
# (default 540), leaving in --out (default build/gpu-lease/) the summary, the archive and the
# tests' log. ARGS=--dry-run tries the same path on a CPU.
gpu-lease:
	PYTHONPATH=. $(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m tools.gpu_lease $(ARGS)

# For iterating: the quick tests in tests/, without the browser, without executing notebooks or
# labs, and without the tests marked slow (processes, the real compiler, large simulations);
# a test that took over 5 s is named at the end (tests/conftest.py).
test-fast: env
	$(TEST_ENV) $(PY) -m pytest tests -n $(WORKERS) --dist loadfile \
		-m "not browser and not notebook and not slow"

run: env
	@$(PY) -m tools.run_notebooks --out build

book: env
	$(PY) -m tools.book --out build/book

# The README's picture: the browser test of notebook 06's explorer moves a slider in a real
# JupyterLab and screenshots it (tests/test_browser.py), then tools/readme_picture.py copies the
# picture into docs/ and writes its caption (device, date) into README.md. Needs Chromium.
readme-picture: env
	WORKBOOK_REQUIRE_BROWSER=1 $(PY) -m pytest -p no:cacheprovider -q tests/test_browser.py -k conv_explorer_slider
	$(PY) -m tools.readme_picture

clean:
	rm -rf build .pytest_cache

outputs: env
	$(PY) -m tools.run_notebooks --in-place notebooks/[0-9]*.ipynb labs/*.ipynb labs/solutions/*.ipynb
