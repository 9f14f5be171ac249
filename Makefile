# Every install step lives here: a fresh clone needs only python3 and make.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: install venv system tools browser sarama-check test test-fast test-console chaos demo \
	demo-cluster console bench broker clean

# Everything `make test` needs: the virtualenv, and the system's packages at the same time (their
# downloads and installs overlap); tools and browser one after the other, as apt-get runs one
# at a time.
install:
	@$(MAKE) --no-print-directory -j2 venv system

system:
	@$(MAKE) --no-print-directory tools
	@$(MAKE) --no-print-directory browser

venv: $(STAMP)

# The virtualenv's own pip (Python 3.11's 23.2 or newer installs the project editable from
# pyproject.toml): upgrading it first cost a round trip to the index and a reinstall on every
# fresh clone. pip keeps the wheel it builds from pyspark's source distribution (about 450 MB)
# in its cache; uv, tried instead, fetched and built it again on every install (2 minutes).
$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[test,spark]'
	touch $(STAMP)

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,spark,bench]'
	touch $(BENCH_STAMP)

# kcat (a librdkafka command-line client) is one of the clients the broker is tested with;
# ZooKeeper (Debian's package: the server's jar, and Java with it) is what the cluster tests
# run brokers on. The broker itself needs neither. The nemesis (tests/chaos, `make chaos`) puts
# each broker in a network namespace of its own: iproute2 makes the namespaces, the bridge and the
# netem delays, nftables drops the packets of a partition, and libfaketime (Debian's faketime)
# steps one broker's clock.
ZOOKEEPER_JAR := /usr/share/java/zookeeper.jar
tools:
	@missing=""; \
	command -v kcat >/dev/null 2>&1 || missing="$$missing kcat"; \
	[ -f $(ZOOKEEPER_JAR) ] || missing="$$missing zookeeper"; \
	command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	command -v nft >/dev/null 2>&1 || missing="$$missing nftables"; \
	[ -n "$$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null)" ] || missing="$$missing faketime"; \
	[ -z "$$missing" ] || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; }
	@$(MAKE) --no-print-directory sarama-check

# The web console's browser tests (tests/console/test_browser.py) drive Debian's Chromium through
# its chromedriver (Selenium, from the test extra). The console itself needs neither: its assets
# (htmx, uPlot) ship inside the package. The stamp is made once both are there.
BROWSER_STAMP := .tools/browser.installed
browser: $(BROWSER_STAMP)
$(BROWSER_STAMP):
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium-driver"; \
	[ -z "$$missing" ] || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; }
	@mkdir -p .tools && touch $@

# sarama, the Go client (Debian's golang-go and golang-github-shopify-sarama-dev), built in
# GOPATH mode against the source the package installs into tests' sarama-check program. Where
# the packages cannot be installed, the sarama tests are skipped and make goes on.
SARAMA_SRC := /usr/share/gocode/src/github.com/Shopify/sarama
SARAMA_CHECK := .tools/sarama-check
sarama-check: $(SARAMA_CHECK)
$(SARAMA_CHECK): tests/clients/sarama/main.go
	@if ! command -v go >/dev/null 2>&1 || [ ! -d $(SARAMA_SRC) ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go \
	    golang-github-shopify-sarama-dev >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -qq >/dev/null 2>&1 && $$SUDO env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq golang-go golang-github-shopify-sarama-dev >/dev/null 2>&1; } || \
	  echo "make: golang-go and golang-github-shopify-sarama-dev could not be installed; the sarama tests will be skipped"; \
	fi
	@if command -v go >/dev/null 2>&1 && [ -d $(SARAMA_SRC) ]; then \
	  mkdir -p .tools && GOPATH=/usr/share/gocode GO111MODULE=off go build -o $@ $< 2>/dev/null \
	  || echo "make: building sarama-check failed; the sarama tests will be skipped"; fi

# The suite on TEST_WORKERS pytest-xdist workers. Most broker tests wait on sockets and timers,
# so more workers than cores pays (4 on 2 cores: about 5 minutes where 1 took 14, and 40 s for
# test-fast); a module's broker, and the tests on the run's SparkSession, stay on one worker
# each (the xdist_group marks tests/conftest.py sets; tests run in the order it sets, longest
# work first).
TEST_WORKERS ?= 4
PARALLEL := -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder
# pytest keeps the test modules it rewrites (assertion rewriting) only where Python may write
# bytecode: with PYTHONDONTWRITEBYTECODE set, every run and worker rewrites them all again
# (about 9 s of each worker's collection).
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest

# The ten slowest tests are printed at the end, so what a test costs stays in sight.
test: install
	$(PYTEST) -q $(PARALLEL) --durations=10

# The tests that start no broker process, no Spark, no browser and run for no set time (the
# markers broker, spark, browser and timeboxed, which tests/conftest.py sets), property tests
# with a quarter of their examples and the replication simulation with a quarter of its seeds
# (tests/support/examples.py): under 45 s on two quiet cores.
test-fast: venv
	BROOK_EXAMPLE_SCALE=0.25 $(PYTEST) -q $(PARALLEL) \
	  -m "not broker and not spark and not timeboxed and not browser"

# The web console's tests: its logic, its pages against a real broker, and the browser tier
# (headless Chromium against a `brook console` process; screenshots in build/console-screenshots).
test-console: venv browser
	$(PYTEST) -q $(PARALLEL) tests/console

# The nemesis (tests/chaos, needs root): three brokers and ZooKeeper in network namespaces under
# partitions, delays, loss, kills, pauses, ZooKeeper restarts, clock steps and a full disk, then
# the history checked. CHAOS_SEED replays a run's decisions, CHAOS_SECONDS sets how long the faults
# go on (60 in the suite), CHAOS_FAULTS=kill,pause,... keeps some kinds, CHAOS_OUT=dir keeps the
# history and the brokers' logs. docs/reliability.md has the kinds, the checks and the results.
chaos: venv tools
	$(PYTEST) -q -s tests/chaos

# The main job end to end: the broker with real clients, then a Spark streaming pipeline.
demo: venv
	$(PY) -m brook.demo
	$(PY) -m brook.demo_spark

# Three brokers on a real ZooKeeper (Debian's, which `tools` installs), a replicated topic and a
# leader killed in the middle of it.
demo-cluster: venv tools
	$(PY) -m brook.demo_cluster

# A first look at the web console: a broker with sample traffic and consumer groups, and
# `brook console` on CONSOLE_LISTEN (default 127.0.0.1:8080) until Ctrl-C.
console: venv
	$(PY) -m brook.demo_console

bench: $(BENCH_STAMP)
	$(PY) benchmarks/run_all.py

broker: venv
	$(VENV)/bin/brook broker

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
