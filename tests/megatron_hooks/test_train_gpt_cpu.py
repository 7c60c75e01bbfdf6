"""End to end on CPU: torchrun 4 ranks (gloo), megatron-core GPT, traced by mapp.

Two runs, each tracing iterations 1 and 2 of 0..3 (iterations 0 and 3 untraced, so the
``seq`` counters must also count untraced calls):

- ``tp2pp2``: TP2 x PP2, 1F1B, rank 3 slowed 3x by ``--slow-rank 3 --slow-factor 3``;
- ``dp2pp2_vpp2``: DP2 x PP2 with interleaving (2 model chunks per rank), nobody slowed,
  traced at ``op`` granularity (attention and MLP too; ``tp2pp2`` uses the default ``layer``).

The trace files are checked directly; ``mapp trace merge`` / ``mapp detect`` checks are at the
end, skipped until ``mapp.analysis.detect`` exists.
"""

from __future__ import annotations

import collections
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ._torchrun import EXAMPLE, Run, run_example

LAYERS, MICROBATCHES, TRACED = 4, 4, {1, 2}
COMMON = ["--iterations", "4", "--trace-start", "1", "--trace-interval", "10",
          "--continuous-trace-iterations", "2"]


@pytest.fixture(scope="module")
def tp2pp2(tmp_path_factory) -> Run:
    return run_example(tmp_path_factory.mktemp("tp2pp2") / "trace",
                       ["--tp", "2", "--pp", "2", *COMMON, "--slow-rank", "3", "--slow-factor", "3"])


@pytest.fixture(scope="module")
def dp2pp2_vpp2(tmp_path_factory) -> Run:
    return run_example(tmp_path_factory.mktemp("dp2pp2") / "trace",
                       ["--tp", "1", "--pp", "2", "--vpp", "2", *COMMON, "--trace-granularity", "op"])


RUNS = ["tp2pp2", "dp2pp2_vpp2"]


@pytest.fixture(params=RUNS)
def run(request) -> Run:
    return request.getfixturevalue(request.param)


def xs(events, name=None, cat=None):
    return [e for e in events if e["ph"] == "X" and (name is None or e["name"] == name)
            and (cat is None or e["cat"] == cat)]


def expected_layers(meta: dict) -> dict[int, list[int]]:
    """chunk -> global layer indices this rank holds (megatron's even split)."""
    pp, vpp = meta["layout"]["pp"], meta["layout"].get("vpp", 1)
    per_stage = LAYERS // (pp * vpp)
    out = {}
    for chunk in range(vpp):
        stage = chunk * pp + meta["coords"]["pp"]
        out[chunk] = list(range(stage * per_stage, (stage + 1) * per_stage))
    return out


def test_every_rank_wrote_a_v1_file_with_its_layout(run: Run):
    assert sorted(run.events) == [0, 1, 2, 3]
    for rank, meta in run.meta.items():
        assert not run.cut[rank]
        assert meta["format"] == "mapp-trace" and meta["version"] == 1 and meta["world_size"] == 4
        assert meta["clock"] == "host" and "unix_ns" in meta["clock_anchor"]
        by_rank = run.groups["by_rank"][rank]
        assert rank in by_rank["tp"] and rank in by_rank["pp"] and rank in by_rank["dp"]
        assert meta["coords"]["tp"] == by_rank["tp"].index(rank)
        assert meta["coords"]["pp"] == by_rank["pp"].index(rank)
        assert meta["coords"]["dp"] == by_rank["dp"].index(rank)
        assert meta["layout"]["tp"] * meta["layout"]["pp"] * meta["layout"]["dp"] == 4


def test_only_the_window_is_traced(run: Run):
    for rank, events in run.events.items():
        iterations = sorted(e["args"]["iteration"] for e in xs(events, "iteration", "iteration"))
        assert iterations == sorted(TRACED), rank
        assert {e["args"]["iteration"] for e in xs(events)} == TRACED


def test_layer_forward_and_backward_for_every_layer_microbatch_and_chunk(run: Run):
    for rank, events in run.events.items():
        meta = run.meta[rank]
        want = collections.Counter()
        for chunk, layers in expected_layers(meta).items():
            for it in TRACED:
                for mb in range(MICROBATCHES):
                    for layer in layers:
                        want[(it, mb, chunk, layer)] = 1
        op = meta["tracer"]["granularity"] == "op"
        if not op:  # attention and MLP are op granularity
            assert not xs(events, "attention.forward") and not xs(events, "mlp.backward"), rank
        for phase in ("forward", "backward"):
            for kind in ("layer", "attention", "mlp") if op else ("layer",):
                got = collections.Counter(
                    (e["args"]["iteration"], e["args"]["microbatch"], e["args"]["chunk"], e["args"]["layer"])
                    for e in xs(run.events[rank], f"{kind}.{phase}"))
                assert got == want, (rank, kind, phase)


