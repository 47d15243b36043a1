"""The ``template`` generator: readable Triton for common patterns, no model.

The module is traced in a sandbox (``runners/trace.py``: ``torch.fx`` runs the
user's code); everything here works on the JSON description of the graph, in
plain Python, and is deterministic: the same module gives the same code, byte
for byte. One fused kernel is written per module:

- a **pointwise** chain (arithmetic with tensors, row vectors such as a bias,
  and scalars; activations; comparisons, ``where``, clamps, casts) becomes one
  elementwise kernel over the flattened tensor;
- anything with a **reduction over the last dimension** (sum, mean, amax,
  amin, var, softmax, log_softmax, logsumexp, layer_norm, rms_norm, written out or
  called) becomes a row kernel, one program per row holding the whole row
  (``BLOCK_SIZE = next_power_of_2(n_cols)``), with the pointwise work before
  and after it (a residual add, the affine weights) fused in; rows of 1024
  elements or fewer go to its twin over several rows a program
  (``emit.render_rows``: a [ROWS, BLOCK_SIZE] tile, ROWS and the warps tuned),
  rows longer than 65536 elements to its looped twin (``emit.render_looped``),
  which walks the row in blocks of 4096, one pass per reduction and one to write;
- a **loss over every element** (``F.mse_loss``, ``F.l1_loss``, ``F.kl_div`` with a reduction,
  ``nn.MSELoss``/``nn.L1Loss``/``nn.KLDivLoss``, ``x.mean()``) is a row kernel whose programs each
  sum their row; forward adds up the per-row sums in float32 (no atomics: the same inputs give the
  same bits) and applies the reduction's divisor and the arithmetic with numbers after it;
- **batch norm in eval mode** (``nn.BatchNorm1d/2d/3d`` with running statistics) is pointwise, its
  statistics and affine weights vectors over dimension 1 read from the module at call time; forward
  refuses training mode, which normalizes by the batch's own statistics;
- a **gated activation** (SwiGLU ``silu(a) * b``, GeGLU ``gelu(a) * b``) on an
  input whose last dimension holds both halves (``x.chunk(2, dim=-1)``,
  ``torch.chunk``, ``x.split(n, dim=-1)``, ``x[..., :n]`` and ``x[..., n:]``
  with ``n`` a literal, a module attribute or ``x.shape[-1] // 2``) reads both
  halves from that one input, each row's second half ``n_cols`` further on;
  the output has half the input's last dimension. Forward refuses widths the
  split does not halve. Gate and up as separate inputs are plain pointwise.

The kernels load in the input's dtype, compute in float32 and store in the
output's dtype; every size comes from the tensors at call time. Numbers that
``forward`` reads from the module (``self.eps``, ``self.norm.eps``) are read
at call time too; settings that shape the kernel (a reduction's ``dim``, the
GELU approximation, a ``pow`` exponent) are checked at the top of ``forward``
when they come from the module, so an instance built differently raises
instead of computing something else. So are numbers forward computes from an
attribute (``-self.bound``): the trace records their value, not how they were
computed.

The emitted class keeps the original name, constructor (copied verbatim, with
what it needs from its file) and ``forward`` signature, so the original's
``state_dict`` loads. Every launch goes through ``_launch_config``, which
returns the kernel, its grid and its settings: on CUDA tensors with compiled
Triton, an ``@triton.autotune`` wrapper of the same kernel (pointwise: BLOCK_SIZE
512 to 4096 by 4 or 8 warps, keyed on ``n_elements``; rows: 4 to 32 warps,
keyed on ``n_cols``, BLOCK_SIZE holding the row); under the Triton interpreter
(``triton.jit`` then gives no ``JITFunction``), a plain launch with fixed
settings, since timing configs there means nothing. The generated module reads
no environment variables: the static screen forbids it. A sum or mean over the
first dimension of a 2-D input (``x.sum(dim=0)``) goes to ``columns.py``: a 2-D
grid of column blocks by row splits, each program walking down its split's rows; a tall input's
splits write float32 partial sums into a ``[splits, n_cols]`` workspace that a second launch of
the same kernel adds up per column in a fixed order; a masked mean over dim 1 of a ``[B, S, H]``
input (``sum(x * mask, 1) / clamp(mask.sum(1), min=eps)``) to ``pooling.py``. Other reductions over other
dimensions, views and reshapes, and per-row tensors other than reductions are
future work. A graph with matrix products (``nn.Linear``, ``F.linear``, ``x @ W``)
goes to ``products.py``: one tiled GEMM kernel per product, the
pointwise ops after it fused into its epilogue. A graph whose outputs are larger
than every input it reads (RoPE's cos and sin tables, built from positions and
inverse frequencies) goes to ``tables.py``: one kernel over the
outputs' shape, each input read where it broadcasts. Attention probabilities,
``softmax(q @ k.transpose(-2, -1) * scale, dim=-1)`` of two ``[..., S, D]`` inputs, go to
``attention.py``: one kernel whose programs multiply a block of query rows with every key
(``tl.dot``) and write the probabilities once, the scores never stored (forward only).

Index coordinates: ``torch.arange`` of an input's size with dimensions of 1 added
(``pos[None, :] - pos[:, None]``: ALiBi's distances, a causal mask's comparison) becomes the
coordinate of the dimension it lines up with, computed from each element's offset; ``x.device``
is taken only as a ``device=`` argument. Halves of an input's last dimension used in a value of the
input's full width (rotary embeddings' ``cat((-x2, x1), -1)``) are read at each column's partner
(``col ± D/2``) in a kernel over the whole width (``lowering.py``).

The trace (``runners/trace.py``) may have read parameters' dtypes or shapes as
values to follow a branch in forward (T5's ``if self.weight.dtype in ...``); each
read becomes a guard in forward, which the suggestion turns into the original
computation for other parameters (``runners/fallback.py``).

Each kernel whose output has a gradient also gets a **backward** kernel: it recomputes the
forward's values (row by row for row kernels, one program walking every ``n_programs``-th row) and
applies the chain rule to the kernel's own statements (``autodiff.py``), writing
input gradients elementwise and summing parameter gradients over rows (in registers, one partial row
per program, added up by torch; per element for pointwise kernels). A
``torch.autograd.Function`` launches both kernels, saving only the tensors it was given; the
class's ``forward`` applies it when autograd records (grad enabled and a tensor requiring grad),
and otherwise calls the forward op alone, which saves the Function's cost per call. A kernel
with an op that has no derivative rule, or a boolean output, gets the forward alone. The
candidate also carries its code without the backward (``Candidate.without_backward``): what is
suggested if the judge finds its gradients wrong. The backward launch is not tuned yet.

Anything outside these patterns raises ``GeneratorError`` naming the first
unsupported op and its node, e.g. ``template: unsupported op torch.cumsum
(node 'cumsum')``.

The package, in the order a module goes through it:

- ``ops.py``: the kinds of value, how each spelling of an op names its arguments, and the Triton
  expression each op becomes; ``Unsupported``;
- ``ir.py``: the kernel being built (``Value``, ``Load``, ``Reduce``, ``Kernel``) and the helpers
  the lowering and the emission share (``read_guards``, dtype promotion);
- ``lowering.py``: ``Builder``, which walks the traced graph and fills in the kernel;
- ``emit.py``: the forward kernel, its launch settings, its launch as a custom op and the module's
  ``forward``, and the text every generated module holds;
- ``autodiff.py``: the derivative rules, applied to the kernel's statements;
- ``backward.py``: the backward kernel and the ``torch.autograd.Function`` launching both;
- ``products.py``: matrix products, several kernels in sequence;
- ``tables.py``: tables larger than their inputs (RoPE's cos and sin);
- ``columns.py``: a sum or mean over the first dimension of a 2-D input (``x.sum(dim=0)``);
- ``pooling.py``: a masked mean over dim 1 of a ``[B, S, H]`` input (sentence-transformers' pooling);
- ``attention.py``: attention probabilities, ``softmax(q @ k^T * scale)`` of two inputs;
- ``sdpa.py``: ``F.scaled_dot_product_attention`` of three inputs (causal or not), one kernel;
- ``windows.py``: 2-D max and average pooling of an input (``nn.MaxPool2d``, ``F.avg_pool2d``);
- here: the module's source put together, and ``TemplateGenerator``, which traces the module and
  picks the kind of kernel.
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Any

from runners import sandbox
from runners.generators.base import Candidate, GeneratorDeclined, GeneratorError, Problem
from runners.generators.template import attention, columns, pooling, products, sdpa, tables, windows
from runners.generators.template.backward import Backward, render_backward, render_function
from runners.generators.template.emit import (
    CUSTOM_OP,
    HEADER,
    RESULT_DTYPE,
    TANH,
    kernel_name,
    long_row_guard,
    render_forward,
    render_kernel,
    render_launch,
)
from runners.generators.template.ir import Kernel, check_names, require_direct
from runners.generators.template.lowering import Builder
from runners.generators.template.ops import Unsupported
from runners.source import NotStandalone, class_parts

TRACE_LIMITS = sandbox.Limits(timeout_s=120.0, memory_mb=8192)


# ---------------------------------------------------------------------------
# The module


def render_module(problem: Problem, trace: dict[str, Any]) -> tuple[str, str, Kernel]:
    """(source, kernel name, kernel) for the traced module."""
    source, name, kernel, _ = render_module_with_backward(problem, trace)
    return source, name, kernel


def render_module_with_backward(
    problem: Problem, trace: dict[str, Any], backward: bool = True
) -> tuple[str, str, Kernel, str | None]:
    """(source, kernel name, kernel, backward kernel name or None) for the traced module.

    With ``backward``, a kernel whose every op has a derivative rule gets a backward kernel and an
    autograd.Function launching both; the others (and ``backward=False``) get the forward alone."""
    require_direct(problem.class_name, trace)
    if columns.applies(trace):  # a sum over the first dimension: one program per block of columns
        source, name, grad_name = columns.render_module(problem, trace, backward)
        return source, name, Kernel([], ""), grad_name
    if pooling.applies(trace):  # a masked mean over dim 1 of a [B, S, H] input
        source, name, grad_name = pooling.render_module(problem, trace, backward)
        return source, name, Kernel([], ""), grad_name
    if sdpa.applies(trace):  # F.scaled_dot_product_attention of three inputs: no backward
        source, name, grad_name = sdpa.render_module(problem, trace, backward)
        return source, name, Kernel([], ""), grad_name
    if windows.applies(trace):  # 2-D max or average pooling of an input: no backward
        source, name, grad_name = windows.render_module(problem, trace, backward)
        return source, name, Kernel([], ""), grad_name
    if attention.applies(trace):  # softmax(q @ k^T * scale) of two inputs: no backward
        source, name, grad_name = attention.render_module(problem, trace, backward)
        return source, name, Kernel([], ""), grad_name
    parts = class_parts(problem.source, problem.class_name)
    kernel = Builder(trace).build()
    if kernel.output is None:
        raise Unsupported("forward returns nothing")
    name = kernel_name(kernel)
    grad: Backward | None = None
    ops, forward = render_forward(kernel, name, parts.signature, parts.returns)
    if backward:
        try:
            grad = render_backward(kernel, name)
            trained = dataclasses.replace(kernel, guards=[*kernel.guards, *long_row_guard(kernel)])
            ops, forward = render_function(trained, name, grad, parts.signature, parts.returns)
        except Unsupported:
            grad = None
    context = [c for c in parts.context if c not in HEADER]
    what = "one program per row" if kernel.rows else "one elementwise pass"
    also = f", and its backward, {grad.name}" if grad else ""
    doc = (
        f'"""{problem.class_name} as one Triton kernel, {name} ({what}){also}. Each launch is a\n'
        'custom op, so torch.compile(fullgraph=True) takes the module as it is."""'
    )
    blocks = [doc + "\n\n" + "\n".join([*HEADER, *context]) + "\n"]
    if "_result_dtype(" in forward + ops:
        blocks.append(RESULT_DTYPE.strip("\n") + "\n")
    if kernel.uses_tanh:
        blocks.append(TANH.strip("\n") + "\n")
    blocks.append(CUSTOM_OP.strip("\n") + "\n")
    blocks.append(render_kernel(kernel, name))
    blocks.append(render_launch(kernel, name))
    if grad is not None:
        blocks.append(grad.source)
    blocks.append(ops)
    members = [*parts.members, forward]
    body = "\n\n".join(textwrap.indent(m.rstrip("\n"), "    ") for m in members)
    blocks.append(f"class {problem.class_name}(torch.nn.Module):\n{body}\n")
    return "\n\n".join(blocks), name, kernel, grad.name if grad else None


