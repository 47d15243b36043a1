"""Scaled dot-product attention for the ``template`` generator: ``F.scaled_dot_product_attention``
of three forward inputs as one Triton kernel (attention's forward, the scores never stored).

A module whose forward is the attention core of a decoder layer::

    return F.scaled_dot_product_attention(q, k, v, is_causal=True)

Eager PyTorch picks a fused kernel by dtype and size, and torch.compile leaves the call to the same
kernel (how fast eager's float32 attention runs on a GPU is to be measured). Here one program owns
``BLOCK_M`` query rows of one batch and head: it walks the keys ``BLOCK_N`` at a time, multiplies
(``tl.dot``), keeps each row's running maximum and sum of exponentials (rescaled when the maximum
grows) and accumulates the exponentials times the values, then divides once and writes ``[BLOCK_M,
Ev]`` in the inputs' dtype. With ``is_causal`` query row ``i`` sees keys ``0..i`` (PyTorch's mask,
aligned to the top left when the lengths differ), and a program stops at the last key its rows can
see. The inputs are read through their strides (``x.transpose(1, 2)`` views are not copied); ``E``
and ``Ev`` are constexpr blocks of up to 256.

The call is read from the trace: ``query``, ``key`` and ``value`` forward inputs of three or four
dimensions with the same leading ones; no mask, no dropout, no grouped-query broadcast;
``is_causal`` a flag as traced (a module's flag becomes a guard: ``ir.read_guards``), ``scale`` a
number or a module's numeric attribute (read at call time). Anything else is declined by name, as
is any other node in the graph.

On CUDA, float16 and bfloat16 tiles multiply on tensor cores (the probabilities cast to the values'
dtype, as fused attention kernels do) and float32 tiles as three TF32 products (``tf32x3``), as
``products.py``'s do; under the interpreter, float32 products. The launch is autotuned over the
blocks, warps and stages, keyed on the lengths rounded up to powers of two and the head sizes;
under the interpreter a plain launch. There is no backward kernel: under autograd the suggestion
keeps the original computation (``runners/fallback.py``).
"""

from __future__ import annotations

from typing import Any

from runners.generators.base import Candidate, Problem
from runners.generators.template.attention import module_source
from runners.generators.template.emit import (
    custom_op_candidate,
    guard_lines,
    op_source,
    wrap,
)
from runners.generators.template.ir import Kernel, on_self, read_guards, require_direct
from runners.generators.template.ops import FLOAT_DTYPES, Unsupported
from runners.source import class_parts

_SDPA = frozenset(
    {"torch.nn.functional.scaled_dot_product_attention", "torch._C._nn.scaled_dot_product_attention"}
)
_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_MAX_HEAD_DIM = 256

# What the kernel assumes, checked at the top of forward ({q}, {k}, {v}: forward's arguments).
_GUARDS = (
    (
        "{q}.dim() not in (3, 4) or {k}.dim() != {q}.dim() or {v}.dim() != {q}.dim()",
        "the kernel takes 3-D or 4-D query, key and value of the same rank only",
    ),
    (
        "{q}.shape[:-2] != {k}.shape[:-2] or {v}.shape[:-2] != {q}.shape[:-2] "
        "or {q}.shape[-1] != {k}.shape[-1] or {k}.shape[-2] != {v}.shape[-2]",
        "the kernel takes query, key and value with the same leading dimensions only",
    ),
    (
        f"{{q}}.shape[-1] > {_MAX_HEAD_DIM} or {{v}}.shape[-1] > {_MAX_HEAD_DIM}",
        f"the kernel takes head sizes of at most {_MAX_HEAD_DIM}",
    ),
    ("{k}.shape[-2] == 0", "the kernel takes at least one key"),
    (
        "{q}.dtype != {k}.dtype or {v}.dtype != {q}.dtype "
        "or {q}.dtype not in (torch.float32, torch.float16, torch.bfloat16)",
        "the kernel takes float32, float16 or bfloat16 query, key and value of one dtype only",
    ),
)


def applies(trace: dict[str, Any]) -> bool:
    """Whether the graph calls scaled_dot_product_attention: rendered here or declined by name."""
    return any(n.get("op") == "call_function" and n.get("target") in _SDPA for n in trace.get("nodes", []))


def _ref(value: Any) -> bool:
    return isinstance(value, dict) and "node" in value


