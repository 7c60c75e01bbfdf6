"""The PyTorch profiler (Kineto) reader, on real gloo and NCCL traces and a hand-written NCCL one.

Expected values come from what the fixture programs do (see tests/fixtures/make_kineto_gloo.py,
tests/fixtures/make_kineto_nccl.py (run on 2x H200, torch 2.11, NCCL 2.28) and
tests/fixtures/kineto_nccl/README.md), not from the reader.
"""

from __future__ import annotations

import gzip
import json
import pathlib

import orjson
import polars as pl
import pytest

from mapp.analysis.ingest import kineto, schema
from mapp.errors import TraceFormatError

FIXTURES = pathlib.Path(__file__).parent.parent.parent / "fixtures"
GLOO = sorted((FIXTURES / "kineto_gloo").glob("rank-*.json"))
NCCL = sorted((FIXTURES / "kineto_nccl").glob("rank-*.json"))
NCCL_H200 = FIXTURES / "kineto_nccl_h200"


def _read(files, warnings=None):
    sink = warnings if warnings is not None else []
    return kineto.read(list(files), warn=sink.append)


@pytest.fixture(scope="module")
def gloo():
    return _read(GLOO)


@pytest.fixture(scope="module")
def nccl():
    return _read(NCCL)


def test_schema(gloo, nccl):
    for events, ranks in (gloo, nccl):
        assert events.schema == pl.Schema(schema.EVENTS_SCHEMA)
        assert ranks.schema == pl.Schema(schema.RANKS_SCHEMA)


# --- real gloo trace -------------------------------------------------------------------------

def test_gloo_ranks(gloo):
    events, ranks = gloo
    assert ranks["rank"].to_list() == [0, 1]
    assert ranks["world_size"].to_list() == [2, 2]
    assert ranks["format"].to_list() == ["kineto", "kineto"]
    assert ranks["clock"].to_list() == ["host", "host"]
    assert ranks["src_file"].to_list() == [str(p) for p in GLOO]
    for axis in schema.COORDS:
        assert ranks[axis].null_count() == 2
        assert events[axis].null_count() == events.height


def test_gloo_steps(gloo):
    events, _ = gloo
    steps = events.filter(pl.col("cat") == "iteration")
    assert steps.group_by("rank").agg(pl.col("iteration").sort()).sort("rank")["iteration"].to_list() == [[1, 2], [1, 2]]
    assert steps["lane"].unique().to_list() == ["iteration"]
    # the recorded matmuls happen inside a step
    assert events.filter(pl.col("name") == "aten::mm")["iteration"].null_count() == 0


def test_gloo_times_are_integer_ns_from_the_file(gloo):
    events, _ = gloo
    raw = json.loads(GLOO[0].read_text())
    step = next(e for e in raw["traceEvents"] if e.get("name") == "ProfilerStep#1")
    row = events.filter((pl.col("rank") == 0) & (pl.col("name") == "ProfilerStep#1"))
    assert row["ts_ns"][0] == round(step["ts"] * 1000) + raw["baseTimeNanoseconds"]
    assert row["dur_ns"][0] == round(step["dur"] * 1000)


def test_gloo_collectives(gloo):
    events, _ = gloo
    coll = events.filter(pl.col("cat") == "collective")
    per_rank = coll.group_by("rank", "name").len().sort("rank", "name").rows()
    # each step: all_reduce(world grad), broadcast, all_reduce(pair subgroup)
    assert per_rank == [(0, "all_reduce", 4), (0, "broadcast", 2), (1, "all_reduce", 4), (1, "broadcast", 2)]
    assert coll["group_ranks"].to_list() == [[0, 1]] * coll.height
    assert coll["group"].null_count() == coll.height        # two process groups: cannot tell which
    assert coll["seq"].null_count() == coll.height          # gloo records no sequence numbers
    sizes = coll.group_by("name", "bytes").len().sort("name", "bytes").rows()
    # 64x64 float32 grad, 16 float32 on the pair group, 8 float32 broadcast; two steps x two ranks
    assert sizes == [("all_reduce", 64, 4), ("all_reduce", 64 * 64 * 4, 4), ("broadcast", 32, 4)]
    assert all(lane.startswith("cpu:") for lane in coll["lane"])
    assert orjson.loads(coll["args"][0])["kineto_name"].startswith("gloo:")


