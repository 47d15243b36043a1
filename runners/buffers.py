"""Tensors as raw bytes in a file, and plain tensors rebuilt from them.

A writer appends each tensor's storage span (from element 0 of its view's storage to the last
element it reaches) and returns a :class:`~runners.protocol.TensorRef`; :func:`rebuild` makes a
fresh, plain ``torch.Tensor`` from the bytes with the same dtype, shape, strides and storage
offset. Nothing but bytes crosses: a subclass or a hook on the writer's side cannot survive.

A GPU tensor's bytes travel through one reusable host buffer per thread (page-locked where CUDA
allows), :data:`STAGE_BYTES` at a time, to and from the file: never through a fresh host copy of
the whole tensor. At the sizes the checks reach (8 GiB for the family above 2^31 elements) a
fresh copy costs more in page faults and zeroing than the copy itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import mmap
import os
import threading
from pathlib import Path
from typing import Any, BinaryIO

import torch

from runners.protocol import ProtocolError, TensorRef

ALIGN = 64
STAGE_BYTES = 64 * 2**20  # the host buffer a GPU tensor's bytes pass through, per thread


class HarnessError(RuntimeError):
    """The checks themselves failed (their buffers could not be written: the disk is full, say):
    nothing to do with the code under test, and never reported as its failure."""


def dtype_of(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ProtocolError(f"unknown dtype {name!r}")
    return dtype


def span_elements(shape: tuple[int, ...], strides: tuple[int, ...], storage_offset: int) -> int:
    """Elements of storage a view needs, counted from the storage's start."""
    if any(s == 0 for s in shape):
        return 0
    return storage_offset + 1 + sum((n - 1) * st for n, st in zip(shape, strides, strict=True))


