"""The template's row kernels over short rows: rows of 1024 elements or fewer go to a twin that takes
ROWS rows a program, a [ROWS, BLOCK_SIZE] tile whose reductions are [ROWS, 1] columns, the last
program's rows past the end masked. Generated as the engine does and run in a fresh Python under
Triton's interpreter against PyTorch in float64 at several ROWS (``test_template_reductions``' and
``test_template_long_rows``' helpers); the configs its autotuning times; and compiled for an
H100/H200 (``tests/cuda_compile.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from runners.generators.template import emit
from tests.cuda_compile import compile_for_cuda
from tests.runners.test_template_group_norm import GROUP_NORM
from tests.runners.test_template_indices import CROSS_ENTROPY
from tests.runners.test_template_long_rows import (
    CENTERED_MAX,
    GEGLU_NORM,
    MSE,
    POSITION_BIAS,
    RESIDUAL_LAYER_NORM,
    SOFTMAX,
    _module,
    _outputs_match,
)
from tests.runners.test_template_masks import ALIBI
from tests.runners.test_template_reductions import LOGSUMEXP, _generate, fresh_python

# (module, get_inputs, get_init_inputs, init args, the inputs' shapes at two row counts and lengths)
CASES = {
    "residual_layer_norm": (
        RESIDUAL_LAYER_NORM,
        "[torch.randn(2, 16), torch.randn(2, 16)]",
        "[16]",
        (100,),
        [[(13, 100), (13, 100)], [(2, 5, 100), (2, 5, 100)]],
    ),
    "softmax": (SOFTMAX, "[torch.randn(2, 16)]", "[]", (), [[(13, 100)], [(1, 1000)], [(9, 1)]]),
    "logsumexp": (LOGSUMEXP, "[torch.randn(2, 16)]", "[]", (), [[(13, 100)], [(70, 3)]]),
    "group_norm": (GROUP_NORM, "[torch.randn(2, 8, 4, 4)]", "[4, 8]", (4, 8), [[(3, 8, 5, 7)], [(5, 8, 2)]]),
    "mse_loss": (MSE, "[torch.randn(2, 16), torch.randn(2, 16)]", "[]", (), [[(13, 100), (13, 100)]]),
    "max_and_min": (CENTERED_MAX, "[torch.randn(2, 16)]", "[]", (), [[(13, 100)]]),
    "position_bias": (POSITION_BIAS, "[torch.randn(2, 16)]", "[]", (), [[(13, 100)]]),
    "gated_halves": (GEGLU_NORM, "[torch.randn(2, 16)]", "[]", (), [[(13, 200)], [(3, 2)]]),
    "alibi": (ALIBI, "[torch.randn(2, 2, 8, 8)]", "[2]", (2,), [[(3, 2, 7, 7)], [(1, 2, 9, 9)]]),
}


@pytest.mark.parametrize("case", sorted(CASES))
@fresh_python
def test_short_rows_match_torch_at_every_tile(tmp_path, case):
    body, inputs, init_expr, init, shape_sets = CASES[case]
    source, name, _ = _generate(tmp_path, body, inputs, init_expr)
    assert f"def {name}_rows(" in source
    for rows in (1, 2, 4, 8, 64):
        ref, new, launched = _module(source, init, rows)
        for shapes in shape_sets:
            torch.manual_seed(rows)
            xs = [torch.randn(shape) * 3 + 0.5 for shape in shapes]
            _outputs_match(ref, new, *xs)
        assert launched and set(launched) == {f"{name}_rows"}, launched


@fresh_python
def test_short_rows_coordinates_in_64_bits_match_torch(tmp_path):
    """Past 2^31 elements the twin divides its rows' coordinates in 64 bits (ROWS_NARROW off):
    ALiBi's distances (which read a row's head) the same as with the 32-bit division the launch
    picks below that."""
    body, inputs, init_expr, init, shape_sets = CASES["alibi"]
    source, name, _ = _generate(tmp_path, body, inputs, init_expr)
    for rows in (1, 4):
        ref, new, launched = _module(source, init, rows, wide=True)
        for shapes in shape_sets:
            torch.manual_seed(rows)
            _outputs_match(ref, new, *(torch.randn(shape) * 3 + 0.5 for shape in shapes))
        assert launched and set(launched) == {f"{name}_rows"}, launched


@fresh_python
def test_short_rows_pick_class_indices_per_row(tmp_path):
    """cross_entropy's class index is one value per row: the twin reads a [ROWS, 1] column of them,
    masked past the last row."""
    body = CROSS_ENTROPY.format(expr="F.cross_entropy(logits, targets, reduction='none')")
    source, name, _ = _generate(tmp_path, body, "[torch.randn(16, 100), torch.randint(0, 100, (16,))]")
    for rows in (1, 4, 64):
        ref, new, launched = _module(source, (), rows)
        logits, targets = torch.randn(13, 100) * 4, torch.randint(0, 100, (13,))
        want = ref.double()(logits.double(), targets)
        got = new(logits, targets)
        assert (got.double() - want).abs().max().item() <= 1e-5 * max(1.0, want.abs().max().item())
        assert set(launched) == {f"{name}_rows"}


def test_short_rows_are_tuned_over_tiles_that_give_each_thread_8_to_16_elements(tmp_path):
    source, name, _ = _generate(tmp_path, SOFTMAX, "[torch.randn(2, 16)]")
    path = tmp_path / "generated.py"
    path.write_text(source, encoding="utf-8")  # Triton reads a kernel's source from its file
    namespace: dict[str, Any] = {}
    exec(compile(source, str(path), "exec"), namespace)
    autotuned, prune = namespace[f"{name}_rows_autotuned"], namespace[f"{name}_rows_tiles"]
    assert autotuned.early_config_prune is prune
    assert autotuned.keys == ["n_cols", "ROWS_BUCKET"]

    def tiles(block_size: int) -> list[tuple[int, int]]:
        return [(c.kwargs["ROWS"], c.num_warps) for c in prune(autotuned.configs, {}, BLOCK_SIZE=block_size)]

    assert tiles(128) == [(8, 2), (8, 4), (16, 4), (16, 8), (32, 8), (32, 16), (64, 16)]
    assert tiles(1024) == [(1, 2), (1, 4), (2, 4), (2, 8), (4, 8), (4, 16), (8, 16)]
    assert tiles(16) == [(64, 2), (64, 4)]  # 64 rows of 16: the most rows there are
    assert tiles(1) == [(64, 1)]  # none gives a thread 8: the most rows, the fewest warps
    # Through Triton's own autotuner, as a launch prunes: the kwargs it is called with.
    autotuned.nargs = {}
    pruned = autotuned.prune_configs({"BLOCK_SIZE": 512, "n_rows": 100, "ROWS_BUCKET": 128})
    assert [(c.kwargs["ROWS"], c.num_warps) for c in pruned] == tiles(512)
    assert emit.SHORT_ROWS == 1024 and "if block_size <= 1024:" in source


@pytest.mark.parametrize(
    ("case", "constexprs", "num_warps"),
    [
        ("group_norm", {"BLOCK_SIZE": 128, "ROWS": 64}, 16),
        ("logsumexp", {"BLOCK_SIZE": 1024, "ROWS": 8}, 16),
        ("gated_halves", {"BLOCK_SIZE": 256, "ROWS": 16}, 8),
        ("position_bias", {"BLOCK_SIZE": 512, "ROWS": 2}, 4),
    ],
)
def test_the_short_rows_kernel_compiles_for_the_gpu(tmp_path, case, constexprs, num_warps):
    body, inputs, init_expr, _, _ = CASES[case]
    source, name, _ = _generate(tmp_path, body, inputs, init_expr)
    path = tmp_path / "generated.py"
    path.write_text(source, encoding="utf-8")
    compiled = compile_for_cuda(path, f"{name}_rows", constexprs, num_warps=num_warps, floats=("norm_eps",))
    assert compiled["ok"], compiled


def test_a_row_kernels_coordinates_are_divided_out_once_a_row(tmp_path):
    """ALiBi's distances read each element's coordinates: in a row kernel the last is the column and
    the others the row's, so the 64-bit divisions run once a row (a [ROWS, 1] column in the twin),
    not once an element, in the forward kernel, its twins and the backward."""
    source, name, backward = _generate(tmp_path, ALIBI, "[torch.randn(2, 2, 8, 8)]", "[2]")
    generated = source.split('\n\n\n"""', 1)[1]
    assert backward is not None
    assert "rest = offsets" not in generated
    kernels = [name, f"{name}_rows", f"{name}_looped", backward]
    for kernel in kernels:
        body = generated[generated.index(f"def {kernel}(") :]
        body = body[: body.index("\n\n\n")]
        rest = "(row.to(tl.int32) if ROWS_NARROW else row)" if kernel.endswith("_rows") else "row"
        assert "coord_3 = cols" in body and f"rest = {rest}\n" in body, kernel
    # Compiled for an H100/H200, where 64-bit division is a subroutine call: 48 calls a thread before
    # (three divisions and three modulos for each of its 8 elements); now at most those of its rows
    # (each thread holds the [ROWS, 1] coordinates of the twin's rows: 32 elements, 4 rows a thread),
    # and none in the twin where every offset fits 32 bits (ROWS_NARROW, what the launch sets then).
    path = tmp_path / "generated.py"
    path.write_text(source, encoding="utf-8")
    twin = f"{name}_rows"
    for kernel, rows, narrow, calls in ((name, 1, None, 6), (twin, 4, False, 24), (twin, 4, True, 0)):
        constexprs = {"BLOCK_SIZE": 1024, **({"ROWS": rows, "ROWS_NARROW": narrow} if rows > 1 else {})}
        compiled = compile_for_cuda(path, kernel, constexprs, num_warps=4)
        assert compiled["ok"] and compiled["calls"] <= calls, (kernel, narrow, compiled)
    assert compiled["calls"] == 0
