"""An Inductor-style answer (what KernelLLM imitates) goes through normalize, then verification."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_inductor_style_candidate_is_normalized_then_judged(cli, tmp_path):
    cands = tmp_path / "cands"
    cands.mkdir()
    # Imports torch._inductor's grid (gone from recent torch) and hard-codes xnumel = 16.
    shutil.copy(ROOT / "tests/normalize_corpus/add_relu_poi.py", cands / "inductor_style.py")
    shutil.copy(ROOT / "tests/normalize_corpus/output_code_async_reject.py", cands / "output_code.py")
    report = tmp_path / "r.json"
    rc, _out, err = cli(
        ["run", "tests/problems/add_relu.py", "--candidates", str(cands), "--json", str(report)]
    )
    assert rc == 0, err
    [module] = json.loads(report.read_text())["modules"]
    by_id = {c["id"]: c for c in module["candidates"]}
    poi = by_id["inductor_style.py"]
    rewrites = poi["provenance"]["rewrites"]
    assert any("grid" in r for r in rewrites), rewrites
    # Standalone now, so it runs: and the size baked into it is caught, not imported away.
    assert poi["status"] == "incorrect", poi["reason"]
    assert poi["reason"].startswith("seed 0, shape [[16, 100], [16, 100]]")
    rejected = by_id["output_code.py"]
    assert rejected["status"] == "rejected"
    assert rejected["reason"].startswith("not standalone: line ") and "async_compile" in rejected["reason"]
