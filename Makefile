# The two set-up commands of the README: `make demo` and `make test`.
# Both create .venv and install siltstream into it when needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# One stamp per install set, named after pyproject.toml's checksum: `make demo` installs only
# what the demo and the quick start need, `make test` the test and Spark extras as well.
SUM := $(shell cksum < pyproject.toml | cut -d' ' -f1)
DEMO_STAMP := $(VENV)/.installed-demo-$(SUM)
TEST_STAMP := $(VENV)/.installed-test-$(SUM)
# In CI (CI=true) a test that needs PostgreSQL or the S3 server must not skip.
export SILT_REQUIRE_SERVERS ?= $(CI)

.PHONY: demo test lint bench chaos clean tools compat compat-build

# kcat (librdkafka's CLI) is one of the Kafka clients the protocol tests drive; librdkafka's
# own test-runner (`make compat`) is built from source with these Debian packages (libcurl
# for its OIDC token requests, 0126). CI installs them (as root).
DEBS := kcat build-essential libssl-dev libsasl2-dev libzstd-dev liblz4-dev zlib1g-dev \
  rapidjson-dev libcurl4-openssl-dev
tools:
	@dpkg -s $(DEBS) >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq \
	  && apt-get install -y -qq $(DEBS) >/dev/null; } \
	  || echo "not installed: $(DEBS): their tests skip (fail with CI=true); apt-get install them"

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip 'setuptools>=77'

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[demo]'
	rm -f $(VENV)/.installed-demo-*
	touch $@

# The test set holds the demo set: both stamps.
$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[demo,dev,spark]'
	rm -f $(VENV)/.installed-test-* $(VENV)/.installed-demo-*
	touch $@ $(DEMO_STAMP)

# The C extensions (setup.py): pip builds them at install; rebuilt in place when a source
# changes, so the checkout imports what its sources say.
NATIVE := $(VENV)/.native
$(NATIVE): setup.py $(wildcard */*.c) | $(BIN)/python
	$(BIN)/python setup.py -q build_ext --inplace
	touch $(NATIVE)

demo: $(DEMO_STAMP) $(NATIVE)
	$(BIN)/silt demo

lint: $(TEST_STAMP) $(NATIVE)
	$(BIN)/ruff check .
	$(BIN)/mypy

# librdkafka's test-runner, built once into build/compat/ (3.5 minutes on two cores; reused
# after): `make test` runs a fast subset of its tests (tests/protocol/test_librdkafka_suite.py).
compat-build: $(TEST_STAMP) $(NATIVE) tools
	$(BIN)/python -m harness.compat.build

test: lint tools compat-build
	$(BIN)/python -m pytest -q

# librdkafka's own regression suite against silt agents, one test at a time (about 45
# minutes); results in docs/compatibility.md.
compat: compat-build
	$(BIN)/python -m harness.compat --write docs/compatibility.md

bench: $(TEST_STAMP) $(NATIVE)
	$(BIN)/python -m bench.run --write docs/benchmarks.md

# The reliability suites (docs/reliability.md): 500 crash trials, 1,000 corruption cases,
# 50 object-store fault trials (10 % of S3 requests failed),
# 20 concurrency trials (PostgreSQL: SILT_TEST_POSTGRES_URL), the protocol fuzz suite (every
# API version's lengths, 20 random mutants each, every truncation); figures written to the doc.
chaos: $(TEST_STAMP) $(NATIVE)
	$(BIN)/python -m faults.chaos --suite crash --suite corruption --suite concurrency \
	  --suite storefaults --suite protocol \
	  --write docs/reliability.md

clean:
	rm -rf $(VENV) silt-data .pytest_cache .mypy_cache build */*.so
