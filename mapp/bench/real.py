"""The real-trace corpus: recorded jobs with known answers, detected and scored.

A corpus directory holds a ``manifest.json`` (and may hold further corpora one level down, each
with its own manifest: a committed small set beside a regenerated large one, say). A manifest
is ``{"version": 1, "cases": [...]}``; each case names its trace directory (``path``, relative
to the manifest), where it came from (``source``), its ``class`` (``fault``, ``healthy`` or
``imbalance``), what was ``injected``, and what the detector must say (``expect``):
``{"suspect": {"rank": R, "kinds": [...], "peer": P?}}`` (``"ranks": [R, ...]`` beside ``rank``
where several ranks were slowed alike) or ``{"suspect": null}``.

Scoring, per case: a fault case is right when the *top* suspect is the injected rank (and peer,
for a link; any of ``ranks`` where several were slowed) with one of the expected kinds; a
healthy or imbalance case is right when there is no suspect at all (any GPU, host or link
verdict there is a false alarm). A fault on CPU
processes whose injected host time slows its rank by less than the threshold
(``RealCase.weak_share``), or on GPUs whose hit part (its layers, its GEMMs) is slower than its
peers' by less than that (``RealCase.weak_part``), still counts as right only when named; the
summary also says how many of those the detector named or said were below the threshold
(``RealResult.said_below``), which ``--threshold`` as documented makes an answer too. Cases are
detected in a temporary copy, so the corpus itself is never written to (no cache beside it).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from mapp.errors import InputError

__all__ = ["RealCase", "RealResult", "load_corpus", "result_record", "run_case", "run_corpus", "summary_rows"]

MANIFEST = "manifest.json"


@dataclass(frozen=True, slots=True)
class RealCase:
    """One recorded job and the answer the detector must give."""

    id: str
    directory: Path
    source: str
    cls: str
    """"fault", "healthy" or "imbalance"."""
    injected: list[dict[str, Any]]
    expect: dict[str, Any] | None
    """The expected top suspect (``rank``, ``kinds``, optional ``peer``), or None for none."""
    format: str | None = None
    measured: dict[str, Any] = field(default_factory=dict)
    layout: dict[str, Any] = field(default_factory=dict)
    """The job's ``tp``/``pp``/``dp`` as its manifest gives them (empty where it does not)."""

    @property
    def negative(self) -> bool:
        return self.expect is None

    def weak_share(self, threshold: float) -> float | None:
        """The injected host time's share of the slowed rank's step (``measured``), where it slows
        that rank by less than ``threshold`` in a job of CPU processes, else None. On CPUs the
        injector's host time is what it costs the rank: its step, the injected time included, is
        1 / (1 - share) of what it would be without (8.4% of the step: 1.092x), and under 1 +
        threshold the detector saying so ("below threshold", the verdict's ``below``) is the
        documented answer too, not only naming it (GPU jobs' host time is not their kernels' and
        is not read so)."""
        share = self.measured.get("injected_share_of_step")
        if (self.expect is None or isinstance(share, bool) or not isinstance(share, (int, float))
                or not self.source.startswith("CPU") or not 0.0 < share < 1.0):
            return None
        return float(share) if 1.0 / (1.0 - share) < 1.0 + threshold else None

    def weak_part(self, threshold: float) -> float | None:
        """On GPUs, the part of the work the injection hit, measured against the peers' same part
        (``measured.part_slowdown``: the slowed rank's layer self time or GEMM time over its
        peers', as ``make_corpus`` read it from the traces), where under 1 + ``threshold`` and the
        injected time, if any, under that share of the step too, else None. A layer fault or a
        neighbour that cost the rank 1.08x is as weak as a CPU rank's 8% sleep: ``make_corpus``
        keeps such a job only with ``--keep-weak`` (its ``effect_ok``)."""
        part, share = self.measured.get("part_slowdown"), self.measured.get("injected_share_of_step") or 0.0
        if (self.expect is None or not self.source.startswith("GPU") or isinstance(part, bool)
                or not isinstance(part, (int, float)) or not isinstance(share, (int, float))):
            return None
        return float(part) if part < 1.0 + threshold and share < threshold else None

    def describe_injection(self) -> str:
        if not self.injected:
            return "nothing" if self.cls == "healthy" else self.cls
        parts = []
        for item in self.injected:
            where = item.get("rank", item.get("ranks"))
            size = item.get("factor", item.get("ms", item.get("extra_bytes")))
            parts.append(f"{item.get('how', '?')} on {where}" + (f" ({size})" if size is not None else ""))
        return "; ".join(parts)


