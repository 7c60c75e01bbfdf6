"""The case sets of ``make_corpus.py``: ids unique, held-out variations apart from the tuned sets.
Cheap: nothing is run."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("make_corpus", HERE / "make_corpus.py")
make_corpus = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("make_corpus", make_corpus)   # its dataclasses look their module up
_spec.loader.exec_module(make_corpus)


def _ids(cases):
    return [c.id for c in cases]


def _held_out(name: str, tag: str) -> list:
    """The cases of held-out set ``name``, checked for what every held-out set must be: ids
    ending in ``tag`` that no other set uses, and healthy, fault and imbalance jobs alike."""
    cases = make_corpus.SETS[name]()
    others = {i for other, build in make_corpus.SETS.items() if other != name for i in _ids(build())}
    assert all(c.id.endswith(tag) and c.id not in others for c in cases)
    assert {c.cls for c in cases} == {"healthy", "fault", "imbalance"}
    return cases


MIXED_WORLDS = {"fresh189": {3, 6}, "fresh190": {4, 8}, "fresh192": {2, 4}, "fresh203": {4, 8}, "fresh204": {4, 8},
                "fresh205": {2, 4}, "fresh206": {2, 4}, "fresh207": {4, 8}, "fresh208": {4, 8},
                "fresh210": {2, 4}, "fresh212": {4, 8}, "fresh213": {4, 8}, "fresh216": {4, 8}}
"""The sets whose jobs are of several world sizes (on CPU each job runs with its own)."""


def test_every_set_has_unique_ids_of_one_world_size():
    for name, build in make_corpus.SETS.items():
        cases = build()
        assert len(_ids(cases)) == len(set(_ids(cases))), name
        worlds = {make_corpus.world_of(c.layout) for c in cases}
        assert worlds == MIXED_WORLDS[name] if name in MIXED_WORLDS else len(worlds) == 1, name


def test_a_set_of_several_world_sizes_runs_each_job_with_its_own_but_not_on_gpus():
    listed = subprocess.run([sys.executable, str(make_corpus.HERE / "make_corpus.py"), "--set", "fresh189", "--list"],
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "gpt-pp3-mapp-healthy-f189" in listed.stdout and "ddp6-prof-fwd1.4x-r4-f189" in listed.stdout
    forced = subprocess.run([sys.executable, str(make_corpus.HERE / "make_corpus.py"), "--set", "fresh189",
                             "--nproc", "3", "--list"], capture_output=True, text=True, timeout=120)
    assert forced.returncode != 0 and "runs jobs of 3, 6 processes, not --nproc 3" in forced.stderr
    one = subprocess.run([sys.executable, str(make_corpus.HERE / "make_corpus.py"), "--set", "fresh189",
                          "--only=-pp3-", "--nproc", "3", "--list"], capture_output=True, text=True, timeout=120)
    assert one.returncode == 0 and one.stdout.split() == [
        "gpt-pp3-mapp-healthy-f189", "gpt-pp3-mapp-laststage3of5-f189", "gpt-pp3-mapp-layer1.5x-matmul-r1-f189",
        "gpt-pp3-prof-healthy-f189"]


def test_a_slow_node_slows_every_rank_it_names_alike_and_any_of_them_is_the_answer():
    cases = [c for c in make_corpus.SETS["fresh190"]() if c.cls == "fault"]
    assert len(cases) >= 8
    for c in cases:
        ranks = c.expect["suspect"]["ranks"]
        assert len(ranks) == 2 and len(set(ranks)) == 2, c.id
        assert all(0 <= r < make_corpus.world_of(c.layout) for r in ranks), c.id
        assert c.args[c.args.index("--slow-rank") + 1] == ",".join(map(str, ranks)), c.id
        assert c.injected[0]["ranks"] == ranks and c.expect["suspect"]["rank"] == ranks[0], c.id
        assert f"-r{ranks[0]}r{ranks[1]}-" in c.id, c.id
    tp_node = next(c for c in cases if c.id.startswith("gpt-tp2dp2-mapp-layer"))
    assert tp_node.expect["suspect"]["ranks"] == [0, 1]   # one TP group: both its ranks


def _traced_from(case) -> int:
    """The first traced iteration (0-based) of ``case``'s window: mapp's ``--trace-start``, or the
    profiler's wait and warm-up steps."""
    a = case.args if case.job == "gpt" else case.job_window or make_corpus.JOB_WINDOW
    if "--trace-start" in a:
        return int(a[a.index("--trace-start") + 1])
    return int(a[a.index("--profile-wait") + 1]) + int(a[a.index("--profile-warmup") + 1])


def _last_iteration(case) -> int:
    a = case.args if case.job == "gpt" else case.job_window or make_corpus.JOB_WINDOW
    return int(a[a.index("--iterations" if case.job == "gpt" else "--steps") + 1]) - 1


def test_a_fault_that_sets_in_midway_acts_in_the_windows_last_two_or_three_iterations_only():
    faults = [c for c in _held_out("fresh194", "-f194") if c.cls == "fault"]
    assert len(faults) >= 10
    for c in faults:
        k = int(c.args[c.args.index("--slow-from") + 1])
        assert c.injected[0]["from_iteration"] == k and f"-from{k}-" in c.id, c.id
        # slowed in some of the traced iterations, not all, and in at least two
        assert _traced_from(c) < k <= _last_iteration(c) - 1, c.id
        assert c.expect["suspect"]["rank"] == c.slow_rank, c.id
    assert {c.job for c in faults} == {"gpt", "ddp", "tp"}
    assert {c.fmt for c in faults} == {"mapp-v1", "kineto"}


def test_ten_iteration_sets_slow_a_fault_in_the_windows_last_three_to_five_iterations_only():
    for name in ("fresh195", "fresh196"):
        cases = _held_out(name, f"-{name.replace('resh', '')}")
        for c in cases:
            assert _traced_from(c) == 2 and _last_iteration(c) == 11, c.id   # ten traced: 2-11
        onsets = [c for c in cases if "--slow-from" in c.args]
        assert len(onsets) >= 11
        for c in onsets:
            k = int(c.args[c.args.index("--slow-from") + 1])
            assert c.injected[0]["from_iteration"] == k and f"-from{k}-" in c.id, c.id
            # slowed in the last 3-5 of the ten: fewer than CONSISTENT (0.75) of them
            assert 3 <= _last_iteration(c) + 1 - k <= 5, c.id
        assert {c.job for c in onsets} == {"gpt", "ddp", "tp"}
        assert {c.fmt for c in onsets} == {"mapp-v1", "kineto"}


def test_the_onset_false_alarm_sets_are_mostly_jobs_with_no_fault_traced_ten_or_twenty_iterations():
    for name in ("fresh197", "fresh198"):
        cases = _held_out(name, f"-{name.replace('resh', '')}")
        assert sum(c.cls != "fault" for c in cases) >= 13
        assert {_last_iteration(c) + 1 - _traced_from(c) for c in cases} == {10, 20}
        for c in cases:
            if "--slow-from" in c.args:   # set in late: under CONSISTENT of the window, 3 or more
                k = int(c.args[c.args.index("--slow-from") + 1])
                assert 3 <= _last_iteration(c) + 1 - k < 0.75 * (_last_iteration(c) + 1 - _traced_from(c)), c.id