def test_gloo_send_recv(gloo):
    events, _ = gloo
    p2p = events.filter(pl.col("cat") == "p2p").sort("rank", "ts_ns")
    assert p2p.select("rank", "name", "peer", "bytes", "iteration").rows() == [
        (0, "send", 1, 400, 1), (0, "send", 1, 400, 2), (1, "recv", 0, 400, 1), (1, "recv", 0, 400, 2)]
    main_lanes = dict(events.filter(pl.col("name") == "train_step").select("rank", "lane").unique().rows())
    assert dict(p2p.select("rank", "lane").unique().rows()) == main_lanes


def test_a_gloo_p2p_call_starts_when_its_c10d_call_posted_it(gloo):
    events, _ = gloo
    # the fixture's gloo:send opened 19 us after its c10d::send (and gloo:recv 12 us after its
    # c10d::recv_): the call is timed from the post, to the end of gloo's own span
    p2p = events.filter(pl.col("cat") == "p2p").sort("rank", "ts_ns")
    posts = events.filter(pl.col("name").is_in(["c10d::send", "c10d::recv_"])).sort("rank", "ts_ns")
    assert p2p.select("rank", "lane", "ts_ns").rows() == posts.select("rank", "lane", "ts_ns").rows()
    # how long each ran past its c10d call, in ns from the file's us (c10d::send at .749 for
    # 21.767 us, gloo:send at .843 for 7.772 on rank 0), rounded to the ns
    beyond = [(10310843 + 7772 - 10291749) - 21767, (18112372 + 6756 - 18093862) - 20673,
              (10289407 + 38444 - 10277889) - 13748, (18087586 + 46904 - 18078758) - 10531]
    got = (p2p["dur_ns"] - posts["dur_ns"]).to_list()
    assert all(abs(a - b) <= 1 for a, b in zip(got, beyond, strict=True))


def test_gloo_other_categories(gloo):
    events, _ = gloo
    opt = events.filter(pl.col("name") == "Optimizer.step#SGD.step")
    assert opt["cat"].unique().to_list() == ["optimizer"]
    assert opt.height == 4
    assert events.filter(pl.col("name").str.starts_with("c10d::"))["cat"].unique().to_list() == ["other"]
    assert events.filter(pl.col("name") == "aten::mm")["cat"].unique().to_list() == ["compute"]
    # metadata, flows and instants are not rows
    assert events.filter(pl.col("name").is_in(["fwdbwd", "process_name", "Record Window End"])).height == 0
    assert events["ph"].unique().to_list() == ["X"]
    assert events["src_line"].null_count() == events.height


# --- real NCCL trace (2x H200) ---------------------------------------------------------------

@pytest.fixture(scope="module")
def h200():
    return _read(sorted(NCCL_H200.glob("rank-*.json")))


def test_real_nccl_ranks(h200):
    _, ranks = h200
    assert ranks.select("rank", "world_size", "device").rows() == [(0, 2, "NVIDIA H200"), (1, 2, "NVIDIA H200")]


def test_a_cpu_job_on_a_gpu_machine_names_no_gpu():
    # 4 gloo processes on the cores of a machine with 2 H200s, no process using one: the profiler
    # lists the machine's GPUs in deviceProperties all the same (tests/corpus/cases-users)
    case = FIXTURES.parent / "corpus" / "cases-users" / "ddp4-transformer-tb-gpuhost-fwd1.5x-r2"
    files = sorted(case.glob("*.pt.trace.json.gz"))
    with gzip.open(files[0]) as f:
        doc = json.load(f)
    assert doc["deviceProperties"][0]["name"] == "NVIDIA H200" and doc["distributedInfo"]["backend"] == "gloo"
    events, ranks = _read(files)
    assert ranks["device"].to_list() == [None] * 4
    assert not events["lane"].str.starts_with("stream:").any()


