"""The labelled scenario suite: simulated jobs with known faults, detected and scored.

``scenarios(scale, seed)`` draws a fixed list from a seed: fault scenarios (a slow GPU from 5%
to 2x, a slow link, a slow NIC, a slow host, a data-loader stall, transient windows, two faults
at once, at TP/PP/DP positions, layouts from 8 to 1,024 ranks, clock offsets and drift always
on, jitter 1-3%) and negative controls (healthy, a heavy pipeline stage, uneven sequence
lengths, heavy-tailed sequence lengths per replica on PP2 x DP8+ jobs, the last stage made
heavy by the output layer with small TP and DP).

Every job is a realistic one (``REALISM``): a 7B-class layer (hidden 4096, 2,048 tokens), the
CPU running ahead of the GPU with per-op launch costs of eager PyTorch and heavy-tailed host
noise, a data fetch per microbatch on the ranks that read data, the output layer and loss on
the last stage, and in a third of the jobs heavy-tailed sequence lengths.
``run_suite`` simulates each into a temporary directory, runs ``detect_bundle`` and scores it:

- *top-1*: the first suspect is one of the injected faults (right rank(s) and kind);
- *recall*: injected faults found anywhere in the suspects; *precision*: suspects that are
  injected faults (a suspect on a negative control counts against it).

Scales: "ci" (30 small scenarios, for the test suite), "small" (8-32 ranks, the full class
mix) and "full" (>= 200 fault and >= 100 negative scenarios up to 1,024 ranks).
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mapp.analysis.simulate import Fault, SimConfig, simulate
from mapp.analysis.simulate.faults import HARDWARE_KINDS
from mapp.analysis.simulate.layout import Layout

__all__ = ["Scenario", "ScenarioResult", "SuiteResult", "scenarios", "run_scenario", "run_suite", "matches"]

# (tp, pp, dp) by scale bucket; each has two or more ranks per stage, which a peer comparison needs
_LAYOUTS = {
    "8-32": [(2, 2, 2), (2, 2, 4), (4, 2, 2), (2, 4, 2), (1, 2, 4), (2, 1, 4), (4, 1, 4), (1, 4, 4), (2, 2, 8), (4, 2, 4), (8, 1, 4)],
    "64-256": [(4, 4, 4), (8, 2, 8), (2, 8, 8), (4, 4, 8), (8, 4, 8)],
    "512-1024": [(8, 4, 16), (8, 8, 16)],
}
_CI_LAYOUTS = [(2, 2, 2), (2, 2, 4), (1, 2, 4), (2, 1, 4), (2, 4, 2)]
_GPU_FACTORS = (1.05, 1.1, 1.2, 1.3, 1.5, 2.0)
# negative controls with layouts of their own: uneven lengths on a wide DP (like a 64-rank
# PP2 x DP32 job), and a heavy last stage where TP and DP are small (few peers to compare)
_HEAVY_TAIL_LAYOUTS = {"8-32": [(1, 2, 8), (1, 2, 16), (2, 2, 8)], "64-256": [(1, 2, 32), (2, 2, 16), (4, 2, 8)],
                       "512-1024": [(8, 2, 32)]}
_LAST_STAGE_LAYOUTS = [(1, 4, 2), (2, 4, 1), (2, 2, 2), (1, 8, 1)]  # 8 ranks, the smallest jobs

REALISM = {
    "host_ahead": True,
    "host_overhead_us": (30.0, 60.0, 100.0),  # host time to launch one attention or MLP block
    "host_noise_us": (2.0, 5.0, 10.0),        # Lomax(1.5) scale: mean 2x, 1% above 20x
    "data_load_us": (50.0, 200.0),            # next(data_iterator), prefetched
    "seqlen_sigma": (0.0, 0.0, 0.3),          # a third of the jobs train on uneven lengths
    "vocab_size": (32768, 50304),
}
"""The realism every scenario gets (a tuple: one value drawn per scenario)."""


def threshold_for(sc: "Scenario", threshold: float) -> float:
    """The threshold a scenario is detected with: ``threshold``, or below its weakest slow GPU.

    ``--threshold t`` means "slower than (1 + t) x its peers", so a GPU slowed by 10% is a
    suspect only at a threshold below 0.1, and a slowdown is estimated with some error where
    work varies between microbatches: each fault is asked for at half its own size (a 5% fault
    at 0.025, 10% at 0.05, 20% at 0.1); negative controls keep ``threshold``. (A floor of 0.04
    asked a 5% GPU, estimated at 4.0% one time in three with 1-3% jitter on 8 ops an iteration,
    to beat a cut 1% under its true size.)"""
    factors = [f.factor for f in sc.faults if f.kind == "slow_gpu" and f.factor]
    return min([threshold] + [max(0.025, 0.5 * (x - 1)) for x in factors if x > 1])


@dataclass(frozen=True, slots=True)
class Scenario:
    """One simulated job and what the detector should say about it."""

    id: str
    cls: str
    """Fault class ("slow_gpu 5%", "slow_gpu >=10%", "slow_link", "slow_nic", "slow_host",
    "data stall", "transient", "two faults") or negative control ("healthy", "stage imbalance",
    "seqlen imbalance", "seqlen heavy tail", "heavy last stage")."""
    config: SimConfig
    negative: bool

    @property
    def scale(self) -> str:
        n = self.config.world_size
        return "8-32" if n <= 32 else "64-256" if n <= 256 else "512-1024"

    @property
    def faults(self) -> list[Fault]:
        return [f for f in self.config.faults if f.kind in HARDWARE_KINDS]


@dataclass(slots=True)
class ScenarioResult:
    scenario: Scenario
    top1: bool
    found: int
    """Injected faults found among the suspects."""
    false: int
    """Suspects that are no injected fault."""
    analysis_s: float
    top: str | None = None
    """The first suspect, as "kind rank[-peer]"."""
    error: str | None = None
    hidden: bool = False
    """A host fault that slowed the job by less than the threshold (see ``_hidden_host_fault``)."""


@dataclass(slots=True)
class SuiteResult:
    results: list[ScenarioResult] = field(default_factory=list)

    def rows(self, by: str) -> list[dict]:
        """Summary rows grouped by ``"cls"`` or ``"scale"``: n, top-1, recall, precision, mean and max analysis time."""
        groups: dict[str, list[ScenarioResult]] = {}
        for r in self.results:
            key = r.scenario.cls if by == "cls" else r.scenario.scale
            groups.setdefault(key, []).append(r)
        return [self._row(k, rs) for k, rs in groups.items()] + [self._row("all", self.results)]

    @staticmethod
    def _row(key: str, rs: list[ScenarioResult]) -> dict:
        pos = [r for r in rs if not r.scenario.negative]
        neg = [r for r in rs if r.scenario.negative]
        faults = sum(len(r.scenario.faults) for r in pos)
        found = sum(r.found for r in rs)
        false = sum(r.false for r in rs)
        return {
            "group": key, "scenarios": len(rs), "faults": faults, "negatives": len(neg),
            "top1": (sum(r.top1 for r in pos) / len(pos)) if pos else None,
            "recall": found / faults if faults else None,
            "precision": found / (found + false) if found + false else None,
            "negatives_flagged": sum(1 for r in neg if r.false),
            "analysis_mean_s": sum(r.analysis_s for r in rs) / len(rs) if rs else 0.0,
            "analysis_max_s": max((r.analysis_s for r in rs), default=0.0),
            "errors": sum(1 for r in rs if r.error),
        }

    def failures(self) -> list[ScenarioResult]:
        return [r for r in self.results if r.error or r.false or (not r.scenario.negative and not r.top1)]


def matches(suspect, fault: Fault) -> bool:
    """Whether a suspect names an injected hardware fault: same rank (or pair) and kind. A
    data-loader stall is a host fault: the rank named a slow host."""
    kind = {"slow_gpu": "slow_compute", "data_stall": "slow_host"}.get(fault.kind, fault.kind)
    if suspect.kind != kind:
        return False
    if fault.kind == "slow_link":
        return suspect.peer is not None and {suspect.rank, suspect.peer} == set(fault.ranks)
    return suspect.rank == fault.rank


def _config(rng: random.Random, layout: tuple[int, int, int], faults: list[Fault], *, iterations: int = 2,
            gpus_per_node: int = 8, **override) -> SimConfig:
    tp, pp, dp = layout
    world = tp * pp * dp
    # keep big jobs light: one layer per stage and fewer microbatches
    lpc = 1 if world >= 256 else rng.choice((1, 2))
    fields = dict(
        tp=tp, pp=pp, dp=dp, layers=pp * lpc, hidden=4096, seq_length=2048,
        microbatches=max(pp, 4) if world >= 256 else max(pp, rng.choice((4, 8))),
        iterations=iterations, gpus_per_node=gpus_per_node, jitter_sigma=rng.choice((0.01, 0.02, 0.03)),
        per_layer=world <= 32 and rng.random() < 0.25, faults=faults, seed=rng.randrange(1 << 30),
    )
    for name, value in REALISM.items():
        fields[name] = rng.choice(value) if isinstance(value, tuple) else value
    fields.update(override)
    return SimConfig(**fields)


def _rank(rng: random.Random, lay: Layout) -> int:
    return rng.randrange(lay.world_size)


def _link(rng: random.Random, lay: Layout) -> tuple[int, int] | None:
    """A link the timing can pin: pipeline neighbours, or the two members of a 2-rank group."""
    options = []
    a = _rank(rng, lay)
    c = lay.coords(a)
    if lay.pp > 1 and c["pp"] + 1 < lay.pp:
        options.append((a, lay.rank(c["tp"], c["dp"], c["pp"] + 1)))
    if lay.tp == 2:
        options.append(tuple(lay.tp_group(c["dp"], c["pp"])))
    if lay.dp == 2:
        options.append(tuple(lay.dp_group(c["tp"], c["pp"])))
    return rng.choice(options) if options else None


def _fault_scenario(rng: random.Random, cls: str, layout: tuple[int, int, int], n: int) -> Scenario | None:
    lay = Layout(*layout)
    iterations, gpn = 2, 8
    if cls == "slow_gpu 5%":
        faults = [Fault(kind="slow_gpu", rank=_rank(rng, lay), factor=1.05)]
    elif cls == "slow_gpu >=10%":
        faults = [Fault(kind="slow_gpu", rank=_rank(rng, lay), factor=rng.choice(_GPU_FACTORS[1:]))]
    elif cls == "slow_link":
        pair = _link(rng, lay)
        if pair is None:
            return None
        faults = [Fault(kind="slow_link", ranks=pair, factor=rng.choice((2.0, 3.0, 4.0, 8.0)))]
    elif cls == "slow_nic":
        # one TP group per node, so DP groups and pipeline links cross nodes
        gpn = lay.tp
        faults = [Fault(kind="slow_nic", rank=_rank(rng, lay), factor=rng.choice((2.0, 3.0, 4.0)))]
        # a NIC is told from a link by two or more slow links of one rank: pipeline links and
        # a DP group must all cross nodes
        if lay.pp < 2 or lay.dp < 2 or lay.tp < 2:
            return None
    elif cls == "slow_host":
        faults = [Fault(kind="slow_host", rank=_rank(rng, lay), factor=rng.choice((3.0, 5.0, 10.0, 20.0)))]
    elif cls == "data stall":
        # a rank that reads data (TP rank 0 of the first or last stage) stalls one microbatch per
        # iteration: in a window of one or two iterations (a transient host fault) or in every one
        iterations = 4
        stage = rng.choice((0, lay.pp - 1))
        rank = lay.rank(0, rng.randrange(lay.dp), stage)
        first = rng.randrange(4)
        window = None if rng.random() < 0.3 else (first, min(3, first + rng.randrange(2)))
        faults = [Fault(kind="data_stall", rank=rank, factor=rng.choice((10.0, 30.0, 100.0)), iterations=window)]
    elif cls == "transient":
        iterations = 4
        first = rng.randrange(4)
        window = (first, rng.randrange(first, 4))
        if rng.random() < 0.7:
            faults = [Fault(kind="slow_gpu", rank=_rank(rng, lay), factor=rng.choice((1.2, 1.5, 2.0)), iterations=window)]
        else:
            pair = _link(rng, lay)
            if pair is None:
                return None
            faults = [Fault(kind="slow_link", ranks=pair, factor=4.0, iterations=window)]
    else:  # two faults at once
        a = _rank(rng, lay)
        b = _rank(rng, lay)
        if a == b:
            return None
        faults = [Fault(kind="slow_gpu", rank=a, factor=rng.choice((1.2, 1.5))),
                  Fault(kind="slow_gpu", rank=b, factor=rng.choice((1.3, 2.0)))]
        if rng.random() < 0.4 and (pair := _link(rng, lay)) is not None and a not in pair:
            faults[1] = Fault(kind="slow_link", ranks=pair, factor=4.0)
    config = _config(rng, layout, faults, iterations=iterations, gpus_per_node=gpn)
    return Scenario(f"{cls.split()[0]}-{n:03d}", cls, config, negative=False)


def _negative_scenario(rng: random.Random, cls: str, layout: tuple[int, int, int], n: int) -> Scenario | None:
    tp, pp, dp = layout
    override: dict = {}
    if cls == "healthy":
        faults: list[Fault] = []
    elif cls == "stage imbalance":
        if pp < 2:
            return None
        stage = pp - 1 if rng.random() < 0.6 else rng.randrange(pp)
        faults = [Fault(kind="stage_imbalance", stage=stage, factor=rng.choice((1.1, 1.2, 1.3, 1.5)))]
    elif cls == "seqlen heavy tail":
        # lognormal tokens per (replica, microbatch), like an SFT job on unpacked samples
        faults = []
        override = {"seqlen_sigma": rng.choice((0.5, 0.8, 1.0)), "microbatches": 8}
    elif cls == "heavy last stage":
        # a large vocabulary on the last stage: the output layer costs 2.5 layers, so with one
        # or two layers per stage the last stage is 2-3.5x the others
        faults = []
        override = {"vocab_size": 131072}
    else:
        faults = [Fault(kind="seqlen_imbalance", factor=rng.choice((0.1, 0.2, 0.3, 0.4)))]
    return Scenario(f"{cls.split()[0]}-{n:03d}", cls, _config(rng, layout, faults, **override), negative=True)


_FAULT_MIX = {"slow_gpu 5%": 40, "slow_gpu >=10%": 60, "slow_link": 30, "slow_nic": 20, "slow_host": 20,
              "data stall": 20, "transient": 20, "two faults": 20}
_NEGATIVE_MIX = {"healthy": 40, "stage imbalance": 35, "seqlen imbalance": 35, "seqlen heavy tail": 20,
                 "heavy last stage": 20}
# negative controls whose layouts are their own (None: the scale's pool)
_OWN_LAYOUTS = {"seqlen heavy tail": _HEAVY_TAIL_LAYOUTS, "heavy last stage": {"8-32": _LAST_STAGE_LAYOUTS}}


def scenarios(scale: str = "full", seed: int = 0) -> list[Scenario]:
    """The fixed scenario list for ``scale`` ("ci", "small" or "full") and ``seed``."""
    rng = random.Random(seed)
    if scale == "ci":
        fault_mix = {"slow_gpu 5%": 3, "slow_gpu >=10%": 4, "slow_link": 3, "slow_nic": 2, "slow_host": 2,
                     "data stall": 2, "transient": 2, "two faults": 1}
        neg_mix = {"healthy": 3, "stage imbalance": 2, "seqlen imbalance": 2, "seqlen heavy tail": 2,
                   "heavy last stage": 2}
        pools = {"8-32": _CI_LAYOUTS}
        weights = {"8-32": 1.0}
    elif scale == "small":
        fault_mix = {k: max(2, v // 4) for k, v in _FAULT_MIX.items()}
        neg_mix = {k: max(2, v // 4) for k, v in _NEGATIVE_MIX.items()}
        pools = {"8-32": _LAYOUTS["8-32"]}
        weights = {"8-32": 1.0}
    elif scale == "full":
        fault_mix, neg_mix = _FAULT_MIX, _NEGATIVE_MIX
        pools = _LAYOUTS
        weights = {"8-32": 0.72, "64-256": 0.22, "512-1024": 0.06}
    else:
        raise ValueError(f"scale {scale!r}: one of ci, small, full")
    buckets = list(pools)
    out: list[Scenario] = []
    n = 0
    for mix, make in ((fault_mix, _fault_scenario), (neg_mix, _negative_scenario)):
        for cls, count in mix.items():
            made = 0
            while made < count:
                bucket = rng.choices(buckets, weights=[weights[b] for b in buckets])[0]
                own = _OWN_LAYOUTS.get(cls)
                pool = own.get(bucket, own["8-32"]) if own else pools[bucket]
                layout = rng.choice(pool)
                sc = make(rng, cls, layout, n)
                if sc is None:
                    continue
                out.append(sc)
                made += 1
                n += 1
    return out


def run_scenario(sc: Scenario, workdir: Path, *, threshold: float = 0.1) -> ScenarioResult:
    """Simulate ``sc`` into ``workdir``, detect, score; the directory is removed afterwards."""
    from mapp.analysis.detect import detect_bundle
    from mapp.analysis.ingest import load_bundle

    target = Path(workdir) / sc.id
    threshold = threshold_for(sc, threshold)
    try:
        truth = simulate(sc.config, target, force=True).ground_truth
        bundle = load_bundle(target)
        start = time.perf_counter()
        verdict = detect_bundle(bundle, threshold=threshold)
        elapsed = time.perf_counter() - start
    except Exception as error:  # a crash is a failed scenario, reported, not the end of the suite
        return ScenarioResult(sc, False, 0, 0, 0.0, error=f"{type(error).__name__}: {error}")
    finally:
        shutil.rmtree(target, ignore_errors=True)
    faults = sc.faults
    found = sum(1 for f in faults if any(matches(s, f) for s in verdict.suspects))
    false = sum(1 for s in verdict.suspects if not any(matches(s, f) for f in faults))
    top = verdict.suspects[0] if verdict.suspects else None
    top1 = top is not None and any(matches(top, f) for f in faults)
    hidden = _hidden_host_fault(sc, truth, threshold)
    if hidden:
        top1 = top is None or top1
    label = None if top is None else f"{top.kind} {top.label()}"
    return ScenarioResult(sc, top1, found, false, elapsed, top=label, hidden=hidden)


def _hidden_host_fault(sc: Scenario, truth: dict, threshold: float) -> bool:
    """A host fault the job does not feel: a host that still runs ahead of its GPU (or a stall
    the pipeline absorbs) leaves the iteration within the threshold, and by the threshold's
    meaning it is then no suspect. Such a scenario counts as right with no suspect or the fault."""
    if not sc.faults or any(f.kind not in ("slow_host", "data_stall") for f in sc.faults):
        return False
    now, healthy = truth.get("iteration_us"), truth.get("healthy_iteration_us")
    if isinstance(now, list):
        now = sorted(now)[len(now) // 2] if now else None
    if isinstance(healthy, list):
        healthy = sorted(healthy)[len(healthy) // 2] if healthy else None
    if not now or not healthy:
        return False
    return now / healthy - 1 < threshold


def run_suite(items: list[Scenario], *, threshold: float = 0.1,
              progress: Callable[[int, int], None] | None = None, workdir: Path | None = None) -> SuiteResult:
    """Run every scenario (serially, in a temporary directory) and collect the scores."""
    result = SuiteResult()
    with tempfile.TemporaryDirectory(prefix="mapp-suite-", dir=workdir) as tmp:
        for i, sc in enumerate(items):
            result.results.append(run_scenario(sc, Path(tmp), threshold=threshold))
            if progress is not None:
                progress(i + 1, len(items))
    return result
