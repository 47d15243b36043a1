"""runners.buffers: tensors to bytes in a file and back, and the staged path GPU tensors take.

A GPU tensor's bytes pass through one reusable host buffer a chunk at a time (never a fresh host
copy of the whole tensor). The chunk loops take any device, so the CPU tests drive them with a
buffer of a few bytes (ragged last chunks, a mapped file) and the GPU test checks the same round
trip on CUDA.
"""

from __future__ import annotations

import dataclasses
import io

import pytest
import torch

from runners import buffers
from runners.protocol import ProtocolError


def _views() -> dict[str, torch.Tensor]:
    base = torch.arange(97 * 13, dtype=torch.float32).reshape(97, 13) / 7
    return {
        "plain": base,
        "transposed": base.t(),
        "offset slice": base[5:40, 2:9],
        "bfloat16": base.to(torch.bfloat16)[::3],
        "int64": torch.arange(1000, dtype=torch.int64) * 7919,
        "empty": base[:0],
    }


@pytest.mark.parametrize("name", sorted(_views()))
def test_a_view_comes_back_with_its_geometry_from_a_mapped_file(tmp_path, name):
    t = _views()[name]
    with buffers.Writer(tmp_path / "b.bin") as writer:
        writer.add(torch.zeros(3))  # something before it: offsets and alignment
        ref = writer.add(t)
    data = buffers.map_file(tmp_path / "b.bin")
    try:
        got = buffers.rebuild(data, ref)
        assert got.dtype == t.dtype and got.shape == t.shape and got.stride() == t.stride()
        assert torch.equal(got, t)
    finally:
        if not isinstance(data, bytes):
            data.close()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_forged_reference_outside_the_buffer_is_refused(tmp_path, device):
    """A reply is the runner's word: a tensor placed before the buffer's start (a negative offset,
    which Python's slicing would read from the end) or past its end is refused, on either path."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    with buffers.Writer(tmp_path / "b.bin") as writer:
        writer.add(torch.arange(16, dtype=torch.float32))
        ref = writer.add(torch.ones(4))
    data = (tmp_path / "b.bin").read_bytes()
    assert torch.equal(buffers.rebuild(data, ref, device).cpu(), torch.ones(4))
    for offset in (-16, -ref.nbytes, len(data) - ref.nbytes + 4):
        forged = dataclasses.replace(ref, offset=offset)
        with pytest.raises(ProtocolError, match="do not fit"):
            buffers.rebuild(data, forged, device)


@pytest.mark.parametrize("chunk", [1, 7, 64, 4096])
def test_the_staged_copy_in_gives_every_byte_whatever_the_chunk(tmp_path, chunk):
    payload = torch.randint(0, 256, (10_001,), dtype=torch.uint8)
    path = tmp_path / "raw.bin"
    path.write_bytes(b"\x55" * 11 + payload.numpy().tobytes())
    data = buffers.map_file(path)
    try:
        out = torch.empty(10_001, dtype=torch.uint8)
        buffers.read_staged(data, 11, out, torch.empty(chunk, dtype=torch.uint8))
        assert torch.equal(out, payload)
        # The mapped pages were let go as they were read; the bytes are still there to read again.
        again = torch.empty(10_001, dtype=torch.uint8)
        buffers.read_staged(data, 11, again, torch.empty(chunk, dtype=torch.uint8))
        assert torch.equal(again, payload)
    finally:
        data.close()
    # From bytes in memory, too (a reply's blob).
    out = torch.empty(100, dtype=torch.uint8)
    buffers.read_staged(payload.numpy().tobytes(), 3, out, torch.empty(chunk, dtype=torch.uint8))
    assert torch.equal(out, payload[3:103])


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_the_staged_write_gives_every_byte_whatever_the_chunk(chunk):
    payload = torch.randint(0, 256, (5_003,), dtype=torch.uint8)
    fh = io.BytesIO()
    buffers.write_staged(fh, payload, torch.empty(chunk, dtype=torch.uint8))
    assert fh.getvalue() == payload.numpy().tobytes()


def test_the_stage_is_reused_by_its_thread():
    first = buffers.stage(torch.device("cpu"))
    assert first.numel() == buffers.STAGE_BYTES and first.dtype == torch.uint8
    assert buffers.stage(torch.device("cpu")) is first


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", sorted(_views()))
def test_a_cuda_view_goes_through_the_stage_and_comes_back(tmp_path, monkeypatch, name):
    monkeypatch.setattr(buffers, "STAGE_BYTES", 4096)  # several chunks, a ragged last one
    monkeypatch.setattr(buffers, "_STAGES", type(buffers._STAGES)())
    t = _views()[name].cuda()
    with buffers.Writer(tmp_path / "b.bin") as writer:
        ref = writer.add(t)
    assert ref.device == "cuda"
    data = buffers.map_file(tmp_path / "b.bin")
    try:
        back = buffers.rebuild(data, ref, "cuda")
        assert back.is_cuda and back.stride() == t.stride() and torch.equal(back, t)
        assert torch.equal(buffers.rebuild(data, ref, "cpu"), t.cpu())
    finally:
        if not isinstance(data, bytes):
            data.close()
    assert buffers.stage(t.device).is_pinned()
