"""Candidates from an OpenAI-compatible server (vLLM, SGLang, TGI, ...), with the standard library only.

``base_url`` is used as given, less any trailing ``/``: requests go to ``{base_url}/completions``
(``mode="completions"``, a raw prompt) or ``{base_url}/chat/completions`` (``mode="chat"``,
messages), so it normally ends in ``/v1`` (``http://127.0.0.1:8000/v1``).

Secrets: ``api_key`` goes out as ``Authorization: Bearer ...``; credentials in the URL
(``http://user:pass@host/v1``) are taken out of it and sent as HTTP basic auth when there is no
``api_key``. Neither ever appears in a repr, an error message or a candidate's provenance, and
server messages quoted in errors have them masked. Authorization is not re-sent on redirects.

Failures: 429, 5xx, timeouts and connection errors are retried (``retries`` times, sleeping
``backoff_s * 2**attempt`` capped at 30 s, or the server's ``Retry-After`` seconds capped at 60 s);
other statuses and malformed answers raise ``OpenAIError`` (a ``GeneratorError``) at once.
"""

from __future__ import annotations

import base64
import hashlib
import http
import http.client
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from runners.generators.base import Candidate, GeneratorError, Problem

MODES = ("completions", "chat")
MAX_BACKOFF_S = 30.0
MAX_RETRY_AFTER_S = 60.0
MESSAGE_CHARS = 300  # server messages quoted in errors
RAW_ANSWER_CHARS = 4000  # raw answers kept in provenance
MASK = "***"


class OpenAIError(GeneratorError):
    """A request to an OpenAI-compatible server failed; the message is one line, without secrets."""


