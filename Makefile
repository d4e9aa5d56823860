# Two set-up commands (README): `make report` and `make test`. Each makes its own environment.
PY ?= python3
REPORT_VENV ?= .venv-report
TEST_VENV ?= .venv-test
OUT ?= report
# torch is pinned to the CPU wheel these machines carry; a looser pin pulls a multi-GB CUDA build
TORCH ?= torch==2.13.0

.PHONY: report test bench clean

report: $(REPORT_VENV)/.installed
	-bash .ci/install-data.sh
	$(REPORT_VENV)/bin/attnkit report --out $(OUT)

# the system pieces the tests use (browser + driver, data packages) are installed where this machine
# allows (root + apt); elsewhere the tests that need them skip, and pytest's summary prints one
# line for each, with the command that enables it
test: $(TEST_VENV)/.installed
	@bash .ci/install-browser.sh || echo "make test: Chromium + chromedriver not installed; the browser tests will skip"
	@bash .ci/install-data.sh
	$(TEST_VENV)/bin/python -m pytest -n 2 --durations=15

bench: $(REPORT_VENV)/.installed
	$(REPORT_VENV)/bin/attnkit bench

$(REPORT_VENV)/.installed: pyproject.toml
	$(PY) -m venv $(REPORT_VENV)
	$(REPORT_VENV)/bin/pip install -q --upgrade pip
	$(REPORT_VENV)/bin/pip install -q $(TORCH)
	$(REPORT_VENV)/bin/pip install -q -e '.[viz,hf,exp]'
	touch $@

$(TEST_VENV)/.installed: pyproject.toml
	$(PY) -m venv $(TEST_VENV)
	$(TEST_VENV)/bin/pip install -q --upgrade pip
	$(TEST_VENV)/bin/pip install -q $(TORCH)
	$(TEST_VENV)/bin/pip install -q -e '.[viz,hf,exp,dev]'
	touch $@

clean:
	rm -rf $(REPORT_VENV) $(TEST_VENV) $(OUT)
