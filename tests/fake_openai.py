"""A real HTTP server speaking the OpenAI completions API, for tests of clients (no mocking of urllib).

``FakeOpenAI()`` listens on 127.0.0.1 (ephemeral port) in a background thread and serves
``POST /v1/completions`` and ``POST /v1/chat/completions``. By default every request is answered
with ``n`` choices of a canned code answer; ``plan(...)`` queues scripted responses (status,
headers, body, choices, a delay to simulate a hang), consumed one per request in order. Every
request is recorded (path, lower-cased headers, JSON body) and the largest number of requests in
flight at once is kept in ``max_in_flight``. With ``api_key`` set, requests without
``Authorization: Bearer <api_key>`` get a 401 whose message echoes what was sent (as OpenAI's
does), so tests can check that clients mask it.
"""

from __future__ import annotations

import contextlib
import http
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CANNED_ANSWER = """Here is the kernel.

```python
import torch
import triton
import triton.language as tl


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x
```
"""

PATHS = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}


@dataclass
class Planned:
    """One scripted response.

    ``body``: a dict or list is sent as JSON, str/bytes as they are; None means the usual
    answer for a 2xx status (with ``choices`` as (text, finish_reason) pairs when given, else
    ``n`` canned ones) and an OpenAI-shaped error otherwise. ``delay_s``: wait this long before
    answering (a client with a shorter timeout sees a hang).
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    choices: list[tuple[str, str | None]] | None = None
    delay_s: float = 0.0


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any  # the parsed JSON, or None when it was not JSON
    raw: bytes
    at: float  # time.monotonic() when it arrived


class FakeOpenAI:
    def __init__(
        self,
        *,
        api_key: str | None = None,
        answer: str = CANNED_ANSWER,
        finish_reason: str | None = "stop",
        delay_s: float = 0.0,
    ) -> None:
        self.api_key = api_key
        self.answer = answer
        self.finish_reason = finish_reason
        self.delay_s = delay_s  # for every request without a plan of its own
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._plans: deque[Planned] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def plan(
        self,
        status: int = 200,
        *,
        headers: dict[str, str] | None = None,
        body: Any = None,
        choices: list[tuple[str, str | None]] | None = None,
        delay_s: float = 0.0,
        times: int = 1,
    ) -> None:
        """Queue ``times`` copies of one scripted response."""
        with self._lock:
            for _ in range(times):
                self._plans.append(Planned(status, dict(headers or {}), body, choices, delay_s))

    def close(self) -> None:
        self._stop.set()  # wakes handlers that are simulating a hang
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- serving -----------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                fake._serve(self)

            def do_GET(self) -> None:
                fake._send(self, 404, {}, _error_body(404, f"no route for GET {self.path}"))

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length)
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        headers = {k.lower(): v for k, v in handler.headers.items()}
        with self._lock:
            self.requests.append(Recorded(handler.path, headers, body, raw, time.monotonic()))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        status, extra, payload = 200, {}, b""
        try:
            status, extra, payload = self._respond(handler.path, headers, body)
        finally:
            # Leave the count before answering: once the client has read the answer it may
            # start its next request, which must not overlap this one in the count.
            with self._lock:
                self.in_flight -= 1
        self._send(handler, status, extra, payload)

    def _respond(self, path: str, headers: dict[str, str], body: Any) -> tuple[int, dict[str, str], bytes]:
        mode = PATHS.get(path)
        if mode is None:
            return 404, {}, _error_body(404, f"no route for POST {path}")
        if self.api_key is not None:
            sent = headers.get("authorization", "")
            if sent != f"Bearer {self.api_key}":
                given = sent.removeprefix("Bearer ") or "(none)"
                return 401, {}, _error_body(401, f"Incorrect API key provided: {given}.", "invalid_api_key")
        with self._lock:
            plan = self._plans.popleft() if self._plans else Planned(delay_s=self.delay_s)
        if plan.delay_s:
            self._stop.wait(plan.delay_s)
        if plan.body is not None:
            payload = plan.body if isinstance(plan.body, bytes) else _encode(plan.body)
            return plan.status, plan.headers, payload
        if not 200 <= plan.status < 300:
            return plan.status, plan.headers, _error_body(plan.status, http.HTTPStatus(plan.status).phrase)
        if not isinstance(body, dict):
            return 400, {}, _error_body(400, "request body is not a JSON object")
        n = body.get("n", 1)
        choices = plan.choices or [(self.answer, self.finish_reason)] * n
        return plan.status, plan.headers, _encode(self._answer(mode, body, choices))

    def _answer(self, mode: str, request: dict[str, Any], choices: list[tuple[str, str | None]]) -> Any:
        if mode == "chat":
            asked = " ".join(str(m.get("content", "")) for m in request.get("messages", []))
            shaped = [
                {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
                for i, (text, finish) in enumerate(choices)
            ]
        else:
            asked = str(request.get("prompt", ""))
            shaped = [
                {"index": i, "text": text, "logprobs": None, "finish_reason": finish}
                for i, (text, finish) in enumerate(choices)
            ]
        prompt_tokens = len(asked.split())
        completion_tokens = sum(len(text.split()) for text, _ in choices)
        return {
            "id": f"cmpl-fake-{len(self.requests)}",
            "object": "chat.completion" if mode == "chat" else "text_completion",
            "created": int(time.time()),
            "model": request.get("model", ""),
            "choices": shaped,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str], payload: bytes) -> None:
        # The client may have given up already (a simulated hang): that is not the server's error.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            handler.send_response(status)
            names = {k.lower() for k in headers}
            if "content-type" not in names:
                handler.send_header("Content-Type", "application/json")
            for key, value in headers.items():
                handler.send_header(key, value)
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)


def _encode(body: Any) -> bytes:
    return body.encode("utf-8") if isinstance(body, str) else json.dumps(body).encode("utf-8")


def _error_body(status: int, message: str, code: str | None = None) -> bytes:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return _encode({"error": {"message": message, "type": kind, "param": None, "code": code or status}})
