"""A small Conformer-CTC speech recogniser trained data parallel with ``DistributedDataParallel``
on CPUs with gloo, written as a user of ESPnet/NeMo-style recipes writes one.

The data: synthetic 8 kHz utterances whose transcripts can be read off the audio: "phones" (24
labels, none twice in a row) of 80-160 ms each, sounded as two formant sinusoids (4 x 6
frequencies, scaled per speaker) in white noise, 50-190 ms of silence at either end. ``features``
takes an STFT (25 ms windows every 10 ms), 40 mel filters, a log and per-utterance mean and
variance normalisation; ``specaug`` zeroes two mel bands (up to 8 bins) and two time spans (up
to 5% of the frames) per utterance; the batch is zero padded, with its lengths. A 200-step
single-process run takes the greedy label error rate from 96% to under 3%.

The model (ESPnet-style Conformer, default 1.6M parameters): a Conv2d subsampling (two
stride-2 3x3 convs, 4x fewer frames, a linear to ``--d-model`` and sinusoidal positions), then
``--blocks`` conformer blocks (half-step feed-forward with Swish, multi-head self-attention
written out with a key padding mask, a convolution module of pointwise conv + GLU, depthwise
conv over the masked frames, BatchNorm (``--conv-norm layer``: LayerNorm), Swish and pointwise
conv, a second half-step feed-forward, a final LayerNorm) and a linear CTC head;
``F.ctc_loss`` (blank 0, summed, divided by the batch, ``zero_infinity``). AdamW with a Noam
schedule (linear warmup over ``--warmup`` steps to ``--lr``, then inverse square root),
``clip_grad_norm_`` at ``--clip``. The model is replicated (same seed everywhere) and wrapped
in ``DistributedDataParallel`` with its defaults: gradients all-reduced during backward, and
the BatchNorm buffers broadcast from rank 0 at the start of every forward.

By default the sampler buckets by length: every step all ranks draw from one bucket (a centre
0.8-1.2 x ``--dur`` from a seed the ranks share), each rank's utterances within 6% of it: the
ranks pad to about the same length, and the step time varies by step, not by rank.

Profiling: ``torch.profiler.profile`` (CPU, no input shapes), ``schedule(wait=1, warmup=1,
active=steps-2)``, ``prof.step()`` after each optimizer step, one chrome trace per rank
(``asr-rank<R>.json`` in ``--out``) from ``on_trace_ready``. ``record_function`` marks ``data``
(holding ``features`` and ``specaug``), ``forward`` (with the loss), ``backward`` and
``optimizer`` (clipping, AdamW, the schedule).

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_conformer_ctc.py --out DIR --slow-rank 2 --factor 2

Flags:

- ``--out DIR`` (required): where the traces go (created if missing).
- ``--steps N`` (8, at least 3; the last N - 2 are traced), ``--seed`` (0), ``--batch`` (8
  utterances a rank), ``--dur`` (3.0 s), ``--d-model`` (144), ``--heads`` (4), ``--blocks`` (3),
  ``--kernel`` (15), ``--conv-norm`` (batch), ``--lr`` (2e-3), ``--warmup`` (10), ``--clip`` (5).
- ``--slow-rank R``: the rank the four faults below apply to (-1, the default: none).
- ``--factor F``: on the slow rank every Linear and conv of the model computes its output
  again without grad, results discarded, ``(F - 1) * EXTRA_PER_UNIT`` times a call (the
  fraction carried over). EXTRA_PER_UNIT = 6.2, measured in CPU time on one process (fwd+bwd
  of a default batch; the Linears and convs are a minority of it beside dropout masks, the
  depthwise conv's backward, norms, element-wise ops and the CTC loss), gives 1.96-2.10x at
  F = 2 and 1.48-1.56x at F = 1.5: the rank is slower on the same work, as a slow GPU is.
- ``--hog``: a daemon thread on the slow rank multiplies 64x64 matrices for the whole run.
- ``--sleep-ms MS``: the slow rank sleeps on its host before each step.
- ``--feat-sleep-ms MS``: the slow rank sleeps inside ``features`` (a slow feature extractor).

Imbalance without a fault (a rank with longer utterances simply has more to do):

- ``--dur-sigma S``: no bucketing; every rank draws its batch's longest duration per step,
  lognormal around ``--dur`` with sigma S (clamped to 0.25-4x) from a seed of its own rank and
  step, its utterances uniform in 0.4-1 x that; the ranks pad to different lengths every step.
- ``--long-rank R --long X``: rank R's utterances are X times as long every step.

Measured (seed 1 throughout, 4 processes on this 2-core machine with other jobs beside them,
load average 4-13, so step times swing up to 2x between runs of the same job): mean step of the
6 traced steps from the ``ProfilerStep#N`` events, rank 0 / the named rank (equal, as DDP
steps are), and in-trace evidence on that rank against its peers' mean:

    no fault                 782-1861 ms over 7 runs (1250 beside the four below)
    --factor 2, rank 2       1929 / 1903 ms  addmm+mm+bmm+conv(+bwd) 1296 vs 546 ms a step
                             (2.4x), forward+backward busy time 1638 vs 967 ms (1.7x)
    --factor 1.5, rank 0     844 / 844 ms (beside 782 no fault): those ops 1.55x, busy 1.26x
    --feat-sleep-ms 60, r1   1160 / 1161 ms: ``data`` 126 ms vs 63-76 ms on its peers
    --dur-sigma 0.5          2305 ms; rank 2 (busiest, 1651 vs 829-1281 ms busy) 2290 ms
    --long-rank 1 --long 1.6 1594 / 1604 ms: rank 1 busy 1345 vs 989 ms (1.36x)
    --sleep-ms 60, rank 3    897 / 903 ms; --hog, rank 1: 912 / 931 ms, busy 1.37x its peers'

Busy time: the union of the main thread's op events inside ``forward`` and ``backward``. It
understates F: while the peers wait in the all-reduce the slow rank has a core to itself. One job takes 20-55 s wall (the 8 steps 7-22 s, the rest torchrun's start-up and
imports); traces are about 19 MB a rank.
"""

