"""The one tolerance policy of tritonfuzz: every allowed error in the suite comes from here.

Two kinds of tolerance live side by side and must not be confused:

- `judge_tolerance(dtype)`: what the competition's judge uses (torch.testing.assert_close after a
  float32 cast, equal_nan off). Published per dtype by the competition; each op's contract
  (oracles/ops/<op>.py) says which one its official test applies.
- the accuracy bound: |kernel - oracle64| <= ulp(out dtype, |oracle|) + a float32 rounding bound
  that each op derives from the case's own magnitudes (see oracles/<op>.py). The constants
  below are the building blocks of those derivations.
"""

from __future__ import annotations

import math

import torch

# Published judge tolerances (atol, rtol): float32 1e-4, bfloat16 1.5e-2, float16 1e-2 (which one each
# op's official test applies: its contract, oracles/ops/<op>.py).
JUDGE_TOLERANCE = {
    torch.float32: (1e-4, 1e-4),
    torch.bfloat16: (1.5e-2, 1.5e-2),
    torch.float16: (1e-2, 1e-2),
}


# KernelBench's correctness check (its eval's run_and_check_correctness): torch.allclose(out, ref,
# atol, rtol) with one (atol, rtol) for every dtype. Used by oracles/tools/power.py's baseline only.
KERNELBENCH_TOLERANCE = (1e-2, 1e-2)


def judge_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    try:
        return JUDGE_TOLERANCE[dtype]
    except KeyError:
        raise ValueError(f"dtype: the judge publishes no tolerance for {dtype}; "
                         f"expected one of {sorted(map(str, JUDGE_TOLERANCE))}") from None


# Unit roundoff of float32 arithmetic (round to nearest): |fl(a op b) - (a op b)| <= U32 |a op b|.
U32 = 2.0 ** -24
# Smallest normal float32. GPUs may flush float32 subnormals to zero (FTZ) and a sigmoid
# computed as 1/(1+exp(-z)) returns 0 once exp overflows (z < -88.7, true value < FLT_MIN):
# each such event moves a value by less than FLT32_TINY, so bounds add it per affected term.
FLT32_TINY = torch.finfo(torch.float32).tiny
FLT32_MAX = torch.finfo(torch.float32).max
# Spacing of the float32 subnormals (the smallest positive float32): a result in the subnormal
# range rounds to a multiple of it, an absolute error up to half of it that no relative bound covers.
SUBNORMAL_STEP = 2.0 ** -149

# Approximate operations, in units of U32 on their result (GPU libdevice / PTX approx ops):
# rsqrt.approx and sqrt+div are within 2 ulp; we allow 4. ex2.approx is within 2 ulp after the
# argument is scaled by log2(e) (added separately: EXP_ARG_ULPS).
RSQRT_ULPS = 4.0
EXP_ULPS = 4.0
# exp(x) on a GPU is ex2.approx(x * log2(e)) with log2(e) a float32 constant (Triton's tl.exp,
# CUDA's __expf). The product's rounding (u) and the constant's own (float32 log2(e) is 0.224 u
# below the true one, relatively) move the exponent by |x| log2(e) (1 + 0.224) u: a relative
# error of EXP_ARG_ULPS |x| u on the result, before ex2's own. With |x| u alone the bound was
# unsound: sigmoid(-44.52) so computed is 54.3 u from the exact value, even with an exact ex2.
EXP_ARG_ULPS = 1.0 + abs(float(torch.tensor(math.log2(math.e), dtype=torch.float32)) / math.log2(math.e) - 1.0) / U32
# Division and the sigmoid's add/reciprocal: 2 roundings; allow 4.
DIV_ULPS = 4.0


def gamma(n) -> "torch.Tensor | float":
    """Higham's gamma_n = n u / (1 - n u): relative bound of a float32 sum of n terms, any order."""
    return n * U32 / (1 - n * U32)


# Mantissa bits (explicit) and exponent of the smallest normal, per output dtype.
_FORMATS = {
    torch.float32: (23, -126),
    torch.bfloat16: (7, -126),
    torch.float16: (10, -14),
    torch.float64: (52, -1022),
}


def ulp(magnitude: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of `dtype` at |magnitude| (float64 in, float64 out); subnormal spacing near 0."""
    mantissa, emin = _FORMATS[dtype]
    m = magnitude.abs().double()
    _, exponent = torch.frexp(m)  # m = f * 2**exponent with f in [0.5, 1)
    exponent = torch.clamp(exponent.double() - 1, min=emin)
    return torch.exp2(exponent - mantissa)


def overflow_threshold(dtype: torch.dtype) -> float:
    """Smallest magnitude that rounds to infinity when cast to `dtype` (round to nearest even)."""
    mantissa, _ = _FORMATS[dtype]
    return float(torch.finfo(dtype).max) * (1 + 2.0 ** -(mantissa + 1))
