#!/usr/bin/env python3
"""The Megatron-Core anchor (issue 49): Megatron-Core's own GPT, trained with its own schedules,
DDP and mixed-precision optimizer, at the shape and layout an aebench run has, so that the two
are timed in the same call on the same GPUs.

The model is aebench's: learned absolute positions, LayerNorm, GELU MLP of 4 h, biases, the
embedding tied to the head, vocabulary 50304, no dropout.  Megatron-Core's local PyTorch layers
(get_gpt_layer_local_spec: the GPU machines have no Transformer Engine build; with
--sequence-parallel its norms are SequenceParallelLayerNorm below), bf16 params in
Megatron's Float16Module with its Float16 optimizer (fp32 master weights and Adam state), the
gradient all-reduce overlapped with the backward (its DDP), clip 1.0, the 1F1B schedule with
--pp.  --recompute full is Megatron's "full, uniform, 1 layer": each layer recomputed from its
input, as aebench's full.

Run under torchrun, one process per GPU, with megatron/core on PYTHONPATH (the megatron-core
package at the tag core_v0.19.0; bench/mcore_gpu.sh carries it):
  python3 -m torch.distributed.run --nproc_per_node 2 bench/mcore_gpu.py --tp 2 -l 32 -h 2048 ...
Prints one JSON line on rank 0: the median step over the timed iterations, samples/s, and
every rank's peak GPU memory.
"""
import argparse
import dataclasses
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.torch_norm import WrappedTorchNorm
from megatron.core.transformer.transformer_config import TransformerConfig
import megatron.core.transformer.transformer_block as transformer_block


class SequenceParallelLayerNorm(torch.nn.LayerNorm):
    """torch's LayerNorm for Megatron-Core's --sequence-parallel, which its WrappedTorchNorm
    refuses ("sequence parallel not supported by torch LayerNorm": only Transformer Engine's and
    Apex's norms mark their parameters, and the GPU machines have neither).  Each
    tensor-parallel rank normalises its own rows of the sequence, so the weight's and bias's
    gradients are partial sums: marked `sequence_parallel`, as Apex's FusedLayerNorm marks
    them, finalize_model_grads sums them over the tensor-parallel ranks."""

    def __init__(self, config, hidden_size, eps=1e-5, **unused):
        super().__init__(hidden_size, eps=eps)
        for param in (self.weight, self.bias):
            setattr(param, "sequence_parallel", bool(config.sequence_parallel))


def with_norm(spec, norm):
    """spec with every WrappedTorchNorm in its tree (a ModuleSpec's module and submodules, the
    submodules' dataclass fields) replaced by norm."""
    if spec is WrappedTorchNorm:
        return norm
    if isinstance(spec, ModuleSpec):
        spec.module = with_norm(spec.module, norm)
        spec.submodules = with_norm(spec.submodules, norm)
    elif dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        for f in dataclasses.fields(spec):
            setattr(spec, f.name, with_norm(getattr(spec, f.name), norm))
    return spec


