# Two images from one file (docs/self-hosting.md):
#   docker build --target web -t kernelize-web .
#       the webhook server and the github queue worker: FastAPI, Celery, PyGithub; no torch
#   docker build --target gpu-worker -t kernelize-gpu-worker .
#       the engine on a CUDA GPU: torch, Triton, transformers; holds no GitHub credentials

# ---- web: kernelize serve, kernelize worker --queues github -----------------------------------
FROM python:3.11-slim-bookworm AS web
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    KERNELIZE_LOG_FORMAT=json
# git: the github worker fetches a pull request's head commit with GitPython (bot/repo_fetch.py).
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 kernelize
WORKDIR /app
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY runners ./runners
COPY templates ./templates
# The project's requirements and its web extra, less the engine's torch and Triton (never imported here).
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
reqs = [r for r in p['dependencies'] if not r.startswith(('torch', 'triton'))]; \
print('\n'.join(reqs + p['optional-dependencies']['web']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && pip install --no-deps . \
    && rm /tmp/requirements.txt
USER 10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
CMD ["kernelize", "serve", "--host", "0.0.0.0", "--port", "8000", "--no-worker"]

# ---- gpu-worker: kernelize worker --queues gpu --gpus ... ---------------------------------------
# PyTorch's CUDA runtime image (the torch 2.11 / CUDA 13.0 pair the benchmarks were measured with).
FROM pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime AS gpu-worker
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    KERNELIZE_LOG_FORMAT=json HF_HOME=/models
# bubblewrap: every evaluation of pull-request code runs in a sandbox of its own (runners/sandbox.py);
# without it the worker takes no task. The container needs the security options in compose.yaml.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 10001 kernelize \
    && mkdir -p /models \
    && chown kernelize /models
WORKDIR /app
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY runners ./runners
COPY templates ./templates
# The image's own torch satisfies the requirement; the llm and worker extras add transformers and Celery.
# hadolint ignore=DL3013
RUN pip install ".[llm,worker]"
USER 10001
EXPOSE 9100
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9100/healthz', timeout=4)"]
CMD ["kernelize", "worker", "--queues", "gpu", "--gpus", "0", "--health-port", "9100"]
