"""Damaged-bundle fuzzer (issue 14, "never lose a trace").

    python benchmarks/fuzz.py [--cases N] [--seed S] [--jobs J] [--timeout SECONDS]
                              [--only FORMAT:DAMAGE:SEED] [--keep-failures DIR]

Takes a small real bundle of each input format -- mapp v1 (simulated), PyTorch profiler /
Kineto (a corpus case, gzipped as recorded and a gunzipped copy with one event per line, as
Kineto writes it) and MegatronApp (the test fixture's writer) --, builds its cache once
(``mapp trace merge``), then per case applies one random byte-level damage to the bundle's
rank files or to its cache (``DIR/.mapp``) and runs every command on a fresh copy of the
damaged bundle as a subprocess (``python -m mapp ...``, with a timeout). Each run is classified:

* ``ok-clean``: exit 0, no ``warning:`` line;
* ``ok-with-warning``: exit 0 with a ``warning:`` line;
* ``one-line-error``: non-zero exit, stdout + stderr hold exactly one non-empty line, and it
  starts with ``error:``;
* ``FAIL``: a Python traceback anywhere, a file of the bundle (outside ``.mapp``) changed,
  removed or added, a non-zero exit with anything but that one ``error:`` line, a timeout,
  or death by a signal.

Prints a table (damage kind x command -> counts of each outcome), then every FAIL with its
format, damage, seed and command and the first lines of its output; exits 1 if there was any.
A case is reproduced with ``--only FORMAT:DAMAGE:SEED`` (the seed printed with it); the same
seed always makes the same damage to the rank files. (A cache's bytes differ a little from one
build to the next -- the build id in its Parquet footers is random -- so a ``cache:`` damage
that counts lines or bytes can land a few bytes apart on a replay.) ``tests/test_fuzz_bundle.py`` runs a fixed subset.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus" / "cases"

FORMATS = ("mapp-v1", "kineto-gz", "kineto-json", "megatronapp")
TRACE_DAMAGES = ("truncate", "bitflip", "delete-lines", "dup-lines", "swap-files", "empty-file",
                 "garbage-file", "gzip-cut")
CACHE_DAMAGES = ("cache:truncate", "cache:bitflip", "cache:delete-lines", "cache:dup-lines",
                 "cache:swap-files", "cache:empty-file", "cache:garbage-file")
DAMAGES = TRACE_DAMAGES + CACHE_DAMAGES
OUTCOMES = ("ok-clean", "ok-with-warning", "one-line-error", "FAIL")
COMMANDS = ("merge", "detect", "sql", "report")
TRACEBACK = "Traceback (most recent call last)"
DEFAULT_TIMEOUT_S = 180.0


def command_line(command: str, bundle: Path, scratch: Path) -> list[str]:
    """The argv of one command on ``bundle``; outputs go to ``scratch`` (outside the bundle)."""
    mapp = [sys.executable, "-m", "mapp"]
    if command == "merge":
        return mapp + ["trace", "merge", str(bundle), "-o", str(scratch / "merged.json")]
    if command == "detect":
        return mapp + ["detect", str(bundle)]
    if command == "sql":
        return mapp + ["sql", str(bundle), "-c", "SELECT count(*) FROM events"]
    if command == "report":
        return mapp + ["report", str(bundle), "--no-detect", "--html", str(scratch / "report.html")]
    raise ValueError(f"unknown command {command!r}")


# ---------------------------------------------------------------- pristine bundles

def _write_mapp_v1(directory: Path) -> None:
    from mapp.analysis.simulate import SimConfig, simulate

    cfg = SimConfig(tp=2, pp=2, dp=1, layers=2, hidden=1024, seq_length=1024, microbatches=2, iterations=2,
                    seed=3)
    simulate(cfg, directory)


def _write_kineto_gz(directory: Path) -> None:
    shutil.copytree(CORPUS / "ddp4-prof-healthy", directory)


def _write_kineto_json(directory: Path) -> None:
    """The corpus case gunzipped, one trace event per line (as Kineto itself writes them)."""
    directory.mkdir(parents=True)
    for source in sorted((CORPUS / "tp2dp2-plain-prof-healthy").glob("rank-*.json.gz")):
        trace = json.loads(gzip.decompress(source.read_bytes()))
        events = trace.pop("traceEvents")
        head = json.dumps(trace, separators=(",", ":"))[:-1]
        body = ",\n".join(json.dumps(e, separators=(",", ":")) for e in events)
        (directory / source.name[:-3]).write_text(f'{head},"traceEvents":[\n{body}\n]}}\n')


def _write_megatronapp(directory: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "analysis" / "ingest"))
    try:
        import megatronapp_fixture
    finally:
        sys.path.pop(0)
    megatronapp_fixture.write_trace_dir(directory, tp=2, pp=2, dp=1, iterations=2)


WRITERS = {"mapp-v1": _write_mapp_v1, "kineto-gz": _write_kineto_gz, "kineto-json": _write_kineto_json,
           "megatronapp": _write_megatronapp}
RANK_GLOBS = {"mapp-v1": "rank-*.json", "kineto-gz": "rank-*.json.gz", "kineto-json": "rank-*.json",
              "megatronapp": "benchmark-data-*.json"}


def build_template(fmt: str, directory: Path, timeout: float = DEFAULT_TIMEOUT_S) -> Path:
    """Write the pristine bundle of ``fmt`` into ``directory`` and build its cache with one merge."""
    WRITERS[fmt](directory)
    with tempfile.TemporaryDirectory(prefix="mapp-fuzz-out-") as scratch:
        argv = command_line("merge", directory, Path(scratch))
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if done.returncode != 0 or not (directory / ".mapp").is_dir():
        raise RuntimeError(f"the pristine {fmt} bundle does not merge:\n{done.stdout}{done.stderr}")
    return directory


def build_templates(root: Path, formats=FORMATS) -> dict[str, Path]:
    return {fmt: build_template(fmt, root / fmt) for fmt in formats}


# ---------------------------------------------------------------- damage

def applies(fmt: str, damage: str) -> bool:
    """gzip-cut needs a gzipped trace; every other damage applies to every format."""
    return damage != "gzip-cut" or fmt == "kineto-gz"


def rank_files(bundle: Path, fmt: str) -> list[Path]:
    return sorted(bundle.glob(RANK_GLOBS[fmt]))


def cache_files(bundle: Path) -> list[Path]:
    return sorted(p for p in (bundle / ".mapp").rglob("*") if p.is_file())


def _units(data: bytes) -> list[bytes]:
    """What a line damage works on: lines; one-line JSON by trace event; else 64-byte chunks."""
    if data.count(b"\n") >= 3:
        return data.splitlines(keepends=True)
    if data.count(b"},{") >= 3:
        parts = data.split(b"},{")
        return [p + b"},{" for p in parts[:-1]] + [parts[-1]]
    return [data[i:i + 64] for i in range(0, len(data), 64)] or [b""]


def _damage_bytes(kind: str, data: bytes, rng: random.Random) -> tuple[bytes, str]:
    if kind == "truncate":
        at = rng.randrange(0, max(1, len(data)))
        return data[:at], f"truncated at byte {at} of {len(data)}"
    if kind == "bitflip":
        if not data:
            return data, "empty already: nothing to flip"
        out = bytearray(data)
        flips = sorted(rng.randrange(len(out) * 8) for _ in range(rng.randint(1, 8)))
        for bit in flips:
            out[bit // 8] ^= 1 << (bit % 8)
        return bytes(out), f"{len(flips)} bits flipped at bytes {[b // 8 for b in flips]}"
    if kind in ("delete-lines", "dup-lines"):
        units = _units(data)
        runs = rng.randint(1, 3)
        picked = []
        for _ in range(runs):
            start = rng.randrange(len(units))
            length = rng.randint(1, max(1, min(5, len(units) - start)))
            picked.append((start, length))
        # apply from the end so earlier indices stay valid
        for start, length in sorted(picked, reverse=True):
            if kind == "delete-lines":
                del units[start:start + length]
            else:
                units[start + length:start + length] = units[start:start + length]
        verb = "deleted" if kind == "delete-lines" else "duplicated"
        return b"".join(units), f"{verb} units (start, count) {sorted(picked)} of {len(_units(data))}"
    if kind == "empty-file":
        return b"", "emptied"
    if kind == "garbage-file":
        size = rng.randint(1, max(2, 2 * len(data)))
        if rng.random() < 0.5:
            garbage = rng.randbytes(size)
            what = "random bytes"
        else:                                    # garbage that looks like text / JSON-ish
            alphabet = b'{}[]":,0123456789abcdefghijklmnopqrstuvwxyz \n'
            garbage = bytes(rng.choice(alphabet) for _ in range(size))
            what = "random JSON-ish text"
        return garbage, f"replaced by {size} bytes of {what}"
    raise ValueError(kind)


def _is_gzip(path: Path, data: bytes) -> bool:
    return path.name.endswith(".gz") and data[:2] == b"\x1f\x8b"


def apply_damage(bundle: Path, fmt: str, damage: str, seed: int) -> str:
    """Damage ``bundle`` in place; returns what was done (deterministic in ``seed``)."""
    rng = random.Random(seed)
    cache = damage.startswith("cache:")
    kind = damage.split(":", 1)[1] if cache else damage
    files = cache_files(bundle) if cache else rank_files(bundle, fmt)
    if not files:
        raise RuntimeError(f"no {'cache' if cache else 'rank'} files in {bundle}")
    rel = lambda p: p.relative_to(bundle).as_posix()                       # noqa: E731
    if kind == "swap-files":
        if len(files) < 2:
            raise RuntimeError(f"cannot swap: one file in {bundle}")
        a, b = rng.sample(files, 2)
        da, db = a.read_bytes(), b.read_bytes()
        a.write_bytes(db)
        b.write_bytes(da)
        return f"contents of {rel(a)} and {rel(b)} exchanged"
    target = rng.choice(files)
    data = target.read_bytes()
    if kind == "gzip-cut":
        # a third of the cuts fall in the last 8 bytes (the CRC and size trailer)
        at = rng.randrange(max(1, len(data) - 8), len(data)) if rng.random() < 1 / 3 else rng.randrange(1, len(data))
        target.write_bytes(data[:at])
        return f"{rel(target)}: gzip stream cut at byte {at} of {len(data)}"
    if kind in ("truncate", "bitflip", "delete-lines", "dup-lines") and _is_gzip(target, data):
        plain, what = _damage_bytes(kind, gzip.decompress(data), rng)
        target.write_bytes(gzip.compress(plain, mtime=0))
        return f"{rel(target)} (inside the gzip stream): {what}"
    damaged, what = _damage_bytes(kind, data, rng)
    target.write_bytes(damaged)
    return f"{rel(target)}: {what}"


# ---------------------------------------------------------------- running and judging

def bundle_state(bundle: Path) -> dict[str, str]:
    """sha256 of every file of the bundle outside its cache directory."""
    state = {}
    for path in sorted(bundle.rglob("*")):
        rel = path.relative_to(bundle)
        if rel.parts[0] == ".mapp" or not path.is_file():
            continue
        state[rel.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


@dataclass
class Result:
    case: "Case"
    command: str
    outcome: str
    why: str = ""
    returncode: int | None = None
    output: str = ""
    seconds: float = 0.0
    timed_out: bool = False
    changes: str = ""               # bundle files changed, removed or added ("" when none)

    def head(self, lines: int = 8) -> str:
        """The output's first lines; of a traceback, the last frame in mapp's code and the exception."""
        text = [line for line in self.output.splitlines() if line.strip()]
        if TRACEBACK in self.output:
            start = max(i for i, line in enumerate(text) if TRACEBACK in line)
            tb = text[start:]
            ours = [i for i, line in enumerate(tb) if line.lstrip().startswith('File "')
                    and "/mapp/" in line and "site-packages" not in line]
            frame = tb[ours[-1]:ours[-1] + 2] if ours else []
            tail = tb[-1:]
            return "\n".join(text[:start][:lines] + tb[:1] + ["  ..."] + frame + ["  ..."] + tail)
        more = [f"... ({len(text) - lines} more lines)"] if len(text) > lines else []
        return "\n".join(text[:lines] + more)


def touched(before: dict[str, str], after: dict[str, str]) -> str:
    """What changed among the bundle's files ("" when nothing did)."""
    changed = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    gone = sorted(before.keys() - after.keys())
    added = sorted(after.keys() - before.keys())
    return "; ".join(f"{label}: {', '.join(names)}" for label, names in
                     (("changed", changed), ("removed", gone), ("added", added)) if names)


