"""What normalize writes into a candidate: local replacements for Inductor's helpers.

Real code, linted and type-checked like the rest, and never imported: normalize
(``runners/normalize.py``) reads this file as text and copies each function it needs,
by name and byte for byte, into the candidate it rewrites, renaming ``torch``,
``triton`` and ``tl`` to the candidate's own aliases for them (and ``_kz_grid`` /
``_kz_reinterpret_tensor`` to ``grid`` / ``reinterpret_tensor`` where the candidate
calls them by those names). Each function stands alone but for the ``_kz_`` helpers
it calls, which normalize copies with it.
"""

import torch
import triton
import triton.language as tl


def _kz_device_of(*objs):
    """The device of the first tensor in objs (searching lists, tuples, dicts and a module's
    parameters and buffers); with none, CUDA if available, else the CPU. Replaces Inductor's
    hard-coded cuda:0, so the code runs where its inputs are."""
    found = _kz_find_device(objs)
    if found is not None:
        return found
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _kz_find_device(objs):
    for obj in objs:
        if isinstance(obj, torch.Tensor):
            return obj.device
        if isinstance(obj, torch.nn.Module):
            inner = list(obj.parameters()) + list(obj.buffers())
        elif isinstance(obj, dict):
            inner = list(obj.values())
        elif isinstance(obj, (list, tuple)):
            inner = obj
        else:
            continue
        found = _kz_find_device(inner)
        if found is not None:
            return found
    return None


def _kz_grid(*numels):
    """Inductor's launch grid: grid(xnumel), grid(ynumel, xnumel) or grid(znumel, ynumel, xnumel)
    (the last numel is x). Returns a function of the launch's meta-parameters, one program per
    XBLOCK (YBLOCK, ZBLOCK) elements, as kernel[grid(n)](..., XBLOCK=...) expects."""
    xnumel = numels[-1]
    ynumel = numels[-2] if len(numels) > 1 else None
    znumel = numels[-3] if len(numels) > 2 else None

    def dim(numel, block):
        if numel is None:
            return 1
        if block is None:
            return numel
        return -(-numel // block)

    def grid_fn(meta):
        x = dim(xnumel, meta.get("XBLOCK", 1))
        y = dim(ynumel, meta.get("YBLOCK", None))
        if znumel is None:
            z = -(-y // 65535)  # as Inductor: a y grid over the CUDA limit spills into z
            y = -(-y // z)
        else:
            z = dim(znumel, meta.get("ZBLOCK", None))
        return (x, y, z)

    return grid_fn


def _kz_reinterpret_tensor(tensor, size, stride, offset=0):
    """Inductor's reinterpret_tensor: a view of tensor's storage with this size and stride,
    offset (in elements) from the tensor's own storage offset."""
    return torch.as_strided(tensor, size, stride, tensor.storage_offset() + offset)


@triton.jit
def _kz_tanh(x):
    return 2 * tl.sigmoid(2 * x) - 1


@triton.jit
def _kz_log1p(x):
    u = 1.0 + x
    ratio = x / (u - 1.0)
    return tl.where(u == 1.0, x, tl.where(u == float("inf"), u, tl.log(u) * ratio))


@triton.jit
def _kz_expm1(x):
    u = tl.exp(x)
    ratio = x / tl.log(u)
    edge = (u - 1.0 == -1.0) | (u == float("inf"))
    return tl.where(u == 1.0, x, tl.where(edge, u - 1.0, (u - 1.0) * ratio))


@triton.jit
def _kz_sinh(x):
    return 0.5 * (tl.exp(x) - tl.exp(-x))


@triton.jit
def _kz_cosh(x):
    return 0.5 * (tl.exp(x) + tl.exp(-x))


@triton.jit
def _kz_tan(x):
    return tl.sin(x) / tl.cos(x)


@triton.jit
def _kz_log10(x):
    return tl.log(x) * 0.4342944819032518


@triton.jit
def _kz_isnan(x):
    return x != x


@triton.jit
def _kz_isinf(x):
    return tl.abs(x) == float("inf")


@triton.jit
def _kz_trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def _kz_sqrt_rn(x):
    if x.dtype == tl.float32:
        return tl.sqrt_rn(x)
    else:
        return tl.sqrt(x)


# Copies of torch._inductor.runtime.triton_helpers (BSD-3-Clause, PyTorch contributors).


@triton.jit
def _kz_welford_reduce(value, mean, m2, weight, first_iteration):
    if first_iteration:
        new_weight = tl.full(weight.shape, 1, weight.dtype)
        new_mean = value
        new_m2 = tl.zeros_like(m2)
    else:
        delta = value - mean
        new_weight = weight + 1
        new_mean = mean + delta / new_weight
        new_m2 = m2 + delta * (value - new_mean)
    return new_mean, new_m2, new_weight


@triton.jit
def _kz_welford_combine(mean_1, m2_1, weight_1, mean_2, m2_2, weight_2):
    delta = tl.where(mean_1 == mean_2, 0.0, mean_2 - mean_1)
    new_weight = weight_1 + weight_2
    w2_over_w = tl.where(new_weight == 0.0, 0.0, weight_2 / new_weight)
    return (
        mean_1 + delta * w2_over_w,
        m2_1 + m2_2 + delta * delta * weight_1 * w2_over_w,
        new_weight,
    )


@triton.jit
def _kz_welford(mean, m2, weight, dim):
    return tl.reduce((mean, m2, weight), dim, _kz_welford_combine)


@triton.jit
def _kz_maximum_with_index(a_value, a_index, b_value, b_index):
    mask = a_value > b_value
    equal = a_value == b_value
    if a_value.dtype.is_floating():
        a_isnan = a_value != a_value
        b_isnan = b_value != b_value
        mask |= a_isnan & ~b_isnan
        equal |= a_isnan & b_isnan
    mask |= equal & (a_index < b_index)
    return tl.where(mask, a_value, b_value), tl.where(mask, a_index, b_index)


@triton.jit
def _kz_minimum_with_index(a_value, a_index, b_value, b_index):
    mask = a_value < b_value
    equal = a_value == b_value
    if a_value.dtype.is_floating():
        a_isnan = a_value != a_value
        b_isnan = b_value != b_value
        mask |= a_isnan & ~b_isnan
        equal |= a_isnan & b_isnan
    mask |= equal & (a_index < b_index)
    return tl.where(mask, a_value, b_value), tl.where(mask, a_index, b_index)


@triton.jit
def _kz_max_with_index(value, index, dim):
    return tl.reduce((value, index), dim, _kz_maximum_with_index)


@triton.jit
def _kz_min_with_index(value, index, dim):
    return tl.reduce((value, index), dim, _kz_minimum_with_index)


@triton.jit
def _kz_any_combine(a, b):
    return a | b


@triton.jit
def _kz_any(a, dim):
    return tl.reduce(a, dim, _kz_any_combine)


@triton.jit
def _kz_prod_accumulate(a, b):
    return a * b


@triton.jit
def _kz_prod(input, axis):
    return tl.reduce(input, axis, _kz_prod_accumulate)


@triton.jit
def _kz_div_floor_integer(a, b):
    quot = a // b
    remainder = a % b
    fixed = tl.where(remainder != 0, quot - 1, quot)
    return tl.where((a < 0) != (b < 0), fixed, quot)


@triton.jit
def _kz_remainder_integer(a, b):
    remainder = a % b
    return tl.where((remainder != 0) & ((a < 0) != (b < 0)), remainder + b, remainder)
