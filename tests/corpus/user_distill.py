"""Online knowledge distillation with separate teacher and student ranks.

(docstring is completed after measurement)
"""

import argparse
import math
import os
import statistics
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule

N_TEACHERS = 2
WORLD = 4


# ----------------------------------------------------------------------------
# arguments
# ----------------------------------------------------------------------------
def parse_args():
    p = argparse.ArgumentParser(description="online KD, teachers on ranks 0-1, students on 2-3")
    p.add_argument("--out", required=True, help="directory for the chrome traces")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true", help="record input shapes in the profiler")
    # model / data
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--seq", type=int, default=64, help="tokens per sequence")
    p.add_argument("--batch", type=int, default=8, help="sequences per pair per step")
    p.add_argument("--teacher-width", type=int, default=256)
    p.add_argument("--teacher-layers", type=int, default=4)
    p.add_argument("--student-width", type=int, default=128)
    p.add_argument("--student-layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--temperature", type=float, default=2.0)
    p.add_argument("--alpha", type=float, default=0.5, help="weight of the hard-label CE loss")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--prefetch", action="store_true",
                   help="teachers compute/isend step s+1 while students train on step s")
    # faults (one rank)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--teacher-factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--slow-link", type=int, nargs=2, default=None, metavar=("A", "B"))
    p.add_argument("--extra", type=float, default=1.0)
    # imbalance without a fault
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    p.add_argument("--seq-sigma", type=float, default=0.0)
    return p.parse_args()


# ----------------------------------------------------------------------------
# model: a small GPT-style causal LM (teacher and student differ in size)
# ----------------------------------------------------------------------------
class Linear(nn.Linear):
    """nn.Linear with an optional `slowdown` (extra copies of the matmul, thrown away)."""

    slowdown = 0.0

    def forward(self, x):
        y = super().forward(x)
        if self.slowdown > 0:
            with torch.no_grad():
                whole, frac = int(self.slowdown), self.slowdown - int(self.slowdown)
                for _ in range(whole):
                    F.linear(x, self.weight, self.bias)
                if frac > 0:
                    flat = x.reshape(-1, x.shape[-1])
                    k = max(1, int(round(frac * flat.shape[0])))
                    F.linear(flat[:k], self.weight, self.bias)
        return y


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = Linear(d, 3 * d)
        self.proj = Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = Linear(d, 4 * d)
        self.fc2 = Linear(4 * d, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q = q.view(B, T, self.heads, -1).transpose(1, 2)
        k = k.view(B, T, self.heads, -1).transpose(1, 2)
        v = v.view(B, T, self.heads, -1).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


class TinyGPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, max_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = Linear(d, vocab, bias=False)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))

    def set_slowdown(self, factor):
        for m in self.modules():
            if isinstance(m, Linear):
                m.slowdown = max(0.0, factor - 1.0)


# ----------------------------------------------------------------------------
# data: sequences from a fixed random Markov chain (4 successors per token)
# ----------------------------------------------------------------------------
class MarkovData:
    def __init__(self, vocab, seed):
        g = torch.Generator().manual_seed(seed + 12345)
        self.vocab = vocab
        self.succ = torch.randint(0, vocab, (vocab, 4), generator=g)
        self.probs = torch.tensor([0.55, 0.25, 0.15, 0.05])

    def sample(self, batch, length, gen):
        x = torch.empty(batch, length + 1, dtype=torch.long)
        x[:, 0] = torch.randint(0, self.vocab, (batch,), generator=gen)
        choice = torch.multinomial(self.probs, batch * length, replacement=True,
                                   generator=gen).view(batch, length)
        for t in range(length):
            x[:, t + 1] = self.succ[x[:, t], choice[:, t]]
        return x


def pair_shape(args, pair, step):
    """Batch and sequence length of `pair` at `step`; teacher and student compute it alike."""
    b, t = args.batch, args.seq
    if args.big_rank >= 0 and args.big_rank % N_TEACHERS == pair:
        b = max(1, int(round(b * args.big)))
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + pair * 7919 + step)
        z = torch.randn(1, generator=g).item()
        t = int(round(t * math.exp(args.seq_sigma * z)))
        t = min(max(t, 8), 4 * args.seq)
    return b, t


