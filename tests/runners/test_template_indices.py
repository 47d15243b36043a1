"""The template's integer inputs: cross_entropy's class indices, read once per row and picked by
comparing them with the column index; and what it declines, by name.

Generated as the engine does and run in a fresh Python under Triton's interpreter against PyTorch in
float64, outputs and the gradient of the floating input (``test_template_reductions``' helpers).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from runners.generators.template import Unsupported
from tests.runners.test_template_reductions import _generate, _modules, _through_function, fresh_python


def _compare_floats(ref: torch.nn.Module, new: torch.nn.Module, *inputs: Any, tol: float = 1e-5) -> None:
    """Outputs and the gradients of the floating inputs (integer ones are passed as they are)."""
    leaves = [x.detach().double().requires_grad_(True) if x.is_floating_point() else x for x in inputs]
    floats = [x for x in leaves if x.is_floating_point()]
    want = ref.double()(*leaves)
    up = torch.randn(want.shape, dtype=torch.float64)
    want_grads = torch.autograd.grad(want, floats, up)
    ref.float()
    leaves = [x.detach().float().requires_grad_(True) if x.is_floating_point() else x for x in inputs]
    floats = [x for x in leaves if x.is_floating_point()]
    got = new(*leaves)
    assert _through_function(got.grad_fn)
    assert got.shape == want.shape and got.dtype == torch.float32
    got_grads = torch.autograd.grad(got, floats, up.float())
    scale = max(1.0, want.abs().max().item())
    assert (got.double() - want).abs().max().item() <= tol * scale, (got, want)
    for g, w in zip(got_grads, want_grads, strict=True):
        assert (g.double() - w).abs().max().item() <= tol * max(1.0, w.abs().max().item())


CROSS_ENTROPY = """
class M(nn.Module):
    def forward(self, logits, targets):
        return {expr}
"""


def _targets(rows: int, classes: int, ignored: int | None = None) -> torch.Tensor:
    t = torch.randint(0, classes, (rows,))
    if ignored is not None:
        t[::3] = ignored
    return t


@fresh_python
def test_cross_entropy_matches_torch_with_its_gradient(tmp_path):
    body = CROSS_ENTROPY.format(expr="F.cross_entropy(logits, targets)")
    source, name, backward = _generate(tmp_path, body, "[torch.randn(16, 100), torch.randint(0, 100, (16,))]")
    assert (name, backward) == ("_cross_entropy_fwd_kernel", "_cross_entropy_bwd_kernel")
    ref, new = _modules(source)
    for rows, classes in [(16, 100), (7, 1500), (1, 3), (33, 5)]:
        _compare_floats(ref, new, torch.randn(rows, classes) * 4, _targets(rows, classes))
    _compare_floats(ref, new, torch.randn(9, 10), _targets(9, 10, ignored=-100))  # ignored rows
    with pytest.raises(NotImplementedError, match=r"\[batch, classes\] logits only"):
        new(torch.randn(2, 3, 4), torch.randint(0, 3, (2, 4)))


@fresh_python
def test_a_class_index_out_of_range_gives_nan_where_torch_refuses(tmp_path):
    body = CROSS_ENTROPY.format(expr="F.cross_entropy(logits, targets, reduction='none')")
    source, _, _ = _generate(tmp_path, body, "[torch.randn(16, 100), torch.randint(0, 100, (16,))]")
    ref, new = _modules(source)
    logits, targets = torch.randn(6, 10), torch.tensor([1, 10, 3, -5, -100, 9])
    with pytest.raises(IndexError):
        ref(logits, targets)  # torch refuses 10 and -5
    got = new(logits, targets)
    assert got.isnan().tolist() == [False, True, False, True, False, False]
    fine = torch.tensor([0, 2, 4, 5])  # the valid rows: as torch; the ignored one: 0
    assert torch.allclose(got[fine], ref(logits[fine], targets[fine]), atol=1e-5)
    mean_body = CROSS_ENTROPY.format(expr="F.cross_entropy(logits, targets)")
    mean_source, _, _ = _generate(tmp_path, mean_body, "[torch.randn(16, 100), torch.randint(0, 100, (16,))]")
    _, mean = _modules(mean_source)
    assert mean(logits, targets).isnan()  # one bad row makes the mean NaN, never a number


@pytest.mark.parametrize(
    "expr",
    [
        "F.cross_entropy(logits, targets, reduction='sum') * 0.5",
        "F.cross_entropy(logits, targets, reduction='none')",
        "F.cross_entropy(logits * 2.0, targets, ignore_index=3)",
    ],
)
@fresh_python
def test_cross_entropy_reductions_match_torch(tmp_path, expr):
    body = CROSS_ENTROPY.format(expr=expr)
    source, _, backward = _generate(tmp_path, body, "[torch.randn(16, 100), torch.randint(0, 100, (16,))]")
    assert backward is not None
    ref, new = _modules(source)
    for rows, classes in [(16, 100), (7, 1500), (5, 4)]:
        _compare_floats(ref, new, torch.randn(rows, classes) * 4, _targets(rows, classes, ignored=3))


@pytest.mark.parametrize(
    ("expr", "inputs", "message"),
    [
        (
            "F.cross_entropy(logits, targets, label_smoothing=0.1)",
            "[torch.randn(4, 6), torch.randint(0, 6, (4,))]",
            r"unsupported cross_entropy with label_smoothing=0\.1",
        ),
        (
            "F.cross_entropy(logits, targets)",
            "[torch.randn(4, 6), torch.rand(4, 6)]",
            r"unsupported cross_entropy with class probabilities: only int64 class indices",
        ),
        (
            "F.cross_entropy(logits, targets)",
            "[torch.randn(4, 6, 5), torch.randint(0, 6, (4, 5))]",
            r"unsupported cross_entropy of a 3-D input: only \[batch, classes\] logits",
        ),
        (
            "logits * targets",
            "[torch.randn(4, 6), torch.randint(0, 6, (4, 6))]",
            r"input targets is a int64 integer tensor: only class indices of cross_entropy",
        ),
    ],
)
def test_what_cross_entropy_cannot_take_is_declined(tmp_path, expr, inputs, message):
    with pytest.raises(Unsupported, match=message):
        _generate(tmp_path, CROSS_ENTROPY.format(expr=expr), inputs)


# ---------------------------------------------------------------------------
# Masked mean pooling: a [B, S, H] input averaged over dim 1 where an integer mask keeps it

POOLING = """
class M(nn.Module):
    def forward(self, x, attention_mask):
        mask = attention_mask.unsqueeze(-1).expand(x.size()).float()
        summed = torch.sum(x * mask, 1)
        counts = torch.clamp(mask.sum(1), min=1e-9)
        return summed / counts
