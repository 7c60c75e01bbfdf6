"""The simulator replays the task orders megatron-core really runs.

``mapp.scheduling.simulate.orders`` states megatron-core's 1F1B and interleaved orders from
their definition; here they are checked against what megatron-core did: traces captured by
mapp (``schedule`` granularity: one ``forward``/``backward`` span per microbatch and chunk)
of real training runs, the committed PP2 corpus cases (1F1B) and a fresh PP2 x VPP2 run
(interleaved, megatron's microbatch groups of ``pp``), every rank's sequence of tasks in time
order against the simulator's for the same shape.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mapp.scheduling.simulate import ScheduleConfig
from mapp.scheduling.simulate.orders import reference_orders
from tests.capture._read import read_v1

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "cases"


def _ran(path: Path) -> tuple[dict, dict[int, list[tuple[str, int, int]]]]:
    """The rank's metadata and, per traced iteration, its tasks in time order as the simulator
    names them: (kind, virtual stage = chunk x pp + pipeline rank, microbatch)."""
    events, _ = read_v1(path)
    meta = next(e["args"] for e in events if e.get("name") == "mapp")
    pp, rank = meta["layout"]["pp"], meta["coords"]["pp"]
    steps: dict[int, list] = {}
    spans = sorted((e for e in events if e.get("ph") == "X" and e["name"] in ("forward", "backward")),
                   key=lambda e: e["ts"])
    for e in spans:
        a = e["args"]
        steps.setdefault(a["iteration"], []).append(("F" if e["name"] == "forward" else "B",
                                                     a["chunk"] * pp + rank, a["microbatch"]))
    return meta, steps


def _check(trace_dir: Path, microbatches: int) -> int:
    """Compare every rank's every traced iteration with the simulator; the number compared."""
    compared = 0
    for path in sorted(trace_dir.glob("rank-*.json")):
        meta, steps = _ran(path)
        layout = meta["layout"]
        config = ScheduleConfig(schedule="interleaved" if layout.get("vpp", 1) > 1 else "1f1b", pp=layout["pp"],
                                vpp=layout.get("vpp", 1), microbatches=microbatches)
        expected = reference_orders(config)[meta["coords"]["pp"]]
        assert steps, path
        for iteration, tasks in steps.items():
            assert tasks == expected, (path.name, iteration)
            compared += 1
    return compared


@pytest.mark.parametrize("case", ["gpt-pp2dp2-mapp-healthy", "gpt-tp2pp2-mapp-healthy",
                                  "gpt-pp2dp2-mapp-seqlognorm0.8"])
def test_one_f_one_b_is_what_megatron_ran(case):
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    command = next(c["command"] for c in manifest["cases"] if c["id"] == case).split()
    microbatches = int(command[command.index("--num-microbatches") + 1])
    assert _check(CORPUS / case, microbatches) >= 4


def test_interleaved_is_what_megatron_ran(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    from tests.megatron_hooks._torchrun import run_example

    run_example(tmp_path / "trace", ["--pp", "2", "--vpp", "2", "--num-microbatches", "6", "--iterations", "3",
                                     "--trace-granularity", "schedule", "--trace-interval", "1"], nproc=2)
    assert _check(tmp_path / "trace", 6) >= 4
