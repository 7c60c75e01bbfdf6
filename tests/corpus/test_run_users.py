"""The user-written jobs' batteries: each job runs with as many processes as its layout has ranks."""

import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("run_users", HERE / "run_users.py")
run_users = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_users)


def test_a_job_runs_with_its_layouts_ranks():
    assert run_users.world_of("tp2-mtp-healthy") == 2
    assert run_users.world_of("dp2-tf-w144-fwd1.5x-r0") == 2
    assert run_users.world_of("tp2dp2-mtp-stepsleep23ms-r3") == 4
    assert run_users.world_of("ddp4-cnn-c40-i40-healthy") == 4
    entry = run_users.entry("tp2-mtp-fwd1.65x-r0", "user_manual_tp.py", "--slow-rank 0")
    assert entry["layout"] == {"tp": 2, "pp": 1, "dp": 1} and "--nproc_per_node=2 " in entry["command"]


def test_batteries_have_unique_ids():
    for name, battery in run_users.BATTERIES.items():
        ids = [c[0] for c in battery]
        assert len(ids) == len(set(ids)), name


def test_a_jobs_answer_is_read_from_its_id():
    assert run_users.expected("dp4-mtp-stepsleep27ms-r0") == ("fault", {"rank": 0, "kinds": ["slow_host"]})
    assert run_users.expected("tp2dp2-mtp-seqlognorm0.7")[0] == "imbalance"
    assert run_users.expected("dp4-llama-hog-r3")[1]["kinds"] == ["slow_compute", "slow_host"]
    assert run_users.expected("dp4-llama-seqlognorm0.8-s2") == ("imbalance", None)


def test_favoured_experts_are_imbalance_and_expert_parallel_jobs_run_on_four():
    assert run_users.expected("ep4-moe-h256-skew1.5") == ("imbalance", None)
    assert run_users.expected("ep4-moe-h256-fwd2x-r2") == ("fault", {"rank": 2, "kinds": ["slow_compute"]})
    assert run_users.world_of("ep4-moe-h256-healthy") == 4


def test_a_causal_ring_and_uneven_batches_are_imbalance():
    assert run_users.expected("cp4-ring-causal") == ("imbalance", None)
    assert run_users.expected("dp4-flat-uneven") == ("imbalance", None)
    assert run_users.expected("cp4-ring-zigzag-healthy") == ("healthy", None)
    assert run_users.expected("cp2dp2-ring-zigzag-fwd2.5x-r0") == ("fault", {"rank": 0, "kinds": ["slow_compute"]})
    assert run_users.world_of("cp2dp2-ring-zigzag-healthy") == 4


def test_a_heavier_link_is_read_from_its_id():
    assert run_users.expected("dp4-ring-link1-2-x4") == ("fault", {"rank": 1, "peer": 2, "kinds": ["slow_link"]})
    assert run_users.expected("dp4-ring-link3-0") == ("fault", {"rank": 3, "peer": 0, "kinds": ["slow_link"]})
    assert run_users.expected("dp4-ring-fwd2x-r1") == ("fault", {"rank": 1, "kinds": ["slow_compute"]})
