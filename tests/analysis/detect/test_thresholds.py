"""The detector's cut-offs: one number sets them all as before, and each can be set alone."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mapp.analysis.detect import Thresholds, detect_bundle
from mapp.analysis.ingest import load_bundle
from mapp.cli.app import app
from mapp.errors import InputError
from tests.analysis.detect._sim import simulated

runner = CliRunner()


def test_one_threshold_derives_the_others_openly():
    assert Thresholds() == Thresholds.derive(0.1)
    assert Thresholds.derive(0.3) == Thresholds(slowdown=0.3, link=0.3, imbalance=0.3, min_effect=0.3 / 3)
    assert Thresholds.derive(0.3, link=0.5, imbalance=0.2, min_effect=0.01) == Thresholds(0.3, 0.5, 0.2, 0.01)
    # min_effect is exactly what stage 1 used before it was named: threshold / 3
    assert Thresholds.derive(0.15).min_effect == 0.15 / 3


@pytest.mark.parametrize("given, option", [
    ({"threshold": 0}, "--threshold"), ({"threshold": float("nan")}, "--threshold"),
    ({"link": -1}, "--link-threshold"), ({"imbalance": 0}, "--imbalance-threshold"),
    ({"min_effect": -0.1}, "--min-effect"),
])
def test_each_cut_is_checked_under_its_option_name(given, option):
    threshold = given.pop("threshold", 0.1)
    with pytest.raises(InputError, match=option):
        Thresholds.derive(threshold, **given)


def test_a_number_and_its_derived_thresholds_give_the_same_verdict(tmp_path):
    out, _ = simulated(tmp_path, "slow_gpu:5:1.3", tp=2, pp=2, dp=4)
    bundle = load_bundle(out)
    by_number = detect_bundle(bundle, threshold=0.1).to_json()
    by_cuts = detect_bundle(bundle, threshold=Thresholds.derive(0.1)).to_json()
    for v in (by_number, by_cuts):
        v.pop("timings_s")
    assert by_number == by_cuts
    assert by_number["threshold"] == 0.1
    assert by_number["thresholds"] == {"slowdown": 0.1, "link": 0.1, "imbalance": 0.1, "min_effect": 0.1 / 3}


def test_imbalance_threshold_moves_only_the_imbalance_cut(tmp_path):
    out, _ = simulated(tmp_path, "stage_imbalance:1:1.4", tp=2, pp=2, dp=4)
    base = runner.invoke(app, ["detect", str(out), "--json", str(tmp_path / "a.json")])
    high = runner.invoke(app, ["detect", str(out), "--imbalance-threshold", "1.0", "--json", str(tmp_path / "b.json")])
    assert base.exit_code == 0 and high.exit_code == 0, (base.output, high.output)
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert [i["kind"] for i in a["imbalance"]] == ["stage"] and b["imbalance"] == []
    assert a["suspects"] == b["suspects"] == []
    assert b["thresholds"] == {"slowdown": 0.1, "link": 0.1, "imbalance": 1.0, "min_effect": 0.1 / 3}


def test_link_threshold_moves_only_the_link_cut(tmp_path):
    out, _ = simulated(tmp_path, "slow_link:1-9:4", tp=2, pp=2, dp=4)
    bundle = load_bundle(out)
    base = detect_bundle(bundle, threshold=0.1)
    assert base.suspects and base.suspects[0].kind == "slow_link"
    # transfers 4x slower are not slow beyond (1 + 9)x; the compute cuts are unchanged
    loose = detect_bundle(bundle, threshold=Thresholds.derive(0.1, link=9.0))
    assert all(s.kind != "slow_link" for s in loose.suspects)


def test_cli_errors_name_the_option(tmp_path):
    out, _ = simulated(tmp_path, tp=2, pp=1, dp=2)
    for option in ("--link-threshold", "--imbalance-threshold", "--min-effect"):
        result = runner.invoke(app, ["detect", str(out), option, "-1"])
        assert result.exit_code != 0 and option in result.output and "Traceback" not in result.output


def test_help_says_what_each_cut_decides():
    text = runner.invoke(app, ["detect", "--help"], env={"COLUMNS": "200"}).output
    for option, words in (("--threshold", "is a suspect only"), ("--link-threshold", "[default: T]"),
                          ("--imbalance-threshold", "reported as imbalance"), ("--min-effect", "[default: T/3]")):
        assert option in text and words in text, option
