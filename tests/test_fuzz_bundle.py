"""Never lose a trace (issue 14): a fixed, seeded subset of ``benchmarks/fuzz.py``.

Every damage kind on the rank files and on the cache (``DIR/.mapp``), over the four input
formats (mapp v1, Kineto gzipped and plain, MegatronApp), each case running one command as
``python -m mapp`` on its own copy of the damaged bundle. Whatever the damage, a command

* prints no Python traceback,
* changes no file of the bundle outside ``.mapp`` (it may rebuild the cache, never the traces),
* exits 0 (a ``warning:`` line allowed) or non-zero with exactly one line of output, ``error:``.

Reproduce one case with ``python benchmarks/fuzz.py --only FORMAT:DAMAGE:SEED``.
"""

from __future__ import annotations

import pytest

from benchmarks.fuzz import TRACEBACK, Case, build_templates, exit_form, run_cases

# (format, damage, command, seed): every damage kind, every format, every command.
CASES = [
    ("mapp-v1", "truncate", "merge", 101),
    ("kineto-gz", "truncate", "detect", 102),
    ("kineto-json", "truncate", "sql", 103),
    ("megatronapp", "truncate", "report", 104),
    ("mapp-v1", "bitflip", "detect", 105),
    ("kineto-json", "bitflip", "merge", 106),
    ("megatronapp", "delete-lines", "sql", 107),
    ("kineto-gz", "delete-lines", "report", 108),
    ("mapp-v1", "dup-lines", "sql", 109),
    ("kineto-json", "dup-lines", "detect", 110),
    ("megatronapp", "swap-files", "merge", 111),
    ("mapp-v1", "swap-files", "report", 112),
    ("kineto-gz", "empty-file", "sql", 113),
    ("megatronapp", "empty-file", "detect", 114),
    ("kineto-json", "garbage-file", "report", 115),
    ("mapp-v1", "garbage-file", "merge", 116),
    ("kineto-gz", "gzip-cut", "merge", 117),
    ("kineto-gz", "gzip-cut", "detect", 118),
    ("mapp-v1", "cache:truncate", "detect", 119),
    ("kineto-gz", "cache:bitflip", "sql", 120),
    ("megatronapp", "cache:garbage-file", "report", 121),
    ("kineto-json", "cache:empty-file", "merge", 122),
    ("mapp-v1", "cache:swap-files", "sql", 123),
    ("megatronapp", "cache:delete-lines", "detect", 124),
    ("kineto-gz", "cache:dup-lines", "report", 125),
    # found by benchmarks/fuzz.py: the matching cache's files swapped, events.parquet cut inside
    # its data pages (its footer intact)
    ("megatronapp", "cache:swap-files", "detect", 2100080514),
    ("kineto-gz", "cache:delete-lines", "detect", 1475216845),
]
TIMEOUT_S = 120.0
IDS = [f"{fmt}:{damage}:{seed}-{command}" for fmt, damage, command, seed in CASES]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Run every case once (two at a time), keyed by its id."""
    work = tmp_path_factory.mktemp("fuzz")
    cases = [Case(i, fmt, damage, seed, commands=(command,)) for i, (fmt, damage, command, seed) in enumerate(CASES)]
    templates = build_templates(work / "templates", sorted({c.fmt for c in cases}))
    done = {}
    for case, key in zip(run_cases(cases, templates, work, TIMEOUT_S, jobs=2), IDS):
        (done[key],) = case.results
    return done


@pytest.mark.parametrize("key", IDS)
def test_damaged_bundle(results, key):
    r = results[key]
    where = f"{r.command} on {r.case.fmt} after {r.case.what} (--only {r.case.key})"
    assert not r.timed_out, f"{where}: no exit within {TIMEOUT_S:.0f} s"
    assert TRACEBACK not in r.output, f"{where}: traceback\n{r.output}"
    assert not r.changes, f"{where}: bundle files touched: {r.changes}"
    assert exit_form(r.returncode, r.output) == "", f"{where}: {exit_form(r.returncode, r.output)}\n{r.output}"
