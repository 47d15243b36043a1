"""The JSON API over tracked suggestions (documented by FastAPI's OpenAPI at ``/docs``).

Only public repositories are served: nothing about a private repository is
visible here (signed-in access comes with the dashboard's GitHub sign-in).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import BaseModel
from sqlalchemy import case, func, select
from sqlalchemy.orm import Session, sessionmaker

from bot import tracking
from bot.models import Suggestion

Status = Literal["posted", "applied", "merged", "outdated", "dismissed"]


class GeneratorStats(BaseModel):
    posted: int
    accepted: int
    acceptance_rate: float | None


class Stats(BaseModel):
    repository: str
    posted: int
    waiting: int
    applied: int
    merged: int
    dismissed: int
    outdated: int
    accepted: int
    acceptance_rate: float | None
    median_seconds_to_apply: float | None
    geomean_speedup_merged: float | None
    by_generator: dict[str, GeneratorStats]


class Event(BaseModel):
    status: str
    at: str | None
    sha: str | None
    actor: str | None
    detail: str


class SuggestionOut(BaseModel):
    id: int
    repository: str
    pull_number: int
    head_sha: str
    path: str
    lines: list[int]
    class_name: str
    generator: str
    candidate: str
    code_sha256: str
    max_abs_error: float | None
    eager_ms: float | None
    compile_ms: float | None
    kernel_ms: float | None
    speedup_eager: float | None
    speedup_compile: float | None
    gpu: str
    status: str
    applied_sha: str | None
    applied_by: str | None
    applied_via_button: bool
    thumbs_up: int
    thumbs_down: int
    comment_url: str
    posted_at: str | None
    applied_at: str | None
    closed_at: str | None
    history: list[Event]


class SuggestionPage(BaseModel):
    total: int
    page: int
    per_page: int
    items: list[SuggestionOut]


def _public(session: Session, repository: str) -> None:
    """404 unless the repository has suggestions and none of them is private."""
    query = select(func.count(Suggestion.id), func.max(case((Suggestion.private, 1), else_=0))).where(
        Suggestion.repository == repository
    )
    count, private = session.execute(query).one()
    if not count or private:
        raise HTTPException(404, f"no public repository {repository} with suggestions")


def router(sessions: sessionmaker[Session]) -> APIRouter:
    api = APIRouter(prefix="/api/v1", tags=["suggestions"])

    @api.get("/repos/{owner}/{repo}/stats", response_model=Stats)
    def repo_stats(owner: str, repo: str) -> dict[str, Any]:
        """Posted, applied, merged, dismissed and outdated suggestions, the acceptance rate (applied or
        merged over posted), median time to apply, geometric-mean speedup of merged suggestions, and
        acceptance by generator."""
        repository = f"{owner}/{repo}"
        with sessions() as session:
            _public(session, repository)
            return {"repository": repository, **tracking.stats(session, repository=repository)}

    @api.get("/installations/{installation_id}/stats", response_model=Stats)
    def installation_stats(installation_id: int) -> dict[str, Any]:
        """The same figures over an installation's public repositories."""
        with sessions() as session:
            data = tracking.stats(session, installation_id=installation_id, public_only=True)
        if not data["posted"]:
            raise HTTPException(404, f"no public suggestions for installation {installation_id}")
        return {"repository": f"installation {installation_id}", **data}

    @api.get("/repos/{owner}/{repo}/suggestions", response_model=SuggestionPage)
    def repo_suggestions(
        owner: str,
        repo: str,
        response: Response,
        status: Status | None = None,
        generator: str | None = None,
        pull: int | None = Query(None, ge=1, description="only this pull request"),
        page: int = Query(1, ge=1),
        per_page: int = Query(30, ge=1, le=100),
    ) -> dict[str, Any]:
        """Suggestions, newest first, with their status history; filter by status, generator, pull."""
        repository = f"{owner}/{repo}"
        with sessions() as session:
            _public(session, repository)
            query = select(Suggestion).where(Suggestion.repository == repository)
            if status:
                query = query.where(Suggestion.status == status)
            if generator:
                query = query.where(Suggestion.generator == generator)
            if pull:
                query = query.where(Suggestion.pull_number == pull)
            total = int(session.execute(select(func.count()).select_from(query.subquery())).scalar_one())
            rows = session.execute(
                query.order_by(Suggestion.id.desc()).offset((page - 1) * per_page).limit(per_page)
            ).scalars()
            items = [tracking.as_dict(s) for s in rows]
        last = max(1, -(-total // per_page))
        here = f"/api/v1/repos/{owner}/{repo}/suggestions"
        links = []
        if page < last:
            links.append(f'<{here}?page={page + 1}&per_page={per_page}>; rel="next"')
        links.append(f'<{here}?page={last}&per_page={per_page}>; rel="last"')
        response.headers["Link"] = ", ".join(links)
        return {"total": total, "page": page, "per_page": per_page, "items": items}

    return api
