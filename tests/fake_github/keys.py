"""GitHub App keys and JWTs: a test key pair, and the checks GitHub makes on an app's JWT."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

# GitHub refuses a JWT whose exp is more than 10 minutes ahead (PyGithub's own maximum is 600 s).
MAX_JWT_LIFETIME_S = 600
CLOCK_SKEW_S = 60  # GitHub tolerates a little drift (that is why iat is usually backdated 60 s)


def make_app_key(bits: int = 2048) -> tuple[str, str]:
    """A fresh RSA key pair for a test GitHub App: (private PEM (PKCS#1, as GitHub hands out), public PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode("ascii")
    public_pem = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode("ascii")
    )
    return private_pem, public_pem


@functools.cache
def shared_app_key() -> tuple[str, str]:
    """One key pair per process, for tests that do not care which key they get (keygen is slow-ish)."""
    return make_app_key()


class JWTRejected(Exception):
    """GitHub's 401 for a bad app JWT; ``str()`` is GitHub's message."""


@dataclass(frozen=True)
class AppJWT:
    issuer: str
    issued_at: int
    expires_at: int


def verify_app_jwt(
    token: str, public_pem: str, app_id: int, client_id: str | None, now: float | None = None
) -> AppJWT:
    """Check an app JWT as GitHub does: RS256 signed by the app's key, iss = app id (or client id),
    iat not in the future, exp in the future but at most 10 minutes ahead."""
    now = time.time() if now is None else now
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise JWTRejected("A JSON web token could not be decoded") from exc
    if header.get("alg") != "RS256":
        raise JWTRejected("A JSON web token could not be decoded")
    try:
        claims = jwt.decode(
            token,
            public_pem,
            algorithms=["RS256"],
            options={"verify_exp": False, "verify_iat": False, "verify_nbf": False, "verify_aud": False},
        )
    except jwt.InvalidSignatureError as exc:
        raise JWTRejected("A JSON web token could not be decoded") from exc
    except jwt.PyJWTError as exc:
        raise JWTRejected("A JSON web token could not be decoded") from exc
    iss, iat, exp = claims.get("iss"), claims.get("iat"), claims.get("exp")
    if not isinstance(exp, int) or exp <= now:
        raise JWTRejected(
            "'Expiration time' claim ('exp') must be a numeric value representing the future time at which "
            "the assertion expires"
        )
    if not isinstance(iat, int) or iat > now + CLOCK_SKEW_S:
        raise JWTRejected(
            "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued"
        )
    if exp > now + MAX_JWT_LIFETIME_S or exp - iat > MAX_JWT_LIFETIME_S + CLOCK_SKEW_S:
        raise JWTRejected("'Expiration time' claim ('exp') is too far in the future")
    if str(iss) not in {str(app_id), str(client_id)}:
        raise JWTRejected("Integration not found")  # GitHub: the issuer names no app (or another app)
    return AppJWT(issuer=str(iss), issued_at=iat, expires_at=exp)