# ---------------------------------------------------------------------------
# The generator


class TemplateGenerator:
    name = "template"
    samples = False
    runs_beside_reference = True  # its trace runs on the CPU (the meta device first), never the GPU

    def generate(self, problem: Problem, n: int) -> list[Candidate]:
        if problem.build is None:
            raise GeneratorError("template: the module's build is not resolved yet")
        req = {
            "device": "cpu",
            "file": problem.file,
            "root": problem.root,
            "class_name": problem.class_name,
            "build": problem.build,
        }
        readable = sandbox.problem_paths(problem.file, problem.root)
        res = sandbox.run("runners.trace:trace", req, TRACE_LIMITS, env=None, readable=readable)
        if res.outcome != "ok" or res.payload is None:
            raise GeneratorError(f"template: tracing failed: {res.reason}")
        if not res.payload.get("ok"):
            raise GeneratorDeclined(f"template: {res.payload.get('reason', 'tracing failed')}")
        try:
            check_names(res.payload)  # written by the sandbox that ran the module's code
        except Unsupported as exc:
            raise GeneratorDeclined(f"template: {exc}") from None
        if sdpa.applies(res.payload):  # F.scaled_dot_product_attention of three inputs
            return [sdpa.candidate(problem, res.payload, self.name)]
        if windows.applies(res.payload):  # 2-D max or average pooling of an input
            return [windows.candidate(problem, res.payload, self.name)]
        if attention.applies(res.payload):  # softmax(q @ k^T * scale) of two inputs, before products
            return [attention.candidate(problem, res.payload, self.name)]
        if products.has_matmul(res.payload):  # matrix products: several kernels in sequence
            return [products.candidate(problem, res.payload, self.name)]
        if tables.applies(res.payload):  # tables larger than their inputs (RoPE's cos and sin)
            return [tables.candidate(problem, res.payload, self.name)]
        if columns.applies(res.payload):  # a sum over the first dimension: one program per block of columns
            return [columns.candidate(problem, res.payload, self.name)]
        if pooling.applies(res.payload):  # a masked mean over dim 1 of a [B, S, H] input
            return [pooling.candidate(problem, res.payload, self.name)]
        try:
            source, kernel, built, backward = render_module_with_backward(problem, res.payload)
        except (Unsupported, NotStandalone) as exc:
            raise GeneratorDeclined(f"template: {exc}") from None
        pattern = "row reduction" if built.rows else "pointwise"
        provenance = {"kernel": kernel, "pattern": pattern, **({"backward": backward} if backward else {})}
        cand = Candidate(kernel.strip("_"), self.name, source, provenance)
        if backward:
            cand.without_backward = render_module_with_backward(problem, res.payload, backward=False)[0]
        return [cand]


__all__ = [
    "TRACE_LIMITS",
    "TemplateGenerator",
    "Unsupported",
    "render_module",
    "render_module_with_backward",
]
