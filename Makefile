# The two set-up commands of the README: `make demo` and `make test`.
# Both create .venv and install siltstream into it when needed, at the versions of
# requirements.lock (`make lock` refreshes it; docs/development.md).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
LOCK := requirements.lock
# The installer: uv (pinned in the lock), put into .venv by the venv's own pip, then used for
# every install (pip's own resolver took minutes more of a fresh clone's CI); the lock
# constrains both what is installed and what builds it (setuptools).
UV := $(BIN)/uv
UV_PIN := -q -c $(LOCK) --build-constraint $(LOCK)
# One stamp per install set, named after pyproject.toml's and the lock's checksum: `make
# demo` installs only what the demo and the quick start need, `make test` the test and
# Spark extras as well.
SUM := $(shell cat pyproject.toml $(LOCK) | cksum | cut -d' ' -f1)
DEMO_STAMP := $(VENV)/.installed-demo-$(SUM)
TEST_STAMP := $(VENV)/.installed-test-$(SUM)
# The agent, protocol and compactor tests run on Python 3.13 too (pyproject.toml declares
# 3.11-3.13), in a venv of their own: pyenv's 3.13, else python3.13 on PATH.
PY313 ?= $(firstword $(wildcard $(shell pyenv root 2>/dev/null)/versions/3.13*/bin/python3.13) \
  $(shell command -v python3.13 2>/dev/null))
VENV313 := .venv-3.13
STAMP313 := $(VENV313)/.installed-$(SUM)
TESTS313 := tests/agent tests/protocol tests/compactor
# pytest's workers (pytest-xdist): independent tests run in parallel (tests/conftest.py).
WORKERS ?= 3
XDIST := -n $(WORKERS) --dist loadgroup
# Tests marked chaos (soak-length, crash runs) are `make chaos`'s; `make test` runs the rest.
NOT_CHAOS := -m 'not chaos'

# In CI (CI=true) a test that needs PostgreSQL or the S3 server must not skip.
export SILT_REQUIRE_SERVERS ?= $(CI)

.PHONY: demo test test313 lint lock bench chaos clean tools compat compat-build

# kcat (librdkafka's CLI) is one of the Kafka clients the protocol tests drive, at the
# version CI tested; librdkafka's own test-runner (`make compat`) is built from source
# (pinned in ../shared/peer/) with these Debian packages (libcurl for its OIDC token
# requests, 0126), which follow Debian 12's security updates (an exact version would stop
# installing when Debian withdraws it). CI installs them (as root).
DEBS := kcat=1.7.1-2 build-essential libssl-dev libsasl2-dev libzstd-dev liblz4-dev zlib1g-dev \
  rapidjson-dev libcurl4-openssl-dev
tools:
	@dpkg -s $(subst =, ,$(DEBS)) >/dev/null 2>&1 \
	  && [ "$$(dpkg-query -W -f='$${Version}' kcat)" = "$(patsubst kcat=%,%,$(filter kcat=%,$(DEBS)))" ] || { [ "$$(id -u)" = 0 ] && apt-get update -qq \
	  && apt-get install -y -qq $(DEBS) >/dev/null; } \
	  || echo "not installed: $(DEBS): their tests skip (fail with CI=true); apt-get install them"

$(BIN)/python:
	$(PY) -m venv $(VENV)
$(UV): $(LOCK) | $(BIN)/python
	$(BIN)/python -m pip install -q -c $(LOCK) uv
	touch $@

$(DEMO_STAMP): pyproject.toml $(LOCK) | $(UV)
	$(UV) pip install $(UV_PIN) --python $(BIN)/python pip setuptools -e '.[demo]'
	rm -f $(VENV)/.installed-demo-*
	touch $@

# The test set holds the demo set: both stamps.
$(TEST_STAMP): pyproject.toml $(LOCK) | $(UV)
	$(UV) pip install $(UV_PIN) --python $(BIN)/python pip setuptools -e '.[demo,dev,spark]'
	rm -f $(VENV)/.installed-test-* $(VENV)/.installed-demo-*
	touch $@ $(DEMO_STAMP)

# The 3.13 venv: the product and the test extra (no Spark: its tests run on 3.11).
# (after the 3.11 install and build: setuptools must not build in this checkout twice at once)
$(STAMP313): pyproject.toml $(LOCK) | $(UV) $(TEST_STAMP)
	@[ -n "$(PY313)" ] || { echo "no Python 3.13 (pyenv or python3.13 on PATH)"; exit 1; }
	[ -x $(VENV313)/bin/python ] || $(UV) venv -q --python $(PY313) $(VENV313)
	$(UV) pip install $(UV_PIN) --python $(VENV313)/bin/python setuptools -e '.[dev]'
	rm -f $(VENV313)/.installed-*
	touch $@

