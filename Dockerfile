# Chatgate gateway image: slim Python, non-root, dependencies in a cached layer.
FROM python:3.11-slim AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/chatgate

# Dependencies first, exactly as locked (scripts/lock: one version of each, its files'
# sha256 checked): two builds install the same packages. This layer is rebuilt only when
# requirements.lock changes.
COPY requirements.lock ./
RUN pip install --require-hashes -r requirements.lock

COPY pyproject.toml README.md ./
COPY app ./app
COPY alembic ./alembic
COPY alembic.ini ./
COPY scripts ./scripts
# --no-deps: the project's dependencies are the lock's, installed above.
RUN pip install --no-deps . \
    && useradd --create-home --uid 10001 chatgate \
    && mkdir -p /srv/chatgate/var && chown chatgate /srv/chatgate/var

USER chatgate
ENV CHATGATE_PORT=8000
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('CHATGATE_PORT', '8000'), timeout=2)"
ENTRYPOINT ["scripts/docker-entrypoint.sh"]
