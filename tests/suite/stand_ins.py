"""Kernel modules the self-tests write into a temporary folder and gate: the task's PyTorch
reference, copied out by one Triton kernel, after a `body` that plants a bug or a refusal.

Without a body the module is correct by construction, and the copy is a launch the `launch` and
`poison` checks see. It is cheap: one copy kernel of one block size, where the bundled hc_head
is a slow launch in the CPU interpreter and Hypothesis's shrinking launches it a hundred times per
bug (most of the severities gate's time: tests/results/2026-12-06-session19.md).
The tests that use these are about the gate's plumbing and verdicts, which come from the body;
the bundled kernels themselves are judged by tests/kernel and tests/suite/test_mutants.py.
"""
import textwrap

COPY_BLOCK = 16384


def hc_head_over_the_reference(body: str = "") -> str:
    """The module's source: `body` (indented into hc_head, before the reference runs), then the
    reference and the copy."""
    head = textwrap.dedent('''
        import torch
        import triton
        import triton.language as tl

        from oracles.ops.hc_head import reference


        @triton.jit
        def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


        def hc_head(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    ''')
    tail = textwrap.dedent(f'''
        y = reference(x=x, hc_fn=hc_fn, hc_scale=hc_scale, hc_base=hc_base, norm_eps=norm_eps, hc_eps=hc_eps)
        out = torch.empty_like(y)
        _copy[(max(1, triton.cdiv(y.numel(), {COPY_BLOCK})),)](y, out, y.numel(), BLOCK={COPY_BLOCK})
        return out
    ''')
    return head + textwrap.indent(textwrap.dedent(body), "    ") + textwrap.indent(tail, "    ")
