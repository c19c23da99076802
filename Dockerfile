# Brain's container image: `docker build --tag brain:local .` (README, Running Brain in a container).
# Mount the host config at $BRAIN_CONFIG (listen on 0.0.0.0:8080, data_dir inside /data), keep
# /data on a volume, pass secrets as environment variables. tests/unit/test_dockerfile.py runs
# this file's entry point and health check from the same layout against the project's venv.

# -- builder: a venv with the runtime requirements only, the app, its collected static files --
FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app
# requirements first: the dependency layer is rebuilt only when they change
COPY requirements.txt ./
RUN pip install -r requirements.txt
COPY manage.py ./
COPY brainsite/ brainsite/
COPY foundation/ foundation/
COPY sessions_app/ sessions_app/
COPY tools_app/ tools_app/
COPY toolkits/ toolkits/
COPY persistence_app/ persistence_app/
COPY fleet_app/ fleet_app/
COPY runners/ runners/
COPY templates/ templates/
COPY examples/ examples/
COPY deploy/fleet_config.py deploy/
# The admin's CSS and JavaScript, hashed and gzipped into /app/staticfiles (as `make bootstrap`
# does); settings want a data dir, so a throwaway one. Then bytecode, since /app is read-only.
RUN BRAIN_DATA_DIR="$(mktemp -d)" BRAIN_STATIC_ROOT= python manage.py collectstatic --noinput --clear --verbosity 0 \
    && python -m compileall -q .

# -- runtime: the venv and the app, owned by root and read-only to Brain's own user --
FROM python:3.11-slim
# 10001: no clash with a host user's uid when /data is a bind mount; numeric below so that
# Kubernetes' runAsNonRoot can verify it
RUN useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin brain \
    && install -d -o 10001 -g 10001 -m 0700 /data
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /app /app
WORKDIR /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    BRAIN_CONFIG=/config/brain.json \
    BRAIN_DATA_DIR=/data
USER 10001:10001
VOLUME ["/data"]
EXPOSE 8080
# runbrain drains on SIGTERM within 20 s: give `docker stop` -t 30 (compose: stop_grace_period)
STOPSIGNAL SIGTERM
# Ready once migrated, recovered and (in a fleet) joined. The port comes from the config's
# `listen`; slim images have no curl.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import json, os, urllib.request; host, _, port = json.load(open(os.environ['BRAIN_CONFIG']))['listen'].rpartition(':'); host = host.strip('[]'); host = {'': '127.0.0.1', '0.0.0.0': '127.0.0.1', '::': '::1'}.get(host, host); urllib.request.urlopen('http://%s:%s/health/ready' % ('[%s]' % host if ':' in host else host, port), timeout=4)"]
# $BRAIN_CONFIG names the host config for runbrain, the health check and syncworker alike;
# arguments after the image name are runbrain's (e.g. --skip-migrate). exec: runbrain is PID 1
# and gets the SIGTERM itself.
ENTRYPOINT ["sh", "-c", "exec python manage.py runbrain --config \"$BRAIN_CONFIG\" \"$@\"", "runbrain"]
CMD []