def msg_sizes(args, src, dst, b, t):
    """Element counts (real, on the wire) for the token and logit messages src -> dst."""
    real_tok, real_log = b * (t + 1), b * t * args.vocab
    f = args.extra if args.slow_link is not None and tuple(args.slow_link) == (src, dst) else 1.0
    return (real_tok, max(real_tok, int(round(real_tok * f)))), \
           (real_log, max(real_log, int(round(real_log * f))))


def hog(stop):
    a = torch.randn(512, 512)
    while not stop.is_set():
        b = a @ a
        a = b / (b.norm() + 1e-6) * 22.0


# ----------------------------------------------------------------------------
# teacher and student loops
# ----------------------------------------------------------------------------
def teacher_targets(args, teacher, data, pair, step):
    b, t = pair_shape(args, pair, step)
    with record_function("draw_batch"):
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + pair * 7919 + step + 17)
        tokens = data.sample(b, t, gen)
    with record_function("teacher_forward"), torch.inference_mode():
        logits = teacher(tokens[:, :-1])
    return tokens, logits


def pack(args, rank, tokens, logits):
    b, t = tokens.shape[0], tokens.shape[1] - 1
    (rt, wt), (rl, wl) = msg_sizes(args, rank, rank + N_TEACHERS, b, t)
    tok = tokens.reshape(-1)
    log = logits.reshape(-1)
    if wt > rt:
        tok = torch.cat([tok, tok.new_zeros(wt - rt)])
    if wl > rl:
        log = torch.cat([log, log.new_zeros(wl - rl)])
    return tok.contiguous(), log.contiguous()


def run_teacher(args, rank, prof, step_times):
    pair = rank
    student = rank + N_TEACHERS
    torch.manual_seed(args.seed + 1000)  # both teachers hold the same frozen weights
    teacher = TinyGPT(args.vocab, args.teacher_width, args.teacher_layers, args.heads,
                      4 * args.seq).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    factor = 1.0
    if rank == args.slow_rank:
        factor = args.factor * args.teacher_factor
    teacher.set_slowdown(factor)
    data = MarkovData(args.vocab, args.seed)

    pending, inflight = [], None
    for step in range(args.steps):
        t0 = time.perf_counter()
        if rank == args.slow_rank and args.sleep_ms > 0:
            time.sleep(args.sleep_ms / 1000.0)
        if not args.prefetch:
            # lock-step: wait until our student asks for this step's batch
            with record_function("wait_request"):
                req = torch.zeros(1, dtype=torch.long)
                dist.recv(req, src=student, tag=3 * step + 2)
        tokens, logits = teacher_targets(args, teacher, data, pair, step)
        with record_function("send_targets"):
            with torch.inference_mode():
                tok, log = pack(args, rank, tokens, logits)
            if args.prefetch:
                # double buffer: the previous step's messages must be gone before we queue these
                for w in pending:
                    w.wait()
                # (tok, log stay referenced through `inflight` until the isend is waited)
                inflight = (tok, log)
                pending = [dist.isend(tok, dst=student, tag=3 * step),
                           dist.isend(log, dst=student, tag=3 * step + 1)]
                if step == args.steps - 1:
                    # drain before the last prof.step(): an isend still in flight when the
                    # profiler stops made export_chrome_trace segfault on torch 2.13 (gloo)
                    for w in pending:
                        w.wait()
                    pending, inflight = [], None
            else:
                dist.send(tok, dst=student, tag=3 * step)
                dist.send(log, dst=student, tag=3 * step + 1)
        step_times.append(time.perf_counter() - t0)
        prof.step()