def exit_form(returncode: int | None, output: str) -> str:
    """"" when the exit has the promised form (0, or non-zero with one ``error:`` line); else why not."""
    if returncode is None:
        return "no exit (timeout)"
    if returncode < 0:
        return f"killed by signal {-returncode}"
    if returncode == 0:
        return ""
    lines = [line for line in output.splitlines() if line.strip()]
    if len(lines) == 1 and lines[0].startswith("error:"):
        return ""
    if not lines:
        return f"exit {returncode} with no output"
    errors = sum(line.startswith("error:") for line in lines)
    return f"exit {returncode} with {len(lines)} lines of output ({errors} starting with 'error:')"


def classify(returncode: int | None, output: str, changes: str, timed_out: bool) -> tuple[str, str]:
    """(outcome, why) of one run."""
    if timed_out:
        return "FAIL", "timeout"
    if TRACEBACK in output:
        return "FAIL", "traceback"
    if changes:
        return "FAIL", f"bundle files touched ({changes})"
    bad = exit_form(returncode, output)
    if bad:
        return "FAIL", bad
    if returncode == 0:
        lines = output.splitlines()
        return ("ok-with-warning" if any(line.lstrip().startswith("warning:") for line in lines) else "ok-clean"), ""
    return "one-line-error", ""


