"""Worker for tests/scope/test_demo_perturbation.py: train the demo model briefly (or use a
trained one), then, for each perturbation, the KL divergence of the next-token distribution
from the clean one at increasing strengths, as JSON on stdout."""

from __future__ import annotations

import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

STRENGTHS = [0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6]
PERTURBATIONS = [("weights", "gaussian"), ("weights", "uniform"), ("mlp", "gaussian"), ("mlp", "uniform"),
                 ("residual", "noise"), ("residual", "offset")]


def main() -> None:
    from mapp.scope.demo import demo_is_trained, train_demo_model
    from mapp.scope.engine import Engine
    from mapp.scope.model import load_checkpoint
    from mapp.scope.tokenizer import load_tokenizer

    directory, steps = sys.argv[1], int(sys.argv[2])
    if not demo_is_trained(directory):
        train_demo_model(directory, steps=steps)
    model, spec = load_checkpoint(directory)
    engine = Engine(model, load_tokenizer(directory, spec))
    message = {"prompts": ["Lucy had a dog named Rex. Every day Lucy took", "The days go Monday,"],
               "max_new_tokens": 1, "reducer": "rms", "bins": 4, "top_k": 3}
    result = {}
    for target, kind in PERTURBATIONS:
        kls = []
        for strength in STRENGTHS:
            engine.perturb({"target": target, "kind": kind, "strength": strength, "layer": None, "seed": 0})
            frames = []
            engine.generate(message, frames.append)
            step = frames[1]
            kls.append(None if step["kl"] is None else sum(step["kl"]) / len(step["kl"]))
            engine.clear()
        result[f"{target}/{kind}"] = kls
    print(json.dumps({"strengths": STRENGTHS, "kl": result}))


if __name__ == "__main__":
    main()
