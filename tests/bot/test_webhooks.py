"""Signature check and delivery parsing, on GitHub's test vector and octokit's real payloads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.webhooks import BadDelivery, parse_delivery, sign, verify_signature

PAYLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "github-webhooks" / "payload-examples"

# From GitHub's "Validating webhook deliveries" page.
VECTOR_SECRET = b"It's a Secret to Everybody"
VECTOR_BODY = b"Hello, World!"
VECTOR_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_githubs_test_vector_is_valid() -> None:
    assert verify_signature(VECTOR_SECRET, VECTOR_BODY, VECTOR_SIGNATURE)
    assert sign(VECTOR_SECRET, VECTOR_BODY) == VECTOR_SIGNATURE


def test_uppercase_hex_and_surrounding_space_are_accepted() -> None:
    upper = "sha256=" + VECTOR_SIGNATURE.removeprefix("sha256=").upper()
    assert verify_signature(VECTOR_SECRET, VECTOR_BODY, f" {upper} ")


@pytest.mark.parametrize(
    ("secret", "body", "header"),
    [
        (VECTOR_SECRET, b"Hello, World?", VECTOR_SIGNATURE),  # tampered body
        (VECTOR_SECRET, VECTOR_BODY + b"\n", VECTOR_SIGNATURE),  # one byte more
        (b"It's a Secret to everybody", VECTOR_BODY, VECTOR_SIGNATURE),  # other secret
        (VECTOR_SECRET, VECTOR_BODY, VECTOR_SIGNATURE.replace("sha256=", "sha1=")),  # other prefix
        (VECTOR_SECRET, VECTOR_BODY, VECTOR_SIGNATURE.removeprefix("sha256=")),  # no prefix
        (VECTOR_SECRET, VECTOR_BODY, VECTOR_SIGNATURE[:-1]),  # truncated
        (VECTOR_SECRET, VECTOR_BODY, VECTOR_SIGNATURE[:-1] + "0"),  # one digit off
        (VECTOR_SECRET, VECTOR_BODY, VECTOR_SIGNATURE + "00"),  # too long
        (VECTOR_SECRET, VECTOR_BODY, "sha256=" + "z" * 64),  # not hex
        (VECTOR_SECRET, VECTOR_BODY, "sha256=é" + "0" * 63),  # not ASCII
        (VECTOR_SECRET, VECTOR_BODY, ""),
        (VECTOR_SECRET, VECTOR_BODY, None),  # header missing
        (b"", VECTOR_BODY, sign(b"", VECTOR_BODY)),  # an empty secret signs nothing
    ],
)
def test_anything_else_is_invalid(secret: bytes, body: bytes, header: str | None) -> None:
    assert not verify_signature(secret, body, header)


def _headers(event: str, delivery: str = "72d3162e-cc78-11e3-81ab-4c9367dc0958") -> dict[str, str]:
    return {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "Content-Type": "application/json"}


def test_parse_pull_request_opened() -> None:
    body = (PAYLOADS / "pull_request" / "opened.payload.json").read_bytes()
    delivery = parse_delivery(_headers("pull_request"), body)
    assert delivery.event == "pull_request"
    assert delivery.delivery_id == "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    assert delivery.action == "opened"
    assert delivery.installation_id == 1
    assert delivery.repository == "Codertocat/Hello-World"
    assert delivery.payload["number"] == 2
    assert "payload" not in repr(delivery)  # bodies stay out of logs and tracebacks


def test_parse_ping_and_a_payload_without_installation() -> None:
    ping = parse_delivery(_headers("ping"), (PAYLOADS / "ping" / "payload.json").read_bytes())
    assert (ping.event, ping.action, ping.installation_id) == ("ping", None, None)
    comment = (PAYLOADS / "issue_comment" / "created.payload.json").read_bytes()
    created = parse_delivery(_headers("issue_comment"), comment)
    assert (created.action, created.installation_id, created.repository) == (
        "created",
        None,
        "Codertocat/Hello-World",
    )


def test_header_names_are_case_insensitive() -> None:
    headers = {"x-github-event": "ping", "X-GITHUB-DELIVERY": "abc-1"}
    assert parse_delivery(headers, b"{}").delivery_id == "abc-1"


def test_odd_field_types_become_none() -> None:
    body = {"action": 3, "installation": {"id": "7"}, "repository": {"full_name": ["a"]}}
    delivery = parse_delivery(_headers("pull_request"), json.dumps(body).encode())
    assert (delivery.action, delivery.installation_id, delivery.repository) == (None, None, None)
    flagged = parse_delivery(_headers("pull_request"), b'{"installation": {"id": true}}')
    assert flagged.installation_id is None


@pytest.mark.parametrize(
    ("headers", "body", "message"),
    [
        ({"X-GitHub-Delivery": "d1"}, b"{}", "missing X-GitHub-Event"),
        ({"X-GitHub-Event": "ping"}, b"{}", "missing X-GitHub-Delivery"),
        (_headers("ping", delivery="  "), b"{}", "missing X-GitHub-Delivery"),
        (_headers("Pull Request"), b"{}", "not an event name"),
        (_headers("ping", delivery="../../etc"), b"{}", "not a delivery id"),
        (_headers("ping", delivery="d" * 101), b"{}", "not a delivery id"),
        (_headers("ping"), b"{not json", "not JSON"),
        (_headers("ping"), b"\xff\xfe", "not JSON"),
        (_headers("ping"), b"", "not JSON"),
        (_headers("ping"), b"[1, 2]", "JSON list, not an object"),
        (_headers("ping"), b'"text"', "JSON str, not an object"),
    ],
)
def test_bad_deliveries(headers: dict[str, str], body: bytes, message: str) -> None:
    with pytest.raises(BadDelivery, match=message):
        parse_delivery(headers, body)