def _fail(node: dict[str, Any], why: str) -> Unsupported:
    target = node.get("target") if node["op"] != "output" else "output"
    return Unsupported(f"{why} in scaled dot-product attention ({target}, node {node['name']!r})")


def _scale(node: dict[str, Any], value: Any) -> str:
    """The forward expression of ``scale``: a number, or a module attribute read at call time."""
    if isinstance(value, dict) and "attr" in value and isinstance(value.get("value"), int | float):
        return on_self(value["attr"])
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    raise _fail(node, f"unsupported scale {value!r}")


class _Call:
    """The one call of the graph: its three inputs (forward arguments) and its settings."""

    def __init__(self, trace: dict[str, Any]) -> None:
        nodes: list[dict[str, Any]] = trace["nodes"]
        inputs: dict[str, dict[str, Any]] = {}
        call: dict[str, Any] | None = None
        for node in nodes:
            if node["op"] == "placeholder":
                if node.get("shape") is None or node["target"].startswith("*"):
                    raise _fail(node, "unsupported forward argument that is not a tensor")
                inputs[node["name"]] = node
            elif node["op"] == "call_function" and node.get("target") in _SDPA and call is None:
                call = node
            elif node["op"] == "output":
                args = node.get("args", [])
                if call is None or len(args) != 1 or not _ref(args[0]) or args[0]["node"] != call["name"]:
                    raise _fail(node, "unsupported output: forward must return the attention's output")
            else:
                raise _fail(node, f"unsupported {node.get('target') or node['op']}")
        assert call is not None  # applies() found it; the output check above needs it
        bound = dict(zip(_PARAMS, call.get("args", []), strict=False)) | dict(call.get("kwargs", {}))
        if set(bound) - set(_PARAMS):
            raise _fail(call, f"unsupported arguments {sorted(set(bound) - set(_PARAMS))}")
        tensors = []
        for role in ("query", "key", "value"):
            value = bound.get(role)
            given = inputs.get(value["node"]) if isinstance(value, dict) and "node" in value else None
            if given is None:
                raise _fail(call, f"unsupported {role}: only an input of forward")
            tensors.append(given)
        if bound.get("attn_mask") is not None:
            raise _fail(call, "unsupported attn_mask: only none")
        if bound.get("dropout_p", 0.0) not in (0, 0.0) or isinstance(bound.get("dropout_p"), bool):
            raise _fail(call, f"unsupported dropout_p {bound.get('dropout_p')!r}: only 0")
        if bound.get("enable_gqa", False) is not False:
            raise _fail(call, "unsupported enable_gqa: only False")
        # A flag reaches the trace as it was (self.is_causal too: its guard is read_guards'), so a
        # literal here.
        self.causal = bound.get("is_causal", False)
        if not isinstance(self.causal, bool):
            raise _fail(call, f"unsupported is_causal {self.causal!r}")
        scale = bound.get("scale")
        self.scale = None if scale is None else _scale(call, scale)
        q, k, v = tensors
        self.q, self.k, self.v = q["target"], k["target"], v["target"]
        qs, ks, vs = q["shape"], k["shape"], v["shape"]
        if len(qs) not in (3, 4) or len(ks) != len(qs) or len(vs) != len(qs):
            raise _fail(call, f"unsupported shapes {qs}, {ks}, {vs}: only 3-D or 4-D of one rank")
        if qs[:-2] != ks[:-2] or vs[:-2] != qs[:-2] or qs[-1] != ks[-1] or ks[-2] != vs[-2]:
            raise _fail(call, f"unsupported shapes {qs}, {ks}, {vs}: only the same leading dimensions")
        if max(qs[-1], vs[-1]) > _MAX_HEAD_DIM:
            raise _fail(call, f"unsupported head sizes {qs[-1]}, {vs[-1]}: at most {_MAX_HEAD_DIM}")
        dtypes = {q.get("dtype"), k.get("dtype"), v.get("dtype")}
        if len(dtypes) != 1 or not dtypes <= set(FLOAT_DTYPES):
            raise _fail(call, f"unsupported dtypes {sorted(map(str, dtypes))}: only one floating dtype")


