"""Minimize a failing case on its concrete tensors, after Hypothesis has shrunk its draws.

Hypothesis shrinks the choices that built the case (shape, seed, which specials); the tensors
still hold a seeded random background. This pass keeps the failure and makes the case small
and readable: the op's structural moves first (fewer tokens, streams, columns; a contiguous
layout), then the values: blocks set to 0, then every value rounded to one significant digit.
Time-boxed: whatever it reached when the budget runs out is the result (always still failing).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

import torch

from strategies.case import Case, copy_preserving_layout, relayout_like


def minimize(case: Case, still_fails: Callable[[Case], bool], *,
             smaller_cases: Callable[[Case], Iterable[Case]], budget_s: float, values: bool = True) -> Case:
    """The smallest case found within `budget_s` for which `still_fails` holds: structural moves,
    then (with `values`) zeroed and rounded values."""
    deadline = time.monotonic() + budget_s
    case = _structural(case, still_fails, smaller_cases, deadline)
    if not values:
        return case
    for name, t in case.tensors().items():
        if t.is_floating_point() and t.numel():
            case = _simplify_values(case, name, still_fails, deadline)
    return case


# Past this many rows a case is cut by halves and quarters only: a GPU case carries thousands of
# bulk rows, and a move a row would cost a kernel run each.
SINGLE_ROW_MOVES_UP_TO = 64


def row_subsets(n: int):
    """Index sets that drop rows (tokens) of an n-row tensor: each half, then each quarter (n >= 8),
    then each single row (n <= SINGLE_ROW_MOVES_UP_TO). Shared by the ops' smaller_cases moves."""
    if n > 1:
        yield slice(0, n // 2)
        yield slice(n // 2, n)
        if n >= 8:
            q = n // 4
            for start in range(0, n, q):
                yield [i for i in range(n) if not start <= i < start + q]
        if n <= SINGLE_ROW_MOVES_UP_TO:
            for t in range(n):
                yield [i for i in range(n) if i != t]


def _structural(case, still_fails, smaller_cases, deadline):
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for candidate in _layout_kept_first(case, smaller_cases(case)):
            if time.monotonic() >= deadline:
                break
            if still_fails(candidate):
                case, improved = candidate, True
                break
    return case


def _layout_kept_first(case, candidates):
    """Each structural move, preceded by the same move with the strided inputs it made
    contiguous laid out as before (strategies.case.relayout_like): a bug that needs the layout
    shrinks too, instead of every smaller case losing it."""
    for candidate in candidates:
        kept = {}
        for name, t in candidate.tensors().items():
            before = case.inputs.get(name)
            if isinstance(before, torch.Tensor) and t.shape != before.shape and t.is_contiguous():
                relaid = relayout_like(t, before)
                if relaid is not None:
                    kept[name] = relaid
        if kept:
            yield candidate.with_inputs(**kept)
        yield candidate


def with_values(t: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """A copy of t in the same layout (gaps kept) holding `values` (flat, logical order)."""
    out = copy_preserving_layout(t, "cpu")
    out.copy_(values.reshape(t.shape))
    return out


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def one_significant_digit(v: torch.Tensor) -> torch.Tensor:
    """Round finite values to one significant decimal digit; specials and zeros unchanged."""
    d = v.double()
    finite = d.isfinite() & (d != 0)
    exponent = torch.floor(torch.log10(d.abs().where(finite, torch.ones_like(d))))
    scale = torch.pow(10.0, exponent)
    rounded = torch.round(d / scale) * scale
    return torch.where(finite, rounded, d).to(v.dtype)


def _simplify_values(case, name, still_fails, deadline):
    for transform in (torch.zeros_like, one_significant_digit):
        case = _chunked(case, name, transform, still_fails, deadline)
    return case


def _chunked(case, name, transform, still_fails, deadline):
    """Apply `transform` to chunks of the flat values, largest chunks first; keep what still fails."""
    n = case.inputs[name].numel()
    size = n
    while size >= max(1, n // 64) and time.monotonic() < deadline:
        for start in range(0, n, size):
            if time.monotonic() >= deadline:
                return case
            t = case.inputs[name]
            flat = t.contiguous().reshape(-1).clone()
            chunk = flat[start:start + size]
            new_chunk = transform(chunk)
            if same_bits(new_chunk, chunk):
                continue
            flat[start:start + size] = new_chunk
            candidate = case.with_inputs(**{name: with_values(t, flat)})
            if still_fails(candidate):
                case = candidate
        if size == 1:
            break
        size = max(1, size // 2)
    return case
