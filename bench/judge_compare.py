"""The judge's comparison of one output against the original's, in float64, on the host.

``runners.verify.compare`` streams the output in chunks, twice (statistics, then bounds). Where
both the output and the reference are finite everywhere in a chunk, it compares the chunk whole;
where either has a NaN or an infinity, it masks the special elements out first (copies of every
finite element). This times both on one output of ``--millions`` float32 elements, the second with
one NaN in each chunk where the reference has one too:

    python bench/judge_compare.py --millions 16 --repeat 3
"""

from __future__ import annotations

import argparse
import time

import torch

from runners import verify


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--millions", type=float, default=16.0, help="elements in the output (default 16M)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n = int(args.millions * 1e6)
    gen = torch.Generator().manual_seed(0)
    ref64 = torch.randn(n, dtype=torch.float64, generator=gen)
    native = ref64.float()
    got = (ref64 + 1e-7 * torch.randn(n, dtype=torch.float64, generator=gen)).float()
    special = [ref64.clone(), native.clone(), got.clone()]
    for t in special:
        t[:: verify.COMPARE_CHUNK] = float("nan")
    finite, masked = [], []
    for _ in range(args.repeat):
        start = time.perf_counter()
        verify.compare(got, ref64, native, "finite", False, "cpu")
        finite.append(time.perf_counter() - start)
        start = time.perf_counter()
        verify.compare(special[2], special[0], special[1], "masked", False, "cpu")
        masked.append(time.perf_counter() - start)
    print(f"{n} float32 elements, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print("finite everywhere (s):", " ".join(f"{t:.2f}" for t in finite))
    print("a NaN in each chunk, masked (s):", " ".join(f"{t:.2f}" for t in masked))


if __name__ == "__main__":
    main()
