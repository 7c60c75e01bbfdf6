"""Train a small GPT on megatron-core with synthetic tokens, optionally traced by mapp.

    torchrun --nproc_per_node=4 examples/train_gpt.py --tp 2 --pp 2 [--vpp 2] --iterations 4 \\
        --trace --trace-dir DIR --trace-interval 1 --continuous-trace-iterations 2 \\
        --slow-rank 3 --slow-factor 2.0

Data parallelism is what the world size leaves (world = tp * pp * dp). CPU with gloo or
GPU with NCCL is chosen by what the machine has. ``--slow-rank R --slow-factor F`` is a
software fault injector: rank R does extra work inside every transformer layer so that its
attention and MLP take about F times as long (sleep on CPU, extra matmuls on GPU).

``--groups-json PATH`` writes, from rank 0, the process groups megatron-core built (global
ranks per TP/PP/DP group), which tests compare with the trace.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def parse_args(argv=None) -> argparse.Namespace:
    from mapp.megatron_hooks.flags import add_trace_args

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    p.add_argument("--pp", type=int, default=1, help="pipeline-parallel size")
    p.add_argument("--vpp", type=int, default=None, help="virtual pipeline stages per rank (interleaved 1F1B)")
    p.add_argument("--iterations", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn-hidden", type=int, default=None)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--num-microbatches", type=int, default=4)
    p.add_argument("--bf16", action="store_true", help="bf16 weights and activations (GPU)")
    p.add_argument("--overlap-grad-reduce", action="store_true")
    p.add_argument("--slow-rank", type=int, default=None, help="rank to slow down (fault injector)")
    p.add_argument("--slow-factor", type=float, default=1.0, help="compute slowdown of --slow-rank")
    p.add_argument("--groups-json", default=None, help="rank 0 writes the parallel groups here")
    p.add_argument("--timings-json", default=None, help="each rank appends its step times here")
    p.add_argument("--seed", type=int, default=1234)
    add_trace_args(p)
    return p.parse_args(argv)


def init_distributed(args) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl")
        return torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("gloo")
    return torch.device("cpu")


def build_model(args, device):
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    dtype = torch.bfloat16 if args.bf16 else torch.float32
    cfg = TransformerConfig(
        num_layers=args.layers,
        hidden_size=args.hidden,
        ffn_hidden_size=args.ffn_hidden,
        num_attention_heads=args.heads,
        tensor_model_parallel_size=args.tp,
        pipeline_model_parallel_size=args.pp,
        virtual_pipeline_model_parallel_size=args.vpp,
        pipeline_dtype=dtype,
        bf16=args.bf16,
        params_dtype=dtype,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        use_cpu_initialization=device.type == "cpu",
    )
    chunks = []
    for vp_stage in range(args.vpp or 1):
        vp = vp_stage if args.vpp else None
        chunk = GPTModel(
            config=cfg,
            transformer_layer_spec=get_gpt_layer_local_spec(),
            vocab_size=args.vocab,
            max_sequence_length=args.seq,
            pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp),
            post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp),
            vp_stage=vp,
        ).to(device)
        if args.bf16:
            from megatron.core.transformer.module import Float16Module

            chunk = Float16Module(cfg, chunk)
        ddp_cfg = DistributedDataParallelConfig(
            overlap_grad_reduce=args.overlap_grad_reduce, use_distributed_optimizer=False
        )
        chunk = DistributedDataParallel(
            config=cfg, ddp_config=ddp_cfg, module=chunk,
            disable_bucketing=vp_stage > 0,
        )
        chunks.append(chunk)
    cfg.no_sync_func = [c.no_sync for c in chunks] if args.vpp else chunks[0].no_sync
    cfg.finalize_model_grads_func = _finalize_grads
    return cfg, chunks


def _finalize_grads(model, *args, **kwargs):
    from megatron.core.distributed import finalize_model_grads

    return finalize_model_grads(model, *args, **kwargs)


def batches(args, device):
    """Synthetic next-token batches (tokens, labels, positions, causal mask)."""
    gen = torch.Generator().manual_seed(args.seed)
    pos = torch.arange(args.seq, device=device).unsqueeze(0).expand(args.micro_batch_size, -1)
    mask = torch.tril(torch.ones(1, 1, args.seq, args.seq, device=device)) < 0.5
    while True:
        tok = torch.randint(0, args.vocab, (args.micro_batch_size, args.seq + 1), generator=gen)
        tok = tok.to(device)
        yield {"tokens": tok[:, :-1], "labels": tok[:, 1:], "pos": pos, "mask": mask}


def forward_step(data, model):
    b = next(data)
    out = model(b["tokens"], b["pos"], b["mask"], labels=b["labels"])

    def loss_func(output):
        loss = output.float().mean()
        return loss, {"loss": loss.detach()}

    return out, loss_func


class SlowDown:
    """Fault injector: makes the attention and MLP of every transformer layer about ``factor``
    times slower on this rank, forward and backward. CPU: sleeps for (factor-1) times the
    measured duration (sleep, not busy work, so that the other ranks sharing the cores are not
    slowed too). GPU: launches extra matmuls with about (factor-1) times the module's FLOPs."""

    def __init__(self, factor: float, hidden: int, device: torch.device, dtype, tp: int, seq: int):
        self.extra = max(0.0, factor - 1.0)
        self.device = device
        self.matmuls = {}
        if device.type == "cuda":
            # forward FLOPs per token / tp: attention ~ 8h^2 + 4sh, MLP ~ 16h^2;
            # one (tokens, h) @ (h, h) matmul is 2h^2 per token.
            self.weight = torch.randn(hidden, hidden, device=device, dtype=dtype)
            self.matmuls = {"attention": max(1, round(self.extra * (4 + 2 * seq / hidden) / tp)),
                            "mlp": max(1, round(self.extra * 8 / tp))}

    def attach(self, layers) -> None:
        """Wraps ``forward`` on the attention and MLP instances (before mapp installs, so that
        mapp's spans of those modules include the extra work, as a slow GPU's would)."""
        for layer in layers:
            for kind, module in (("attention", layer.self_attention), ("mlp", layer.mlp)):
                module._slow_kind = kind
                module.forward = self._wrap(module, module.forward)

    def _wrap(self, module, forward):
        def slow_forward(*args, **kwargs):
            self._pre(module, args, kwargs)
            out = forward(*args, **kwargs)
            self._post(module, args, out)
            return out

        return slow_forward

    def _burn(self, x: torch.Tensor, count: int) -> None:
        a = x.detach().reshape(-1, x.shape[-1])
        with torch.no_grad():
            for _ in range(count):
                torch.matmul(a, self.weight)

    def _pre(self, module, args, kwargs):
        module._slow_t0 = time.perf_counter()
        x = args[0] if args else kwargs.get("hidden_states")
        if isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled():
            x.register_hook(lambda g, m=module: self._bwd_end(m, g))

    def _post(self, module, args, out):
        x = out[0] if isinstance(out, tuple) else out
        if self.device.type == "cuda":
            self._burn(x, self.matmuls[module._slow_kind])
        else:
            time.sleep(self.extra * (time.perf_counter() - module._slow_t0))
        if isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled():
            x.register_hook(lambda g, m=module: self._bwd_start(m, g))

    def _bwd_start(self, module, grad):
        module._slow_b0 = time.perf_counter()

    def _bwd_end(self, module, grad):
        if self.device.type == "cuda":
            self._burn(grad, 2 * self.matmuls[module._slow_kind])
        elif getattr(module, "_slow_b0", None) is not None:
            time.sleep(self.extra * (time.perf_counter() - module._slow_b0))
            module._slow_b0 = None


