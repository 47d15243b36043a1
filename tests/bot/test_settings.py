"""Settings: refused without a strong webhook secret, secrets kept out of repr, values derived."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.settings import Settings, SettingsError, load_settings

ROOT = Path(__file__).resolve().parents[2]
GOOD = "4b1d0c8e2f7a9e35c6d1b0a8f4e2c7d9"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No KERNELIZE_* variable from the caller, and a working directory without a .env."""
    for name in list(os.environ):
        if name.startswith("KERNELIZE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    yield


def test_refuses_to_start_without_a_secret() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        "KERNELIZE_WEBHOOK_SECRET is not set: the server refuses to start without a webhook secret"
    )


@pytest.mark.parametrize(
    ("secret", "reason"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("changeme", "placeholder"),
        ("secret", "placeholder"),
        ("Your-Webhook-Secret", "placeholder"),
        ("short-but-random", None),  # 16 characters: accepted
        ("short-but-rando", "too short (15 characters; at least 16)"),
        ("a" * 40, "repeats a single character"),
    ],
)
def test_weak_secrets_are_refused(monkeypatch: pytest.MonkeyPatch, secret: str, reason: str | None) -> None:
    monkeypatch.setenv("KERNELIZE_WEBHOOK_SECRET", secret)
    if reason is None:
        assert load_settings().webhook_secret.get_secret_value() == secret
        return
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith("KERNELIZE_WEBHOOK_SECRET ")
    assert reason in message
    assert "secrets.token_hex" in message  # says what to do
    if len(secret) >= 8:  # the value itself is never echoed
        assert secret not in message.removeprefix("KERNELIZE_WEBHOOK_SECRET")


def test_reads_the_environment_and_dotenv_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    Path(".env").write_text(f"KERNELIZE_WEBHOOK_SECRET={GOOD}\nKERNELIZE_GITHUB_APP_ID=42\n")
    monkeypatch.setenv("KERNELIZE_MAX_BODY_BYTES", "1024")
    settings = load_settings()
    assert settings.webhook_secret.get_secret_value() == GOOD
    assert (settings.github_app_id, settings.max_body_bytes) == (42, 1024)
    monkeypatch.setenv("KERNELIZE_GITHUB_APP_ID", "7")  # the environment wins over .env
    assert load_settings().github_app_id == 7


def test_importing_reads_nothing() -> None:
    # No secret is set: a Settings() at import time anywhere on the web path would fail here.
    env = {key: value for key, value in os.environ.items() if not key.startswith("KERNELIZE_")}
    code = "import bot.settings, bot.db, bot.web, bot.cli"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_defaults() -> None:
    settings = Settings(webhook_secret=GOOD, _env_file=None)
    assert settings.github_api_url == "https://api.github.com"
    assert settings.database_url == "sqlite:///kernelize.db"
    assert settings.broker_url == "sqla+sqlite:///kernelize-broker.db"
    assert settings.result_backend == "db+sqlite:///kernelize-results.db"  # not the app's own file
    assert settings.max_body_bytes == 25 * 2**20
    assert settings.private_key() is None


@pytest.mark.parametrize(
    ("database_url", "backend"),
    [
        ("postgresql://kz:pw@db/kernelize", "db+postgresql+psycopg://kz:pw@db/kernelize"),
        ("postgres://kz@db/kernelize", "db+postgresql+psycopg://kz@db/kernelize"),
        ("postgresql+psycopg://db/k", "db+postgresql+psycopg://db/k"),
        ("sqlite:////srv/kz/app.db", "db+sqlite:////srv/kz/app-results.db"),
        ("sqlite:///state/kernelize", "db+sqlite:///state/kernelize-results.db"),
        ("sqlite://", None),  # in memory: nothing a worker could share
        ("mysql+pymysql://db/k", None),  # no derived backend: set KERNELIZE_RESULT_BACKEND
    ],
)
def test_result_backend_follows_the_database(database_url: str, backend: str | None) -> None:
    assert Settings(webhook_secret=GOOD, database_url=database_url).result_backend == backend


def test_an_explicit_result_backend_is_kept() -> None:
    settings = Settings(webhook_secret=GOOD, result_backend="redis://127.0.0.1:6379/2")
    assert settings.result_backend == "redis://127.0.0.1:6379/2"


def test_secrets_stay_out_of_repr(tmp_path: Path) -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEsecretkeymaterial\n-----END RSA PRIVATE KEY-----\n"
    settings = Settings(
        webhook_secret=GOOD,
        github_private_key=pem,
        database_url="postgresql://kz:dbpassword1@db/kernelize",
        broker_url="redis://:brokerpassword2@redis:6379/0",
    )
    for text in (repr(settings), str(settings)):
        for secret in (GOOD, "secretkeymaterial", "dbpassword1", "brokerpassword2"):
            assert secret not in text
    assert "postgresql://kz:***@db/kernelize" in repr(settings)
    assert "redis://:***@redis:6379/0" in repr(settings)
    assert settings.private_key() == pem
    # The real values are still there for whoever needs them.
    assert settings.database_url == "postgresql://kz:dbpassword1@db/kernelize"


def test_private_key_from_a_file(tmp_path: Path) -> None:
    key = tmp_path / "app.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n")
    settings = Settings(webhook_secret=GOOD, github_private_key_path=key)
    assert settings.private_key() == key.read_text()
    missing = Settings(webhook_secret=GOOD, github_private_key_path=tmp_path / "gone.pem")
    with pytest.raises(SettingsError, match=r"KERNELIZE_GITHUB_PRIVATE_KEY_PATH: cannot read .*gone\.pem"):
        missing.private_key()


def test_both_key_sources_are_refused(tmp_path: Path) -> None:
    with pytest.raises(
        SettingsError, match="KERNELIZE_GITHUB_PRIVATE_KEY or KERNELIZE_GITHUB_PRIVATE_KEY_PATH"
    ):
        load_settings(webhook_secret=GOOD, github_private_key="pem", github_private_key_path=tmp_path)


def test_other_bad_values_name_their_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELIZE_WEBHOOK_SECRET", GOOD)
    monkeypatch.setenv("KERNELIZE_MAX_BODY_BYTES", "0")
    monkeypatch.setenv("KERNELIZE_GITHUB_APP_ID", "twelve")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "KERNELIZE_MAX_BODY_BYTES: must be positive, got 0" in str(caught.value)
    assert "KERNELIZE_GITHUB_APP_ID: " in str(caught.value)
