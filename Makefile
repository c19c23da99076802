# Brain for Python. Quick start: `make run` (demo on embedded defaults) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two stamps: `make run` installs the runtime requirements only; tests, checks, benches and
# `make cluster` add requirements-dev.txt. Neither reinstalls what the other already did.
STAMP := $(VENV)/.requirements-installed
DEV_STAMP := $(VENV)/.requirements-dev-installed
PIP_INSTALL := $(BIN)/pip install --quiet --disable-pip-version-check --no-compile
DEBIAN_PACKAGES := redis-server postgresql chromium iproute2 nginx bubblewrap
# The admin's static files, hashed and compressed by collectstatic; runbrain serves them from here.
STATIC_MANIFEST := staticfiles/staticfiles.json
# The older published client (requirements-client-2.0.txt), beside the venv: see `test`.
CLIENT_2_0 := $(VENV)/clients/aex-brain-2.0.0
CLIENT_2_0_STAMP := $(CLIENT_2_0)/.installed
# The pi harness's Node packages (runners/pi/package-lock.json), installed exactly by `npm ci`.
PI_STAMP := runners/pi/node_modules/.package-lock.json
STATIC_SOURCES := $(shell find brainsite sessions_app tools_app persistence_app -path '*/static/*' -type f 2>/dev/null)

.PHONY: run cluster test bootstrap dev-bootstrap system-packages demo-packages lint typecheck bench drill fleet-drill drain-drill clean

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -r requirements.txt
	touch $(STAMP)

$(DEV_STAMP): requirements-dev.txt $(STAMP)
	$(PIP_INSTALL) -r requirements-dev.txt
	touch $(DEV_STAMP)

$(CLIENT_2_0_STAMP): requirements-client-2.0.txt $(STAMP)
	rm -rf $(CLIENT_2_0)
	$(PIP_INSTALL) --no-deps --target $(CLIENT_2_0) -r requirements-client-2.0.txt
	touch $(CLIENT_2_0_STAMP)

$(STATIC_MANIFEST): $(STAMP) $(STATIC_SOURCES)
	BRAIN_STATIC_ROOT= $(BIN)/python manage.py collectstatic --noinput --clear --verbosity 0

$(PI_STAMP): runners/pi/package.json runners/pi/package-lock.json
	cd runners/pi && npm ci --no-audit --no-fund --loglevel=error
	touch $(PI_STAMP)

bootstrap: $(STAMP) $(STATIC_MANIFEST) $(PI_STAMP)

dev-bootstrap: bootstrap $(DEV_STAMP)

# Debian packages the test suite and `make cluster` run for real (Redis, PostgreSQL, Chromium for
# the browser tests, nginx in front of the cluster).
# apt does not start them.
system-packages:
	@missing=""; for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# `make run` adds one Debian package, bubblewrap (about 200 KB: the demo's local sandbox), not the
# test suite's: as root with apt, or through sudo when it asks no password. Where neither works
# the demo still runs and says in one line that its sandbox part is skipped.
demo-packages:
	@dpkg -s bubblewrap >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo -n"; fi; \
		echo "installing Debian package: bubblewrap (the demo's local sandbox)"; \
		{ $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq bubblewrap >/dev/null; } \
		|| echo "make run: bubblewrap could not be installed; the demo runs without its sandbox"; \
	}

run: bootstrap demo-packages
	$(BIN)/python scripts/run_demo.py

# A fleet on this machine: PostgreSQL, Redis, moto's S3 server, sync workers, three Brain
# instances and nginx in front, a demo conversation streamed through nginx; Ctrl-C stops it all.
cluster: dev-bootstrap system-packages
	$(BIN)/python scripts/run_cluster.py

# Tests run on TEST_WORKERS parallel workers, a module per worker (each worker starts its own
# PostgreSQL, Redis and object stores, and every server listens on a port of its own); most of a
# test's time is spent waiting on real processes, so there are more workers than cores. The
# client suite (`-m client`) runs at the same time under the 2.0.0 client on CLIENT_WORKERS more
# (its output follows the main run's). -rfEs lists every failure and every skipped test with its
# reason at the end of each run; either run failing fails `make test`.
TEST_WORKERS ?= 4
CLIENT_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -rfEs --dist loadfile
test: dev-bootstrap system-packages lint typecheck $(CLIENT_2_0_STAMP)
	@client_log=$$(mktemp /tmp/brain-client-2.0.XXXXXX.log); \
	PYTHONPATH=$(CLIENT_2_0) BRAIN_TEST_CLIENT=2.0.0 BRAIN_TEST_FIRST_PORT_BLOCK=$(TEST_WORKERS) \
		$(PYTEST) -n $(CLIENT_WORKERS) -m client \
		--basetemp=$$(mktemp -d /tmp/brain-tests.XXXXXX) tests > $$client_log 2>&1 & client=$$!; \
	$(PYTEST) -n $(TEST_WORKERS) --durations=25 --basetemp=$$(mktemp -d /tmp/brain-tests.XXXXXX) tests; main=$$?; \
	wait $$client; under_2_0=$$?; \
	echo "== the client suite under aex-brain 2.0.0 (exit $$under_2_0) =="; cat $$client_log; \
	test $$main = 0 && test $$under_2_0 = 0

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(DEV_STAMP)
	$(BIN)/mypy .

bench: $(DEV_STAMP) $(PI_STAMP)
	$(BIN)/python bench/turn_bench.py
	$(BIN)/python bench/runner_bench.py
	$(BIN)/python bench/tool_bench.py
	$(BIN)/python bench/tool_turns_bench.py
	$(BIN)/python bench/scale_bench.py
	$(BIN)/python bench/load_bench.py
	$(BIN)/python bench/reconnect_bench.py
	$(BIN)/python bench/wasm_bench.py
	$(BIN)/python bench/persistence_bench.py
	$(BIN)/python bench/executor_bench.py
	$(BIN)/python bench/spawn_bench.py
	$(BIN)/python bench/schema_bench.py
	$(BIN)/python bench/pi_bench.py

# The mixed-fault drill (about 25 minutes; not part of test or bench): SEED=N replays one.
drill: $(DEV_STAMP) system-packages
	$(BIN)/python bench/fault_drill.py --rounds 500 --minutes 25 $(if $(SEED),--seed $(SEED))

# The fleet crash drill (kill -9 of one of three instances, 100 rounds, about 11 minutes, at most
# 40; not part of test or bench): SEED=N replays one.
fleet-drill: $(DEV_STAMP) system-packages
	$(BIN)/python bench/fleet_drill.py --rounds 100 --minutes 40 $(if $(SEED),--seed $(SEED))

# The drain drill (a graceful SIGTERM of one of three instances under load behind a balancer,
# 20 rounds, about 5 minutes; not part of test or bench): no request may be cut.
drain-drill: $(DEV_STAMP) system-packages
	$(BIN)/python bench/drain_drill.py --rounds 20

clean:
	rm -rf $(VENV) .brain .brain-archive staticfiles runners/pi/node_modules
