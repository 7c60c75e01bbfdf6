"""The run report in the terminal: a rich renderable over a ``RunSummary``."""

from __future__ import annotations

import polars as pl
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mapp.report.summary import RunSummary, renderable

__all__ = ["ReportView", "ms", "pct"]

_MAX_RANK_ROWS = 16


def ms(ns: float | None) -> str:
    """Nanoseconds as milliseconds, 3 significant decimals."""
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def val(x) -> str:
    """A table cell's value; "-" where unknown (a job with no layout has no pp, tp or dp)."""
    return "-" if x is None else str(x)


def pct(frac: float | None) -> str:
    return "-" if frac is None else f"{100 * frac:.1f}%"


def _bar(fracs: list[tuple[float, str]], width: int = 24) -> Text:
    """A stacked bar of fractions (each with a style) ``width`` cells wide."""
    text = Text()
    used = 0
    for i, (frac, style) in enumerate(fracs):
        cells = width - used if i == len(fracs) - 1 else round(max(0.0, frac) * width)
        cells = max(0, min(cells, width - used))
        text.append("█" * cells, style=style)
        used += cells
    return text


class ReportView:
    """Renders a ``RunSummary`` section by section: ``console.print(ReportView(summary))``."""

    def __init__(self, summary: RunSummary):
        self.summary = summary

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        s = self.summary
        yield self._header()
        yield self._iterations()
        yield self._breakdown()
        for section in (self._overlap(), self._skew(), self._bandwidth(), self._bubbles(), self._ops()):
            if section is not None:
                yield section
        if s.verdict is not None:
            yield Panel(renderable(s.verdict), title="straggler verdict", title_align="left")
        findings = s.findings.filter(pl.col("severity") != "info") if len(s.findings) else s.findings
        if len(findings):
            table = Table("severity", "finding", title="communication problems", title_justify="left")
            for row in findings.head(10).iter_rows(named=True):
                style = "mapp.suspect" if row["severity"] == "error" else "mapp.warning"
                table.add_row(Text(row["severity"], style=style), row["message"])
            yield table

    def _header(self) -> Panel:
        b = self.summary.bundle
        layout = " x ".join(f"{axis.upper()}{b.get(axis)}" for axis in ("tp", "pp", "dp", "cp", "ep")
                            if b.get(axis) and (b.get(axis) > 1 or axis in ("tp", "pp", "dp")))
        if (b.get("vpp") or 1) > 1:
            layout += f" (VPP{b['vpp']})"
        traced, world = b.get("traced_ranks"), b.get("world_size")
        # (a process profiled without torch.distributed records no world size)
        ranks = (f"{traced} rank{'' if traced == 1 else 's'} traced" + (f" of {world}" if world else "")
                 + (f": {layout}" if layout else ""))
        lines = [
            f"[bold]{b.get('directory')}[/]  ({b.get('format')})",
            ranks,
            f"{b.get('events', 0):,} events; clocks "
            + (f"aligned to rank {b.get('reference_rank')}" if b.get("aligned") else "[mapp.warning]not aligned[/]"),
        ]
        median = self.summary.median_iteration_ns
        if median is not None:
            lines.append(f"median iteration [bold]{ms(median)} ms[/]"
                         + (f" (first {self.summary.skip} left out)" if self.summary.skip else ""))
        for note in self.summary.notes:
            lines.append(f"[mapp.warning]note:[/] {note}")
        return Panel("\n".join(lines), title="mapp report", title_align="left")

    def _iterations(self) -> Table:
        table = Table("iteration", "job time (ms)", "slowest rank", "rank spread", title="iteration time",
                      title_justify="left")
        for row in self.summary.job_iterations.iter_rows(named=True):
            table.add_row(val(row["iteration"]), ms(row["time_ns"]), val(row["slowest_rank"]), f"{row['spread']:.3f}x")
        return table

    def _breakdown(self) -> Group:
        s = self.summary
        legend = Text.assemble(("█", "green"), " compute  ", ("█", "red"), " exposed comm  ",
                               ("█", "blue"), " other  ", ("█", "bright_black"), " idle")
        stages = Table("stage", "ranks", "compute", "exposed comm", "idle", "", title="time per pipeline stage",
                       title_justify="left", caption=legend, caption_justify="left")
        for row in s.stages.iter_rows(named=True):
            stages.add_row(val(row["pp"]), val(row["ranks"]), pct(row["compute_frac"]), pct(row["exposed_comm_frac"]),
                           pct(row["idle_frac"]), self._row_bar(row))
        ranks = s.breakdown
        title = "time per rank"
        if len(ranks) > _MAX_RANK_ROWS:
            half = _MAX_RANK_ROWS // 2
            ordered = ranks.sort("compute_frac")
            ranks = pl.concat([ordered.head(half), ordered.tail(half)]).unique("rank", maintain_order=True)
            title += f" (the {half} least and most computing of {len(s.breakdown)})"
        per_rank = Table("rank", "pp", "tp", "dp", "compute", "exposed comm", "idle", "", title=title,
                         title_justify="left")
        for row in ranks.iter_rows(named=True):
            per_rank.add_row(val(row["rank"]), val(row["pp"]), val(row["tp"]), val(row["dp"]), pct(row["compute_frac"]),
                             pct(row["exposed_comm_frac"]), pct(row["idle_frac"]), self._row_bar(row))
        return Group(stages, per_rank)

    @staticmethod
    def _row_bar(row: dict) -> Text:
        window = row["window_ns"] or 1
        return _bar([(row["compute_ns"] / window, "green"), (row["exposed_comm_ns"] / window, "red"),
                     (row["other_ns"] / window, "blue"), (row["idle_ns"] / window, "bright_black")])

    def _overlap(self) -> Table | None:
        if self.summary.overlap.is_empty():
            return None
        table = Table("communication", "total (ms)", "hidden behind compute", "exposed (ms)",
                      title="communication / computation overlap", title_justify="left")
        for row in self.summary.overlap.iter_rows(named=True):
            table.add_row(row["kind"], ms(row["comm_ns"]), pct(row["overlap_frac"]), ms(row["exposed_ns"]))
        return table

    def _skew(self) -> Group | None:
        s = self.summary
        if s.skew.is_empty():
            return None
        skew = Table("group", "op", "count", "mean spread (ms)", "max spread (ms)", "most often last",
                     title="collective skew (arrival spread)", title_justify="left")
        for row in s.skew.head(8).iter_rows(named=True):
            skew.add_row(val(row["group"]), row["op"], val(row["instances"]), ms(row["mean_spread_ns"]),
                         ms(row["max_spread_ns"]), f"rank {row['top_last_arriver']} ({pct(row['top_last_share'])})")
        last = Table("rank", "pp", "tp", "dp", "last in", "others waited (ms)", "it waited (ms)",
                     title="last arrivers", title_justify="left")
        for i, row in enumerate(s.last_arrivers.head(5).iter_rows(named=True)):
            style = "mapp.suspect" if i == 0 and row["caused_wait_ns"] > 0 else None
            last.add_row(Text(val(row["rank"]), style=style or ""), val(row["pp"]), val(row["tp"]), val(row["dp"]),
                         f"{row['times_last']}/{row['collectives']}", ms(row["caused_wait_ns"]), ms(row["waited_ns"]))
        return Group(skew, last)

    def _bandwidth(self) -> Table | None:
        rows = self.summary.bandwidth
        if rows.is_empty():
            return None
        table = Table("link", "messages", "GB/s", "vs median link", title="p2p bandwidth (slowest links first)",
                      title_justify="left")
        for row in rows.sort("vs_median").head(8).iter_rows(named=True):
            slow = row["vs_median"] is not None and row["vs_median"] < 0.8
            table.add_row(f"{row['src']} -> {row['dst']}", val(row["messages"]), f"{row['bandwidth_gbs']:.1f}",
                          Text(f"{row['vs_median']:.2f}x", style="mapp.suspect" if slow else ""))
        return table

    def _bubbles(self) -> Table | None:
        rows = self.summary.bubbles
        if rows.is_empty():
            return None
        table = Table("stage", "iteration (ms)", "computing (ms)", "bubble (ms)", "bubble ratio",
                      title="pipeline bubbles", title_justify="left")
        for row in rows.iter_rows(named=True):
            table.add_row(val(row["pp"]), ms(row["window_ns"]), ms(row["compute_ns"]), ms(row["bubble_ns"]),
                          pct(row["bubble_ratio"]))
        return table

    def _ops(self) -> Group | None:
        s = self.summary
        if s.top_ops.is_empty():
            return None
        top = Table("op", "cat", "count", "total (ms)", "mean (ms)", "share", title="top ops by total time",
                    title_justify="left")
        for row in s.top_ops.iter_rows(named=True):
            top.add_row(row["name"], row["cat"], f"{row['count']:,}", ms(row["total_ns"]), ms(row["mean_ns"]),
                        pct(row["share"]))
        slow = Table("rank", "op", "iteration", "microbatch", "ms", "vs median", title="slowest op instances",
                     title_justify="left")
        for row in s.slowest_ops.head(5).iter_rows(named=True):
            slow.add_row(val(row["rank"]), row["name"], val(row["iteration"]), val(row["microbatch"]), ms(row["dur_ns"]),
                         "-" if row["vs_median"] is None else f"{row['vs_median']:.2f}x")
        return Group(top, slow)
