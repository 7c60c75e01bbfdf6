"""What MegaScope costs: generation tokens/s and training step time, with it off and on.

    python benchmarks/scope_overhead.py [--size cpu|gpu] [--rounds 3] [--json OUT]

One process (CPU, or the current GPU when there is one), a megatron-core GPT built by
``mapp.scope.model`` with random weights:

- **generation**: greedy decoding of 2 prompts, ``--new`` tokens, recomputing the sequence
  each step (as ``mapp scope serve`` does): the model alone (no hook, no frame) against the
  engine with capture on (hooks, TP gather, on-device reduction, copies to the host, frames
  built; the frames go nowhere, so no network time is counted);
- **training**: Adam steps on random tokens, in blocks of ``--steps`` rotating ``off`` (no
  MegaScope) and ``on`` (a live ``TrainingScope`` on port 0 with a snapshot every
  ``--interval`` steps). ``on/between`` is the steps without a snapshot, ``on/snapshot`` the
  time ``after_step`` takes on a snapshot step (one captured forward pass of the probe
  prompts and the frame), reported apart.

Every timed region ends with ``torch.cuda.synchronize()`` on a GPU. Prints a table; medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

SIZES = {
    # layers, hidden, heads, groups, ffn, seq, batch
    "cpu": (4, 128, 4, 2, 512, 128, 4),
    "gpu": (12, 1024, 16, 4, 4096, 512, 8),
}


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def build(size: str):
    from mapp.scope.model import ModelSpec, build_model, ensure_model_parallel

    layers, hidden, heads, groups, ffn, seq, batch = SIZES[size]
    ensure_model_parallel()
    spec = ModelSpec(num_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_query_groups=groups,
                     ffn_hidden_size=ffn, vocab_size=256, max_sequence_length=seq)
    torch.manual_seed(0)
    return spec, build_model(spec, parallel_output=True), seq, batch   # as a training job builds it


def generation(model, new: int, rounds: int) -> dict[str, float]:
    from mapp.scope.engine import Engine
    from mapp.scope.tokenizer import ByteTokenizer

    engine = Engine(model, ByteTokenizer())
    prompts = ["The quick brown fox jumps over the lazy dog.", "Once upon a time there was a"]
    message = {"prompts": prompts, "max_new_tokens": new, "reducer": "rms", "bins": 16, "top_k": 5}
    plain, scoped = [], []
    for _ in range(rounds):
        seqs = [list(p.encode()) for p in prompts]
        _sync()
        t0 = time.perf_counter()
        engine.decode(seqs, new)
        _sync()
        plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        engine.generate(message, lambda frame: None)
        _sync()
        scoped.append(time.perf_counter() - t0)
    tokens = new * len(prompts)
    return {"plain_tokens_s": tokens / statistics.median(plain), "scope_tokens_s": tokens / statistics.median(scoped)}


def training(model, seq: int, batch: int, steps: int, rounds: int, interval: int) -> dict[str, float]:
    from mapp.scope.tokenizer import ByteTokenizer
    from mapp.scope.training import TrainingScope

    model.train()
    device = next(model.parameters()).device
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    positions = torch.arange(seq, device=device).unsqueeze(0).expand(batch, -1)
    mask = torch.ones(1, 1, seq, seq, dtype=torch.bool, device=device).triu(1)

    def step() -> float:
        tokens = torch.randint(0, 256, (batch, seq + 1), device=device)
        _sync()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = model(tokens[:, :-1], positions, mask, labels=tokens[:, 1:]).float().mean()
        loss.backward()
        opt.step()
        _sync()
        return time.perf_counter() - t0

    times: dict[str, list[float]] = {"off": [], "on/between": [], "on/snapshot": []}
    scope = TrainingScope(model, ByteTokenizer(), port=0, interval=interval)
    it = 0
    try:
        for r in range(rounds):
            for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
                for i in range(steps):
                    took = step()
                    if i == 0:
                        continue   # the first step of a block warms up after the switch
                    if mode == "off":
                        times["off"].append(took)
                        continue
                    it += 1
                    t0 = time.perf_counter()
                    snapped = scope.after_step(it)
                    _sync()
                    if snapped:
                        times["on/snapshot"].append(time.perf_counter() - t0)
                    else:
                        times["on/between"].append(took)
    finally:
        scope.close()
    return {k: statistics.median(v) for k, v in times.items() if v}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=sorted(SIZES), default="gpu" if torch.cuda.is_available() else "cpu")
    p.add_argument("--new", type=int, default=32, help="generated tokens per prompt")
    p.add_argument("--steps", type=int, default=11, help="training steps per block")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--interval", type=int, default=5, help="steps between snapshots")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    spec, model, seq, batch = build(args.size)
    device = next(model.parameters()).device
    gen = generation(model.eval(), args.new, max(2, args.rounds // 2))
    train = training(model, seq, batch, args.steps, args.rounds, args.interval)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"MegaScope overhead on {name}: {spec.num_layers} layers, hidden {spec.hidden_size}, "
          f"seq {seq}, batch {batch} (training), fp32")
    print(f"{'measure':<34}{'off':>12}{'on':>12}{'cost':>10}")
    print(f"{'generation tokens/s':<34}{gen['plain_tokens_s']:>12.1f}{gen['scope_tokens_s']:>12.1f}"
          f"{gen['plain_tokens_s'] / gen['scope_tokens_s'] - 1:>+10.1%}")
    off, between = train["off"], train["on/between"]
    print(f"{'training step, ms (between snapshots)':<34}{off * 1e3:>12.2f}{between * 1e3:>12.2f}{between / off - 1:>+10.1%}")
    if "on/snapshot" in train:
        print(f"{'snapshot (every %d steps), ms' % args.interval:<34}{'':>12}{train['on/snapshot'] * 1e3:>12.2f}"
              f"{train['on/snapshot'] / args.interval / off:>+10.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "size": args.size, "generation": gen, "training": train}, f, indent=1)


if __name__ == "__main__":
    main()
