"""The committed real-trace corpus (``tests/corpus/cases``) is complete and its manifest has the
shape that readers of it rely on. Cheap: no trace is parsed beyond its first bytes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

CASES = Path(__file__).resolve().parent / "cases"
MANIFEST = CASES / "manifest.json"
KINDS = {"slow_compute", "slow_host", "slow_link", "slow_nic"}

pytestmark = pytest.mark.skipif(not MANIFEST.exists(), reason="corpus not generated")


def _cases():
    return json.loads(MANIFEST.read_text())["cases"]


def test_manifest_shape():
    doc = json.loads(MANIFEST.read_text())
    assert doc["version"] == 1 and doc["cases"]
    ids = [c["id"] for c in doc["cases"]]
    assert len(ids) == len(set(ids))
    for c in doc["cases"]:
        assert set(c) == {"id", "path", "source", "format", "layout", "class", "injected", "expect", "measured",
                          "command"}, c["id"]
        assert c["format"] in ("kineto", "mapp-v1")
        assert c["class"] in ("fault", "healthy", "imbalance")
        assert set(c["layout"]) == {"tp", "pp", "dp"} and c["layout"]["tp"] * c["layout"]["pp"] * c["layout"]["dp"] == 4
        suspect = c["expect"]["suspect"]
        if c["class"] == "fault":
            assert c["injected"] and suspect is not None and set(suspect["kinds"]) <= KINDS, c["id"]
            assert 0 <= suspect["rank"] < 4
            if "peer" in suspect:
                assert suspect["kinds"] == ["slow_link"] and sorted(c["injected"][0]["ranks"]) == sorted(
                    [suspect["rank"], suspect["peer"]])
            else:
                assert c["injected"][0]["rank"] == suspect["rank"]
        else:
            assert c["injected"] == [] and suspect is None, c["id"]
        assert len(c["measured"]["step_ms"]) == 4


@pytest.mark.parametrize("case", _cases() if MANIFEST.exists() else [], ids=lambda c: c["id"])
def test_every_rank_has_a_trace(case):
    d = CASES / case["path"]
    files = sorted(p.name for p in d.iterdir() if p.name.startswith("rank-"))
    if case["format"] == "mapp-v1":
        assert files == [f"rank-{r:05d}.json" for r in range(4)]
        head = (d / files[0]).read_text()[:400]
        assert '"format":"mapp-trace"' in head
    else:
        assert files == [f"rank-{r}.json.gz" for r in range(4)]
        with gzip.open(d / files[0]) as f:
            head = f.read(4096)
        assert b'"traceEvents"' in head or b'"distributedInfo"' in head
