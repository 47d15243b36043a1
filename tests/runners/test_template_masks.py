"""The template's masks and other tensors that broadcast against the input: nanoGPT's causal mask (a
buffer sliced to the sequence, ``masked_fill`` with -inf), a padding mask of ``[B, 1, 1, T]`` filled
with ``torch.finfo(dtype).min`` (the trace reads the input's dtype as a value, and forward checks it),
a per-head ``[H, 1, 1]`` parameter with its gradient, ALiBi's penalty and a causal mask built from
``torch.arange`` of the input's size (index coordinates in the kernel); and what it declines, by name.

Generated as the engine does and run in a fresh Python under Triton's interpreter against PyTorch in
float64, outputs and gradients (``test_template_reductions``' helpers).
"""

from __future__ import annotations

import pytest
import torch

from runners.generators.template import Unsupported
from tests.runners.test_template_indices import _compare_floats
from tests.runners.test_template_reductions import _generate, _modules, fresh_python

CAUSAL = """
class M(nn.Module):
    def __init__(self, block_size):
        super().__init__()
        self.register_buffer(
            "bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
        )

    def forward(self, att):
        T = att.size(-1)
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        return F.softmax(att, dim=-1)
"""


@fresh_python
def test_a_causal_mask_sliced_from_a_buffer_matches_torch(tmp_path):
    source, name, backward = _generate(tmp_path, CAUSAL, "[torch.randn(2, 2, 16, 16)]", "[32]")
    assert (name, backward) == ("_softmax_fwd_kernel", "_softmax_bwd_kernel")
    assert "self.bias[:, :, :att.shape[-1], :att.shape[-1]]" in source  # sliced at call time
    ref, new = _modules(source, (32,))
    for shape in [(2, 2, 16, 16), (1, 3, 5, 5), (2, 1, 32, 32)]:
        _compare_floats(ref, new, torch.randn(shape) * 3)


@fresh_python
def test_a_padding_mask_and_a_per_head_parameter_match_torch(tmp_path):
    body = """
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(1.0 + 0.1 * torch.randn(2, 1, 1))

        def forward(self, scores, mask):
            scores = (scores * self.scale).masked_fill(~mask, torch.finfo(scores.dtype).min)
            return torch.softmax(scores, dim=-1)
    """
    source, _, backward = _generate(
        tmp_path, body, "[torch.randn(2, 2, 8, 16), torch.rand(2, 1, 1, 16) > 0.1]"
    )
    assert backward is not None
    assert "if scores.dtype != torch.float32:" in source  # finfo(scores.dtype).min was read as a value
    ref, new = _modules(source)
    for b, s, t in [(2, 8, 16), (3, 5, 70), (1, 1, 3)]:
        mask = torch.rand(b, 1, 1, t) > 0.3
        mask[0, ..., :] = False  # a fully padded row stays finite
        _compare_floats(ref, new, torch.randn(b, 2, s, t), mask)
    with pytest.raises(NotImplementedError, match=r"specialised to scores\.dtype == torch\.float32"):
        new(torch.randn(2, 2, 8, 16).half(), torch.ones(2, 1, 1, 16, dtype=torch.bool))


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("att.masked_fill(mask, att.mean())", r"unsupported masked_fill with a tensor value"),
        ("att + mask[:, 1:2]", r"unsupported slice \[1, 2, None\]: only \[:stop\]"),
    ],
)
def test_what_a_mask_cannot_take_is_declined(tmp_path, expr, message):
    body = f"""
    class M(nn.Module):
        def forward(self, att, mask):
            return torch.softmax({expr}, dim=-1)
    """
    with pytest.raises(Unsupported, match=message):
        _generate(tmp_path, body, "[torch.randn(2, 3, 4, 4), torch.rand(3, 4, 4) > 0.5]")


ALIBI = """
class M(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.slopes = nn.Parameter(0.5 ** torch.arange(1, heads + 1).float().view(heads, 1, 1))

    def forward(self, scores):
        T = scores.size(-1)
        pos = torch.arange(T, device=scores.device)
        distance = (pos[None, :] - pos[:, None]).abs().to(scores.dtype)
        return torch.softmax(scores - self.slopes * distance, dim=-1)
"""


@fresh_python
def test_alibi_and_a_causal_mask_from_arange_match_torch(tmp_path):
    source, name, backward = _generate(tmp_path, ALIBI, "[torch.randn(2, 2, 8, 8)]", "[2]")
    assert (name, backward) == ("_softmax_fwd_kernel", "_softmax_bwd_kernel")
    assert "coord_3.to(tl.float32) " not in source and "coord_2.to(tl.float32)" in source
    ref, new = _modules(source, (2,))
    for shape in [(2, 2, 8, 8), (1, 2, 13, 13), (3, 2, 1, 1)]:
        _compare_floats(ref, new, torch.randn(shape) * 3)  # the slopes' gradient too, summed back
    with pytest.raises(
        NotImplementedError, match=r"torch\.arange\(scores\.shape\[-1\]\) as the index of dim"
    ):
        new(torch.randn(2, 2, 4, 8))  # the positions along dimension 2 count to the last one's size
    body = """
    class M(nn.Module):
        def forward(self, x):
            pos = torch.arange(0, x.shape[2], device=x.device)
            future = pos[..., None] < pos[None]
            return F.softmax(x.masked_fill(future, float("-inf")), dim=-1)
    """
    source, _, _ = _generate(tmp_path, body, "[torch.randn(2, 6, 6)]")
    ref, new = _modules(source)
    for shape in [(2, 6, 6), (3, 9, 9)]:
        _compare_floats(ref, new, torch.randn(shape))


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("torch.arange(8)[None, :] * scores", r"self\._tensor_constant0 is a tensor created in forward"),
        (
            "torch.arange(T // 1)[None, :] * scores",
            r"unsupported arange of floordiv: only torch\.arange\(n\), n a size of an input",
        ),
        ("torch.arange(T, dtype=torch.float16) * scores", r"unsupported arange of dtype"),
        (
            "(torch.arange(T)[None, :] - torch.arange(T)[:, None]) / 2 * scores",
            r"unsupported division of integer",
        ),
        ("torch.arange(T) * 0.5 * scores", r"unsupported arithmetic of integer positions with 0\.5"),
        (
            "torch.arange(T).exp() * scores",
            r"unsupported exp of integer positions: cast them with \.to\(\) first",
        ),
        (
            "torch.arange(T)[1:] * scores[..., 1:]",
            r"unsupported indexing of torch\.arange with .*: only None and \[:\]",
        ),
        (
            "scores.to(scores.device)",
            r"unsupported use of scores\.device by node 'to': only as a device= argument",
        ),
    ],
)
def test_what_positions_cannot_be_is_declined(tmp_path, expr, message):
    body = f"""
    class M(nn.Module):
        def forward(self, scores):
            T = scores.size(-1)
            return torch.softmax({expr}, dim=-1)
    """
    with pytest.raises(Unsupported, match=message):
        _generate(tmp_path, body, "[torch.randn(2, 3, 8, 8)]")
