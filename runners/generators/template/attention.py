"""Attention probabilities for the ``template`` generator: ``softmax(q @ k^T * scale)`` as one kernel.

Attention modules compute the weights of the values from two inputs of shape ``[..., S, D]`` (one or
two leading dimensions: batch, or batch and heads)::

    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    return torch.softmax(scores, dim=-1)

Eager PyTorch (and torch.compile, which leaves the product to cuBLAS) writes the ``[..., S_q, S_k]``
scores to memory and reads them back for the softmax. Here one program owns ``BLOCK_M`` query rows
of one batch and head: it multiplies its query block with ``BLOCK_N`` keys at a time (``tl.dot``,
float32 accumulation), scales the scores and writes the probabilities once, in the inputs' dtype.
When every key fits in one block the row's maximum, exponentials and sum come from that block
directly; otherwise a first walk over the keys finds each row's maximum and the sum of its
exponentials (online: the sum is rescaled when the maximum grows) and a second walk recomputes the
scores and writes ``exp(s - max) / sum``. The inputs are read through their strides (views such as
``x.transpose(1, 2)`` are not copied); ``D`` is one constexpr block of up to 256.

The graph is read by what each node is: the two inputs, the keys' transpose over their last two
dimensions (``k.transpose(-2, -1)``, ``k.mT``), the product (``@``, ``torch.matmul``), the scale
(a division by or multiplication with a number: a literal, a module attribute read at call time,
or arithmetic on the inputs' sizes such as ``math.sqrt(q.size(-1))``, computed in forward) and the
softmax over the last dimension. Anything else in such a graph is declined by name.

On CUDA, float16 and bfloat16 tiles multiply on tensor cores and float32 tiles as three TF32
products (``input_precision="tf32x3"``), as ``products.py``'s do; under the interpreter, float32
products (``"ieee"``). The launch is autotuned over the blocks, warps and pipeline stages, keyed
on the sequence lengths rounded up to powers of two and ``D``; under the interpreter a plain
launch. There is no backward kernel: under autograd the suggestion keeps the original computation
(``runners/fallback.py``).
"""

from __future__ import annotations

from typing import Any

from runners.generators.base import Candidate, Problem
from runners.generators.template.emit import (
    custom_op_candidate,
    custom_op_module,
    guard_lines,
    op_source,
    wrap,
)
from runners.generators.template.ir import Kernel, on_self, read_guards, require_direct
from runners.generators.template.ops import FLOAT_DTYPES, SPELLINGS, Unsupported
from runners.source import ClassParts, class_parts

_MATMUL = frozenset({"operator.matmul", "torch.matmul", "Tensor.matmul"})
_TRANSPOSE = frozenset({"Tensor.transpose", "torch.transpose", "Tensor.swapaxes", "torch.swapaxes"})
_MAX_HEAD_DIM = 256
# Arithmetic on numbers (sizes, literals, attributes): forward computes it at call time.
_NUMBER_OPS = {
    "operator.truediv": "/",
    "operator.mul": "*",
    "operator.add": "+",
    "operator.sub": "-",
    "operator.floordiv": "//",
    "operator.pow": "**",
}


# What the kernel assumes, checked at the top of forward ({q} and {k}: forward's arguments).
_GUARDS = (
    (
        "{q}.dim() not in (3, 4) or {k}.dim() != {q}.dim()",
        "the kernel takes 3-D or 4-D q and k of the same rank only",
    ),
    (
        "{q}.shape[:-2] != {k}.shape[:-2] or {q}.shape[-1] != {k}.shape[-1]",
        "the kernel takes q and k with the same leading dimensions and last dimension only",
    ),
    (f"{{q}}.shape[-1] > {_MAX_HEAD_DIM}", f"the kernel takes a last dimension of at most {_MAX_HEAD_DIM}"),
    (
        "{q}.dtype != {k}.dtype or {q}.dtype not in (torch.float32, torch.float16, torch.bfloat16)",
        "the kernel takes float32, float16 or bfloat16 q and k of one dtype only",
    ),
)