def test_schedule_steps_carry_microbatch_and_chunk(run: Run):
    for rank, events in run.events.items():
        vpp = run.meta[rank]["layout"].get("vpp", 1)
        want = collections.Counter({(it, mb, c): 1 for it in TRACED for mb in range(MICROBATCHES) for c in range(vpp)})
        for name in ("forward", "backward"):
            got = collections.Counter((e["args"]["iteration"], e["args"]["microbatch"], e["args"]["chunk"])
                                      for e in xs(events, name))
            assert got == want, (rank, name)
        # every layer event of a microbatch lies inside that microbatch's schedule step
        steps = {(e["name"], e["args"]["iteration"], e["args"]["microbatch"], e["args"]["chunk"]): e
                 for e in xs(events, "forward") + xs(events, "backward")}
        for e in xs(events, "layer.forward") + xs(events, "layer.backward"):
            phase = e["name"].split(".")[1]
            step = steps[(phase, e["args"]["iteration"], e["args"]["microbatch"], e["args"]["chunk"])]
            assert step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 1.0


def test_tp_collectives_match_within_the_real_tp_group(run: Run):
    instances = collections.defaultdict(list)
    tp_size = run.meta[0]["layout"]["tp"]
    for rank, events in run.events.items():
        tp_group = run.groups["by_rank"][rank]["tp"]
        coll = [e for e in xs(events, cat="collective") if e["args"]["group"] == "tp"]
        if tp_size == 1:
            assert coll == []
            continue
        assert coll, rank
        seqs = [e["args"]["seq"] for e in coll]
        assert len(seqs) == len(set(seqs)), "seq repeated on one rank"
        for e in coll:
            assert e["args"]["group_ranks"] == tp_group
            assert e["tid"] == "comm" and e["args"]["bytes"] > 0 and e["args"]["dtype"] == "fp32"
            instances[(tuple(e["args"]["group_ranks"]), e["args"]["seq"])].append(
                (rank, e["name"], e["args"]["bytes"], e["args"]["iteration"]))
    for (ranks, seq), members in instances.items():
        assert sorted(m[0] for m in members) == list(ranks), (ranks, seq, members)
        assert len({m[1:] for m in members}) == 1, (ranks, seq, members)
    if tp_size > 1:
        # the untraced iteration 0 advanced the counters: traced seqs do not start at 0
        assert min(seq for _, seq in instances) > 0


def test_data_parallel_grad_reduce_matches(run: Run):
    if run.meta[0]["layout"]["dp"] == 1:
        pytest.skip("no data parallelism in this run")
    instances = collections.defaultdict(list)
    for rank, events in run.events.items():
        for e in xs(events, "grad_reduce"):
            a = e["args"]
            assert a["group"] == "dp" and a["group_ranks"] == run.groups["by_rank"][rank]["dp"]
            instances[(tuple(a["group_ranks"]), a["seq"])].append((rank, a["bytes"]))
    assert instances
    for key, members in instances.items():
        assert sorted(r for r, _ in members) == list(key[0]) and len({b for _, b in members}) == 1


def test_every_send_has_its_recv(run: Run):
    sends, recvs = {}, {}
    for rank, events in run.events.items():
        for e in xs(events, cat="p2p"):
            a = e["args"]
            assert a["peer"] in run.groups["by_rank"][rank]["pp"] and a["peer"] != rank
            if e["name"] == "send":
                key = (rank, a["peer"], a["seq"])
                assert key not in sends
                sends[key] = a
                assert a["microbatch"] is not None and a["chunk"] is not None
            else:
                key = (a["peer"], rank, a["seq"])
                assert key not in recvs
                recvs[key] = a
    assert sends and set(sends) == set(recvs)
    for key, send in sends.items():
        assert send["bytes"] == recvs[key]["bytes"] and send["iteration"] == recvs[key]["iteration"]


def test_no_event_is_written_twice(run: Run):
    for rank, events in run.events.items():
        keys = [(e["name"], e["tid"], e["ts"], e["dur"]) for e in xs(events)]
        assert len(keys) == len(set(keys)), rank
        ids = [(e["name"], tuple(sorted((k, str(v)) for k, v in e["args"].items())))
               for e in xs(events) if e["cat"] in ("compute", "collective", "p2p", "optimizer", "iteration")]
        assert len(ids) == len(set(ids)), rank


def test_optimizer_step_once_per_traced_iteration(run: Run):
    for rank, events in run.events.items():
        assert sorted(e["args"]["iteration"] for e in xs(events, "optimizer_step")) == sorted(TRACED)


def _median_compute(events, name):
    """Median duration of ``name`` spans minus the collectives inside them: a TP peer of a slow
    rank waits inside its all-reduces, which is not its own compute."""
    colls = [(e["ts"], e["ts"] + e["dur"]) for e in xs(events, cat="collective")]
    own = []
    for e in xs(events, name):
        start, end = e["ts"], e["ts"] + e["dur"]
        waiting = sum(min(b, end) - max(a, start) for a, b in colls if a < end and b > start)
        own.append(e["dur"] - waiting)
    return statistics.median(own)


