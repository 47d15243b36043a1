"""runners.generators.openai against a real HTTP server (tests/fake_openai.py); urllib is not mocked."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import CANNED_ANSWER, FakeOpenAI

from runners.discover import ModuleClass
from runners.generators.base import GeneratorError, Problem
from runners.generators.openai import (
    Completion,
    OpenAIClient,
    OpenAIConfig,
    OpenAIError,
    OpenAIGenerator,
)

KEY = "sk-test-3f9a1c7e5b2d4a6f8e0c"


@pytest.fixture
def start_fake() -> Iterator[Callable[..., FakeOpenAI]]:
    """``start_fake(**FakeOpenAI kwargs) -> FakeOpenAI``; all are closed after the test."""
    started: list[FakeOpenAI] = []

    def start(**kwargs: Any) -> FakeOpenAI:
        fake = FakeOpenAI(**kwargs)
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.close()


@pytest.fixture
def fake(start_fake: Callable[..., FakeOpenAI]) -> FakeOpenAI:
    return start_fake()


class Sleeps(list[float]):
    """An injected ``sleep`` that records and returns at once."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def client_for(fake: FakeOpenAI, **overrides: Any) -> tuple[OpenAIClient, Sleeps]:
    sleeps = Sleeps()
    options: dict[str, Any] = {"base_url": fake.base_url, "model": "kernel-llm", "timeout_s": 10.0}
    options.update(overrides)
    return OpenAIClient(OpenAIConfig(**options), sleep=sleeps), sleeps


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- happy paths -----------------------------------------------------------------------------


def test_completions_happy_path(fake: FakeOpenAI) -> None:
    client, sleeps = client_for(fake, temperature=0.2, top_p=0.9, max_tokens=512)
    out = client.complete("def kernel():", 3)
    assert out == [Completion(CANNED_ANSWER, "stop")] * 3
    assert sleeps == []
    [request] = fake.requests
    assert request.path == "/v1/completions"
    assert request.body == {
        "model": "kernel-llm",
        "prompt": "def kernel():",
        "n": 3,
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 512,
    }
    assert request.headers["content-type"] == "application/json"
    assert "authorization" not in request.headers


def test_chat_happy_path_with_key(start_fake: Callable[..., FakeOpenAI]) -> None:
    fake = start_fake(api_key=KEY)
    client, _ = client_for(fake, mode="chat", api_key=KEY)
    messages = [{"role": "system", "content": "You write Triton."}, {"role": "user", "content": "Go."}]
    out = client.chat(messages, 3)
    assert [c.text for c in out] == [CANNED_ANSWER] * 3
    [request] = fake.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body["messages"] == messages
    assert {k: request.body[k] for k in ("model", "n", "temperature", "top_p", "max_tokens")} == {
        "model": "kernel-llm",
        "n": 3,
        "temperature": 0.6,
        "top_p": 0.95,
        "max_tokens": 2048,
    }
    assert "prompt" not in request.body


def test_trailing_slash_and_choices_sorted_by_index(fake: FakeOpenAI) -> None:
    fake.plan(
        body={
            "choices": [
                {"index": 2, "text": "c", "finish_reason": "stop"},
                {"index": 0, "text": "a", "finish_reason": "length"},
                {"index": 1, "text": "b"},
            ]
        }
    )
    client, _ = client_for(fake, base_url=fake.base_url + "/")
    assert client.complete("p", 3) == [
        Completion("a", "length"),
        Completion("b", None),
        Completion("c", "stop"),
    ]
    assert fake.requests[0].path == "/v1/completions"


def test_fewer_choices_than_n_and_length_finish(fake: FakeOpenAI) -> None:
    fake.plan(choices=[("first", "stop"), ("sec", "length")])
    client, _ = client_for(fake)
    assert client.complete("p", 4) == [Completion("first", "stop"), Completion("sec", "length")]


def test_chat_null_content_reads_as_empty(fake: FakeOpenAI) -> None:
    fake.plan(body={"choices": [{"index": 0, "message": {"role": "assistant", "content": None}}]})
    client, _ = client_for(fake, mode="chat")
    assert client.chat([{"role": "user", "content": "x"}], 1) == [Completion("", None)]