def test_the_eight_rank_onset_set_traces_ten_iterations_of_eight_ranks():
    cases = _held_out("fresh199", "-f199")
    assert {make_corpus.world_of(c.layout) for c in cases} == {8}
    assert {_last_iteration(c) + 1 - _traced_from(c) for c in cases} == {10}
    assert sum("--slow-from" in c.args for c in cases) == 4


def test_the_variations_are_jobs_no_other_set_runs():
    tuned = {i for name in ("small", "full", "gpu2") for i in _ids(make_corpus.SETS[name]())}
    for name, world in (("vary", 4), ("vary2", 2)):
        cases = make_corpus.SETS[name]()
        assert all(c.id.endswith("-v") and c.id not in tuned for c in cases), name
        assert {make_corpus.world_of(c.layout) for c in cases} == {world}
        # every fault is injected on a rank of the job, and every class is there
        assert {c.cls for c in cases} == {"healthy", "fault", "imbalance"}
        assert all(c.slow_rank is None or 0 <= c.slow_rank < world for c in cases)


def test_on_gpus_the_variations_run_another_model_shape():
    for build in (make_corpus.vary_set, make_corpus.vary2_set):
        for case in build():
            args = make_corpus.job_args(case, gpu=True)
            if case.job != "gpt":
                continue
            at = args.index("--hidden")
            assert args[at + 1] == "3072" and args.count("--hidden") == 1, case.id
            assert args[args.index("--seed") + 1] == str(make_corpus.VARY_SEED)
    jitter = next(c for c in make_corpus.vary_set() if "jitter" in c.id)
    assert jitter.gpu_args[-2:] == ["--slow-jitter", "0.7"] and jitter.args[-2:] == ["--slow-jitter", "0.7"]


