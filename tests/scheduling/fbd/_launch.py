"""torchrun entry for the FBD tests: ``examples/train_gpt.py`` with two things added.

    torchrun ... tests/scheduling/fbd/_launch.py OUT_DIR [train_gpt.py arguments]

- torch's default generator is seeded (``--seed``) before anything runs: the example builds
  its CPU weights from it and does not seed it, and torch 2.13 seeds it differently in every
  process, so two runs of the example would not start from the same weights otherwise;
- every rank that gets a step's losses (the last stage, coupled or decoupled) appends their
  mean, at full precision, to ``OUT_DIR/losses-rank<R>.json`` (the printed lines have 4
  decimals).

Nothing else changes: the example's own ``main()`` runs, coupled or with ``--fbd``. With
``MAPP_FBD_TEST_STALE_WEIGHTS=1`` (a fault for the test that shows the loss comparison would
catch a broken weight sync) forward workers keep the weights of step 0.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _record(out: Path, losses) -> None:
    if not losses:
        return
    import torch

    value = torch.stack([x["loss"] for x in losses]).mean().item()
    path = out / f"losses-rank{os.environ.get('RANK', '0')}.json"
    values = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps(values + [value]))


def main() -> None:
    out = Path(sys.argv[1])
    sys.argv = [str(ROOT / "examples" / "train_gpt.py"), *sys.argv[2:]]
    import torch

    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 1234
    torch.manual_seed(seed)
    spec = importlib.util.spec_from_file_location("train_gpt", sys.argv[0])
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    from megatron.core.pipeline_parallel import schedules

    from mapp.scheduling.fbd.backward import BackwardWorker

    original_get = schedules.get_forward_backward_func

    def get_forward_backward_func(*args, **kwargs):
        fb = original_get(*args, **kwargs)

        def recorded(*a, **k):
            losses = fb(*a, **k)
            _record(out, losses)
            return losses

        return recorded

    schedules.get_forward_backward_func = get_forward_backward_func
    original_step = BackwardWorker.step

    def step(self, iteration):
        losses = original_step(self, iteration)
        _record(out, losses)
        return losses

    BackwardWorker.step = step
    if os.environ.get("MAPP_FBD_TEST_STALE_WEIGHTS") == "1":
        _keep_first_weights()
    example.main()


def _keep_first_weights() -> None:
    import torch

    from mapp.scheduling.fbd.forward import ForwardWorker

    original_load = ForwardWorker.load_weights

    def load_weights(self, iteration):
        original_load(self, iteration)  # the transfers still run: the backward workers wait for them
        if iteration == 0:
            self._first = [p.detach().clone() for p in self.model.parameters()]
            return
        with torch.no_grad():
            for p, first in zip(self.model.parameters(), self._first):
                p.copy_(first)

    ForwardWorker.load_weights = load_weights


if __name__ == "__main__":
    main()
    from mapp.megatron_hooks.teardown import exit_now

    exit_now()   # as examples/train_gpt.py ends (mapp/megatron_hooks/teardown.py says why)
