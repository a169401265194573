"""The op registry: adding an op is one line here plus one module in each of kernels/, oracles/,
strategies/ and tests/test_<op>.py.

Modules are found by convention (kernels.<op>, oracles.<op>, strategies.<op>) and imported
lazily, so that importing the registry never imports a kernel before conftest has decided
TRITON_INTERPRET.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class OpSpec:
    name: str
    params: tuple[str, ...]  # the exact signature the judge calls with keyword arguments

    @property
    def kernel_module(self) -> ModuleType:
        return importlib.import_module(f"kernels.{self.name}")

    @property
    def oracle(self) -> ModuleType:
        return importlib.import_module(f"oracles.{self.name}")

    @property
    def strategies(self) -> ModuleType:
        return importlib.import_module(f"strategies.{self.name}")


OPS: dict[str, OpSpec] = {spec.name: spec for spec in (
    OpSpec("hc_head", ("x", "hc_fn", "hc_scale", "hc_base", "norm_eps", "hc_eps")),
    OpSpec("sigmoid_gate_topk_renorm",
           ("logits", "k", "n_shared_experts", "route_scale", "global_scale", "bias")),
    OpSpec("gate_topk", ("x", "k")),
    OpSpec("moe_fused_gate", ("scores", "bias", "topk", "scoring_func", "num_fused_shared_experts", "renormalize", "routed_scaling_factor", "apply_routed_scaling_factor_on_output", "moe_softcapping", "num_expert_group", "topk_group")),
)}


def get_op(name: str) -> OpSpec:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known ops: {', '.join(sorted(OPS))}") from None
