# The two commands: `make run` (launch the GUI) and `make test` (the whole suite).
# Each creates .venv from pyproject.toml + constraints.txt when it is missing or stale.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test bench bench-check clean-venv

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt -e '.[test,onnx,executorch,ray,mlflow]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/traindesk gui

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/run_all.py

# The ratios that matter against their floors (bench/floors.json), in a few minutes; not part of `make test`.
bench-check: $(STAMP)
	$(PY) bench/check.py $(CHECK_ARGS)

clean-venv:
	rm -rf $(VENV)