def test_slowed_rank_is_clearly_slower(tp2pp2: Run):
    for name in ("layer.forward", "layer.backward"):
        durations = {rank: _median_compute(events, name) for rank, events in tp2pp2.events.items()}
        others = max(d for r, d in durations.items() if r != 3)
        assert durations[3] > 1.8 * others, (name, durations)


def test_trace_merge_reads_the_traces(run: Run, tmp_path):
    pytest.importorskip("mapp.cli.app")
    out = tmp_path / "merged.json"
    proc = subprocess.run([sys.executable, "-c", "from mapp.cli.main import main; main()", "trace", "merge",
                           str(run.trace_dir), "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    merged = json.loads(out.read_text())
    merged = merged["traceEvents"] if isinstance(merged, dict) else merged
    ours = collections.Counter(e["name"] for evs in run.events.values() for e in xs(evs, cat="compute"))
    theirs = collections.Counter(e["name"] for e in merged if e.get("ph") == "X" and e.get("cat") == "compute")
    assert theirs == ours


# ---------------------------------------------------------------------------------------
# mapp detect on the same traces: for tp2pp2 the top suspect is rank 3 (compute, slowed 3x);
# dp2pp2_vpp2 (nobody slowed) has no suspect anywhere near that.
def test_detect_finds_the_slowed_rank(tp2pp2: Run, dp2pp2_vpp2: Run):
    detect = pytest.importorskip("mapp.analysis.detect")
    ingest = pytest.importorskip("mapp.analysis.ingest")
    slowed = detect.detect_bundle(ingest.load_bundle(tp2pp2.trace_dir))
    assert slowed.suspects and slowed.suspects[0].rank == 3
    # Four ranks share two cores with whatever else runs: the OS scheduler really does slow a
    # rank's host or compute, and the detector rightly says so (seen under load: a slow host
    # at 1.11x and at 1.28x, slow compute at 1.55x in one of two iterations). Whether a live
    # healthy run has a suspect depends on the machine, not on mapp; that healthy jobs get none
    # is asserted on recorded ones (tests/analysis/detect/test_real_corpus.py). Here: nothing
    # in the healthy job looks like the 3x fault.
    clean = detect.detect_bundle(ingest.load_bundle(dp2pp2_vpp2.trace_dir))
    assert all(s.slowdown < 2.0 for s in clean.suspects), clean.suspects


def test_a_cpu_neighbour_starts_on_one_core_and_leaves_with_the_job(tmp_path):
    # `--slow-mode cpu-hog`: rank 1 pinned to one core, beside a process pinned there that spins
    # by turns. Asserted: the neighbour starts (and says which core it spins on), the job runs to
    # its end with both ranks traced, and the neighbour goes with it (which core the rank runs on
    # is not seen from here)
    run = run_example(tmp_path / "trace", ["--tp", "1", "--pp", "1", *COMMON, "--slow-rank", "1",
                                           "--slow-mode", "cpu-hog", "--slow-duty", "0.4"], nproc=2)
    said = [line for line in run.output.splitlines() if line.startswith("cpu-hog:")]
    assert len(said) == 1 and said[0].startswith("cpu-hog: spinning 0.4 of every 20 ms on CPU ")
    assert sorted(run.events) == [0, 1]
    for _ in range(100):   # (under load a terminated process may take a moment to go)
        if not _cpu_hogs():
            break
        time.sleep(0.1)
    assert _cpu_hogs() == []


def _cpu_hogs() -> list[int]:
    """Processes running train_gpt's cpu-hog neighbour (its code is passed with ``-c``)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:   # (not a process, or gone meanwhile)
            continue
        if b"spinning" in cmdline and b"sched_setaffinity" in cmdline:
            pids.append(int(proc.name))
    return pids


@pytest.mark.parametrize("args, said", [
    (["--slow-rank", "0", "--slow-mode", "gpu-hog"], "--slow-mode gpu-hog needs a GPU"),
    (["--slow-duty", "1.5"], "--slow-duty takes a share of the time between 0 and 1"),
])
def test_a_gpu_neighbour_asked_of_a_cpu_job_is_refused_in_one_line(args, said):
    # `--slow-mode gpu-hog` shares the slowed rank's GPU with another process: on CPU there is
    # none, and the job says so before it starts any process group
    done = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert said in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["a", "1,x", "-1"])
def test_slow_ranks_that_are_no_ranks_are_refused_before_any_process_starts(value):
    # ``--slow-rank`` takes one rank or several comma-separated (a slow node's)
    done = subprocess.run([sys.executable, str(EXAMPLE), "--slow-rank", value], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert "argument --slow-rank" in done.stderr and "Traceback" not in done.stderr
