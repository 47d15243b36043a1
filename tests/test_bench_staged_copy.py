"""bench/staged_copy.py runs end to end at a small size and prints both timings."""

from __future__ import annotations

from tests.bench_scripts import run


def test_the_script_times_both_paths():
    out = run("bench/staged_copy.py", "--gib", "0.01", "--repeat", "2")
    assert out[0].startswith("0.01 GiB")
    assert out[1].startswith("fresh bytearray (s):") and len(out[1].split(":")[1].split()) == 2
    assert out[2].startswith("staged through 64 MiB (s):") and len(out[2].split(":")[1].split()) == 2