def _call(node: dict[str, Any]) -> bool:
    return node.get("op") in ("call_function", "call_method")


def applies(trace: dict[str, Any]) -> bool:
    """Whether the graph multiplies two forward inputs (no parameter) and takes a softmax: scaled
    dot-product attention probabilities, rendered here or declined by name."""
    nodes: list[dict[str, Any]] = trace.get("nodes", [])
    inputs = {n["name"] for n in nodes if n["op"] == "placeholder"}
    softmax = any(_call(n) and SPELLINGS.get(n.get("target", ""), ("",))[0] == "softmax" for n in nodes)
    if not softmax:
        return False
    derived = set(inputs)  # values computed from the inputs alone
    for node in nodes:
        if not _call(node):
            continue
        refs = [a["node"] for a in [*node.get("args", []), *node.get("kwargs", {}).values()] if _ref(a)]
        if refs and all(r in derived for r in refs):
            derived.add(node["name"])
        if node.get("target") in _MATMUL and len(refs) == 2 and all(r in derived for r in refs):
            return True
    return False


def _ref(value: Any) -> bool:
    return isinstance(value, dict) and "node" in value


class _Attention:
    """What each node of the attention probabilities is: the roles below, else Unsupported naming it."""

    def __init__(self, trace: dict[str, Any]) -> None:
        self.nodes: list[dict[str, Any]] = trace["nodes"]
        self.role: dict[str, str] = {}  # tensor node -> q, k, kt, scores, probs, or an input's name
        self.number: dict[str, str] = {}  # number node -> its forward expression
        self.inputs: dict[str, str] = {}  # tensor placeholder node -> forward argument
        self.q = self.k = ""
        self.ndim = 0
        self.scale: list[tuple[str, str]] = []  # ("*" or "/", forward expression)

    def fail(self, node: dict[str, Any], why: str) -> Unsupported:
        target = node.get("target") if node["op"] != "output" else "output"
        return Unsupported(f"{why} in attention probabilities ({target}, node {node['name']!r})")

    def read(self) -> None:
        for node in self.nodes:
            op = node["op"]
            if op == "placeholder":
                if node.get("shape") is None or node["target"].startswith("*"):
                    raise self.fail(node, "unsupported forward argument that is not a tensor")
                self.inputs[node["name"]] = node["target"]
                self.role[node["name"]] = "input"
            elif op == "output":
                args = node.get("args", [])
                if len(args) != 1 or not _ref(args[0]) or self.role.get(args[0]["node"]) != "probs":
                    raise self.fail(node, "unsupported output: forward must return the probabilities")
            elif _call(node):
                self.call(node)
            else:
                raise self.fail(node, f"unsupported {op}")

    def tensor(self, node: dict[str, Any], value: Any) -> str:
        if _ref(value) and value["node"] in self.role:
            return self.role[value["node"]]
        raise self.fail(node, f"unsupported operand {value!r}")

    def call(self, node: dict[str, Any]) -> None:
        target = node.get("target", "")
        name = node["name"]
        args, kwargs = list(node.get("args", [])), dict(node.get("kwargs", {}))
        if "shape" not in node or node.get("shape") is None:
            self.number[name] = self.scalar(node, target, args, kwargs)
            return
        first = self.role.get(args[0]["node"], "") if args and _ref(args[0]) else ""
        if first == "input" and target in _TRANSPOSE | {"getattr"}:
            self.transpose(node, target, args, kwargs)
        elif target in _MATMUL:
            operands = [self.tensor(node, a) for a in args]
            if kwargs or operands != ["input", "kt"]:
                raise self.fail(node, "unsupported product: only q @ k.transpose(-2, -1) of two inputs")
            q = args[0]["node"]
            self.q = self.inputs[q]
            self.role[name] = "scores"
            self.check_shapes(node, q)
        elif first == "probs":
            raise self.fail(node, f"unsupported {target} after the softmax")
        elif first == "scores" or (
            len(args) == 2 and _ref(args[1]) and self.role.get(args[1]["node"]) == "scores"
        ):
            self.scaled(node, target, args, kwargs)
        else:
            raise self.fail(node, f"unsupported {target}")

    def transpose(self, node: dict[str, Any], target: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        source = self.inputs[args[0]["node"]]
        shape = node["shape"]
        ndim = len(shape)
        if target == "getattr":
            if args[1:] != ["mT"]:
                raise self.fail(node, f"unsupported attribute {args[1:]!r} of an input")
        else:
            dims = [*args[1:], *(kwargs.get(k) for k in ("dim0", "dim1") if k in kwargs)]
            if len(dims) != 2 or not all(type(d) is int for d in dims):
                raise self.fail(node, f"unsupported transpose over {dims!r}")
            if sorted(d % ndim for d in dims) != [ndim - 2, ndim - 1]:
                raise self.fail(node, f"unsupported transpose of dims {tuple(dims)}: only the last two")
        if self.k:
            raise self.fail(node, "unsupported second transpose")
        self.k = source
        self.role[node["name"]] = "kt"

    def check_shapes(self, node: dict[str, Any], q: str) -> None:
        by_name = {n["name"]: n for n in self.nodes}
        qs = by_name[q]["shape"]
        ks = next(n["shape"] for n in self.nodes if n["op"] == "placeholder" and n["target"] == self.k)
        dtypes = {
            by_name[q].get("dtype"),
            next(n.get("dtype") for n in self.nodes if n.get("target") == self.k),
        }
        if len(qs) not in (3, 4) or len(ks) != len(qs):
            raise self.fail(node, f"unsupported shapes {qs} and {ks}: only 3-D or 4-D q and k")
        if qs[:-2] != ks[:-2] or qs[-1] != ks[-1]:
            raise self.fail(node, f"unsupported shapes {qs} and {ks}: only the same leading dims and D")
        if qs[-1] > _MAX_HEAD_DIM:
            raise self.fail(node, f"unsupported head dim {qs[-1]}: at most {_MAX_HEAD_DIM}")
        if len(dtypes) != 1 or not dtypes <= set(FLOAT_DTYPES):
            raise self.fail(node, f"unsupported dtypes {sorted(map(str, dtypes))}: only one floating dtype")
        self.ndim = len(qs)

    def scaled(self, node: dict[str, Any], target: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        op = SPELLINGS.get(target, ("",))[0]
        if op == "softmax":
            bound = dict(zip(("input", "dim"), args, strict=False)) | kwargs
            dim = bound.get("dim")
            extra = {k: v for k, v in bound.items() if k not in ("input", "dim", "_stacklevel", "dtype")}
            if type(dim) is not int or dim % self.ndim != self.ndim - 1:
                raise self.fail(node, f"unsupported softmax over dim {dim!r}: only the last dimension")
            if bound.get("dtype") is not None or extra or len(args) > 2:
                raise self.fail(node, "unsupported softmax options")
            self.role[node["name"]] = "probs"
            return
        if target in ("operator.truediv", "torch.div", "Tensor.div") and len(args) == 2 and not kwargs:
            if self.tensor(node, args[0]) != "scores":
                raise self.fail(node, "unsupported division of a number by the scores")
            self.scale.append(("/", self.operand(node, args[1])))
        elif target in ("operator.mul", "torch.mul", "Tensor.mul") and len(args) == 2 and not kwargs:
            other = args[1] if _ref(args[0]) and self.role.get(args[0]["node"]) == "scores" else args[0]
            self.scale.append(("*", self.operand(node, other)))
        else:
            raise self.fail(node, f"unsupported {target} between the product and the softmax")
        self.role[node["name"]] = "scores"

    def operand(self, node: dict[str, Any], value: Any) -> str:
        """The forward expression of a number the scores are scaled by."""
        if _ref(value) and value["node"] in self.number:
            return self.number[value["node"]]
        if _ref(value):
            raise self.fail(node, "unsupported scale by a tensor: only by a number")
        return self.literal(node, value)

    def literal(self, node: dict[str, Any], value: Any) -> str:
        if isinstance(value, dict) and "attr" in value and isinstance(value.get("value"), int | float):
            return on_self(value["attr"])
        if isinstance(value, int | float) and not isinstance(value, bool):
            return repr(value)
        raise self.fail(node, f"unsupported number {value!r}")

    def scalar(self, node: dict[str, Any], target: str, args: list[Any], kwargs: dict[str, Any]) -> str:
        """The forward expression of a number computed in forward: sizes of the inputs and arithmetic."""

        def value(v: Any) -> str:
            if _ref(v) and v["node"] in self.number:
                return self.number[v["node"]]
            if _ref(v) and self.role.get(v["node"]) == "input":
                return self.inputs[v["node"]]
            return self.literal(node, v)

        if kwargs:
            raise self.fail(node, "unsupported keyword arguments")
        if target == "Tensor.size" and len(args) == 2 and type(args[1]) is int:
            return f"{value(args[0])}.size({args[1]})"
        if target == "Tensor.size" and len(args) == 1:
            return f"{value(args[0])}.shape"
        if target == "getattr" and args[1:] == ["shape"]:
            return f"{value(args[0])}.shape"
        if target == "operator.getitem" and len(args) == 2 and type(args[1]) is int:
            return f"{value(args[0])}[{args[1]}]"
        if target == "math.sqrt" and len(args) == 1:
            return f"math.sqrt({value(args[0])})"
        if target in _NUMBER_OPS and len(args) == 2:
            return f"({value(args[0])} {_NUMBER_OPS[target]} {value(args[1])})"
        raise self.fail(node, f"unsupported {target} of numbers")


_KERNEL = """
@triton.jit
def _attention_scores(
    q, k_ptr, start, seq_k, head_dim, scale, stride_kn, stride_kd,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DOT_FP32: tl.constexpr,
):
    # Scaled scores of the query block against keys start, ..., start + BLOCK_N - 1 (-inf past the
    # last key): the key block is loaded as [BLOCK_D, BLOCK_N], k^T, through its strides.
    cols = start + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    k_ptrs = k_ptr + cols[None, :].to(tl.int64) * stride_kn + dims[:, None] * stride_kd
    kt = tl.load(k_ptrs, mask=(cols[None, :] < seq_k) & (dims[:, None] < head_dim), other=0.0)
    if DOT_FP32:
        # float32 products (the interpreter's tl.dot multiplies bfloat16 tiles as raw integers)
        s = tl.dot(q.to(tl.float32), kt.to(tl.float32), input_precision="ieee")
    else:
        # float16 and bfloat16 tiles: tensor cores; float32 tiles: three TF32 products each
        # (tf32x3, about float32's accuracy)
        s = tl.dot(q, kt, input_precision="tf32x3")
    return tl.where((cols < seq_k)[None, :], s * scale, -float("inf"))


@triton.jit
def {name}(
    q_ptr, k_ptr, out_ptr, heads, seq_q, seq_k, head_dim, scale,
    stride_qb, stride_qh, stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
    SQ_BUCKET, SK_BUCKET,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DOT_FP32: tl.constexpr,
):
    # Program (bh, i) owns query rows i * BLOCK_M, ... of batch and head bh and writes their
    # probabilities over every key, once.
    bh = tl.program_id(0)
    b = (bh // heads).to(tl.int64)
    h = (bh % heads).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q_ptrs = q_ptr + b * stride_qb + h * stride_qh + rows[:, None].to(tl.int64) * stride_qm
    q_mask = (rows[:, None] < seq_q) & (dims[None, :] < head_dim)
    q = tl.load(q_ptrs + dims[None, :] * stride_qd, mask=q_mask, other=0.0)
    k_ptr += b * stride_kb + h * stride_kh
    out_ptrs = out_ptr + (bh.to(tl.int64) * seq_q + rows[:, None]) * seq_k
    row_mask = (rows < seq_q)[:, None]
    if seq_k <= BLOCK_N:
        # Every key in one block: the row's maximum, exponentials and sum at once.
        s = _attention_scores(
            q, k_ptr, 0, seq_k, head_dim, scale, stride_kn, stride_kd, BLOCK_N, BLOCK_D, DOT_FP32
        )
        p = tl.exp(s - tl.max(s, axis=1)[:, None])
        p = p / tl.sum(p, axis=1)[:, None]
        cols = tl.arange(0, BLOCK_N)
        keep = row_mask & (cols < seq_k)[None, :]
        tl.store(out_ptrs + cols[None, :], p.to(out_ptr.dtype.element_ty), mask=keep)
    else:
        # First walk: each row's maximum and the sum of its exponentials, rescaled as the maximum grows.
        m = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
        total = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for start in range(0, seq_k, BLOCK_N):
            s = _attention_scores(
                q, k_ptr, start, seq_k, head_dim, scale, stride_kn, stride_kd, BLOCK_N, BLOCK_D, DOT_FP32
            )
            m_new = tl.maximum(m, tl.max(s, axis=1))
            total = total * tl.exp(m - m_new) + tl.sum(tl.exp(s - m_new[:, None]), axis=1)
            m = m_new
        # Second walk: the scores again, written as probabilities.
        inv = 1.0 / total
        for start in range(0, seq_k, BLOCK_N):
            s = _attention_scores(
                q, k_ptr, start, seq_k, head_dim, scale, stride_kn, stride_kd, BLOCK_N, BLOCK_D, DOT_FP32
            )
            p = tl.exp(s - m[:, None]) * inv[:, None]
            cols = start + tl.arange(0, BLOCK_N)
            keep = row_mask & (cols < seq_k)[None, :]
            tl.store(out_ptrs + cols[None, :], p.to(out_ptr.dtype.element_ty), mask=keep)
"""

# On CUDA the kernel is tuned per size over its blocks, warps and pipeline stages, keyed on the
# sequence lengths rounded up to powers of two and D. Four configs: each is compiled again in every
# runner that checks the kernel. Compiled for sm_90 at D = 64 (float32 tiles: tf32x3 products),
# these spill 0, 0, 1 and 26 registers to local memory and compile in 2.5 to 4.6 s each; blocks of 64
# keys at three stages spilled 80 to 246 (others up to 2,927) and took 7 to 11 s. Under the Triton
# interpreter, where timing settings means nothing, a plain launch with blocks as large as the sizes
# allow (numpy multiplies a whole tile at once).
_LAUNCH = '''
{name}_autotuned = triton.autotune(
    configs=[
        triton.Config({{"BLOCK_M": m, "BLOCK_N": n}}, num_warps=w, num_stages=s)
        for m, n, w, s in ((128, 32, 8, 3), (128, 32, 8, 2), (64, 32, 4, 2), (128, 64, 8, 1))
    ],
    key=["SQ_BUCKET", "SK_BUCKET", "head_dim"],
)({name})


def _attention_launch_config(batch_heads, seq_q, seq_k, head_dim, on_cuda):
    """(kernel, grid, settings) for one program per batch, head and block of BLOCK_M query rows."""
    block_d = max(16, triton.next_power_of_2(head_dim))
    buckets = {{"SQ_BUCKET": triton.next_power_of_2(seq_q), "SK_BUCKET": triton.next_power_of_2(seq_k)}}
    if on_cuda and isinstance({name}, triton.JITFunction):
        grid = lambda meta: (batch_heads, triton.cdiv(seq_q, meta["BLOCK_M"]))
        return {name}_autotuned, grid, {{"BLOCK_D": block_d, "DOT_FP32": False, **buckets}}
    block_m = min(64, max(16, triton.next_power_of_2(seq_q)))
    block_n = min(128, max(16, triton.next_power_of_2(seq_k)))
    config = {{"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_D": block_d, "DOT_FP32": True, **buckets}}
    return {name}, (batch_heads, triton.cdiv(seq_q, block_m)), config
'''


def _op(name: str) -> tuple[str, str]:
    """(the op's source, its name): the launch over q and k of shape [B, H, S, D] or [B, S, D]."""
    op = name.removesuffix("_kernel")
    prep = [
        "    seq_q, seq_k = q.shape[-2], k.shape[-2]",
        "    out = torch.empty((*q.shape[:-1], seq_k), dtype=q.dtype, device=q.device)",
    ]
    body = [
        *prep,
        "    if out.numel() == 0:",
        "        return out",
        "    q4 = q if q.dim() == 4 else q.unsqueeze(1)",
        "    k4 = k if k.dim() == 4 else k.unsqueeze(1)",
        "    batch, heads, _, head_dim = q4.shape",
        "    bh = batch * heads",
        "    kernel, grid, config = _attention_launch_config(bh, seq_q, seq_k, head_dim, q.is_cuda)",
        "    kernel[grid](",
        "        q4, k4, out, heads, seq_q, seq_k, head_dim, scale,",
        "        q4.stride(0), q4.stride(1), q4.stride(2), q4.stride(3),",
        "        k4.stride(0), k4.stride(1), k4.stride(2), k4.stride(3),",
        "        **config,",
        "    )",
        "    return out",
    ]
    params = [("q", "torch.Tensor"), ("k", "torch.Tensor"), ("scale", "float")]
    return op_source(op, params, "torch.Tensor", body, [*prep, "    return out"]), op


def render_module(
    problem: Problem, trace: dict[str, Any], backward: bool = True
) -> tuple[str, str, str | None]:
    """(source, kernel name, None: no backward) for traced attention probabilities."""
    del backward  # forward only: under autograd the suggestion keeps the original computation
    require_direct(problem.class_name, trace)
    graph = _Attention(trace)
    graph.read()
    q, k = graph.q, graph.k  # forward arguments: the trace's placeholders
    if "scale" in graph.inputs.values():
        raise Unsupported("forward takes an argument named 'scale', which the kernel's launch uses")
    parts = class_parts(problem.source, problem.class_name)
    name = "_attention_probs_fwd_kernel"
    op_text, op = _op(name)
    checks = [(check.format(q=q, k=k), why) for check, why in _GUARDS]
    guards = Kernel([], q, guards=[*read_guards(trace), *checks])
    scale = "1.0"
    for how, expr in graph.scale:
        scale = f"{scale} {how} {expr}"
    forward = [f"def forward({parts.signature}){parts.returns}:", *guard_lines(guards)]
    forward.append(f"    scale = float({scale})")
    forward += wrap(f"return {op}", [q, k, "scale"], "    ")
    doc = (
        f'"""{problem.class_name} as one Triton kernel, {name} (the scores of a block of query rows '
        "against every key,\nnormalized and written once). Each launch is a custom op, so "
        "torch.compile(fullgraph=True) takes the module as it is.\nNo backward: under autograd the "
        'original computation runs."""'
    )
    blocks = [_KERNEL.format(name=name), _LAUNCH.format(name=name), op_text]
    return module_source(problem.class_name, parts, doc, blocks, forward, scale), name, None


def module_source(
    class_name: str, parts: ClassParts, doc: str, blocks: list[str], forward: list[str], scale: str
) -> str:
    """The module of an attention kernel (``custom_op_module``), with ``import math`` first where the
    scale's expression uses it and the file does not import it."""
    if "math." in scale and "import math" not in parts.context:
        blocks = ["import math", *blocks]
    return custom_op_module(class_name, parts, doc, blocks, forward)


def candidate(problem: Problem, trace: dict[str, Any], generator: str) -> Candidate:
    return custom_op_candidate(render_module, problem, trace, generator, "attention probabilities")
