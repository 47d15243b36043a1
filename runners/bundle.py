"""Source bundles: the repository files a GPU worker needs, carried inside the task message.

A GPU worker never clones, never holds a token and never reaches GitHub: it gets
the Python sources as a size-capped, base64-encoded tar.gz and unpacks them
into a fresh temp dir, refusing paths that would escape it.
"""

from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path, PurePosixPath

MAX_BUNDLE_BYTES = 8 * 2**20  # compressed; task messages stay well under broker limits


class BundleError(ValueError):
    """The bundle is too large or malformed."""


def _safe(name: str) -> str:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not name or name.startswith("/"):
        raise BundleError(f"unsafe path in bundle: {name!r}")
    return path.as_posix()


def pack(files: dict[str, str], limit: int = MAX_BUNDLE_BYTES) -> str:
    """``{relative path: text}`` → base64 tar.gz; raises BundleError past ``limit`` bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in sorted(files):
            data = files[name].encode("utf-8")
            info = tarfile.TarInfo(_safe(name))
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    if len(raw) > limit:
        raise BundleError(f"the source bundle is {len(raw)} bytes, over the {limit}-byte limit")
    return base64.b64encode(raw).decode("ascii")


def unpack(bundle: str, dest: Path, limit: int = MAX_BUNDLE_BYTES) -> list[str]:
    """Write the bundle's files under ``dest``; returns their relative paths."""
    try:
        raw = base64.b64decode(bundle.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise BundleError(f"the bundle is not base64: {exc}") from None
    if len(raw) > limit:
        raise BundleError(f"the source bundle is {len(raw)} bytes, over the {limit}-byte limit")
    names = []
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
            for member in tar.getmembers():
                if not member.isfile():
                    raise BundleError(f"bundle member {member.name!r} is not a regular file")
                name = _safe(member.name)
                target = dest / name
                target.parent.mkdir(parents=True, exist_ok=True)
                extracted = tar.extractfile(member)
                assert extracted is not None
                target.write_bytes(extracted.read())
                names.append(name)
    except tarfile.TarError as exc:
        raise BundleError(f"the bundle is not a tar.gz: {exc}") from None
    return names
