"""bench/judge_compare.py runs end to end at a small size and prints both timings."""

from __future__ import annotations

from tests.bench_scripts import run


def test_the_script_times_both_paths():
    out = run("bench/judge_compare.py", "--millions", "0.1", "--repeat", "2")
    assert out[0].startswith("100000 float32 elements")
    assert out[1].startswith("finite everywhere (s):") and len(out[1].split(":")[1].split()) == 2
    assert out[2].startswith("a NaN in each chunk, masked (s):") and len(out[2].split(":")[1].split()) == 2
