"""The MoE layer in torch (the math of `fp8check.references.moe`) around any
differentiable grouped matmul: the Triton family's (`fp8check.layers.moe.matmuls`) or a
user's torch kernels (`fp8check.layers.moe.user`).

Precision contract (what the float64 straight-through reference mirrors): router logits,
softmax and combine weights in float32; x, x_perm, both GMM outputs and the SiLU-GLU
activation stored in bf16; the combine accumulates in float32 and `out` is float32.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from fp8check.references.moe import MoEInputs, MoEOutputs

# A differentiable grouped matmul: (x [M, K], w [G, K, N], group_sizes [G]) -> [M, N] bf16.
GroupedMatmul = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def moe_layer(x: torch.Tensor, w_router: torch.Tensor, router_bias: torch.Tensor,
              wi: torch.Tensor, wo: torch.Tensor, *, top_k: int,
              gmm: GroupedMatmul) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [T, D] float32, group_sizes [E] int32) of the MoE layer on x [T, D] bf16.

    w_router [D, E], router_bias [E] (constant), wi [E, D, 2F], wo [E, F, D] float32;
    `gmm` runs both expert matmuls.  Differentiable in x and the three weights.
    """
    t = x.shape[0]
    num_experts = w_router.shape[1]
    logits = x.float() @ w_router + router_bias.detach()
    probs = torch.softmax(logits, dim=1)
    p_sel, experts = torch.topk(probs, top_k, dim=1)
    weights = p_sel / p_sel.sum(dim=1, keepdim=True)
    flat = experts.reshape(-1)
    # Stable sort: pairs of one expert stay in (token, slot) order, as in the reference.
    order = torch.argsort(flat, stable=True)
    group_sizes = torch.bincount(flat, minlength=num_experts).to(torch.int32)
    x_perm = x[order // top_k].contiguous()
    h = gmm(x_perm, wi, group_sizes)
    f = wi.shape[2] // 2
    act = (torch.nn.functional.silu(h[:, :f].float()) * h[:, f:].float()).to(torch.bfloat16)
    y_perm = gmm(act.contiguous(), wo, group_sizes)
    inverse = torch.argsort(order)
    y_pairs = y_perm[inverse].reshape(t, top_k, -1).float()
    out = torch.einsum("tk,tkd->td", weights, y_pairs)
    return out, group_sizes


def run_moe(inp: MoEInputs, gmm: GroupedMatmul) -> MoEOutputs:
    """Forward and the gradients of sum(out * dy) of `moe_layer` on `inp`, as numpy."""
    x = torch.tensor(inp.x).to(torch.bfloat16).requires_grad_()
    w_r, wi, wo = (torch.tensor(a).requires_grad_() for a in (inp.w_router, inp.wi, inp.wo))
    out, gs = moe_layer(x, w_r, torch.tensor(inp.router_bias), wi, wo, top_k=inp.top_k,
                        gmm=gmm)
    dx, d_router, d_wi, d_wo = torch.autograd.grad(out, (x, w_r, wi, wo),
                                                   torch.tensor(inp.dy))
    return MoEOutputs(out=out.detach().numpy(), dx=dx.float().numpy(),
                      d_router=d_router.numpy(), d_wi=d_wi.numpy(), d_wo=d_wo.numpy(),
                      group_sizes=gs.numpy().astype(np.int32))