def run_student(args, rank, prof, step_times, student_group):
    pair = rank - N_TEACHERS
    src = pair
    torch.manual_seed(args.seed + 2000)
    model = TinyGPT(args.vocab, args.student_width, args.student_layers, args.heads,
                    4 * args.seq)
    if rank == args.slow_rank:
        model.set_slowdown(args.factor)
    ddp = DDP(model, process_group=student_group)
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, weight_decay=0.01)
    T, V = args.temperature, args.vocab

    def post_recv(step):
        b, t = pair_shape(args, pair, step)
        (rt, wt), (rl, wl) = msg_sizes(args, src, rank, b, t)
        tok = torch.empty(wt, dtype=torch.long)
        log = torch.empty(wl, dtype=torch.float32)
        if args.prefetch:
            works = [dist.irecv(tok, src=src, tag=3 * step),
                     dist.irecv(log, src=src, tag=3 * step + 1)]
        else:
            dist.recv(tok, src=src, tag=3 * step)
            dist.recv(log, src=src, tag=3 * step + 1)
            works = []
        return works, tok, log, (b, t, rt, rl)

    nxt = None
    if args.prefetch:
        with record_function("irecv_next"):
            nxt = post_recv(0)
    for step in range(args.steps):
        t0 = time.perf_counter()
        if rank == args.slow_rank and args.sleep_ms > 0:
            time.sleep(args.sleep_ms / 1000.0)
        with record_function("recv_targets"):
            if args.prefetch:
                works, tok, log, (b, t, rt, rl) = nxt
                for w in works:
                    w.wait()
            else:
                with record_function("request_batch"):
                    dist.send(torch.full((1,), step, dtype=torch.long), dst=src,
                              tag=3 * step + 2)
                _, tok, log, (b, t, rt, rl) = post_recv(step)
            tokens = tok[:rt].view(b, t + 1)
            t_logits = log[:rl].view(b, t, V)
        if args.prefetch and step + 1 < args.steps:
            with record_function("irecv_next"):
                nxt = post_recv(step + 1)
        x, y = tokens[:, :-1], tokens[:, 1:]
        with record_function("student_forward"):
            s_logits = ddp(x)
        with record_function("kd_loss"):
            kd = F.kl_div(F.log_softmax(s_logits / T, -1).view(-1, V),
                          F.log_softmax(t_logits / T, -1).view(-1, V),
                          log_target=True, reduction="batchmean") * (T * T)
            ce = F.cross_entropy(s_logits.reshape(-1, V), y.reshape(-1))
            loss = args.alpha * ce + (1.0 - args.alpha) * kd
        with record_function("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with record_function("optimizer"):
            opt.step()
        dt = time.perf_counter() - t0
        step_times.append(dt)
        prof.step()
        if rank == N_TEACHERS:
            print(f"step {step:4d} loss {loss.item():.4f} (ce {ce.item():.4f} kd {kd.item():.4f}) "
                  f"batch {b}x{t} {dt * 1000:.1f} ms", flush=True)


def main():
    args = parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == WORLD, "run with --nproc_per_node=4 (2 teachers + 2 students)"
    if args.teacher_factor != 1.0:
        assert 0 <= args.slow_rank < N_TEACHERS, "--teacher-factor needs --slow-rank 0 or 1"
    if args.slow_link is not None:
        a, b = args.slow_link
        assert 0 <= a < N_TEACHERS and b == a + N_TEACHERS, \
            "--slow-link A B: A must be a teacher and B its student (A+2)"
    torch.manual_seed(args.seed)
    # every rank must take part in creating the group, even the teachers that never use it
    student_group = dist.new_group(list(range(N_TEACHERS, WORLD)))
    hog_stop, hog_thread = threading.Event(), None
    if rank == args.slow_rank and args.hog:
        hog_thread = threading.Thread(target=hog, args=(hog_stop,), daemon=True)
        hog_thread.start()

    os.makedirs(args.out, exist_ok=True)
    step_times = []
    active = max(1, args.steps - 2)
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=1, warmup=1, active=active),
                 record_shapes=args.shapes) as prof:
        if rank < N_TEACHERS:
            run_teacher(args, rank, prof, step_times)
        else:
            run_student(args, rank, prof, step_times, student_group)
    dist.barrier()
    role = "teacher" if rank < N_TEACHERS else "student"
    prof.export_chrome_trace(os.path.join(args.out, f"distill_{role}_rank{rank}.json"))
    st = step_times[2:] if len(step_times) > 3 else step_times
    print(f"TIMING rank={rank} role={role} median_ms={statistics.median(st) * 1000:.1f} "
          f"mean_ms={statistics.mean(st) * 1000:.1f}", flush=True)
    if hog_thread is not None:
        # stop the neighbour before interpreter shutdown (a daemon thread inside a torch op at
        # exit aborts the process with "terminate called without an active exception")
        hog_stop.set()
        hog_thread.join()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
