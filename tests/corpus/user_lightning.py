"""A job written as users of PyTorch Lightning write one: the demo ``Transformer`` Lightning's own
examples train (``lightning.pytorch.demos``: an ``nn.Transformer`` encoder-decoder over token
ids), a ``LightningModule`` around it, and ``lightning.Trainer(accelerator="cpu",
strategy=DDPStrategy(process_group_backend="gloo"))`` under ``torchrun``, which Lightning takes
as its launcher. The profiler is Lightning's own: ``Trainer(profiler=PyTorchProfiler(dirpath=...,
filename=...))`` with its defaults (Lightning's schedule: wait 1, warmup 1, active 3, repeating,
so a job of more than five steps writes a trace a cycle; every module's forward wrapped in a
``[pl][module]`` span, Lightning's hooks in ``[pl][profile]`` spans; no input shapes). Nothing of
mapp runs in the job.

Needs ``lightning`` beside torch (not one of the repository's dependencies: the corpus keeps
this job's traces, and no test runs it).

A rank is slowed in software: ``--factor F`` adds (F - 1) x 12 matmuls of each encoder and
decoder layer's output against a ``d x d`` weight to the layer's forward (a forward hook; results
discarded), ``--sleep-ms`` sleeps on its host at the start of each step
(``on_train_batch_start``), ``--data-sleep-ms`` sleeps in its dataset for each sample (a slow
input pipeline, hidden by ``--loader-workers`` until it outruns them). ``--timings FILE`` has
every rank write what it timed as JSON lines: each step's start (``perf_counter``, ms: steps
follow one another, the loader's fetch between them) and the injected work and sleeps of each
step (the dataset's sleeps for its batch included), to read the injection's share of the step by.

Ways users' jobs differ, each a flag: ``--seq-sigma S`` gives each sample its own length (the
sequence length x a lognormal draw of sigma S) padded per batch (an imbalance, not a fault);
``--accum N`` is ``accumulate_grad_batches``; ``--shapes`` records input shapes (a profiler
keyword Lightning passes on); ``--seed`` draws other lengths.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_lightning.py --out DIR --slow-rank 1 --factor 1.5
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory the profiler writes its traces to")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0, help="the slow rank's layer matmuls, x its peers'")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="a host sleep on the slow rank at each step's start")
    p.add_argument("--data-sleep-ms", type=float, default=0.0, help="the slow rank's dataset sleeps per sample")
    p.add_argument("--loader-workers", type=int, default=0, help="the DataLoader's num_workers")
    p.add_argument("--width", type=int, default=128, help="ninp (and nhid)")
    p.add_argument("--layers", type=int, default=2, help="encoder and decoder layers each")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=8, help="per-device batch size")
    p.add_argument("--steps", type=int, default=10, help="optimizer steps (two of Lightning's profiler cycles)")
    p.add_argument("--accum", type=int, default=1, help="accumulate_grad_batches")
    p.add_argument("--seq-sigma", type=float, default=0.0, help="each sample's length: --seq x lognormal(0, S)")
    p.add_argument("--shapes", action="store_true", help="record_shapes=True")
    p.add_argument("--seed", type=int, default=0, help="the samples' lengths")
    p.add_argument("--timings", help="append each rank's step and injected times (ms) to this file as JSON lines")
    a = p.parse_args()
    try:
        import lightning as L
        from lightning.pytorch.demos import Transformer
        from lightning.pytorch.profilers import PyTorchProfiler
        from lightning.pytorch.strategies import DDPStrategy
    except ImportError:
        p.error("this job needs lightning: pip install lightning")

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    slow = rank == a.slow_rank
    vocab = 1000
    samples = a.steps * a.accum * a.batch   # one epoch of this rank's shard
    injected = [0.0]   # ms of extra work and sleeps since the step began (the loader's too: workers=0)

    class Samples(torch.utils.data.Dataset):
        """Sample ``i`` of this rank: its own length under --seq-sigma, a sleep under --data-sleep-ms."""

        def __len__(self):
            return samples * world

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(10_000_000 * a.seed + 100_000 * rank + i)
            length = a.seq
            if a.seq_sigma:
                draw = torch.empty(1).log_normal_(0.0, a.seq_sigma, generator=g).item()
                length = max(8, min(4 * a.seq, round(a.seq * draw)))
            if slow and a.data_sleep_ms:
                time.sleep(a.data_sleep_ms / 1000)
                injected[0] += a.data_sleep_ms
            ids = torch.randint(0, vocab, (length + 1,), generator=g)
            return ids[:-1], ids[1:]

    def collate(batch):
        """Pad to the batch's longest sample; padded targets are ignored by the loss (-100)."""
        n = max(len(x) for x, _ in batch)
        inputs = torch.zeros(len(batch), n, dtype=torch.long)
        targets = torch.full((len(batch), n), -100, dtype=torch.long)
        for k, (x, y) in enumerate(batch):
            inputs[k, :len(x)], targets[k, :len(y)] = x, y
        return inputs, targets

    class LM(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = Transformer(vocab_size=vocab, ninp=a.width, nhead=2, nhid=a.width, nlayers=a.layers)
            if slow and a.factor > 1:
                w = torch.randn(a.width, a.width)
                extra = int((a.factor - 1) * 12)

                def more_work(_module, _inputs, out):
                    t = time.perf_counter()
                    for _ in range(extra):
                        _ = out @ w
                    injected[0] += (time.perf_counter() - t) * 1000
                layers = list(self.model.transformer.encoder.layers) + list(self.model.transformer.decoder.layers)
                for layer in layers:
                    layer.register_forward_hook(more_work)

        def training_step(self, batch, batch_idx):
            inputs, targets = batch
            out = self.model(inputs, targets.clamp(min=0))
            return torch.nn.functional.nll_loss(out, targets.reshape(-1), ignore_index=-100)

        def on_train_batch_start(self, batch, batch_idx):
            self.began = time.perf_counter()
            if slow and a.sleep_ms:
                time.sleep(a.sleep_ms / 1000)
                injected[0] += a.sleep_ms

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if a.timings:
                with open(a.timings, "a") as f:
                    f.write(json.dumps({"rank": rank, "batch": batch_idx, "injected_ms": round(injected[0], 3),
                                        "start_ms": round(self.began * 1000, 3)}) + "\n")
            injected[0] = 0.0

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(Samples(), batch_size=a.batch, collate_fn=collate,
                                               num_workers=a.loader_workers)

    L.seed_everything(a.seed, verbose=False)
    profiler = PyTorchProfiler(dirpath=a.out, filename="perf", record_shapes=a.shapes)
    trainer = L.Trainer(accelerator="cpu", devices=world, num_nodes=1,
                        strategy=DDPStrategy(process_group_backend="gloo"), max_steps=a.steps,
                        accumulate_grad_batches=a.accum, profiler=profiler, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(LM())


if __name__ == "__main__":
    main()
