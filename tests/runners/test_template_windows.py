"""2-D max and average pooling of an input: one kernel (``runners/generators/template/windows.py``),
against PyTorch in float64, what forward leaves to the original computation, and what is declined.

Each module is generated as the engine does and run in a fresh Python under Triton's interpreter
(``fresh_python``): windows that overlap and that do not, padding, sizes the stride does not divide,
3-D and 4-D inputs, NaN and infinities, half precision, a window read from the module at call time.
Then end to end, as a user runs it: the CLI verifies ResNet's stem pooling on the CPU.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
import torch.nn.functional as F

from runners.generators.template import Unsupported
from tests.cuda_compile import compile_each_config
from tests.runners.template_cli import verify_one_kernel
from tests.runners.test_template_reductions import _generate, _modules, fresh_python

MODULE = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.{}

    def forward(self, x):
        return self.pool(x)
"""
FUNCTION = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = 3

    def forward(self, x):
        return {}
"""
INPUTS = "[torch.randn(2, 3, 9, 11)]"


def _check(new: torch.nn.Module, x: torch.Tensor, pool, **how: object) -> None:
    """The kernel's output against PyTorch's in float64 (NaN where PyTorch has NaN)."""
    want = pool(x.double(), **how)
    with torch.no_grad():
        got = new(x)
    assert got.shape == want.shape and got.dtype == x.dtype
    tol = 1e-6 if x.dtype == torch.float32 else 1e-2
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.allclose(got.double(), want, rtol=tol, atol=tol, equal_nan=True), (got, want)


@fresh_python
def test_max_pooling_matches_torch(tmp_path):
    source, name, backward = _generate(tmp_path, MODULE.format("MaxPool2d(3, stride=2, padding=1)"), INPUTS)
    assert (name, backward) == ("_max_pool2d_kernel", None)
    assert "self.pool.kernel_size, self.pool.stride, self.pool.padding" in source
    _, new = _modules(source)
    how = {"kernel_size": 3, "stride": 2, "padding": 1}
    for shape in [(2, 3, 9, 11), (1, 1, 3, 3), (3, 40, 33), (2, 64, 56, 56)]:  # 3-D too; many blocks
        _check(new, torch.randn(shape), F.max_pool2d, **how)
    x = torch.randn(1, 2, 8, 8)
    x[0, 0, 3, 3], x[0, 1, :4, :4] = float("nan"), float("-inf")  # a NaN wins; a window of -inf
    x[0, 1, 6, 6] = float("inf")
    _check(new, x, F.max_pool2d, **how)
    for dtype in (torch.float16, torch.bfloat16):
        _check(new, torch.randn(2, 3, 10, 10, dtype=dtype), F.max_pool2d, **how)
    new.pool.kernel_size, new.pool.stride, new.pool.padding = (2, 3), (1, 2), (1, 0)  # read at call time
    _check(new, torch.randn(2, 3, 9, 11), F.max_pool2d, kernel_size=(2, 3), stride=(1, 2), padding=(1, 0))


@fresh_python
def test_average_pooling_matches_torch_with_and_without_the_padding_counted(tmp_path):
    source, name, _ = _generate(tmp_path, MODULE.format("AvgPool2d(3, stride=2, padding=1)"), INPUTS)
    assert name == "_avg_pool2d_kernel"
    _, new = _modules(source)
    x = torch.randn(2, 5, 13, 10)
    _check(new, x, F.avg_pool2d, kernel_size=3, stride=2, padding=1)
    new.pool.count_include_pad = False  # the windows over the padding divide by what they cover
    _check(new, x, F.avg_pool2d, kernel_size=3, stride=2, padding=1, count_include_pad=False)
    _check(
        new, torch.randn(4, 7, 9), F.avg_pool2d, kernel_size=3, stride=2, padding=1, count_include_pad=False
    )
    _check(new, x.half(), F.avg_pool2d, kernel_size=3, stride=2, padding=1, count_include_pad=False)
    source, _, _ = _generate(tmp_path, MODULE.format("AvgPool2d(2)"), "[torch.randn(2, 4, 8, 8)]")
    _, new = _modules(source)
    _check(new, torch.randn(3, 4, 11, 7), F.avg_pool2d, kernel_size=2)  # the last row and column left out


@fresh_python
def test_the_functions_take_numbers_pairs_and_attributes(tmp_path):
    source, _, _ = _generate(
        tmp_path, FUNCTION.format("F.max_pool2d(x, self.k, stride=2, padding=1)"), INPUTS
    )
    assert "_pool_window(x, self.k, 2, 1)" in source
    _, new = _modules(source)
    _check(new, torch.randn(2, 3, 12, 9), F.max_pool2d, kernel_size=3, stride=2, padding=1)
    new.k = 2  # an attribute read at call time
    _check(new, torch.randn(2, 3, 12, 9), F.max_pool2d, kernel_size=2, stride=2, padding=1)
    body = FUNCTION.format("F.avg_pool2d(x, (2, 3), (1, 2), (1, 1), count_include_pad=False)")
    source, _, _ = _generate(tmp_path, body, INPUTS)
    _, new = _modules(source)
    how = {"kernel_size": (2, 3), "stride": (1, 2), "padding": (1, 1), "count_include_pad": False}
    _check(new, torch.randn(2, 3, 12, 9), F.avg_pool2d, **how)


@fresh_python
def test_forward_leaves_to_the_original_what_the_kernel_does_not_take(tmp_path):
    source, _, _ = _generate(tmp_path, MODULE.format("MaxPool2d(3, stride=2, padding=1)"), INPUTS)
    _, new = _modules(source)
    x = torch.randn(2, 3, 9, 11)
    for name, value, message in [
        ("ceil_mode", True, "ceil_mode=False only"),
        ("dilation", 2, "dilation 1 only"),
        ("return_indices", True, "return_indices=False only"),
        ("padding", 2, "the windows PyTorch takes only"),  # over half the window: PyTorch raises
        ("kernel_size", 12, "the windows PyTorch takes only"),  # larger than the input: no output
    ]:
        old = getattr(new.pool, name)
        setattr(new.pool, name, value)
        with pytest.raises(NotImplementedError, match=message):
            new(x)
        setattr(new.pool, name, old)
    with pytest.raises(NotImplementedError, match="contiguous 3-D or 4-D float32"):
        new(x.transpose(2, 3))
    with pytest.raises(NotImplementedError, match="contiguous 3-D or 4-D float32"):
        new(x.double())
    with pytest.raises(NotImplementedError, match="contiguous 3-D or 4-D float32"):
        new(torch.randn(9, 11))
    source, _, _ = _generate(tmp_path, MODULE.format("AvgPool2d(2)"), INPUTS)
    _, new = _modules(source)
    new.pool.divisor_override = 3
    with pytest.raises(NotImplementedError, match="no divisor_override"):
        new(x)


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ("F.max_pool2d(x, 3, ceil_mode=True)", r"unsupported ceil_mode True: only False in 2-D pooling"),
        ("F.max_pool2d(x, 3, dilation=2)", r"unsupported dilation 2: only 1"),
        ("F.avg_pool2d(x, 3, divisor_override=2)", r"unsupported divisor_override 2: only None"),
        ("F.max_pool2d(x, 3) * 2.0", r"unsupported operator\.mul in 2-D pooling"),
        ("F.max_pool2d(x * 2.0, 3)", r"unsupported operator\.mul in 2-D pooling"),
        (
            "F.max_pool2d(x, 3, return_indices=True)[0]",
            r"unsupported op torch\.nn\.functional\.max_pool2d_with",
        ),
    ],
)
def test_near_misses_are_declined_by_name(tmp_path, result, message):
    with pytest.raises(Unsupported, match=message):
        _generate(tmp_path, FUNCTION.format(result), INPUTS)


def test_every_autotuned_config_compiles_for_an_h100_without_spills_or_64_bit_divisions(tmp_path):
    """Each element's coordinates are divided out of its offset: in 32 bits where every offset fits
    them (NARROW), since a 64-bit division is a subroutine call for every element (on an H100 the
    kernel in 64 bits ran at 0.55x torch.compile's on ResNet's stem, as slow as eager); past 2^31
    elements the 64-bit code still runs."""
    source, name, _ = _generate(tmp_path, MODULE.format("MaxPool2d(3, stride=2, padding=1)"), INPUTS)
    settings = {"KH": 3, "KW": 3, "IS_MAX": True, "COUNT_PAD": True}
    narrow = compile_each_config(source, tmp_path / "pool_kernel.py", name, {**settings, "NARROW": True})
    wide = compile_each_config(source, tmp_path / "pool_kernel.py", name, {**settings, "NARROW": False})
    assert len(narrow) == len(wide) == 4
    for (config, got), (_, got_wide) in zip(narrow, wide, strict=True):
        assert got["ok"] and got_wide["ok"], (config, got, got_wide)
        assert got["spills"] == got_wide["spills"] == 0, (config, got, got_wide)
        assert got["calls"] == 0 < got_wide["calls"], (config, got, got_wide)
        assert got["instructions"] < got_wide["instructions"], (config, got, got_wide)


@fresh_python
def test_past_2_31_elements_the_launch_divides_in_64_bits_and_that_code_is_right_too(tmp_path):
    source, _, _ = _generate(tmp_path, MODULE.format("AvgPool2d(3, stride=2, padding=1)"), INPUTS)
    _, new = _modules(source)
    names = new.forward.__globals__
    launch = names["_pool_launch_config"]
    assert launch(100, 25, False)[2]["NARROW"] is True
    assert launch(2**31 - 1, 2**31 - 1025, False)[2]["NARROW"] is True
    assert launch(2**31, 100, False)[2]["NARROW"] is False  # the input's offsets past 32 bits
    assert launch(100, 2**31 - 1024, False)[2]["NARROW"] is False  # a block past the output's end
    # The 64-bit code under the interpreter, as a launch past 2^31 elements would run it.
    names["_pool_launch_config"] = lambda *args: (lambda k, g, c: (k, g, {**c, "NARROW": False}))(
        *launch(*args)
    )
    for shape in [(2, 3, 9, 11), (3, 40, 33), (2, 64, 56, 56)]:
        _check(new, torch.randn(shape), F.avg_pool2d, kernel_size=3, stride=2, padding=1)


E2E = textwrap.dedent(
    """
    import torch
    from torch import nn


    class MaxPoolStem(nn.Module):
        def __init__(self):
            super().__init__()
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

        def forward(self, x):
            return self.maxpool(x)


    def get_inputs():
        return [torch.randn(2, 4, 17, 15)]


    def get_init_inputs():
        return []
    """
)


def test_cli_verifies_max_pooling_on_cpu(cli, tmp_path):
    verify_one_kernel(cli, tmp_path, E2E, "MaxPoolStem", "_max_pool2d_kernel")
