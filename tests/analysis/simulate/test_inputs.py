"""Bad input is refused up front with one line naming the value and the rule."""

from __future__ import annotations

import pytest

from mapp.analysis.simulate import Fault, SimConfig, parse_fault, simulate
from mapp.errors import InputError, OutputError


def test_parse_fault_forms():
    assert parse_fault("slow_gpu:5:1.4") == Fault(kind="slow_gpu", rank=5, factor=1.4)
    assert parse_fault("slow_link:3-11:4") == Fault(kind="slow_link", ranks=(3, 11), factor=4.0)
    assert parse_fault("slow_nic:7:3") == Fault(kind="slow_nic", rank=7, factor=3.0)
    assert parse_fault("slow_gpu:2:2.0:3-5") == Fault(kind="slow_gpu", rank=2, factor=2.0, iterations=(3, 5))
    assert parse_fault("stage_imbalance:3:1.3") == Fault(kind="stage_imbalance", stage=3, factor=1.3)
    assert parse_fault("seqlen_imbalance::0.3") == Fault(kind="seqlen_imbalance", factor=0.3)
    assert parse_fault("slow_host:4").strength == 10.0  # the kind's default factor


@pytest.mark.parametrize(("spec", "words"), [
    ("slow_gpu", "2 to 4 fields"),
    ("slow_cpu:1:2", "unknown kind"),
    ("slow_gpu:x:2", "'x'"),
    ("slow_gpu:1:fast", "'fast'"),
    ("slow_link:3:4", "A-B"),
    ("slow_gpu:1:2:a-b", "FIRST-LAST"),
    ("seqlen_imbalance:3:0.2", "no target"),
    ("slow_gpu:1:2:3:4:5", "2 to 4 fields"),
])
def test_malformed_fault_names_the_text(spec, words):
    with pytest.raises(InputError) as err:
        parse_fault(spec)
    assert spec in str(err.value) and words in str(err.value)
    assert "\n" not in str(err.value)


def cfg(**kw) -> SimConfig:
    base = dict(tp=2, pp=4, dp=2, layers=8, microbatches=4, iterations=3)
    base.update(kw)
    return SimConfig(**base)


@pytest.mark.parametrize(("kw", "words"), [
    (dict(layers=10), "--layers 10"),
    (dict(vpp=2, layers=8, microbatches=6), "--microbatches 6"),
    (dict(vpp=2, microbatches=2), "--microbatches 2"),
    (dict(vpp=2, pp=1, layers=8), "--vpp 2"),
    (dict(tp=0), "--tp 0"),
    (dict(hidden=1001), "--hidden 1001"),
    (dict(format="json"), "--format json"),
    (dict(format="megatronapp", vpp=2), "megatronapp"),
    (dict(faults=[parse_fault("slow_gpu:16:1.4")]), "rank must be in 0..15"),
    (dict(faults=[parse_fault("slow_link:0-9:2")]), "do not exchange data"),
    (dict(faults=[parse_fault("slow_link:0-40:2")]), "rank 40"),
    (dict(faults=[parse_fault("stage_imbalance:4:1.3")]), "stage must be in 0..3"),
    (dict(faults=[parse_fault("slow_gpu:1:2:2-3")]), "iterations 2-3"),
    (dict(faults=[parse_fault("slow_gpu:1:0.5")]), "factor 0.5"),
    (dict(faults=[parse_fault("seqlen_imbalance::1.5")]), "factor 1.5"),
])
def test_impossible_jobs_are_refused_before_writing(tmp_path, kw, words):
    with pytest.raises(InputError) as err:
        simulate(cfg(**kw), tmp_path / "out")
    assert words in str(err.value)
    assert not (tmp_path / "out").exists()


def test_links_that_exist_are_accepted(tmp_path):
    # 0-1 TP peers, 0-2 DP peers, 0-4 pipeline neighbours
    faults = [parse_fault(s) for s in ("slow_link:0-1:2", "slow_link:2-0:2", "slow_link:0-4:2")]
    simulate(cfg(faults=faults, iterations=1), tmp_path / "out")


def test_output_with_traces_is_refused_unless_forced(tmp_path):
    out = tmp_path / "out"
    first = simulate(cfg(iterations=1, pp=2, tp=1, dp=2), out)
    with pytest.raises(OutputError) as err:
        simulate(cfg(iterations=1), out)
    assert "--force" in str(err.value)
    second = simulate(cfg(iterations=1), out, force=True)
    # stale files of the smaller job are gone
    assert sorted(p.name for p in out.glob("rank-*.json")) == [p.name for p in second.files[:-1]]
    assert len(second.files) - 1 == 16 != len(first.files) - 1
