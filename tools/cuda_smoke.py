"""Smallest end-to-end check of the CUDA torch ops: forward and backward of one RMSNorm call."""

import torch

import tigon

print("tigon", tigon.__version__, "cuda kernels:", tigon.has_cuda_kernels())
for mode, offset in (("llama", 0.0), ("gemma", 1.0)):
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = tigon.ops.rms_norm(x, w, 1e-6, offset, mode)
    y.sum().backward()
    torch.cuda.synchronize()
    ref = tigon.ops.rms_norm(x.detach().cpu(), w.detach().cpu(), 1e-6, offset, mode)
    print(mode, "max |cuda - cpu| =", (y.detach().cpu().float() - ref.float()).abs().max().item())