@dataclass
class OpenAIConfig:
    base_url: str  # e.g. http://127.0.0.1:8000/v1; "/completions" or "/chat/completions" is appended
    model: str
    api_key: str | None = None  # sent as "Authorization: Bearer ..."; masked in repr
    mode: str = "completions"  # "completions" (raw prompt) or "chat" (messages)
    temperature: float = 0.6
    top_p: float = 0.95
    max_tokens: int = 2048
    timeout_s: float = 300.0  # per request (socket connect / each read)
    retries: int = 4  # extra attempts on 429, 5xx, connection errors and timeouts
    backoff_s: float = 1.0  # backoff_s * 2**attempt, capped at 30 s; Retry-After wins when present
    max_concurrency: int = 4  # process-wide cap on in-flight requests to one base_url

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise OpenAIError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        try:
            parts = urllib.parse.urlsplit(self.base_url)
            _ = parts.port  # raises ValueError on a bad port
        except ValueError as exc:
            raise OpenAIError(f"base_url {public_url(self.base_url)!r}: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OpenAIError(f"base_url must be an http(s) URL, not {public_url(self.base_url)!r}")
        if not self.model:
            raise OpenAIError("model must not be empty")
        if self.timeout_s <= 0:
            raise OpenAIError(f"timeout_s must be positive, not {self.timeout_s}")
        if self.retries < 0:
            raise OpenAIError(f"retries must be >= 0, not {self.retries}")
        if self.backoff_s < 0:
            raise OpenAIError(f"backoff_s must be >= 0, not {self.backoff_s}")
        if self.max_concurrency < 1:
            raise OpenAIError(f"max_concurrency must be >= 1, not {self.max_concurrency}")
        if self.max_tokens < 1:
            raise OpenAIError(f"max_tokens must be >= 1, not {self.max_tokens}")

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "api_key" and value is not None:
                shown.append(f"api_key={MASK!r}")
            elif f.name == "base_url":
                shown.append(f"base_url={public_url(value)!r}")
            else:
                shown.append(f"{f.name}={value!r}")
        return f"OpenAIConfig({', '.join(shown)})"


@dataclass
class Completion:
    text: str
    finish_reason: str | None  # "length" means truncated at max_tokens


def split_userinfo(url: str) -> tuple[str, str | None]:
    """``url`` without ``user:pass@``, and that ``user:pass`` (unquoted) or None."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, host = parts.netloc.rsplit("@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), urllib.parse.unquote(userinfo)


def public_url(url: str) -> str:
    """``url`` without credentials: what errors, reprs and provenance may show."""
    try:
        return split_userinfo(url)[0]
    except ValueError:
        return "<unparsable URL>"


class OpenAIClient:
    """Posts to one OpenAI-compatible server, retrying what is worth retrying."""

    _slots_by_url: ClassVar[dict[str, threading.BoundedSemaphore]] = {}
    _slots_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, config: OpenAIConfig, sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self._sleep = sleep
        self.base_url, userinfo = split_userinfo(config.base_url.rstrip("/"))
        self._secrets = [s for s in (config.api_key, userinfo) if s]
        if userinfo and ":" in userinfo:
            self._secrets.append(userinfo.split(":", 1)[1])
        self._auth: dict[str, str] = {}
        if config.api_key:
            self._auth["Authorization"] = f"Bearer {config.api_key}"
        elif userinfo:
            token = base64.b64encode(userinfo.encode("utf-8")).decode("ascii")
            self._auth["Authorization"] = f"Basic {token}"
        # Built here so proxy settings are read from the environment now, not at first urlopen.
        self._opener = urllib.request.build_opener()
        # The first client for a base_url sets the cap for every client of that base_url.
        with self._slots_lock:
            slots = self._slots_by_url.get(self.base_url)
            if slots is None:
                slots = threading.BoundedSemaphore(config.max_concurrency)
                self._slots_by_url[self.base_url] = slots
        self._slots = slots

    def __repr__(self) -> str:
        return f"OpenAIClient({self.config!r})"

    def complete(self, prompt: str, n: int) -> list[Completion]:
        """``n`` samples of a raw-prompt completion (``POST {base_url}/completions``)."""
        payload = self._payload(n)
        payload["prompt"] = prompt
        where, doc = self._post("completions", payload)
        return self._parse(where, doc, chat=False)

    def chat(self, messages: list[dict[str, str]], n: int) -> list[Completion]:
        """``n`` samples of a chat completion (``POST {base_url}/chat/completions``)."""
        payload = self._payload(n)
        payload["messages"] = messages
        where, doc = self._post("chat/completions", payload)
        return self._parse(where, doc, chat=True)

    # -- internals ---------------------------------------------------------------------------

    def _payload(self, n: int) -> dict[str, Any]:
        if n < 1:
            raise ValueError(f"n must be >= 1, not {n}")
        c = self.config
        return {
            "model": c.model,
            "n": n,
            "temperature": c.temperature,
            "top_p": c.top_p,
            "max_tokens": c.max_tokens,
        }

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text

    def _post(self, endpoint: str, payload: dict[str, Any]) -> tuple[str, Any]:
        url = f"{self.base_url}/{endpoint}"
        where = f"POST {url}"
        data = json.dumps(payload).encode("utf-8")
        attempts = self.config.retries + 1
        last = ""
        for attempt in range(attempts):
            retry_after: float | None = None
            with self._slots:
                try:
                    status, reason, retry_header, body = self._send(url, data)
                except (OSError, http.client.HTTPException) as exc:
                    status, reason, retry_header, body = 0, "", None, b""
                    last = self._describe(exc)
            if status:
                if 200 <= status < 300:
                    return where, self._decode(where, body)
                last = self._status_line(status, reason, body)
                if status != 429 and status < 500:
                    if status == 404 and not self.base_url.endswith("/v1"):
                        last += " (base_url usually ends in /v1)"
                    raise OpenAIError(f"{where}: {last}")
                retry_after = _retry_after(retry_header)
            if attempt + 1 < attempts:
                if retry_after is not None:
                    delay = min(retry_after, MAX_RETRY_AFTER_S)
                else:
                    delay = min(self.config.backoff_s * 2**attempt, MAX_BACKOFF_S)
                self._sleep(delay)
        if attempts == 1:
            raise OpenAIError(f"{where}: {last}")
        raise OpenAIError(f"{where}: gave up after {attempts} attempts (last: {last})")

    def _send(self, url: str, data: bytes) -> tuple[int, str, str | None, bytes]:
        """(status, reason, the Retry-After header, body) of one POST."""
        request = urllib.request.Request(
            url,
            data=data,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": "kernelize",
            },
        )
        for key, value in self._auth.items():
            request.add_unredirected_header(key, value)
        try:
            with self._opener.open(request, timeout=self.config.timeout_s) as response:
                return response.status, response.reason, response.headers.get("Retry-After"), response.read()
        except urllib.error.HTTPError as exc:
            try:
                body = exc.read()
            except (OSError, http.client.HTTPException):
                body = b""
            finally:
                exc.close()
            return exc.code, str(exc.reason), exc.headers.get("Retry-After"), body

    def _describe(self, exc: BaseException) -> str:
        """One line for a failed connection or read (never the request itself)."""
        reason: object = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, TimeoutError) or (isinstance(reason, str) and "timed out" in reason):
            return f"timed out after {self.config.timeout_s:g} s"
        if isinstance(reason, ConnectionRefusedError):
            return "connection refused"
        if isinstance(reason, OSError) and reason.strerror:
            return self._redact(f"connection failed: {reason.strerror}")
        return self._redact(f"connection failed: {type(reason).__name__}: {reason}")

    def _status_line(self, status: int, reason: str, body: bytes) -> str:
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = reason
        line = f"HTTP {status} {phrase}".rstrip()
        message = _server_message(body)
        if message:
            line += f": {_one_line(self._redact(message), MESSAGE_CHARS)}"
        return line

    def _decode(self, where: str, body: bytes) -> Any:
        try:
            return json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            snippet = _one_line(self._redact(body.decode("utf-8", "replace")), MESSAGE_CHARS)
            raise OpenAIError(f"{where}: response is not JSON: {snippet!r}") from None

    def _parse(self, where: str, doc: Any, *, chat: bool) -> list[Completion]:
        if not isinstance(doc, dict):
            raise OpenAIError(f"{where}: response is not a JSON object")
        choices = doc.get("choices")
        if not isinstance(choices, list):
            error = _error_message(doc)
            extra = f" (error: {_one_line(self._redact(error), MESSAGE_CHARS)})" if error else ""
            raise OpenAIError(f"{where}: response has no 'choices' list{extra}")
        ranked: list[tuple[int, int, Completion]] = []
        for pos, choice in enumerate(choices):
            if not isinstance(choice, dict):
                raise OpenAIError(f"{where}: choices[{pos}] is not an object")
            if chat:
                message = choice.get("message")
                if not isinstance(message, dict):
                    raise OpenAIError(f"{where}: choices[{pos}] has no 'message' object")
                # null content (a reasoning model cut off before answering) reads as no answer
                text = message.get("content")
                if text is None:
                    text = ""
                if not isinstance(text, str):
                    raise OpenAIError(f"{where}: choices[{pos}].message has no 'content' string")
            else:
                text = choice.get("text")
                if not isinstance(text, str):
                    raise OpenAIError(f"{where}: choices[{pos}] has no 'text' string")
            finish = choice.get("finish_reason")
            index = choice.get("index")
            order = index if isinstance(index, int) else pos
            ranked.append((order, pos, Completion(text, finish if isinstance(finish, str) else None)))
        ranked.sort(key=lambda item: (item[0], item[1]))
        return [completion for _, _, completion in ranked]


def _retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` in seconds, or None when absent or not a number of seconds."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _error_message(doc: dict[str, Any]) -> str:
    """The message of an OpenAI-style (``{"error": {"message"}}``) or vLLM/TGI-style error."""
    error = doc.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    for key in ("message", "detail"):
        value = doc.get(key)
        if isinstance(value, str):
            return value
    return ""


def _server_message(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return text
    if isinstance(doc, dict):
        return _error_message(doc) or text
    return text


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class OpenAIGenerator:
    """One candidate per sampled answer; prompts and code extraction come from the caller."""

    name = "openai"
    samples = True

    def __init__(
        self,
        client: OpenAIClient,
        render_prompt: Callable[[Problem], str],
        render_messages: Callable[[Problem], list[dict[str, str]]],
        extract: Callable[[str, str | None], tuple[str | None, str | None]],
    ) -> None:
        self.client = client
        self.render_prompt = render_prompt
        self.render_messages = render_messages
        self.extract = extract

    def generate(self, problem: Problem, n: int) -> list[Candidate]:
        if n < 1:
            return []
        config = self.client.config
        if config.mode == "chat":
            messages = self.render_messages(problem)
            asked = json.dumps(messages, ensure_ascii=False, sort_keys=True)
            completions = self.client.chat(messages, n)
        else:
            asked = self.render_prompt(problem)
            completions = self.client.complete(asked, n)
        prompt_sha256 = hashlib.sha256(asked.encode("utf-8")).hexdigest()
        out = []
        for i, completion in enumerate(completions, 1):
            code, error = self.extract(completion.text, completion.finish_reason)
            if code is None and error is None:
                error = "no code in the answer"
            provenance = {
                "generator": self.name,
                "model": config.model,
                "base_url": self.client.base_url,
                "mode": config.mode,
                "temperature": config.temperature,
                "top_p": config.top_p,
                "max_tokens": config.max_tokens,
                "prompt_sha256": prompt_sha256,
                "finish_reason": completion.finish_reason,
                "raw_answer": completion.text[:RAW_ANSWER_CHARS],
            }
            out.append(Candidate(f"openai-{i}", self.name, code or "", provenance, error))
        return out


__all__ = ["Completion", "OpenAIClient", "OpenAIConfig", "OpenAIError", "OpenAIGenerator"]
