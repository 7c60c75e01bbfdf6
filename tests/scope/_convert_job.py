"""Worker for tests/scope/test_convert_hf.py: convert a local GPT-2 directory (world 1), or load
the converted checkpoint at some TP (under torchrun), and save the logits of given tokens.

    python tests/scope/_convert_job.py convert HF_DIR OUT_DIR TOKENS.pt LOGITS.pt
    torchrun ... tests/scope/_convert_job.py load OUT_DIR TOKENS.pt LOGITS.pt --tp 2
"""

from __future__ import annotations

import os
import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from mapp.megatron_hooks.teardown import exit_now, leave_distributed  # noqa: E402


def logits_of(model, tokens):
    import torch

    position = torch.arange(tokens.shape[1]).unsqueeze(0).expand(tokens.shape[0], -1)
    with torch.no_grad():
        return model(tokens, position, None)


def main() -> None:
    import torch
    import torch.distributed as dist

    from mapp.errors import MappError
    from mapp.scope.model import load_checkpoint

    mode, args = sys.argv[1], sys.argv[2:]
    try:
        if mode == "convert":
            from mapp.scope.convert_hf import convert_gpt2

            hf_dir, out_dir, tokens, out = args
            convert_gpt2(hf_dir, out_dir)
        else:
            out_dir, tokens, out, _, tp = args
            dist.init_process_group("gloo")
            from megatron.core import parallel_state as ps

            ps.initialize_model_parallel(int(tp), 1)
        model, spec = load_checkpoint(out_dir)
    except MappError as e:      # what the CLI would print
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    logits = logits_of(model, torch.load(tokens))
    if dist.get_rank() == 0:
        torch.save(logits, out)
    dist.barrier()
    leave_distributed()


if __name__ == "__main__":
    main()
    exit_now()
