"""Server-rendered dashboard: the repositories and what their suggestions became.

Signed out, a visitor sees public repositories only; "Sign in with GitHub" (the
App's OAuth web flow) adds the private repositories GitHub says they can read,
as of sign-in. Nothing about a private repository is rendered otherwise, not
even its name. Pages are Jinja2 (``templates/dashboard``), charts are SVG drawn
here.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any

import jinja2
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import escape
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from bot import charts, tracking
from bot.github import GitHubError
from bot.models import Installation, Suggestion, WebSession, utcnow
from bot.oauth import UserAccess, authorize_url, user_access
from bot.settings import Settings

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
SESSION_COOKIE = "kz_session"
STATE_COOKIE = "kz_oauth_state"
SESSION_DAYS = 7


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pct"] = lambda v: "—" if v is None else f"{v:.0%}"
    env.filters["x"] = tracking.times
    env.filters["ms"] = lambda v: "—" if v is None else f"{v:.4g}"
    return env


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# The five states a posted suggestion is in now: their bars add up to the "posted" card.
STATUS_COLOURS = {
    "waiting": "#8c959f",
    "applied": "#0969da",
    "merged": "#1a7f37",
    "dismissed": "#cf222e",
    "outdated": "#bf8700",
}


def router(sessions: sessionmaker[Session], settings: Settings) -> APIRouter:
    pages = APIRouter(include_in_schema=False)
    env = _env()

    def exchange(code: str, redirect_uri: str) -> UserAccess:
        if not (settings.github_client_id and settings.github_client_secret):
            raise GitHubError("POST", "/login/oauth/access_token", None, "sign-in is not configured")
        return user_access(
            api_url=settings.github_api_url,
            web_url=settings.github_web_url,
            client_id=settings.github_client_id,
            client_secret=settings.github_client_secret.get_secret_value(),
            code=code,
            redirect_uri=redirect_uri,
        )

    def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(env.get_template(f"dashboard/{name}").render(**context), status_code=status)

    def viewer(session: Session, request: Request) -> WebSession | None:
        token = request.cookies.get(SESSION_COOKIE)
        if not token:
            return None
        found = session.get(WebSession, _digest(token))
        if found is None or found.expires_at < utcnow():
            return None
        return found

    def visible(session: Session, who: WebSession | None) -> list[str]:
        """Repositories with suggestions this visitor may see: public ones, and theirs."""
        rows = session.execute(select(Suggestion.repository, Suggestion.private).distinct()).all()
        private = {r for r, p in rows if p}
        public = {r for r, _ in rows} - private
        mine = set(who.repositories) if who else set()
        return sorted(public | (private & mine))

    def callback_url(request: Request) -> str:
        base = settings.public_url or str(request.base_url)
        return base.rstrip("/") + "/oauth/callback"

    def page_context(who: WebSession | None) -> dict[str, Any]:
        return {"login": who.login if who else None, "sign_in": bool(settings.github_client_id)}

    @pages.get("/", response_class=HTMLResponse)
    def overview(request: Request) -> HTMLResponse:
        with sessions() as session:
            who = viewer(session, request)
            repos = visible(session, who)
            accounts = {i.id: i.account for i in session.execute(select(Installation)).scalars()}
            rows = []
            for repository in repos:
                stats = tracking.stats(session, repository=repository)
                inst = session.execute(
                    select(Suggestion.installation_id).where(Suggestion.repository == repository).limit(1)
                ).scalar_one()
                rows.append({"repository": repository, "account": accounts.get(inst, ""), **stats})
            return render("index.html.j2", repos=rows, **page_context(who))

    @pages.get("/repos/{owner}/{repo}", response_class=HTMLResponse)
    def repository_page(owner: str, repo: str, request: Request) -> HTMLResponse:
        repository = f"{owner}/{repo}"
        with sessions() as session:
            who = viewer(session, request)
            if repository not in visible(session, who):
                return render("missing.html.j2", 404, what=repository, **page_context(who))
            stats = tracking.stats(session, repository=repository)
            rows = list(
                session.execute(
                    select(Suggestion)
                    .where(Suggestion.repository == repository)
                    .order_by(Suggestion.id.desc())
                ).scalars()
            )
            status_chart = charts.bar_chart(
                [(s, float(stats[s]), c) for s, c in STATUS_COLOURS.items()],
                label="what became of the suggestions posted",
            )
            timed = [s for s in rows if s.speedup_eager or s.speedup_compile]
            bars = [(f"#{s.pull_number} {s.class_name}", s.speedup_eager, s.speedup_compile) for s in timed]
            speed_chart = charts.speedup_chart(bars[:20]) if bars else ""
            trend = charts.trend_chart(
                [charts.Point(s.posted_at, s.speedup_eager, s.speedup_compile) for s in timed if s.posted_at]
            )
            return render(
                "repo.html.j2",
                repository=repository,
                stats=stats,
                suggestions=rows,
                status_chart=status_chart,
                speed_chart=speed_chart,
                trend_chart=trend,
                **page_context(who),
            )

    @pages.get("/login")
    def login(request: Request) -> Response:
        if not settings.github_client_id:
            what = "sign-in (not configured on this server)"
            return render("missing.html.j2", 503, what=what, **page_context(None))
        state = secrets.token_urlsafe(24)
        target = authorize_url(
            settings.github_web_url, settings.github_client_id or "", callback_url(request), state
        )
        response = RedirectResponse(target, status_code=302)
        secure = request.url.scheme == "https"
        response.set_cookie(STATE_COOKIE, state, max_age=600, httponly=True, samesite="lax", secure=secure)
        return response

    @pages.get("/oauth/callback")
    async def oauth_callback(request: Request, code: str = "", state: str = "") -> Response:
        expected = request.cookies.get(STATE_COOKIE, "")
        if not code or not state or not expected or not hmac.compare_digest(state, expected):
            return HTMLResponse("Sign-in failed: the request did not come from this site's sign-in.", 400)
        try:
            access = await run_in_threadpool(exchange, code, callback_url(request))
        except GitHubError as exc:
            return HTMLResponse(f"Sign-in failed: {escape(exc.detail)}", 400)
        token = secrets.token_urlsafe(32)
        with sessions() as session, session.begin():
            session.add(
                WebSession(
                    id=_digest(token),
                    login=access.login,
                    repositories=access.repositories,
                    expires_at=utcnow() + timedelta(days=SESSION_DAYS),
                )
            )
        response = RedirectResponse("/", status_code=303)
        secure = request.url.scheme == "https"
        response.set_cookie(
            SESSION_COOKIE, token, max_age=SESSION_DAYS * 86400, httponly=True, samesite="lax", secure=secure
        )
        response.delete_cookie(STATE_COOKIE)
        return response

    @pages.get("/logout")
    def logout(request: Request) -> Response:
        token = request.cookies.get(SESSION_COOKIE)
        if token:
            with sessions() as session, session.begin():
                found = session.get(WebSession, _digest(token))
                if found is not None:
                    session.delete(found)
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    return pages
