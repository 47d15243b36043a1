"""The template's rotary embedding: ``x * cos + rotate_half(x) * sin``, where ``rotate_half`` puts the
two halves of x's last dimension back together the other way round (``cat((-x2, x1), dim=-1)``). The
kernel runs over x's whole width and reads each half where a column needs it, x itself or x at its
partner column half a row away; cos and sin are buffers sliced to the sequence, or inputs, read
through their strides. And what it declines, by name.

Generated as the engine does and run in a fresh Python under Triton's interpreter against PyTorch in
float64, outputs and gradients (``test_template_reductions``' helpers).
"""

from __future__ import annotations

import pytest
import torch

from runners.generators.template import Unsupported
from tests.runners.test_template_reductions import _compare, _generate, _modules, fresh_python

ROTARY = """
class M(nn.Module):
    def __init__(self, dim, max_len):
        super().__init__()
        self.half = dim // 2
        angles = torch.arange(max_len).float()[:, None] * 0.5 ** torch.arange(self.half).float()
        self.register_buffer("cos_table", angles.repeat(1, 2).cos())
        self.register_buffer("sin_table", angles.repeat(1, 2).sin())

    def forward(self, x):
        n = x.size(-2)
        rotated = torch.cat((-x[..., self.half :], x[..., : self.half]), dim=-1)
        return x * self.cos_table[:n] + rotated * self.sin_table[:n]
"""


@fresh_python
def test_rotary_embedding_matches_torch_with_its_gradient(tmp_path):
    source, name, backward = _generate(tmp_path, ROTARY, "[torch.randn(2, 2, 8, 16)]", "[16, 32]")
    assert (name, backward) == ("_neg_cat_mul_add_kernel", "_neg_cat_mul_add_bwd_kernel")
    assert "partner_offsets = offsets + tl.where(cols < half_cols, half_cols, -half_cols)" in source
    ref, new = _modules(source, (16, 32))
    for shape in [(2, 2, 8, 16), (1, 3, 13, 16), (2, 1, 32, 16)]:
        _compare(ref, new, torch.randn(shape))
    with pytest.raises(
        NotImplementedError, match=r"splits the last dimension of x into two halves of self\.half"
    ):
        new(torch.randn(1, 1, 4, 14))
    body = """
    class M(nn.Module):
        def forward(self, x, cos, sin):
            x1, x2 = x.chunk(2, dim=-1)
            return x * cos + torch.cat((-x2, x1), dim=-1) * sin
    """
    source, _, _ = _generate(tmp_path, body, "[torch.randn(2, 5, 8), torch.randn(5, 8), torch.randn(5, 8)]")
    ref, new = _modules(source)
    for b, s, d in [(2, 5, 8), (3, 7, 6)]:  # the gradients of cos and sin summed back over the batch
        _compare(ref, new, torch.randn(b, s, d), torch.randn(s, d), torch.randn(s, d))


# What the halves cannot do, and why: forward(x, w) with x1, x2 = x.chunk(2, dim=-1), returning each.
DECLINED = {
    "torch.cat((x1, x), dim=-1)": r"unsupported use of x whole: .* \(torch\.cat, node 'cat'\)",
    "torch.cat((x2, x1, x2), dim=-1)": r"unsupported cat: only of two halves of an input's last dimension",
    "torch.cat((x1, x2), dim=0)": r"unsupported cat over dim 0: only the last",
    "x + torch.cat((x1, x2 * x1.sum(-1, keepdim=True)), dim=-1)": r"unsupported sum of a half value",
    "x + torch.cat((x2, x1 * w), dim=-1)": r"unsupported broadcast: w has shape \[4\], the input \[2, 3, 8\]",
}


def test_what_the_halves_cannot_do_is_declined(tmp_path):
    for expr, message in DECLINED.items():
        source = "class M(nn.Module):\n    def forward(self, x, w):\n        x1, x2 = x.chunk(2, dim=-1)\n"
        with pytest.raises(Unsupported, match=message):
            _generate(tmp_path, source + f"        return {expr}\n", "[torch.randn(2, 3, 8), torch.randn(4)]")
