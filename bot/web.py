"""The web edge: GitHub's webhook in, one queued task out, in milliseconds. Health and metrics beside it.

Never calls GitHub and never waits on a GPU. The decision (``decide``) and the
queue (``enqueue``) are parameters, so tests hand in plain functions.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Receive, Scope, Send

from bot import api, dashboard, db
from bot.metrics import StateCollector
from bot.models import Outcome
from bot.settings import Settings
from bot.webhooks import SIGNATURE_HEADER, BadDelivery, WebhookDelivery, parse_delivery, verify_signature

Decide = Callable[[str, dict[str, Any]], dict[str, Any] | None]
Enqueue = Callable[[dict[str, Any], str], str]

log = logging.getLogger("kernelize.web")
OPENAPI_URL = "/api/v1/openapi.json"
DOCS_URL = "/api/v1/docs"
DOCS_ASSETS = "/api/v1/docs/assets"
# Deliveries handled at once per process, each in a thread holding one pooled database connection
# (fewer than the pool's 20 in bot.db.make_engine, so a burst never opens connections beyond it).
# Above this they wait in the event loop, which costs nothing, instead of in more threads, which
# on a small machine spend the CPU taking turns at the GIL.
WEBHOOK_THREADS = 16


class _Unavailable(Exception):
    """The broker or the database failed: answer 503 so GitHub shows a delivery worth redelivering."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _TooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge  # refused before reading a byte
    chunks, size = [], 0
    async for chunk in request.stream():  # also caps chunked bodies and lying Content-Lengths
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


@contextlib.asynccontextmanager
async def _frozen_heap(app: FastAPI) -> AsyncIterator[None]:
    """When the server starts: what was imported and built so far is left out of garbage collection.

    A full collection walks every object the process holds (about 150,000 here: FastAPI, SQLAlchemy,
    Celery and their imports), 50-190 ms on one core with the GIL held, every delivery in the
    process waiting; they came every few seconds under load and were most of the p99. Frozen, the
    collector walks only what came after."""
    gc.collect()
    gc.freeze()
    yield


