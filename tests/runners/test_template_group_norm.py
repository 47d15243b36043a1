"""The template's group norm: each (sample, group) of an ``[N, C, *]`` input is one row, normalized by
its own statistics, then the per-channel affine weights; and what it declines, by name.

Generated as the engine does and run in a fresh Python under Triton's interpreter against PyTorch in
float64, outputs and gradients (``test_template_reductions``' helpers).
"""

from __future__ import annotations

import pytest
import torch

from runners.generators.template import Unsupported
from tests.cuda_compile import compile_for_cuda
from tests.runners.test_template_reductions import _compare, _generate, _modules, fresh_python

GROUP_NORM = """
class M(nn.Module):
    def __init__(self, groups, channels, affine=True):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, eps=1e-6, affine=affine)
        if affine:
            with torch.no_grad():
                self.norm.weight.add_(0.1 * torch.randn(channels))
                self.norm.bias.add_(0.1 * torch.randn(channels))

    def forward(self, x):
        return self.norm(x)
"""


@fresh_python
def test_group_norm_matches_torch_with_its_gradients(tmp_path):
    source, name, backward = _generate(tmp_path, GROUP_NORM, "[torch.randn(2, 8, 4, 4)]", "[4, 8]")
    assert (name, backward) == ("_group_norm_fwd_kernel", "_group_norm_bwd_kernel")
    assert "self.norm.num_groups" in source and "self.norm.eps" in source  # read at call time
    ref, new = _modules(source, (4, 8))
    for shape in [(2, 8, 4, 4), (3, 8, 5, 7), (1, 8, 33, 40), (5, 8), (2, 8, 3)]:
        _compare(ref, new, torch.randn(shape) * 3 + 1)
    ref.norm.num_groups = new.norm.num_groups = 2
    ref.norm.eps = new.norm.eps = 0.5
    _compare(ref, new, torch.randn(2, 8, 3, 5))
    new.norm.num_groups = 3
    with pytest.raises(NotImplementedError, match="channels divisible by the number of groups"):
        new(torch.randn(2, 8, 4))


@fresh_python
def test_group_norm_spellings_match_torch(tmp_path):
    source, _, _ = _generate(tmp_path, GROUP_NORM, "[torch.randn(2, 6, 5)]", "[3, 6, False]")
    ref, new = _modules(source, (3, 6, False))
    _compare(ref, new, torch.randn(3, 6, 7, 2))
    body = """
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(4))
            self.bias = nn.Parameter(0.1 * torch.randn(4))

        def forward(self, x, r):
            return F.silu(F.group_norm(x + r, 2, self.weight, self.bias) * 2.0)
    """
    source, name, backward = _generate(tmp_path, body, "[torch.randn(2, 4, 9), torch.randn(2, 4, 9)]")
    assert (name, backward) == ("_add_group_norm_fwd_kernel", "_add_group_norm_bwd_kernel")
    ref, new = _modules(source)
    for shape in [(2, 4, 9), (3, 4, 1500), (1, 4, 3, 3)]:
        _compare(ref, new, torch.randn(shape), torch.randn(shape))


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (
            "self.norm(x).softmax(dim=-1)",
            r"unsupported reduction in a kernel with group_norm: its rows are the groups",
        ),
        ("self.norm(x.softmax(dim=-1))", r"unsupported group_norm after a reduction over the last dimension"),
        ("self.norm(x) + self.row", r"unsupported row vector in a kernel with group_norm"),
    ],
)
def test_what_group_norm_cannot_take_is_declined(tmp_path, expr, message):
    body = f"""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.GroupNorm(2, 4)
            self.row = nn.Parameter(torch.randn(6))

        def forward(self, x):
            return {expr}
    """
    with pytest.raises(Unsupported, match=message):
        _generate(tmp_path, body, "[torch.randn(2, 4, 6)]")


def test_long_rows_are_not_tuned_at_warps_that_spill(tmp_path):
    """A (sample, group) row of 16 x 256 x 64 x 64 in 32 groups holds 32768 elements, the odd-size
    variant's 65 x 65 rows 65536: at 4 warps each thread would hold 256 or 512 of every vector, and the
    compiler spilling them took minutes. The autotuner tries only the warps that give each thread at
    most 64; the most when none does."""
    source, name, _ = _generate(tmp_path, GROUP_NORM, "[torch.randn(2, 8, 4, 4)]", "[4, 8]")
    path = tmp_path / "generated.py"
    path.write_text(source, encoding="utf-8")
    namespace: dict[str, object] = {}
    exec(compile(source, str(path), "exec"), namespace)
    autotuned, prune = namespace[f"{name}_autotuned"], namespace[f"{name}_warps"]
    assert autotuned.early_config_prune is prune
    configs = autotuned.configs

    def warps(block_size: int) -> list[int]:
        return sorted(c.num_warps for c in prune(configs, {}, BLOCK_SIZE=block_size))

    # Through Triton's own autotuner, as a launch prunes: the kwargs it is called with.
    autotuned.nargs = {}
    assert [c.num_warps for c in autotuned.prune_configs({"BLOCK_SIZE": 65536})] == [32]
    assert warps(4096) == [4, 8, 16, 32]
    assert warps(16384) == [8, 16, 32]
    assert warps(32768) == [16, 32]
    assert warps(65536) == warps(1 << 20) == [32]
    # The fewest warps kept at the example's rows compiles for an H100/H200.
    compiled = compile_for_cuda(path, name, {"BLOCK_SIZE": 32768}, num_warps=16, floats=("norm_eps",))
    assert compiled["ok"], compiled


def test_an_elements_channel_comes_from_its_rows_group_and_its_column(tmp_path):
    """A (sample, group) row holds whole channels from its group's first: each element's channel (for
    the affine weights) is that one plus its column's, a 32-bit division of the column, not a 64-bit
    division of its offset, in the forward kernel, its twins and the backward."""
    source, name, backward = _generate(tmp_path, GROUP_NORM, "[torch.randn(2, 8, 4, 4)]", "[4, 8]")
    generated = source.split('\n\n\n"""', 1)[1]
    assert "offsets // n_inner" not in generated
    line = "channels = (row * (n_cols // n_inner)) % n_channels + cols // n_inner"
    for kernel in (name, f"{name}_rows", f"{name}_looped", backward):
        body = generated[generated.index(f"def {kernel}(") :]
        assert line in body[: body.index("\n\n\n")], kernel
    # Compiled for an H100/H200: 64-bit division is a subroutine call; once a row, not twice an element
    # (before: two calls an element, 512 a thread at 4 warps and BLOCK_SIZE 32768, measured once).
    path = tmp_path / "generated.py"
    path.write_text(source, encoding="utf-8")
    compiled = compile_for_cuda(path, name, {"BLOCK_SIZE": 4096}, num_warps=4, floats=("norm_eps",))
    assert compiled["ok"] and compiled["calls"] <= 2, compiled