"""


@fresh_python
def test_masked_mean_pooling_matches_torch_with_its_gradient(tmp_path):
    source, name, backward = _generate(
        tmp_path, POOLING, "[torch.randn(2, 8, 32), torch.randint(0, 2, (2, 8))]"
    )
    assert (name, backward) == ("_masked_mean_pool_fwd_kernel", "_masked_mean_pool_bwd_kernel")
    ref, new = _modules(source)
    for b, s, h in [(2, 8, 32), (3, 37, 70), (1, 1, 1), (2, 5, 300)]:
        mask = torch.randint(0, 2, (b, s))
        mask[0] = 0  # a sample with nothing kept: the count's clamp
        _compare_floats(ref, new, torch.randn(b, s, h), mask)
    with torch.no_grad():
        x, mask = torch.randn(3, 9, 20), torch.rand(3, 9) > 0.5
        assert torch.allclose(new(x, mask), ref(x, mask), atol=1e-6)  # a boolean mask
        assert torch.equal(new(x, mask), new(x, mask))  # no atomics: the same bits every call
    with pytest.raises(NotImplementedError, match=r"integer or boolean \[B, S\] mask only"):
        new(torch.randn(2, 3, 4), torch.ones(2, 3))


@fresh_python
def test_masked_mean_pooling_spellings_match_torch(tmp_path):
    body = """
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.eps = 1e-6

        def forward(self, x, mask):
            m = mask.unsqueeze(-1).type_as(x)
            return (m * x).sum(dim=1) / m.sum(dim=1).clamp(min=self.eps)
    """
    source, _, backward = _generate(tmp_path, body, "[torch.randn(2, 8, 32), torch.randint(0, 2, (2, 8))]")
    assert backward is not None
    ref, new = _modules(source)
    for b, s, h in [(2, 8, 32), (3, 37, 70)]:
        _compare_floats(ref, new, torch.randn(b, s, h), torch.randint(0, 2, (b, s)))
    ref.eps = new.eps = 0.5  # read at call time
    _compare_floats(ref, new, torch.randn(2, 4, 6), torch.zeros(2, 4, dtype=torch.long))


@pytest.mark.parametrize(
    ("expr", "inputs", "message"),
    [
        (
            "torch.sum(x * mask.unsqueeze(-1), 1) / mask.sum(1, keepdim=True)",
            "[torch.randn(2, 8, 4), torch.rand(2, 8)]",
            r"unsupported floating mask: only integer or boolean masks",
        ),
        (
            "x.sum(1) * 2",
            "[torch.randn(2, 8, 4), torch.randint(0, 2, (2, 8))]",
            r"unsupported sum of x itself",
        ),
        (
            "torch.sum(x * mask.unsqueeze(-1).float(), 1).amax(-1)",
            "[torch.randn(2, 8, 4), torch.randint(0, 2, (2, 8))]",
            r"unsupported Tensor\.amax in a masked mean pooling",
        ),
    ],
)
def test_what_a_masked_mean_pooling_cannot_take_is_declined(tmp_path, expr, inputs, message):
    body = f"""
    class M(nn.Module):
        def forward(self, x, mask):
            return {expr}
    """
    with pytest.raises(Unsupported, match=message):
        _generate(tmp_path, body, inputs)
