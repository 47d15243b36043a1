"""GitHub webhook deliveries: the signature check and the parse. Pure functions, no I/O."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SIGNATURE_HEADER = "X-Hub-Signature-256"
_SIGNATURE = re.compile(r"sha256=([0-9a-fA-F]{64})")
# Delivery ids are GUIDs and event names snake_case; anything else is not from GitHub.
_DELIVERY_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]{0,99}")
_EVENT = re.compile(r"[a-z][a-z0-9_]{0,63}")


class BadDelivery(ValueError):
    """A signed request that is not a usable delivery (missing headers, body not a JSON object)."""


@dataclass(frozen=True)
class WebhookDelivery:
    event: str
    delivery_id: str
    action: str | None
    installation_id: int | None
    repository: str | None
    payload: dict[str, Any] = field(repr=False)


def sign(secret: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """True only when ``header`` is ``sha256=<hex HMAC-SHA256 of the raw body>`` under ``secret``."""
    if not secret or header is None:
        return False
    match = _SIGNATURE.fullmatch(header.strip())
    if match is None:
        return False
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, match.group(1).lower())


def parse_delivery(headers: Mapping[str, str], body: bytes) -> WebhookDelivery:
    lower = {key.lower(): value for key, value in headers.items()}
    event = lower.get("x-github-event", "").strip()
    delivery_id = lower.get("x-github-delivery", "").strip()
    if not event:
        raise BadDelivery("missing X-GitHub-Event header")
    if not delivery_id:
        raise BadDelivery("missing X-GitHub-Delivery header")
    if not _EVENT.fullmatch(event):
        raise BadDelivery("X-GitHub-Event is not an event name")
    if not _DELIVERY_ID.fullmatch(delivery_id):
        raise BadDelivery("X-GitHub-Delivery is not a delivery id")
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadDelivery(f"body is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise BadDelivery(f"body is a JSON {type(payload).__name__}, not an object")
    action = payload.get("action")
    installation = payload.get("installation")
    repository = payload.get("repository")
    installation_id = installation.get("id") if isinstance(installation, dict) else None
    full_name = repository.get("full_name") if isinstance(repository, dict) else None
    return WebhookDelivery(
        event=event,
        delivery_id=delivery_id,
        action=action if isinstance(action, str) else None,
        installation_id=installation_id if type(installation_id) is int else None,
        repository=full_name if isinstance(full_name, str) else None,
        payload=payload,
    )
