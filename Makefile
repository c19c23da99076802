# Brain for Python. Quick start: `make run` (demo on embedded defaults) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.requirements-installed
DEBIAN_PACKAGES := redis-server postgresql chromium
# The admin's static files, hashed and compressed by collectstatic; runbrain serves them from here.
STATIC_MANIFEST := staticfiles/staticfiles.json
STATIC_SOURCES := $(shell find brainsite sessions_app tools_app persistence_app -path '*/static/*' -type f 2>/dev/null)

.PHONY: run test bootstrap system-packages lint typecheck bench drill fleet-drill clean

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --no-compile -r requirements.txt
	touch $(STAMP)

$(STATIC_MANIFEST): $(STAMP) $(STATIC_SOURCES)
	BRAIN_STATIC_ROOT= $(BIN)/python manage.py collectstatic --noinput --clear --verbosity 0

bootstrap: $(STAMP) $(STATIC_MANIFEST)

# Debian packages the test suite runs for real (Redis, PostgreSQL, Chromium for the browser tests).
# apt does not start them.
system-packages:
	@missing=""; for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

run: bootstrap
	$(BIN)/python scripts/run_demo.py

test: bootstrap system-packages lint typecheck
	$(BIN)/python -m pytest -q --basetemp=$$(mktemp -d /tmp/brain-tests.XXXXXX) tests

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy .

bench: $(STAMP)
	$(BIN)/python bench/turn_bench.py
	$(BIN)/python bench/runner_bench.py
	$(BIN)/python bench/tool_bench.py
	$(BIN)/python bench/tool_turns_bench.py
	$(BIN)/python bench/scale_bench.py
	$(BIN)/python bench/load_bench.py
	$(BIN)/python bench/persistence_bench.py
	$(BIN)/python bench/executor_bench.py
	$(BIN)/python bench/spawn_bench.py
	$(BIN)/python bench/schema_bench.py

# The mixed-fault drill (about 25 minutes; not part of test or bench): SEED=N replays one.
drill: $(STAMP) system-packages
	$(BIN)/python bench/fault_drill.py --rounds 500 --minutes 25 $(if $(SEED),--seed $(SEED))

# The fleet crash drill (kill -9 of one of three instances, 100 rounds, about 20 minutes; not part
# of test or bench): SEED=N replays one.
fleet-drill: $(STAMP) system-packages
	$(BIN)/python bench/fleet_drill.py --rounds 100 --minutes 20 $(if $(SEED),--seed $(SEED))

clean:
	rm -rf $(VENV) .brain .brain-archive staticfiles