def run_command(bundle: Path, command: str, scratch: Path, timeout: float) -> tuple[int | None, str, bool, float]:
    argv = command_line(command, bundle, scratch)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1", "COLUMNS": "120"}
    started = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env,
                              cwd=scratch)
        out = done.stdout.decode("utf-8", "replace") + done.stderr.decode("utf-8", "replace")
        return done.returncode, out, False, time.perf_counter() - started
    except subprocess.TimeoutExpired as expired:
        out = (expired.stdout or b"").decode("utf-8", "replace") + (expired.stderr or b"").decode("utf-8", "replace")
        return None, out, True, time.perf_counter() - started


@dataclass
class Case:
    index: int
    fmt: str
    damage: str
    seed: int
    commands: tuple[str, ...] = COMMANDS
    what: str = ""
    results: list[Result] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.fmt}:{self.damage}:{self.seed}"


def prepare(case: Case, template: Path, into: Path) -> Path:
    """Copy the pristine bundle (file times kept, so its cache stays current) and damage it."""
    shutil.copytree(template, into, symlinks=True)
    case.what = apply_damage(into, case.fmt, case.damage, case.seed)
    return into


def run_one(case: Case, damaged: Path, command: str, work: Path, timeout: float) -> Result:
    """Run ``command`` on a fresh copy of the damaged bundle (each command sees the same damage)."""
    unit = Path(tempfile.mkdtemp(prefix=f"{command}-", dir=work))
    try:
        bundle = unit / "bundle"
        shutil.copytree(damaged, bundle, symlinks=True)
        scratch = unit / "out"
        scratch.mkdir()
        before = bundle_state(bundle)
        rc, out, timed_out, seconds = run_command(bundle, command, scratch, timeout)
        after = bundle_state(bundle)
        changes = touched(before, after)
        outcome, why = classify(rc, out, changes, timed_out)
        return Result(case, command, outcome, why, rc, out.replace(str(bundle), "DIR"), seconds, timed_out, changes)
    finally:
        shutil.rmtree(unit, ignore_errors=True)


