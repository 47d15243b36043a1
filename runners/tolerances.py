"""The built-in tolerance table, importable without torch (the repository config may only tighten it).

(atol, rtol, relative L2 error) by output dtype, against a float64 reference.
The L2 bound catches near-zero outputs that a loose atol would let through
(a softmax over 32k columns is ~3e-5 everywhere: all-zeros passes atol=1e-4).
"""

from __future__ import annotations

TOLERANCES: dict[str, tuple[float, float, float]] = {
    "float64": (1e-7, 1e-7, 1e-7),
    "float32": (1e-4, 1e-4, 1e-4),
    # tl.dot on float32 uses TF32 on NVIDIA GPUs unless asked for "ieee".
    "float32 (tf32)": (1e-2, 1e-2, 5e-3),
    "float16": (1e-2, 1e-2, 5e-3),
    "bfloat16": (5e-2, 2e-2, 2e-2),
}
