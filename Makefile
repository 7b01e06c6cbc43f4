# Two commands on a fresh clone: `make demo` and `make test`.  Both create .venv and install.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch is installed from the local wheel cache when it is there; an unpinned
# torch would pull gigabytes of CUDA wheels.
TORCH := torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install demo test lint typecheck clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[models,plot,dev,otel]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/pipeplan demo

# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE): the suite
# starts hundreds of Python processes (stages, servers, workers, CLI runs), each of which would
# otherwise compile every pipeplan module it imports again, and pytest rewrites every test module.
# The service's tests (a third of the suite's time, mostly waiting on servers, workers and the
# database, none timed against a core) run on two pytest workers, each file on one worker, and so
# do UNTIMED: files that time nothing, pin no core and give no solver a deadline, only compute
# (the RSS of real exported programs, FLOP counts of real architectures, training the learned
# model).  They take a core from the service's servers and solvers while they run: those tests
# wait up to 30-60 s for answers, some give the solver a 2-5 s time limit, and the readiness test
# waits for every worker.  The rest, which pins processes to cores and times them, runs alone.
# Both run; the target fails if either does.  Each prints its 8 slowest tests: the suite must stay
# under 10 minutes on 2 cores, and those are where its time goes.
UNTIMED := tests/costmodel/test_memory_liveness.py tests/costmodel/test_memory_workspace.py \
	tests/costmodel/test_capture.py tests/costmodel/test_learned.py tests/costmodel/test_zoo.py
test: $(STAMP)
	@status=0; \
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q --durations=8 -n 2 --dist loadfile tests/api $(UNTIMED) || status=1; \
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q --durations=8 --ignore=tests/api $(UNTIMED:%=--ignore=%) || status=1; \
	exit $$status

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy -p pipeplan

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
