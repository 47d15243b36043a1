"""Server settings: one pydantic-settings class, read from ``KERNELIZE_*`` variables or ``.env``.

Nothing is read at import time: call :func:`load_settings` where a process starts.
The class refuses to build without a strong webhook secret, so the server can
never run accepting unsigned deliveries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from runners.results import DEFAULT_MIN_SPEEDUP, DEFAULT_SAMPLES, DEFAULT_TIMEOUT_S

ENV_PREFIX = "KERNELIZE_"
MIN_SECRET_LENGTH = 16
# Values copied from tutorials and templates; a secret anyone can guess signs anyone's deliveries.
PLACEHOLDER_SECRETS = frozenset(
    {
        "changeme",
        "change-me",
        "change_me",
        "changethis",
        "secret",
        "password",
        "webhook-secret",
        "webhook_secret",
        "your-secret",
        "your_secret",
        "yoursecret",
        "your-webhook-secret",
        "your_webhook_secret",
        "mysecret",
        "development",
        "test",
        "xxx",
        "todo",
    }
)
_GENERATE = "python -c 'import secrets; print(secrets.token_hex(32))'"


class SettingsError(ValueError):
    """The configuration cannot be used; the message names the variable and what to do."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    # Required by the web server (load_settings(web=True)); a github-queue worker never sees deliveries.
    webhook_secret: SecretStr | None = None
    github_app_id: int | None = None
    github_private_key: SecretStr | None = None
    github_private_key_path: Path | None = None
    github_api_url: str = "https://api.github.com"
    # Sign-in with GitHub for the dashboard (the App's OAuth web flow); GitHub Enterprise: https://HOST
    github_web_url: str = "https://github.com"
    # Where the planner git-fetches a pull request's head (https://HOST for GitHub Enterprise). Unset:
    # derived from github_api_url (api.github.com → https://github.com, HOST/api/v3 → HOST); empty: off,
    # the files are read through the API, one request each.
    github_git_url: str | None = None
    github_client_id: str | None = None
    github_client_secret: SecretStr | None = None
    # Public base URL of this server (for the OAuth redirect); default: taken from each request
    public_url: str | None = None
    database_url: str = "sqlite:///kernelize.db"
    # kombu's SQLAlchemy transport on a SQLite file: no broker to run, works across processes on one machine.
    broker_url: str = "sqla+sqlite:///kernelize-broker.db"
    result_backend: str | None = None
    max_body_bytes: int = 25 * 2**20  # GitHub caps payloads at 25 MB
    # How the engine runs for pull requests (the repository config may narrow these later).
    # KERNELIZE_GENERATORS=kernelllm,template; unset: each GPU worker's default portfolio (what it can run)
    generators: Annotated[list[str], NoDecode] = []
    samples: int = DEFAULT_SAMPLES
    min_speedup: float = DEFAULT_MIN_SPEEDUP
    candidate_timeout_s: float = DEFAULT_TIMEOUT_S
    # Per installation, so one repository cannot take the shared GPUs: excess jobs wait, never vanish.
    max_concurrent_jobs: int = 2
    gpu_minutes_per_day: float = 240.0
    # PyGithub waits this long between writes (GitHub asks for 1 s); tests against a local fake use 0.
    seconds_between_writes: float = 1.0

    @field_validator("generators", mode="before")
    @classmethod
    def _split_generators(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [g.strip() for g in value.split(",") if g.strip()]
        return value

    @field_validator("webhook_secret")
    @classmethod
    def _strong_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        secret = value.get_secret_value()
        if not secret.strip():
            raise ValueError("is empty")
        if secret.strip().lower() in PLACEHOLDER_SECRETS:
            raise ValueError("is a well-known placeholder")
        if len(secret) < MIN_SECRET_LENGTH:
            raise ValueError(f"is too short ({len(secret)} characters; at least {MIN_SECRET_LENGTH})")
        if len(set(secret)) == 1:
            raise ValueError("repeats a single character")
        return value

    @field_validator("max_body_bytes", "max_concurrent_jobs")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError(f"must be positive, got {value}")
        return value

    @model_validator(mode="after")
    def _derive(self) -> Settings:
        if self.github_private_key is not None and self.github_private_key_path is not None:
            raise ValueError(
                f"set {ENV_PREFIX}GITHUB_PRIVATE_KEY or {ENV_PREFIX}GITHUB_PRIVATE_KEY_PATH, not both"
            )
        if self.result_backend is None:
            self.result_backend = _derived_result_backend(self.database_url)
        return self

    def private_key(self) -> str | None:
        """The GitHub App's PEM private key, from the variable or the file; None when neither is set."""
        if self.github_private_key is not None:
            return self.github_private_key.get_secret_value()
        if self.github_private_key_path is None:
            return None
        try:
            return self.github_private_key_path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SettingsError(
                f"{ENV_PREFIX}GITHUB_PRIVATE_KEY_PATH: cannot read {self.github_private_key_path}: "
                f"{exc.strerror or exc}"
            ) from None

    def __repr_args__(self) -> Any:
        # SecretStr already hides itself; URLs may carry a password too (postgresql://user:pw@host).
        for name, value in super().__repr_args__():
            if name in ("database_url", "broker_url", "result_backend") and isinstance(value, str):
                value = mask_url(value)
            yield name, value


def _derived_result_backend(database_url: str) -> str | None:
    """Where Celery keeps task results when ``KERNELIZE_RESULT_BACKEND`` is not set.

    PostgreSQL: the app's own database (tables ``celery_*``). A SQLite file: a file of its own beside
    it (``kernelize.db`` → ``kernelize-results.db``). SQLite has one writer per file: with results in
    the app's file, a worker storing a result and the web process recording a delivery while it
    enqueues wait on each other's lock, and the first signed delivery hung past GitHub's 10 s."""
    from sqlalchemy.engine import make_url

    from bot.db import normalize_url

    if database_url.startswith("postgres"):
        return "db+" + normalize_url(database_url)
    if not database_url.startswith("sqlite"):
        return None
    url = make_url(database_url)
    if url.database in (None, "", ":memory:"):
        return None  # nothing another process could share: set KERNELIZE_RESULT_BACKEND
    path = Path(url.database)
    results = path.with_name(f"{path.stem}-results{path.suffix or '.db'}")
    return "db+" + url.set(database=str(results)).render_as_string(hide_password=False)


def mask_url(url: str) -> str:
    """``scheme://user:***@host/...``: the URL with any password hidden."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"


def _describe(error: Any) -> str:
    name = ENV_PREFIX + ".".join(str(part) for part in error["loc"]).upper()
    if error["type"] == "missing":
        if name == f"{ENV_PREFIX}WEBHOOK_SECRET":
            return f"{name} is not set: the server refuses to start without a webhook secret"
        return f"{name} is not set"
    message = str(error["msg"]).removeprefix("Value error, ")
    if not error["loc"]:  # a model-level check; its message names the variables
        return message
    if name == f"{ENV_PREFIX}WEBHOOK_SECRET":
        return (
            f"{name} {message}: use a long random value (e.g. {_GENERATE}) "
            "and set the same one in the GitHub App's webhook settings"
        )
    return f"{name}: {message}"


def load_settings(*, web: bool = True, **overrides: Any) -> Settings:
    """Read the settings now (environment, then ``.env``); raise :class:`SettingsError` with one line.

    ``web``: for the webhook server, which refuses to start without a webhook secret."""
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError("; ".join(_describe(error) for error in exc.errors())) from None
    if web and settings.webhook_secret is None:
        name = f"{ENV_PREFIX}WEBHOOK_SECRET"
        raise SettingsError(f"{name} is not set: the server refuses to start without a webhook secret")
    return settings
