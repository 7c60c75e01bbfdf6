"""A megatron-core GPT training loop on CPU (gloo), profiled per rank, with injectable faults.

Written as Megatron-LM's "simple mcore train loop" example is: parallel_state, a GPTModel from
the local (no Transformer Engine) layer spec, mcore's DDP, get_forward_backward_func().

TP x PP x DP come from --tp/--pp and the world size; one chrome trace per rank lands in --out.

    OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES="" python -m torch.distributed.run --standalone \
        --nproc_per_node=4 tests/corpus/user_mcore_loop.py --out DIR --tp 2 --pp 1

Faults (only on --slow-rank): --factor F (each transformer layer's forward costs F times its
CPU time, the extra spent in MLP-shaped matmuls: a slower GPU), --data-sleep-ms M (the data
iterator sleeps before each microbatch: a host stall). Imbalance without a fault:
--seq-sigma S (per-step lognormal sequence length per DP replica, no PP), --last-heavier K
(the last pipeline stage gets K more layers).
"""

import argparse
import logging
import math
import os
import time
import types
import warnings
from functools import partial

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore")  # megatron-core warns at import that TE and Apex are missing
logging.disable(logging.WARNING)

from megatron.core import parallel_state, tensor_parallel  # noqa: E402
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig  # noqa: E402
from megatron.core.distributed import finalize_model_grads  # noqa: E402
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.pipeline_parallel import get_forward_backward_func  # noqa: E402
from megatron.core.pipeline_parallel import schedules  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for rank<N>.pt.trace.json (one per rank)")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    ap.add_argument("--pp", type=int, default=1, help="pipeline-parallel size (DP is what is left)")
    ap.add_argument("--steps", type=int, default=8, help="training steps (profiled: wait 1, warmup 1, rest active)")
    ap.add_argument("--hidden", type=int, default=128, help="hidden size")
    ap.add_argument("--layers", type=int, default=4, help="transformer layers (split evenly over PP stages)")
    ap.add_argument("--heads", type=int, default=4, help="attention heads")
    ap.add_argument("--seq", type=int, default=64, help="sequence length (median one with --seq-sigma)")
    ap.add_argument("--micro-batch-size", type=int, default=4, help="sequences per microbatch")
    ap.add_argument("--num-microbatches", type=int, default=4, help="microbatches per step")
    ap.add_argument("--vocab", type=int, default=512, help="vocabulary size")
    ap.add_argument("--lr", type=float, default=1e-4, help="Adam learning rate")
    ap.add_argument("--seed", type=int, default=1234, help="seed for weights and data")
    ap.add_argument("--slow-rank", type=int, default=-1, help="global rank that gets the fault (-1: none)")
    ap.add_argument("--factor", type=float, default=1.0,
                    help="slow rank: each layer's forward costs F times its CPU time (extra MLP-shaped matmuls)")
    ap.add_argument("--data-sleep-ms", type=float, default=0.0, help="slow rank: sleep before each microbatch")
    ap.add_argument("--seq-sigma", type=float, default=0.0,
                    help="per-step lognormal sequence length per DP replica (sigma; no PP)")
    ap.add_argument("--last-heavier", type=int, default=0, help="with PP: K more layers on the last stage")
    args = ap.parse_args()
    if args.seq_sigma > 0 and args.pp > 1:
        ap.error("--seq-sigma needs --pp 1: pipeline stages exchange fixed-shape activations")
    if args.last_heavier and args.pp == 1:
        ap.error("--last-heavier needs --pp > 1")
    return args


def cpu_shims():
    """megatron-core allocates a few buffers on "cuda" by name; send them to the CPU."""
    torch.cuda.current_device = lambda: torch.device("cpu")
    # the schedules count tokens in torch.zeros(..., device="cuda"); give that module a torch
    # whose zeros() ignores the device and leave everything else alone
    cpu_torch = types.ModuleType("torch_cpu_zeros")
    cpu_torch.__getattr__ = lambda name: getattr(torch, name)
    cpu_torch.zeros = lambda *a, device=None, **kw: torch.zeros(*a, **kw)
    schedules.torch = cpu_torch


def init_parallel(args):
    dist.init_process_group(backend="gloo")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=args.tp,
                                             pipeline_model_parallel_size=args.pp)
    # model_parallel_cuda_manual_seed needs CUDA RNG states; on CPU every rank seeds the same
    # default generator (so TP shards come from one master weight) and forks are no-ops
    torch.manual_seed(args.seed)
    tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)