# The C extensions (setup.py): pip builds them at install; rebuilt in place when a source
# changes, so the checkout imports what its sources say.
NATIVE := $(VENV)/.native
$(NATIVE): setup.py $(wildcard */*.c) | $(BIN)/python
	$(BIN)/python setup.py -q build_ext --inplace
	touch $(NATIVE)
NATIVE313 := $(VENV313)/.native
$(NATIVE313): setup.py $(wildcard */*.c) | $(STAMP313) $(NATIVE)
	$(VENV313)/bin/python setup.py -q build_ext --inplace
	touch $(NATIVE313)

demo: $(DEMO_STAMP) $(NATIVE)
	$(BIN)/silt demo

lint: $(TEST_STAMP) $(NATIVE)
	$(BIN)/ruff check .
	$(BIN)/mypy

# librdkafka's test-runner, built once into build/compat/ (3.5 minutes on two cores; reused
# after): `make test` runs a fast subset of its tests (tests/protocol/test_librdkafka_suite.py).
compat-build: $(TEST_STAMP) $(NATIVE) tools
	$(BIN)/python -m harness.compat.build

# The whole suite on 3.11, then the agent, protocol and compactor tests on 3.13. Without a
# Python 3.13 (a laptop) the second part is left out with a note; CI (CI=true) needs it.
# What they need is made first: the 3.11 venv, then three things at once (mypy takes one
# core, librdkafka's build both, the 3.13 venv little).
SETUP313 := $(if $(or $(PY313),$(CI)),$(STAMP313) $(NATIVE313))
test:
	$(MAKE) --no-print-directory $(TEST_STAMP) $(NATIVE)
	$(MAKE) --no-print-directory -j3 -O lint compat-build $(SETUP313)
	$(BIN)/python -m pytest -q $(XDIST) $(NOT_CHAOS)
	@if [ -n "$(SETUP313)" ]; then $(MAKE) --no-print-directory test313; \
	  else echo "no Python 3.13: the 3.13 run of $(TESTS313) left out"; fi

test313: $(STAMP313) $(NATIVE313) compat-build
	$(VENV313)/bin/python -m pytest -q $(XDIST) $(NOT_CHAOS) $(TESTS313)

# Re-resolves requirements.lock from pyproject.toml (the newest versions its ranges allow,
# for Python 3.11-3.13) and localstack/requirements.lock from localstack/requirements.in,
# with the venv's uv; then `make test` installs and tests them.
UV_LOCK := -q --annotation-style line --custom-compile-command 'make lock'
lock: | $(UV)
	printf 'pip\nsetuptools>=77\nuv\n' | $(UV) pip compile $(UV_LOCK) --universal \
	  --python-version 3.11 --extra demo --extra dev --extra spark pyproject.toml - -o $(LOCK)
	cd localstack && ../$(UV) pip compile $(UV_LOCK) --python-version 3.13 \
	  requirements.in -o requirements.lock

# librdkafka's own regression suite against silt agents, one test at a time (about 45
# minutes); results in docs/compatibility.md.
compat: compat-build
	$(BIN)/python -m harness.compat --write docs/compatibility.md

bench: $(TEST_STAMP) $(NATIVE)
	$(BIN)/python -m bench.run --write docs/benchmarks.md

# The tests marked chaos (a Spark driver killed mid-query, a stream on the cluster), then the reliability suites
# (docs/reliability.md): 500 crash trials, 1,000 corruption cases, 50 object-store fault
# trials (10 % of S3 requests failed), 20 concurrency trials (on SILT_TEST_POSTGRES_URL's
# PostgreSQL or one started for them), the protocol fuzz suite (every API version's lengths,
# 20 random mutants each, every truncation); figures written to the doc.
chaos: $(TEST_STAMP) $(NATIVE)
	$(BIN)/python -m pytest -q -m chaos
	$(BIN)/python -m faults.chaos --suite crash --suite corruption --suite concurrency \
	  --suite storefaults --suite protocol \
	  --write docs/reliability.md

clean:
	rm -rf $(VENV) $(VENV313) silt-data .pytest_cache .mypy_cache build */*.so
