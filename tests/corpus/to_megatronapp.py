"""What the original MegatronApp tracer would have written for a run traced by mapp's capture.

Run: ``python tests/corpus/to_megatronapp.py SRC OUT``: ``SRC`` a set directory of the corpus
(a ``manifest.json`` and one directory per case); every megatron-core case there traced by
mapp's capture (format ``mapp-v1``) on GPUs is written to ``OUT`` in the original's per-rank format
(``benchmark-data-{dp}-pipeline-{pp}-tensor-{tp}.json``), its id ending in ``-ma``, with a
manifest that keeps the source's answer (added to ``OUT/manifest.json`` where there is one).
Nothing of ``SRC`` is changed.

The corpus has no run of the original tracer (it is a fork of Megatron-LM 0.12, not
megatron-core 0.16), so the detector's reading of that format was tried on the simulator alone.
These files carry the timing of real executions in the records the original writes
(``mapp.analysis.ingest.megatronapp``'s module doc says which):

- per traced iteration ``iteration`` ``B`` (``pad_before``: the rank's time since its previous
  traced iteration ended) and ``E`` (``duration_wall``, ``duration_cuda``);
- with a pipeline, the 1F1B steps (``forward-warmup``, ``forward``, ``backward``,
  ``backward-cooldown``, ``micro_batch_index``), one scope per p2p call named by where the
  schedule makes it (a send and a receive that megatron-core batches are one scope), with
  ``expect``, ``group`` (the peer) and ``data``, and ``allreduce`` around the gradient
  reduction; without one, none of these (``forward_backward_no_pipelining`` has no scopes);
- ``transformer_layer`` for each layer's forward (the tracer times the forward pass only),
  ``_reduce`` for the forward's TP all-reduces (``group``: the TP x DP plane but the rank, as
  the original tags them), ``optimizer`` around the optimizer step.

What it cannot give: the original's own TP barriers and ``cuda.synchronize`` calls, which move
waiting into its spans; the ``loss`` scope (mapp records none); attention and MLP sub-scopes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

import polars as pl  # noqa: E402

from mapp.analysis.ingest import load_bundle  # noqa: E402
from mapp.errors import MappError  # noqa: E402

_BYTES_PER_GIBIT = 2 ** 27  # the original's bandwidth unit: data / 2**27 per second
_MERGE_NS = 1_000_000  # a send and a receive starting within 1 ms are one batched call
_EXPECT = {"recv-warmup": "send-warmup", "send-warmup": "recv-warmup", "recv-extra": "send-extra",
           "exchange-next": "exchange-prev", "exchange-prev": "exchange-next"}


def _coords(rank: int, c: dict, devices: int) -> dict:
    return {"dp_rk": c["dp"], "pp_rk": c["pp"], "tp_rk": c["tp"], "dev": rank % devices, "g_rk": rank}


def _p2p_name(kind: str, towards_next: bool, start: int, first_bwd: int | None, last_fwd: int | None,
              batched: bool) -> str:
    """The scope the 1F1B schedule makes this call in (``schedules.py`` of megatron-core)."""
    warm = first_bwd is None or start < first_bwd
    cool = last_fwd is not None and start > last_fwd
    if batched:
        return "exchange-next" if towards_next else "exchange-prev"
    if kind == "send" and towards_next:
        return "send-warmup" if warm else "exchange-next"
    if kind == "recv" and not towards_next:
        return "recv-warmup" if warm else "recv-extra"
    if kind == "recv" and towards_next:
        return "recv-cooldown" if cool else "exchange-next"
    return "send-cooldown" if cool else "send-extra"


def _scopes(ev: pl.DataFrame, rank: int, c: dict, layout: dict, plane: list[int]) -> list[tuple]:
    """(start, end, name, attrs) of one rank's iteration, in the original's names."""
    out = []
    steps = ev.filter(pl.col("name").is_in(["forward", "backward"])).sort("ts_ns")
    pipelined = layout["pp"] > 1
    fwd = steps.filter(pl.col("name") == "forward")
    bwd = steps.filter(pl.col("name") == "backward")
    first_bwd = int(bwd["ts_ns"].min()) if bwd.height else None
    last_fwd = int((fwd["ts_ns"] + fwd["dur_ns"]).max()) if fwd.height else None
    if pipelined:
        warm = min(layout["pp"] - c["pp"] - 1, fwd.height)
        for i, r in enumerate(fwd.iter_rows(named=True)):
            out.append((r["ts_ns"], r["ts_ns"] + r["dur_ns"], "forward-warmup" if i < warm else "forward",
                        {"micro_batch_index": r["microbatch"]}))
        for i, r in enumerate(bwd.iter_rows(named=True)):
            out.append((r["ts_ns"], r["ts_ns"] + r["dur_ns"], "backward-cooldown" if i >= bwd.height - warm
                        else "backward", {"micro_batch_index": r["microbatch"]}))
        p2p = ev.filter(pl.col("cat") == "p2p").sort("ts_ns").to_dicts()
        i = 0
        while i < len(p2p):
            group = [p2p[i]]
            while i + 1 < len(p2p) and p2p[i + 1]["ts_ns"] - group[0]["ts_ns"] <= _MERGE_NS \
                    and p2p[i + 1]["peer"] == group[0]["peer"]:
                i += 1
                group.append(p2p[i])
            i += 1
            first = group[0]
            peer = first["peer"]
            towards_next = peer is not None and peer in _neighbour_ranks(c, layout, +1)
            name = _p2p_name(first["name"], towards_next, first["ts_ns"], first_bwd, last_fwd, len(group) > 1)
            start = min(g["ts_ns"] for g in group)
            end = max(g["ts_ns"] + g["dur_ns"] for g in group)
            data = sum(int(g["bytes"] or 0) for g in group) or None
            attrs = {"micro_batch_index": first["microbatch"]} if first["microbatch"] is not None else {}
            if name in _EXPECT:
                attrs["expect"] = _EXPECT[name]
                attrs["group"] = [int(peer)] if peer is not None and data else None
            attrs["data"] = data
            out.append((start, end, name, attrs))
        grads = ev.filter((pl.col("group") == "dp") & (pl.col("cat") == "collective"))
        if grads.height:
            out.append((int(grads["ts_ns"].min()), int((grads["ts_ns"] + grads["dur_ns"]).max()), "allreduce", {}))
    for r in ev.filter(pl.col("name") == "layer.forward").iter_rows(named=True):
        out.append((r["ts_ns"], r["ts_ns"] + r["dur_ns"], "transformer_layer", {}))
    others = [p for p in plane if p != rank]
    for r in ev.filter(pl.col("name") == "_reduce").iter_rows(named=True):
        out.append((r["ts_ns"], r["ts_ns"] + r["dur_ns"], "_reduce",
                    {"expect": "_reduce", "group": others if layout["tp"] > 1 else None}))
    for r in ev.filter(pl.col("cat") == "optimizer").iter_rows(named=True):
        out.append((r["ts_ns"], r["ts_ns"] + r["dur_ns"], "optimizer", {}))
    return out


def _neighbour_ranks(c: dict, layout: dict, step: int) -> set[int]:
    """Global ranks of the stage ``step`` away in megatron-core's default order tp + TP (dp + DP pp)."""
    pp = c["pp"] + step
    if not 0 <= pp < layout["pp"]:
        return set()
    return {t + layout["tp"] * (d + layout["dp"] * pp) for t in range(layout["tp"]) for d in range(layout["dp"])}