@dataclass(slots=True)
class RealResult:
    case: RealCase
    right: bool
    top: str | None
    """The first suspect as "kind rank[<->peer]", or None."""
    suspects: int
    analysis_s: float
    error: str | None = None
    below: bool = False
    """The expected rank and kind among the verdict's ranks below the threshold."""
    weak: float | None = None
    """``RealCase.weak_share``: the injection's share of the step, where under the threshold."""
    weak_part: float | None = None
    """``RealCase.weak_part``: on GPUs, the hit part's slowdown over its peers', where under the
    threshold."""
    cost_ms: float | None = None
    """The top suspect's cost per iteration (``Suspect.excess_ns``), ms."""
    iteration_ms: float | None = None
    """The iteration time the verdict measured, ms."""
    named_all: bool | None = None
    """Where several ranks were slowed alike: whether every one of them is a suspect of an
    expected kind (None for one slowed rank, a link or a negative case)."""

    @property
    def is_weak(self) -> bool:
        return self.weak is not None or self.weak_part is not None

    @property
    def said_below(self) -> bool:
        """A weak fault not named, whose rank the verdict said was below the threshold, with no
        other suspect: the documented answer for a rank slowed by less than the threshold."""
        return self.is_weak and not self.right and self.below and not self.suspects


def load_corpus(directory: Path | str) -> list[RealCase]:
    """Every case of the manifest in ``directory`` and of those one level below it."""
    root = Path(directory)
    manifests = [root / MANIFEST] if (root / MANIFEST).is_file() else []
    manifests += sorted(p for p in root.glob(f"*/{MANIFEST}"))
    if not manifests:
        raise InputError(f"{root}: no {MANIFEST} here or one level down",
                         "point --real at a corpus made by tests/corpus/make_corpus.py")
    cases: list[RealCase] = []
    for path in manifests:
        try:
            doc = json.loads(path.read_text())
            items = doc["cases"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise InputError(f"{path}: not a corpus manifest ({type(error).__name__}: {error})",
                             'a manifest is {"version": 1, "cases": [...]}') from None
        for item in items:
            try:
                expect = item["expect"]["suspect"]
                cases.append(RealCase(
                    id=str(item["id"]), directory=path.parent / item["path"], source=str(item.get("source", "")),
                    cls=str(item.get("class", "fault" if expect else "healthy")), injected=list(item.get("injected") or []),
                    expect=expect, format=item.get("format"), measured=dict(item.get("measured") or {}),
                    layout=dict(item.get("layout") or {}),
                ))
            except (KeyError, TypeError) as error:
                raise InputError(f"{path}: case {item.get('id', '?') if isinstance(item, dict) else item!r} "
                                 f"lacks {error}", "each case needs id, path and expect.suspect") from None
    return cases


def expected_label(case: RealCase) -> str:
    """The answer a case expects, as ``print_real`` shows it: "kind/kind rank[<->peer]" or "none"."""
    e = case.expect
    if e is None:
        return "none"
    ranks = ",".join(str(r) for r in _expected_ranks(e))
    return f"{'/'.join(e.get('kinds', []))} {ranks}" + (f"<->{e['peer']}" if "peer" in e else "")


def result_record(result: RealResult) -> dict[str, Any]:
    """One scored case as plain JSON: where it lies (``key``, its trace directory's absolute
    path, the same for the same files in any later run), what it is, expected and found."""
    c = result.case
    return {"key": str(Path(c.directory).resolve()), "id": c.id, "dir": str(Path(c.directory).parent),
            "class": c.cls, "source": c.source, "format": c.format, "injected": c.describe_injection(),
            "expected": expected_label(c), "top": result.top, "right": bool(result.right),
            "said_below": result.said_below, "error": result.error,
            "pipeline": int(c.layout.get("pp") or 1) > 1, "cost_ms": result.cost_ms,
            "iteration_ms": result.iteration_ms, "injected_ms_per_step": c.measured.get("injected_ms_per_step"),
            "named_all": result.named_all}


def _label(suspect) -> str:
    return f"{suspect.kind} {suspect.label()}"


def _expected_ranks(expect: dict[str, Any]) -> list[int]:
    """The slowed ranks: ``rank``, or every one of ``ranks`` where several were slowed alike (a
    slow node's), any of which is a right top suspect."""
    return list(expect.get("ranks") or [expect["rank"]])


def _is_expected(suspect, expect: dict[str, Any]) -> bool:
    if suspect.rank not in _expected_ranks(expect) and not ("peer" in expect and suspect.peer == expect["rank"]):
        return False
    if suspect.kind not in expect.get("kinds", [expect.get("kind")]):
        return False
    if "peer" in expect:
        return {suspect.rank, suspect.peer} == {expect["rank"], expect["peer"]}
    return True


def _drop_rank(target: Path, rank: int) -> None:
    """Delete the trace file that holds ``rank`` from the copy ``target`` (and the cache its
    reading wrote): which file that is, a format's own naming aside, the traces say."""
    from mapp.analysis.ingest import load_bundle

    ranks = load_bundle(target).ranks
    files = ranks.filter(pl.col("rank") == rank)["src_file"].unique().to_list()
    held = ranks.filter(pl.col("src_file").is_in(files))["rank"].to_list() if files else []
    if not files or set(held) != {rank}:
        raise InputError(f"rank {rank} has no trace file of its own here", "leave out another rank")
    for f in files:
        Path(f).unlink()
    shutil.rmtree(target / ".mapp", ignore_errors=True)


def run_case(case: RealCase, *, threshold: float = 0.1, without: int | None = None) -> RealResult:
    """Detect ``case`` in a temporary copy of its traces and score the verdict.

    ``without``: a rank whose trace is left out of the copy, as where a job was profiled on some
    of its ranks. Where that is the rank the case expects, no traced rank may be named for it:
    the case is right with no suspect (or, of several ranks slowed alike, with another of them)."""
    from mapp.analysis.detect import detect_bundle
    from mapp.analysis.ingest import load_bundle

    if without is not None and case.expect is not None and (
            without in _expected_ranks(case.expect) or without == case.expect.get("peer")):
        others = [r for r in _expected_ranks(case.expect) if r != without]
        # (of several ranks slowed alike, the others are still there to name)
        expect = {**case.expect, "rank": others[0], "ranks": others} if others and "peer" not in case.expect else None
        case = dataclasses.replace(case, expect=expect)
    with tempfile.TemporaryDirectory(prefix="mapp-real-") as tmp:
        target = Path(tmp) / case.id
        try:
            shutil.copytree(case.directory, target, ignore=shutil.ignore_patterns(".mapp"))
            if without is not None:
                _drop_rank(target, without)
            bundle = load_bundle(target)
            start = time.perf_counter()
            verdict = detect_bundle(bundle, threshold=threshold)
            elapsed = time.perf_counter() - start
        except Exception as error:  # a crash is a failed case, reported, not the end of the run
            return RealResult(case, False, None, 0, 0.0, error=f"{type(error).__name__}: {str(error)[:200]}")
    top = verdict.suspects[0] if verdict.suspects else None
    if case.negative:
        right, below = top is None, False
    else:
        right = top is not None and _is_expected(top, case.expect)
        below = any(_is_expected(s, case.expect) for s in verdict.below)
    named_all = None
    if not case.negative and len(_expected_ranks(case.expect)) > 1:
        named = {s.rank for s in verdict.suspects if _is_expected(s, case.expect)}
        named_all = named >= set(_expected_ranks(case.expect))
    return RealResult(case, right, None if top is None else _label(top), len(verdict.suspects), elapsed,
                      below=below, weak=case.weak_share(threshold), weak_part=case.weak_part(threshold),
                      cost_ms=None if top is None else top.excess_ns / 1e6,
                      iteration_ms=None if top is None or top.iteration_ns is None else top.iteration_ns / 1e6,
                      named_all=named_all)


def run_corpus(cases: list[RealCase], *, threshold: float = 0.1,
               progress: Callable[[int, int], None] | None = None) -> list[RealResult]:
    """Run every case, in order."""
    out = []
    for i, case in enumerate(cases):
        out.append(run_case(case, threshold=threshold))
        if progress is not None:
            progress(i + 1, len(cases))
    return out


def summary_rows(results: list[RealResult]) -> list[dict[str, Any]]:
    """Per class and overall: cases, right, and for faults top-1, for negatives those flagged."""
    groups: dict[str, list[RealResult]] = {}
    for r in results:
        groups.setdefault(r.case.cls, []).append(r)
    rows = []
    for key, rs in [*groups.items(), ("all", results)]:
        faults = [r for r in rs if not r.case.negative]
        negatives = [r for r in rs if r.case.negative]
        rows.append({
            "group": key, "cases": len(rs), "right": sum(r.right for r in rs),
            "top1": sum(r.right for r in faults) / len(faults) if faults else None,
            "negatives": len(negatives), "flagged": sum(1 for r in negatives if r.suspects),
            "errors": sum(1 for r in rs if r.error),
            # weak injections, and those named or said to be below the threshold (no other suspect)
            "weak": sum(1 for r in faults if r.is_weak),
            "weak_said": sum(1 for r in faults if r.is_weak and (r.right or r.said_below)),
        })
    return rows
