"""What the template knows about ops: the kinds of value a graph node can be inside a kernel, how
each spelling of an op names its arguments, and the Triton expression each op becomes.

Plain tables and no logic: the lowering (``lowering.py``) reads them to turn graph nodes into kernel
statements, the emission (``emit.py``) to write the row reductions, and the matrix products
(``products.py``) to spell the ops of their epilogues.
"""

from __future__ import annotations

# Kinds of value, by how they broadcast against the input's shape S.
FULL = "full"  # shape S
COL = "col"  # a row vector of S[-1] elements (a bias), broadcast along the last dimension
CHANNEL = "channel"  # a vector of S[1] elements (batch norm's statistics), broadcast along dimension 1
ROW = "row"  # one value per row, shape S[:-1] + [1] (a keepdim reduction)
ROW_FLAT = "row_flat"  # one value per row, shape S[:-1]
SCALAR = "scalar"  # a Python number, literal or read from the module at call time
OTHER = "other"  # a tensor of any other shape
DTYPE = "dtype"  # ``x.dtype``
PAIR = "pair"  # ``x.max(dim)``: (values, indices)
SPLIT = "split"  # an input whose last dimension holds two halves (``a, b = x.chunk(2, dim=-1)``)
HALVES = "halves"  # ``x.chunk(2, dim=-1)`` itself: its items are taken with ``[0]`` and ``[1]``
SHAPE = "shape"  # ``x.shape`` (a forward expression)
SIZE = "size"  # ``x.shape[-1]``, ``x.size(-1) // 2``: a number computed from a shape (a forward expression)
BCAST = (
    "bcast"  # a tensor that broadcasts against S otherwise (``[B, 1, 1, T]``, ``[H, 1, 1]``): read by strides
)
INDEX = "index"  # an integer input (class indices), read only by the ops that take it as such
TOTAL = (
    "total"  # one number over every element (a loss's mean): the kernel's per-row sums, added up in forward
)
# ``torch.arange(n)`` of an input's size, and its views with dimensions of 1 added (``pos[None, :]``): index
# coordinates, not yet placed; an operand becomes the coordinate of the dimension of S it lines up with
POSITIONS = "positions"
DEVICE = "device"  # ``x.device``: only ever a ``device=`` argument (the kernel runs on the input's device)
# shape S[:-1] + [S[-1] / 2] in a kernel over the whole width: at each column, its half's value at that
# column mod S[-1] / 2 (rotary's ``x[..., :n]`` and ``x[..., n:]``, put back together at full width)
HALF = "half"

# ---------------------------------------------------------------------------
# Op tables

# How each spelling names its arguments: target -> (op, parameter names, in order).
SPELLINGS: dict[str, tuple[str, tuple[str, ...]]] = {}


def _spell(op: str, params: tuple[str, ...], *targets: str) -> None:
    for target in targets:
        SPELLINGS[target] = (op, params)


def _torch_and_method(name: str) -> tuple[str, str]:
    return f"torch.{name}", f"Tensor.{name}"


_BINARY_PARAMS = ("input", "other")
for _op, _operator in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "truediv")):
    _spell(_op, _BINARY_PARAMS, f"operator.{_operator}", *_torch_and_method(_op))
    _spell(_op + "_", _BINARY_PARAMS, f"operator.i{_operator}", f"Tensor.{_op}_")
_spell("sub", _BINARY_PARAMS, "torch.subtract")
_spell("mul", _BINARY_PARAMS, "torch.multiply")
_spell("div", _BINARY_PARAMS, "torch.true_divide", "torch.divide")
_spell("rsub", _BINARY_PARAMS, *_torch_and_method("rsub"))
for _op in ("gt", "lt", "ge", "le", "eq", "ne"):
    _spell(_op, _BINARY_PARAMS, f"operator.{_op}", *_torch_and_method(_op))
for _op in ("maximum", "minimum"):
    _spell(_op, _BINARY_PARAMS, *_torch_and_method(_op))
for _op in ("neg", "abs"):
    _spell(_op, ("input",), f"operator.{_op}", *_torch_and_method(_op), f"Tensor.{_op}_")