def test_real_nccl_communication(h200):
    events, _ = h200
    comm = events.filter(pl.col("cat").is_in(["collective", "p2p"])).sort("rank", "ts_ns")
    assert comm["lane"].str.starts_with("stream:").all()  # dated by the GPU kernels
    for rank in (0, 1):
        mine = comm.filter(pl.col("rank") == rank)
        p2p = "send" if rank == 0 else "recv"
        # per recorded step: all_reduce (world), all_gather (tp), then the send or recv
        assert mine["name"].to_list() == ["all_reduce", "all_gather", p2p] * 2
        assert mine["iteration"].to_list() == [1, 1, 1, 2, 2, 2]
        ar = mine.filter(pl.col("name") == "all_reduce")
        assert ar.select("group", "bytes").rows() == [("world", 1024 * 1024 * 2)] * 2
        assert ar["group_ranks"].to_list() == [[0, 1]] * 2
        ag = mine.filter(pl.col("name") == "all_gather")
        assert ag.select("group", "bytes").rows() == [("tp", 256 * 4)] * 2
        pp = mine.filter(pl.col("name") == p2p)
        assert pp.select("peer", "bytes").rows() == [(1 - rank, 4096 * 2)] * 2
    # torch 2.11 writes no "Seq" into these traces: left null, not invented
    assert comm["seq"].null_count() == comm.height
    # record_param_comms of the p2p "wait" is not a collective
    assert events.filter(pl.col("name") == "wait").height == 0


def test_real_nccl_calls_match_across_ranks(tmp_path):
    import shutil

    from mapp.analysis.graph import match_bundle
    from mapp.analysis.ingest import load_bundle

    for f in NCCL_H200.glob("rank-*.json"):  # a copy: the bundle writes its cache beside the traces
        shutil.copy(f, tmp_path / f.name)
    matching = match_bundle(load_bundle(tmp_path))
    coll = matching.collectives.sort("op")
    assert coll.select("op", "group").rows() == [("all_gather", "tp")] * 2 + [("all_reduce", "world")] * 2
    assert coll["group_ranks"].to_list() == [[0, 1]] * 4
    assert matching.p2p.select("src", "dst", "bytes", "bytes_match").rows() == [(0, 1, 8192, True)] * 2
    assert {f.kind for f in matching.findings} == {"order_matched"}  # matched by call order


# --- hand-written NCCL trace -----------------------------------------------------------------

def test_nccl_ranks(nccl):
    _, ranks = nccl
    assert ranks.select("rank", "world_size", "host", "device").rows() == [
        (0, 2, "node00", "NVIDIA H100 80GB HBM3"), (1, 2, "node01", "NVIDIA H100 80GB HBM3")]


def test_nccl_one_canonical_event_per_call(nccl):
    events, _ = nccl
    comm = events.filter(pl.col("cat").is_in(["collective", "p2p"]))
    # per rank: all_reduce x2, all_gather x1, send-or-recv x2, all from the GPU kernels
    assert comm.height == 2 * 5
    assert comm["lane"].unique().to_list() == ["stream:20"]
    mirrors = events.filter(pl.col("name").is_in(["record_param_comms", "nccl:all_reduce", "nccl:recv", "nccl:send",
                                                  "nccl:_allgather_base"]))
    assert mirrors["cat"].unique().to_list() == ["other"]
    assert mirrors["seq"].null_count() == mirrors.height


def test_nccl_collective_fields(nccl):
    events, _ = nccl
    ar = events.filter(pl.col("name") == "all_reduce").sort("rank", "ts_ns")
    assert ar.select("rank", "group", "seq", "bytes", "iteration").rows() == [
        (0, "world", 1, 1048576 * 2, 5), (0, "world", 2, 1048576 * 2, 6),
        (1, "world", 1, 1048576 * 2, 5), (1, "world", 2, 1048576 * 2, 6)]
    assert ar["group_ranks"].to_list() == [[0, 1]] * 4
    ag = events.filter(pl.col("name") == "all_gather")
    assert ag.select("group", "seq", "bytes", "iteration").rows() == [("tp", 1, 1024 * 4, 6)] * 2
    assert orjson.loads(ag["args"][0])["kineto_name"].startswith("ncclDevKernel_AllGather")