_KERNEL = """
@triton.jit
def {name}(
    q_ptr, k_ptr, v_ptr, out_ptr, heads, seq_q, seq_k, head_dim, v_dim, scale,
    stride_qb, stride_qh, stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    SQ_BUCKET, SK_BUCKET,
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, DOT_FP32: tl.constexpr,
):
    # Program (bh, i) owns query rows i * BLOCK_M, ... of batch and head bh: their output over
    # every key they see, with the softmax's maximum and sum kept as the keys go by.
    bh = tl.program_id(0)
    b = (bh // heads).to(tl.int64)
    h = (bh % heads).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    vdims = tl.arange(0, BLOCK_DV)
    q_ptrs = q_ptr + b * stride_qb + h * stride_qh + rows[:, None].to(tl.int64) * stride_qm
    q_mask = (rows[:, None] < seq_q) & (dims[None, :] < head_dim)
    q = tl.load(q_ptrs + dims[None, :] * stride_qd, mask=q_mask, other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)
    k_ptr += b * stride_kb + h * stride_kh
    v_ptr += b * stride_vb + h * stride_vh
    m = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    total = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)
    end = seq_k
    if CAUSAL:
        # Row r sees keys 0..r: the program's last row sees every key it needs.
        end = tl.minimum(seq_k, (tl.program_id(1) + 1) * BLOCK_M)
    for start in range(0, end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        k_ptrs = k_ptr + cols[None, :].to(tl.int64) * stride_kn + dims[:, None] * stride_kd
        kt = tl.load(k_ptrs, mask=(cols[None, :] < seq_k) & (dims[:, None] < head_dim), other=0.0)
        v_ptrs = v_ptr + cols[:, None].to(tl.int64) * stride_vn + vdims[None, :] * stride_vd
        v = tl.load(v_ptrs, mask=(cols[:, None] < seq_k) & (vdims[None, :] < v_dim), other=0.0)
        if DOT_FP32:
            # float32 products (the interpreter's tl.dot multiplies bfloat16 tiles as raw integers)
            s = tl.dot(q, kt.to(tl.float32), input_precision="ieee")
        else:
            # float16 and bfloat16 tiles: tensor cores; float32 tiles: three TF32 products each
            s = tl.dot(q, kt, input_precision="tf32x3")
        seen = (cols < seq_k)[None, :]
        if CAUSAL:
            seen = seen & (cols[None, :] <= rows[:, None])
        s = tl.where(seen, s * scale, -float("inf"))
        # Every row sees key 0 in the first block, so the maximum is finite from there on.
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        total = total * alpha + tl.sum(p, axis=1)
        if DOT_FP32:
            pv = tl.dot(p, v.to(tl.float32), input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v, input_precision="tf32x3")
        acc = acc * alpha[:, None] + pv
        m = m_new
    out = acc / total[:, None]
    out_ptrs = out_ptr + (bh.to(tl.int64) * seq_q + rows[:, None]) * v_dim + vdims[None, :]
    out_mask = (rows[:, None] < seq_q) & (vdims[None, :] < v_dim)
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=out_mask)
"""

# On CUDA the kernel is tuned per size over its blocks, warps and pipeline stages, keyed on the
# lengths rounded up to powers of two and the head sizes; each config is compiled again in every
# runner that checks the kernel, so there are four. Compiled for sm_90 at E = Ev = 64, causal,
# float32 tiles (tf32x3), these spill 10, 11, 20 and 0 registers to local memory; blocks of 64 rows
# and 64 keys spilled 60 to 134, of 128 rows at 4 warps 314. Under the Triton interpreter, where
# timing settings means nothing, a plain launch with blocks as large as the sizes allow.
_LAUNCH = '''
{name}_autotuned = triton.autotune(
    configs=[
        triton.Config({{"BLOCK_M": m, "BLOCK_N": n}}, num_warps=w, num_stages=s)
        for m, n, w, s in ((128, 32, 8, 3), (128, 32, 8, 2), (128, 64, 8, 1), (64, 16, 4, 2))
    ],
    key=["SQ_BUCKET", "SK_BUCKET", "head_dim", "v_dim"],
)({name})


def _sdpa_launch_config(batch_heads, seq_q, seq_k, head_dim, v_dim, on_cuda):
    """(kernel, grid, settings) for one program per batch, head and block of BLOCK_M query rows."""
    blocks = {{
        "BLOCK_D": max(16, triton.next_power_of_2(head_dim)),
        "BLOCK_DV": max(16, triton.next_power_of_2(v_dim)),
        "SQ_BUCKET": triton.next_power_of_2(seq_q),
        "SK_BUCKET": triton.next_power_of_2(seq_k),
    }}
    if on_cuda and isinstance({name}, triton.JITFunction):
        grid = lambda meta: (batch_heads, triton.cdiv(seq_q, meta["BLOCK_M"]))
        return {name}_autotuned, grid, {{"DOT_FP32": False, **blocks}}
    block_m = min(64, max(16, triton.next_power_of_2(seq_q)))
    block_n = min(64, max(16, triton.next_power_of_2(seq_k)))
    config = {{"BLOCK_M": block_m, "BLOCK_N": block_n, "DOT_FP32": True, **blocks}}
    return {name}, (batch_heads, triton.cdiv(seq_q, block_m)), config
'''


