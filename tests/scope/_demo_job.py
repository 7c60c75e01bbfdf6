"""Worker for tests/scope/test_demo.py: train the demo model briefly in a fresh process (it
sets up its own world-1 process group) and report what happened as JSON on stdout."""

from __future__ import annotations

import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main() -> None:
    import torch

    from mapp.scope.demo import DEMO_SPEC, demo_is_trained, greedy_continuation, train_demo_model
    from mapp.scope.model import load_checkpoint
    from mapp.scope.tokenizer import load_tokenizer

    directory, steps = sys.argv[1], int(sys.argv[2])
    calls = []
    torch.manual_seed(123)
    before = torch.rand(3).tolist()
    torch.manual_seed(123)
    out = train_demo_model(directory, steps=steps, progress=lambda s, n, loss: calls.append((s, n, loss)))
    after = torch.rand(3).tolist()
    model, spec = load_checkpoint(out)
    tok = load_tokenizer(out, spec)
    print(json.dumps({
        "returned": str(out), "progress": calls, "trained": demo_is_trained(out),
        "spec_is_demo": spec == DEMO_SPEC, "eval": not model.training,
        "rng_untouched": before == after,
        "sample": greedy_continuation(model, tok, "Anna and Tom went to the", 12),
    }))


if __name__ == "__main__":
    main()