def test_nccl_p2p_fields(nccl):
    events, _ = nccl
    p2p = events.filter(pl.col("cat") == "p2p").sort("rank", "ts_ns")
    assert p2p.select("rank", "name", "peer", "seq", "group", "bytes").rows() == [
        (0, "send", 1, 1, "pp", 8192), (0, "send", 1, 2, "pp", 8192),
        (1, "recv", 0, 1, "pp", 8192), (1, "recv", 0, 2, "pp", 8192)]


def test_nccl_gpu_work_dated_by_its_launch(nccl):
    events, _ = nccl
    gemm = events.filter(pl.col("name").str.starts_with("sm90_xmma_gemm"))
    assert gemm["lane"].unique().to_list() == ["stream:7"]
    assert sorted(gemm["iteration"].to_list()) == [5, 5, 6, 6]


def test_gpu_work_carries_the_start_of_the_runtime_call_that_launched_it(nccl):
    # read from the file itself: each kernel's launching cudaLaunchKernel by correlation id
    events, _ = nccl
    for rank, path in enumerate(NCCL):
        doc = json.loads(path.read_text())
        base = doc.get("baseTimeNanoseconds", 0)
        launched = {e["args"]["correlation"]: round(e["ts"] * 1000) + base for e in doc["traceEvents"]
                    if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
        kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
        truth = sorted((round(e["ts"] * 1000) + base, launched.get(e["args"]["correlation"])) for e in kernels)
        mine = events.filter((pl.col("rank") == rank) & pl.col("lane").str.starts_with("stream:")
                             & pl.col("cat").is_in(["compute", "collective", "p2p", "other"]))
        got = sorted(mine.select("ts_ns", "launch_ns").rows())
        assert [t for t in truth if t[1] is not None] == [g for g in got if g[1] is not None]
        assert all(launch <= start for start, launch in got if launch is not None)
    # and no host event has one
    assert events.filter(pl.col("lane").str.starts_with("cpu:"))["launch_ns"].null_count() == \
        events.filter(pl.col("lane").str.starts_with("cpu:")).height


def test_cpu_comm_ops_are_canonical_without_gpu_comm_args(tmp_path):
    doc = json.loads(NCCL[0].read_text())
    comm_keys = {"Collective name", "Process Group Ranks", "Seq", "In msg nelems", "Process Group Name",
                 "Process Group Description", "dtype", "Rank"}
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel":
            event["args"] = {k: v for k, v in event["args"].items() if k not in comm_keys}
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(doc))
    events, _ = _read([path])
    comm = events.filter(pl.col("cat").is_in(["collective", "p2p"]))
    assert comm.height == 5
    assert comm["lane"].unique().to_list() == ["cpu:4100"]
    assert comm.sort("ts_ns").select("name", "seq").rows() == [
        ("all_reduce", 1), ("send", 1), ("all_reduce", 2), ("all_gather", 1), ("send", 2)]


# --- shapes, errors, truncation --------------------------------------------------------------

def test_begin_end_pairs_become_x(tmp_path):
    doc = {"traceEvents": [
        {"ph": "B", "cat": "user_annotation", "name": "fwd", "pid": 1, "tid": 1, "ts": 10.0, "args": {"a": 1}},
        {"ph": "E", "cat": "user_annotation", "name": "fwd", "pid": 1, "tid": 1, "ts": 12.5},
    ], "distributedInfo": {"rank": 3, "world_size": 4}}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    events, ranks = _read([path])
    assert events.select("rank", "name", "ph", "ts_ns", "dur_ns", "lane").rows() == [(3, "fwd", "X", 10000, 2500, "cpu:1")]
    assert ranks["world_size"].to_list() == [4]