# -- retries ---------------------------------------------------------------------------------


def test_429_honours_retry_after(fake: FakeOpenAI) -> None:
    fake.plan(429, headers={"Retry-After": "2"})
    client, sleeps = client_for(fake)
    assert len(client.complete("p", 1)) == 1
    assert sleeps == [2.0]
    assert len(fake.requests) == 2


def test_503_twice_then_success_backs_off_exponentially(fake: FakeOpenAI) -> None:
    fake.plan(503, times=2)
    client, sleeps = client_for(fake, backoff_s=0.5)
    assert client.complete("p", 2) == [Completion(CANNED_ANSWER, "stop")] * 2
    assert sleeps == [0.5, 1.0]
    assert len(fake.requests) == 3


def test_backoff_is_capped_at_30_s(fake: FakeOpenAI) -> None:
    fake.plan(502, times=3)
    client, sleeps = client_for(fake, backoff_s=10.0, retries=3)
    client.complete("p", 1)
    assert sleeps == [10.0, 20.0, 30.0]


def test_500_forever_gives_up(fake: FakeOpenAI) -> None:
    fake.plan(500, body={"error": {"message": "CUDA out of memory"}}, times=10)
    client, sleeps = client_for(fake)
    with pytest.raises(OpenAIError) as info:
        client.complete("p", 1)
    message = str(info.value)
    assert message.startswith(f"POST {fake.base_url}/completions: gave up after 5 attempts (last: HTTP 500")
    assert "CUDA out of memory" in message
    assert sleeps == [1.0, 2.0, 4.0, 8.0]
    assert len(fake.requests) == 5
    assert isinstance(info.value, GeneratorError)


def test_400_is_not_retried_and_quotes_the_server(fake: FakeOpenAI) -> None:
    long_tail = "x" * 1000
    fake.plan(400, body={"object": "error", "message": f"max_tokens is too large\n{long_tail}"})
    client, sleeps = client_for(fake)
    with pytest.raises(OpenAIError) as info:
        client.complete("p", 1)
    message = str(info.value)
    assert message.startswith(
        f"POST {fake.base_url}/completions: HTTP 400 Bad Request: max_tokens is too large x"
    )
    assert "\n" not in message
    assert len(message) < 450  # the server's message is cut to 300 characters
    assert sleeps == []
    assert len(fake.requests) == 1


def test_404_hints_at_v1(fake: FakeOpenAI) -> None:
    client, _ = client_for(fake, base_url=fake.base_url.removesuffix("/v1"))
    with pytest.raises(OpenAIError, match=r"HTTP 404 Not Found: .*\(base_url usually ends in /v1\)"):
        client.complete("p", 1)


def test_wrong_key_never_leaks(start_fake: Callable[..., FakeOpenAI]) -> None:
    fake = start_fake(api_key="sk-the-right-one")
    config = OpenAIConfig(base_url=fake.base_url, model="m", api_key=KEY)
    client = OpenAIClient(config, sleep=Sleeps())
    with pytest.raises(OpenAIError) as info:
        client.complete("p", 1)
    message = str(info.value)
    assert "HTTP 401 Unauthorized: Incorrect API key provided: ***" in message
    assert len(fake.requests) == 1  # not retried
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"  # it was sent, though
    for text in (message, repr(info.value), repr(config), str(config), repr(client)):
        assert KEY not in text
    assert "api_key='***'" in repr(config)


def test_timeout_is_retried_then_reported(fake: FakeOpenAI) -> None:
    fake.plan(delay_s=2.0, times=2)
    client, sleeps = client_for(fake, timeout_s=0.5, retries=1)
    with pytest.raises(OpenAIError) as info:
        client.complete("p", 1)
    assert str(info.value) == (
        f"POST {fake.base_url}/completions: gave up after 2 attempts (last: timed out after 0.5 s)"
    )
    assert sleeps == [1.0]
    assert len(fake.requests) == 2


def test_timeout_then_success(fake: FakeOpenAI) -> None:
    fake.plan(delay_s=2.0)
    client, sleeps = client_for(fake, timeout_s=0.5)
    assert len(client.complete("p", 1)) == 1
    assert sleeps == [1.0]


