"""The host side of a large tensor's trip from a buffer file: a fresh copy against the staged path.

The judge and the runners read each tensor out of a mapped buffer file. The old path copied the
whole span into a fresh ``bytearray`` (every page of it faulted in and zeroed) before the copy to
the device. The staged path (``runners.buffers.read_staged``) passes it through one reused host
buffer, a chunk at a time. This times both on the host alone, on a file just written (so in the
page cache), each several times, alternating:

    python bench/staged_copy.py --gib 2 --repeat 3

The staged path copies into a destination touched beforehand, as device memory would be.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from runners import buffers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="size of the tensor (default 2 GiB)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    nbytes = int(args.gib * 2**30)
    with tempfile.TemporaryDirectory(prefix="staged-copy-") as folder:
        path = Path(folder) / "buffer.bin"
        with buffers.Writer(path) as writer:
            ref = writer.add(torch.randint(0, 256, (nbytes,), dtype=torch.uint8))
        data = buffers.map_file(path)
        out = torch.ones(nbytes, dtype=torch.uint8)  # touched: stands for device memory
        stage = torch.empty(buffers.STAGE_BYTES, dtype=torch.uint8)
        fresh, staged = [], []
        try:
            for _ in range(args.repeat):
                start = time.perf_counter()
                raw = bytearray(memoryview(data)[ref.offset : ref.offset + ref.nbytes])
                fresh.append(time.perf_counter() - start)
                del raw
                start = time.perf_counter()
                buffers.read_staged(data, ref.offset, out, stage)
                staged.append(time.perf_counter() - start)
        finally:
            data.close()
        assert os.path.getsize(path) >= nbytes
    print(f"{args.gib:g} GiB, {os.cpu_count()} CPUs, torch {torch.__version__}")
    print("fresh bytearray (s):", " ".join(f"{t:.2f}" for t in fresh))
    print(f"staged through {buffers.STAGE_BYTES >> 20} MiB (s):", " ".join(f"{t:.2f}" for t in staged))


if __name__ == "__main__":
    main()