def transformer_layers(chunks):
    from megatron.core.transformer.transformer_layer import TransformerLayer

    return [m for c in chunks for m in c.modules() if isinstance(m, TransformerLayer)]


def write_groups(path: str) -> None:
    """Rank 0 writes every TP/PP/DP group megatron-core built (global ranks, sorted)."""
    from megatron.core import parallel_state as ps

    world = dist.get_world_size()
    mine = {
        "tp": sorted(dist.get_process_group_ranks(ps.get_tensor_model_parallel_group())),
        "pp": sorted(dist.get_process_group_ranks(ps.get_pipeline_model_parallel_group())),
        "dp": sorted(dist.get_process_group_ranks(ps.get_data_parallel_group())),
    }
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    if dist.get_rank() == 0:
        groups = {k: sorted({tuple(g[k]) for g in gathered}) for k in mine}
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump({"world_size": world, "groups": {k: [list(r) for r in v] for k, v in groups.items()},
                       "by_rank": gathered}, f)


def main(argv=None) -> None:
    args = parse_args(argv)
    device = init_distributed(args)
    if args.bf16 and device.type == "cpu":
        raise SystemExit("--bf16 needs a GPU (megatron-core's bf16 optimizer takes CUDA tensors only)")
    from mapp.megatron_hooks.cpu_patches import apply_if_cpu

    apply_if_cpu()
    from megatron.core import parallel_state as ps
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    ps.initialize_model_parallel(
        tensor_model_parallel_size=args.tp,
        pipeline_model_parallel_size=args.pp,
        virtual_pipeline_model_parallel_size=args.vpp,
    )
    model_parallel_cuda_manual_seed(args.seed)
    rank = dist.get_rank()
    if args.groups_json:
        write_groups(args.groups_json)

    cfg, chunks = build_model(args, device)
    if args.slow_rank == rank and args.slow_factor > 1.0:
        SlowDown(args.slow_factor, args.hidden, device, cfg.params_dtype, args.tp, args.seq).attach(
            transformer_layers(chunks))
    opt = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-4, bf16=args.bf16, use_distributed_optimizer=False),
        chunks,
    )

    from mapp.megatron_hooks.flags import install_from_args

    tracer = install_from_args(args, model=chunks, optimizer=opt)

    fb = get_forward_backward_func()
    data = [batches(args, device) for _ in chunks]
    step_s = []
    for it in range(args.iterations):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with tracer.iteration(it):
            for c in chunks:
                c.zero_grad_buffer()
            opt.zero_grad()
            losses = fb(
                forward_step_func=forward_step,
                data_iterator=data if args.vpp else data[0],
                model=chunks if args.vpp else chunks[0],
                num_microbatches=args.num_microbatches,
                seq_length=args.seq,
                micro_batch_size=args.micro_batch_size,
                forward_only=False,
            )
            opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_s.append(time.perf_counter() - t0)
        if rank == dist.get_world_size() - 1 and losses:
            loss = torch.stack([x["loss"] for x in losses]).mean().item()
            print(f"iteration {it} loss {loss:.4f} step {step_s[-1] * 1e3:.1f} ms", flush=True)

    tracer.close()
    if args.timings_json:
        times = [None] * dist.get_world_size()
        dist.all_gather_object(times, step_s)
        if rank == 0:
            with open(args.timings_json, "w") as f:
                json.dump({"step_s": times}, f)
    if rank == 0:
        med = statistics.median(step_s[1:] or step_s)
        print(f"done: {args.iterations} iterations, median step {med * 1e3:.1f} ms "
              f"(tp{args.tp} pp{args.pp} vpp{args.vpp or 1} dp{dist.get_world_size() // (args.tp * args.pp)})",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
