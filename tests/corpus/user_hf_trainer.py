"""A job written as most users of Hugging Face write one: a small GPT-2 (``GPT2LMHeadModel`` from
a config, no download) trained by ``transformers.Trainer`` under ``torchrun``, which wraps it in
DDP through ``accelerate`` itself; the profiler started from a ``TrainerCallback`` with
``torch.profiler.schedule`` and ``tensorboard_trace_handler`` (one
``<host>_<pid>.<ns>.pt.trace.json.gz`` a process, no rank in the name), its defaults otherwise
(no input shapes). Nothing of mapp runs in the job.

Needs ``transformers`` and ``accelerate`` beside torch (not the repository's dependencies: the
corpus keeps this job's traces, and no test runs it).

A rank is slowed in software: ``--factor F`` adds (F - 1) x 12 matmuls of each block's MLP output
against a ``d x d`` weight to the block's forward (a forward hook; results discarded),
``--sleep-ms`` sleeps on its host at the start of each step (``on_step_begin``),
``--data-sleep-ms`` sleeps in its dataset for each sample (a slow input pipeline, hidden by
``--loader-workers`` until it outruns them).

Ways users' jobs differ, each a flag: ``--seq-sigma S`` gives each sample its own length (the
sequence length x a lognormal draw of sigma S) padded per batch by the collator (dynamic padding:
an imbalance, not a fault); ``--accum N`` is the Trainer's ``gradient_accumulation_steps``;
``--group-by-length`` sorts samples into batches of like length (the Trainer's
``train_sampling_strategy="group_by_length"``);
``--shapes`` records input shapes; ``--seed`` draws other lengths and another sample order (the
Trainer's ``seed``); ``--grad-ckpt`` turns on the Trainer's ``gradient_checkpointing`` (each
block's forward run again in the backward). (The Trainer's ``fsdp`` does nothing on CPUs: it
trains under DDP there.)

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_hf_trainer.py --out DIR --slow-rank 1 --factor 1.5
"""

from __future__ import annotations

import argparse
import os
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory the profiler writes its traces to")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0, help="the slow rank's MLP matmuls, x its peers'")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="a host sleep on the slow rank at each step's start")
    p.add_argument("--data-sleep-ms", type=float, default=0.0, help="the slow rank's dataset sleeps per sample")
    p.add_argument("--loader-workers", type=int, default=0, help="the Trainer's dataloader_num_workers")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=8, help="per-device batch size")
    p.add_argument("--steps", type=int, default=7, help="optimizer steps (the profiler: wait 1, warmup 1, active 4)")
    p.add_argument("--accum", type=int, default=1, help="gradient_accumulation_steps")
    p.add_argument("--seq-sigma", type=float, default=0.0, help="each sample's length: --seq x lognormal(0, S)")
    p.add_argument("--group-by-length", action="store_true", help="batches of like length (needs --seq-sigma)")
    p.add_argument("--shapes", action="store_true", help="record_shapes=True")
    p.add_argument("--seed", type=int, default=0, help="the samples' lengths and order (the Trainer's seed)")
    p.add_argument("--grad-ckpt", action="store_true", help="gradient_checkpointing (each block's forward again in backward)")
    a = p.parse_args()
    if a.group_by_length and not a.seq_sigma:
        p.error("--group-by-length sorts samples of different lengths: add --seq-sigma")
    try:
        from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
    except ImportError:
        p.error("this job needs transformers and accelerate: pip install transformers accelerate")

    rank = int(os.environ.get("RANK", "0"))
    slow = rank == a.slow_rank
    torch.manual_seed(0)
    vocab = 1000
    model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=4 * a.seq, n_embd=a.width, n_layer=a.layers,
                                       n_head=max(2, a.width // 64), bos_token_id=0, eos_token_id=0))
    if slow and a.factor > 1:
        w = torch.randn(a.width, a.width)
        extra = int((a.factor - 1) * 12)

        def more_work(_module, _inputs, out):
            for _ in range(extra):
                _ = out @ w
        for block in model.transformer.h:
            block.mlp.register_forward_hook(more_work)

    samples = a.steps * a.accum * a.batch * int(os.environ.get("WORLD_SIZE", "1"))   # one epoch

    class Samples(torch.utils.data.Dataset):
        """Sample ``i`` of this rank: its own length under --seq-sigma, a sleep under --data-sleep-ms."""

        def __len__(self):
            return samples

        def __getitem__(self, i):
            if i >= samples:   # the end of iteration by index (the length-grouped sampler reads them all so)
                raise IndexError(i)
            g = torch.Generator().manual_seed(10_000_000 * a.seed + 100_000 * rank + i)
            length = a.seq
            if a.seq_sigma:
                draw = torch.empty(1).log_normal_(0.0, a.seq_sigma, generator=g).item()
                length = max(8, min(4 * a.seq, round(a.seq * draw)))
            if slow and a.data_sleep_ms:
                time.sleep(a.data_sleep_ms / 1000)
            ids = torch.randint(0, vocab, (length,), generator=g)
            return {"input_ids": ids, "labels": ids}

    def collate(batch):
        """Pad to the batch's longest sample (labels -100 there), as ``DataCollatorForSeq2Seq`` does."""
        n = max(len(b["input_ids"]) for b in batch)
        ids = torch.zeros(len(batch), n, dtype=torch.long)
        labels = torch.full((len(batch), n), -100, dtype=torch.long)
        mask = torch.zeros(len(batch), n, dtype=torch.long)
        for k, b in enumerate(batch):
            m = len(b["input_ids"])
            ids[k, :m], labels[k, :m], mask[k, :m] = b["input_ids"], b["labels"], 1
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}

    class Profile(TrainerCallback):
        """The profiler of the guides: started with training, stepped at each step's end."""

        def __init__(self):
            self.prof = None

        def on_train_begin(self, args, state, control, **kw):
            self.prof = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=a.shapes,
                schedule=torch.profiler.schedule(wait=1, warmup=1, active=4),
                on_trace_ready=torch.profiler.tensorboard_trace_handler(a.out, use_gzip=True))
            self.prof.start()

        def on_step_begin(self, args, state, control, **kw):
            if slow and a.sleep_ms:
                time.sleep(a.sleep_ms / 1000)

        def on_step_end(self, args, state, control, **kw):
            self.prof.step()

        def on_train_end(self, args, state, control, **kw):
            self.prof.stop()

    args = TrainingArguments(
        output_dir=os.path.join(a.out, "trainer"), per_device_train_batch_size=a.batch, max_steps=a.steps,
        gradient_accumulation_steps=a.accum, learning_rate=1e-3, logging_steps=1, save_strategy="no",
        report_to="none", use_cpu=True, ddp_backend="gloo", dataloader_num_workers=a.loader_workers,
        train_sampling_strategy="group_by_length" if a.group_by_length else "random", disable_tqdm=True, seed=a.seed,
        gradient_checkpointing=a.grad_ckpt)
    trainer = Trainer(model=model, args=args, train_dataset=Samples(), data_collator=collate, callbacks=[Profile()])
    trainer.train()


if __name__ == "__main__":
    main()
