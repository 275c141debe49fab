# The front door. `make demo` and `make test` each work from a clean clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.bootstrap-stamp
DEMO_DIR ?= ./fractal-demo
PYTEST_ARGS ?=
BENCH_ARGS ?=  # e.g. --only dashboard

.PHONY: bootstrap demo test test-agents lint bench soak soak-tree night lock clean

bootstrap: $(STAMP)

$(STAMP): pyproject.toml constraints.txt scripts/bootstrap.sh
	PY=$(PY) bash scripts/bootstrap.sh $(VENV)
	touch $(STAMP)

demo: bootstrap
	$(BIN)/fractal demo $(DEMO_DIR) --force

# compileall first: a shell with PYTHONDONTWRITEBYTECODE set would make every supervisor
# and CLI process the suite starts recompile fractal's modules. Beside it, one collection
# with bytecode writing on leaves pytest's assertion-rewritten test modules in __pycache__:
# without it each of the four workers rewrites every test module again (about 6 s of CPU
# each); its output is dropped, the real run reports any collection error. Four workers on
# two cores: most tests wait on child processes (supervisors, agents, tmux), not on the
# CPU. The longest tests start first (tests/durations.json; docs/architecture.md says how
# to regenerate it), so the run ends with short tests on every worker. The pinned agent
# CLIs' npm install (a no-op once done) starts beside them, so the agents tier's first
# tests find it finished or nearly (they wait on its lock, and retry it if it failed).
# --backend=both: the tests marked `backend` (the store tier, the verbs, the tree CLI,
# steering) run on SQLite and on a throwaway PostgreSQL cluster (tests/pgbackend.py).
test: bootstrap
	$(BIN)/python -m compileall -q fractal & compiling=$$!; \
	$(BIN)/python -m tests.agents.install >/dev/null 2>&1 & \
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -p no:cacheprovider --collect-only -q \
	  -n 0 --backend=both $(PYTEST_ARGS) >/dev/null 2>&1; \
	wait $$compiling
	$(BIN)/python -m pytest -n 4 --backend=both $(PYTEST_ARGS)

# Only the real-CLI tier: the pinned claude and codex, installed from npm into .cache/agents
# on first use (skipped, with the reason, when npm or its registry is unavailable).
test-agents: bootstrap
	$(BIN)/python -m pytest -m agents -v $(PYTEST_ARGS)

lint: bootstrap
	$(BIN)/ruff check fractal tests migrations
	$(BIN)/mypy --strict fractal

# Re-pin constraints.txt to what the venv holds (after adding or changing a dependency in
# pyproject.toml; to move an existing pin, edit or delete its line first).
lock: bootstrap
	{ sed -n '1,3p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable --exclude uv; } \
	  > constraints.txt.new && mv constraints.txt.new constraints.txt

bench: bootstrap
	$(BIN)/python scripts/bench.py $(BENCH_ARGS)

# Every fault scenario (tests marked soak), SOAK_ROUNDS times each with random injection
# points; the seed is printed first, FRACTAL_SOAK_SEED=<seed> replays it (docs/reliability.md).
SOAK_ROUNDS ?= 3
soak: bootstrap
	FRACTAL_SOAK_ROUNDS=$(SOAK_ROUNDS) $(BIN)/python -m pytest -n 2 -m soak tests/soak $(PYTEST_ARGS)

# A 30-node tree under a seeded chaos driver for SOAK_TREE_MINUTES minutes, its invariants
# checked as it goes and at the end; FRACTAL_SOAK_SEED=<seed> replays (docs/reliability.md).
SOAK_TREE_MINUTES ?= 20
soak-tree: bootstrap
	SOAK_TREE_MINUTES=$(SOAK_TREE_MINUTES) $(BIN)/python -m tests.soak.chaos

# A compressed night against a 20-node tree (real pinned CLIs on a few nodes, against the
# loopback mocks): a seeded weather of outages, usage windows, tmux kill-server, reboots, a
# locked database, the operator's verbs and hostile agents; FRACTAL_NIGHT_SEED=<seed>
# replays it (docs/reliability.md, "A night, compressed").
NIGHT_MINUTES ?= 25
night: bootstrap
	NIGHT_MINUTES=$(NIGHT_MINUTES) $(BIN)/python -m tests.soak.night

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
