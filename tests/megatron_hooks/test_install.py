"""install()/uninstall() and the flags, in one single-rank gloo process (a subprocess, so that
megatron-core's globals do not leak into the test session)."""

from __future__ import annotations

import subprocess
import sys

from ._torchrun import ROOT, env

SCRIPT = r"""
import argparse, os, sys, tempfile
os.environ.update(RANK="0", WORLD_SIZE="1")
import torch.distributed as dist
# a file store, not a TCP port: a port picked free can be taken before it is bound (EADDRINUSE
# once, under the full suite's parallel workers)
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
from mapp.megatron_hooks.cpu_patches import apply_if_cpu
assert apply_if_cpu()
from megatron.core import parallel_state as ps
ps.initialize_model_parallel(1, 1)
from megatron.core.pipeline_parallel import schedules, p2p_communication
from megatron.core.tensor_parallel import mappings, layers
from megatron.core.distributed import param_and_grad_buffer as pgb
from mapp.megatron_hooks import add_trace_args, install, install_from_args, current

def originals():
    return (schedules.forward_step, schedules.backward_step, mappings._reduce, layers.torch,
            p2p_communication.P2PCommunicator.__dict__["_communicate"],
            pgb._ParamAndGradBucketGroup.__dict__["start_grad_sync"])

before = originals()
# tracing off: nothing installed
args = add_trace_args(argparse.ArgumentParser()).parse_args([])
off = install_from_args(args)
assert not off.enabled and originals() == before and current() is None
with off.iteration(0) as traced:
    assert traced is False
# tracing on: patched, and restored on close
d = tempfile.mkdtemp()
args = add_trace_args(argparse.ArgumentParser()).parse_args(
    ["--trace", "--trace-dir", d, "--trace-interval", "4", "--continuous-trace-iterations", "1",
     "--trace-granularity", "full"])
on = install_from_args(args)
assert on.enabled and current() is on
assert on.tracer.granularity.name == "OP" and on.tracer.window.interval == 4
now = originals()
assert all(a is not b for a, b in zip(now, before)), "every hook point is patched"
again = install(trace_dir=d)          # a second install replaces the first
assert current() is again and originals() != before
again.close(); again.close()           # closing twice is harmless
assert originals() == before and current() is None
assert os.path.exists(os.path.join(d, "rank-00000.json"))
print("OK")
"""


def test_install_uninstall_and_flags(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "store")], capture_output=True, text=True,
                          env=env(), cwd=ROOT, timeout=120)
    assert proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr[-4000:]


def test_the_example_prints_its_help():
    # every help string goes through argparse's %-formatting: a bare "%" breaks --help
    proc = subprocess.run([sys.executable, "examples/train_gpt.py", "--help"], capture_output=True, text=True,
                          cwd=ROOT, env=env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--trace-granularity" in proc.stdout and "--use-dpp" in proc.stdout and "Traceback" not in proc.stderr
