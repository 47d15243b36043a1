"""The endpoints the fake implements: one ``_h_<name>`` method per (method, path template) in ``ROUTES``.

``Endpoints`` is a mixin of :class:`~tests.fake_github.server.FakeGitHub`: handlers read and change
the fake's state (``self.repos``, ``self.pulls``, ``self.reviews``...) under its lock, raise
:class:`~tests.fake_github.base.HTTPError` for GitHub's error answers and return a ``Reply``.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from .base import (
    LEVELS,
    MAX_BODY,
    MAX_PER_PAGE,
    MAX_PR_FILES,
    Actor,
    AppConfig,
    Ctx,
    HTTPError,
    Reply,
    Route,
    iso,
    to_sentence,
    utc_now,
)
from .diff import file_patch
from .render import Renderer, node_id, role_permissions
from .state import (
    CheckRun,
    Installation,
    Issue,
    IssueComment,
    Pull,
    PullFile,
    Reaction,
    Repo,
    Review,
    ReviewComment,
    Token,
    User,
    fake_sha,
    git_blob_sha,
)


def _r(handler: str, auth: str = "repo", *perms: tuple[str, str], write: bool = False) -> Route:
    return Route(handler, auth, tuple(perms), write)


_MD = ("metadata", "read")
_IS_R, _IS_W = ("issues", "read"), ("issues", "write")
_PR_R, _PR_W = ("pull_requests", "read"), ("pull_requests", "write")
# GitHub's 403 on /user/installations... for anything but a user access token of a GitHub App
APP_USER_TOKEN_ONLY = (
    "You must authenticate with an access token authorized to a GitHub App in order to list installations"
)

ROUTES: dict[tuple[str, str], Route] = {
    # The manifest flow's last step (manifest.py): no credentials, the one-hour code is the secret
    ("POST", "/app-manifests/{code}/conversions"): _r("create_from_manifest", "any"),
    ("GET", "/app"): _r("get_app", "app"),
    ("GET", "/app/installations"): _r("list_installations", "app"),
    ("GET", "/app/installations/{installation_id}"): _r("get_installation", "app"),
    ("POST", "/app/installations/{installation_id}/access_tokens"): _r("create_token", "app"),
    ("GET", "/repos/{owner}/{repo}/installation"): _r("get_repo_installation", "app"),
    ("GET", "/installation/repositories"): _r("list_installation_repos", "installation"),
    ("GET", "/user"): _r("get_authenticated_user", "user"),
    ("GET", "/user/installations"): _r("list_user_installations", "user"),
    ("GET", "/user/installations/{installation_id}/repositories"): _r("list_user_installation_repos", "user"),
    ("GET", "/rate_limit"): _r("get_rate_limit", "any"),
    ("GET", "/repos/{owner}/{repo}"): _r("get_repo", "repo", _MD),
    ("GET", "/repos/{owner}/{repo}/contents/{path}"): _r("get_contents", "repo", ("contents", "read")),
    ("PUT", "/repos/{owner}/{repo}/contents/{path}"): _r(
        "put_contents", "repo", ("contents", "write"), write=True
    ),
    ("GET", "/repos/{owner}/{repo}/commits/{ref}"): _r("get_commit", "repo", ("contents", "read")),
    ("GET", "/repos/{owner}/{repo}/git/blobs/{file_sha}"): _r("get_blob", "repo", ("contents", "read")),
    ("GET", "/repos/{owner}/{repo}/git/trees/{tree_sha}"): _r("get_tree", "repo", ("contents", "read")),
    ("GET", "/repos/{owner}/{repo}/collaborators/{username}/permission"): _r("get_permission", "repo", _MD),
    ("GET", "/repos/{owner}/{repo}/pulls"): _r("list_pulls", "repo", _PR_R),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}"): _r("get_pull", "repo", _PR_R),
    ("POST", "/repos/{owner}/{repo}/pulls/{pull_number}/comments"): _r(
        "create_review_comment", "repo", _PR_W, write=True
    ),
    ("POST", "/repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies"): _r(
        "create_review_comment", "repo", _PR_W, write=True
    ),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/files"): _r("list_pull_files", "repo", _PR_R),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews"): _r("list_reviews", "repo", _PR_R),
    ("POST", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews"): _r(
        "create_review", "repo", _PR_W, write=True
    ),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}"): _r("get_review", "repo", _PR_R),
    ("PUT", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}"): _r(
        "update_review", "repo", _PR_W, write=True
    ),
    ("PATCH", "/repos/{owner}/{repo}/pulls/comments/{comment_id}"): _r(
        "edit_review_comment", "repo", _PR_W, write=True
    ),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}/comments"): _r(
        "list_review_comments_of_review", "repo", _PR_R
    ),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/comments"): _r("list_review_comments", "repo", _PR_R),
    ("GET", "/repos/{owner}/{repo}/pulls/comments/{comment_id}"): _r("get_review_comment", "repo", _PR_R),
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}"): _r("get_issue", "repo", _IS_R, _PR_R),
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments"): _r(
        "list_issue_comments", "repo", _IS_R, _PR_R
    ),
    ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments"): _r(
        "create_issue_comment", "repo", _IS_W, _PR_W, write=True
    ),
    ("GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}"): _r(
        "get_issue_comment", "repo", _IS_R, _PR_R
    ),
    ("PATCH", "/repos/{owner}/{repo}/issues/comments/{comment_id}"): _r(
        "edit_issue_comment", "repo", _IS_W, _PR_W, write=True
    ),
    ("DELETE", "/repos/{owner}/{repo}/issues/comments/{comment_id}"): _r(
        "delete_issue_comment", "repo", _IS_W, _PR_W, write=True
    ),
    ("GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"): _r(
        "list_comment_reactions", "repo", _IS_R, _PR_R
    ),
    ("POST", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"): _r(
        "create_comment_reaction", "repo", _IS_W, _PR_W, write=True
    ),
    ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/reactions"): _r(
        "create_issue_reaction", "repo", _IS_W, _PR_W, write=True
    ),
    ("GET", "/repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions"): _r(
        "list_review_comment_reactions", "repo", _PR_R
    ),
    ("POST", "/repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions"): _r(
        "create_review_comment_reaction", "repo", _PR_W, write=True
    ),
    ("POST", "/repos/{owner}/{repo}/check-runs"): _r(
        "create_check_run", "repo", ("checks", "write"), write=True
    ),
    ("GET", "/repos/{owner}/{repo}/check-runs/{check_run_id}"): _r(
        "get_check_run", "repo", ("checks", "read")
    ),
    ("PATCH", "/repos/{owner}/{repo}/check-runs/{check_run_id}"): _r(
        "update_check_run", "repo", ("checks", "write"), write=True
    ),
    ("GET", "/repos/{owner}/{repo}/check-runs/{check_run_id}/annotations"): _r(
        "list_annotations", "repo", ("checks", "read")
    ),
    ("GET", "/repos/{owner}/{repo}/commits/{ref}/check-runs"): _r(
        "list_check_runs_for_ref", "repo", ("checks", "read")
    ),
}


class Endpoints:
    """The handlers (a mixin: ``self`` is the FakeGitHub, whose state is declared here for type checkers)."""

    app: AppConfig | None
    users: dict[str, User]
    repos: dict[tuple[str, str], Repo]
    installations: dict[int, Installation]
    tokens: dict[str, Token]
    pulls: dict[tuple[str, str, int], Pull]
    issues: dict[tuple[str, str, int], Issue]
    issue_comments: defaultdict[tuple[str, str, int], list[IssueComment]]
    reviews: defaultdict[tuple[str, str, int], list[Review]]
    check_runs: defaultdict[tuple[str, str], list[CheckRun]]
    reactions: defaultdict[tuple[Any, ...], list[Reaction]]
    _check_suites: dict[tuple[str, str, str], int]
    commit_details: dict[str, tuple[str | None, str]]
    _api: str

    if TYPE_CHECKING:

        def _new_id(self, wanted: int | None = None) -> int: ...

        def _bucket(self, identity: str) -> list[float]: ...

        def role_of(self, repo: Repo, login: str) -> str: ...

        def push(
            self,
            owner: str,
            repo: str,
            number: int,
            head_sha: str,
            files: list[dict[str, Any]] | None = None,
        ) -> Pull: ...

        def issue_token(
            self,
            installation_id: int,
            *,
            ttl_s: float | None = None,
            permissions: dict[str, str] | None = None,
            repositories: list[str] | None = None,
        ) -> str: ...

    def _repo(self, ctx: Ctx, route: Route) -> Repo:
        """The request's repository, if the caller may see it (and write to it, for writes)."""
        repo = self.repos.get((ctx.params["owner"].lower(), ctx.params["repo"].lower()))
        if repo is None:
            raise HTTPError(404, "Not Found")
        actor = ctx.actor
        if actor.kind == "anonymous":
            if repo.private:
                raise HTTPError(404, "Not Found")
            if route.write:
                raise HTTPError(401, "Requires authentication")
            return repo
        if actor.kind == "user":
            role = self.role_of(repo, actor.user.login if actor.user else "")
            if repo.private and role == "none":
                raise HTTPError(404, "Not Found")
            if actor.token is not None and actor.token.client_id is not None:
                # A user access token: the user's access, narrowed to the app's installations
                inst = self._installation_of(repo)
                if inst is None:
                    if repo.private:
                        raise HTTPError(404, "Not Found")
                    if route.write:
                        raise HTTPError(403, "Resource not accessible by integration")
                elif route.perms and not self._granted(inst.permissions, route.perms):
                    raise HTTPError(403, "Resource not accessible by integration")
            return repo
        if actor.kind == "installation":
            assert actor.installation is not None and actor.token is not None
            covered = self._installation_covers(actor.installation, actor.token, repo)
            if not covered:
                if repo.private:
                    raise HTTPError(404, "Not Found")
                if route.write:
                    raise HTTPError(403, "Resource not accessible by integration")
                return repo
            if route.perms and not self._granted(actor.token.permissions, route.perms):
                raise HTTPError(403, "Resource not accessible by integration")
            return repo
        raise HTTPError(401, "Bad credentials")

    def _installation_of(self, repo: Repo) -> Installation | None:
        """The app's installation that covers ``repo``, if any."""
        for inst in self.installations.values():
            if self._installation_covers(inst, Token("", "installation", None, inst.id), repo):
                return inst
        return None

    @staticmethod
    def _installation_covers(inst: Installation, token: Token, repo: Repo) -> bool:
        if inst.account.login.lower() != repo.owner.login.lower():
            return False
        names = inst.repositories
        if token.repositories is not None:
            names = token.repositories
        return names is None or repo.name.lower() in {n.lower() for n in names}

    @staticmethod
    def _granted(granted: dict[str, str], wanted: tuple[tuple[str, str], ...]) -> bool:
        for perm, level in wanted:
            if perm == "metadata":
                return True
            if LEVELS.get(granted.get(perm, ""), 0) >= LEVELS[level]:
                return True
        return False

    def _render(self) -> Renderer:
        return Renderer(self._api, self.app)

    def _author_association(self, repo: Repo, actor: Actor) -> str:
        if actor.kind != "user" or actor.user is None:
            return "NONE"
        if actor.user.login.lower() == repo.owner.login.lower():
            return "OWNER"
        role = self.role_of(repo, actor.user.login)
        return "COLLABORATOR" if role in ("admin", "maintain", "write", "triage") else "NONE"

    def _actor_user(self, actor: Actor) -> User:
        if actor.user is None:
            raise HTTPError(403, "Resource not accessible by integration")
        return actor.user

    # -- pagination --------------------------------------------------------------------------

    def _page(
        self, ctx: Ctx, items: list[Any], *, limit: int | None = None
    ) -> tuple[list[Any], dict[str, str]]:
        """One page of ``items`` as GitHub serves it (per_page ≤ 100), with its ``Link`` header."""
        if limit is not None:
            items = items[:limit]
        try:
            per_page = int(ctx.q("per_page") or 30)
        except ValueError:
            per_page = 30
        per_page = 30 if per_page < 1 else min(per_page, MAX_PER_PAGE)
        try:
            page = max(1, int(ctx.q("page") or 1))
        except ValueError:
            page = 1
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        links = []

        def url(n: int) -> str:
            query = {k: v[-1] for k, v in ctx.query.items()}
            query["page"] = str(n)
            if "per_page" in ctx.query:
                query["per_page"] = ctx.query["per_page"][-1]
            return f"{self._api}{ctx.path}?{urllib.parse.urlencode(query)}"

        if page > 1:
            links.append(f'<{url(min(page - 1, last))}>; rel="prev"')
        if page < last:
            links.append(f'<{url(page + 1)}>; rel="next"')
            links.append(f'<{url(last)}>; rel="last"')
        if page > 1:
            links.append(f'<{url(1)}>; rel="first"')
        return chunk, ({"Link": ", ".join(links)} if links else {})

    # -- handlers: the app -------------------------------------------------------------------

    def _h_get_app(self, ctx: Ctx, route: Route) -> Reply:
        return Reply(200, self._render().app_body())

    def _h_list_installations(self, ctx: Ctx, route: Route) -> Reply:
        render = self._render()
        chunk, link = self._page(ctx, sorted(self.installations.values(), key=lambda i: i.id))
        return Reply(200, [render.installation(i) for i in chunk], link)

    def _installation(self, ctx: Ctx) -> Installation:
        inst = self.installations.get(int(ctx.params["installation_id"]))
        if inst is None:
            raise HTTPError(404, "Not Found")
        return inst

    def _h_get_installation(self, ctx: Ctx, route: Route) -> Reply:
        return Reply(200, self._render().installation(self._installation(ctx)))

    def _h_create_token(self, ctx: Ctx, route: Route) -> Reply:
        inst = self._installation(ctx)
        if inst.suspended_at is not None:
            raise HTTPError(403, "This installation has been suspended")
        body = ctx.json or {}
        wanted = body.get("permissions") or {}
        for perm, level in wanted.items():
            if LEVELS.get(inst.permissions.get(perm, ""), 0) < LEVELS.get(level, 9):
                raise HTTPError(422, "The permissions requested are not granted to this installation.")
        names: list[str] | None = None
        if body.get("repositories") or body.get("repository_ids"):
            names = []
            by_id = {r.id: r for r in self.repos.values()}
            for name in body.get("repositories") or []:
                names.append(name)
            for rid in body.get("repository_ids") or []:
                names.append(by_id[rid].name if rid in by_id else f"#{rid}")
            token_stub = Token("", "installation", None, inst.id)
            for name in names:
                repo = self.repos.get((inst.account.login.lower(), name.lower()))
                if repo is None or not self._installation_covers(inst, token_stub, repo):
                    raise HTTPError(
                        422,
                        "There is at least one repository that does not exist or is not accessible to the "
                        "parent installation.",
                    )
        permissions = {**dict(wanted), "metadata": "read"} if wanted else dict(inst.permissions)
        value = self.issue_token(inst.id, permissions=permissions, repositories=names)
        token = self.tokens[value]
        out: dict[str, Any] = {
            "token": value,
            "expires_at": iso(token.expires_at or 0),
            "permissions": permissions,
            "repository_selection": "selected"
            if names is not None or inst.repositories is not None
            else "all",
        }
        if names is not None:
            render = self._render()
            out["repositories"] = [
                render.repo(self.repos[(inst.account.login.lower(), n.lower())]) for n in names
            ]
        return Reply(201, out)

    def _h_get_repo_installation(self, ctx: Ctx, route: Route) -> Reply:
        repo = self.repos.get((ctx.params["owner"].lower(), ctx.params["repo"].lower()))
        if repo is not None:
            for inst in self.installations.values():
                if self._installation_covers(inst, Token("", "installation", None, inst.id), repo):
                    return Reply(200, self._render().installation(inst))
        raise HTTPError(404, "Not Found")

    def _h_list_installation_repos(self, ctx: Ctx, route: Route) -> Reply:
        actor = ctx.actor
        assert actor.installation is not None and actor.token is not None
        repos = [
            r for r in self.repos.values() if self._installation_covers(actor.installation, actor.token, r)
        ]
        chunk, link = self._page(ctx, sorted(repos, key=lambda r: r.id))
        render = self._render()
        return Reply(
            200,
            {
                "total_count": len(repos),
                "repositories": [render.repo(r) for r in chunk],
                "repository_selection": "all" if actor.installation.repositories is None else "selected",
            },
            link,
        )

    # -- handlers: the signed-in user (user access tokens, see oauth.py) ----------------------

    def _h_get_authenticated_user(self, ctx: Ctx, route: Route) -> Reply:
        user = ctx.actor.user
        if ctx.actor.kind != "user" or user is None:
            raise HTTPError(403, "Resource not accessible by integration")
        owned = [r for r in self.repos.values() if r.owner is user]
        public = sum(not r.private for r in owned)
        return Reply(200, self._render().private_user(user, public, len(owned) - public))

    def _app_user(self, ctx: Ctx) -> User:
        """Whom a user access token of the app (``ghu_``) acts for; any other credential gets 403."""
        actor = ctx.actor
        if (
            actor.kind != "user"
            or actor.user is None
            or actor.token is None
            or self.app is None
            or actor.token.client_id != self.app.client_id
        ):
            raise HTTPError(403, APP_USER_TOKEN_ONLY)
        return actor.user

    def _explicit_roles(self, inst: Installation, user: User) -> list[tuple[Repo, str]]:
        """The repositories of ``inst`` that ``user`` has "explicit permission" on, as GitHub puts it
        for the /user/installations endpoints (they own it or are a collaborator), with that role.
        A public repository gives everyone read, but not explicitly: it is not listed."""
        login = user.login.lower()
        stub = Token("", "installation", None, inst.id)
        found = []
        for repo in sorted(self.repos.values(), key=lambda r: r.id):
            if not self._installation_covers(inst, stub, repo):
                continue
            role = repo.roles.get(login)
            if role is None and repo.owner.type == "User" and repo.owner.login.lower() == login:
                role = "admin"
            if role not in (None, "none"):
                found.append((repo, role))
        return found

    def _user_sees(self, inst: Installation, user: User) -> bool:
        return inst.account.login.lower() == user.login.lower() or bool(self._explicit_roles(inst, user))

    def _h_list_user_installations(self, ctx: Ctx, route: Route) -> Reply:
        user = self._app_user(ctx)
        everyone = sorted(self.installations.values(), key=lambda i: i.id)
        visible = [i for i in everyone if self._user_sees(i, user)]
        chunk, link = self._page(ctx, visible)
        render = self._render()
        return Reply(
            200, {"total_count": len(visible), "installations": [render.installation(i) for i in chunk]}, link
        )

    def _h_list_user_installation_repos(self, ctx: Ctx, route: Route) -> Reply:
        user = self._app_user(ctx)
        inst = self._installation(ctx)
        if not self._user_sees(inst, user):
            raise HTTPError(404, "Not Found")
        found = self._explicit_roles(inst, user)
        chunk, link = self._page(ctx, found)
        render = self._render()
        return Reply(
            200,
            {
                "total_count": len(found),
                "repository_selection": "all" if inst.repositories is None else "selected",
                "repositories": [
                    render.repo(r) | {"permissions": role_permissions(role)} for r, role in chunk
                ],
            },
            link,
        )

    def _h_get_rate_limit(self, ctx: Ctx, route: Route) -> Reply:
        limit, remaining, reset = self._bucket(ctx.actor.identity)
        core = {
            "limit": int(limit),
            "remaining": int(remaining),
            "reset": int(reset),
            "used": int(limit - remaining),
        }
        other = {"limit": 30, "remaining": 30, "reset": int(reset), "used": 0}
        return Reply(200, {"resources": {"core": core, "search": other, "graphql": dict(core)}, "rate": core})

    # -- handlers: repositories ---------------------------------------------------------------

    def _h_get_repo(self, ctx: Ctx, route: Route) -> Reply:
        return Reply(200, self._render().repo(self._repo(ctx, route)))

    def _resolve_ref(self, repo: Repo, ref: str | None) -> tuple[str, dict[str, bytes]]:
        ref = ref or repo.default_branch
        name = ref.removeprefix("refs/heads/")
        for key in (ref, name, repo.refs.get(name)):
            if key is not None and key in repo.trees:
                return ref, repo.trees[key]
        if ref in repo.commits or name in repo.refs:
            return ref, {}
        raise HTTPError(404, f"No commit found for the ref {ref}")

    def _h_get_contents(self, ctx: Ctx, route: Route) -> Reply:
        repo = self._repo(ctx, route)
        ref, tree = self._resolve_ref(repo, ctx.q("ref"))
        path = ctx.params["path"].strip("/")
        render = self._render()
        if path in tree:
            return Reply(200, render.content_file(repo, ref, path, tree[path]))
        prefix = path + "/" if path else ""
        entries: dict[str, bytes | None] = {}
        for name, data in tree.items():
            if name.startswith(prefix):
                rest = name[len(prefix) :]
                head, sep, _ = rest.partition("/")
                entries[prefix + head] = None if sep else data
        if not entries:
            raise HTTPError(404, "Not Found")
        return Reply(200, [render.content_entry(repo, ref, p, d) for p, d in sorted(entries.items())])

    def _h_put_contents(self, ctx: Ctx, route: Route) -> Reply:
        """Create or replace one file on a branch: one new commit there (200 replaced, 201 created).
        GitHub's rules: ``sha`` (the blob being replaced) is required for an existing file and must be
        its blob (else 409, nothing written); the branch must exist. The branch moves to the commit,
        and an open pull request whose head is that branch follows it, its files' patches made again
        against its base (as GitHub does, and sends ``synchronize`` for)."""
        repo = self._repo(ctx, route)
        body = ctx.json
        path = ctx.params["path"].strip("/")
        branch = str(body.get("branch") or repo.default_branch).removeprefix("refs/heads/")
        parent = repo.refs.get(branch)
        if parent is None:
            raise HTTPError(404, f"Branch {branch} not found")
        _, tree = self._resolve_ref(repo, parent)
        try:
            data = base64.b64decode(body["content"], validate=True)
        except (binascii.Error, ValueError):
            raise HTTPError(422, "content is not valid Base64") from None
        old = tree.get(path)
        if old is not None and "sha" not in body:
            raise HTTPError(422, 'Invalid request.\n\n"sha" wasn\'t supplied.')
        if old is not None and body["sha"] != git_blob_sha(old):
            raise HTTPError(409, f"{path} does not match {body['sha']}")
        blob = git_blob_sha(data)
        sha = fake_sha("commit", repo.full_name, parent, path, blob, body["message"])
        repo.trees[sha] = {**tree, path: data}
        repo.blobs[blob] = data
        repo.commits.add(sha)
        repo.refs[branch] = sha
        author = ctx.actor.user
        self.commit_details[sha] = (author.login if author else None, body["message"])
        for pull in list(self.pulls.values()):
            if pull.head_repo is repo and pull.head_ref == branch and pull.state == "open":
                files = self._files_at(pull, path, data)
                self.push(pull.repo.owner.login, pull.repo.name, pull.number, sha, files)
        render = self._render()
        answer = {
            "content": render.content_entry(repo, branch, path, data),
            "commit": render.file_commit(
                repo, sha, parent, fake_sha("tree", repo.full_name, sha), body["message"], author
            ),
        }
        return Reply(201 if old is None else 200, answer)

    def _files_at(self, pull: Pull, path: str, data: bytes) -> list[dict[str, Any]]:
        """The pull request's files once ``path`` holds ``data``: its patch made again against the
        base (a file the base lacks is added; one the same as the base drops out of the list). Where
        the fake does not know the base's tree, a modified file keeps its patch."""
        base = pull.repo.trees.get(pull.base_sha)
        before = base.get(path) if base is not None else None
        out = [
            {
                "filename": f.filename,
                "status": f.status,
                "patch": f.patch,
                "sha": f.sha,
                "previous_filename": f.previous_filename,
            }
            for f in pull.files
            if f.filename != path
        ]
        known = next((f for f in pull.files if f.filename == path), None)
        if base is None and known is not None and known.status != "added":
            out.append(
                {"filename": path, "status": known.status, "patch": known.patch, "sha": git_blob_sha(data)}
            )
        elif before != data:
            old_text = before.decode(errors="replace") if before is not None else None
            patch = file_patch(old_text, data.decode(errors="replace"))
            status = "added" if before is None else "modified"
            out.append({"filename": path, "status": status, "patch": patch, "sha": git_blob_sha(data)})
        return out

    def _h_get_blob(self, ctx: Ctx, route: Route) -> Reply:
        """A file's bytes by blob sha: how clients read files the contents API sends empty (> 1 MB)."""
        repo = self._repo(ctx, route)
        sha = ctx.params["file_sha"]
        if not re.fullmatch(r"[0-9a-f]{40}", sha):
            raise HTTPError(422, "The sha parameter must be exactly 40 characters and contain only [0-9a-f].")
        data = repo.blobs.get(sha)
        if data is None:
            raise HTTPError(404, "Not Found")
        return Reply(200, self._render().blob(repo, sha, data))

    def _h_get_tree(self, ctx: Ctx, route: Route) -> Reply:
        """A commit's tree (``tree_sha`` may be a commit sha or a branch); ``recursive`` lists all."""
        repo = self._repo(ctx, route)
        ref, tree = self._resolve_ref(repo, ctx.params["tree_sha"])
        recursive = ctx.q("recursive") is not None
        api = self._render().api
        entries: dict[str, dict[str, Any]] = {}
        for path, data in tree.items():
            parts = path.split("/")
            for k in range(1, len(parts)):
                folder = "/".join(parts[:k])
                if recursive or k == 1:
                    sha = fake_sha("tree", repo.full_name, ref, folder)
                    entries[folder] = {
                        "path": folder,
                        "mode": "040000",
                        "type": "tree",
                        "sha": sha,
                        "url": f"{api}/repos/{repo.full_name}/git/trees/{sha}",
                    }
            if recursive or len(parts) == 1:
                sha = git_blob_sha(data)
                entries[path] = {
                    "path": path,
                    "mode": "100644",
                    "type": "blob",
                    "sha": sha,
                    "size": len(data),
                    "url": f"{api}/repos/{repo.full_name}/git/blobs/{sha}",
                }
        sha = fake_sha("tree", repo.full_name, ref)
        body = {
            "sha": sha,
            "url": f"{api}/repos/{repo.full_name}/git/trees/{sha}",
            "tree": [entries[k] for k in sorted(entries)],
            "truncated": False,
        }
        return Reply(200, body)

    def _h_get_commit(self, ctx: Ctx, route: Route) -> Reply:
        repo = self._repo(ctx, route)
        ref = ctx.params["ref"]
        sha = repo.refs.get(ref.removeprefix("refs/heads/"), ref)
        if sha not in repo.commits:
            raise HTTPError(422, f"No commit found for SHA: {ref}")
        files = None
        author = None
        for pull in self.pulls.values():
            if pull.repo is repo and sha in pull.files_by_commit:
                files, author = pull.files_by_commit[sha], pull.user
        message = None
        if sha in self.commit_details:
            login, message = self.commit_details[sha]
            author = self.users.get(login.lower()) if login else None
        return Reply(
            200, self._render().commit(repo, sha, files if files is not None else [], author, message)
        )

    def _h_get_permission(self, ctx: Ctx, route: Route) -> Reply:
        repo = self._repo(ctx, route)
        user = self.users.get(ctx.params["username"].lower())
        if user is None:
            raise HTTPError(404, "Not Found")
        return Reply(200, self._render().collaborator_permission(repo, user, self.role_of(repo, user.login)))

    # -- handlers: pull requests --------------------------------------------------------------

    def _pull(self, ctx: Ctx, route: Route) -> Pull:
        repo = self._repo(ctx, route)
        pull = self.pulls.get((repo.owner.login, repo.name, int(ctx.params["pull_number"])))
        if pull is None:
            raise HTTPError(404, "Not Found")
        return pull

    def _h_get_pull(self, ctx: Ctx, route: Route) -> Reply:
        pull = self._pull(ctx, route)
        comments = len(self.issue_comments.get(pull.key, []))
        review_comments = sum(len(r.comments) for r in self.reviews.get(pull.key, []) if r.state != "PENDING")
        return Reply(200, self._render().pull(pull, comments, review_comments))

    def _h_list_pulls(self, ctx: Ctx, route: Route) -> Reply:
        repo = self._repo(ctx, route)
        state = ctx.q("state", "open")
        pulls = [p for p in self.pulls.values() if p.repo is repo and state in ("all", p.state)]
        head = ctx.q("head")
        if head:
            owner, _, ref = head.rpartition(":")
            pulls = [
                p
                for p in pulls
                if p.head_ref == ref and (not owner or p.head_repo.owner.login.lower() == owner.lower())
            ]
        base = ctx.q("base")
        if base:
            pulls = [p for p in pulls if p.base_ref == base]
        by_updated = ctx.q("sort", "created") in ("updated", "long-running")
        pulls.sort(
            key=lambda p: (p.updated_at if by_updated else p.created_at, p.number),
            reverse=ctx.q("direction", "desc") == "desc",
        )
        chunk, link = self._page(ctx, pulls)
        render = self._render()
        out = []
        for p in chunk:
            body = render.pull(p, 0, 0)
            for name in ("comments", "review_comments", "commits", "additions", "deletions", "changed_files"):
                del body[name]  # the list shows "pull-request-simple" objects, without the counts
            for name in (
                "merged",
                "mergeable",
                "rebaseable",
                "mergeable_state",
                "merged_by",
                "maintainer_can_modify",
            ):
                del body[name]
            out.append(body)
        return Reply(200, out, link)

    def _h_list_pull_files(self, ctx: Ctx, route: Route) -> Reply:
        pull = self._pull(ctx, route)
        chunk, link = self._page(ctx, pull.files, limit=MAX_PR_FILES)
        render = self._render()
        return Reply(200, [render.pull_file(pull.head_repo, pull.head_sha, f) for f in chunk], link)

    def _h_list_reviews(self, ctx: Ctx, route: Route) -> Reply:
        pull = self._pull(ctx, route)
        render = self._render()
        chunk, link = self._page(ctx, self.reviews.get(pull.key, []))
        return Reply(200, [render.review(r) for r in chunk], link)

    def _review(self, ctx: Ctx, route: Route) -> Review:
        pull = self._pull(ctx, route)
        wanted = int(ctx.params["review_id"])
        for review in self.reviews.get(pull.key, []):
            if review.id == wanted:
                return review
        raise HTTPError(404, "Not Found")

    def _h_get_review(self, ctx: Ctx, route: Route) -> Reply:
        return Reply(200, self._render().review(self._review(ctx, route)))

    def _h_update_review(self, ctx: Ctx, route: Route) -> Reply:
        review = self._review(ctx, route)
        if self._actor_user(ctx.actor) is not review.user:
            raise HTTPError(403, "Resource not accessible by integration")
        text = ctx.json["body"]
        self._check_comment_body(text)
        review.body = text
        return Reply(200, self._render().review(review))

    def _h_edit_review_comment(self, ctx: Ctx, route: Route) -> Reply:
        repo = self._repo(ctx, route)
        wanted = int(ctx.params["comment_id"])
        found = [
            c
            for key, reviews in self.reviews.items()
            if key[:2] == repo.key
            for r in reviews
            if r.state != "PENDING"
            for c in r.comments
            if c.id == wanted
        ]
        if not found:
            raise HTTPError(404, "Not Found")
        c = found[0]
        if self._actor_user(ctx.actor) is not c.user:
            raise HTTPError(403, "Resource not accessible by integration")
        text = ctx.json["body"]
        self._check_comment_body(text)
        c.body = text
        c.updated_at = utc_now()
        return Reply(200, self._render().review_comment(c, self.reactions.get(("review_comment", c.id), [])))

    def _h_list_review_comments_of_review(self, ctx: Ctx, route: Route) -> Reply:
        review = self._review(ctx, route)
        render = self._render()
        chunk, link = self._page(ctx, review.comments)
        # GitHub lists these in the "review-comment" shape less reactions; the full shape is a superset.
        return Reply(
            200,
            [render.review_comment(c, self.reactions.get(("review_comment", c.id), [])) for c in chunk],
            link,
        )

    def _h_list_review_comments(self, ctx: Ctx, route: Route) -> Reply:
        pull = self._pull(ctx, route)
        comments = [c for r in self.reviews.get(pull.key, []) if r.state != "PENDING" for c in r.comments]
        comments.sort(key=lambda c: c.id)
        render = self._render()
        chunk, link = self._page(ctx, comments)
        return Reply(
            200,
            [render.review_comment(c, self.reactions.get(("review_comment", c.id), [])) for c in chunk],
            link,
        )

    def _h_get_review_comment(self, ctx: Ctx, route: Route) -> Reply:
        repo = self._repo(ctx, route)
        wanted = int(ctx.params["comment_id"])
        for key, reviews in self.reviews.items():
            if key[:2] != repo.key:
                continue
            for review in reviews:
                for c in review.comments:
                    if c.id == wanted and review.state != "PENDING":
                        return Reply(
                            200,
                            self._render().review_comment(
                                c, self.reactions.get(("review_comment", c.id), [])
                            ),
                        )
        raise HTTPError(404, "Not Found")

    def _h_create_review(self, ctx: Ctx, route: Route) -> Reply:
        pull = self._pull(ctx, route)
        user = self._actor_user(ctx.actor)
        body = ctx.json if isinstance(ctx.json, dict) else {}
        event = body.get("event")
        text = body.get("body") or ""
        commit_id = body.get("commit_id") or pull.head_sha
        unprocessable = "Unprocessable Entity"
        if commit_id not in pull.files_by_commit:
            raise HTTPError(422, unprocessable, errors=[f"No commit found for SHA: {commit_id}"])
        if len(text) > MAX_BODY:
            raise HTTPError(
                422, unprocessable, errors=[f"Body is too long (maximum is {MAX_BODY} characters)"]
            )
        if event in ("APPROVE", "REQUEST_CHANGES") and user.login.lower() == pull.user.login.lower():
            verb = "approve" if event == "APPROVE" else "request changes on"
            raise HTTPError(422, unprocessable, errors=[f"Can not {verb} your own pull request"])
        if event == "REQUEST_CHANGES" and not text:
            raise HTTPError(422, unprocessable, errors=["Body can't be blank when requesting changes"])
        if event is None and any(
            r.state == "PENDING" and r.user is user for r in self.reviews.get(pull.key, [])
        ):
            raise HTTPError(
                422, unprocessable, errors=["User can only have one pending review per pull request"]
            )
        files = {f.filename: f for f in pull.files_by_commit[commit_id]}
        errors: list[str] = []
        placed: list[dict[str, Any]] = []
        for comment in body.get("comments") or []:
            where = self._place_comment(files, comment, errors)
            if where is not None:
                placed.append(where)
        if errors:
            unique = list(dict.fromkeys(errors))
            raise HTTPError(422, unprocessable, errors=[to_sentence(unique)])
        now = utc_now()
        state = {"APPROVE": "APPROVED", "REQUEST_CHANGES": "CHANGES_REQUESTED", "COMMENT": "COMMENTED"}.get(
            event or "", "PENDING"
        )
        ident = self._new_id()
        association = self._author_association(pull.repo, ctx.actor)
        review = Review(
            id=ident,
            node_id=node_id("PullRequestReview", ident),
            repo=pull.repo,
            pull_number=pull.number,
            user=user,
            body=text,
            state=state,
            commit_id=commit_id,
            submitted_at=None if state == "PENDING" else now,
            author_association=association,
        )
        for where in placed:
            cid = self._new_id()
            review.comments.append(
                ReviewComment(
                    id=cid,
                    node_id=node_id("PullRequestReviewComment", cid),
                    review_id=ident,
                    repo=pull.repo,
                    pull_number=pull.number,
                    commit_id=commit_id,
                    user=user,
                    created_at=now,
                    updated_at=now,
                    author_association=association,
                    **where,
                )
            )
        self.reviews[pull.key].append(review)
        return Reply(200, self._render().review(review))

    def _h_create_review_comment(self, ctx: Ctx, route: Route) -> Reply:
        """A single review comment (a one-comment review, or a reply in an existing thread)."""
        pull = self._pull(ctx, route)
        user = self._actor_user(ctx.actor)
        body = ctx.json
        unprocessable = "Unprocessable Entity"
        association = self._author_association(pull.repo, ctx.actor)
        reply_to = body.get("in_reply_to")
        if "comment_id" in ctx.params:  # POST .../comments/{comment_id}/replies
            reply_to = int(ctx.params["comment_id"])
        if reply_to is not None:
            parent = next(
                (c for r in self.reviews.get(pull.key, []) for c in r.comments if c.id == reply_to), None
            )
            if parent is None:
                raise HTTPError(404, "Not Found")
            where: dict[str, Any] | None = {
                "path": parent.path,
                "body": body["body"],
                "diff_hunk": parent.diff_hunk,
                "position": parent.position,
                "line": parent.line,
                "side": parent.side,
                "start_line": parent.start_line,
                "start_side": parent.start_side,
            }
            commit_id = parent.commit_id
        else:
            commit_id = body["commit_id"]
            if commit_id not in pull.files_by_commit:
                raise HTTPError(422, unprocessable, errors=[f"No commit found for SHA: {commit_id}"])
            files = {f.filename: f for f in pull.files_by_commit[commit_id]}
            errors: list[str] = []
            if body.get("subject_type") == "file":
                if body["path"] not in files:
                    errors.append("Pull request review thread path is invalid")
                where = {
                    "path": body["path"],
                    "body": body["body"],
                    "diff_hunk": "",
                    "position": 1,  # GitHub's schema wants an integer even here
                    "line": None,
                    "side": None,
                    "subject_type": "file",
                }
                if len(body["body"]) > MAX_BODY:
                    errors.append(f"Body is too long (maximum is {MAX_BODY} characters)")
            else:
                where = self._place_comment(files, body, errors)
            if errors:
                raise HTTPError(422, unprocessable, errors=[to_sentence(list(dict.fromkeys(errors)))])
        assert where is not None
        now = utc_now()
        ident = self._new_id()
        review = Review(
            id=ident,
            node_id=node_id("PullRequestReview", ident),
            repo=pull.repo,
            pull_number=pull.number,
            user=user,
            body="",
            state="COMMENTED",
            commit_id=commit_id,
            submitted_at=now,
            author_association=association,
        )
        cid = self._new_id()
        comment = ReviewComment(
            id=cid,
            node_id=node_id("PullRequestReviewComment", cid),
            review_id=ident,
            repo=pull.repo,
            pull_number=pull.number,
            commit_id=commit_id,
            user=user,
            created_at=now,
            updated_at=now,
            author_association=association,
            in_reply_to_id=reply_to,
            **where,
        )
        review.comments.append(comment)
        self.reviews[pull.key].append(review)
        return Reply(201, self._render().review_comment(comment, []))

    def _place_comment(
        self, files: dict[str, PullFile], comment: dict[str, Any], errors: list[str]
    ) -> dict[str, Any] | None:
        """Check one review comment against the diff; GitHub's messages go to ``errors``."""
        path = comment.get("path")
        text = comment.get("body") or ""
        if len(text) > MAX_BODY:
            errors.append(f"Body is too long (maximum is {MAX_BODY} characters)")
        f = files.get(path or "")
        if f is None:
            errors += [
                "Pull request review thread path is invalid",
                "Pull request review thread diff hunk can't be blank",
            ]
            return None
        if f.parsed is None or not f.parsed.hunks:
            errors.append("Pull request review thread diff hunk can't be blank")
            return None
        patch = f.parsed
        line, position = comment.get("line"), comment.get("position")
        side = comment.get("side") or "RIGHT"
        start_line = comment.get("start_line")
        start_side = comment.get("start_side") or (side if start_line is not None else None)
        if side not in ("LEFT", "RIGHT") or (start_side is not None and start_side not in ("LEFT", "RIGHT")):
            errors.append("Pull request review thread side must be LEFT or RIGHT")
            return None
        if line is None and position is not None:
            row = patch.position_row(position)
            if row is None:
                errors += [
                    "Pull request review thread position is invalid",
                    "Pull request review thread diff hunk can't be blank",
                ]
                return None
            old, new = patch.line_at_row(row)
            return {
                "path": f.filename,
                "body": text,
                "diff_hunk": patch.diff_hunk(row),
                "position": position,
                "line": new if new is not None else old,
                "side": "RIGHT" if new is not None else "LEFT",
            }
        if line is None:
            errors += [
                "Pull request review thread line must be part of the diff",
                "Pull request review thread diff hunk can't be blank",
            ]
            return None
        end_hunk = patch.hunk_of(side, line)
        if end_hunk is None:
            errors += [
                "Pull request review thread line must be part of the diff",
                "Pull request review thread diff hunk can't be blank",
            ]
            return None
        end_row = patch.row_of(side, line)
        assert end_row is not None
        if start_line is not None:
            assert start_side is not None
            start_hunk = patch.hunk_of(start_side, start_line)
            start_row = patch.row_of(start_side, start_line)
            precedes = (
                start_line < line if start_side == side else (start_row is not None and start_row < end_row)
            )
            if not precedes:
                errors.append("Pull request review thread start line must precede the end line.")
                return None
            if start_hunk is None or start_hunk is not end_hunk:
                errors.append(
                    "Pull request review thread start line must be part of the same hunk as the line."
                )
                return None
        return {
            "path": f.filename,
            "body": text,
            "diff_hunk": patch.diff_hunk(end_row),
            "position": end_row,
            "line": line,
            "side": side,
            "start_line": start_line,
            "start_side": start_side,
        }

    # -- handlers: issues and their comments ---------------------------------------------------

    def _issue(self, ctx: Ctx, route: Route) -> Issue:
        repo = self._repo(ctx, route)
        issue = self.issues.get((repo.owner.login, repo.name, int(ctx.params["issue_number"])))
        if issue is None:
            raise HTTPError(404, "Not Found")
        return issue

    def _h_get_issue(self, ctx: Ctx, route: Route) -> Reply:
        issue = self._issue(ctx, route)
        key = (issue.repo.owner.login, issue.repo.name, issue.number)
        return Reply(200, self._render().issue(issue, len(self.issue_comments.get(key, []))))

    def _h_list_issue_comments(self, ctx: Ctx, route: Route) -> Reply:
        issue = self._issue(ctx, route)
        comments = list(self.issue_comments.get((issue.repo.owner.login, issue.repo.name, issue.number), []))
        since = ctx.q("since")
        if since:
            comments = [c for c in comments if c.updated_at >= since.replace("+00:00", "Z")]
        chunk, link = self._page(ctx, comments)
        render = self._render()
        return Reply(
            200,
            [render.issue_comment(c, self.reactions.get(("issue_comment", c.id), [])) for c in chunk],
            link,
        )

    @staticmethod
    def _check_comment_body(text: str) -> None:
        if len(text) > MAX_BODY:
            raise HTTPError(
                422,
                "Validation Failed",
                errors=[
                    {
                        "resource": "IssueComment",
                        "code": "unprocessable",
                        "field": "data",
                        "message": f"Body is too long (maximum is {MAX_BODY} characters)",
                    }
                ],
            )
        if not text.strip():
            raise HTTPError(
                422,
                "Validation Failed",
                errors=[{"resource": "IssueComment", "code": "missing_field", "field": "body"}],
            )

    def _h_create_issue_comment(self, ctx: Ctx, route: Route) -> Reply:
        issue = self._issue(ctx, route)
        user = self._actor_user(ctx.actor)
        text = ctx.json["body"]
        self._check_comment_body(text)
        ident = self._new_id()
        now = utc_now()
        comment = IssueComment(
            id=ident,
            node_id=node_id("IssueComment", ident),
            repo=issue.repo,
            issue_number=issue.number,
            user=user,
            body=text,
            created_at=now,
            updated_at=now,
            author_association=self._author_association(issue.repo, ctx.actor),
            via_app=ctx.actor.kind == "installation",
        )
        self.issue_comments[(issue.repo.owner.login, issue.repo.name, issue.number)].append(comment)
        return Reply(
            201,
            self._render().issue_comment(comment, []),
            {"Location": self._render().issue_comment(comment, [])["url"]},
        )

    def _comment(self, ctx: Ctx, route: Route) -> IssueComment:
        repo = self._repo(ctx, route)
        wanted = int(ctx.params["comment_id"])
        for key, comments in self.issue_comments.items():
            if key[:2] == repo.key:
                for c in comments:
                    if c.id == wanted:
                        return c
        raise HTTPError(404, "Not Found")

    def _h_get_issue_comment(self, ctx: Ctx, route: Route) -> Reply:
        c = self._comment(ctx, route)
        return Reply(200, self._render().issue_comment(c, self.reactions.get(("issue_comment", c.id), [])))

    def _h_edit_issue_comment(self, ctx: Ctx, route: Route) -> Reply:
        c = self._comment(ctx, route)
        actor = ctx.actor
        if actor.kind == "user" and actor.user is not c.user:
            role = self.role_of(c.repo, actor.user.login if actor.user else "")
            if role not in ("admin", "maintain", "write"):
                raise HTTPError(403, "Must have admin rights to Repository.")
        text = ctx.json["body"]
        self._check_comment_body(text)
        c.body = text
        c.updated_at = utc_now()
        return Reply(200, self._render().issue_comment(c, self.reactions.get(("issue_comment", c.id), [])))

    def _h_delete_issue_comment(self, ctx: Ctx, route: Route) -> Reply:
        c = self._comment(ctx, route)
        self.issue_comments[(c.repo.owner.login, c.repo.name, c.issue_number)].remove(c)
        return Reply(204, None)

    # -- handlers: reactions ------------------------------------------------------------------

    def _react(self, key: tuple[Any, ...], ctx: Ctx) -> Reply:
        user = self._actor_user(ctx.actor)
        content = ctx.json["content"]
        for existing in self.reactions[key]:
            if existing.user is user and existing.content == content:
                return Reply(200, self._render().reaction(existing))
        ident = self._new_id()
        reaction = Reaction(ident, node_id("Reaction", ident), user, content, utc_now())
        self.reactions[key].append(reaction)
        return Reply(201, self._render().reaction(reaction))

    def _h_list_comment_reactions(self, ctx: Ctx, route: Route) -> Reply:
        c = self._comment(ctx, route)
        found = self.reactions.get(("issue_comment", c.id), [])
        wanted = ctx.q("content")
        if wanted:
            found = [r for r in found if r.content == wanted]
        chunk, link = self._page(ctx, found)
        render = self._render()
        return Reply(200, [render.reaction(r) for r in chunk], link)

    def _h_create_comment_reaction(self, ctx: Ctx, route: Route) -> Reply:
        c = self._comment(ctx, route)
        return self._react(("issue_comment", c.id), ctx)

    def _h_create_issue_reaction(self, ctx: Ctx, route: Route) -> Reply:
        issue = self._issue(ctx, route)
        return self._react(("issue", issue.repo.owner.login, issue.repo.name, issue.number), ctx)

    def _h_list_review_comment_reactions(self, ctx: Ctx, route: Route) -> Reply:
        repo = self._repo(ctx, route)
        wanted = int(ctx.params["comment_id"])
        if not any(
            key[:2] == repo.key and any(c.id == wanted for r in reviews for c in r.comments)
            for key, reviews in self.reviews.items()
        ):
            raise HTTPError(404, "Not Found")
        found = self.reactions.get(("review_comment", wanted), [])
        chunk, link = self._page(ctx, found)
        render = self._render()
        return Reply(200, [render.reaction(r) for r in chunk], link)

    def _h_create_review_comment_reaction(self, ctx: Ctx, route: Route) -> Reply:
        repo = self._repo(ctx, route)
        wanted = int(ctx.params["comment_id"])
        for key, reviews in self.reviews.items():
            if key[:2] == repo.key and any(c.id == wanted for r in reviews for c in r.comments):
                return self._react(("review_comment", wanted), ctx)
        raise HTTPError(404, "Not Found")

    # -- handlers: check runs -----------------------------------------------------------------

    def _check_apply(self, run: CheckRun, body: dict[str, Any], *, creating: bool) -> None:
        """Apply a create/update body to ``run`` with GitHub's rules (after the schema passed)."""
        conclusion = body.get("conclusion", run.conclusion if not creating else None)
        status = body.get("status")
        if conclusion == "stale":
            raise HTTPError(422, "Invalid request.\n\nOnly GitHub can set a check run's conclusion to stale.")
        if (status == "completed" or "completed_at" in body) and not conclusion:
            raise HTTPError(422, 'Invalid request.\n\n"conclusion" wasn\'t supplied.')
        now = utc_now()
        if "conclusion" in body and body["conclusion"] is not None:
            status = "completed"
        if status is not None:
            run.status = status
        if run.status == "completed":
            run.conclusion = conclusion
            run.completed_at = body.get("completed_at") or run.completed_at or now
        elif status in ("queued", "in_progress"):
            run.conclusion, run.completed_at = None, None
        for key in ("name", "details_url", "external_id", "started_at"):
            if key in body:
                setattr(run, key, body[key])
        if run.status == "in_progress" and run.started_at is None:
            run.started_at = now
        output = body.get("output")
        if output is not None:
            for key in ("title", "summary", "text"):
                if key in output:
                    run.output[key] = output[key]
            run.annotations.extend(output.get("annotations") or [])
            run.images = list(output.get("images") or run.images)
        if "actions" in body:
            run.actions = list(body["actions"] or [])

    def _pulls_for(self, repo: Repo, sha: str) -> list[Pull]:
        return [p for p in self.pulls.values() if p.repo is repo and p.head_sha == sha and p.state == "open"]

    def _h_create_check_run(self, ctx: Ctx, route: Route) -> Reply:
        repo = self._repo(ctx, route)
        if ctx.actor.kind != "installation":
            raise HTTPError(403, "You must authenticate via a GitHub App.")
        body = ctx.json
        if body["head_sha"] not in repo.commits:
            raise HTTPError(422, f"No commit found for SHA: {body['head_sha']}")
        ident = self._new_id()
        suite_key = (repo.owner.login, repo.name, body["head_sha"])
        if suite_key not in self._check_suites:
            self._check_suites[suite_key] = self._new_id()
        run = CheckRun(
            id=ident,
            node_id=node_id("CheckRun", ident),
            repo=repo,
            name=body["name"],
            head_sha=body["head_sha"],
            status="queued",
            conclusion=None,
            started_at=utc_now(),
            completed_at=None,
            details_url=None,
            external_id=None,
            app_id=self.app.app_id if self.app else None,
            check_suite_id=self._check_suites[suite_key],
        )
        self._check_apply(run, body, creating=True)
        self.check_runs[repo.key].append(run)
        return Reply(201, self._render().check_run(run, self._pulls_for(repo, run.head_sha)))

    def _run(self, ctx: Ctx, route: Route) -> CheckRun:
        repo = self._repo(ctx, route)
        wanted = int(ctx.params["check_run_id"])
        for run in self.check_runs.get(repo.key, []):
            if run.id == wanted:
                return run
        raise HTTPError(404, "Not Found")

    def _h_get_check_run(self, ctx: Ctx, route: Route) -> Reply:
        run = self._run(ctx, route)
        return Reply(200, self._render().check_run(run, self._pulls_for(run.repo, run.head_sha)))

    def _h_update_check_run(self, ctx: Ctx, route: Route) -> Reply:
        run = self._run(ctx, route)
        if ctx.actor.kind != "installation":
            raise HTTPError(403, "You must authenticate via a GitHub App.")
        if self.app is not None and run.app_id not in (None, self.app.app_id):
            raise HTTPError(
                403,
                f"Invalid app_id `{self.app.app_id}` - check run can only be modified by the GitHub App "
                "that created it.",
            )
        self._check_apply(run, ctx.json, creating=False)
        run.updates += 1
        return Reply(200, self._render().check_run(run, self._pulls_for(run.repo, run.head_sha)))

    def _h_list_annotations(self, ctx: Ctx, route: Route) -> Reply:
        run = self._run(ctx, route)
        render = self._render()
        chunk, link = self._page(ctx, run.annotations)
        return Reply(200, [render.annotation(run, a) for a in chunk], link)

    def _h_list_check_runs_for_ref(self, ctx: Ctx, route: Route) -> Reply:
        repo = self._repo(ctx, route)
        ref = ctx.params["ref"]
        sha = repo.refs.get(ref.removeprefix("refs/heads/"), ref)
        runs = [r for r in self.check_runs.get(repo.key, []) if r.head_sha == sha]
        name = ctx.q("check_name")
        if name:
            runs = [r for r in runs if r.name == name]
        status = ctx.q("status")
        if status:
            runs = [r for r in runs if r.status == status]
        if ctx.q("filter", "latest") == "latest":
            latest: dict[str, CheckRun] = {}
            for r in runs:
                latest[r.name] = r
            runs = list(latest.values())
        runs.sort(key=lambda r: -r.id)
        chunk, link = self._page(ctx, runs)
        render = self._render()
        return Reply(
            200,
            {
                "total_count": len(runs),
                "check_runs": [render.check_run(r, self._pulls_for(repo, r.head_sha)) for r in chunk],
            },
            link,
        )