def build_model(args):
    pp = args.pp
    layers, last = args.layers, None
    if pp > 1 and args.last_heavier:
        last = args.layers // pp + args.last_heavier
        layers = args.layers + args.last_heavier
    config = TransformerConfig(
        num_layers=layers, hidden_size=args.hidden, num_attention_heads=args.heads,
        tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=pp,
        num_layers_in_last_pipeline_stage=last,
        use_cpu_initialization=True, pipeline_dtype=torch.float32, params_dtype=torch.float32,
        hidden_dropout=0.0, attention_dropout=0.0,  # the no-op RNG tracker cannot keep TP masks apart
        masked_softmax_fusion=False, bias_activation_fusion=False, bias_dropout_fusion=False,
        apply_rope_fusion=False, persist_layer_norm=False, gradient_accumulation_fusion=False,
        batch_p2p_comm=False)  # batched p2p ends in torch.cuda.synchronize()
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(),
                     vocab_size=args.vocab, max_sequence_length=4 * args.seq,
                     pre_process=parallel_state.is_pipeline_first_stage(),
                     post_process=parallel_state.is_pipeline_last_stage(),
                     # tied weights are synced across PP stages through a .cuda() copy
                     share_embeddings_and_output_weights=False)
    model = DistributedDataParallel(config=config, module=model,
                                    ddp_config=DistributedDataParallelConfig(overlap_grad_reduce=False))
    config.no_sync_func = model.no_sync
    config.finalize_model_grads_func = finalize_model_grads
    return model, config


def slow_down(layer, factor):
    """Make a transformer layer's forward cost `factor` times its CPU time: after its MLP, run
    MLP-shaped matmuls (results thrown away) for (factor - 1) x the layer's time so far."""
    # CPU time of this thread, so that waits in collectives and time-slicing with other ranks
    # don't count; a fixed count of extra GEMMs would not do: in a layer this small they are
    # well under half of the forward
    w1, w2 = layer.mlp.linear_fc1.weight.detach(), layer.mlp.linear_fc2.weight.detach()
    started = [0.0]

    def start(module, inputs):
        started[0] = time.thread_time()

    def burn(mlp, inputs, output):
        x = inputs[0].detach().flatten(0, -2)
        now = time.thread_time()
        until = now + (factor - 1.0) * (now - started[0])
        with torch.no_grad():
            while time.thread_time() < until:
                h = torch.matmul(x, w1.t())
                if time.thread_time() < until:
                    torch.matmul(h, w2.t())

    return layer.register_forward_pre_hook(start), layer.mlp.register_forward_hook(burn)


def seq_len_for(args, step):
    """This DP replica's sequence length for a step; the same on all its TP and PP ranks."""
    if args.seq_sigma <= 0:
        return args.seq
    g = torch.Generator().manual_seed(args.seed * 1000003 + parallel_state.get_data_parallel_rank() * 7919 + step)
    draw = args.seq * math.exp(args.seq_sigma * torch.randn((), generator=g).item())
    return int(min(max(round(draw / 8) * 8, 16), 4 * args.seq))


def batches(args, step, sleep_s):
    """Random-token microbatches for one step, the same on every TP/PP rank of a replica."""
    seq = seq_len_for(args, step)
    g = torch.Generator().manual_seed(args.seed + 31 * parallel_state.get_data_parallel_rank() + 100003 * step)
    mask = torch.triu(torch.ones(1, 1, seq, seq, dtype=torch.bool), diagonal=1)
    positions = torch.arange(seq).unsqueeze(0).expand(args.micro_batch_size, -1)
    for _ in range(args.num_microbatches):
        if sleep_s:
            time.sleep(sleep_s)
        tokens = torch.randint(0, args.vocab, (args.micro_batch_size, seq + 1), generator=g)
        yield {"tokens": tokens[:, :-1], "labels": tokens[:, 1:], "position_ids": positions,
               "attention_mask": mask, "loss_mask": torch.ones(args.micro_batch_size, seq)}


def loss_func(loss_mask, output_tensor):
    loss = torch.sum(output_tensor.float().view(-1) * loss_mask.view(-1)) / loss_mask.sum()
    return loss, {"lm loss": loss.detach()}


def forward_step_func(data_iterator, model):
    data = next(data_iterator)
    output = model(data["tokens"], data["position_ids"], data["attention_mask"], labels=data["labels"])
    return output, partial(loss_func, data["loss_mask"])


def main():
    args = parse_args()
    cpu_shims()
    init_parallel(args)
    rank = dist.get_rank()
    model, config = build_model(args)
    slow = rank == args.slow_rank
    if slow and args.factor > 1.0:
        for layer in model.module.decoder.layers:
            slow_down(layer, args.factor)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    forward_backward = get_forward_backward_func()
    sleep_s = args.data_sleep_ms / 1000.0 if slow else 0.0

    os.makedirs(args.out, exist_ok=True)
    trace = os.path.join(args.out, f"rank{rank}.pt.trace.json")
    with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=max(1, args.steps - 2)),
            on_trace_ready=lambda p: p.export_chrome_trace(trace)) as prof:
        for step in range(args.steps):
            model.zero_grad_buffer()
            optimizer.zero_grad(set_to_none=True)
            forward_backward(forward_step_func=forward_step_func, data_iterator=batches(args, step, sleep_s),
                             model=[model], num_microbatches=args.num_microbatches,
                             seq_length=seq_len_for(args, step), micro_batch_size=args.micro_batch_size,
                             forward_only=False)
            # mcore's DDP reduces into main_grad; a plain torch optimizer reads .grad
            for p in model.parameters():
                p.grad = p.main_grad
            optimizer.step()
            prof.step()
    dist.barrier()
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
