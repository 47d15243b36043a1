"""The GPU bundle holds the repository's Python at the head commit, read through the API."""

from __future__ import annotations

from bot.github import GitHubApp
from tests.fake_github import FakeGitHub, fake_sha


def test_python_files_reads_the_whole_tree_within_the_limit() -> None:
    with FakeGitHub() as fake:
        creds = fake.configure_app()
        fake.add_repo("octo", "models")
        fake.add_installation(5, "octo", ["models"])
        head = fake_sha("head")
        files = {
            "setup.py": "print('x')\n",
            "models/__init__.py": "",
            "models/layers/norm.py": "from .base import Base\n",
            "models/layers/base.py": "class Base: ...\n" + "#" * 500,
            "README.md": "not python\n",
        }
        for path, text in files.items():
            fake.set_file("octo", "models", head, path, text)
        app = GitHubApp(creds.app_id, creds.private_pem, base_url=fake.base_url, seconds_between_writes=0)
        client = app.installation(5)
        got = client.python_files("octo", "models", head, limit_bytes=10_000)
        assert got == {p: t for p, t in files.items() if p.endswith(".py")}
        small = client.python_files("octo", "models", head, limit_bytes=100)
        assert "models/layers/base.py" not in small and "models/layers/norm.py" in small
        fake.assert_clean()
