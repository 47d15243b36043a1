"""JSON bodies in GitHub's shapes, for the fake's state (every field the OpenAPI schemas require).

A :class:`Renderer` knows the API root the current request came through
(``http://127.0.0.1:PORT`` or ``.../api/v3``), so that every ``url`` in a body leads back to the
fake: PyGithub follows them (``pull.get_files()`` requests ``pull.url + "/files"``).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from .state import (
    LEGACY_PERMISSION,
    REACTIONS,
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
    User,
    git_blob_sha,
)

if TYPE_CHECKING:
    from .base import AppConfig

HTML = "https://github.com"
EPOCH = "2024-01-01T00:00:00Z"
# A commit's ``verification`` when it carries no signature (the fake signs nothing).
UNSIGNED = {"verified": False, "reason": "unsigned", "signature": None, "payload": None, "verified_at": None}
LARGE_FILE_BYTES = 1024 * 1024  # the contents API sends no content for files above 1 MB


def node_id(kind: str, ident: int) -> str:
    """A node id in GitHub's legacy style (base64 of "<len>:<Type><id>")."""
    return base64.b64encode(f"0{len(kind)}:{kind}{ident}".encode()).decode()


def role_permissions(role: str) -> dict[str, bool]:
    """The ``permissions`` hash GitHub gives for a role (see ``state.ROLES``)."""
    return {
        "admin": role == "admin",
        "maintain": role in ("admin", "maintain"),
        "push": role in ("admin", "maintain", "write"),
        "triage": role in ("admin", "maintain", "write", "triage"),
        "pull": role != "none",
    }


def _base64_lines(data: bytes) -> str:
    """Base64 in 60-character lines, each ending in a newline, as GitHub sends file contents."""
    flat = base64.b64encode(data).decode("ascii")
    return "".join(flat[i : i + 60] + "\n" for i in range(0, len(flat), 60))


