"""Compiling a Triton kernel for an NVIDIA GPU on a machine without one.

``triton.compile`` with a CUDA target runs Triton's whole front end and ptxas (shipped in Triton's
wheel) with no driver, so what Triton refuses to compile for a GPU (a builtin given a dtype it does
not take) fails here as it would on the GPU, where the interpreter would have run it. The compile
runs in a fresh Python without ``TRITON_INTERPRET``, under which ``triton.jit`` gives no kernel to
compile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import importlib.util, json, os, subprocess, sys, tempfile, time
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

path, kernel, signature, constexprs, num_warps, num_stages, arch, floats = json.loads(sys.argv[1])
spec = importlib.util.spec_from_file_location("kernelize_compiled_here", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
fn = getattr(module, kernel)
if signature is None:  # from the kernel's own parameters
    signature = {
        p.name: "constexpr" if p.is_constexpr
        else "*fp32" if "ptr" in p.name
        else "fp32" if p.name in floats
        else "i32"
        for p in fn.params
    }
start = time.perf_counter()
try:
    compiled = triton.compile(
        ASTSource(fn=fn, signature=signature, constexprs=constexprs),
        target=GPUTarget("cuda", arch, 32),
        options={"num_warps": num_warps, **({"num_stages": num_stages} if num_stages else {})},
    )
except Exception as exc:
    print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
else:
    seconds = time.perf_counter() - start
    # The machine code, read back with the cuobjdump in Triton's wheel: its instructions, and its calls
    # (64-bit integer division and modulo by a number known only at run time are subroutine calls).
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        sass = subprocess.run([tool, "-sass", cubin.name], capture_output=True, text=True, check=True).stdout
    code = [line for line in sass.splitlines() if line.strip().startswith("/*") and ";" in line]
    print(json.dumps({
        "ok": True,
        "seconds": seconds,
        "cubin_bytes": len(compiled.asm["cubin"]),
        "instructions": len(code),
        "calls": sum(1 for line in code if " CALL." in line),
        # Registers spilled: stores to a thread's local memory (the SASS's STL).
        "spills": sum(1 for line in code if " STL" in line),
        "shared_bytes": compiled.metadata.shared,
    }))
"""


def compile_for_cuda(
    path: Path,
    kernel: str,
    constexprs: dict[str, Any] | None = None,
    num_warps: int = 4,
    floats: tuple[str, ...] = (),
    signature: dict[str, str] | None = None,
    arch: int = 90,
    num_stages: int | None = None,
) -> dict[str, Any]:
    """Compile ``kernel`` of the file ``path`` for CUDA compute capability ``arch`` (90: H100, H200):
    ``{"ok": True, "seconds", "cubin_bytes", "instructions", "calls", "spills", "shared_bytes"}`` (the
    machine code's instructions; its subroutine calls: 64-bit division by a number known at run time
    is one; its stores of spilled registers to local memory; the shared memory a program takes) or
    ``{"ok": False, "error"}``. ``constexprs``: a value
    for each ``tl.constexpr`` parameter. ``signature`` gives each argument's Triton type (``*fp32``,
    ``i32``, ``fp32``, ``constexpr``); without it, from the kernel's parameters: its constexprs,
    names with ``ptr`` (``x_ptr``, ``in_ptr0``) float32 pointers, the names in ``floats`` float32
    numbers, the rest 32-bit integers."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton's default; set, so it does not warn
    settings = [signature, constexprs or {}, num_warps, num_stages, arch, list(floats)]
    args = json.dumps([str(path), kernel, *settings])
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compile_each_config(
    source: str, path: Path, kernel: str, constexprs: dict[str, Any], floats: tuple[str, ...] = ()
) -> list[tuple[Any, dict[str, Any]]]:
    """Each config ``{kernel}_autotuned`` of the generated ``source`` tunes over, compiled for sm_90
    (:func:`compile_for_cuda`) with ``constexprs`` besides its own: (config, result) in order. The
    source is written to ``path`` and run here to read the configs (no launch)."""
    path.write_text(source, encoding="utf-8")
    namespace: dict[str, Any] = {}
    exec(compile(source, str(path), "exec"), namespace)
    return [
        (
            config,
            compile_for_cuda(
                path,
                kernel,
                {**config.kwargs, **constexprs},
                num_warps=config.num_warps,
                num_stages=config.num_stages,
                floats=floats,
            ),
        )
        for config in namespace[f"{kernel}_autotuned"].configs
    ]