def run_cases(cases: list[Case], templates: dict[str, Path], work: Path, timeout: float = DEFAULT_TIMEOUT_S,
              jobs: int = 2):
    """Run ``jobs`` cases at once (each: damage a copy of its format's template, run its commands
    one after the other); yields every case, in order, with its ``results`` filled in."""
    def one(case: Case) -> Case:
        damaged = prepare(case, templates[case.fmt], work / f"case-{case.index}")
        try:
            case.results = [run_one(case, damaged, c, work, timeout) for c in case.commands]
        finally:
            shutil.rmtree(damaged, ignore_errors=True)
        return case

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        yield from pool.map(one, cases)


def make_cases(n: int, seed: int) -> list[Case]:
    """``n`` cases cycling over every (format, damage) pair in a seeded order, each with its own seed."""
    rng = random.Random(seed)
    pairs = [(f, d) for d in DAMAGES for f in FORMATS if applies(f, d)]
    cases: list[Case] = []
    while len(cases) < n:
        round_ = pairs[:]
        rng.shuffle(round_)
        for fmt, damage in round_[: n - len(cases)]:
            cases.append(Case(len(cases), fmt, damage, rng.randrange(2 ** 31)))
    return cases


# ---------------------------------------------------------------- the table

def outcome_table(results: list[Result], title: str):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("damage")
    for command in COMMANDS:
        table.add_column(command, justify="right")
    table.add_column("total", justify="right")
    table.caption = "each cell: " + "/".join(OUTCOMES)
    table.caption_justify = "left"

    def cell(rs: list[Result]) -> str:
        counts = Counter(r.outcome for r in rs)
        text = "/".join(str(counts[o]) for o in OUTCOMES)
        return f"[bold red]{text}[/]" if counts["FAIL"] else text

    for damage in DAMAGES:
        row = [r for r in results if r.case.damage == damage]
        if row:
            table.add_row(damage, *(cell([r for r in row if r.command == c]) for c in COMMANDS), cell(row))
    table.add_row("[bold]total[/]", *(cell([r for r in results if r.command == c]) for c in COMMANDS),
                  cell(results), end_section=True)
    return table


