"""Worker for tests/scope/test_model.py: save or load a scope checkpoint at some TP/PP and
write the full logits of fixed token sequences (run alone for TP=PP=1, or under torchrun).

    python tests/scope/_ckpt_job.py --tp 2 --pp 1 [--save-new DIR] [--load DIR] [--save DIR] --logits OUT.pt
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from mapp.megatron_hooks.teardown import exit_now, leave_distributed  # noqa: E402
from mapp.scope.model import ModelSpec, build_model, load_checkpoint, save_checkpoint  # noqa: E402

# GQA (4 heads, 2 groups) so that TP=2 splits the query groups too
SPEC = ModelSpec(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                 ffn_hidden_size=128, vocab_size=256, max_sequence_length=32)


def tokens() -> torch.Tensor:
    return torch.randint(0, SPEC.vocab_size, (3, 20), generator=torch.Generator().manual_seed(7))


def forward(model, tok: torch.Tensor) -> torch.Tensor | None:
    """Full logits on the last stage (None elsewhere); stages pass hidden states with send/recv."""
    from megatron.core import parallel_state as ps

    pos = torch.arange(tok.shape[1]).unsqueeze(0).expand(tok.shape[0], -1)
    with torch.no_grad():
        if not ps.is_pipeline_first_stage():
            hidden = torch.empty(tok.shape[1], tok.shape[0], SPEC.hidden_size)
            dist.recv(hidden, ps.get_pipeline_model_parallel_prev_rank())
            model.set_input_tensor(hidden)
        out = model(tok, pos, None)
        if not ps.is_pipeline_last_stage():
            dist.send(out.contiguous(), ps.get_pipeline_model_parallel_next_rank())
            return None
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--save-new", help="build a fresh model (seed 0) and save it here")
    p.add_argument("--load", help="load this checkpoint")
    p.add_argument("--save", help="save the loaded model here (at this TP/PP)")
    p.add_argument("--logits", required=True)
    args = p.parse_args()

    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    from megatron.core import parallel_state as ps

    from mapp.scope.model import ensure_model_parallel

    if dist.is_initialized():
        ps.initialize_model_parallel(args.tp, args.pp)
    ensure_model_parallel()
    if args.save_new:
        torch.manual_seed(0)
        model = build_model(SPEC)
        save_checkpoint(model, SPEC, args.save_new)
        model.eval()
    else:
        model, spec = load_checkpoint(args.load)
        assert spec == SPEC and not model.training
        if args.save:
            save_checkpoint(model, spec, args.save)
    logits = forward(model, tokens())
    if logits is not None and ps.get_tensor_model_parallel_rank() == 0:
        torch.save(logits, args.logits)
    dist.barrier()
    leave_distributed()


if __name__ == "__main__":
    from mapp.errors import MappError

    try:
        main()
    except MappError as e:     # what the CLI would print
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        # (not sys.exit: finalization with gloo's threads alive can abort the process,
        # "terminate called without an active exception", seen once in a loaded test run)
        exit_now(e.exit_code)
    exit_now()