_spell("abs", ("input",), "builtins.abs")
for _op in ("exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "relu"):
    _spell(_op, ("input",), *_torch_and_method(_op))
    _spell(_op + "_", ("input",), f"Tensor.{_op}_")
_spell("sigmoid", ("input",), "torch.nn.functional.sigmoid", "nn.Sigmoid")
_spell("tanh", ("input",), "torch.nn.functional.tanh", "nn.Tanh")
_spell("relu", ("input", "inplace"), "torch.nn.functional.relu", "nn.ReLU")
_spell("silu", ("input", "inplace"), "torch.nn.functional.silu", "nn.SiLU")
_spell("gelu", ("input", "approximate"), "torch.nn.functional.gelu", "nn.GELU")
for _op in ("erf", "square", "cos", "sin"):
    _spell(_op, ("input",), *_torch_and_method(_op))
_spell("erf", ("input",), "torch.special.erf")
_spell("mish", ("input", "inplace"), "torch.nn.functional.mish", "nn.Mish")
_spell("softplus", ("input", "beta", "threshold"), "torch.nn.functional.softplus", "nn.Softplus")
_spell("pow", ("input", "exponent"), "operator.pow", *_torch_and_method("pow"))
_spell("clamp", ("input", "min", "max"), *_torch_and_method("clamp"), *_torch_and_method("clip"))
_spell("clamp_min", ("input", "min"), *_torch_and_method("clamp_min"))
_spell("clamp_max", ("input", "max"), *_torch_and_method("clamp_max"))
_spell("where", ("condition", "input", "other"), "torch.where")
_spell("masked_fill", ("input", "mask", "value"), *_torch_and_method("masked_fill"))
_spell("invert", ("input",), "operator.invert", *_torch_and_method("logical_not"), "Tensor.bitwise_not")
_spell("where", ("input", "condition", "other"), "Tensor.where")
for _op in ("float", "half", "bfloat16"):
    _spell(_op, ("input",), f"Tensor.{_op}")
_spell("to", ("input", "dtype"), "Tensor.to", "Tensor.type")
_spell("type_as", ("input", "other"), "Tensor.type_as")
for _op in ("contiguous", "clone", "detach"):
    _spell("identity", ("input",), f"Tensor.{_op}")
_spell("identity", ("input",), "torch.clone", "torch.detach", "nn.Identity")
_spell("dropout", ("input", "p", "training", "inplace"), "torch.nn.functional.dropout", "nn.Dropout")
for _op in ("sum", "mean"):
    _spell(_op, ("input", "dim", "keepdim", "dtype"), *_torch_and_method(_op))
for _op in ("amax", "amin"):
    _spell(_op, ("input", "dim", "keepdim"), *_torch_and_method(_op))
for _op in ("max", "min"):
    _spell(_op, ("input", "dim", "keepdim"), *_torch_and_method(_op))
for _op in ("var", "std"):
    _spell(_op, ("input", "dim", "unbiased", "keepdim", "correction"), *_torch_and_method(_op))
for _op in ("softmax", "log_softmax"):
    _spell(_op, ("input", "dim", "dtype"), *_torch_and_method(_op))
    _spell(_op, ("input", "dim", "_stacklevel", "dtype"), f"torch.nn.functional.{_op}")
_spell("logsumexp", ("input", "dim", "keepdim"), *_torch_and_method("logsumexp"))
_spell("softmax", ("input", "dim"), "nn.Softmax")
_spell("log_softmax", ("input", "dim"), "nn.LogSoftmax")
_spell(
    "layer_norm",
    ("input", "normalized_shape", "weight", "bias", "eps"),
    "torch.nn.functional.layer_norm",
    "torch.layer_norm",
    "nn.LayerNorm",
)
_spell(
    "rms_norm",
    ("input", "normalized_shape", "weight", "eps"),
    "torch.nn.functional.rms_norm",
    "torch.rms_norm",
    "nn.RMSNorm",
)
_spell(
    "group_norm",
    ("input", "num_groups", "weight", "bias", "eps"),
    "torch.nn.functional.group_norm",
    "nn.GroupNorm",
)
# Losses: nn.MSELoss, nn.L1Loss and nn.KLDivLoss are leaves whose reduction forward reads at call time.
_LOSS_PARAMS = ("input", "target", "size_average", "reduce", "reduction")
_spell("mse_loss", (*_LOSS_PARAMS, "weight"), "torch.nn.functional.mse_loss", "nn.MSELoss")
_spell("l1_loss", _LOSS_PARAMS, "torch.nn.functional.l1_loss", "nn.L1Loss")
_spell("kl_div", (*_LOSS_PARAMS, "log_target"), "torch.nn.functional.kl_div", "nn.KLDivLoss")
_spell(
    "cross_entropy",
    ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"),
    "torch.nn.functional.cross_entropy",
)
LOSS_MODULES = ("nn.MSELoss", "nn.L1Loss", "nn.KLDivLoss")
_BATCH_NORMS = ("nn.BatchNorm1d", "nn.BatchNorm2d", "nn.BatchNorm3d")
_spell(
    "batch_norm",
    ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"),
    "torch.nn.functional.batch_norm",
    *_BATCH_NORMS,
)
# Leaves the trace describes without their settings: forward reads those at call time.
READ_AT_CALL_TIME = (*LOSS_MODULES, *_BATCH_NORMS)
_spell("getitem", ("input", "index"), "operator.getitem")
_spell("getattr", ("input", "name"), "getattr")
_spell("size", ("input", "dim"), "Tensor.size")
_spell("floordiv", ("input", "other"), "operator.floordiv")
_spell("chunk", ("input", "chunks", "dim"), *_torch_and_method("chunk"))
_spell("split", ("input", "split_size", "dim"), "Tensor.split", "torch.split", "torch.functional.split")
_spell("cat", ("tensors", "dim"), "torch.cat", "torch.concat", "torch.concatenate")
_spell(
    "arange",
    ("start", "end", "step", "out", "dtype", "layout", "device", "requires_grad", "pin_memory"),
    "torch.arange",
)

# Pointwise ops: op -> Triton expression over the operands {a}, {b}, {c} (names or literals).
UNARY = {
    "neg": "-{a}",
    "abs": "tl.abs({a})",
    "exp": "tl.exp({a})",
    "log": "tl.log({a})",
    "sqrt": "tl.sqrt({a})",
    "rsqrt": "tl.rsqrt({a})",
    "sigmoid": "tl.sigmoid({a})",
    "tanh": "_tanh_of({a})",
    "relu": "tl.maximum({a}, 0.0)",
    "silu": "{a} * tl.sigmoid({a})",
    "gelu": "0.5 * {a} * (1.0 + tl.erf({a} * 0.7071067811865476))",  # 1 / sqrt(2)
    "erf": "tl.erf({a})",
    "cos": "tl.cos({a})",
    "sin": "tl.sin({a})",
    "square": "{a} * {a}",
    # softplus with torch's defaults (beta 1, linear above 20), and mish = x * tanh(softplus(x));
    # exp of at most 20, so the branch where() leaves out never overflows (nor does its gradient)
    "softplus": "tl.where({a} > 20.0, {a}, tl.log(1.0 + tl.exp(tl.minimum({a}, 20.0))))",
    "mish": "{a} * _tanh_of(tl.where({a} > 20.0, {a}, tl.log(1.0 + tl.exp(tl.minimum({a}, 20.0)))))",
    # sqrt(2 / pi) and the cubic coefficient of the tanh approximation
    "gelu_tanh": "0.5 * {a} * (1.0 + _tanh_of(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})))",
}
BINARY = {
    "add": "{a} + {b}",
    "sub": "{a} - {b}",
    "rsub": "{b} - {a}",
    "mul": "{a} * {b}",
    "div": "{a} / {b}",
    "maximum": "tl.maximum({a}, {b})",
    "minimum": "tl.minimum({a}, {b})",
    "clamp_min": "tl.maximum({a}, {b})",
    "clamp_max": "tl.minimum({a}, {b})",
}
COMPARE = {
    "gt": "{a} > {b}",
    "lt": "{a} < {b}",
    "ge": "{a} >= {b}",
    "le": "{a} <= {b}",
    "eq": "{a} == {b}",
    "ne": "{a} != {b}",
}
# pow with these exponents is exact arithmetic; others go through exp and log.
POW = {
    0.5: "tl.sqrt({a})",
    -0.5: "tl.rsqrt({a})",
    1: "{a}",
    2: "{a} * {a}",
    3: "{a} * {a} * {a}",
    4: "{a} * {a} * {a} * {a}",
    -1: "1.0 / {a}",
    -2: "1.0 / ({a} * {a})",
}
# Row reductions: op -> (Triton reduction, the value masked-off lanes must hold).
REDUCE = {
    "sum": ("tl.sum", "0.0"),
    "max": ("tl.max", '-float("inf")'),
    "min": ("tl.min", 'float("inf")'),
}
CASTS = {"float": "float32", "half": "float16", "bfloat16": "bfloat16"}
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")


class Unsupported(Exception):
    """The graph is outside the templates; the message names the op and node."""
