"""torchrun entry for the DPP tests: ``examples/train_gpt.py`` with what each step did recorded.

    torchrun ... tests/scheduling/dpp/_launch.py OUT_DIR [train_gpt.py arguments]

The example's own ``main()`` runs unchanged (``--use-dpp`` or megatron-core's schedule); its
``forward_backward_func`` is wrapped so that every rank appends, per step, to
``OUT_DIR/rank<R>.json``: the losses it got (one per microbatch, full precision; the printed
lines have 4 decimals) and, under DPP, the microbatch order it planned and the tasks it ran.
Gradients come from the example's own ``--grads-dir``; the example's ``close()`` of DPP's
transport still runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def main() -> None:
    out = Path(sys.argv[1])
    sys.argv = [str(ROOT / "examples" / "train_gpt.py"), *sys.argv[2:]]
    spec = importlib.util.spec_from_file_location("train_gpt", sys.argv[0])
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    make = example.make_forward_backward
    path = out / f"rank{os.environ['RANK']}.json"
    steps: list[dict] = []

    def make_forward_backward(*args, **kwargs):
        fb = make(*args, **kwargs)

        def recorded(**call):
            losses = fb(**call)
            steps.append({
                "losses": [x["loss"].item() for x in losses or []],
                "order": getattr(fb, "last_order", None),
                "tasks": getattr(fb, "last_tasks", None),
            })
            path.write_text(json.dumps(steps))
            return losses

        recorded.close = getattr(fb, "close", None) or (lambda: None)   # the example closes DPP's transport
        return recorded

    example.make_forward_backward = make_forward_backward
    example.main()


if __name__ == "__main__":
    main()
    from mapp.megatron_hooks.teardown import exit_now

    exit_now()   # as examples/train_gpt.py ends (mapp/megatron_hooks/teardown.py says why)