from __future__ import annotations

import argparse
import math
import os
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, record_function

# audio front end: 8 kHz, 25 ms windows every 10 ms, 40 log-mel bins
SR, HOP, WIN, N_FFT, N_MELS = 8000, 80, 200, 256, 40
# the "phones": 24 labels (1..24, 0 is the CTC blank), each a pair of formant frequencies
F1S = (350.0, 550.0, 750.0, 950.0)
F2S = (1200.0, 1550.0, 1900.0, 2250.0, 2600.0, 2950.0)
VOCAB = len(F1S) * len(F2S) + 1
SEG_MIN, SEG_MAX = 8, 16   # frames per label (80-160 ms)
# extra no-grad forwards per Linear/conv call on the slow rank, per unit of (factor - 1)
EXTRA_PER_UNIT = 6.2


class Burn:
    """The slow rank's extra work: a layer computes its output again without grad (discarded)."""

    extra = 0.0     # extra forwards per call, set on the slow rank only
    _carry = 0.0    # fraction carried from one call to the next, shared by all layers

    @classmethod
    def after(cls, fn, x):
        if cls.extra <= 0:
            return
        cls._carry += cls.extra
        n = int(cls._carry)
        cls._carry -= n
        with torch.no_grad():
            for _ in range(n):
                fn(x)


class Burned:
    """Mix-in for the model's Linears and convs: the layer's forward, then the slow rank's burn."""

    def forward(self, x):
        y = super().forward(x)
        Burn.after(super().forward, x)
        return y


class Linear(Burned, nn.Linear): pass        # noqa: E701
class Conv1d(Burned, nn.Conv1d): pass        # noqa: E701
class Conv2d(Burned, nn.Conv2d): pass        # noqa: E701