def test_list_prints_the_gpu_ids():
    out = subprocess.run([sys.executable, str(HERE / "make_corpus.py"), "--set", "vary2", "--list"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [c.id + "-gpu2" for c in make_corpus.vary2_set()]


def test_the_deep_and_wide_sets_run_layouts_no_tuned_set_runs():
    tuned = {i for name in ("small", "full", "gpu2") for i in _ids(make_corpus.SETS[name]())}
    tuned_layouts = {tuple(sorted(c.layout.items())) for name in ("small", "full", "gpu2", "vary", "vary2")
                     for c in make_corpus.SETS[name]()}
    for name, world, tail in (("pp4", 4, "-d"), ("wide", 8, "-w")):
        cases = make_corpus.SETS[name]()
        assert all(c.id.endswith(tail) and c.id not in tuned for c in cases), name
        assert {make_corpus.world_of(c.layout) for c in cases} == {world}
        assert {c.cls for c in cases} == {"healthy", "fault", "imbalance"}
        assert all(c.slow_rank is None or 0 <= c.slow_rank < world for c in cases)
        gpt = [c for c in cases if c.job == "gpt"]
        assert not {tuple(sorted(c.layout.items())) for c in gpt} & tuned_layouts, name


def test_a_heavier_last_stage_of_four_keeps_one_layer_on_every_other_stage():
    case = next(c for c in make_corpus.pp4_set() if c.id == "gpt-pp4-mapp-laststage3of6-d")
    args = make_corpus.job_args(case, gpu=False)
    assert args[args.index("--layers") + 1] == "6" and args[args.index("--last-stage-layers") + 1] == "3"
    gpu = make_corpus.job_args(case, gpu=True)
    assert gpu[gpu.index("--layers") + 1] == "8" and gpu[gpu.index("--last-stage-layers") + 1] == "5"


def test_the_schedules_set_runs_only_schedules_no_other_set_runs():
    # (fresh115-117, held out long after, interleave pipelines recorded without shapes)
    others = [c for name, build in make_corpus.SETS.items()
              if name not in ("sched", "prod", "prodv", "prodw", "fresh115", "fresh116", "fresh117")
              for c in build()]
    assert not any("--vpp" in c.args or "--overlap-grad-reduce" in c.args for c in others)
    cases = make_corpus.sched_set()
    assert all(c.id.endswith("-s") for c in cases) and {make_corpus.world_of(c.layout) for c in cases} == {4}
    assert {c.cls for c in cases} == {"healthy", "fault", "imbalance"}
    for case in cases:
        for args in (case.args, make_corpus.job_args(case, gpu=True)):
            assert "--vpp" in args or "--overlap-grad-reduce" in args, case.id
    # interleaving: every rank holds two chunks of at least one layer, microbatches a multiple of the stages
    case = next(c for c in cases if c.id == "gpt-pp4-vpp2-prof-layer1.5x-r1-s")
    args = make_corpus.job_args(case, gpu=False)
    assert args[args.index("--vpp") + 1] == "2" and int(args[args.index("--layers") + 1]) >= 8
    assert int(args[args.index("--num-microbatches") + 1]) % 4 == 0


def test_the_production_set_runs_the_distributed_optimizer_on_gpus_only():
    others = [c for name, build in make_corpus.SETS.items() if name not in ("prod", "prodv", "prodw") for c in build()]
    # (sequence parallelism runs on CPUs too, through train_gpt's own layer norm: fresh186's
    # experts beside TP want it)
    assert not any(f in c.args for c in others for f in ("--distributed-optimizer", "--overlap-param-gather"))
    assert all("--moe-experts" in c.args for c in others if "--sequence-parallel" in c.args)
    prod, prodv, prodw = make_corpus.prod_set(), make_corpus.prodv_set(), make_corpus.prodw_set()
    assert all(c.id.endswith("-p") for c in prod) and all(c.id.endswith("-pv") for c in prodv)
    assert all(c.id.endswith("-pw") for c in prodw)
    # the variations are other jobs
    assert not {c.id[:-2] for c in prod} & {c.id[:-3] for c in prodv}
    assert not ({c.id[:-2] for c in prod} | {c.id[:-3] for c in prodv}) & {c.id[:-3] for c in prodw}
    for cases in (prod, prodv, prodw):
        assert {make_corpus.world_of(c.layout) for c in cases} == {4}
        assert {c.cls for c in cases} == {"healthy", "fault", "imbalance"}
    for case in prod + prodv + prodw:
        args = make_corpus.job_args(case, gpu=True)
        assert "--distributed-optimizer" in args and "--bf16" in args, case.id
        assert ("--sequence-parallel" in args) == (case.layout["tp"] > 1), case.id
        assert ("--overlap-param-gather" in args) <= ("--overlap-grad-reduce" in args), case.id
    proc = subprocess.run([sys.executable, str(HERE / "make_corpus.py"), "--set", "prod", "--cpu", "--list"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "GPUs only" in proc.stderr


def test_the_fresh_set_runs_every_layout_of_four_with_a_third_model_shape():
    cases = make_corpus.fresh_set()
    tuned = {i for name in ("small", "full", "gpu2", "vary", "pp4", "sched", "prod") for i in _ids(make_corpus.SETS[name]())}
    assert all(c.id.endswith("-f") and c.id not in tuned for c in cases)
    assert {c.cls for c in cases} == {"healthy", "fault", "imbalance"}
    gpt = [c for c in cases if c.job == "gpt"]
    assert {k for c in gpt for k, v in make_corpus.LAYOUTS.items() if v == c.layout} == {
        "dp4", "tp2dp2", "pp2dp2", "tp2pp2", "pp4"}
    for case in gpt:
        args = make_corpus.job_args(case, gpu=True)
        assert args[args.index("--hidden") + 1] == "2560" and args.count("--hidden") == 1, case.id
        assert args[args.index("--num-microbatches") + 1] == "8", case.id
        assert args[args.index("--seed") + 1] == str(make_corpus.FRESH_SEED)


def test_the_fresh3_set_runs_every_layout_of_two_with_a_fifth_model_shape():
    cases = _held_out("fresh3", "-f3")
    assert {make_corpus.world_of(c.layout) for c in cases} == {2}
    gpt = [c for c in cases if c.job == "gpt"]
    assert {k for c in gpt for k, v in make_corpus.LAYOUTS.items() if v == c.layout} == {"dp2", "tp2", "pp2"}
    for case in gpt:
        args = make_corpus.job_args(case, gpu=True)
        assert args[args.index("--hidden") + 1] == "4608" and args.count("--hidden") == 1, case.id
        assert args[args.index("--iterations") + 1] == "5", case.id
        assert args[args.index("--seed") + 1] == str(make_corpus.FRESH3_SEED)
    # a 2-rank set runs on GPUs by default, as --set vary2 does
    out = subprocess.run([sys.executable, str(HERE / "make_corpus.py"), "--set", "fresh3", "--list"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [c.id + "-gpu2" for c in cases]


def test_the_fresh4_set_runs_every_layout_of_four_with_a_sixth_model_shape():
    cases = _held_out("fresh4", "-f4")
    gpt = [c for c in cases if c.job == "gpt"]
    assert {k for c in gpt for k, v in make_corpus.LAYOUTS.items() if v == c.layout} == {
        "dp4", "tp2dp2", "pp2dp2", "tp2pp2", "pp4"}
    for case in gpt:
        args = make_corpus.job_args(case, gpu=True)
        assert args[args.index("--seq") + 1] == "4096" and args.count("--seq") == 1, case.id
        assert args[args.index("--seed") + 1] == str(make_corpus.FRESH4_SEED)


def test_the_fresh5_set_runs_every_layout_of_two_with_a_seventh_model_shape():
    cases = _held_out("fresh5", "-f5")
    assert {make_corpus.world_of(c.layout) for c in cases} == {2}
    for case in (c for c in cases if c.job == "gpt"):
        args = make_corpus.job_args(case, gpu=True)
        assert args[args.index("--hidden") + 1] == "5120" and args.count("--hidden") == 1, case.id
        assert args[args.index("--seed") + 1] == str(make_corpus.FRESH5_SEED)


def test_the_fresh6_set_runs_every_layout_of_two_with_an_eighth_model_shape():
    cases = _held_out("fresh6", "-f6")
    assert {make_corpus.world_of(c.layout) for c in cases} == {2}
    assert any(c.part == "link" for c in cases)
    for case in (c for c in cases if c.job == "gpt"):
        args = make_corpus.job_args(case, gpu=True)
        assert args[args.index("--vocab") + 1] == "128256" and args.count("--vocab") == 1, case.id
        assert args[args.index("--seed") + 1] == str(make_corpus.FRESH6_SEED)


def test_the_fresh7_set_runs_every_layout_of_four_with_a_ninth_model_shape():
    cases = _held_out("fresh7", "-f7")
    gpt = [c for c in cases if c.job == "gpt"]
    assert {k for c in gpt for k, v in make_corpus.LAYOUTS.items() if v == c.layout} == {
        "dp4", "tp2dp2", "pp2dp2", "tp2pp2", "pp4"}
    shapes = {tuple(getattr(make_corpus, n)) for n in dir(make_corpus) if n.startswith("GPT_GPU")}
    assert len(shapes) == len([n for n in dir(make_corpus) if n.startswith("GPT_GPU")])   # every shape its own
    for case in gpt:
        args = make_corpus.job_args(case, gpu=True)
        assert args[args.index("--hidden") + 1] == "2816" and args.count("--hidden") == 1, case.id
        assert args[args.index("--seed") + 1] == str(make_corpus.FRESH7_SEED)


def test_the_fresh8_set_runs_every_layout_of_two_with_a_tenth_model_shape():
    cases = _held_out("fresh8", "-f8")
    assert {make_corpus.world_of(c.layout) for c in cases} == {2}
    for case in (c for c in cases if c.job == "gpt"):
        args = make_corpus.job_args(case, gpu=True)
        assert args[args.index("--micro-batch-size") + 1] == "4" and args.count("--micro-batch-size") == 1, case.id
        assert args[args.index("--seed") + 1] == str(make_corpus.FRESH8_SEED)


def test_the_fresh9_set_runs_every_layout_of_four_with_an_eleventh_model_shape():
    cases = _held_out("fresh9", "-f9")
    gpt = [c for c in cases if c.job == "gpt"]
    assert {k for c in gpt for k, v in make_corpus.LAYOUTS.items() if v == c.layout} == {
        "dp4", "tp2dp2", "pp2dp2", "tp2pp2", "pp4"}
    assert {c.id for c in gpt if c.cls == "healthy"} >= {"gpt-pp4-mapp-healthy-f9", "gpt-tp2dp2-mapp-healthy-f9"}
    for case in gpt:
        args = make_corpus.job_args(case, gpu=True)
        assert args[args.index("--hidden") + 1] == "3328" and args.count("--hidden") == 1, case.id
        assert args[args.index("--seed") + 1] == str(make_corpus.FRESH9_SEED)


def test_the_fresh10_set_slows_every_kind_of_pipeline_stage_with_a_twelfth_model_shape():
    cases = _held_out("fresh10", "-f10")
    pp4_prof = {c.expect["suspect"]["rank"] for c in cases if c.id.startswith("gpt-pp4-prof-layer")}
    assert pp4_prof == {0, 2, 3}   # the first stage, a middle one and the last
    for case in (c for c in cases if c.job == "gpt"):
        args = make_corpus.job_args(case, gpu=True)
        assert args[args.index("--seq") + 1] == "3584" and args.count("--seq") == 1, case.id
        assert args[args.index("--seed") + 1] == str(make_corpus.FRESH10_SEED)


def test_the_fresh11_set_holds_every_4_rank_layout_out_with_a_thirteenth_model_shape():
    cases = _held_out("fresh11", "-f11")
    gpt = [c for c in cases if c.job == "gpt"]
    assert {k for c in gpt for k, v in make_corpus.LAYOUTS.items() if v == c.layout} == {
        "dp4", "tp2dp2", "pp2dp2", "tp2pp2", "pp4"}
    for case in gpt:
        args = make_corpus.job_args(case, gpu=True)
        assert args[args.index("--hidden") + 1] == "2816" and args.count("--hidden") == 1, case.id
        assert args[args.index("--seed") + 1] == str(make_corpus.FRESH11_SEED)


def test_the_fresh12_set_holds_every_2_rank_layout_out_with_a_fourteenth_model_shape():
    cases = _held_out("fresh12", "-f12")
    gpt = [c for c in cases if c.job == "gpt"]
    assert {k for c in gpt for k, v in make_corpus.LAYOUTS.items() if v == c.layout} == {"dp2", "tp2", "pp2"}
    assert {k for c in gpt if c.cls == "healthy" for k, v in make_corpus.LAYOUTS.items() if v == c.layout} == {
        "dp2", "tp2", "pp2"}
    for case in gpt:
        args = make_corpus.job_args(case, gpu=True)
        assert args[args.index("--hidden") + 1] == "3584" and args.count("--hidden") == 1, case.id
        assert args[args.index("--seed") + 1] == str(make_corpus.FRESH12_SEED)


def test_the_fresh13_set_holds_8_rank_layouts_out_with_issue_13s_heavier_last_stage():
    cases = _held_out("fresh13", "-f13")
    assert all(make_corpus.world_of(c.layout) == 8 for c in cases)
    heavier = {c.fmt for c in cases if c.id.startswith("gpt-pp4dp2-") and c.cls == "imbalance"}
    assert heavier == {"mapp-v1", "kineto"}   # issue 13's 8-rank PP4 x DP2 job, under both captures
    for case in (c for c in cases if c.job == "gpt"):
        args = make_corpus.job_args(case, gpu=False)
        assert args[args.index("--seed") + 1] == str(make_corpus.FRESH13_SEED)


def test_the_fresh14_to_fresh16_and_fresh18_sets_hold_issue_13s_gloo_classes_and_every_4_rank_layout_out():
    for name, tag, seed in (("fresh14", "-f14", make_corpus.FRESH14_SEED), ("fresh15", "-f15", make_corpus.FRESH15_SEED),
                            ("fresh16", "-f16", make_corpus.FRESH16_SEED), ("fresh18", "-f18", make_corpus.FRESH18_SEED)):
        cases = _held_out(name, tag)
        assert all(make_corpus.world_of(c.layout) == 4 for c in cases)
        # issue 13's 4-process gloo jobs: plain DDP (more forward work, a data-path sleep) and
        # DP2 x TP2 from process groups
        plain = {c.id.split("-prof-")[0] + "-" + (c.injected[0]["how"].split()[0] if c.injected else "healthy")
                 for c in cases if c.job != "gpt"}
        assert {"ddp4-extra", "ddp4-host", "tp2dp2-plain-extra"} <= plain, name
        assert any(p.endswith("-healthy") for p in plain), name
        gpt = [c for c in cases if c.job == "gpt"]
        assert {k for c in gpt for k, v in make_corpus.LAYOUTS.items() if v == c.layout} == {
            "dp4", "tp2dp2", "pp2dp2", "tp2pp2", "pp4"}
        for case in gpt:
            args = make_corpus.job_args(case, gpu=True)
            assert args[args.index("--hidden") + 1] == "3072" and args.count("--hidden") == 1, case.id
            assert args[args.index("--seed") + 1] == str(seed)


def test_the_fresh17_set_holds_issue_13s_2_rank_classes_out_under_both_captures():
    cases = _held_out("fresh17", "-f17")
    assert all(make_corpus.world_of(c.layout) == 2 for c in cases)
    plain = {c.id.split("-prof-")[0] + "-" + (c.injected[0]["how"].split()[0] if c.injected else "healthy")
             for c in cases if c.job != "gpt"}
    assert {"ddp2-extra", "ddp2-host", "fsdp2-healthy"} <= plain
    gpt = [c for c in cases if c.job == "gpt"]
    # every 2-rank layout with a layer fault under each capture (issue 13's class 2: TP2)
    layer = {(k, c.fmt) for c in gpt if c.injected and "factor" in c.injected[0]
             for k, v in make_corpus.LAYOUTS.items() if v == c.layout}
    assert layer == {(k, f) for k in ("dp2", "tp2", "pp2") for f in ("mapp-v1", "kineto")}
    for case in gpt:
        args = make_corpus.job_args(case, gpu=False)
        assert args[args.index("--seed") + 1] == str(make_corpus.FRESH17_SEED)


def test_the_fresh19_set_traces_20_iterations_of_issue_13s_own_4_process_jobs():
    cases = _held_out("fresh19", "-f19")
    assert all(make_corpus.world_of(c.layout) == 4 for c in cases)
    ids = {c.id for c in cases}
    # issue 13's own jobs: plain DDP with 1.5x the forward's matmuls or a ~20 ms host stall on one
    # rank, DP2 x TP2 with one rank 1.6x, PP4 with a heavier last stage
    assert {"ddp4-prof-fwd1.5x-r1-f19", "ddp4-prof-datasleep20ms-r2-f19", "tp2dp2-plain-prof-fwd1.6x-r3-f19",
            "gpt-pp4-prof-laststage3of6-f19"} <= ids
    for case in cases:
        if case.job == "gpt":
            args = make_corpus.job_args(case, gpu=False)
            traced = (args[args.index("--continuous-trace-iterations") + 1] if case.fmt == "mapp-v1"
                      else args[args.index("--profile-active") + 1])
        else:
            traced = case.job_window[case.job_window.index("--profile-active") + 1]
        assert traced == "20", case.id


def test_the_fresh20_set_holds_a_host_stall_before_each_step_outside_the_data_loader():
    cases = {c.id: c for c in _held_out("fresh20", "-f20")}
    assert all(make_corpus.world_of(c.layout) == 4 for c in cases.values())
    # issue 13's "one rank stalling ~20 ms per step on the host before its step": a sleep in the
    # training loop itself, no annotation around it, on plain DDP and FSDP2
    for cid, rank, ms in (("ddp4-prof-stepsleep21ms-r3-f20", 3, "21"), ("fsdp4-prof-stepsleep30ms-r1-f20", 1, "30")):
        case = cases[cid]
        assert case.expect == {"suspect": {"rank": rank, "kinds": ["slow_host"]}}
        args = case.args
        assert args[args.index("--slow-mode") + 1] == "step-sleep" and args[args.index("--slow-ms") + 1] == ms
        assert args[args.index("--slow-rank") + 1] == str(rank)
    assert any(c.cls == "healthy" and c.job != "gpt" for c in cases.values())
    assert {c.fmt for c in cases.values() if c.job == "gpt"} == {"mapp-v1", "kineto"}


def test_the_fresh21_and_fresh22_sets_hold_the_last_stages_faults_and_imbalance_under_mapps_capture():
    for name, tag, world in (("fresh21", "-f21", 4), ("fresh22", "-f22", 2)):
        cases = _held_out(name, tag)
        assert all(make_corpus.world_of(c.layout) == world for c in cases)
        mapp = [c for c in cases if c.job == "gpt" and c.fmt == "mapp-v1"]
        # the last stage's own faults, where its loss runs between the forward and the backward
        # (megatron-core's rank order puts the pipeline stage outermost: stage = rank // (tp x dp)):
        # a host sleep or work before each microbatch there, and a layer fault on some stage
        def variant(case) -> str:
            return re.match(r"[a-z]+", case.id.split("-mapp-")[1]).group(0)

        on_last = {variant(c) for c in mapp if c.cls == "fault" and c.layout["pp"] >= 2
                   and c.injected[0]["rank"] // (c.layout["tp"] * c.layout["dp"]) == c.layout["pp"] - 1}
        assert on_last & {"hostsleep", "beforemb"}, (name, on_last)
        assert any(variant(c) == "layer" for c in mapp), name
        assert {"healthy", "imbalance", "fault"} <= {c.cls for c in mapp}, name
        assert any(c.id.endswith(f"-prof-stepsleep{c.injected[0]['sleep_ms']:g}ms-r{c.injected[0]['rank']}{tag}")
                   for c in cases if c.job != "gpt" and c.injected), name


def test_the_fresh23_and_fresh24_sets_hold_issue_13s_classes_out_after_the_31st_sessions_changes():
    for name, tag, world in (("fresh23", "-f23", 4), ("fresh24", "-f24", 2)):
        cases = _held_out(name, tag)
        assert all(make_corpus.world_of(c.layout) == world for c in cases)
        plain = {c.id.split("-prof-")[1].split("-")[0].rstrip("0123456789.xms") for c in cases if c.job != "gpt"}
        # more forward work, a sleep before each step or in the data path, and a healthy job
        assert {"fwd", "stepsleep", "datasleep", "healthy"} <= plain, name
        gpt = [c for c in cases if c.job == "gpt"]
        assert {c.fmt for c in gpt} == {"mapp-v1", "kineto"}
        assert {"healthy", "fault", "imbalance"} <= {c.cls for c in gpt}, name


def test_the_fresh25_and_fresh26_sets_hold_issue_13s_classes_out_at_the_32nd_sessions_start():
    for name, tag, world in (("fresh25", "-f25", 4), ("fresh26", "-f26", 2)):
        cases = _held_out(name, tag)
        assert all(make_corpus.world_of(c.layout) == world for c in cases)
        plain = {c.id.split("-prof-")[1].split("-")[0].rstrip("0123456789.xms") for c in cases if c.job != "gpt"}
        assert {"fwd", "stepsleep", "datasleep", "healthy"} <= plain, name
        gpt = [c for c in cases if c.job == "gpt"]
        assert {c.fmt for c in gpt} == {"mapp-v1", "kineto"}
        assert {"healthy", "fault", "imbalance"} <= {c.cls for c in gpt}, name
        # a layer fault under each capture, on more than one rank position
        for fmt in ("mapp-v1", "kineto"):
            layer = [c for c in gpt if c.fmt == fmt and "-layer" in c.id]
            assert layer, (name, fmt)
        assert len({c.injected[0]["rank"] for c in gpt if "-layer" in c.id}) >= 2, name
    # on 4 ranks, a loaded pipeline link under each capture
    links = {c.fmt for c in make_corpus.SETS["fresh25"]() if any("ranks" in i for i in c.injected)}
    assert links == {"mapp-v1", "kineto"}


def test_the_fresh27_set_shares_a_gpu_with_a_neighbour_and_runs_on_gpus_only(capsys):
    cases = make_corpus.SETS["fresh27"]()
    hogs = [c for c in cases if "--slow-mode" in c.gpu_args
            and c.gpu_args[c.gpu_args.index("--slow-mode") + 1] == "gpu-hog"]
    # under both captures, in each 2-rank layout, on either rank, named as slow compute
    assert {(c.fmt, c.layout["tp"], c.layout["pp"], c.layout["dp"]) for c in hogs} == {
        (f, *lay) for f in ("mapp-v1", "kineto") for lay in ((2, 1, 1), (1, 2, 1), (1, 1, 2))}
    assert {c.slow_rank for c in hogs} == {0, 1}
    assert all(c.expect == {"suspect": {"rank": c.slow_rank, "kinds": ["slow_compute"]}} for c in hogs)
    assert {"healthy", "imbalance"} <= {c.cls for c in cases}
    with pytest.raises(SystemExit) as stop:
        make_corpus.main(["--set", "fresh27", "--cpu", "--list"])
    assert stop.value.code == 2
    assert "runs on GPUs only" in capsys.readouterr().err


def test_a_gpu_shared_with_a_neighbour_is_measured_on_the_slowed_ranks_layers():
    # the neighbour adds no host time of the rank's own (no injected share): its effect is read
    # off the traces, as a layer fault's, or the case would be left out as "effect < 10%"
    fault = next(c for c in make_corpus.SETS["fresh27"]() if c.id == "gpt-tp2-mapp-gpuhog0.15-r1-f27")
    trace = HERE / "cases-fresh" / "gpt-dp4-mapp-layer1.45x-r2-f25"   # a real trace of 4 ranks, rank 2 slowed
    fault.layout, fault.injected = {"tp": 1, "pp": 1, "dp": 4}, [{"rank": 2, "duty": 0.15}]
    measured = make_corpus.measure(fault, trace, {}, None)
    assert measured["part_slowdown"] > 1.5 and make_corpus.effect_ok(measured)


def test_the_fresh28_and_fresh29_sets_hold_data_parallel_layer_faults_out_after_the_32nd_sessions_change():
    for name, tag, world in (("fresh28", "-f28", 4), ("fresh29", "-f29", 2)):
        cases = _held_out(name, tag)
        assert all(make_corpus.world_of(c.layout) == world for c in cases)
        mapp = [c for c in cases if c.job == "gpt" and c.fmt == "mapp-v1"]
        # layer faults with data parallel peers, beside healthy and imbalanced jobs of those layouts
        dp_layer = [c for c in mapp if "-layer" in c.id and c.layout["dp"] >= 2]
        assert len({c.injected[0]["rank"] for c in dp_layer}) >= 2, name
        negatives = {c.cls for c in mapp if c.layout["dp"] >= 2 and c.cls != "fault"}
        assert negatives == {"healthy", "imbalance"}, name
        assert {c.fmt for c in cases if c.job == "gpt"} == {"mapp-v1", "kineto"}
        assert any(c.job != "gpt" for c in cases), name


def test_the_fresh30_and_fresh31_sets_hold_links_of_several_sizes_out_beside_healthy_pipelines():
    for name, tag, world in (("fresh30", "-f30", 4), ("fresh31", "-f31", 2)):
        cases = _held_out(name, tag)
        assert all(make_corpus.world_of(c.layout) == world for c in cases)
        assert {c.fmt for c in cases if c.job == "gpt"} == {"mapp-v1", "kineto"}
        assert {c.cls for c in cases} == {"fault", "healthy", "imbalance"}, name
        assert any(c.job != "gpt" for c in cases), name
    cases = make_corpus.SETS["fresh30"]()
    extra = sorted(i["extra_bytes"] for c in cases for i in c.injected if "extra_bytes" in i)
    # every earlier set's links carried 4 MB more (`full`'s one, 1 MB): several sizes between
    assert len(set(extra)) == len(extra) >= 3 and max(extra) < 4_000_000
    piped = [c for c in cases if c.layout["pp"] >= 2 and c.cls != "fault" and c.fmt == "mapp-v1"]
    assert {c.cls for c in piped} == {"healthy", "imbalance"}


def test_the_fresh32_and_fresh33_sets_hold_pipelines_out_after_the_33rd_sessions_changes():
    for name, tag, world in (("fresh32", "-f32", 4), ("fresh33", "-f33", 2)):
        cases = _held_out(name, tag)
        assert all(make_corpus.world_of(c.layout) == world for c in cases)
        assert {c.fmt for c in cases if c.job == "gpt"} == {"mapp-v1", "kineto"}
        assert any(c.job != "gpt" for c in cases), name
    # PP2 under mapp's capture: a layer fault on each stage beside jobs with no fault there
    pp2 = [c for c in make_corpus.SETS["fresh33"]() if c.layout["pp"] == 2 and c.fmt == "mapp-v1"]
    assert {c.injected[0]["rank"] for c in pp2 if "-layer" in c.id} == {0, 1}
    assert {c.cls for c in pp2 if c.cls != "fault"} == {"healthy", "imbalance"}
    # the last stage of PP4 slowed, and pipelines with no loaded link beside loaded ones
    cases = make_corpus.SETS["fresh32"]()
    assert any(c.layout["pp"] == 4 and "-layer" in c.id and c.injected[0]["rank"] == 3 for c in cases)
    assert any("extra_bytes" in i for c in cases for i in c.injected)


def test_the_fresh34_set_holds_loaded_links_out_beside_pipelines_with_none():
    cases = _held_out("fresh34", "-f34")
    assert all(make_corpus.world_of(c.layout) == 4 for c in cases)
    loaded = [c for c in cases if any("extra_bytes" in i for i in c.injected)]
    assert len({i["extra_bytes"] for c in loaded for i in c.injected}) >= 3
    piped = [c for c in cases if c.layout["pp"] >= 2 and c not in loaded]
    assert {c.cls for c in piped} == {"healthy", "imbalance", "fault"}


def test_the_fresh35_set_holds_a_layer_fault_on_each_stage_of_pp4_out():
    cases = _held_out("fresh35", "-f35")
    pp4 = [c for c in cases if c.layout["pp"] == 4 and c.fmt == "mapp-v1"]
    assert {c.injected[0]["rank"] for c in pp4 if "-layer" in c.id} == {0, 1, 2, 3}
    assert {c.cls for c in pp4 if "-layer" not in c.id} == {"healthy", "imbalance", "fault"}


def test_the_fresh36_and_fresh37_sets_hold_the_33rd_sessions_layouts_out_after_its_changes():
    for name, tag, world in (("fresh36", "-f36", 4), ("fresh37", "-f37", 2)):
        cases = _held_out(name, tag)
        assert all(make_corpus.world_of(c.layout) == world for c in cases)
        assert any(c.job != "gpt" for c in cases) and {c.fmt for c in cases if c.job == "gpt"} == {"mapp-v1", "kineto"}
    layouts = {c.id.split("-")[1] for c in make_corpus.SETS["fresh36"]() if c.job == "gpt"}
    assert {"pp2dp2", "tp2pp2", "pp4"} <= layouts



def test_the_fresh38_and_fresh39_sets_hold_data_and_tensor_parallel_peers_under_mapps_capture_out():
    for name, tag, world in (("fresh38", "-f38", 4), ("fresh39", "-f39", 2)):
        cases = _held_out(name, tag)
        assert all(make_corpus.world_of(c.layout) == world for c in cases)
        peered = [c for c in cases if c.fmt == "mapp-v1" and c.layout["pp"] == 1]
        assert {c.cls for c in peered} == {"healthy", "imbalance", "fault"}
    # a layer fault on either rank of two data parallel peers
    dp2 = [c for c in make_corpus.SETS["fresh39"]() if c.id.startswith("gpt-dp2-mapp-layer")]
    assert {c.injected[0]["rank"] for c in dp2} == {0, 1}


def test_the_fresh40_and_fresh41_sets_stop_every_rank_s_profiler_on_its_own():
    for name, tag, world in (("fresh40", "-f40", 4), ("fresh41", "-f41", 2)):
        cases = _held_out(name, tag)
        assert all(make_corpus.world_of(c.layout) == world and c.fmt == "kineto" for c in cases)
        for c in cases:
            for args in (c.args, c.gpu_args):
                assert args[args.index("--profile-stop") + 1] == "plain"
            assert "stops its trace on its own" in make_corpus.source_text(c, False, world)
        assert {c.cls for c in cases} == {"healthy", "imbalance", "fault"}
    # the sets before them stop every rank's trace together (the scripts' default)
    assert all("--profile-stop" not in c.args for c in make_corpus.SETS["fresh37"]())


def test_the_fresh42_set_holds_every_8_rank_layout_out_under_both_captures():
    cases = _held_out("fresh42", "-f42")
    assert all(make_corpus.world_of(c.layout) == 8 for c in cases)
    layouts = {tuple(c.layout[a] for a in ("tp", "pp", "dp")) for c in cases}
    assert {(1, 1, 8), (1, 4, 2), (1, 2, 4), (2, 2, 2)} <= layouts
    assert {c.fmt for c in cases} == {"kineto", "mapp-v1"}
    # issue 13's class 3 at 8 ranks: the heavier last stage of PP4 x DP2 under both captures
    last = [c for c in cases if c.cls == "imbalance" and c.layout == make_corpus.LAYOUTS["pp4dp2"]]
    assert {c.fmt for c in last} == {"kineto", "mapp-v1"}


def test_the_fresh43_set_stops_its_profiler_jobs_plainly_and_names_every_kind_of_fault():
    cases = _held_out("fresh43", "-f43")
    assert all(make_corpus.world_of(c.layout) == 4 for c in cases)
    for c in cases:
        if c.fmt == "kineto":
            assert c.args[c.args.index("--profile-stop") + 1] == "plain"
        else:
            assert "--profile-stop" not in c.args
    kinds = {k for c in cases if c.cls == "fault" for k in c.expect["suspect"]["kinds"]}
    assert {"slow_compute", "slow_host", "slow_link"} <= kinds


def test_the_fresh44_set_holds_16_rank_layouts_out_under_both_captures():
    cases = _held_out("fresh44", "-f44")
    assert all(make_corpus.world_of(c.layout) == 16 for c in cases)
    layouts = {tuple(c.layout[a] for a in ("tp", "pp", "dp")) for c in cases}
    assert layouts == {(1, 1, 16), (1, 4, 4), (1, 2, 8), (2, 2, 4)}
    assert {c.fmt for c in cases} == {"kineto", "mapp-v1"}
    # each rank a fault names is one of the job's 16
    assert all(0 <= c.expect["suspect"]["rank"] < 16 for c in cases if c.cls == "fault")


def test_every_heavier_link_joins_two_neighbouring_stages_of_one_pipeline():
    # the extra traffic rides the pipeline's p2p exchanges (``P2PCommunicator._communicate``): a
    # link without one (TP2 x DP2's ranks 1 and 3, first put in ``fresh14``) carries none, and
    # its job is healthy under a fault's label
    for name, build in make_corpus.SETS.items():
        for case in build():
            for injected in case.injected:
                if "ranks" not in injected or case.part != "link":   # (not a slow node's ranks)
                    continue
                lay = case.layout

                def place(r):   # megatron-core's rank order: tp fastest, then dp, then pp
                    return r % lay["tp"], (r // lay["tp"]) % lay["dp"], r // (lay["tp"] * lay["dp"])

                (ta, da, pa), (tb, db, pb) = (place(r) for r in injected["ranks"])
                assert (ta, da) == (tb, db) and abs(pa - pb) == 1, (name, case.id)


def test_a_cpu_jobs_source_names_the_cpus_taskset_gave_it(monkeypatch):
    case = make_corpus.fresh11_set()[0]
    monkeypatch.setattr(make_corpus.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(make_corpus.os, "sched_getaffinity", lambda pid: {16, 17})
    assert "4 processes on 2 CPUs (taskset) of a 64-CPU machine" in make_corpus.source_text(case, False, 4)
    monkeypatch.setattr(make_corpus.os, "sched_getaffinity", lambda pid: set(range(64)))
    assert "4 processes on 64 cores" in make_corpus.source_text(case, False, 4)


def test_a_bursty_neighbour_runs_on_gpus_only_with_irregular_bursts():
    bursty = [c for c in make_corpus.fresh45_set() if "gpuhogbursty" in c.id]
    assert len(bursty) == 2
    for case in bursty:
        args = make_corpus.job_args(case, gpu=True)
        at = args.index("--slow-mode")
        assert args[at + 1] == "gpu-hog" and args[args.index("--slow-jitter") + 1] == "1"
        assert case.injected[0]["jitter_sigma"] == 1.0 and "irregular" in case.injected[0]["how"]
    # the set's default folder is its name, as every set's
    out = subprocess.run([sys.executable, str(HERE / "make_corpus.py"), "--set", "fresh45", "--list"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert len(out) == 11 and all(i.endswith("-f45-gpu2") for i in out)


@pytest.mark.parametrize("mode", ["data-sleep", "step-sleep"])
def test_the_plain_dp_x_tp_job_sleeps_where_it_is_told(tmp_path, mode):
    # tp_job.py took --slow-mode data-sleep and ran no fault (a held-out case of fresh97 measured
    # 0 ms injected): both sleep modes now sleep on the slow rank alone, and say how long
    timings = tmp_path / "t.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                    str(HERE / "tp_job.py"), "--tp", "2", "--layers", "1", "--width", "16", "--ffn", "32",
                    "--batch", "4", "--steps", "3", "--slow-rank", "1", "--slow-mode", mode, "--slow-ms", "30",
                    "--timings-json", str(timings)], check=True, env=env, cwd=tmp_path, capture_output=True, timeout=120)
    injected = json.loads(timings.read_text())["injected_s"]
    assert injected[0] == [0.0, 0.0, 0.0]
    assert all(0.03 <= s < 3.0 for s in injected[1])   # (a loaded machine may oversleep, never undersleep)


@pytest.mark.parametrize("script,mode", [("tp_job.py", "matmul"), ("ddp_job.py", "step-sleep")])
def test_a_plain_job_slowed_from_a_step_on_injects_nothing_before_it(tmp_path, script, mode):
    timings = tmp_path / "t.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    size = ["--tp", "2", "--ffn", "32"] if script == "tp_job.py" else []
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                    str(HERE / script), *size, "--layers", "2", "--width", "16", "--batch", "4", "--steps", "4",
                    "--slow-rank", "1", "--slow-mode", mode, "--slow-factor", "3", "--slow-ms", "30",
                    "--slow-from", "2", "--timings-json", str(timings)],
                   check=True, env=env, cwd=tmp_path, capture_output=True, timeout=120)
    injected = json.loads(timings.read_text())["injected_s"]
    assert injected[0] == [0.0] * 4
    assert injected[1][:2] == [0.0, 0.0] and all(s > 0 for s in injected[1][2:])


def test_the_fresh132_and_fresh133_sets_slow_layers_under_mapps_capture_with_real_matmuls():
    # every other layer fault under mapp's capture on CPUs sleeps (``--slow-work sleep``); these
    # run real matmuls, and their ids say so where the default would not
    for name, tag, world in (("fresh132", "-f132", 2), ("fresh133", "-f133", 4)):
        cases = make_corpus.SETS[name]()
        assert len(cases) == 6 and {c.fmt for c in cases} == {"mapp-v1"} and {c.cls for c in cases} == {"fault"}
        for case in cases:
            assert case.id.endswith(tag) and "-matmul-" in case.id
            args = make_corpus.job_args(case, gpu=False)
            assert args[args.index("--slow-work") + 1] == "matmul"
            assert "real matmuls" in case.injected[0]["how"]
            assert make_corpus.world_of(case.layout) == world
    slept = make_corpus.gpt_case("dp2", "mapp-v1", "layer", rank=1, factor=1.5)
    assert "-matmul" not in slept.id and make_corpus.job_args(slept, gpu=False)[-1] == "sleep"


def _held_out_width(name: str, tag: str, world: int, layouts: set[tuple[int, int, int]]) -> list:
    """``_held_out``'s cases of ``name``, each job of ``world`` ranks in one of ``layouts`` (tp,
    pp, dp), under both captures, each rank a fault names one of the job's, each job launched on
    ``world`` processes."""
    cases = _held_out(name, tag)
    assert all(make_corpus.world_of(c.layout) == world for c in cases)
    assert {tuple(c.layout[a] for a in ("tp", "pp", "dp")) for c in cases} == layouts
    assert {c.fmt for c in cases} == {"kineto", "mapp-v1"}
    assert all(0 <= c.expect["suspect"]["rank"] < world for c in cases if c.cls == "fault")
    for case in cases:
        assert f"--nproc_per_node={world}" in make_corpus.command(case, "/tmp/t", "/tmp/t.json", False, world)
    return cases


def test_the_fresh134_set_holds_32_rank_layouts_out_under_both_captures():
    _held_out_width("fresh134", "-f134", 32, {(1, 1, 32), (1, 2, 16), (1, 4, 8), (2, 2, 8)})


def test_the_fresh135_set_holds_issue_13s_4_rank_classes_out_under_both_captures():
    _held_out_width("fresh135", "-f135", 4, {(1, 1, 4), (2, 1, 2), (1, 2, 2), (2, 2, 1), (1, 4, 1)})


def test_the_fresh136_set_holds_8_rank_layouts_out_under_both_captures():
    _held_out_width("fresh136", "-f136", 8, {(1, 1, 8), (1, 4, 2), (1, 2, 4), (2, 2, 2)})


def test_the_fresh137_set_holds_16_rank_layouts_out_under_both_captures():
    _held_out_width("fresh137", "-f137", 16, {(1, 1, 16), (1, 4, 4), (1, 2, 8), (2, 2, 4)})


def test_the_fresh138_set_holds_issue_13s_class_3_out_at_64_ranks_under_both_captures():
    cases = _held_out_width("fresh138", "-f138", 64, {(1, 2, 32)})
    # the lognormal lengths of issue 13's class 3, under both captures, labelled no fault
    lognormal = [c for c in cases if "seqlognorm" in c.id]
    assert {c.fmt for c in lognormal} == {"kineto", "mapp-v1"} and {c.cls for c in lognormal} == {"imbalance"}


def test_the_fresh139_set_holds_faults_near_the_10_percent_floor_and_8_rank_links_out():
    cases = _held_out_width("fresh139", "-f139", 8, {(1, 1, 8), (1, 4, 2), (1, 2, 4), (2, 2, 2)})
    factors = [i["factor"] for c in cases for i in c.injected if "factor" in i]
    assert factors and max(factors) <= 1.3
    # a loaded link under each capture, each between neighbouring stages of one pipeline
    links = [c for c in cases if c.cls == "fault" and c.expect["suspect"]["kinds"] == ["slow_link"]]
    assert {c.fmt for c in links} == {"kineto", "mapp-v1"}


def test_the_fresh140_and_fresh141_sets_hold_a_stray_process_on_one_ranks_core_out():
    for name, tag, world, layouts in (
            ("fresh140", "-f140", 8, {(1, 1, 8), (1, 4, 2), (1, 2, 4), (2, 2, 2)}),
            ("fresh141", "-f141", 4, {(1, 1, 4), (2, 1, 2), (1, 2, 2), (1, 4, 1), (2, 2, 1)})):
        cases = _held_out_width(name, tag, world, layouts)
        hogs = [c for c in cases if "cpuhog" in c.id]
        assert {c.fmt for c in hogs} == {"kineto", "mapp-v1"}
        for case in hogs:
            args = make_corpus.job_args(case, gpu=False)
            assert args[args.index("--slow-mode") + 1] == "cpu-hog"
            assert 0 < float(args[args.index("--slow-duty") + 1]) < 1
            # the whole process slows: its layers and its host work alike
            assert case.expect["suspect"]["kinds"] == ["slow_compute", "slow_host"]
        assert any(c.cls == "healthy" for c in cases)


@pytest.mark.parametrize("name, tag, world, layouts", [
    ("fresh142", "-f142", 4, {(1, 1, 4), (2, 1, 2), (1, 2, 2), (1, 4, 1), (2, 2, 1)}),
    ("fresh143", "-f143", 2, {(1, 1, 2), (2, 1, 1), (1, 2, 1)}),
])
def test_the_fresh142_and_fresh143_sets_hold_a_cpu_model_shape_no_other_set_used_out(name, tag, world, layouts):
    cases = _held_out_width(name, tag, world, layouts)
    for case in cases:
        args = make_corpus.job_args(case, gpu=False)
        shape = make_corpus.CPU_SHAPE_142[case.fmt]
        usual = make_corpus.GPT_MAPP if case.fmt == "mapp-v1" else make_corpus.GPT_PROF
        # the last of a flag given twice is the one argparse keeps
        last = {flag: args[len(args) - 1 - args[::-1].index(flag) + 1] for flag in shape}
        if "seqlognorm" in case.id:
            assert last["--hidden"] == "256"
            continue
        assert last == shape and last["--hidden"] != usual[usual.index("--hidden") + 1]


def test_the_two_gpu_onset_set_traces_ten_iterations_of_two_ranks_and_runs_another_model_shape():
    cases = _held_out("fresh200", "-f200")
    assert {make_corpus.world_of(c.layout) for c in cases} == {2}
    assert {_last_iteration(c) + 1 - _traced_from(c) for c in cases} == {10}
    onsets = [c for c in cases if "--slow-from" in c.args]
    assert len(onsets) == 6 and {c.job for c in onsets} == {"gpt", "ddp"}
    for c in cases:
        gpu = make_corpus.job_args(c, gpu=True)
        # the fault sets in on GPUs as on CPUs, once; a job with no onset has none
        assert gpu.count("--slow-from") == int(c in onsets), c.id
        if c.job == "gpt":
            assert gpu[gpu.index("--hidden") + 1] == "2560", c.id


def test_the_four_rank_onset_set_has_link_faults_beside_pipelines_with_no_fault():
    cases = _held_out("fresh201", "-f201")
    assert {make_corpus.world_of(c.layout) for c in cases} == {4}
    assert {_last_iteration(c) + 1 - _traced_from(c) for c in cases} == {10}
    links = [c for c in cases if (c.expect.get("suspect") or {}).get("kinds") == ["slow_link"]]
    assert len(links) == 2
    quiet_pipelines = [c for c in cases if c.cls != "fault" and c.fmt == "mapp-v1" and "pp" in c.id.split("-")[1]]
    assert len(quiet_pipelines) >= 4


def test_the_dip_set_sets_faults_in_for_the_last_five_or_six_of_ten_beside_ten_jobs_with_no_fault():
    cases = _held_out("fresh202", "-f202")
    assert {make_corpus.world_of(c.layout) for c in cases} == {4}
    assert sum(c.cls != "fault" for c in cases) == 10
    for c in cases:
        assert _traced_from(c) == 2 and _last_iteration(c) == 11, c.id
        if c.cls == "fault":
            k = int(c.args[c.args.index("--slow-from") + 1])
            assert _last_iteration(c) + 1 - k in (5, 6), c.id


def test_the_core_wait_set_loads_links_less_than_before_beside_pipelines_with_no_fault():
    cases = _held_out("fresh203", "-f203")
    assert {make_corpus.world_of(c.layout) for c in cases} == {4, 8}
    assert {_last_iteration(c) + 1 - _traced_from(c) for c in cases} == {10}
    assert all(c.fmt == "mapp-v1" for c in cases)      # the capture that records waits for a core
    links = [c for c in cases if (c.expect.get("suspect") or {}).get("kinds") == ["slow_link"]]
    assert len(links) == 5
    # 2-3 MB more an exchange: below the 3-6 MB of every earlier set whose capture recorded the waits
    assert {c.injected[0]["extra_bytes"] for c in links} <= {2_000_000, 2_500_000, 3_000_000}
    assert sum(c.cls != "fault" for c in cases) == 9


def test_the_busier_core_wait_set_runs_eight_processes_beside_four_and_loads_links_from_1_5_mb():
    cases = _held_out("fresh204", "-f204")
    assert {make_corpus.world_of(c.layout) for c in cases} == {4, 8}
    assert {_last_iteration(c) + 1 - _traced_from(c) for c in cases} == {10}
    links = [c for c in cases if (c.expect.get("suspect") or {}).get("kinds") == ["slow_link"]]
    assert sorted(c.injected[0]["extra_bytes"] for c in links) == [1_500_000, 2_000_000, 2_000_000, 2_500_000, 3_000_000]
    assert sum(c.cls != "fault" for c in cases) == 7
