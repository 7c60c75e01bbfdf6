"""A process of the gloo coordinator test (``torch.multiprocessing.spawn`` imports it here)."""

from __future__ import annotations

import itertools
import json
import random
import threading
from pathlib import Path

TIMEOUT = 60.0


def plan(seed: int, ranks: int, groups: int) -> list[tuple[int, ...]]:
    rng = random.Random(seed)
    return [tuple(sorted(rng.sample(range(ranks), rng.randint(2, 5)))) for _ in range(groups)]


def run(process: int, processes: int, ranks: int, ngroups: int, seed: int, out: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from mapp.scheduling.fbd import Coordinator, TorchMaxAllReduce

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out}/store", rank=process, world_size=processes,
                            timeout=timedelta(seconds=TIMEOUT))
    physical = {}
    for size in range(2, processes + 1):
        for subset in itertools.combinations(range(processes), size):
            group = dist.new_group(list(subset))
            if process in subset:
                physical[subset] = group
    table = dist.new_group(list(range(processes)))
    groups = plan(seed, ranks, ngroups)
    home = {v: v % processes for v in range(ranks)}
    value = {(g, v): (g + 1) * 1000 + v for g, members in enumerate(groups) for v in members}
    executed, rounds = [], []

    def execute(group, requests):
        executed.append(group)
        local = float(sum(value[group, r.rank] for r in requests))
        hosts = tuple(sorted({home[m] for m in groups[group]}))
        total = torch.tensor([local], dtype=torch.float64)
        if len(hosts) > 1:  # the external part: once per process, whatever its local members
            dist.all_reduce(total, group=physical[hosts])
        for r in requests:
            r.result = total.item()

    coordinator = Coordinator(groups, [v for v in range(ranks) if home[v] == process], TorchMaxAllReduce(table),
                              execute=execute, on_round=lambda r: rounds.append([r.number, list(r.ready)])).start()
    errors = []

    def worker(v):
        try:
            rng = random.Random(seed * 7919 + v)
            mine = [g for g, members in enumerate(groups) if v in members] * 2
            rng.shuffle(mine)
            requests = [coordinator.post(v, g) for g in mine]
            for r in requests:
                got = r.wait(timeout=TIMEOUT)
                want = float(sum(value[r.group, m] for m in groups[r.group]))
                assert got == want, (r.group, got, want)
            coordinator.finish(v)
        except BaseException as e:
            errors.append(repr(e))
            coordinator.finish(v)

    threads = [threading.Thread(target=worker, args=(v,), daemon=True)
               for v in range(ranks) if home[v] == process]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * TIMEOUT)
    coordinator.join(TIMEOUT)
    Path(out, f"process-{process}.json").write_text(json.dumps(
        {"errors": errors, "alive": sum(t.is_alive() for t in threads), "rounds": rounds, "executed": executed}))
    dist.destroy_process_group()
