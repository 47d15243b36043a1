"""``kernelize setup``: the App manifest flow against the fake GitHub, through the real command.

Each test starts ``kernelize setup --no-browser`` as a subprocess, reads the local URL it prints,
and plays the browser: headless Chromium (as the dashboard's browser tests do) or httpx posting
the form. The fake GitHub's new-app page confirms at once and sends the browser back with a code,
which the command trades for the App's credentials at the fake's ``/app-manifests/{code}/conversions``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from bot import setup
from bot.settings import load_settings
from tests.fake_github import FakeGitHub, fake_github_fixture  # noqa: F401  (the ``fake_github`` fixture)

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = "https://kernelize.example.com"
OWNED = [f"KERNELIZE_{key}" for key in setup.OWNED_KEYS]


class Setup:
    """A running ``kernelize setup``: its local URL, and its outcome once it ends."""

    def __init__(self, fake: FakeGitHub, env_file: Path, *extra: str) -> None:
        argv = [
            sys.executable,
            "-m",
            "bot.cli",
            "setup",
            "--url",
            PUBLIC + "/",
            "--github-web-url",
            fake.web_url,
            "--github-api-url",
            fake.base_url,
            "--env-file",
            str(env_file),
            "--no-browser",
            "--timeout",
            "60",
            *extra,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELIZE_")}
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+/", first)
        self.url = found.group(0) if found else ""
        self.first_line = first

    def finish(self, timeout: float = 30) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, self.first_line + out, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def run_setup(fake_github: FakeGitHub) -> Iterator[Any]:
    started: list[Setup] = []

    def start(env_file: Path, *extra: str) -> Setup:
        started.append(Setup(fake_github, env_file, *extra))
        return started[-1]

    yield start
    for proc in started:
        proc.kill()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("KERNELIZE_")]:
        monkeypatch.delenv(key)


class _Form(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.action = ""
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.action = values["action"]
        elif tag == "input" and "name" in values:
            self.fields[values["name"]] = values.get("value", "")


def read_form(page: str) -> _Form:
    form = _Form()
    form.feed(page)
    return form


def post_form(client: httpx.Client, url: str, *, follow: bool = True) -> httpx.Response:
    """What the page's script does: post its form (the manifest) to GitHub."""
    form = read_form(client.get(url).text)
    return client.post(form.action, data=form.fields, follow_redirects=follow)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def env_lines(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            out[key] = value
    return out


def assert_written(fake: FakeGitHub, env_file: Path, *, name: str = "Kernelize") -> None:
    """The env file and the PEM are private, and the settings they hold work against GitHub."""
    pem = env_file.parent / setup.PEM_NAME
    assert mode(env_file) == 0o600 and mode(pem) == 0o600
    app = fake.app
    assert app is not None and app.name == name
    values = env_lines(env_file)
    assert values["KERNELIZE_GITHUB_APP_ID"] == str(app.app_id)
    assert values["KERNELIZE_GITHUB_PRIVATE_KEY_PATH"] == str(pem.resolve())
    assert values["KERNELIZE_GITHUB_CLIENT_ID"] == app.client_id
    assert values["KERNELIZE_GITHUB_CLIENT_SECRET"] == app.client_secret
    assert values["KERNELIZE_GITHUB_API_URL"] == fake.base_url
    assert values["KERNELIZE_GITHUB_WEB_URL"] == fake.web_url
    assert values["KERNELIZE_PUBLIC_URL"] == PUBLIC
    settings = load_settings(_env_file=env_file)  # the web server's checks: a strong webhook secret
    assert settings.github_app_id == app.app_id and settings.webhook_secret is not None
    key = settings.private_key()
    assert key is not None and key.startswith("-----BEGIN RSA PRIVATE KEY-----")
    now = int(time.time())
    token = jwt.encode({"iat": now - 60, "exp": now + 540, "iss": str(app.app_id)}, key, algorithm="RS256")
    answer = httpx.get(
        f"{settings.github_api_url}/app",
        headers={"Authorization": f"Bearer {token}", "User-Agent": "test"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] == app.app_id


def test_manifest_points_at_this_server() -> None:
    template = setup.load_template(setup.MANIFEST_PATH)
    manifest = setup.build_manifest(template, PUBLIC, "http://127.0.0.1:5000/done", "Kernels")
    assert manifest["url"] == PUBLIC
    assert manifest["hook_attributes"] == {"url": f"{PUBLIC}/webhook", "active": True}
    assert manifest["callback_urls"] == [f"{PUBLIC}/oauth/callback"]
    assert manifest["redirect_url"] == "http://127.0.0.1:5000/done"
    assert manifest["name"] == "Kernels"
    assert manifest["default_permissions"] == template["default_permissions"]
    assert template["redirect_url"] != manifest["redirect_url"]  # the template is untouched
    url = setup.new_app_url("https://github.com", "acme", "s t")
    assert url == "https://github.com/organizations/acme/settings/apps/new?state=s+t"


def test_plan_env_keeps_other_lines_and_refuses_clashes() -> None:
    existing = "# mine\nOTHER=1\nKERNELIZE_PUBLIC_URL=https://a.example\nKERNELIZE_GITHUB_PRIVATE_KEY=x\n"
    values = {"PUBLIC_URL": "https://a.example", "GITHUB_APP_ID": "7", "GITHUB_PRIVATE_KEY": None}
    with pytest.raises(setup.SetupError, match="already set: KERNELIZE_GITHUB_PRIVATE_KEY: pass --force"):
        setup.plan_env(existing, values, force=False)
    text = setup.plan_env(existing, values, force=True, header="# app")
    assert (
        text
        == "# mine\nOTHER=1\nKERNELIZE_PUBLIC_URL=https://a.example\n\n# app\nKERNELIZE_GITHUB_APP_ID=7\n"
    )
    # the same value again is no clash; odd characters are quoted
    assert setup.plan_env(
        "KERNELIZE_PUBLIC_URL=https://a.example\n", values | {"GITHUB_PRIVATE_KEY": None}, force=False
    )
    assert 'KERNELIZE_GITHUB_PRIVATE_KEY_PATH="/a b/c.pem"' in setup.plan_env(
        "", {"GITHUB_PRIVATE_KEY_PATH": "/a b/c.pem"}, force=False
    )


@pytest.mark.parametrize("url", ["kernelize.example.com", "ftp://x.example", "https://x.example/?a=1"])
def test_bad_url_is_refused(url: str, tmp_path: Path) -> None:
    from bot.cli import main

    assert main(["setup", "--url", url, "--env-file", str(tmp_path / ".env"), "--no-browser"]) == 2
    assert list(tmp_path.iterdir()) == []


def test_setup_with_an_http_client(
    fake_github: FakeGitHub, run_setup: Any, tmp_path: Path, clean_env: None
) -> None:
    fake_github.sign_in_browser("alice")
    env_file = tmp_path / ".env"
    proc = run_setup(env_file, "--name", "Kernelize Test")
    assert proc.url, proc.first_line
    with httpx.Client() as client:
        page = client.get(proc.url).text
        form = read_form(page)
        assert form.action.startswith(f"{fake_github.web_url}/settings/apps/new?state=")
        manifest = json.loads(form.fields["manifest"])
        assert manifest["redirect_url"] == proc.url + "done"
        assert "document.getElementById('manifest-form').submit()" in page
        done = client.post(form.action, data=form.fields, follow_redirects=True)
    assert done.status_code == 200, done.text
    assert str(done.url).startswith(proc.url + "done?code=")
    rc, out, err = proc.finish()
    assert rc == 0, err
    app = fake_github.app
    assert app is not None and app.owner.login == "alice" and app.slug == "kernelize-test"
    assert f"https://github.com/apps/{app.slug}/installations/new" in done.text
    assert out.splitlines()[-1].startswith(f"kernelize: created the GitHub App {app.slug} (id {app.app_id})")
    assert_written(fake_github, env_file, name="Kernelize Test")
    visit = fake_github.manifest_visits[-1]
    assert visit.org is None and visit.manifest is not None
    assert visit.manifest["hook_attributes"]["url"] == f"{PUBLIC}/webhook"


def test_setup_for_an_organization(fake_github: FakeGitHub, run_setup: Any, tmp_path: Path) -> None:
    fake_github.sign_in_browser("alice")
    proc = run_setup(tmp_path / ".env", "--org", "acme")
    with httpx.Client() as client:
        done = post_form(client, proc.url)
    assert done.status_code == 200
    assert proc.finish()[0] == 0
    assert fake_github.app is not None and fake_github.app.owner.login == "acme"
    assert fake_github.manifest_visits[-1].org == "acme"


def test_bad_state_writes_nothing(fake_github: FakeGitHub, run_setup: Any, tmp_path: Path) -> None:
    proc = run_setup(tmp_path / ".env")
    answer = httpx.get(proc.url + "done", params={"code": "0" * 32, "state": "forged"})
    assert answer.status_code == 400
    rc, _, err = proc.finish()
    assert rc == 2
    assert err.strip().count("\n") == 0
    assert "state GitHub sent back does not match" in err
    assert list(tmp_path.iterdir()) == []
    assert not [r for r in fake_github.requests if "conversions" in r.path]  # the code was never traded


@pytest.mark.parametrize("how", ["used", "expired"])
def test_used_or_expired_code(fake_github: FakeGitHub, run_setup: Any, tmp_path: Path, how: str) -> None:
    fake_github.sign_in_browser("alice")
    proc = run_setup(tmp_path / ".env")
    with httpx.Client() as client:
        redirect = post_form(client, proc.url, follow=False)
        assert redirect.status_code == 302
        location = redirect.headers["location"]
        code = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)["code"][0]
        if how == "used":
            first = client.post(
                f"{fake_github.base_url}/app-manifests/{code}/conversions", headers={"User-Agent": "test"}
            )
            assert first.status_code == 201
        else:
            fake_github.expire_manifest_codes()
        done = client.get(location)
    assert done.status_code == 400
    rc, _, err = proc.finish()
    assert rc == 2
    assert "GitHub answered 404 'Not Found'" in err and "run kernelize setup again" in err
    assert list(tmp_path.iterdir()) == []


def test_existing_keys_need_force(
    fake_github: FakeGitHub, run_setup: Any, tmp_path: Path, clean_env: None
) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(
        "# local\nKERNELIZE_DATABASE_URL=sqlite:///x.db\nKERNELIZE_WEBHOOK_SECRET=old-secret-0123456789\n"
    )
    refused = run_setup(env_file)
    rc, _, err = refused.finish()
    assert rc == 2 and "already set: KERNELIZE_WEBHOOK_SECRET: pass --force" in err
    assert not fake_github.manifest_visits  # refused before anything happened on GitHub
    assert sorted(p.name for p in tmp_path.iterdir()) == [".env"]

    fake_github.sign_in_browser("alice")
    proc = run_setup(env_file, "--force")
    with httpx.Client() as client:
        assert post_form(client, proc.url).status_code == 200
    assert proc.finish()[0] == 0
    lines = env_file.read_text().splitlines()
    assert lines[:2] == ["# local", "KERNELIZE_DATABASE_URL=sqlite:///x.db"]
    assert "KERNELIZE_WEBHOOK_SECRET=old-secret-0123456789" not in lines
    assert sum(line.startswith("KERNELIZE_WEBHOOK_SECRET=") for line in lines) == 1
    assert_written(fake_github, env_file)


def test_timeout(run_setup: Any, tmp_path: Path) -> None:
    proc = run_setup(tmp_path / ".env", "--timeout", "0.5")
    rc, _, err = proc.finish()
    assert rc == 2 and "no answer from GitHub within" in err
    assert list(tmp_path.iterdir()) == []


def test_unreachable_api(fake_github: FakeGitHub, tmp_path: Path) -> None:
    fake_github.sign_in_browser("alice")
    closed = FakeGitHub()
    closed_url = closed.base_url
    closed.close()
    proc = Setup(fake_github, tmp_path / ".env", "--github-api-url", closed_url)
    try:
        with httpx.Client() as client:
            assert post_form(client, proc.url).status_code == 400
        rc, _, err = proc.finish()
    finally:
        proc.kill()
    assert rc == 2 and f"cannot reach {closed_url}" in err
    assert list(tmp_path.iterdir()) == []


# -- in a real browser ---------------------------------------------------------------------------

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (CHROMIUM and CHROMEDRIVER):
        if os.environ.get("CI") == "true":  # CI installs them: never skip there
            pytest.fail("Chromium and ChromeDriver are missing in CI", pytrace=False)
        pytest.skip("needs Chromium and ChromeDriver (Debian: chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def test_setup_in_a_browser(
    fake_github: FakeGitHub, run_setup: Any, browser: Any, tmp_path: Path, clean_env: None
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    fake_github.sign_in_browser("alice")
    env_file = tmp_path / ".env"
    proc = run_setup(env_file)
    browser.get(proc.url)  # the page posts its form to GitHub by itself
    WebDriverWait(browser, 20).until(lambda d: "/done?" in d.current_url)
    assert browser.find_element(By.TAG_NAME, "h1").text == "The GitHub App is ready"
    app = fake_github.app
    assert app is not None
    install = browser.find_element(By.ID, "install").get_attribute("href")
    assert install == f"https://github.com/apps/{app.slug}/installations/new"
    rc, _, err = proc.finish()
    assert rc == 0, err
    assert_written(fake_github, env_file)