def _records(scopes: list[tuple], it0: int, base: dict) -> list[dict]:
    """B/E records of the scopes, in time order, ``E`` before a ``B`` at the same instant."""
    marks = []
    for start, end, name, attrs in scopes:
        marks.append((start, 1, -end, name, None))
        marks.append((end, 0, -start, name, attrs))
    marks.sort(key=lambda m: m[:3])
    out = []
    for t, is_begin, other, name, attrs in marks:
        rel = int(t - it0)
        if is_begin:
            out.append({"name": name, "ph": "B", "rel_ts": rel, **base})
            continue
        rec = {**attrs, "name": name, "ph": "E", "rel_ts": rel, **base}
        if "data" in attrs:
            secs = max(t + other, 1) / 1e9  # other is -start
            rec["bandwidth"] = attrs["data"] / _BYTES_PER_GIBIT / secs if attrs["data"] else None
        out.append(rec)
    return out


def convert_case(src: Path, out: Path, *, gzipped: bool = True) -> int:
    """Write the original's files for one mapp-v1 case (gzipped, as the corpus keeps its traces,
    unless ``gzipped`` is False); returns the records written."""
    with tempfile.TemporaryDirectory() as tmp:  # the reader's cache goes there, not into SRC
        copy = Path(tmp) / src.name
        shutil.copytree(src, copy, ignore=shutil.ignore_patterns(".mapp"))
        bundle = load_bundle(copy)
        events = pl.read_parquet(bundle.events_path)
        ranks = bundle.ranks
    layout = {k: int(ranks[k].max()) + 1 for k in ("tp", "pp", "dp")}
    devices = max(layout["tp"] * layout["pp"] * layout["dp"], 1)
    out.mkdir(parents=True, exist_ok=False)
    written = 0
    for row in ranks.iter_rows(named=True):
        rank = int(row["rank"])
        c = {k: int(row[k]) for k in ("tp", "pp", "dp")}
        mine = events.filter(pl.col("rank") == rank)
        plane = sorted(t + layout["tp"] * (d + layout["dp"] * c["pp"])
                       for t in range(layout["tp"]) for d in range(layout["dp"]))
        base = _coords(rank, c, devices)
        recs: list[dict] = []
        last_end = None
        for it in mine.filter(pl.col("name") == "iteration").sort("ts_ns").iter_rows(named=True):
            it0, it1 = int(it["ts_ns"]), int(it["ts_ns"] + it["dur_ns"])
            inside = mine.filter((pl.col("iteration") == it["iteration"]) & (pl.col("name") != "iteration"))
            recs.append({"name": "iteration", "ph": "B", "pad_before": 0 if last_end is None else it0 - last_end})
            recs += _records(_scopes(inside, rank, c, layout, plane), it0, base)
            recs.append({"name": "iteration", "ph": "E", "rel_ts": it1 - it0, **base,
                         "duration_wall": it1 - it0, "duration_cuda": it1 - it0})
            last_end = it1
        path = out / f"benchmark-data-{c['dp']}-pipeline-{c['pp']}-tensor-{c['tp']}.json"
        text = json.dumps(recs, indent=2)  # as the original writes it
        if gzipped:
            with gzip.open(path.with_name(path.name + ".gz"), "wt", encoding="utf-8") as fh:
                fh.write(text)
        else:
            path.write_text(text)
        written += len(recs)
    return written


