"""The labelled scenario suite: simulated jobs with known faults, detected and scored.

``scenarios(scale, seed)`` draws a fixed list from a seed: fault scenarios (a slow GPU from 5%
to 2x, a slow link, a slow NIC, a slow host, transient windows, two faults at once, at TP/PP/DP
positions, layouts from 8 to 1,024 ranks, clock offsets and drift always on, jitter 1-3%) and
negative controls (healthy, a heavy pipeline stage, uneven sequence lengths).
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


def threshold_for(sc: "Scenario", threshold: float) -> float:
    """The threshold a scenario is detected with: ``threshold``, or below its weakest slow GPU.

    ``--threshold t`` means "slower than (1 + t) x its peers", so a GPU slowed by 10% is a
    suspect only at a threshold below 0.1: each fault is asked for at 0.8 of its own size
    (a 5% fault at 0.04, a 10% one at 0.08); negative controls keep ``threshold``."""
    factors = [f.factor for f in sc.faults if f.kind == "slow_gpu" and f.factor]
    return min([threshold] + [0.8 * (x - 1) for x in factors if x > 1])


@dataclass(frozen=True, slots=True)
class Scenario:
    """One simulated job and what the detector should say about it."""

    id: str
    cls: str
    """Fault class ("slow_gpu 5%", "slow_gpu >=10%", "slow_link", "slow_nic", "slow_host",
    "transient", "two faults") or negative control ("healthy", "stage imbalance", "seqlen imbalance")."""
    config: SimConfig
    negative: bool

    @property
    def scale(self) -> str:
        n = self.config.world_size
        return "8-32" if n <= 32 else "64-256" if n <= 256 else "512-1024"

    @property
    def faults(self) -> list[Fault]:
        return [f for f in self.config.faults if f.kind in ("slow_gpu", "slow_link", "slow_nic", "slow_host")]


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
    """Whether a suspect names an injected hardware fault: same rank (or pair) and kind."""
    kind = {"slow_gpu": "slow_compute"}.get(fault.kind, fault.kind)
    if suspect.kind != kind:
        return False
    if fault.kind == "slow_link":
        return suspect.peer is not None and {suspect.rank, suspect.peer} == set(fault.ranks)
    return suspect.rank == fault.rank


def _config(rng: random.Random, layout: tuple[int, int, int], faults: list[Fault], *, iterations: int = 2,
            gpus_per_node: int = 8) -> SimConfig:
    tp, pp, dp = layout
    world = tp * pp * dp
    # keep big jobs light: one layer per stage and fewer microbatches
    lpc = 1 if world >= 256 else rng.choice((1, 2))
    return SimConfig(
        tp=tp, pp=pp, dp=dp, layers=pp * lpc, hidden=1024, seq_length=1024,
        microbatches=max(pp, 4) if world >= 256 else max(pp, rng.choice((4, 8))),
        iterations=iterations, gpus_per_node=gpus_per_node, jitter_sigma=rng.choice((0.01, 0.02, 0.03)),
        per_layer=world <= 32 and rng.random() < 0.25, faults=faults, seed=rng.randrange(1 << 30),
    )


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
    if cls == "healthy":
        faults: list[Fault] = []
    elif cls == "stage imbalance":
        if pp < 2:
            return None
        stage = pp - 1 if rng.random() < 0.6 else rng.randrange(pp)
        faults = [Fault(kind="stage_imbalance", stage=stage, factor=rng.choice((1.1, 1.2, 1.3, 1.5)))]
    else:
        faults = [Fault(kind="seqlen_imbalance", factor=rng.choice((0.1, 0.2, 0.3, 0.4)))]
    return Scenario(f"{cls.split()[0]}-{n:03d}", cls, _config(rng, layout, faults), negative=True)


_FAULT_MIX = {"slow_gpu 5%": 40, "slow_gpu >=10%": 60, "slow_link": 30, "slow_nic": 20, "slow_host": 20,
              "transient": 20, "two faults": 20}
_NEGATIVE_MIX = {"healthy": 40, "stage imbalance": 35, "seqlen imbalance": 35}


def scenarios(scale: str = "full", seed: int = 0) -> list[Scenario]:
    """The fixed scenario list for ``scale`` ("ci", "small" or "full") and ``seed``."""
    rng = random.Random(seed)
    if scale == "ci":
        fault_mix = {"slow_gpu 5%": 4, "slow_gpu >=10%": 5, "slow_link": 3, "slow_nic": 2, "slow_host": 3,
                     "transient": 2, "two faults": 1}
        neg_mix = {"healthy": 4, "stage imbalance": 3, "seqlen imbalance": 3}
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
                layout = rng.choice(pools[bucket])
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
        simulate(sc.config, target, force=True)
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
    label = None if top is None else f"{top.kind} {top.label()}"
    return ScenarioResult(sc, top1, found, false, elapsed, top=label)


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