def sinusoid(T, d):
    pos = torch.arange(T, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(T, d)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    return pe


class Conv2dSubsampling(nn.Module):
    """Two stride-2 3x3 convs over (time, mel): 4x fewer frames, then a linear to d_model."""

    def __init__(self, n_mels, channels, d, dropout):
        super().__init__()
        self.conv = nn.Sequential(Conv2d(1, channels, 3, 2), nn.ReLU(),
                                  Conv2d(channels, channels, 3, 2), nn.ReLU())
        self.out = Linear(channels * (((n_mels - 1) // 2 - 1) // 2), d)
        self.d, self.drop = d, nn.Dropout(dropout)

    def forward(self, x, lens):                      # x: B T M
        x = self.conv(x.unsqueeze(1))                # B C T' M'
        B, C, T, M = x.shape
        x = self.out(x.transpose(1, 2).reshape(B, T, C * M)) * math.sqrt(self.d)
        x = self.drop(x + sinusoid(T, self.d))
        return x, ((lens - 1) // 2 - 1) // 2


class FeedForward(nn.Module):
    def __init__(self, d, mult, dropout):
        super().__init__()
        self.w1, self.w2, self.drop = Linear(d, mult * d), Linear(mult * d, d), nn.Dropout(dropout)

    def forward(self, x):
        return self.w2(self.drop(F.silu(self.w1(x))))


class SelfAttention(nn.Module):
    """Multi-head self-attention written out, ESPnet-style, with a key padding mask."""

    def __init__(self, d, heads, dropout):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.q, self.k, self.v, self.o = (Linear(d, d) for _ in range(4))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, pad):                       # pad: B T, True on padded frames
        B, T, _ = x.shape
        q, k, v = (m(x).view(B, T, self.h, self.dk).transpose(1, 2) for m in (self.q, self.k, self.v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.dk)
        mask = pad[:, None, None, :]
        attn = scores.masked_fill(mask, torch.finfo(scores.dtype).min).softmax(-1).masked_fill(mask, 0.0)
        ctx = (self.drop(attn) @ v).transpose(1, 2).reshape(B, T, -1)
        return self.o(ctx)


class ConvModule(nn.Module):
    """Pointwise conv + GLU, depthwise conv, BatchNorm (or LayerNorm), Swish, pointwise conv."""

    def __init__(self, d, kernel, norm):
        super().__init__()
        self.pw1 = Conv1d(d, 2 * d, 1)
        self.dw = Conv1d(d, d, kernel, padding=(kernel - 1) // 2, groups=d)
        self.norm = nn.BatchNorm1d(d) if norm == "batch" else nn.LayerNorm(d)
        self.pw2 = Conv1d(d, d, 1)

    def forward(self, x, pad):                       # x: B T D
        x = F.glu(self.pw1(x.transpose(1, 2)), dim=1)
        x = self.dw(x.masked_fill(pad.unsqueeze(1), 0.0))    # no leakage from padded frames
        if isinstance(self.norm, nn.BatchNorm1d):
            x = self.norm(x)
        else:
            x = self.norm(x.transpose(1, 2)).transpose(1, 2)
        return self.pw2(F.silu(x)).transpose(1, 2)


class ConformerBlock(nn.Module):
    def __init__(self, d, heads, kernel, norm, dropout):
        super().__init__()
        self.ff1, self.ff2 = FeedForward(d, 4, dropout), FeedForward(d, 4, dropout)
        self.attn, self.conv = SelfAttention(d, heads, dropout), ConvModule(d, kernel, norm)
        self.ln_ff1, self.ln_att, self.ln_conv, self.ln_ff2, self.ln_out = (nn.LayerNorm(d) for _ in range(5))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, pad):
        x = x + 0.5 * self.drop(self.ff1(self.ln_ff1(x)))             # half-step feed-forward
        x = x + self.drop(self.attn(self.ln_att(x), pad))
        x = x + self.drop(self.conv(self.ln_conv(x), pad))
        x = x + 0.5 * self.drop(self.ff2(self.ln_ff2(x)))             # half-step feed-forward
        return self.ln_out(x)


class ConformerCTC(nn.Module):
    def __init__(self, d, heads, blocks, kernel, norm, dropout=0.1):
        super().__init__()
        self.embed = Conv2dSubsampling(N_MELS, d // 2, d, dropout)
        self.blocks = nn.ModuleList(ConformerBlock(d, heads, kernel, norm, dropout) for _ in range(blocks))
        self.ctc_lo = Linear(d, VOCAB)

    def forward(self, feats, lens):
        x, lens = self.embed(feats, lens)
        pad = torch.arange(x.shape[1]).unsqueeze(0) >= lens.unsqueeze(1)
        for blk in self.blocks:
            x = blk(x, pad)
        return self.ctc_lo(x).log_softmax(-1), lens


def mel_fbank():
    """Triangular mel filters, (N_FFT/2 + 1) x N_MELS (HTK mel scale)."""
    mel = lambda f: 2595.0 * math.log10(1.0 + f / 700.0)   # noqa: E731
    pts = torch.linspace(mel(0.0), mel(SR / 2), N_MELS + 2)
    hz = 700.0 * (10.0 ** (pts / 2595.0) - 1.0)
    bins = torch.linspace(0.0, SR / 2, N_FFT // 2 + 1).unsqueeze(1)
    lo, mid, hi = hz[:-2], hz[1:-1], hz[2:]
    return torch.clamp(torch.minimum((bins - lo) / (mid - lo), (hi - bins) / (hi - mid)), min=0.0)


FBANK, WINDOW = mel_fbank(), torch.hann_window(WIN)


def synth_utterance(n_frames, g):
    """A synthetic utterance of about ``n_frames`` frames and its label sequence: leading and
    trailing silence (noise), then labels of 8-16 frames each, no label twice in a row, each
    sounded as its two formants (scaled by a per-speaker factor) plus noise."""
    sil = torch.randint(5, 20, (2,), generator=g)
    speech = max(int(n_frames - sil.sum()), SEG_MAX)
    seg = torch.randint(SEG_MIN, SEG_MAX + 1, (speech // SEG_MIN + 1,), generator=g)
    seg = seg[: max(int((seg.cumsum(0) <= speech).sum()), 1)]
    steps = torch.randint(1, VOCAB - 1, (len(seg),), generator=g)
    steps[0] = torch.randint(0, VOCAB - 1, (1,), generator=g)
    labels = steps.cumsum(0) % (VOCAB - 1)                   # 0..23, never the same twice running
    spk = 0.92 + 0.16 * torch.rand((), generator=g)
    f1 = torch.tensor(F1S)[labels // len(F2S)] * spk
    f2 = torch.tensor(F2S)[labels % len(F2S)] * spk
    per = seg * HOP                                          # samples per label
    pad0, pad1 = int(sil[0]) * HOP, int(sil[1]) * HOP
    zeros = lambda n: torch.zeros(n)                         # noqa: E731
    f1 = torch.cat([zeros(pad0), f1.repeat_interleave(per), zeros(pad1)])
    f2 = torch.cat([zeros(pad0), f2.repeat_interleave(per), zeros(pad1)])
    ph1, ph2 = (torch.cumsum(2 * math.pi * f / SR, 0) for f in (f1, f2))
    wave = (f1 > 0) * (torch.sin(ph1) + 0.5 * torch.sin(ph2))
    wave = wave + 0.3 * torch.randn(wave.shape, generator=g)
    return wave, labels + 1


def log_mel(wave):
    """Log-mel features (T x N_MELS), mean and variance normalised per utterance (CMVN)."""
    spec = torch.stft(wave, N_FFT, HOP, WIN, WINDOW, center=True, return_complex=True)
    feats = torch.log(spec.abs().pow(2).T @ FBANK + 1e-6)
    return (feats - feats.mean(0)) / (feats.std(0) + 1e-5)


def spec_augment(x, g, n_freq=2, max_f=8, n_time=2, max_t=20):
    """SpecAugment on one utterance (T x M): frequency and time masks set to zero (the mean)."""
    T, M = x.shape
    for _ in range(n_freq):
        w = int(torch.randint(0, max_f + 1, (1,), generator=g))
        f0 = int(torch.randint(0, M - w + 1, (1,), generator=g))
        x[:, f0:f0 + w] = 0.0
    for _ in range(n_time):
        w = int(torch.randint(0, min(max_t, T // 20) + 1, (1,), generator=g))
        t0 = int(torch.randint(0, T - w + 1, (1,), generator=g))
        x[t0:t0 + w] = 0.0
    return x


def start_hog(stop):
    """A noisy neighbour: small matmuls in a loop on a daemon thread, for the whole run."""
    def spin():
        a, b = torch.randn(64, 64), torch.randn(64, 64)
        while not stop.is_set():
            torch.mm(a, b)

    t = threading.Thread(target=spin, name="hog", daemon=True)
    t.start()
    return t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--steps", type=int, default=8, help="optimizer steps (the first two are not traced)")
    p.add_argument("--batch", type=int, default=8, help="utterances per rank per step")
    p.add_argument("--dur", type=float, default=3.0, help="typical utterance duration in seconds")
    p.add_argument("--d-model", type=int, default=144)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--kernel", type=int, default=15, help="depthwise conv kernel")
    p.add_argument("--conv-norm", choices=("batch", "layer"), default="batch")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate of the Noam schedule")
    p.add_argument("--warmup", type=int, default=10, help="Noam warmup steps")
    p.add_argument("--clip", type=float, default=5.0, help="max gradient norm")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to (-1: none)")
    p.add_argument("--factor", type=float, default=1.0, help="slow rank's forward+backward compute, x its peers'")
    p.add_argument("--hog", action="store_true", help="a busy matmul thread on the slow rank")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep on the slow rank before each step")
    p.add_argument("--feat-sleep-ms", type=float, default=0.0,
                   help="sleep on the slow rank inside feature extraction, for each batch")
    p.add_argument("--dur-sigma", type=float, default=0.0,
                   help="no bucketing: each rank draws its batch's max duration lognormally per step")
    p.add_argument("--long-rank", type=int, default=-1, help="rank whose bucket holds longer utterances")
    p.add_argument("--long", type=float, default=1.0, help="utterance durations on --long-rank, x the others'")
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(args.seed)                        # the same initial weights on every rank
    net = ConformerCTC(args.d_model, args.heads, args.blocks, args.kernel, args.conv_norm)
    model = DDP(net)                                    # BatchNorm buffers broadcast from rank 0 each forward
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=1e-3)
    noam = lambda s: min((s + 1) / args.warmup, math.sqrt(args.warmup / (s + 1)))   # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(opt, noam)
    if slow and args.factor > 1:
        Burn.extra = (args.factor - 1.0) * EXTRA_PER_UNIT
    torch.manual_seed(args.seed * 7919 + rank)          # dropout differs by rank

    scale = args.long if rank == args.long_rank else 1.0
    base = args.dur * SR / HOP * scale                  # typical frames per utterance on this rank

    def frame_counts(step):
        """This step's utterance lengths (frames) on this rank."""
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + 10_007 * rank + step)
        if args.dur_sigma > 0:
            # no bucketing: a lognormal max duration per rank and step, utterances in [0.4, 1] x it
            z = float(torch.randn((), generator=g))
            top = base * min(max(math.exp(args.dur_sigma * z), 0.25), 4.0)
            return (top * (0.4 + 0.6 * torch.rand(args.batch, generator=g))).long().clamp(min=60)
        # length bucketing: a bucket shared by all ranks this step (the sampler's sorted batches
        # split over ranks), each rank's utterances within a few % of its centre
        shared = torch.Generator().manual_seed(args.seed * 1_000_003 + 7_919 * step + 99_991)
        centre = base * (0.8 + 0.4 * float(torch.rand((), generator=shared)))
        return (centre * (0.94 + 0.06 * torch.rand(args.batch, generator=g))).long().clamp(min=60)

    def batch_for(step):
        g = torch.Generator().manual_seed(((args.seed * 1009 + rank) * 100_003 + step) * 7 + 1)
        with record_function("features"):
            utts = [synth_utterance(int(n), g) for n in frame_counts(step)]
            feats = [log_mel(w) for w, _ in utts]
            if slow and args.feat_sleep_ms > 0:
                time.sleep(args.feat_sleep_ms / 1000)   # a slow feature extractor
        with record_function("specaug"):
            feats = [spec_augment(f, g) for f in feats]
        lens = torch.tensor([f.shape[0] for f in feats])
        x = nn.utils.rnn.pad_sequence(feats, batch_first=True)        # B T M, zero padded
        targets = torch.cat([lab for _, lab in utts])
        tlens = torch.tensor([len(lab) for _, lab in utts])
        return x, lens, targets, tlens

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        n_params = sum(q.numel() for q in net.parameters())
        law = f"max lognormal sigma {args.dur_sigma}" if args.dur_sigma > 0 else "bucketed"
        print(f"conformer-ctc: d {args.d_model}, {args.blocks} blocks, {n_params / 1e6:.2f}M params, "
              f"world {world}, {args.batch} utterances a rank, ~{args.dur:g}s ({law})", flush=True)

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"asr-rank{rank}.json"))

    schedule = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    step_ms, frames = [], 0
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], schedule=schedule,
                                on_trace_ready=trace_handler) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            with record_function("data"):
                x, lens, targets, tlens = batch_for(step)
            frames = int(lens.sum())
            opt.zero_grad(set_to_none=True)
            with record_function("forward"):
                logp, olens = model(x, lens)
                loss = F.ctc_loss(logp.transpose(0, 1), targets, olens, tlens, blank=0,
                                  reduction="sum", zero_infinity=True) / x.shape[0]
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
                opt.step()
                sched.step()
            step_ms.append((time.perf_counter() - ts) * 1000)
            prof.step()
            if rank == 0:
                print(f"step {step} ctc {loss.item():.3f} frames {frames} max {x.shape[1]} "
                      f"({step_ms[-1]:.0f} ms)", flush=True)

    # feature frames each rank had in the last step (to see --long-rank / --dur-sigma at work)
    load = [torch.zeros((), dtype=torch.long) for _ in range(world)]
    dist.all_gather(load, torch.tensor(frames))
    if rank == 0:
        traced = step_ms[2:]
        print(f"done in {time.perf_counter() - t0:.1f}s, mean step over the {len(traced)} traced steps "
              f"{sum(traced) / len(traced):.0f} ms, frames per rank in the last step "
              f"{[int(v) for v in load]}, traces in {args.out}", flush=True)
    if hog is not None:
        stop.set()
        hog.join()
    dist.barrier()
    time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
