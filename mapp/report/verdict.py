"""The detector's report: a rich renderable (suspects, a per-rank grid, the evidence) and JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from mapp.analysis.detect.findings import Verdict
from mapp.analysis.detect.implicit_sync import inferred_at
from mapp.errors import OutputError
from mapp.output import write_text

__all__ = ["DetectReport"]

_KIND_LABEL = {"slow_compute": "slow compute", "slow_link": "slow link", "slow_nic": "slow NIC", "slow_host": "slow host"}
_GRID_MAX_COLUMNS = 64
_GRID_MAX_ROWS = 32


class DetectReport:
    """Renders a :class:`Verdict` for the terminal (``console.print(report)``) or as JSON."""

    def __init__(self, verdict: Verdict, *, source: str | None = None):
        self.verdict = verdict
        self.source = source

    def to_json(self) -> dict[str, Any]:
        data = self.verdict.to_json()
        if self.source is not None:
            data["source"] = self.source
        return data

    def write_json(self, path: Path) -> Path:
        """Write the verdict as JSON to ``path``, atomically (see ``mapp.output``)."""
        try:
            write_text(path, json.dumps(self.to_json(), indent=1) + "\n")
        except OSError as error:
            raise OutputError(f"{path}: cannot write ({error.strerror})", "choose another --json path") from None
        return Path(path)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        v = self.verdict
        head = Text()
        if v.healthy and not v.compared:
            # a verdict is a comparison with peers: one rank alone is neither healthy nor slow
            head.append("no verdict", style="mapp.warning")
            head.append(": one traced rank, no peer to compare it with (detection compares each rank with its "
                        "peers: give the traces of two or more ranks)")
        elif v.healthy:
            head.append("no suspect", style="mapp.ok")
            head.append(f": no GPU, host or link is slower than its peers by the evidence (threshold {v.threshold:g})")
        else:
            head.append(f"{len(v.suspects)} suspect{'s' if len(v.suspects) != 1 else ''}", style="mapp.suspect")
            head.append(f" (threshold {v.threshold:g})")
        if v.iteration_ns:
            head.append(f"; iteration {v.iteration_ns / 1e6:,.2f} ms", style="mapp.dim")
        yield head
        yield Text(f"{v.traced} traced rank{'' if v.traced == 1 else 's'}, layout {v.layout}", style="mapp.dim")
        if v.suspects:
            yield self._suspects()
            for i, s in enumerate(v.suspects, 1):
                yield Text.assemble((f"  #{i} {s.label()}: ", "mapp.suspect"), _evidence_line(s))
        for item in v.imbalance:
            yield Text.assemble(("imbalance: ", "mapp.warning"), item.message)
        if v.victims:
            yield Text.assemble(("victims (wait on others, not at fault): ", "mapp.victim"), _ranks(v.victims))
        grid = self._grid()
        if grid is not None:
            yield grid
        yield self._stages()
        for note in v.notes:
            yield Text.assemble(("note: ", "mapp.dim"), note)

    def _suspects(self) -> Table:
        table = Table(title="suspects, most likely first", title_justify="left", show_edge=False, pad_edge=False)
        for col, just in (("#", "right"), ("rank", "right"), ("where", "left"), ("kind", "left"), ("conf", "right"),
                          ("slowdown", "right"), ("iterations", "left"), ("cost / iteration", "right")):
            table.add_column(col, justify=just, no_wrap=col in ("kind", "where", "slowdown"))
        for i, s in enumerate(self.verdict.suspects, 1):
            where = " ".join(f"{a}{s.coords[a]}" for a in ("tp", "pp", "dp")) if s.coords and s.coords.get("tp") is not None else ""
            cost = f"+{s.excess_ns / 1e6:,.2f} ms" if s.excess_ns else ""
            # an iteration "without" it is shown only where the estimate leaves one (a stall in a
            # few iterations costs those more than the median iteration lasts)
            if s.excess_ns and s.without_ns and s.iteration_ns:
                cost += f" ({s.iteration_ns / 1e6:,.2f} -> {s.without_ns / 1e6:,.2f})"
            table.add_row(str(i), Text(s.label(), style="mapp.suspect"), where, _KIND_LABEL.get(s.kind, s.kind),
                          f"{s.confidence:.2f}", "?" if s.slowdown != s.slowdown else f"{s.slowdown:.2f}x",
                          _ranks(s.iterations) if s.iterations else "", cost)
        return table

    def _grid(self):
        g = self.verdict.grid
        if g.is_empty() or g["pp"].null_count() == len(g):
            return None
        g = g.filter(pl.col("pp").is_not_null())
        tp, dp = int(g["tp"].max()) + 1, int(g["dp"].max()) + 1
        cols = tp * dp
        if cols > _GRID_MAX_COLUMNS:
            return Text(f"(per-rank grid omitted: {cols} ranks per stage is wider than {_GRID_MAX_COLUMNS})", style="mapp.dim")
        table = Table(show_edge=False, pad_edge=False, show_header=True, box=None)
        table.add_column("pp", justify="right")
        for d in range(dp):
            table.add_column(f"dp{d}" if tp > 1 else str(d), justify="left")
        cells = {(r["pp"], r["dp"], r["tp"]): r for r in g.iter_rows(named=True)}
        stages = sorted(g["pp"].unique().to_list())
        for p in stages[:_GRID_MAX_ROWS]:
            row = [str(p)]
            for d in range(dp):
                text = Text()
                for t in range(tp):
                    text.append_text(_cell(cells.get((p, d, t))))
                row.append(text)
            table.add_row(*row)
        return Group(Text("per-rank grid: rows pp, columns dp, one mark per tp rank"), table, Text("  . healthy  + victim (waits)  X suspect  number: compute vs peers, 10ths above 1x  "
                                 "(blank: not recorded)", style="mapp.dim"))

    def _stages(self) -> Table:
        table = Table(title="stages", title_justify="left", show_edge=False, pad_edge=False, show_header=False, box=None)
        table.add_column()
        table.add_column()
        for s in self.verdict.stages:
            if s.ran:
                table.add_row(Text(s.name), Text.assemble(("ran", "mapp.ok"), f": {s.detail}" if s.detail else ""))
            else:
                table.add_row(Text(s.name), Text.assemble(("did not run", "mapp.warning"), f": {s.reason}"))
        return table


def _cell(row: dict | None) -> Text:
    if row is None:
        return Text(" ")
    if row["role"] == "suspect":
        return Text("X", style="mapp.suspect")
    if row["role"] == "victim":
        return Text("+", style="mapp.victim")
    sd = row["slowdown"]
    if sd is not None and sd == sd and sd >= 1.1:
        return Text(str(min(9, int(round((sd - 1) * 10)))), style="mapp.warning")
    return Text(".", style="mapp.dim")


def _evidence_line(s) -> str:
    e = s.evidence
    parts = []
    p = e.get("peers")
    if p and s.kind in ("slow_compute", "slow_host"):
        beyond = ">" if p["z"] > p["cut"] else "<="    # a host's compute need not stand out
        parts.append(f"compute {p['slowdown']:.2f}x {p['mode']} (z {p['z']:.1f} {beyond} {p['cut']:.1f})")
        if p.get("held_ms_per_iteration"):
            parts.append(f"its GPU idle {p['held_ms_per_iteration']:.2f} ms/it more than its peers' with its next kernel "
                         "already launched (another process's time slices)")
        if p.get("steady_layers") is not None:
            parts.append(f"its transformer layers {p['steady_layers']:.2f}x its peers' or more in every traced iteration")
        if p.get("fastest_ops") is not None:
            parts.append(f"its fastest spans of a kind, where its GPU and not its host sets the pace, "
                         f"{p['fastest_ops']:.2f}x its peers' alike in every iteration")
        if p.get("as_slow_beside"):
            b = p["as_slow_beside"]
            parts.append(f"rank {b['rank']} as slow by its times alone ({b['slowdown']:.2f}x its peers, on shared CPUs), "
                         "but only this rank keeps the others waiting at the collectives")
        if p.get("added_work") and s.kind == "slow_compute":
            clock = p["added_work"].get("by_clock_ms_per_iteration")
            what = ("its forward passes outside its autograd graph (no_grad) {:.2f}x its peers' share"
                    if p["added_work"].get("outside_graph") else "the ops it calls more often than its peers {:.2f}x their time")
            parts.append(what.format(p["added_work"]["slowdown"]) + " "
                         f"(+{p['added_work']['excess_ms_per_iteration']:.2f} ms/it"
                         + (f" at their typical call, +{clock:.2f} ms/it by its clock)" if clock else ")"))
        if p.get("launched_more") and s.kind == "slow_compute":
            lm, g = p["launched_more"], e.get("launch_gaps") or {}
            idle = g.get("excess_ms_per_iteration", 0.0)
            parts.append(f"{lm['calls_per_iteration']:.0f} calls/it beyond its peers' "
                         f"{lm['peers_calls_per_iteration']:.0f} in nearly every iteration, its GPU idle "
                         f"+{idle:.2f} ms/it while its host launches them (work added)")
    cw = e.get("core_wait")
    if cw:
        parts.append(f"waited for a core {cw['share']:.0%} of its compute time (its peers {cw['peers_share']:.0%}): "
                     "another process shares its cores")
    lb = e.get("launch_bound")
    if lb and s.kind == "slow_host":
        # (a number the ops could not give, none of their ratios known, is left out)
        spread = [f"log-ratio spread {lb['ops_spread']:.2f}" if lb.get("ops_spread") is not None else None,
                  f"around {lb['ops_median']:.2f}" if lb.get("ops_median") is not None else None,
                  f"its peers' {lb['peers_spread']:.2f}" if lb.get("peers_spread") is not None else None]
        said = " ".join(x for x in spread[:2] if x)
        said = ", ".join(x for x in (said, spread[2]) if x)
        parts.append(f"{lb.get('why') or 'its ops slower unevenly'}" + (f" ({said})" if said else "")
                     + ": its GPU waits for its host's launches")
    g = e.get("launch_gaps")
    if g and s.kind == "slow_host":
        # (a host named by its stalls is costed by them, whose z its idle time's is not:
        # ``verdict._compute_suspect``)
        if g.get("by") == "stalls":
            parts.append(f"stalls (idle gaps of 1 ms and more) +{g['excess_ms_per_iteration']:.2f} ms/it over its peers'")
        else:
            parts.append(f"launch gaps +{g['excess_ms_per_iteration']:.2f} ms/it (z {g['z']:.1f})")
    late = e.get("lateness")
    if late:
        # (where the trace records no communication, stage 2 judged ranges inferred as
        # synchronisation: ``implicit_sync``)
        synced = inferred_at(late)
        what = f"the synchronisations inferred at {', '.join(synced)}" if synced else "collectives"
        parts.append(f"last in {late['share_last']:.0%} of {what} (chance {late['expected_share']:.0%}), "
                     f"others waited {late['blame_ms']:.2f} ms")
        if late.get("recurring_ms"):
            parts.append(f"last at one point of nearly every iteration, each other member waiting "
                         f"{late['recurring_ms']:.2f} ms/it there")
    b = e.get("bandwidth")
    if b:
        obs = b["observations"]
        parts.append("; ".join(_link_observation(o) for o in obs[:3])
                     + (f"; +{len(obs) - 3} more" if len(obs) > 3 else ""))
        if b.get("note"):
            parts.append(b["note"])
    d = e.get("device")
    if d and "sm_clock_mhz" in d:
        text = f"SM clock {d['sm_clock_mhz']:.0f} MHz"
        if "peers_sm_clock_mhz" in d:
            text += f" vs {d['peers_sm_clock_mhz']:.0f} MHz on its peers"
        if d.get("throttle_reasons"):
            text += f" (throttle reasons 0x{d['throttle_reasons']:x})"
        parts.append(text)
    if e.get("note"):
        parts.append(e["note"])
    return "; ".join(parts)


def _link_observation(o: dict) -> str:
    link = f"{o['what']} {'-'.join(map(str, o['ranks']))}"
    if o.get("compared") == "bytes moved":
        what = "as many messages, larger" if o.get("larger") else "transfers they do not make"
        return f"{link} moves {o['ratio']:.1f}x the bytes of its like links ({what})"
    if o.get("compared") == "messages moved":
        return f"{link} carries {o['ratio']:.1f}x the messages of its like links (sizes not recorded)"
    if o.get("compared") == "message windows" and o.get("direction"):
        src, dst = o["direction"]
        return (f"{link}: its messages from {src} to {dst} in flight {o['in_flight_ms']:.1f} ms a step, {o['ratio']:.1f}x "
                f"the other directions' ({o['like_ms']:.1f} ms; posted asynchronously, sizes not recorded)")
    if o.get("compared") == "message windows":
        return (f"{link}: its messages in flight {o['window_ms']:.2f} ms each, {o['ratio']:.1f}x its like links' "
                f"({o['like_ms']:.2f} ms; posted asynchronously, sizes not recorded)")
    if o.get("compared") == "left last":
        return (f"{link}: its two ends left their {o['what']} {o['gap_ms']:.1f} ms after the rest, {o['ratio']:.1f}x "
                f"the rest's own {o['rest_ms']:.1f} ms, in {len(o['iterations'])} steps")
    return f"{link} {o['ratio']:.2f}x slower" + (f" ({o['compared']})" if o.get("compared") else "")


def _ranks(ranks: list[int]) -> str:
    from mapp.analysis.graph.diagnose import rank_list

    return rank_list(ranks)