def test_single_attempt_reports_the_failure_itself(fake: FakeOpenAI) -> None:
    fake.plan(503)
    client, sleeps = client_for(fake, retries=0)
    with pytest.raises(OpenAIError) as info:
        client.complete("p", 1)
    assert (
        str(info.value)
        == f"POST {fake.base_url}/completions: HTTP 503 Service Unavailable: Service Unavailable"
    )
    assert sleeps == []


def test_connection_refused() -> None:
    port = closed_port()
    sleeps = Sleeps()
    client = OpenAIClient(OpenAIConfig(f"http://127.0.0.1:{port}/v1", "m", retries=2), sleep=sleeps)
    with pytest.raises(OpenAIError) as info:
        client.complete("p", 1)
    assert str(info.value) == (
        f"POST http://127.0.0.1:{port}/v1/completions: gave up after 3 attempts (last: connection refused)"
    )
    assert sleeps == [1.0, 2.0]


# -- malformed answers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "mode", "expected"),
    [
        ("<html>Bad gateway</html>", "completions", "response is not JSON: '<html>Bad gateway</html>'"),
        ('{"choices": [', "completions", "response is not JSON"),
        ([1, 2], "completions", "response is not a JSON object"),
        ({"id": "x"}, "completions", "response has no 'choices' list"),
        ({"error": "model not loaded"}, "completions", "no 'choices' list (error: model not loaded)"),
        ({"choices": ["a"]}, "completions", "choices[0] is not an object"),
        ({"choices": [{"index": 0}]}, "completions", "choices[0] has no 'text' string"),
        ({"choices": [{"index": 0, "text": "t"}]}, "chat", "choices[0] has no 'message' object"),
        ({"choices": [{"message": {"content": 3}}]}, "chat", "choices[0].message has no 'content' string"),
    ],
)
def test_malformed_answers(fake: FakeOpenAI, body: Any, mode: str, expected: str) -> None:
    fake.plan(body=body)
    client, sleeps = client_for(fake, mode=mode)
    with pytest.raises(OpenAIError) as info:
        if mode == "chat":
            client.chat([{"role": "user", "content": "x"}], 1)
        else:
            client.complete("p", 1)
    assert expected in str(info.value)
    assert str(info.value).startswith(f"POST {fake.base_url}/")
    assert sleeps == []
    assert len(fake.requests) == 1


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"mode": "stream"}, "mode must be one of completions, chat"),
        ({"base_url": "ftp://host/v1"}, "must be an http(s) URL"),
        ({"base_url": "http://host:port/v1"}, "base_url 'http://host:port/v1'"),
        ({"max_concurrency": 0}, "max_concurrency must be >= 1"),
        ({"retries": -1}, "retries must be >= 0"),
        ({"timeout_s": 0}, "timeout_s must be positive"),
    ],
)
def test_bad_config(options: dict[str, Any], expected: str) -> None:
    with pytest.raises(OpenAIError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        OpenAIConfig(**{"base_url": "http://127.0.0.1:1/v1", "model": "m", **options})


def test_url_credentials_become_basic_auth_and_stay_hidden(fake: FakeOpenAI) -> None:
    url = fake.base_url.replace("http://", "http://alice:s3cret-pw@")
    config = OpenAIConfig(url, "m", retries=0)
    client = OpenAIClient(config, sleep=Sleeps())
    client.complete("p", 1)
    assert fake.requests[0].headers["authorization"] == "Basic YWxpY2U6czNjcmV0LXB3"  # alice:s3cret-pw
    assert client.base_url == fake.base_url
    assert "s3cret-pw" not in repr(config) and "alice" not in repr(config)


# -- concurrency -----------------------------------------------------------------------------


def test_concurrency_is_capped_per_base_url(start_fake: Callable[..., FakeOpenAI]) -> None:
    fake = start_fake(delay_s=0.3)
    # Two clients of one base_url share the cap (set by the first).
    clients = [client_for(fake, max_concurrency=2)[0], client_for(fake, max_concurrency=2)[0]]
    results: list[list[Completion]] = []
    errors: list[BaseException] = []

    def call(client: OpenAIClient) -> None:
        try:
            results.append(client.complete("p", 1))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(clients[i % 2],)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert errors == []
    assert len(results) == 6
    assert len(fake.requests) == 6
    assert fake.max_in_flight == 2


# -- the generator ---------------------------------------------------------------------------


def problem() -> Problem:
    module = ModuleClass(name="Add", lineno=1, end_lineno=1, bases=(), init_params=(), forward_params=("x",))
    return Problem(
        file="/repo/models/add.py",
        root="/repo",
        rel_path="models/add.py",
        class_name="Add",
        source="class Add: ...\n",
        module=module,
    )


def render_prompt(p: Problem) -> str:
    return f"# kernelize {p.target}\n{p.source}"


def render_messages(p: Problem) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Kernelize {p.target}:\n{p.source}"}]


def extract(text: str, finish_reason: str | None) -> tuple[str | None, str | None]:
    if finish_reason == "length":
        return None, "the answer was cut off at max_tokens"
    if "class ModelNew" not in text:
        return None, None
    return text.split("```python\n", 1)[1].split("```", 1)[0], None


@pytest.mark.parametrize("mode", ["completions", "chat"])
def test_generator_candidates_and_provenance(start_fake: Callable[..., FakeOpenAI], mode: str) -> None:
    fake = start_fake(api_key=KEY)
    long_answer = CANNED_ANSWER + "#" * 5000
    fake.plan(
        choices=[(long_answer, "stop"), ("```python\nclass ModelNew: ...", "length"), ("no code", "stop")]
    )
    url = fake.base_url.replace("http://", "http://bob:hunter2@")
    client = OpenAIClient(OpenAIConfig(url, "kernel-llm", api_key=KEY, mode=mode), sleep=Sleeps())
    gen = OpenAIGenerator(client, render_prompt, render_messages, extract)
    assert (gen.name, gen.samples) == ("openai", True)

    candidates = gen.generate(problem(), 3)

    assert [c.id for c in candidates] == ["openai-1", "openai-2", "openai-3"]
    assert {c.generator for c in candidates} == {"openai"}
    first, cut, empty = candidates
    assert (
        first.error is None and first.source.startswith("import torch") and "class ModelNew" in first.source
    )
    assert (cut.source, cut.error) == ("", "the answer was cut off at max_tokens")
    assert (empty.source, empty.error) == ("", "no code in the answer")

    [request] = fake.requests
    asked = (
        request.body["prompt"]
        if mode == "completions"
        else json.dumps(request.body["messages"], ensure_ascii=False, sort_keys=True)
    )
    assert first.provenance == {
        "generator": "openai",
        "model": "kernel-llm",
        "base_url": fake.base_url,
        "mode": mode,
        "temperature": 0.6,
        "top_p": 0.95,
        "max_tokens": 2048,
        "prompt_sha256": hashlib.sha256(asked.encode("utf-8")).hexdigest(),
        "finish_reason": "stop",
        "raw_answer": long_answer[:4000],
    }
    assert cut.provenance["finish_reason"] == "length"
    dumped = json.dumps([c.provenance for c in candidates]) + repr(candidates)
    for secret in (KEY, "hunter2", "bob:"):
        assert secret not in dumped


def test_generator_propagates_openai_errors(fake: FakeOpenAI) -> None:
    fake.plan(400, body={"error": {"message": "unknown model"}})
    gen = OpenAIGenerator(client_for(fake)[0], render_prompt, render_messages, extract)
    with pytest.raises(GeneratorError, match="HTTP 400 Bad Request: unknown model"):
        gen.generate(problem(), 2)
    assert gen.generate(problem(), 0) == []
    assert len(fake.requests) == 1


def test_module_uses_only_the_standard_library() -> None:
    import runners.generators.openai as module

    source = Path(module.__file__ or "").read_text(encoding="utf-8")
    imported = {
        line.split()[1].split(".")[0]
        for line in source.splitlines()
        if line.startswith(("import ", "from ")) and not line.startswith("from __future__")
    }
    assert imported <= {
        "base64",
        "collections",
        "dataclasses",
        "hashlib",
        "http",
        "json",
        "runners",
        "threading",
        "time",
        "typing",
        "urllib",
    }