def options():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-l", "--layers", type=int, default=32)
    p.add_argument("-H", "--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("-b", "--micro-batch", type=int, default=4)
    p.add_argument("--global-batch", type=int, default=0, help="default: micro-batch x data-parallel ranks")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--sequence-parallel", action="store_true")
    p.add_argument("--recompute", choices=("full", "selective", "none"), default="full")
    p.add_argument("--iters", type=int, default=12, help="timed iterations")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations first")
    p.add_argument("--tag", default="")
    return p.parse_args()


def main():
    a = options()
    dist.init_process_group(backend="nccl")
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=a.tp, pipeline_model_parallel_size=a.pp)
    model_parallel_cuda_manual_seed(1234)
    dp = world // (a.tp * a.pp)
    gbs = a.global_batch or a.micro_batch * dp
    if gbs % (a.micro_batch * dp):
        raise SystemExit(f"--global-batch {gbs} is not a multiple of micro-batch x {dp} data-parallel ranks")
    micro_batches = gbs // (a.micro_batch * dp)

    recompute = {"full": dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1),
                 "selective": dict(recompute_granularity="selective"), "none": {}}[a.recompute]
    config = TransformerConfig(
        num_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads, ffn_hidden_size=4 * a.hidden,
        tensor_model_parallel_size=a.tp, pipeline_model_parallel_size=a.pp,
        sequence_parallel=a.sequence_parallel and a.tp > 1, bf16=True, params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16, hidden_dropout=0.0, attention_dropout=0.0, add_bias_linear=True,
        normalization="LayerNorm", attention_softmax_in_fp32=True, **recompute)
    spec = get_gpt_layer_local_spec()
    if config.sequence_parallel:
        # (the layers' norms, and the final one, which the block takes from its module's
        # LayerNormImpl when it is built)
        spec = with_norm(spec, SequenceParallelLayerNorm)
        transformer_block.LayerNormImpl = SequenceParallelLayerNorm
    model = GPTModel(config, spec, vocab_size=a.vocab, max_sequence_length=a.seq,
                     pre_process=parallel_state.is_pipeline_first_stage(),
                     post_process=parallel_state.is_pipeline_last_stage(),
                     share_embeddings_and_output_weights=True, position_embedding_type="learned_absolute")
    model.cuda()
    model = Float16Module(config, model)
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=dp > 1,
                                               use_distributed_optimizer=False)
    model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    # (what Megatron's training loop sets: the gradient sync hooks, and the end-of-backward
    # step that finishes the reduction, sums the tied embedding's gradient between the end
    # stages and the sequence-parallel LayerNorms' over the tensor-parallel ranks)
    config.no_sync_func = model.no_sync
    config.grad_sync_func = model.start_grad_sync
    config.finalize_model_grads_func = finalize_model_grads
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-4, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.95,
                        clip_grad=1.0, bf16=True, params_dtype=torch.bfloat16, use_distributed_optimizer=False),
        [model])

    gen = torch.Generator(device="cuda").manual_seed(1 + parallel_state.get_data_parallel_rank())
    tokens = torch.randint(0, a.vocab, (micro_batches, a.micro_batch, a.seq + 1), device="cuda", generator=gen)
    position_ids = torch.arange(a.seq, device="cuda").unsqueeze(0).expand(a.micro_batch, -1)
    causal = torch.triu(torch.ones(a.seq, a.seq, dtype=torch.bool, device="cuda"), 1).view(1, 1, a.seq, a.seq)

    def batches():
        while True:
            for k in range(micro_batches):
                yield tokens[k, :, :-1], tokens[k, :, 1:]

    data = batches()

    def forward_step(data_iterator, m):
        x, y = next(data_iterator)
        out = m(x, position_ids, causal, labels=y)

        def loss_func(per_token):
            loss = per_token.float().mean()
            return loss, {"lm loss": loss.detach()}

        return out, loss_func

    fwd_bwd = get_forward_backward_func()
    steps, losses = [], []
    for it in range(a.warmup + a.iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.zero_grad_buffer()
        optimizer.zero_grad()
        out = fwd_bwd(forward_step_func=forward_step, data_iterator=data, model=[model],
                      num_microbatches=micro_batches, seq_length=a.seq, micro_batch_size=a.micro_batch,
                      forward_only=False)
        ok, grad_norm, _ = optimizer.step()
        torch.cuda.synchronize()
        if it >= a.warmup:
            steps.append((time.perf_counter() - t0) * 1e3)
        if out:
            losses.append(float(sum(o["lm loss"] for o in out) / len(out)))
    peak = torch.tensor([torch.cuda.max_memory_allocated()], device="cuda", dtype=torch.float64)
    peaks = [torch.zeros_like(peak) for _ in range(world)]
    dist.all_gather(peaks, peak)
    # (the loss lives on the last stage: sent to rank 0 for the record)
    loss = torch.tensor([losses[-1] if losses else float("nan")], device="cuda", dtype=torch.float64)
    all_loss = [torch.zeros_like(loss) for _ in range(world)]
    dist.all_gather(all_loss, loss)
    if rank == 0:
        ms = statistics.median(steps)
        print(json.dumps({
            "anchor": "megatron-core", "version": "0.19.0", "tag": a.tag, "tp": a.tp, "pp": a.pp, "dp": dp,
            "sequence_parallel": config.sequence_parallel, "recompute": a.recompute, "layers": a.layers,
            "hidden": a.hidden, "heads": a.heads, "seq": a.seq, "micro_batch": a.micro_batch, "global_batch": gbs,
            "micro_batches": micro_batches, "median_ms": round(ms, 2), "min_ms": round(min(steps), 2),
            "samples_per_s": round(gbs / ms * 1e3, 3),
            "peak_gib": [round(float(p.item()) / 2 ** 30, 2) for p in peaks],
            "last_loss": [float(x.item()) for x in all_loss if x.item() == x.item()][-1:],
            "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