class Renderer:
    def __init__(self, api: str, app: AppConfig | None) -> None:
        self.api = api
        self.app = app

    # -- people and apps ---------------------------------------------------------------------

    def user(self, u: User) -> dict[str, Any]:
        api_login = u.login.replace("[", "%5B").replace("]", "%5D")
        base = f"{self.api}/users/{api_login}"
        html = f"{HTML}/apps/{u.login.removesuffix('[bot]')}" if u.type == "Bot" else f"{HTML}/{u.login}"
        return {
            "login": u.login,
            "id": u.id,
            "node_id": u.node_id,
            "avatar_url": f"https://avatars.githubusercontent.com/u/{u.id}?v=4",
            "gravatar_id": "",
            "url": base,
            "html_url": html,
            "followers_url": f"{base}/followers",
            "following_url": f"{base}/following{{/other_user}}",
            "gists_url": f"{base}/gists{{/gist_id}}",
            "starred_url": f"{base}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{base}/subscriptions",
            "organizations_url": f"{base}/orgs",
            "repos_url": f"{base}/repos",
            "events_url": f"{base}/events{{/privacy}}",
            "received_events_url": f"{base}/received_events",
            "type": u.type,
            "user_view_type": "public",
            "site_admin": u.site_admin,
        }

    def private_user(self, u: User, public_repos: int, private_repos: int) -> dict[str, Any]:
        """``GET /user``: the signed-in user's own profile, private fields included."""
        return self.user(u) | {
            "name": u.name,
            "company": None,
            "blog": "",
            "location": None,
            "email": None,
            "hireable": None,
            "bio": None,
            "twitter_username": None,
            "public_repos": public_repos,
            "public_gists": 0,
            "followers": 0,
            "following": 0,
            "created_at": EPOCH,
            "updated_at": EPOCH,
            "private_gists": 0,
            "total_private_repos": private_repos,
            "owned_private_repos": private_repos,
            "disk_usage": 0,
            "collaborators": 0,
            "two_factor_authentication": True,
            "plan": {"name": "free", "space": 976562499, "collaborators": 0, "private_repos": 10000},
        }

    def app_body(self) -> dict[str, Any]:
        app = self.app
        assert app is not None
        return {
            "id": app.app_id,
            "slug": app.slug,
            "node_id": node_id("Integration", app.app_id),
            "client_id": app.client_id,
            "owner": self.user(app.owner),
            "name": app.name,
            "description": app.description,
            "external_url": app.external_url,
            "html_url": f"{HTML}/apps/{app.slug}",
            "created_at": EPOCH,
            "updated_at": EPOCH,
            "permissions": dict(app.permissions),
            "events": list(app.events),
            "installations_count": app.installations_count,
        }

    def installation(self, inst: Installation) -> dict[str, Any]:
        app = self.app
        assert app is not None
        return {
            "id": inst.id,
            "account": self.user(inst.account),
            "repository_selection": "all" if inst.repositories is None else "selected",
            "access_tokens_url": f"{self.api}/app/installations/{inst.id}/access_tokens",
            "repositories_url": f"{self.api}/installation/repositories",
            "html_url": f"{HTML}/settings/installations/{inst.id}",
            "app_id": app.app_id,
            "client_id": app.client_id,
            "target_id": inst.account.id,
            "target_type": "Organization" if inst.account.type == "Organization" else "User",
            "permissions": dict(inst.permissions),
            "events": list(inst.events),
            "created_at": inst.created_at,
            "updated_at": inst.created_at,
            "single_file_name": None,
            "has_multiple_single_files": False,
            "single_file_paths": [],
            "app_slug": app.slug,
            "suspended_by": None,
            "suspended_at": inst.suspended_at,
        }

    # -- repositories ------------------------------------------------------------------------

    def repo(self, r: Repo) -> dict[str, Any]:
        base = f"{self.api}/repos/{r.full_name}"
        html = f"{HTML}/{r.full_name}"
        body: dict[str, Any] = {
            "id": r.id,
            "node_id": r.node_id,
            "name": r.name,
            "full_name": r.full_name,
            "owner": self.user(r.owner),
            "private": r.private,
            "html_url": html,
            "description": r.description,
            "fork": r.fork,
            "url": base,
            "archive_url": f"{base}/{{archive_format}}{{/ref}}",
            "assignees_url": f"{base}/assignees{{/user}}",
            "blobs_url": f"{base}/git/blobs{{/sha}}",
            "branches_url": f"{base}/branches{{/branch}}",
            "collaborators_url": f"{base}/collaborators{{/collaborator}}",
            "comments_url": f"{base}/comments{{/number}}",
            "commits_url": f"{base}/commits{{/sha}}",
            "compare_url": f"{base}/compare/{{base}}...{{head}}",
            "contents_url": f"{base}/contents/{{+path}}",
            "contributors_url": f"{base}/contributors",
            "deployments_url": f"{base}/deployments",
            "downloads_url": f"{base}/downloads",
            "events_url": f"{base}/events",
            "forks_url": f"{base}/forks",
            "git_commits_url": f"{base}/git/commits{{/sha}}",
            "git_refs_url": f"{base}/git/refs{{/sha}}",
            "git_tags_url": f"{base}/git/tags{{/sha}}",
            "git_url": f"git://github.com/{r.full_name}.git",
            "issue_comment_url": f"{base}/issues/comments{{/number}}",
            "issue_events_url": f"{base}/issues/events{{/number}}",
            "issues_url": f"{base}/issues{{/number}}",
            "keys_url": f"{base}/keys{{/key_id}}",
            "labels_url": f"{base}/labels{{/name}}",
            "languages_url": f"{base}/languages",
            "merges_url": f"{base}/merges",
            "milestones_url": f"{base}/milestones{{/number}}",
            "notifications_url": f"{base}/notifications{{?since,all,participating}}",
            "pulls_url": f"{base}/pulls{{/number}}",
            "releases_url": f"{base}/releases{{/id}}",
            "ssh_url": f"git@github.com:{r.full_name}.git",
            "stargazers_url": f"{base}/stargazers",
            "statuses_url": f"{base}/statuses/{{sha}}",
            "subscribers_url": f"{base}/subscribers",
            "subscription_url": f"{base}/subscription",
            "tags_url": f"{base}/tags",
            "teams_url": f"{base}/teams",
            "trees_url": f"{base}/git/trees{{/sha}}",
            "clone_url": f"{html}.git",
            "mirror_url": None,
            "hooks_url": f"{base}/hooks",
            "svn_url": html,
            "homepage": None,
            "language": "Python",
            "forks_count": 0,
            "forks": 0,
            "stargazers_count": 0,
            "watchers_count": 0,
            "watchers": 0,
            "size": 0,
            "default_branch": r.default_branch,
            "open_issues_count": 0,
            "open_issues": 0,
            "is_template": False,
            "topics": list(r.topics),
            "has_issues": True,
            "has_projects": True,
            "has_wiki": True,
            "has_pages": False,
            "has_downloads": True,
            "has_discussions": False,
            "archived": r.archived,
            "disabled": False,
            "visibility": "private" if r.private else "public",
            "pushed_at": r.created_at,
            "created_at": r.created_at,
            "updated_at": r.created_at,
            "allow_forking": True,
            "web_commit_signoff_required": False,
            "license": None,
            "network_count": 0,
            "subscribers_count": 0,
        }
        if r.parent is not None:
            body["parent"] = self.repo(r.parent)
            body["source"] = self.repo(r.parent)
        return body

    def collaborator_permission(self, repo: Repo, user: User, role: str) -> dict[str, Any]:
        legacy = LEGACY_PERMISSION[role]
        collaborator = self.user(user) | {"permissions": role_permissions(role), "role_name": role}
        return {"permission": legacy, "role_name": role, "user": collaborator}

    def content_file(self, repo: Repo, ref: str, path: str, data: bytes) -> dict[str, Any]:
        sha = git_blob_sha(data)
        base = f"{self.api}/repos/{repo.full_name}"
        url = f"{base}/contents/{path}?ref={ref}"
        html = f"{HTML}/{repo.full_name}/blob/{ref}/{path}"
        git_url = f"{base}/git/blobs/{sha}"
        if len(data) > LARGE_FILE_BYTES:
            content, encoding = "", "none"
        else:
            content, encoding = _base64_lines(data), "base64"
        return {
            "type": "file",
            "encoding": encoding,
            "size": len(data),
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "content": content,
            "sha": sha,
            "url": url,
            "git_url": git_url,
            "html_url": html,
            "download_url": f"https://raw.githubusercontent.com/{repo.full_name}/{ref}/{path}",
            "_links": {"self": url, "git": git_url, "html": html},
        }

    def blob(self, repo: Repo, sha: str, data: bytes) -> dict[str, Any]:
        return {
            "sha": sha,
            "node_id": node_id("Blob", int(sha[:8], 16)),
            "size": len(data),
            "url": f"{self.api}/repos/{repo.full_name}/git/blobs/{sha}",
            "content": _base64_lines(data),
            "encoding": "base64",
        }

    def content_entry(self, repo: Repo, ref: str, path: str, data: bytes | None) -> dict[str, Any]:
        """One entry of a directory listing (``data`` None for a subdirectory)."""
        if data is not None:
            entry = self.content_file(repo, ref, path, data)
            del entry["content"], entry["encoding"]
            return entry
        base = f"{self.api}/repos/{repo.full_name}"
        sha = git_blob_sha(path.encode())
        url = f"{base}/contents/{path}?ref={ref}"
        html = f"{HTML}/{repo.full_name}/tree/{ref}/{path}"
        return {
            "type": "dir",
            "size": 0,
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "sha": sha,
            "url": url,
            "git_url": f"{base}/git/trees/{sha}",
            "html_url": html,
            "download_url": None,
            "_links": {"self": url, "git": f"{base}/git/trees/{sha}", "html": html},
        }

    def commit(
        self,
        repo: Repo,
        sha: str,
        files: list[PullFile] | None,
        author: User | None,
        message: str | None = None,
    ) -> dict[str, Any]:
        base = f"{self.api}/repos/{repo.full_name}"
        person = {"name": author.login if author else "GitHub", "email": "noreply@github.com", "date": EPOCH}
        body: dict[str, Any] = {
            "url": f"{base}/commits/{sha}",
            "sha": sha,
            "node_id": node_id("Commit", int(sha[:8], 16)),
            "html_url": f"{HTML}/{repo.full_name}/commit/{sha}",
            "comments_url": f"{base}/commits/{sha}/comments",
            "commit": {
                "url": f"{base}/git/commits/{sha}",
                "author": person,
                "committer": person,
                "message": message if message is not None else f"Commit {sha[:7]}",
                "comment_count": 0,
                "tree": {"sha": sha, "url": f"{base}/git/trees/{sha}"},
                "verification": dict(UNSIGNED),
            },
            "author": self.user(author) if author else None,
            "committer": self.user(author) if author else None,
            "parents": [],
        }
        if files is not None:
            body["files"] = [self.pull_file(repo, sha, f) for f in files]
            adds = sum(f.additions for f in files)
            dels = sum(f.deletions for f in files)
            body["stats"] = {"additions": adds, "deletions": dels, "total": adds + dels}
        return body

    def file_commit(
        self, repo: Repo, sha: str, parent: str, tree: str, message: str, author: User | None
    ) -> dict[str, Any]:
        """The ``commit`` of a contents write (a git commit, as ``PUT .../contents/{path}`` answers)."""
        base = f"{self.api}/repos/{repo.full_name}"
        person = {"name": author.login if author else "GitHub", "email": "noreply@github.com", "date": EPOCH}
        return {
            "sha": sha,
            "node_id": node_id("Commit", int(sha[:8], 16)),
            "url": f"{base}/git/commits/{sha}",
            "html_url": f"{HTML}/{repo.full_name}/commit/{sha}",
            "author": person,
            "committer": person,
            "message": message,
            "tree": {"url": f"{base}/git/trees/{tree}", "sha": tree},
            "parents": [
                {
                    "url": f"{base}/git/commits/{parent}",
                    "html_url": f"{HTML}/{repo.full_name}/commit/{parent}",
                    "sha": parent,
                }
            ],
            "verification": dict(UNSIGNED),
        }

    # -- pull requests and issues ------------------------------------------------------------

    def _branch(self, repo: Repo, ref: str, sha: str) -> dict[str, Any]:
        return {
            "label": f"{repo.owner.login}:{ref}",
            "ref": ref,
            "sha": sha,
            "user": self.user(repo.owner),
            "repo": self.repo(repo),
        }

    def pull(self, p: Pull, comments: int, review_comments: int) -> dict[str, Any]:
        repo = p.repo
        base = f"{self.api}/repos/{repo.full_name}"
        url = f"{base}/pulls/{p.number}"
        html = f"{HTML}/{repo.full_name}/pull/{p.number}"
        issue_url = f"{base}/issues/{p.number}"
        return {
            "url": url,
            "id": p.id,
            "node_id": p.node_id,
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "issue_url": issue_url,
            "commits_url": f"{url}/commits",
            "review_comments_url": f"{url}/comments",
            "review_comment_url": f"{base}/pulls/comments{{/number}}",
            "comments_url": f"{issue_url}/comments",
            "statuses_url": f"{base}/statuses/{p.head_sha}",
            "number": p.number,
            "state": p.state,
            "locked": p.locked,
            "title": p.title,
            "user": self.user(p.user),
            "body": p.body,
            "labels": [],
            "milestone": None,
            "active_lock_reason": None,
            "created_at": p.created_at,
            "updated_at": p.updated_at,
            "closed_at": p.closed_at,
            "merged_at": None,
            "merge_commit_sha": None,
            "assignee": None,
            "assignees": [],
            "requested_reviewers": [],
            "requested_teams": [],
            "head": self._branch(p.head_repo, p.head_ref, p.head_sha),
            "base": self._branch(repo, p.base_ref, p.base_sha),
            "_links": {
                "self": {"href": url},
                "html": {"href": html},
                "issue": {"href": issue_url},
                "comments": {"href": f"{issue_url}/comments"},
                "review_comments": {"href": f"{url}/comments"},
                "review_comment": {"href": f"{base}/pulls/comments{{/number}}"},
                "commits": {"href": f"{url}/commits"},
                "statuses": {"href": f"{base}/statuses/{p.head_sha}"},
            },
            "author_association": p.author_association,
            "auto_merge": None,
            "draft": p.draft,
            "merged": p.merged,
            "mergeable": True,
            "rebaseable": True,
            "mergeable_state": "draft" if p.draft else "clean",
            "merged_by": None,
            "comments": comments,
            "review_comments": review_comments,
            "maintainer_can_modify": False,
            "commits": 1,
            "additions": sum(f.additions for f in p.files),
            "deletions": sum(f.deletions for f in p.files),
            "changed_files": len(p.files),
        }

    def pull_file(self, repo: Repo, head_sha: str, f: PullFile) -> dict[str, Any]:
        body: dict[str, Any] = {
            "sha": f.sha,
            "filename": f.filename,
            "status": f.status,
            "additions": f.additions,
            "deletions": f.deletions,
            "changes": f.changes,
            "blob_url": f"{HTML}/{repo.full_name}/blob/{head_sha}/{f.filename}",
            "raw_url": f"{HTML}/{repo.full_name}/raw/{head_sha}/{f.filename}",
            "contents_url": f"{self.api}/repos/{repo.full_name}/contents/{f.filename}?ref={head_sha}",
        }
        if f.patch is not None:
            body["patch"] = f.patch
        if f.previous_filename is not None:
            body["previous_filename"] = f.previous_filename
        return body

    def issue(self, i: Issue, comments: int) -> dict[str, Any]:
        repo = i.repo
        base = f"{self.api}/repos/{repo.full_name}"
        url = f"{base}/issues/{i.number}"
        kind = "pull" if i.pull is not None else "issues"
        body: dict[str, Any] = {
            "id": i.id,
            "node_id": i.node_id,
            "url": url,
            "repository_url": base,
            "labels_url": f"{url}/labels{{/name}}",
            "comments_url": f"{url}/comments",
            "events_url": f"{url}/events",
            "html_url": f"{HTML}/{repo.full_name}/{kind}/{i.number}",
            "number": i.number,
            "state": i.state,
            "title": i.title,
            "body": i.body,
            "user": self.user(i.user),
            "labels": [],
            "assignee": None,
            "assignees": [],
            "milestone": None,
            "locked": i.locked,
            "active_lock_reason": None,
            "comments": comments,
            "closed_at": None,
            "created_at": i.created_at,
            "updated_at": i.updated_at,
            "author_association": i.author_association,
            "reactions": self.rollup(f"{url}/reactions", []),
        }
        if i.pull is not None:
            html = f"{HTML}/{repo.full_name}/pull/{i.number}"
            body["pull_request"] = {
                "url": f"{base}/pulls/{i.number}",
                "html_url": html,
                "diff_url": f"{html}.diff",
                "patch_url": f"{html}.patch",
                "merged_at": None,
            }
            body["draft"] = i.pull.draft
        return body

    def rollup(self, url: str, reactions: list[Reaction]) -> dict[str, Any]:
        counts: dict[str, Any] = {name: 0 for name in REACTIONS}
        for r in reactions:
            counts[r.content] += 1
        return {"url": url, "total_count": len(reactions), **counts}

    def issue_comment(self, c: IssueComment, reactions: list[Reaction]) -> dict[str, Any]:
        base = f"{self.api}/repos/{c.repo.full_name}"
        url = f"{base}/issues/comments/{c.id}"
        return {
            "id": c.id,
            "node_id": c.node_id,
            "url": url,
            "html_url": f"{HTML}/{c.repo.full_name}/issues/{c.issue_number}#issuecomment-{c.id}",
            "body": c.body,
            "user": self.user(c.user),
            "created_at": c.created_at,
            "updated_at": c.updated_at,
            "issue_url": f"{base}/issues/{c.issue_number}",
            "author_association": c.author_association,
            "performed_via_github_app": self.app_body() if c.via_app and self.app else None,
            "reactions": self.rollup(f"{url}/reactions", reactions),
        }

    def reaction(self, r: Reaction) -> dict[str, Any]:
        return {
            "id": r.id,
            "node_id": r.node_id,
            "user": self.user(r.user),
            "content": r.content,
            "created_at": r.created_at,
        }

    def review(self, r: Review) -> dict[str, Any]:
        repo = r.repo
        pull_url = f"{self.api}/repos/{repo.full_name}/pulls/{r.pull_number}"
        html = f"{HTML}/{repo.full_name}/pull/{r.pull_number}#pullrequestreview-{r.id}"
        body: dict[str, Any] = {
            "id": r.id,
            "node_id": r.node_id,
            "user": self.user(r.user),
            "body": r.body,
            "state": r.state,
            "html_url": html,
            "pull_request_url": pull_url,
            "_links": {"html": {"href": html}, "pull_request": {"href": pull_url}},
            "commit_id": r.commit_id,
            "author_association": r.author_association,
        }
        if r.submitted_at is not None:
            body["submitted_at"] = r.submitted_at
        return body

    def review_comment(self, c: ReviewComment, reactions: list[Reaction]) -> dict[str, Any]:
        repo = c.repo
        base = f"{self.api}/repos/{repo.full_name}"
        url = f"{base}/pulls/comments/{c.id}"
        pull_url = f"{base}/pulls/{c.pull_number}"
        html = f"{HTML}/{repo.full_name}/pull/{c.pull_number}#discussion_r{c.id}"
        body: dict[str, Any] = {
            "url": url,
            "pull_request_review_id": c.review_id,
            "id": c.id,
            "node_id": c.node_id,
            "diff_hunk": c.diff_hunk,
            "path": c.path,
            "position": c.position,
            "original_position": c.position,
            "commit_id": c.commit_id,
            "original_commit_id": c.commit_id,
            "user": self.user(c.user),
            "body": c.body,
            "created_at": c.created_at,
            "updated_at": c.updated_at,
            "html_url": html,
            "pull_request_url": pull_url,
            "author_association": c.author_association,
            "_links": {"self": {"href": url}, "html": {"href": html}, "pull_request": {"href": pull_url}},
            "reactions": self.rollup(f"{url}/reactions", reactions),
            "start_line": c.start_line,
            "original_start_line": c.start_line,
            "start_side": c.start_side,
            "line": c.line,
            "original_line": c.line,
            "side": c.side or "RIGHT",
            "subject_type": c.subject_type,
        }
        if c.subject_type == "file":  # no line (GitHub sends null, which its own schema does not allow)
            for name in ("line", "original_line", "side"):
                del body[name]
        if c.in_reply_to_id is not None:
            body["in_reply_to_id"] = c.in_reply_to_id
        return body

    def check_run(self, c: CheckRun, pulls: list[Pull]) -> dict[str, Any]:
        base = f"{self.api}/repos/{c.repo.full_name}"
        url = f"{base}/check-runs/{c.id}"
        return {
            "id": c.id,
            "head_sha": c.head_sha,
            "node_id": c.node_id,
            "external_id": c.external_id or "",
            "url": url,
            "html_url": f"{HTML}/{c.repo.full_name}/runs/{c.id}",
            "details_url": c.details_url or (self.app.external_url if self.app else None),
            "status": c.status,
            "conclusion": c.conclusion,
            "started_at": c.started_at,
            "completed_at": c.completed_at,
            "output": {
                "title": c.output.get("title"),
                "summary": c.output.get("summary"),
                "text": c.output.get("text"),
                "annotations_count": len(c.annotations),
                "annotations_url": f"{url}/annotations",
            },
            "name": c.name,
            "check_suite": {"id": c.check_suite_id},
            "app": self.app_body() if self.app else None,
            "pull_requests": [
                {
                    "id": p.id,
                    "number": p.number,
                    "url": f"{self.api}/repos/{p.repo.full_name}/pulls/{p.number}",
                    "head": {
                        "ref": p.head_ref,
                        "sha": p.head_sha,
                        "repo": {
                            "id": p.head_repo.id,
                            "url": f"{self.api}/repos/{p.head_repo.full_name}",
                            "name": p.head_repo.name,
                        },
                    },
                    "base": {
                        "ref": p.base_ref,
                        "sha": p.base_sha,
                        "repo": {
                            "id": p.repo.id,
                            "url": f"{self.api}/repos/{p.repo.full_name}",
                            "name": p.repo.name,
                        },
                    },
                }
                for p in pulls
            ],
        }

    def annotation(self, c: CheckRun, a: dict[str, Any]) -> dict[str, Any]:
        return {
            "path": a["path"],
            "start_line": a["start_line"],
            "end_line": a["end_line"],
            "start_column": a.get("start_column"),
            "end_column": a.get("end_column"),
            "annotation_level": a["annotation_level"],
            "title": a.get("title"),
            "message": a["message"],
            "raw_details": a.get("raw_details"),
            "blob_href": f"{HTML}/{c.repo.full_name}/blob/{c.head_sha}/{a['path']}",
        }