def test_truncated_trace_is_salvaged(tmp_path):
    data = GLOO[1].read_bytes()
    raw = json.loads(data)
    cut = data.index(b'"name": "ProfilerStep#2"')      # in the middle of an event, inside traceEvents
    path = tmp_path / "rank-1.json"
    path.write_bytes(data[:cut])
    warnings: list[str] = []
    events, ranks = _read([path], warnings)
    assert ranks["rank"].to_list() == [1]
    assert len(warnings) == 1
    prefix = f"{path}: truncated at byte {cut}; kept "
    assert warnings[0].startswith(prefix)
    kept = int(warnings[0][len(prefix):].split()[0])
    assert 0 < kept < len(raw["traceEvents"])
    assert events.filter(pl.col("name") == "ProfilerStep#2").height == 0
    assert events.filter(pl.col("name") == "ProfilerStep#1").height == 1


def test_truncated_trace_of_megabytes_is_salvaged(tmp_path):
    """Past the first megabyte too: a real GPU trace cut off at 3.8 MB (of 6) read as beyond salvage."""
    raw = json.loads(GLOO[1].read_bytes())
    events = raw["traceEvents"]
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    filler = [dict(ops[i % len(ops)], name=f"aten::filler_{i}") for i in range(12_000)]
    data = json.dumps({**raw, "traceEvents": [*events, *filler]}).encode()
    assert len(data) > 3 << 20
    cut = data.index(b'"aten::filler_11000"')          # inside an event, megabytes in
    path = tmp_path / "rank-1.json"
    path.write_bytes(data[:cut])
    warnings: list[str] = []
    kept_events, ranks = _read([path], warnings)
    assert ranks["rank"].to_list() == [1]
    assert len(warnings) == 1 and warnings[0].startswith(f"{path}: truncated at byte {cut}; kept ")
    names = set(kept_events["name"].to_list())
    assert "aten::filler_10999" in names and "aten::filler_11000" not in names
    assert kept_events.filter(pl.col("name") == "ProfilerStep#2").height == 1


def test_not_json_raises_naming_the_file(tmp_path):
    bad = tmp_path / "rank-0.json"
    bad.write_text("garbage, not a trace")
    with pytest.raises(TraceFormatError) as info:
        _read([bad])
    assert str(bad) in str(info.value)


def test_sniff():
    assert kineto.sniff(GLOO[0], GLOO[0].read_bytes()[:4096])
    assert kineto.sniff(NCCL[0], NCCL[0].read_bytes()[:4096])
    assert not kineto.sniff(pathlib.Path("rank-00000.json"), b'[\n{"ph":"M","name":"mapp","pid":0,"tid":0}')
    assert not kineto.sniff(pathlib.Path("x.json"), b'[{"name":"forward","ph":"B","rel_ts":1,"g_rk":0}')


def test_a_trace_whose_metadata_fills_the_head_is_still_found(tmp_path):
    # Kineto writes its metadata before traceEvents, indented; the deviceProperties of a GPU node
    # and a Megatron job's pg_config push traceEvents past the 4 KB that discovery reads. A real
    # 4-GPU profiler trace of the corpus, written as Kineto writes it, has it at ~5 KB.
    import gzip

    from mapp.analysis.ingest import load_bundle

    case = pathlib.Path(__file__).resolve().parents[2] / "corpus" / "cases-gpu4" / "gpt-pp2dp2-prof-layer1.5x-r2-gpu"
    for f in sorted(case.glob("rank-*.json.gz")):
        with gzip.open(f, "rt") as src:
            doc = json.load(src)
        doc["traceEvents"] = doc["traceEvents"][:2000]   # the head is what matters here
        text = json.dumps(doc, indent=2)
        assert text.index('"traceEvents"') > 4096
        (tmp_path / f.name.removesuffix(".gz")).write_text(text)
    bundle = load_bundle(tmp_path)
    assert sorted(bundle.ranks["rank"].to_list()) == [0, 1, 2, 3]
    assert bundle.events.height > 0


