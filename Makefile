# The two commands: `make demo` and `make test`. Both set themselves up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup build demo test clean

# The venv is (re)made whenever requirements.txt changes.
$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

setup: $(STAMP)

build: $(STAMP)
	$(PY) tools/build.py

demo: build
	HF_HUB_OFFLINE=1 $(PY) example.py

test: build
	$(PY) -m pytest tests

clean:
	rm -rf build