def _rewritable(src: Path, case: dict) -> bool:
    """A megatron-core case under mapp's capture, on GPUs: the original times its scopes with
    CUDA events, and processes sharing CPU cores, read as GPUs, would be judged without the
    rules for shared cores."""
    return (case.get("format") == "mapp-v1" and case.get("source", "").startswith("GPU")
            and (src / case["path"]).is_dir())


def convert_set(src: Path, out: Path, *, only: set[str] | None = None, gzipped: bool = True) -> list[str]:
    """Every mapp-v1 megatron-core case of a set directory run on GPUs (those of ``only``, source
    ids, where given); returns the new ids."""
    manifest = json.loads((src / "manifest.json").read_text())
    wanted = [c for c in manifest["cases"] if _rewritable(src, c) and (only is None or c["id"] in only)]
    taken = [c["path"] + "-ma" for c in wanted if (out / (c["path"] + "-ma")).exists()]
    if taken:   # checked before anything is written: a rerun replaces nothing
        raise FileExistsError(f"{out / taken[0]} exists ({len(taken)} of the cases): pass another OUT or remove them")
    cases = []
    for case in wanted:
        new = {**case, "id": case["id"] + "-ma", "path": case["path"] + "-ma", "format": "megatronapp",
               "source": case["source"] + "; rewritten in the original MegatronApp tracer's records "
                                          "(tests/corpus/to_megatronapp.py)"}
        convert_case(src / case["path"], out / new["path"], gzipped=gzipped)
        cases.append(new)
    if cases:   # added to OUT's manifest, where one is there already
        target = out / "manifest.json"
        kept = json.loads(target.read_text())["cases"] if target.is_file() else []
        new_ids = {c["id"] for c in cases}
        merged = [c for c in kept if c["id"] not in new_ids] + cases
        target.write_text(json.dumps({**manifest, "cases": merged}, indent=1))
    return [c["id"] for c in cases]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path, help="a corpus set directory (manifest.json and its cases)")
    ap.add_argument("out", type=Path, help="where to write the rewritten cases (must not be SRC)")
    ap.add_argument("--only", action="append", help="a source case id to rewrite (repeatable; default all)")
    ap.add_argument("--no-gzip", action="store_true", help="write .json files, not .json.gz")
    args = ap.parse_args()
    if not (args.src / "manifest.json").is_file():
        sys.exit(f"error: {args.src} has no manifest.json (pass a corpus set directory)")
    if args.out.resolve() == args.src.resolve():
        sys.exit("error: OUT is SRC: pass another directory, the source is not rewritten")
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        ids = convert_set(args.src, args.out, only=set(args.only) if args.only else None, gzipped=not args.no_gzip)
    except (FileExistsError, MappError) as e:   # OUT taken, or a source trace the reader cannot take
        sys.exit(f"error: {e}")
    for case_id in ids:
        print(case_id)


if __name__ == "__main__":
    main()