def markdown_table(results: list[Result]) -> str:
    """The same table in Markdown (for BENCHMARKS.md)."""
    def cell(rs):
        counts = Counter(r.outcome for r in rs)
        return " / ".join(str(counts[o]) for o in OUTCOMES)

    lines = ["| damage | " + " | ".join(COMMANDS) + " | total |", "|---" * (len(COMMANDS) + 2) + "|"]
    for damage in DAMAGES:
        row = [r for r in results if r.case.damage == damage]
        if row:
            lines.append(f"| {damage} | " + " | ".join(cell([r for r in row if r.command == c]) for c in COMMANDS)
                         + f" | {cell(row)} |")
    lines.append("| **total** | " + " | ".join(cell([r for r in results if r.command == c]) for c in COMMANDS)
                 + f" | **{cell(results)}** |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.markup import escape

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=60, help="number of damaged bundles (default 60)")
    parser.add_argument("--seed", type=int, default=14, help="master seed (default 14)")
    parser.add_argument("--jobs", type=int, default=2, help="commands run at once (default 2)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per command")
    parser.add_argument("--only", metavar="FORMAT:DAMAGE:SEED", action="append",
                        help="run just this case (repeatable), as printed with a failure")
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated subset of formats")
    parser.add_argument("--keep-failures", type=Path, metavar="DIR",
                        help="keep a copy of every failing damaged bundle under DIR")
    parser.add_argument("--markdown", action="store_true", help="also print the table in Markdown")
    args = parser.parse_args(argv)
    console = Console(highlight=False)
    console = Console(highlight=False, width=max(console.width, 132))

    if args.only:
        cases = []
        for i, spec in enumerate(args.only):
            fmt, rest = spec.split(":", 1)
            damage, seed = rest.rsplit(":", 1)
            if fmt not in FORMATS or damage not in DAMAGES or not applies(fmt, damage):
                parser.error(f"--only {spec}: unknown or inapplicable format/damage")
            cases.append(Case(i, fmt, damage, int(seed)))
    else:
        formats = tuple(f for f in args.formats.split(",") if f)
        cases = [c for c in make_cases(args.cases * 4, args.seed) if c.fmt in formats][: args.cases]
        for i, case in enumerate(cases):
            case.index = i
    needed = sorted({c.fmt for c in cases}, key=FORMATS.index)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mapp-fuzz-") as tmp:
        work = Path(tmp)
        console.print(f"building pristine bundles and their caches: {', '.join(needed)}")
        templates = build_templates(work / "templates", needed)
        results: list[Result] = []
        for case in run_cases(cases, templates, work, args.timeout, args.jobs):
            rs = case.results
            results += rs
            marks = " ".join(f"{r.command}={r.outcome}" for r in rs)
            console.print(f"case {case.index:3d} seed {case.seed:10d} {case.fmt:11s} {case.damage:18s} "
                          f"{escape(marks)}  [dim]{escape(case.what)}[/]")
            if args.keep_failures and any(r.outcome == "FAIL" for r in rs):
                keep = args.keep_failures / f"{case.fmt}-{case.damage.replace(':', '-')}-{case.seed}"
                if not keep.exists():
                    prepare(Case(case.index, case.fmt, case.damage, case.seed), templates[case.fmt], keep)
    elapsed = time.perf_counter() - started

    console.print()
    console.print(outcome_table(results, f"{len(cases)} damaged bundles x {len(COMMANDS)} commands, "
                                         f"seed {args.seed}, {elapsed:.0f} s"))
    by_format = Counter((r.case.fmt, r.outcome) for r in results)
    console.print("by format: " + "; ".join(
        f"{f} " + "/".join(str(by_format[(f, o)]) for o in OUTCOMES) for f in needed))
    if args.markdown:
        console.print(markdown_table(results), markup=False)
    fails = [r for r in results if r.outcome == "FAIL"]
    for r in fails:
        console.print(f"\n[bold red]FAIL[/] {r.command} on {r.case.fmt}, damage {r.case.damage} "
                      f"(--only {r.case.key}): {escape(r.why)}, exit {r.returncode}, {r.seconds:.1f} s")
        console.print(f"  damage: {escape(r.case.what)}")
        for line in r.head(12).splitlines():
            console.print("  | " + escape(line), soft_wrap=True)
    console.print(f"\n{len(fails)} FAIL of {len(results)} runs" if fails else f"\nno FAIL in {len(results)} runs")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