def _op(name: str) -> tuple[str, str]:
    """(the op's source, its name): the launch over query, key and value of [B, H, S, E] or [B, S, E]."""
    op = name.removesuffix("_kernel")
    prep = [
        "    seq_q, seq_k, v_dim = q.shape[-2], k.shape[-2], v.shape[-1]",
        "    out = torch.empty((*q.shape[:-1], v_dim), dtype=q.dtype, device=q.device)",
    ]
    body = [
        *prep,
        "    if out.numel() == 0:",
        "        return out",
        "    q4, k4, v4 = (t if t.dim() == 4 else t.unsqueeze(1) for t in (q, k, v))",
        "    batch, heads, _, head_dim = q4.shape",
        "    bh = batch * heads",
        "    kernel, grid, config = _sdpa_launch_config(bh, seq_q, seq_k, head_dim, v_dim, q.is_cuda)",
        "    kernel[grid](",
        "        q4, k4, v4, out, heads, seq_q, seq_k, head_dim, v_dim, scale,",
        "        q4.stride(0), q4.stride(1), q4.stride(2), q4.stride(3),",
        "        k4.stride(0), k4.stride(1), k4.stride(2), k4.stride(3),",
        "        v4.stride(0), v4.stride(1), v4.stride(2), v4.stride(3),",
        "        CAUSAL=causal,",
        "        **config,",
        "    )",
        "    return out",
    ]
    params = [("q", "torch.Tensor"), ("k", "torch.Tensor"), ("v", "torch.Tensor")]
    params += [("scale", "float"), ("causal", "bool")]
    return op_source(op, params, "torch.Tensor", body, [*prep, "    return out"]), op


def render_module(
    problem: Problem, trace: dict[str, Any], backward: bool = True
) -> tuple[str, str, str | None]:
    """(source, kernel name, None: no backward) for a traced scaled_dot_product_attention call."""
    del backward  # forward only: under autograd the suggestion keeps the original computation
    require_direct(problem.class_name, trace)
    call = _Call(trace)
    q, k, v = call.q, call.k, call.v
    if call.scale is None and "math" in {q, k, v}:  # forward computes the default scale with math
        raise Unsupported("forward takes an argument named 'math', which the default scale uses")
    parts = class_parts(problem.source, problem.class_name)
    name = "_sdpa_fwd_kernel"
    op_text, op = _op(name)
    checks = [(check.format(q=q, k=k, v=v), why) for check, why in _GUARDS]
    guards = Kernel([], q, guards=[*read_guards(trace), *checks])
    # PyTorch's default scale: 1 / sqrt(E), in double precision, then float.
    scale = f"float({call.scale})" if call.scale is not None else f"1.0 / math.sqrt({q}.shape[-1])"
    forward = [f"def forward({parts.signature}){parts.returns}:", *guard_lines(guards)]
    forward += wrap(f"return {op}", [q, k, v, scale, repr(call.causal)], "    ")
    doc = (
        f'"""{problem.class_name} as one Triton kernel, {name} (attention\'s forward: the scores of a '
        "block of query rows\nagainst the keys, never stored, folded into the output as they go). "
        "Each launch is a custom op, so\ntorch.compile(fullgraph=True) takes the module as it is. "
        'No backward: under autograd the original\ncomputation runs."""'
    )
    blocks = [_KERNEL.format(name=name), _LAUNCH.format(name=name), op_text]
    return module_source(problem.class_name, parts, doc, blocks, forward, scale), name, None


def candidate(problem: Problem, trace: dict[str, Any], generator: str) -> Candidate:
    return custom_op_candidate(render_module, problem, trace, generator, "scaled dot-product attention")
