"""The JSON API over tracked suggestions (documented by FastAPI's OpenAPI at ``/docs``).

Public repositories are served to anyone. A private repository is served to a caller whose GitHub
token (``Authorization: Bearer <token>``: a personal access token, a workflow's ``GITHUB_TOKEN``,
the app's user token) can read it, as GitHub answers for that token; the answer is cached for
``TOKEN_TTL_S`` per token and repository (only a digest of the token is kept). To anyone else a
private repository's answer is the same 404 as for a repository Kernelize has never seen.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from sqlalchemy import case, func, select
from sqlalchemy.orm import Session, sessionmaker

from bot import tracking
from bot.github import GitHubError
from bot.models import Suggestion
from bot.oauth import token_reads

TOKEN_TTL_S = 60.0
TOKEN_CACHE_SIZE = 4096
_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="GitHub token",
    description=(
        "Optional. A GitHub token (personal access token, a workflow's GITHUB_TOKEN, or the app's "
        "user token). With it, private repositories that the token can read are served too; "
        "GitHub is asked once a minute per token and repository."
    ),
)
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]

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
    geomean_speedup_merged: float | None = Field(
        description="geometric mean speedup of the merged suggestions over eager PyTorch"
    )
    geomean_speedup_compile_merged: float | None = Field(
        description="geometric mean speedup of the merged suggestions over torch.compile of the original"
    )
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


class TokenAccess:
    """Which repositories a GitHub token reads, asked of GitHub and kept ``ttl_s`` seconds."""

    def __init__(
        self, reads: Callable[[str, str], bool], ttl_s: float = TOKEN_TTL_S, size: int = TOKEN_CACHE_SIZE
    ) -> None:
        self._reads, self._ttl, self._size = reads, ttl_s, size
        self._seen: OrderedDict[tuple[str, str], tuple[float, bool]] = OrderedDict()
        self._lock = threading.Lock()

    def reads(self, token: str, repository: str) -> bool:
        key = (hashlib.sha256(token.encode()).hexdigest(), repository)
        now = time.monotonic()
        with self._lock:
            hit = self._seen.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
        try:
            answer = self._reads(token, repository)
        except GitHubError as exc:
            if exc.status == 401:
                raise HTTPException(
                    401, "GitHub did not accept this token", headers={"WWW-Authenticate": "Bearer"}
                ) from None
            raise HTTPException(503, "could not check the token with GitHub; try again later") from None
        with self._lock:
            self._seen[key] = (now + self._ttl, answer)
            self._seen.move_to_end(key)
            while len(self._seen) > self._size:
                self._seen.popitem(last=False)
        return answer


def _visible(
    session: Session, repository: str, token: HTTPAuthorizationCredentials | None, access: TokenAccess
) -> None:
    """404 unless the repository has suggestions and is public, or the caller's token reads it."""
    query = select(func.count(Suggestion.id), func.max(case((Suggestion.private, 1), else_=0))).where(
        Suggestion.repository == repository
    )
    count, private = session.execute(query).one()
    missing = HTTPException(404, f"no public repository {repository} with suggestions")
    if not count:
        raise missing
    if private and (
        token is None or not token.credentials or not access.reads(token.credentials, repository)
    ):
        raise missing


def router(sessions: sessionmaker[Session], api_url: str = "https://api.github.com") -> APIRouter:
    api = APIRouter(prefix="/api/v1", tags=["suggestions"])
    access = TokenAccess(lambda token, repository: token_reads(api_url, token, repository))

    @api.get("/repos/{owner}/{repo}/stats", response_model=Stats)
    def repo_stats(owner: str, repo: str, token: Bearer = None) -> dict[str, Any]:
        """Posted, applied, merged, dismissed and outdated suggestions, the acceptance rate (applied or
        merged over posted), median time to apply, geometric-mean speedup of merged suggestions, and
        acceptance by generator. A private repository needs a GitHub token that can read it."""
        repository = f"{owner}/{repo}"
        with sessions() as session:
            _visible(session, repository, token, access)
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
        token: Bearer = None,
    ) -> dict[str, Any]:
        """Suggestions, newest first, with their status history; filter by status, generator, pull.
        A private repository needs a GitHub token that can read it."""
        repository = f"{owner}/{repo}"
        with sessions() as session:
            _visible(session, repository, token, access)
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