class Writer:
    """Appends tensors to a binary file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fh: BinaryIO = open(self.path, "wb")  # noqa: SIM115 (closed in close())
        self._pos = 0

    def add(self, t: torch.Tensor) -> TensorRef:
        # The view's own geometry; the bytes are its storage span.
        plain = t.detach()
        shape, strides = tuple(int(n) for n in plain.shape), tuple(int(n) for n in plain.stride())
        offset = int(plain.storage_offset())
        n = span_elements(shape, strides, offset)
        pad = (-self._pos) % ALIGN
        if pad:
            self._fh.write(b"\0" * pad)
            self._pos += pad
        start = self._pos
        if n:
            flat = plain.as_strided((n,), (1,), 0)
            nbytes = n * flat.element_size()
            try:
                if flat.device.type == "cpu":
                    # The tensor's own memory: no copy of GiBs.
                    self._fh.write(flat.contiguous().view(torch.uint8).numpy().data)
                else:
                    write_staged(self._fh, flat.view(torch.uint8), stage(flat.device))
            except OSError as exc:
                raise HarnessError(
                    f"the checks could not write their buffers ({nbytes / 2**30:.2f} GiB "
                    f"to {self.path.parent}): {exc.strerror or exc}"
                ) from None
            self._pos += nbytes
        return TensorRef(
            offset=start,
            nbytes=self._pos - start,
            dtype=str(plain.dtype).removeprefix("torch."),
            shape=shape,
            strides=strides,
            storage_offset=offset,
            device=plain.device.type,
        )

    def close(self) -> None:
        try:
            self._fh.close()
        except OSError as exc:
            raise HarnessError(
                f"the checks could not write their buffers to {self.path}: {exc.strerror or exc}"
            ) from None

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def rebuild(data: bytes | bytearray | memoryview, ref: TensorRef, device: str = "cpu") -> torch.Tensor:
    """A fresh plain tensor from ``ref``'s bytes in ``data``; ProtocolError when they do not fit."""
    dtype = dtype_of(ref.dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    need = span_elements(ref.shape, ref.strides, ref.storage_offset)
    if ref.nbytes != need * itemsize or ref.offset < 0 or ref.offset + ref.nbytes > len(data):
        raise ProtocolError(
            f"tensor {list(ref.shape)} {ref.dtype}: {ref.nbytes} bytes at {ref.offset} do not fit "
            f"(needs {need * itemsize}, the buffer has {len(data)})"
        )
    if need == 0:
        return torch.empty_strided(ref.shape, ref.strides or (), dtype=dtype, device=device)
    if torch.device(device).type != "cpu":
        out = torch.empty(ref.nbytes, dtype=torch.uint8, device=device)
        read_staged(data, ref.offset, out, stage(out.device))
        return out.view(dtype).as_strided(ref.shape, ref.strides, ref.storage_offset)
    raw = bytearray(memoryview(data)[ref.offset : ref.offset + ref.nbytes])
    if isinstance(data, mmap.mmap):
        _release(data, ref.offset, ref.nbytes)
    storage = torch.frombuffer(raw, dtype=torch.uint8).view(dtype)
    return storage.as_strided(ref.shape, ref.strides, ref.storage_offset)


_STAGES = threading.local()


def stage(device: torch.device) -> torch.Tensor:
    """This thread's host buffer for copies to and from ``device``: page-locked for CUDA when
    that can be had, a plain one otherwise (still reused: the saving is not allocating GiBs)."""
    held = getattr(_STAGES, "buffer", None)
    if held is None:
        pin = device.type == "cuda"
        try:
            held = torch.empty(STAGE_BYTES, dtype=torch.uint8, pin_memory=pin)
        except RuntimeError:  # no page-locked memory to be had here
            held = torch.empty(STAGE_BYTES, dtype=torch.uint8)
        _STAGES.buffer = held
    return held


def read_staged(
    data: bytes | bytearray | memoryview, offset: int, out: torch.Tensor, buf: torch.Tensor
) -> None:
    """Copy ``out.numel()`` bytes of ``data`` from ``offset`` into the flat uint8 tensor ``out``
    (any device), ``buf.numel()`` bytes at a time through the host buffer ``buf``; a mapped file's
    pages are let go as they are read."""
    view, size, host = memoryview(data), out.numel(), buf.numpy()
    for start in range(0, size, buf.numel()):
        k = min(buf.numel(), size - start)
        host[:k] = view[offset + start : offset + start + k]
        out[start : start + k].copy_(buf[:k])  # from the host buffer, before it is refilled
        if isinstance(data, mmap.mmap):
            _release(data, offset + start, k)


def write_staged(fh: BinaryIO, flat: torch.Tensor, buf: torch.Tensor) -> None:
    """Write the flat uint8 tensor ``flat`` (any device) to ``fh``, ``buf.numel()`` bytes at a
    time through the host buffer ``buf``."""
    size, host = flat.numel(), buf.numpy()
    for start in range(0, size, buf.numel()):
        k = min(buf.numel(), size - start)
        buf[:k].copy_(flat[start : start + k])
        fh.write(host[:k].data)


def _release(mapped: mmap.mmap, offset: int, nbytes: int) -> None:
    """Drop the mapped pages just read from this process: a runner that reads every call's
    inputs out of one file would otherwise keep all of it resident (and count it against its
    memory limit) long after each call's tensors moved to the device. The bytes stay in the file."""
    start = offset - offset % mmap.PAGESIZE
    with contextlib.suppress(OSError, ValueError, AttributeError):  # platforms without madvise
        mapped.madvise(mmap.MADV_DONTNEED, start, offset + nbytes - start)


def map_file(path: str | Path | None) -> Any:
    """A file's bytes, mapped read-only (b"" when there is none or it is empty): the judge reads
    each tensor's bytes out of it as it needs them, never the whole file at once."""
    if path is None:
        return b""
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size == 0:
                return b""
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError:
        return b""


def numel(ref: TensorRef) -> int:
    return math.prod(ref.shape)


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()