class _WebhookFirst:
    """POST /webhook straight to its handler, ahead of FastAPI's exception middleware, routing and
    dependency solving (a tenth of a delivery's CPU: docs/benchmarks.md, "Webhook ingest"). Every
    other request, and the route itself where the path differs (a root path), go through FastAPI.
    Errors still reach FastAPI's outer ServerErrorMiddleware: a 500, logged."""

    def __init__(self, app: ASGIApp, handler: Callable[[Request], Awaitable[Response]]) -> None:
        self.app, self.handler = app, handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/webhook" and scope["method"] == "POST":
            response = await self.handler(Request(scope, receive))
            await response(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def create_app(
    settings: Settings,
    *,
    decide: Decide,
    enqueue: Enqueue,
    session_factory: sessionmaker[Session] | None = None,
    broker_ok: Callable[[], bool] | None = None,
    queue_depth: Callable[[], dict[str, int]] | None = None,
) -> FastAPI:
    sessions = session_factory or db.session_factory(db.make_engine(settings.database_url))
    if settings.webhook_secret is None:
        raise ValueError("the webhook server needs a webhook secret")
    secret = settings.webhook_secret.get_secret_value().encode()
    threads = anyio.CapacityLimiter(WEBHOOK_THREADS)
    registry = CollectorRegistry()  # per app: tests build many apps in one process
    deliveries = Counter(
        "kernelize_webhook_deliveries", "Signed deliveries answered", ["event", "outcome"], registry=registry
    )
    rejected = Counter("kernelize_webhook_rejected", "Deliveries refused", ["reason"], registry=registry)
    seconds = Histogram(
        "kernelize_webhook_seconds",
        "Time to answer a webhook delivery",
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        registry=registry,
    )
    # Queue depth, jobs and GPU-seconds per installation: read from the broker and the database at scrape.
    registry.register(StateCollector(sessions, queue_depth))
    # The OpenAPI description covers the suggestions API only (the webhook is GitHub's to call).
    # Swagger UI from the app itself (FastAPI's default page loads it from a CDN: blank offline).
    app = FastAPIOffline(
        title="Kernelize",
        docs_url=DOCS_URL,
        redoc_url=None,
        openapi_url=OPENAPI_URL,
        static_url=DOCS_ASSETS,
        lifespan=_frozen_heap,
    )

    def reject(status: int, reason: str, error: str, delivery_id: str | None) -> JSONResponse:
        rejected.labels(reason).inc()
        extra = {"delivery_id": (delivery_id or "")[:100], "outcome": "rejected", "reason": reason}
        log.warning("webhook rejected: %s", error, extra=extra | {"status": status})
        return JSONResponse({"status": "rejected", "error": error}, status_code=status)

    def handle(d: WebhookDelivery) -> tuple[int, dict[str, Any], str | None]:
        """Decide, then record and enqueue in one transaction, rolled back if the broker refuses.

        The row goes in as it will stay (outcome, and the task id ``enqueue`` gives every
        delivery's first task): one INSERT, then the broker, then COMMIT. Its unique key holds a
        concurrent redelivery until this transaction ends, so one of them enqueues."""
        job = None if d.event == "ping" else decide(d.event, d.payload)  # pure: before the transaction
        outcome: Outcome = "ping" if d.event == "ping" else "ignored" if job is None else "enqueued"
        planned = None if job is None else f"delivery-{d.delivery_id}"
        try:
            with db.bound_engine(sessions).begin() as conn:
                new = db.claim_delivery(
                    conn,
                    delivery_id=d.delivery_id,
                    event=d.event,
                    action=d.action,
                    installation_id=d.installation_id,
                    repository=d.repository,
                    outcome=outcome,
                    job_id=planned,
                )
                if not new:
                    return 200, {"status": "duplicate"}, None
                if job is None:
                    return (
                        (200, {"status": "pong"}, None)
                        if d.event == "ping"
                        else (202, {"status": outcome}, None)
                    )
                try:
                    job_id = enqueue(job, d.delivery_id)
                except Exception as exc:
                    log.error("enqueue failed: %s: %s", type(exc).__name__, exc)
                    raise _Unavailable("broker") from exc
                if job_id != planned:  # an enqueue that names its tasks otherwise
                    db.set_job_id(conn, d.delivery_id, job_id)
            return 202, {"status": "enqueued", "job": job}, job_id
        except SQLAlchemyError as exc:
            log.error("database failed: %s: %s", type(exc).__name__, exc)
            raise _Unavailable("database") from exc

    async def receive(request: Request) -> Response:
        delivery_id = request.headers.get("x-github-delivery")
        try:
            body = await _read_body(request, settings.max_body_bytes)
        except _TooLarge:
            return reject(413, "too_large", f"body over {settings.max_body_bytes} bytes", delivery_id)
        if not verify_signature(secret, body, request.headers.get(SIGNATURE_HEADER)):
            return reject(401, "signature", f"missing or wrong {SIGNATURE_HEADER}", delivery_id)
        try:
            delivery = parse_delivery(request.headers, body)
        except BadDelivery as exc:
            return reject(400, "malformed", str(exc), delivery_id)
        try:
            status, answer, job_id = await anyio.to_thread.run_sync(handle, delivery, limiter=threads)
        except _Unavailable as exc:
            return reject(503, exc.reason, f"{exc.reason} unavailable, nothing recorded", delivery_id)
        deliveries.labels(delivery.event, answer["status"]).inc()
        fields = {"event": delivery.event, "action": delivery.action, "outcome": answer["status"]}
        extra = fields | {"delivery_id": delivery.delivery_id, "status": status, "job_id": job_id}
        log.info("webhook %s", answer["status"], extra=extra)
        return JSONResponse(answer, status_code=status)

    @app.post("/webhook", include_in_schema=False)
    async def webhook(request: Request) -> Response:
        with seconds.time():
            return await receive(request)

    app.add_middleware(_WebhookFirst, handler=webhook)

    app.include_router(api.router(sessions, settings.github_api_url))
    app.include_router(dashboard.router(sessions, settings))

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> JSONResponse:
        checks = {"database": _check(lambda: _database_ok(sessions)), "broker": "unchecked"}
        if broker_ok is not None:
            checks["broker"] = _check(broker_ok)
        healthy = all(value in ("ok", "unchecked") for value in checks.values())
        return JSONResponse(checks, status_code=200 if healthy else 503)

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _database_ok(sessions: sessionmaker[Session]) -> bool:
    with sessions() as session:
        return session.execute(text("SELECT 1")).scalar() == 1


def _check(probe: Callable[[], bool]) -> str:
    try:
        if probe():
            return "ok"
    except Exception as exc:  # the reason goes to the log, not to whoever polls /healthz
        log.warning("health check failed: %s: %s", type(exc).__name__, exc)
    return "unavailable"