def _as_a_tool_rewrites_it(src: pathlib.Path, dst: pathlib.Path) -> None:
    """``src`` as tools that pass traces on write them (TraceLens's H100 and MI300 test traces):
    an object of the tool's own first (26 KB there), then ``traceEvents``, Kineto's keys last;
    and without ``distributedInfo``, as a process profiled without torch.distributed has it."""
    doc = json.loads(src.read_bytes())
    doc.pop("distributedInfo", None)
    events = doc.pop("traceEvents")
    tool = {"metadata": {"pip_packages": [f"package-{i}==1.0" for i in range(800)]}}
    dst.write_bytes(gzip.compress(json.dumps({**tool, "traceEvents": events, **doc}).encode()))


def test_a_trace_whose_kineto_keys_come_last_is_found_by_its_events(tmp_path):
    # "no recognisable traces" before: none of Kineto's keys in the 4 KB head
    from mapp.analysis.ingest import load_bundle
    from mapp.analysis.ingest.discover import discover

    path = tmp_path / "model__1016005.json.gz"
    _as_a_tool_rewrites_it(GLOO[0], path)
    head = gzip.decompress(path.read_bytes())[:4096]
    assert not any(key in head for key in (b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"'))
    assert discover(tmp_path).format == "kineto"
    # the only trace, with no rank anywhere: rank 0, said so (an error before)
    warnings: list[str] = []
    bundle = load_bundle(tmp_path, use_cache=False, warn=warnings.append)
    assert bundle.ranks["rank"].to_list() == [0]
    assert bundle.events.filter(pl.col("cat") == "compute").height > 0
    assert any("read as rank 0" in w for w in warnings)


def test_two_traces_with_no_rank_anywhere_are_still_an_error(tmp_path):
    for name, src in (("a.json.gz", GLOO[0]), ("b.json.gz", GLOO[1])):
        _as_a_tool_rewrites_it(src, tmp_path / name)
    with pytest.raises(TraceFormatError, match="no distributedInfo.rank"):
        _read(sorted(tmp_path.glob("*.json.gz")))


def test_sniff_does_not_take_other_chrome_traces_for_kineto(tmp_path):
    other = tmp_path / "chrome.json"
    events = [{"name": f"task{i}", "cat": "v8", "ph": "X", "ts": i, "dur": 1, "pid": 1, "tid": 1} for i in range(200)]
    other.write_text(json.dumps({"metadata": {"x": "y" * 5000}, "traceEvents": events}))
    assert not kineto.sniff(other, other.read_bytes()[:4096])
    # an older Kineto's trace, traceEvents first, its own keys after them (HTA's test traces):
    # found by its categories' old spellings
    old = tmp_path / "inference_rank_1.json"
    events = [{"ph": "X", "cat": "Kernel", "name": "void elementwise_kernel<128, 4>" + "x" * 300, "ts": i,
               "dur": 1, "pid": 0, "tid": 7} for i in range(20)]
    old.write_text(json.dumps({"traceEvents": events, "schemaVersion": 1}, indent=2))
    assert b'"schemaVersion"' not in old.read_bytes()[:4096]
    assert kineto.sniff(old, old.read_bytes()[:4096])


# --- a trace profiled without a schedule: no ProfilerStep spans --------------------------------

DDP4_GPU = FIXTURES.parent / "corpus" / "cases-gpu4" / "ddp4-prof-fwd2.5x-r3-gpu"


def _without_steps(tmp_path):
    out = []
    for f in sorted(DDP4_GPU.glob("rank-*.json.gz")):
        doc = json.loads(gzip.open(f).read())
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
        path = tmp_path / f.name.removesuffix(".gz")
        path.write_bytes(orjson.dumps(doc))
        out.append(path)
    return out


def test_without_step_spans_iterations_come_from_the_optimizer_steps(tmp_path):
    # 4 H200s, plain DDP, 5 profiler steps (2-6), each ending in one SGD step. Profiled without a
    # schedule the same trace has no ProfilerStep spans: every kernel was outside any iteration
    # and stage 1 could not run. Each optimizer step now ends an iteration that began at the end
    # of the one before (the first of the 5 only begins one), and the iterations hold what the
    # profiler's steps 3-6 held.
    with_steps, _ = _read(sorted(DDP4_GPU.glob("rank-*.json.gz")))
    warnings: list[str] = []
    events, _ = _read(_without_steps(tmp_path), warnings)
    spans = events.filter(pl.col("cat") == "iteration")
    assert spans.filter(pl.col("rank") == 0)["name"].sort().to_list() == [f"mapp:iteration#{k}" for k in range(1, 5)]
    assert len(warnings) == 4 and all("4 iterations taken from its optimizer steps" in w for w in warnings)

    def per_step(ev, first):
        calls = ev.filter((pl.col("cat") == "collective") & pl.col("iteration").is_not_null())
        return calls.group_by("rank", it=pl.col("iteration") - first).len().sort("rank", "it")

    assert per_step(events, 1).equals(per_step(with_steps.filter(pl.col("iteration") >= 3), 3))

    def gemms(ev, its):
        return ev.filter((pl.col("cat") == "compute") & pl.col("iteration").is_in(its)).group_by("rank").len().sort("rank")

    assert gemms(events, [1, 2, 3, 4]).equals(gemms(with_steps, [3, 4, 5, 6]))


FSDP2_GPU = FIXTURES.parent / "corpus" / "cases-gpu2" / "fsdp2-prof-healthy-gpu2"


def _launch_steps(path: pathlib.Path) -> dict[int, int]:
    """Per kernel correlation id, the host ProfilerStep#N whose span holds its launch: read
    straight off the raw trace, independent of the reader."""
    trace = json.loads(gzip.open(path).read())["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in trace
             if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")]
    launches = {e["args"]["correlation"]: e["ts"] for e in trace if e.get("cat") == "cuda_runtime"}
    out = {}
    for e in trace:
        corr = e.get("args", {}).get("correlation") if e.get("cat") == "kernel" else None
        when = launches.get(corr)
        for begin, end, n in steps:
            if when is not None and begin <= when < end:
                out[corr] = n
    return out


def test_gpu_work_belongs_to_the_host_step_that_launched_it_not_to_the_steps_gpu_copy():
    # 2 H200s, FSDP, no fault: Kineto copies each ProfilerStep onto the GPU stream (24 ms of a
    # 71 ms step), starting inside the host's span. Looked up first, it left every kernel
    # launched after its end in no iteration: 10 of rank 0's GEMMs and 3 of rank 1's, which
    # read as rank 1 calling GEMMs 2.3x as often as rank 0 (stage 1: "1.56x" on a healthy job)
    events, _ = _read(sorted(FSDP2_GPU.glob("rank-*.json.gz")))
    kernels = events.filter(pl.col("lane").str.starts_with("stream:") & (pl.col("cat") == "compute"))
    for rank in (0, 1):
        truth = _launch_steps(FSDP2_GPU / f"rank-{rank}.json.gz")
        mine = kernels.filter(pl.col("rank") == rank).with_columns(
            corr=pl.col("args").str.json_path_match("$.correlation").cast(pl.Int64))
        got = dict(zip(mine["corr"].to_list(), mine["iteration"].to_list()))
        assert {c: got[c] for c in truth if c in got} == {c: truth[c] for c in truth if c in got}
        assert len([c for c in truth if c in got]) > 250
    gemms = kernels.filter(pl.col("name").str.starts_with("sm80_xmma_gemm") & pl.col("iteration").is_not_null())
    per = gemms.group_by("rank", "iteration").len().sort("rank", "iteration")
    assert per["len"].n_unique() == 1       # the same program on both ranks: as many GEMMs a step


def test_step_spans_win_over_optimizer_steps(gloo):
    # the gloo fixture has both ProfilerStep spans and Optimizer.step#SGD.step annotations
    events, _ = gloo
    assert events.filter(pl.col("name").str.starts_with("Optimizer.step#")).height
    assert not events.filter(pl.col("name").str.starts_with("mapp:iteration")).height


CYCLES = FIXTURES.parent / "corpus" / "cases-users" / "ddp4-transformer-tb-cycles-fwd1.5x-r1"


def _rank_files(rank: int) -> list[pathlib.Path]:
    """The case's files of one rank, in the order they were written (one per profiling cycle)."""
    return sorted(p for p in CYCLES.glob("*.pt.trace.json.gz")
                  if json.load(gzip.open(p))["distributedInfo"]["rank"] == rank)


def test_files_of_one_process_with_disjoint_steps_are_one_rank():
    warnings: list[str] = []
    events, ranks = _read(_rank_files(2), warnings)
    assert ranks["rank"].to_list() == [2]
    steps = events.filter(pl.col("cat") == "iteration")["iteration"].to_list()
    assert sorted(steps) == [2, 3, 4, 5, 8, 9, 10, 11]   # the third cycle's step 14 held no call
    assert warnings == ["rank 2: 3 files of one process each (torch.profiler.schedule's repeated cycles) "
                        "read as one trace, steps 2-5, 8-11; 1 without a communication call left out"]


def test_files_of_two_processes_for_one_rank_are_not_joined(tmp_path):
    # two runs' traces in one directory: rank 2's first cycle, and its second as another process
    # wrote it; and a cycle copied (one process, the same steps twice): both left for the bundle
    # to refuse ("rank 2 is claimed by more than one file")
    first, second, _ = _rank_files(2)
    other = tmp_path / "other.pt.trace.json"
    doc = json.load(gzip.open(second))
    pid = next(e["pid"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    for e in doc["traceEvents"]:
        if e.get("pid") == pid:
            e["pid"] = pid + 1
    other.write_text(json.dumps(doc))
    for files in ([first, other], [first, first]):
        warnings: list[str] = []
        _, ranks = _read(files, warnings)
        assert ranks["rank"].to_list() == [2, 2] and not any("read as one trace" in w for w in warnings)


def test_cycles_of_a_process_that_never_communicates_are_all_kept(tmp_path):
    # rank 2's two full cycles with every communication record taken out (a job of one process):
    # no cycle is the near-empty one the job ended in, so none is left out
    files = []
    for k, src in enumerate(_rank_files(2)[:2]):
        doc = json.load(gzip.open(src))
        doc["traceEvents"] = [e for e in doc["traceEvents"]
                              if not str(e.get("name", "")).startswith(("gloo:", "c10d::", "nccl:"))
                              and "Collective name" not in (e.get("args") or {})]
        files.append(tmp_path / f"cycle{k}.pt.trace.json")
        files[-1].write_text(json.dumps(doc))
    warnings: list[str] = []
    events, ranks = _read(files, warnings)
    assert ranks["rank"].to_list() == [2]
    assert events.filter(pl.col("cat").is_in(["collective", "p2p"])).height == 0
    assert sorted(events.filter(pl.col("cat") == "iteration")["iteration"].to_list()) == [2, 3, 4, 5, 8, 9, 10, 11]
    assert not any("left out" in w for w in warnings)


def test_a_gpu_job_traced_host_only_keeps_its_hosts_time_in_the_cuda_runtime(tmp_path):
    # the NCCL fixture as the profiler writes it with ProfilerActivity.CPU alone: no kernels or
    # other GPU events, its 7 cudaLaunchKernel calls still there
    doc = json.loads(NCCL[0].read_text())
    launches = [e for e in doc["traceEvents"] if e.get("name") == "cudaLaunchKernel"]
    assert len(launches) == 7
    gpu = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "ac2g"}
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in gpu]
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(doc))
    events, ranks = _read([path])
    runtime = events.filter(pl.col("name") == "cudaLaunchKernel")
    assert runtime.height == 7 and runtime["cat"].unique().to_list() == ["other"]
    assert runtime["lane"].str.starts_with("cpu:").all()
    assert sorted(runtime["dur_ns"].to_list()) == sorted(round(e["dur"] * 1000) for e in launches)
    assert ranks["device"].to_list() != [None]
    # with its GPU events the launches are only what dates the kernels they launched
    events, _ = _read(NCCL[:1])
    assert events.filter(pl.col("name") == "cudaLaunchKernel").height == 0
