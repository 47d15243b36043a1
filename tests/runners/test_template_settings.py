"""Flags and strings the module holds (``self.residual``, ``self.approximate``): the trace takes a
branch and passes an argument as the module had them, so code built from the graph holds only while
they keep those values.

The cheat this guards against is no cheat at all, only a second instance: the same class built with
another flag, or the same instance set again, would run the traced computation. Each flag or string
whose other value traces another graph becomes a guard at the top of forward (the suggestion then
runs the original computation: ``runners/fallback.py``); the rest (a label nothing reads) stay free,
so the kernel still runs for every instance that differs only there.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.runners.test_template_reductions import _generate, _modules, fresh_python

SETTINGS = """
class M(nn.Module):
    def __init__(self, approximate="tanh", residual=True):
        super().__init__()
        self.approximate = approximate  # an argument of an op
        self.residual = residual  # a branch
        self.label = "block 3"  # read by nothing forward computes
        self.verbose = False

    def forward(self, x):
        y = F.gelu(x, approximate=self.approximate)
        if self.residual:
            y = y + x
        return y
"""


@fresh_python
def test_flags_and_strings_the_graph_depends_on_are_guarded_and_the_rest_left_free(tmp_path):
    source, _, _ = _generate(tmp_path, SETTINGS, "[torch.randn(4, 33)]")
    assert "if self.approximate != 'tanh':" in source and "if self.residual != True:" in source
    assert "self.label !=" not in source and "self.verbose !=" not in source
    _, new = _modules(source)
    x = torch.randn(4, 33)
    want = F.gelu(x, approximate="tanh") + x
    with torch.no_grad():
        assert (new(x) - want).abs().max().item() < 1e-5
        new.label, new.verbose = "block 4", True  # free: the kernel still runs
        assert (new(x) - want).abs().max().item() < 1e-5
        new.residual = False
        with pytest.raises(NotImplementedError, match=r"specialised to self\.residual == True"):
            new(x)
        new.residual, new.approximate = True, "none"
        with pytest.raises(NotImplementedError, match=r"specialised to self\.approximate == 'tanh'"):
            new(x)


def test_a_setting_a_module_forged_never_becomes_code():
    """The trace comes from the sandbox that ran the module's code: a setting is code only as a
    path of names and a flag's or a string's literal."""
    from runners.generators.template import Unsupported
    from runners.generators.template.ir import read_guards

    quoted = read_guards({"settings": [{"path": "mode", "value": "a'); import os; ('"}]})
    assert quoted == [
        (
            "self.mode != \"a'); import os; ('\"",
            "the kernel is specialised to self.mode == \"a'); import os; ('\"",
        ),
    ]
    with pytest.raises(Unsupported, match="the trace read a setting named"):
        read_guards({"settings": [{"path": "mode != 1 or print(1) or self.x", "value": True}]})
    with pytest.raises(Unsupported, match=r"the trace read self\.mode as"):
        read_guards({"settings": [{"path": "mode", "value": ["__import__('os')"]}]})


TOGETHER = """
class M(nn.Module):
    def __init__(self, gate=False, residual=False):
        super().__init__()
        self.gate = gate
        self.residual = residual
        self.label = "block 3"

    def forward(self, x):
        y = torch.tanh(x)
        if self.gate and self.residual:  # flipping either alone traces the same graph
            y = y + x
        return y
"""


@fresh_python
def test_flags_that_matter_only_together_are_guarded_too(tmp_path):
    """Traced with both flags False, flipping one at a time never changes the graph; an instance with
    both True would run the traced computation (no residual), a wrong result never flagged. Forward
    read ``self.gate``, so it is guarded; ``self.residual``, which forward never reached, is free:
    while ``gate`` is False nothing depends on it. The label nothing reads stays free too."""
    source, _, _ = _generate(tmp_path, TOGETHER, "[torch.randn(4, 33)]")
    assert "if self.gate != False:" in source
    assert "self.residual !=" not in source and "self.label !=" not in source
    _, new = _modules(source)
    x = torch.randn(4, 33)
    with torch.no_grad():
        assert (new(x) - torch.tanh(x)).abs().max().item() < 1e-5
        new.residual = True  # free: the kernel runs, and is right
        assert (new(x) - torch.tanh(x)).abs().max().item() < 1e-5
        new.gate = True
        with pytest.raises(NotImplementedError, match=r"specialised to self\.gate == False"):
            new(x)


UNSWAPPABLE = """
class M(nn.Module):
    def __init_subclass__(cls, **kwargs):
        raise ValueError("no subclasses of M")

    def __init__(self, residual=True):
        super().__init__()
        self.residual = residual
        self.label = "block 3"

    def forward(self, x):
        return torch.tanh(x) + x if self.residual else torch.tanh(x)
"""


@fresh_python
def test_a_class_that_refuses_subclasses_has_every_flag_guarded(tmp_path):
    """The reads are noted through a subclass; a class that refuses one still traces, and every flag
    and string it holds counts as read (guarded), the label too."""
    source, _, _ = _generate(tmp_path, UNSWAPPABLE, "[torch.randn(4, 33)]")
    assert "if self.residual != True:" in source and "if self.label != 'block 3':" in source
    _, new = _modules(source)
    x = torch.randn(4, 33)
    with torch.no_grad():
        assert (new(x) - (torch.tanh(x) + x)).abs().max().item() < 1e-5
