#!/usr/bin/env python3
"""The PyTorch eager reference for aebench's megatron-lm engine: the same Megatron GPT
(learned positions, pre-LayerNorm, fused QKV, causal softmax attention, 4h GELU-tanh MLP,
final LayerNorm, head tied to the token embedding), every layer checkpointed (--recompute full,
the default; selective: torch.utils.checkpoint's selective policy saving every GEMM's output
and recomputing the rest, attention and GELU included, as aebench's --recompute selective;
none: no checkpointing), fused AdamW with the artifact's hyper-parameters and global-norm
clipping at 1.0; --compile: the model under torch.compile.

Prints one JSON line per configuration:
  {"impl": "pytorch" | "pytorch-compile", "layers": .., "math": "tf32|fp32|bf16",
   "recompute": .., "ms": median ms/iteration, "samples_per_s": .., "peak_bytes": ..}

Usage: pytorch_gpt.py --layers 16 --hidden 2048 --heads 16 --seq 1024 --batch 4 \
                      --math tf32 --iters 12
Under torchrun (WORLD_SIZE > 1) it trains with DistributedDataParallel over NCCL, one GPU
per process, --batch per GPU (its bucketed all-reduce overlaps the backward, as a user
would run it); rank 0 prints the line, with "world" and samples/s over all GPUs.
"""
import argparse
import functools
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, h, heads, layers):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h, eps=1e-5)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h, eps=1e-5)
        self.fc = nn.Linear(h, 4 * h)
        self.fcproj = nn.Linear(4 * h, h)
        for lin, std in ((self.qkv, 0.02), (self.fc, 0.02),
                         (self.proj, 0.02 / math.sqrt(2 * layers)),
                         (self.fcproj, 0.02 / math.sqrt(2 * layers))):
            nn.init.normal_(lin.weight, 0.0, std)
            nn.init.zeros_(lin.bias)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        # The fastest attention PyTorch offers (flash / memory-efficient), as a user would.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


# --recompute selective: save what the GEMMs produce, recompute everything else (LayerNorms,
# attention, GELU, casts) in the backward
GEMM_OPS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}


def selective_policy(ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy
    return CheckpointPolicy.MUST_SAVE if op in GEMM_OPS else CheckpointPolicy.PREFER_RECOMPUTE


class GPT(nn.Module):
    def __init__(self, layers, h, heads, seq, vocab, recompute="full"):
        super().__init__()
        self.recompute = recompute
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(seq, h)
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        self.blocks = nn.ModuleList(Block(h, heads, layers) for _ in range(layers))
        self.lnf = nn.LayerNorm(h, eps=1e-5)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            if self.recompute == "none":
                x = b(x)
            elif self.recompute == "selective":
                from torch.utils.checkpoint import create_selective_checkpoint_contexts
                x = checkpoint(b, x, use_reentrant=False,
                               context_fn=functools.partial(create_selective_checkpoint_contexts, selective_policy))
            else:
                x = checkpoint(b, x, use_reentrant=False)
        logits = F.linear(self.lnf(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--math", choices=["tf32", "fp32", "bf16"], default="tf32")
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--recompute", choices=["full", "selective", "none"], default="full")
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = a.math in ("tf32", "bf16")
    torch.backends.cudnn.allow_tf32 = a.math in ("tf32", "bf16")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        torch.distributed.init_process_group("nccl")
    torch.manual_seed(1234)
    dev = torch.device("cuda")
    if a.recompute == "selective":
        try:  # (PyTorch >= 2.4)
            from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts  # noqa: F401
        except ImportError as e:
            print(json.dumps({"impl": "pytorch", "recompute": "selective", "layers": a.layers, "math": a.math,
                              "torch": torch.__version__, "error": f"no selective checkpointing here: {e}"}), flush=True)
            return
    model = GPT(a.layers, a.hidden, a.heads, a.seq, a.vocab, a.recompute).to(dev)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    step_model = torch.compile(model) if a.compile else model
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1.5e-4, betas=(0.9, 0.999), eps=1e-8, fused=True)
    torch.manual_seed(1234 + rank)  # each rank its own rows
    idx = torch.randint(0, 50257, (a.batch, a.seq + 1), device=dev)
    x, y = idx[:, :-1].contiguous(), idx[:, 1:].contiguous()

    times = []
    torch.cuda.reset_peak_memory_stats()
    for it in range(a.iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.math == "bf16"):
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    steady = sorted(times[2:]) if len(times) > 3 else sorted(times)
    ms = steady[len(steady) // 2]
    if rank == 0:
        impl = ("pytorch" if world == 1 else "pytorch-ddp") + ("-compile" if a.compile else "")
        print(json.dumps({"impl": impl, "recompute": a.recompute,
                          "torch": torch.__version__, "layers": a.layers, "world": world,
                          "hidden": a.hidden, "batch": a.batch, "seq": a.seq, "math": a.math,
                          "ms": round(ms, 2),
                          "samples_per_s": round(world * a.batch * 1000.0 / ms, 3),
                          "peak_bytes": torch.cuda.max_memory_allocated(),
                          "loss_last": float(loss)}), flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
