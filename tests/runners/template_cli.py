"""The command line as a user runs it on one file's module with the template generator, on the CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runners.judge import COMPILE_KERNELS, TRAINING_ORIGINAL


def verify_one_kernel(cli: Any, tmp_path: Path, text: str, class_name: str, kernel: str) -> dict[str, Any]:
    """Run ``kernelize run file::class_name --generator template --device cpu`` on ``text`` under the
    interpreter and check its one candidate: correct, the best, ``kernel``'s one launch with no
    PyTorch op kept, its launches kept under torch.compile, the original under autograd (no
    backward). The report's module."""
    path = tmp_path / "module.py"
    path.write_text(text, encoding="utf-8")
    report_path = tmp_path / "report.json"
    options = ["--generator", "template", "--device", "cpu", "--json", str(report_path), "--quiet"]
    rc, _, stderr = cli(
        ["run", f"{path}::{class_name}", *options, "--timeout", "600"], env={"TRITON_INTERPRET": "1"}
    )
    assert rc == 0, stderr
    (module,) = json.loads(report_path.read_text(encoding="utf-8"))["modules"]
    (cand,) = module["candidates"]
    assert cand["status"] == "correct", cand["reason"]
    assert cand["provenance"]["kernel"] == kernel
    assert cand["triton_launches"] == 1 and cand["torch_ops_kept"] == []
    assert cand["compiled"] == COMPILE_KERNELS, cand["compiled"]
    assert cand["training"] == TRAINING_ORIGINAL  # no backward: autograd runs the original
    assert module["best"] == cand["id"]
    result: dict[str, Any] = module
    return result
