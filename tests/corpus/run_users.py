"""Run a battery of the user-written jobs (``user_*.py``) and write its manifest.

Run: ``python tests/corpus/run_users.py --battery users74 --out DIR`` (a gloo process for each rank
of the layout the id starts with: 4, or 2 for ``dp2-``/``tp2-``/``pp2-``; ``OMP_NUM_THREADS=1``,
one job at a time; ~7 minutes on 2 cores), then score it with
``python benchmarks/detect_real.py DIR``. ``--list`` prints the battery's ids; ``--only ID``
runs some of them (the manifest keeps the entries of jobs already in ``DIR``). The Trainer and
Lightning jobs need ``transformers``, ``accelerate`` and ``lightning`` beside torch, which the
project does not install (``pip install 'accelerate>=1.1' lightning==2.6.6`` once torch==2.13.0 is in).

``make_corpus.py`` drives the project's own jobs (``_job.py``, megatron-core) and measures
what each injection cost; these are jobs written as users write them, whose answer is the
injection alone: a rank named by ``-rN`` in the id, slow compute for added work (``fwd``,
``extra``), a slow host for a sleep, either for a busy thread beside it (``hog``); a slow link
for ``-linkA-B-`` (the traffic from rank A to rank B made heavier); none for the
rest (``seqlognorm``, ``last``, ``skew`` (a router favouring one rank's experts), ``causal``
(a ring's contiguous chunks of a causal sequence) and ``uneven`` (batch sizes by rank) are
imbalance). Whether an injection cost 10% of its rank's step is not measured here: read it from
the trace (``mapp sql DIR/ID -c "FROM iterations"``) before calling a miss a miss.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_corpus import _kill_group  # noqa: E402  (torchrun's workers outlive torchrun's own group)

USERS74 = [  # held out in the seventy-fourth session (at 780bfa8), run once each
    ("ddp4-tf-shapes-w160-fwd1.5x-r2", "user_ddp_transformer.py", "--slow-rank 2 --factor 1.5 --shapes --width 160 --layers 3"),
    ("ddp4-tf-accum2-w144-stepsleep21ms-r1", "user_ddp_transformer.py", "--slow-rank 1 --sleep-ms 21 --accum 2 --width 144"),
    ("ddp4-tf-clip-annotate-w176-healthy", "user_ddp_transformer.py", "--clip --annotate --width 176"),
    ("ddp4-tf-w160-seqlognorm0.75", "user_ddp_transformer.py", "--seq-sigma 0.75 --width 160"),
    ("fsdp4-tf-w128-fwd1.6x-r3", "user_ddp_transformer.py", "--fsdp --slow-rank 3 --factor 1.6"),
    ("ddp4-tf-loader1-datasleep26ms-r0", "user_ddp_transformer.py", "--loader-workers 1 --slow-rank 0 --data-sleep-ms 26"),
    ("ddp4-tf-manual-fwd1.5x-r1", "user_ddp_transformer.py", "--manual --slow-rank 1 --factor 1.5 --width 144"),
    ("ddp4-cnn-c40-extra2-r3", "user_ddp_cnn.py", "--slow-rank 3 --extra 2 --channels 40"),
    ("ddp4-cnn-c40-i40-healthy", "user_ddp_cnn.py", "--channels 40 --image 40"),
    ("ddp4-cnn-stepsleep22ms-r2", "user_ddp_cnn.py", "--slow-rank 2 --sleep-ms 22 --channels 36"),
    ("ddp4-hf-w160-fwd1.5x-r1", "user_hf_trainer.py", "--slow-rank 1 --factor 1.5 --width 160"),
    ("ddp4-hf-seqlognorm0.7-group-s5", "user_hf_trainer.py", "--seq-sigma 0.7 --group-by-length --seed 5"),
    ("ddp4-hf-datasleep4ms-r3", "user_hf_trainer.py", "--slow-rank 3 --data-sleep-ms 4"),
    ("ddp4-pl-fwd1.6x-r2", "user_lightning.py", "--slow-rank 2 --factor 1.6"),
    ("ddp4-pl-accum2-healthy", "user_lightning.py", "--accum 2"),
    ("dp2tp2-dtensor-extra3-r1", "user_dtensor_tp.py", "--slow-rank 1 --extra 3 --width 224"),
    ("tp4-dtensor-healthy", "user_dtensor_tp.py", "--tp 4 --width 256"),
    ("pp4-pipe-extra1-r2", "user_pipe.py", "--slow-rank 2 --extra 1 --width 224"),
    ("pp2dp2-pipe-healthy", "user_pipe.py", "--dp 2"),
    ("pp4-pipe-last3", "user_pipe.py", "--last-blocks 3"),
    ("pp4-pipe-gpipe-stepsleep21ms-r1", "user_pipe.py", "--schedule gpipe --slow-rank 1 --sleep-ms 21"),
]
USERS81 = [  # held out in the eighty-first session, run once each on the development machine's 2 cores
    ("dp4-tf-amp-w152-fwd1.45x-r3", "user_ddp_transformer.py", "--amp --slow-rank 3 --factor 1.45 --width 152"),
    ("dp4-tf-sync-clip-w168-healthy", "user_ddp_transformer.py", "--sync --clip --width 168"),
    ("dp4-tf-fsdp-accum2-w136-seqlognorm0.85", "user_ddp_transformer.py", "--fsdp --accum 2 --seq-sigma 0.85 --width 136"),
    ("dp4-tf-manual-w96-stepsleep34ms-r0", "user_ddp_transformer.py", "--manual --slow-rank 0 --sleep-ms 34 --width 96"),
    ("dp2-tf-w144-fwd1.5x-r0", "user_ddp_transformer.py", "--slow-rank 0 --factor 1.5 --width 144"),
    ("dp2-tf-w112-stepsleep26ms-r1", "user_ddp_transformer.py", "--slow-rank 1 --sleep-ms 26 --width 112"),
    ("dp4-cnn-nomarks-extra2-r1", "user_ddp_cnn.py", "--no-step-marks --slow-rank 1 --extra 2 --channels 36"),
    ("dp4-cnn-c28-datasleep33ms-r2", "user_ddp_cnn.py", "--slow-rank 2 --data-sleep-ms 33 --channels 28"),
    ("pp4-pipe-shapes-extra1-w208-r3", "user_pipe.py", "--shapes --slow-rank 3 --extra 1 --width 208"),
    ("pp2dp2-pipe-extra1-w240-r1", "user_pipe.py", "--dp 2 --slow-rank 1 --extra 1 --width 240"),
    ("pp4-pipe-vpp2-healthy", "user_pipe.py", "--vpp 2"),
    ("dp2tp2-dtensor-w200-extra2-r2", "user_dtensor_tp.py", "--slow-rank 2 --extra 2 --width 200"),
    ("dp4-hf-w176-fwd1.4x-r2", "user_hf_trainer.py", "--slow-rank 2 --factor 1.4 --width 176"),
    ("dp4-pl-w112-sleep30ms-r0", "user_lightning.py", "--slow-rank 0 --sleep-ms 30 --width 112"),
    # Megatron-style tensor parallelism by hand (new_group, autograd functions), tensorboard_trace_handler's files
    ("tp2dp2-mtp-fwd1.65x-r1", "user_manual_tp.py", "--slow-rank 1 --factor 1.65"),
    ("tp2dp2-mtp-attn3-w208-r2", "user_manual_tp.py", "--slow-rank 2 --attn-extra 3 --width 208"),
    ("tp2dp2-mtp-stepsleep23ms-r3", "user_manual_tp.py", "--slow-rank 3 --sleep-ms 23"),
    ("tp2dp2-mtp-seqlognorm0.7", "user_manual_tp.py", "--seq-sigma 0.7 --seed 3"),
    ("tp2dp2-mtp-l4-healthy", "user_manual_tp.py", "--layers 4 --seed 5"),
    ("dp4-mtp-fwd1.7x-r2", "user_manual_tp.py", "--tp 1 --slow-rank 2 --factor 1.7"),
    ("dp4-mtp-stepsleep27ms-r0", "user_manual_tp.py", "--tp 1 --slow-rank 0 --sleep-ms 27"),
    ("tp2-mtp-fwd1.65x-r0", "user_manual_tp.py", "--slow-rank 0 --factor 1.65"),
    ("tp2-mtp-attn4-r1", "user_manual_tp.py", "--slow-rank 1 --attn-extra 4"),
    ("tp2-mtp-healthy", "user_manual_tp.py", "--seed 7"),
    # a LLaMA-style decoder under FSDP1 (FullyShardedDataParallel), shapes and memory recorded, plain JSON
    ("dp4-llama-tie-s3-healthy", "user_fsdp_llama.py", "--tie --seed 3"),
    ("dp4-llama-fwd1.45x-r2", "user_fsdp_llama.py", "--slow-rank 2 --factor 1.45"),
    ("dp4-llama-ckpt-fwd3.3x-r1", "user_fsdp_llama.py", "--ckpt --slow-rank 1 --factor 3.3"),
    ("dp4-llama-hog-r3", "user_fsdp_llama.py", "--slow-rank 3 --hog"),
    ("dp4-llama-optsleep24ms-r1", "user_fsdp_llama.py", "--slow-rank 1 --opt-sleep-ms 24"),
    ("dp4-llama-accum2-optsleep43ms-r0", "user_fsdp_llama.py", "--accum 2 --slow-rank 0 --opt-sleep-ms 43"),
    ("dp4-llama-seqlognorm0.8-s2", "user_fsdp_llama.py", "--seq-sigma 0.8 --seed 2"),
    ("dp2-llama-fwd2.7x-r1", "user_fsdp_llama.py", "--slow-rank 1 --factor 2.7"),
    ("dp2-llama-ckpt-s1-healthy", "user_fsdp_llama.py", "--ckpt --seed 1"),
    ("dp4-llama-ddp-s5-healthy", "user_fsdp_llama.py", "--ddp --seed 5"),
    # megatron-core's own loop as its simple example writes it (GPTModel, mcore DDP, get_forward_backward_func)
    ("tp2dp2-mcl-fwd2.15x-r2", "user_mcore_loop.py", "--tp 2 --slow-rank 2 --factor 2.15"),
    ("tp2dp2-mcl-datasleep23ms-r3", "user_mcore_loop.py", "--tp 2 --slow-rank 3 --data-sleep-ms 23"),
    ("tp2dp2-mcl-s48-seqlognorm0.75", "user_mcore_loop.py", "--tp 2 --seq-sigma 0.75 --seq 48 --seed 2"),
    ("tp2dp2-mcl-h192-healthy", "user_mcore_loop.py", "--tp 2 --hidden 192 --micro-batch-size 2 --seed 3"),
    ("pp2dp2-mcl-datasleep21ms-r2", "user_mcore_loop.py", "--pp 2 --slow-rank 2 --data-sleep-ms 21"),
    ("pp2dp2-mcl-mb6-healthy", "user_mcore_loop.py", "--pp 2 --num-microbatches 6 --seed 5"),
    ("dp4-mcl-fwd1.7x-r1", "user_mcore_loop.py", "--slow-rank 1 --factor 1.7"),
    ("dp4-mcl-s48-seqlognorm0.7", "user_mcore_loop.py", "--seq-sigma 0.7 --seq 48"),
    ("pp4-mcl-last2", "user_mcore_loop.py", "--pp 4 --last-heavier 2"),
    ("pp4-mcl-fwd1.55x-r3", "user_mcore_loop.py", "--pp 4 --slow-rank 3 --factor 1.55"),
    ("tp2-mcl-fwd1.6x-r0", "user_mcore_loop.py", "--tp 2 --slow-rank 0 --factor 1.6"),
    ("dp2-mcl-datasleep27ms-r1", "user_mcore_loop.py", "--slow-rank 1 --data-sleep-ms 27"),
]
_MOE = "--hidden 256 --tokens 512"
_TITAN = "--width 384 --batch 16 --seq 128"
_ZH = "--width 256 --batch 16"
USERS83 = [  # held out in the eighty-third session, run once each on the development machine's 2 cores
    # expert parallelism by hand (all_to_all_single of counts, then of tokens), DDP or a by-hand all-reduce for the rest
    ("ep4-moe-h256-fwd2x-r2", "user_moe_a2a.py", f"{_MOE} --slow-rank 2 --factor 2"),
    ("ep4-moe-h256-top2-fwd2x-r0", "user_moe_a2a.py", f"{_MOE} --top2 --slow-rank 0 --factor 2"),
    ("ep4-moe-h256-manualdp-fwd2.5x-r1", "user_moe_a2a.py", f"{_MOE} --manual-dp --slow-rank 1 --factor 2.5"),
    ("ep4-moe-h256-stepsleep40ms-r3", "user_moe_a2a.py", f"{_MOE} --slow-rank 3 --sleep-ms 40"),
    ("ep4-moe-h256-healthy", "user_moe_a2a.py", f"{_MOE} --seed 3"),
    ("ep4-moe-h192-top2-healthy", "user_moe_a2a.py", "--hidden 192 --tokens 384 --top2 --seed 4"),
    ("ep4-moe-h256-skew1.5", "user_moe_a2a.py", f"{_MOE} --skew 1.5"),
    ("ep4-moe-h256-top2-cap1.25-skew1", "user_moe_a2a.py", f"{_MOE} --top2 --capacity 1.25 --skew 1"),
    # torchtitan's 2-D parallelism: DTensor TP on the mesh's tp dimension, FSDP2 on its dp one
    ("dp2tp2-titan-w384-fwd4.5x-r1", "user_titan_2d.py", f"{_TITAN} --slow-rank 1 --factor 4.5"),
    ("dp2tp2-titan-w384-fwd4.5x-r2", "user_titan_2d.py", f"{_TITAN} --slow-rank 2 --factor 4.5 --seed 2"),
    ("dp2tp2-titan-w384-stepsleep130ms-r3", "user_titan_2d.py", f"{_TITAN} --slow-rank 3 --sleep-ms 130"),
    ("dp2tp2-titan-w384-healthy", "user_titan_2d.py", f"{_TITAN} --seed 5"),
    ("dp2tp2-titan-w384-seqlognorm0.8", "user_titan_2d.py", f"{_TITAN} --seq-sigma 0.8"),
    ("dp4-titan-w384-fwd3x-r0", "user_titan_2d.py", f"{_TITAN} --dp 4 --tp 1 --slow-rank 0 --factor 3"),
    ("tp4-titan-w384-healthy", "user_titan_2d.py", f"{_TITAN} --dp 1 --tp 4"),
    # DDP with a communication hook (PowerSGD, fp16), ZeroRedundancyOptimizer, gzip traces
    ("dp4-zh-w256-psgd-fwd2.2x-r1", "user_zero_hooks.py", f"{_ZH} --hook powersgd --slow-rank 1 --factor 2.2"),
    ("dp4-zh-w256-zero-fp16-fwd2.2x-r3", "user_zero_hooks.py", f"{_ZH} --zero --hook fp16 --slow-rank 3 --factor 2.2"),
    ("dp4-zh-w256-zero-healthy", "user_zero_hooks.py", f"{_ZH} --zero --hook none --seed 2"),
    ("dp4-zh-w256-psgd-stepsleep110ms-r0", "user_zero_hooks.py", f"{_ZH} --slow-rank 0 --sleep-ms 110"),
    ("dp4-zh-w256-fp16-datasleep110ms-r2", "user_zero_hooks.py", f"{_ZH} --hook fp16 --slow-rank 2 --data-sleep-ms 110"),
    ("dp4-zh-w256-static-b1-seqlognorm0.8", "user_zero_hooks.py", f"{_ZH} --static-graph --bucket-mb 1 --seq-sigma 0.8"),
    ("dp2-zh-w256-zero-fwd2.2x-r1", "user_zero_hooks.py", f"{_ZH} --zero --slow-rank 1 --factor 2.2"),
    ("dp2-zh-w256-psgd-healthy", "user_zero_hooks.py", f"{_ZH} --seed 4"),
]
USERS83B = [  # held out after ``routed`` (the eighty-third session), run once each on the development machine's 2 cores
    ("ep4-moe-h320-skew1", "user_moe_a2a.py", "--hidden 320 --tokens 384 --skew 1 --seed 11"),
    ("ep4-moe-h256-top2-skew2", "user_moe_a2a.py", "--hidden 256 --tokens 512 --top2 --skew 2 --seed 12"),
    ("ep4-moe-h192-e4-skew0.8", "user_moe_a2a.py", "--hidden 192 --tokens 640 --experts-per-rank 4 --skew 0.8 --seed 13"),
    ("ep4-moe-h256-manualdp-skew1.5", "user_moe_a2a.py", "--hidden 256 --tokens 512 --manual-dp --skew 1.5 --seed 14"),
    ("ep4-moe-h320-healthy", "user_moe_a2a.py", "--hidden 320 --tokens 384 --seed 15"),
    ("ep4-moe-h256-skew1.5-fwd2.5x-r1", "user_moe_a2a.py", "--hidden 256 --tokens 512 --skew 1.5 --slow-rank 1 --factor 2.5 --seed 16"),
    ("ep4-moe-h256-skew1.5-fwd2x-r0", "user_moe_a2a.py", "--hidden 256 --tokens 512 --skew 1.5 --slow-rank 0 --factor 2 --seed 17"),
    ("ep4-moe-h320-top2-fwd2.2x-r3", "user_moe_a2a.py", "--hidden 320 --tokens 384 --top2 --slow-rank 3 --factor 2.2 --seed 18"),
    ("ep4-moe-h256-skew1-stepsleep45ms-r2", "user_moe_a2a.py", "--hidden 256 --tokens 512 --skew 1 --slow-rank 2 --sleep-ms 45 --seed 19"),
]
USERS83C = [  # held out after ``routed``'s last change (the eighty-third session), run once each on 2 cores
    ("ep4-moe-h288-skew1.2", "user_moe_a2a.py", "--hidden 288 --tokens 448 --skew 1.2 --seed 21"),
    ("ep4-moe-h224-top2-cap1.5-skew1.8", "user_moe_a2a.py", "--hidden 224 --tokens 512 --top2 --capacity 1.5 --skew 1.8 --seed 22"),
    ("ep4-moe-h256-e3-skew2.5", "user_moe_a2a.py", "--hidden 256 --tokens 480 --experts-per-rank 3 --skew 2.5 --seed 23"),
    ("ep4-moe-h288-top2-healthy", "user_moe_a2a.py", "--hidden 288 --tokens 448 --top2 --seed 24"),
    ("ep4-moe-h256-skew2-fwd2.5x-r2", "user_moe_a2a.py", "--hidden 256 --tokens 512 --skew 2 --slow-rank 2 --factor 2.5 --seed 25"),
    ("ep4-moe-h288-top2-skew1.2-fwd2x-r0", "user_moe_a2a.py", "--hidden 288 --tokens 448 --top2 --skew 1.2 --slow-rank 0 --factor 2 --seed 26"),
    ("ep4-moe-h256-manualdp-fwd2.5x-r3", "user_moe_a2a.py", "--hidden 256 --tokens 512 --manual-dp --slow-rank 3 --factor 2.5 --seed 27"),
]
USERS84 = [  # held out in the eighty-fourth session, run once each on the development machine's 2 cores
    # a GPT under torch.compile: DDP then compile, or FSDP2 over compiled blocks (torchtitan's order)
    ("ddp4-gptc-healthy", "user_compiled.py", "--seed 1"),
    ("ddp4-gptc-fwd2x-r1", "user_compiled.py", "--slow-rank 1 --factor 2 --seed 2"),
    ("ddp4-gptc-accum2-fwd1.8x-r3", "user_compiled.py", "--accum 2 --slow-rank 3 --factor 1.8 --seed 3"),
    ("ddp4-gptc-stepsleep45ms-r2", "user_compiled.py", "--slow-rank 2 --sleep-ms 45 --seed 4"),
    ("ddp4-gptc-datasleep45ms-r0", "user_compiled.py", "--slow-rank 0 --data-sleep-ms 45 --seed 5"),
    ("ddp4-gptc-seqlognorm0.6", "user_compiled.py", "--seq-sigma 0.6 --seed 6"),
    ("ddp4-gptc-ckpt-healthy", "user_compiled.py", "--ckpt --seed 7"),
    ("fsdp4-gptc-healthy", "user_compiled.py", "--fsdp --seed 8"),
    ("fsdp4-gptc-fwd2.2x-r2", "user_compiled.py", "--fsdp --slow-rank 2 --factor 2.2 --seed 9"),
    ("fsdp4-gptc-ckpt-stepsleep45ms-r1", "user_compiled.py", "--fsdp --ckpt --slow-rank 1 --sleep-ms 45 --seed 10"),
    # ring attention by hand (context parallel over batch_isend_irecv); causal chunks are imbalance
    ("cp4-ring-zigzag-healthy", "user_ring_cp.py", "--zigzag --seed 1"),
    ("cp4-ring-causal", "user_ring_cp.py", "--seed 2"),
    ("cp4-ring-zigzag-seqlognorm0.5", "user_ring_cp.py", "--zigzag --seq-sigma 0.5 --seed 3"),
    ("cp4-ring-zigzag-fwd2.5x-r1", "user_ring_cp.py", "--zigzag --slow-rank 1 --factor 2.5 --seed 4"),
    ("cp4-ring-zigzag-fwd3x-r3", "user_ring_cp.py", "--zigzag --slow-rank 3 --factor 3 --seed 5"),
    ("cp4-ring-zigzag-stepsleep60ms-r2", "user_ring_cp.py", "--zigzag --slow-rank 2 --sleep-ms 60 --seed 6"),
    ("cp2dp2-ring-zigzag-healthy", "user_ring_cp.py", "--cp 2 --dp 2 --zigzag --seed 7"),
    ("cp2dp2-ring-zigzag-fwd2.5x-r0", "user_ring_cp.py", "--cp 2 --dp 2 --zigzag --slow-rank 0 --factor 2.5 --seed 8"),
    # gradient sync by hand: hierarchical (node leaders do more), flat, local SGD
    ("dp4-hier-healthy", "user_hier_sync.py", "--seed 1"),
    ("dp4-hier-overlap-healthy", "user_hier_sync.py", "--overlap --seed 2"),
    ("dp4-hier-fwd1.8x-r1", "user_hier_sync.py", "--slow-rank 1 --factor 1.8 --seed 3"),
    ("dp4-hier-fwd1.8x-r2", "user_hier_sync.py", "--slow-rank 2 --factor 1.8 --seed 4"),
    ("dp4-hier-overlap-stepsleep60ms-r3", "user_hier_sync.py", "--overlap --slow-rank 3 --sleep-ms 60 --seed 5"),
    ("dp4-flat-uneven", "user_hier_sync.py", "--sync flat --uneven --seed 6"),
    ("dp4-flat-overlap-fwd1.8x-r3", "user_hier_sync.py", "--sync flat --overlap --slow-rank 3 --factor 1.8 --seed 7"),
    ("dp4-localsgd-healthy", "user_hier_sync.py", "--sync localsgd --seed 8"),
    ("dp4-localsgd-fwd2x-r0", "user_hier_sync.py", "--sync localsgd --slow-rank 0 --factor 2 --seed 9"),
]
USERS84B = [  # held out after ``graded_work`` (the eighty-fourth session), run once each on 2 cores
    ("cp4-ring-causal-w160-l3", "user_ring_cp.py", "--width 160 --layers 3 --seq 768 --seed 41"),
    ("cp4-ring-causal-seqlognorm0.4", "user_ring_cp.py", "--seq-sigma 0.4 --seed 42"),
    ("cp2dp2-ring-causal", "user_ring_cp.py", "--cp 2 --dp 2 --seed 43"),
    ("cp4-ring-causal-fwd3x-r0", "user_ring_cp.py", "--slow-rank 0 --factor 3 --seed 44"),
    ("cp4-ring-zigzag-w160-fwd2.5x-r2", "user_ring_cp.py", "--zigzag --width 160 --slow-rank 2 --factor 2.5 --seed 45"),
    ("cp4-ring-zigzag-l3-healthy", "user_ring_cp.py", "--zigzag --layers 3 --seq 768 --seed 46"),
    ("cp2dp2-ring-zigzag-stepsleep60ms-r3", "user_ring_cp.py", "--cp 2 --dp 2 --zigzag --slow-rank 3 --sleep-ms 60 --seed 47"),
    ("ddp4-gptc-w160-l3-healthy", "user_compiled.py", "--width 160 --layers 3 --seed 48"),
    ("ddp4-gptc-w160-l3-fwd1.8x-r0", "user_compiled.py", "--width 160 --layers 3 --slow-rank 0 --factor 1.8 --seed 49"),
    ("fsdp4-gptc-seqlognorm0.5", "user_compiled.py", "--fsdp --seq-sigma 0.5 --seed 50"),
    ("dp4-hier-w192-fwd1.8x-r0", "user_hier_sync.py", "--width 192 --slow-rank 0 --factor 1.8 --seed 51"),
    ("dp4-hier-overlap-uneven", "user_hier_sync.py", "--overlap --uneven --seed 52"),
    ("dp4-localsgd-stepsleep60ms-r2", "user_hier_sync.py", "--sync localsgd --slow-rank 2 --sleep-ms 60 --seed 53"),
]
USERS84C = [  # held out in the eighty-fourth session: 1F1B pipelines by hand (isend/irecv), run once each on 2 cores
    ("pp4-1f1b-healthy", "user_pp_1f1b.py", "--seed 1"),
    ("pp4-1f1b-gpipe-healthy", "user_pp_1f1b.py", "--gpipe --seed 2"),
    ("pp4-1f1b-fwd2.5x-r1", "user_pp_1f1b.py", "--slow-rank 1 --factor 2.5 --seed 3"),
    ("pp4-1f1b-fwd2.5x-r2", "user_pp_1f1b.py", "--slow-rank 2 --factor 2.5 --seed 4"),
    ("pp4-1f1b-fwd2.5x-r3", "user_pp_1f1b.py", "--slow-rank 3 --factor 2.5 --seed 5"),
    ("pp4-1f1b-stepsleep60ms-r0", "user_pp_1f1b.py", "--slow-rank 0 --sleep-ms 60 --seed 6"),
    ("pp4-1f1b-stepsleep60ms-r2", "user_pp_1f1b.py", "--slow-rank 2 --sleep-ms 60 --seed 7"),
    ("pp4-1f1b-mbsleep15ms-r3", "user_pp_1f1b.py", "--slow-rank 3 --mb-sleep-ms 15 --seed 8"),
    ("pp4-1f1b-mbsleep10ms-r1", "user_pp_1f1b.py", "--slow-rank 1 --mb-sleep-ms 10 --seed 9"),
    ("pp4-1f1b-last", "user_pp_1f1b.py", "--last-heavy --seed 10"),
    ("pp4-1f1b-seqlognorm0.6", "user_pp_1f1b.py", "--seq-sigma 0.6 --seed 11"),
    ("pp4-1f1b-gpipe-fwd2.5x-r2", "user_pp_1f1b.py", "--gpipe --slow-rank 2 --factor 2.5 --seed 12"),
    ("pp2dp2-1f1b-healthy", "user_pp_1f1b.py", "--pp 2 --dp 2 --seed 13"),
    ("pp2dp2-1f1b-fwd2.5x-r1", "user_pp_1f1b.py", "--pp 2 --dp 2 --slow-rank 1 --factor 2.5 --seed 14"),
    ("pp2dp2-1f1b-fwd2.5x-r2", "user_pp_1f1b.py", "--pp 2 --dp 2 --slow-rank 2 --factor 2.5 --seed 15"),
    ("pp2dp2-1f1b-mbsleep20ms-r3", "user_pp_1f1b.py", "--pp 2 --dp 2 --slow-rank 3 --mb-sleep-ms 20 --seed 16"),
    ("pp2dp2-1f1b-stepsleep200ms-r1", "user_pp_1f1b.py", "--pp 2 --dp 2 --slow-rank 1 --sleep-ms 200 --seed 17"),
    ("pp2dp2-1f1b-l4-last", "user_pp_1f1b.py", "--pp 2 --dp 2 --layers 4 --last-heavy --seed 18"),
    ("pp2dp2-1f1b-l4-healthy", "user_pp_1f1b.py", "--pp 2 --dp 2 --layers 4 --seed 20"),
    ("pp2dp2-1f1b-seqlognorm0.6", "user_pp_1f1b.py", "--pp 2 --dp 2 --seq-sigma 0.6 --seed 19"),
]
USERS84D = [  # held out in the eighty-fourth session: DLRM by hand (tables sharded over all_to_all, DDP dense), 2 cores
    ("dp4-dlrm-healthy", "user_dlrm.py", "--seed 1"),
    ("dp4-dlrm-t10-mean-healthy", "user_dlrm.py", "--tables 10 --pooling mean --seed 2"),
    ("dp4-dlrm-b320-healthy", "user_dlrm.py", "--batch 320 --seed 3"),
    ("dp4-dlrm-fwd3x-r2", "user_dlrm.py", "--slow-rank 2 --factor 3 --seed 4"),
    ("dp4-dlrm-fwd3x-r0", "user_dlrm.py", "--slow-rank 0 --factor 3 --seed 5"),
    ("dp4-dlrm-mean-fwd3.5x-r3", "user_dlrm.py", "--pooling mean --slow-rank 3 --factor 3.5 --seed 6"),
    ("dp4-dlrm-stepsleep60ms-r1", "user_dlrm.py", "--slow-rank 1 --sleep-ms 60 --seed 7"),
    ("dp4-dlrm-t10-stepsleep70ms-r3", "user_dlrm.py", "--tables 10 --slow-rank 3 --sleep-ms 70 --seed 8"),
    ("dp4-dlrm-skew6", "user_dlrm.py", "--hot-table-skew 6 --seed 9"),
    ("dp4-dlrm-mean-skew6", "user_dlrm.py", "--pooling mean --hot-table-skew 6 --seed 10"),
    ("dp4-dlrm-uneven-b40-skew", "user_dlrm.py", "--uneven-tables --bag 40 --seed 11"),
    ("dp4-dlrm-uneven-skew3", "user_dlrm.py", "--uneven-tables --hot-table-skew 3 --seed 12"),
]
USERS85 = [  # held out in the eighty-fifth session: SyncBatchNorm CNN, CLIP with gathered embeddings, a GNN on graphs
    # of random sizes, each by hand with DDP, 2 cores
    ("ddp4-gnn-healthy", "user_gnn.py", "--seed 1"),
    ("ddp4-gnn-fwd2x-r2", "user_gnn.py", "--slow-rank 2 --factor 2 --seed 2"),
    ("ddp4-gnn-fwd1.7x-r1", "user_gnn.py", "--slow-rank 1 --factor 1.7 --seed 3"),
    ("ddp4-gnn-stepsleep70ms-r0", "user_gnn.py", "--slow-rank 0 --sleep-ms 70 --seed 4"),
    ("ddp4-gnn-datasleep70ms-r2", "user_gnn.py", "--slow-rank 2 --data-sleep-ms 70 --seed 5"),
    ("ddp4-gnn-uneven-ht0.8", "user_gnn.py", "--heavy-tail 0.8 --seed 6"),
    ("ddp4-gnn-skew1.8", "user_gnn.py", "--skew-rank 1 --skew 1.8 --seed 7"),
    ("ddp4-gnn-skew1.5", "user_gnn.py", "--skew-rank 3 --skew 1.5 --seed 8"),
    ("ddp4-gnn-uneven-ht0.8-fwd2x-r3", "user_gnn.py", "--heavy-tail 0.8 --slow-rank 3 --factor 2 --seed 9"),
    ("ddp4-gnn-skew1.8-fwd2x-r0", "user_gnn.py", "--skew-rank 1 --skew 1.8 --slow-rank 0 --factor 2 --seed 10"),
    ("ddp4-sbn-healthy", "user_syncbn_cnn.py", "--seed 1"),
    ("ddp4-sbn-c48-healthy", "user_syncbn_cnn.py", "--channels 48 --seed 2"),
    ("ddp4-sbn-fwd2x-r2", "user_syncbn_cnn.py", "--slow-rank 2 --factor 2 --seed 3"),
    ("ddp4-sbn-fwd1.7x-r0", "user_syncbn_cnn.py", "--slow-rank 0 --factor 1.7 --seed 4"),
    ("ddp4-sbn-stepsleep60ms-r1", "user_syncbn_cnn.py", "--slow-rank 1 --sleep-ms 60 --seed 5"),
    ("ddp4-sbn-datasleep60ms-r3", "user_syncbn_cnn.py", "--slow-rank 3 --data-sleep-ms 60 --seed 6"),
    ("ddp4-sbn-uneven", "user_syncbn_cnn.py", "--uneven --seed 7"),
    ("ddp4-sbn-uneven-fwd2x-r1", "user_syncbn_cnn.py", "--uneven --slow-rank 1 --factor 2 --seed 8"),
    ("dp2-sbn-healthy", "user_syncbn_cnn.py", "--seed 9"),
    ("dp2-sbn-fwd2x-r1", "user_syncbn_cnn.py", "--slow-rank 1 --factor 2 --seed 10"),
    ("ddp4-clip-healthy", "user_clip.py", "--seed 1"),
    ("ddp4-clip-fwd2x-r1", "user_clip.py", "--slow-rank 1 --factor 2 --seed 2"),
    ("ddp4-clip-fwd1.7x-r3", "user_clip.py", "--slow-rank 3 --factor 1.7 --seed 3"),
    ("ddp4-clip-stepsleep60ms-r3", "user_clip.py", "--slow-rank 3 --sleep-ms 60 --seed 4"),
    ("ddp4-clip-datasleep60ms-r0", "user_clip.py", "--slow-rank 0 --data-sleep-ms 60 --seed 5"),
    ("ddp4-clip-seqlognorm0.7", "user_clip.py", "--varlen --seed 6"),
    ("ddp4-clip-seqlognorm1", "user_clip.py", "--varlen --len-sigma 1.0 --seed 7"),
    ("ddp4-clip-local-healthy", "user_clip.py", "--local-loss --seed 8"),
    ("ddp4-clip-local-fwd2x-r2", "user_clip.py", "--local-loss --slow-rank 2 --factor 2 --seed 9"),
    ("ddp4-clip-torch-fwd2x-r0", "user_clip.py", "--gather torch --slow-rank 0 --factor 2 --seed 10"),
]

USERS86 = [  # held out in the eighty-sixth session: an LSTM seq2seq with attention, a VAE with accumulation
    # under no_sync and an EMA, megatron-core's interleaved (virtual pipeline) 1F1B; helpers wrote them blind, 2 cores
    ("ddp4-lstm-healthy", "user_lstm_seq2seq.py", "--seed 1"),
    ("ddp4-lstm-fwd2x-r2", "user_lstm_seq2seq.py", "--slow-rank 2 --factor 2 --seed 2"),
    ("ddp4-lstm-fwd1.5x-r0", "user_lstm_seq2seq.py", "--slow-rank 0 --factor 1.5 --seed 3"),
    ("ddp4-lstm-hog-r1", "user_lstm_seq2seq.py", "--slow-rank 1 --hog --seed 4"),
    ("ddp4-lstm-stepsleep60ms-r3", "user_lstm_seq2seq.py", "--slow-rank 3 --sleep-ms 60 --seed 5"),
    ("ddp4-lstm-datasleep60ms-r1", "user_lstm_seq2seq.py", "--slow-rank 1 --data-sleep-ms 60 --seed 6"),
    ("ddp4-lstm-seqlognorm0.7", "user_lstm_seq2seq.py", "--len-sigma 0.7 --seed 7"),
    ("ddp4-lstm-skew1.6", "user_lstm_seq2seq.py", "--long-rank 2 --long 1.6 --seed 8"),
    ("ddp4-lstm-seqlognorm0.7-fwd2x-r3", "user_lstm_seq2seq.py", "--len-sigma 0.7 --slow-rank 3 --factor 2 --seed 9"),
    ("ddp4-lstm-skew1.6-fwd2x-r0", "user_lstm_seq2seq.py", "--long-rank 2 --long 1.6 --slow-rank 0 --factor 2 --seed 10"),
    ("ddp4-vae-healthy", "user_vae_accum.py", "--seed 1"),
    ("ddp4-vae-accum4-healthy", "user_vae_accum.py", "--accum 4 --seed 2"),
    ("ddp4-vae-fwd2x-r1", "user_vae_accum.py", "--slow-rank 1 --factor 2 --seed 3"),
    ("ddp4-vae-fwd1.5x-r3", "user_vae_accum.py", "--slow-rank 3 --factor 1.5 --seed 4"),
    ("ddp4-vae-hog-r0", "user_vae_accum.py", "--slow-rank 0 --hog --seed 5"),
    ("ddp4-vae-stepsleep60ms-r2", "user_vae_accum.py", "--slow-rank 2 --sleep-ms 60 --seed 6"),
    ("ddp4-vae-datasleep40ms-r3", "user_vae_accum.py", "--slow-rank 3 --data-sleep-ms 40 --seed 7"),
    ("ddp4-vae-uneven-res0.3", "user_vae_accum.py", "--res-sigma 0.3 --seed 8"),
    ("ddp4-vae-skew1.7", "user_vae_accum.py", "--big-rank 1 --big 1.7 --seed 9"),
    ("ddp4-vae-skew1.7-fwd2x-r2", "user_vae_accum.py", "--big-rank 1 --big 1.7 --slow-rank 2 --factor 2 --seed 10"),
    ("pp2dp2-vpp-healthy", "user_mcore_vpp.py", "--seed 1"),
    ("pp4-vpp-healthy", "user_mcore_vpp.py", "--pp 4 --seed 2"),
    ("pp2dp2-vpp-fwd2x-r1", "user_mcore_vpp.py", "--slow-rank 1 --factor 2 --seed 3"),
    ("pp2dp2-vpp-fwd1.6x-r2", "user_mcore_vpp.py", "--slow-rank 2 --factor 1.6 --seed 4"),
    ("pp4-vpp-fwd2x-r3", "user_mcore_vpp.py", "--pp 4 --slow-rank 3 --factor 2 --seed 5"),
    ("pp2dp2-vpp-hog-r3", "user_mcore_vpp.py", "--slow-rank 3 --hog --seed 6"),
    ("pp2dp2-vpp-stepsleep60ms-r0", "user_mcore_vpp.py", "--slow-rank 0 --sleep-ms 60 --seed 7"),
    ("pp4-vpp-datasleep15ms-r0", "user_mcore_vpp.py", "--pp 4 --slow-rank 0 --data-sleep-ms 15 --seed 8"),  # was r1: a middle stage reads no data
    ("pp4-vpp-last2", "user_mcore_vpp.py", "--pp 4 --last-heavier 2 --seed 9"),
]

USERS86B = [  # held out after the eighty-sixth session's data_scale change: other skews, ranks and faults beside them
    ("ddp4-lstm-skew1.3", "user_lstm_seq2seq.py", "--long-rank 1 --long 1.3 --seed 21"),
    ("ddp4-lstm-skew2", "user_lstm_seq2seq.py", "--long-rank 3 --long 2 --seed 22"),
    ("ddp4-lstm-h64-skew1.6", "user_lstm_seq2seq.py", "--hidden 64 --long-rank 0 --long 1.6 --seed 23"),
    ("ddp4-lstm-skew1.6-fwd1.5x-r1", "user_lstm_seq2seq.py", "--long-rank 2 --long 1.6 --slow-rank 1 --factor 1.5 --seed 24"),
    ("ddp4-lstm-skew1.6-fwd2x-r2", "user_lstm_seq2seq.py", "--long-rank 2 --long 1.6 --slow-rank 2 --factor 2 --seed 25"),
    ("ddp4-lstm-skew1.6-stepsleep60ms-r2", "user_lstm_seq2seq.py",
     "--long-rank 2 --long 1.6 --slow-rank 2 --sleep-ms 60 --seed 26"),
    ("ddp4-lstm-len12-fwd2x-r3", "user_lstm_seq2seq.py", "--len 12 --slow-rank 3 --factor 2 --seed 27"),
    ("ddp4-lstm-len12-healthy", "user_lstm_seq2seq.py", "--len 12 --seed 28"),
    ("ddp4-lstm-len12-seqlognorm0.5", "user_lstm_seq2seq.py", "--len 12 --len-sigma 0.5 --seed 29"),
    ("ddp4-vae-skew1.3", "user_vae_accum.py", "--big-rank 2 --big 1.3 --seed 30"),
]


USERS87 = [  # held out in the eighty-seventh session: jobs helpers wrote blind to the detector, 2 cores
    # a Conformer speech recogniser under CTC (bucketed lengths, SpecAugment, features on the host)
    ("ddp4-asr-healthy", "user_conformer_ctc.py", "--seed 1"),
    ("ddp4-asr-fwd2x-r2", "user_conformer_ctc.py", "--slow-rank 2 --factor 2 --seed 2"),
    ("ddp4-asr-fwd1.5x-r0", "user_conformer_ctc.py", "--slow-rank 0 --factor 1.5 --seed 3"),
    ("ddp4-asr-hog-r1", "user_conformer_ctc.py", "--slow-rank 1 --hog --seed 4"),
    ("ddp4-asr-stepsleep60ms-r3", "user_conformer_ctc.py", "--slow-rank 3 --sleep-ms 60 --seed 5"),
    ("ddp4-asr-featsleep60ms-r1", "user_conformer_ctc.py", "--slow-rank 1 --feat-sleep-ms 60 --seed 6"),
    ("ddp4-asr-seqlognorm0.5", "user_conformer_ctc.py", "--dur-sigma 0.5 --seed 7"),
    ("ddp4-asr-skew1.6", "user_conformer_ctc.py", "--long-rank 1 --long 1.6 --seed 8"),
    ("ddp4-asr-skew1.6-fwd2x-r3", "user_conformer_ctc.py", "--long-rank 1 --long 1.6 --slow-rank 3 --factor 2 --seed 9"),
    ("ddp4-asr-lnconv-healthy", "user_conformer_ctc.py", "--conv-norm layer --seed 10"),
    ("ddp4-asr-seqlognorm0.5-featsleep60ms-r2", "user_conformer_ctc.py",
     "--dur-sigma 0.5 --slow-rank 2 --feat-sleep-ms 60 --seed 11"),
    # PPO with CartPole-like environments in numpy on the host: rollouts of many small forwards, then DDP updates
    ("ddp4-ppo-healthy", "user_ppo_rl.py", "--seed 1"),
    ("ddp4-ppo-fwd2x-r1", "user_ppo_rl.py", "--slow-rank 1 --factor 2 --seed 2"),
    ("ddp4-ppo-fwd1.5x-r0", "user_ppo_rl.py", "--slow-rank 0 --factor 1.5 --seed 3"),
    ("ddp4-ppo-hog-r2", "user_ppo_rl.py", "--slow-rank 2 --hog --seed 4"),
    ("ddp4-ppo-stepsleep60ms-r3", "user_ppo_rl.py", "--slow-rank 3 --sleep-ms 60 --seed 5"),
    ("ddp4-ppo-envsleep60ms-r1", "user_ppo_rl.py", "--slow-rank 1 --env-sleep-ms 60 --seed 6"),
    ("ddp4-ppo-seqlognorm0.7", "user_ppo_rl.py", "--episode-sigma 0.7 --seed 7"),
    ("ddp4-ppo-skew1.6", "user_ppo_rl.py", "--long-rank 2 --long 1.6 --seed 8"),
    ("ddp4-ppo-seqlognorm0.7-fwd2x-r3", "user_ppo_rl.py", "--episode-sigma 0.7 --slow-rank 3 --factor 2 --seed 9"),
    ("ddp4-ppo-skew1.6-fwd2x-r0", "user_ppo_rl.py", "--long-rank 2 --long 1.6 --slow-rank 0 --factor 2 --seed 10"),
    ("ddp4-ppo-skew1.6-envsleep60ms-r1", "user_ppo_rl.py",
     "--long-rank 2 --long 1.6 --slow-rank 1 --env-sleep-ms 60 --seed 11"),
    # data parallel with the user's own ring all-reduce (isend/irecv to the right neighbour), one link made heavier
    ("dp4-ring-link1-2-x4", "user_ring_allreduce.py", "--slow-link 1 2 --extra 4 --seed 1"),
    ("dp4-ring-link3-0-x3", "user_ring_allreduce.py", "--slow-link 3 0 --extra 3 --seed 2"),
    ("dp4-ring-shapes-link2-3-x5", "user_ring_allreduce.py", "--slow-link 2 3 --extra 5 --shapes --seed 3"),
    ("dp4-ring-overlap-link0-1-x3.5", "user_ring_allreduce.py", "--overlap --slow-link 0 1 --extra 3.5 --seed 4"),
    ("dp4-ring-fwd2x-r2", "user_ring_allreduce.py", "--slow-rank 2 --factor 2 --seed 5"),
    ("dp4-ring-hog-r3", "user_ring_allreduce.py", "--slow-rank 3 --hog --seed 6"),
    ("dp4-ring-datasleep100ms-r1", "user_ring_allreduce.py", "--slow-rank 1 --data-sleep-ms 100 --seed 7"),
    ("dp4-ring-stepsleep90ms-r0", "user_ring_allreduce.py", "--slow-rank 0 --sleep-ms 90 --seed 8"),
    ("dp4-ring-healthy", "user_ring_allreduce.py", "--seed 9"),
    ("dp4-ring-seqlognorm0.5", "user_ring_allreduce.py", "--seq-sigma 0.5 --seed 10"),
    ("dp4-ring-uneven", "user_ring_allreduce.py", "--uneven --seed 11"),
    ("dp4-ring-shapes-healthy", "user_ring_allreduce.py", "--shapes --seed 12"),
    ("dp4-ring-shapes-uneven", "user_ring_allreduce.py", "--shapes --uneven --seed 13"),
    # a DDPM UNet under bf16 autocast, a DataLoader worker a rank, shapes recorded
    ("ddp4-unet-healthy", "user_diffusion_unet.py", "--seed 1"),
    ("ddp4-unet-fwd2x-r2", "user_diffusion_unet.py", "--slow-rank 2 --factor 2 --seed 2"),
    ("ddp4-unet-fwd1.5x-r0", "user_diffusion_unet.py", "--slow-rank 0 --factor 1.5 --seed 3"),
    ("ddp4-unet-hog-r3", "user_diffusion_unet.py", "--slow-rank 3 --hog --seed 4"),
    ("ddp4-unet-stepsleep150ms-r3", "user_diffusion_unet.py", "--slow-rank 3 --sleep-ms 150 --seed 5"),
    ("ddp4-unet-loadersleep100ms-r1", "user_diffusion_unet.py", "--slow-rank 1 --loader-sleep-ms 100 --seed 6"),
    ("ddp4-unet-uneven0.3", "user_diffusion_unet.py", "--res-sigma 0.3 --seed 7"),
    ("ddp4-unet-uneven0.5", "user_diffusion_unet.py", "--res-sigma 0.5 --seed 8"),
    ("ddp4-unet-skew1.7", "user_diffusion_unet.py", "--big-rank 1 --big 1.7 --seed 9"),
    ("ddp4-unet-skew1.7-fwd2x-r3", "user_diffusion_unet.py", "--big-rank 1 --big 1.7 --slow-rank 3 --factor 2 --seed 10"),
    ("ddp4-unet-uneven0.3-hog-r2", "user_diffusion_unet.py", "--res-sigma 0.3 --slow-rank 2 --hog --seed 11"),
]


USERS87B = [  # held out after users87: its host sleeps cost their ranks 3-8% of a step there; these 10% or more
    ("ddp4-asr-stepsleep300ms-r3", "user_conformer_ctc.py", "--slow-rank 3 --sleep-ms 300 --seed 21"),
    ("ddp4-asr-featsleep300ms-r1", "user_conformer_ctc.py", "--slow-rank 1 --feat-sleep-ms 300 --seed 22"),
    ("ddp4-asr-seqlognorm0.5-featsleep300ms-r2", "user_conformer_ctc.py",
     "--dur-sigma 0.5 --slow-rank 2 --feat-sleep-ms 300 --seed 23"),
    ("ddp4-ppo-stepsleep150ms-r3", "user_ppo_rl.py", "--slow-rank 3 --sleep-ms 150 --seed 24"),
    ("ddp4-ppo-envsleep200ms-r0", "user_ppo_rl.py", "--slow-rank 0 --env-sleep-ms 200 --seed 25"),
    ("ddp4-ppo-seqlognorm0.7-envsleep200ms-r2", "user_ppo_rl.py",
     "--episode-sigma 0.7 --slow-rank 2 --env-sleep-ms 200 --seed 26"),
    ("ddp4-unet-loadersleep100ms-r2", "user_diffusion_unet.py", "--slow-rank 2 --loader-sleep-ms 100 --seed 27"),
    ("dp4-ring-datasleep150ms-r3", "user_ring_allreduce.py", "--slow-rank 3 --data-sleep-ms 150 --seed 28"),
    ("dp4-ring-shapes-link0-1-x3", "user_ring_allreduce.py", "--slow-link 0 1 --extra 3 --shapes --seed 29"),
    ("dp4-ring-shapes-seqlognorm0.5", "user_ring_allreduce.py", "--shapes --seq-sigma 0.5 --seed 30"),
]


USERS88 = [  # held out in the eighty-eighth session: jobs helpers wrote blind to the detector, run once each
    # DDP under PowerSGD (one bucket: gloo's chained all-reduces leave no events) and the fp16 compression hook
    ("ddp4-psgd-healthy", "user_powersgd.py", "--seed 11"),
    ("ddp4-psgd-rank8-shapes-healthy", "user_powersgd.py", "--rank-r 8 --shapes --seed 12"),
    ("ddp4-psgd-fwd1.8x-r2", "user_powersgd.py", "--slow-rank 2 --factor 1.8 --seed 13"),
    ("ddp4-psgd-fwd2x-r0", "user_powersgd.py", "--slow-rank 0 --factor 2 --seed 14"),
    ("ddp4-psgd-stepsleep200ms-r1", "user_powersgd.py", "--slow-rank 1 --sleep-ms 200 --seed 15"),
    ("ddp4-psgd-datasleep180ms-r3", "user_powersgd.py", "--slow-rank 3 --data-sleep-ms 180 --seed 16"),
    ("ddp4-psgd-hog-r3", "user_powersgd.py", "--slow-rank 3 --hog --seed 17"),
    ("ddp4-psgd-seqlognorm0.4", "user_powersgd.py", "--res-sigma 0.4 --seed 18"),
    ("ddp4-psgd-skew1.5", "user_powersgd.py", "--big-rank 1 --big 1.5 --seed 19"),
    ("ddp4-fp16hook-healthy", "user_powersgd.py", "--hook fp16 --seed 20"),
    ("ddp4-fp16hook-stepsleep200ms-r2", "user_powersgd.py", "--hook fp16 --slow-rank 2 --sleep-ms 200 --seed 21"),
    ("ddp4-psgd-batched-fwd1.8x-r1", "user_powersgd.py", "--hook batched --slow-rank 1 --factor 1.8 --seed 22"),
    # a DCGAN: two DDP modules stepped in turn, SyncBatchNorm by hand, WGAN-GP's double backward
    ("ddp4-gan-healthy", "user_gan.py", "--seed 1"),
    ("ddp4-gan-syncbn-healthy", "user_gan.py", "--syncbn --seed 2"),
    ("ddp4-gan-gp-dsteps2-healthy", "user_gan.py", "--gp --d-steps 2 --seed 3"),
    ("ddp4-gan-fwd1.6x-r2", "user_gan.py", "--slow-rank 2 --factor 1.6 --seed 4"),
    ("ddp4-gan-syncbn-fwd2x-r0", "user_gan.py", "--syncbn --slow-rank 0 --factor 2 --seed 5"),
    ("ddp4-gan-stepsleep100ms-r1", "user_gan.py", "--slow-rank 1 --sleep-ms 100 --seed 6"),
    ("ddp4-gan-datasleep120ms-r3", "user_gan.py", "--slow-rank 3 --data-sleep-ms 120 --seed 7"),
    ("ddp4-gan-hog-r0", "user_gan.py", "--slow-rank 0 --hog --seed 8"),
    ("ddp4-gan-seqlognorm0.4", "user_gan.py", "--batch-sigma 0.4 --seed 9"),
    ("ddp4-gan-skew1.5", "user_gan.py", "--big-rank 1 --big 1.5 --seed 10"),
    ("ddp4-gan-gp-shapes-fwd1.7x-r3", "user_gan.py", "--gp --shapes --slow-rank 3 --factor 1.7 --seed 11"),
    ("ddp4-gan-shapes-dsteps2-datasleep80ms-r2", "user_gan.py",
     "--shapes --d-steps 2 --slow-rank 2 --data-sleep-ms 80 --seed 12"),
    # DeepSpeed-Ulysses sequence parallelism: all_to_all around attention, gradients by hand or DDP
    # (a busy thread there slowed every rank alike, its own no more: left out)
    ("sp4-healthy", "user_ulysses_sp.py", "--seed 101"),
    ("sp4-ddp-healthy", "user_ulysses_sp.py", "--ddp --seed 102"),
    ("sp4-fwd2x-r1", "user_ulysses_sp.py", "--slow-rank 1 --factor 2 --seed 103"),
    ("sp4-ddp-fwd2x-r2", "user_ulysses_sp.py", "--ddp --slow-rank 2 --factor 2 --seed 104"),
    ("sp4-stepsleep150ms-r0", "user_ulysses_sp.py", "--slow-rank 0 --sleep-ms 150 --seed 105"),
    ("sp4-shapes-stepsleep250ms-r2", "user_ulysses_sp.py", "--shapes --slow-rank 2 --sleep-ms 250 --seed 106"),
    ("sp4-seqlognorm0.5", "user_ulysses_sp.py", "--seq-sigma 0.5 --seed 108"),
    ("sp2dp2-healthy", "user_ulysses_sp.py", "--dp 2 --seed 109"),
    ("sp2dp2-skew", "user_ulysses_sp.py", "--dp 2 --skew-replica 1 --seed 110"),
    ("sp2dp2-fwd2x-r3", "user_ulysses_sp.py", "--dp 2 --slow-rank 3 --factor 2 --seed 111"),
    ("sp2dp2-stepsleep200ms-r0", "user_ulysses_sp.py", "--dp 2 --slow-rank 0 --sleep-ms 200 --seed 112"),
]
USERS88B = [  # held out after same_work's loop kinds by one factor (3c207a3): loops run more often by data, work repeated
    ("ddp4-lstm-skew1.6", "user_lstm_seq2seq.py", "--long-rank 3 --long 1.6 --seed 41"),
    ("ddp4-lstm-skew1.4", "user_lstm_seq2seq.py", "--long-rank 0 --long 1.4 --seed 42"),
    ("ddp4-lstm-len12-skew1.8", "user_lstm_seq2seq.py", "--len 12 --long-rank 1 --long 1.8 --seed 43"),
    ("ddp4-lstm-skew1.6-fwd2x-r1", "user_lstm_seq2seq.py", "--long-rank 3 --long 1.6 --slow-rank 1 --factor 2 --seed 44"),
    ("ddp4-lstm-fwd2x-r0", "user_lstm_seq2seq.py", "--slow-rank 0 --factor 2 --seed 45"),
    ("ddp4-ppo-skew1.6", "user_ppo_rl.py", "--long-rank 1 --long 1.6 --seed 46"),
    ("ddp4-ppo-fwd2x-r3", "user_ppo_rl.py", "--slow-rank 3 --factor 2 --seed 47"),
    ("ddp4-gnn-skew1.6", "user_gnn.py", "--skew-rank 2 --skew 1.6 --seed 48"),
    ("ddp4-psgd-fwd2x-r3", "user_powersgd.py", "--slow-rank 3 --factor 2 --seed 51"),
    ("ddp4-psgd-shapes-fwd3x-r1", "user_powersgd.py", "--shapes --slow-rank 1 --factor 3 --seed 52"),
    ("ddp4-fp16hook-fwd2x-r2", "user_powersgd.py", "--hook fp16 --slow-rank 2 --factor 2 --seed 53"),
    ("ddp4-psgd-skew2", "user_powersgd.py", "--big-rank 0 --big 2 --seed 54"),
    ("ddp4-gan-fwd2x-r1", "user_gan.py", "--slow-rank 1 --factor 2 --seed 55"),
    ("ddp4-gan-dsteps2-fwd3x-r3", "user_gan.py", "--d-steps 2 --slow-rank 3 --factor 3 --seed 56"),
    ("sp4-fwd3x-r3", "user_ulysses_sp.py", "--slow-rank 3 --factor 3 --seed 57"),
    ("ddp4-vae-fwd2x-r0", "user_vae_accum.py", "--slow-rank 0 --factor 2 --seed 58"),
]
USERS88C = [  # held out after b5b6d94 (a data loop's scale judged against the noise): faults on the replica of more data
    ("ddp4-lstm-skew1.6-fwd1.5x-r2", "user_lstm_seq2seq.py", "--long-rank 2 --long 1.6 --slow-rank 2 --factor 1.5 --seed 61"),
    ("ddp4-lstm-skew1.4-fwd2x-r0", "user_lstm_seq2seq.py", "--long-rank 0 --long 1.4 --slow-rank 0 --factor 2 --seed 62"),
    ("ddp4-lstm-skew1.6-stepsleep150ms-r1", "user_lstm_seq2seq.py", "--long-rank 1 --long 1.6 --slow-rank 1 --sleep-ms 150 --seed 63"),
    ("ddp4-lstm-len12-skew1.8-fwd2x-r3", "user_lstm_seq2seq.py", "--len 12 --long-rank 3 --long 1.8 --slow-rank 3 --factor 2 --seed 64"),
    ("ddp4-ppo-skew1.6-fwd2x-r1", "user_ppo_rl.py", "--long-rank 1 --long 1.6 --slow-rank 1 --factor 2 --seed 65"),
    ("ddp4-ppo-skew1.6-stepsleep200ms-r2", "user_ppo_rl.py", "--long-rank 2 --long 1.6 --slow-rank 2 --sleep-ms 200 --seed 66"),
    ("ddp4-lstm-skew2", "user_lstm_seq2seq.py", "--long-rank 2 --long 2 --seed 67"),
    ("ddp4-ppo-skew1.8", "user_ppo_rl.py", "--long-rank 3 --long 1.8 --seed 68"),
]
USERS89 = [  # held out in the eighty-ninth session (at dc325bd): BERT-style MLM under DDP's Join with a token budget, and Local SGD / DiLoCo
    ("ddp4-mlm-healthy", "user_join_mlm.py", "--seed 0"),
    ("ddp4-mlm-w192-shapes-healthy", "user_join_mlm.py", "--seed 21 --width 192 --tokens 1024 --shapes --steps 8"),
    ("ddp4-mlm-postln-accum4-healthy", "user_join_mlm.py", "--seed 22 --tokens 1024 --accum 4 --post-ln --steps 7"),
    ("ddp4-mlm-uneven", "user_join_mlm.py", "--seed 1 --uneven"),
    ("ddp4-mlm-skew1.5", "user_join_mlm.py", "--seed 6 --big-rank 1 --big 1.5"),
    ("ddp4-mlm-accum3-skew2", "user_join_mlm.py", "--seed 23 --tokens 1024 --accum 3 --big-rank 3 --big 2"),
    ("ddp4-mlm-seqlognorm1.2", "user_join_mlm.py", "--seed 7 --doc-sigma 1.2 --shapes --steps 8"),
    ("ddp4-mlm-fwd2x-r2", "user_join_mlm.py", "--seed 8 --slow-rank 2 --factor 2"),
    ("ddp4-mlm-w192-fwd1.7x-r0", "user_join_mlm.py", "--seed 24 --width 192 --tokens 1024 --slow-rank 0 --factor 1.7"),
    ("ddp4-mlm-uneven-fwd1.8x-r3", "user_join_mlm.py", "--seed 13 --uneven --slow-rank 3 --factor 1.8"),
    ("ddp4-mlm-sleep-r2", "user_join_mlm.py", "--seed 3 --slow-rank 2 --sleep-ms 150"),
    ("ddp4-mlm-accum3-datasleep-r1", "user_join_mlm.py", "--seed 25 --accum 3 --slow-rank 1 --data-sleep-ms 80"),
    ("ddp4-mlm-hog-r0", "user_join_mlm.py", "--seed 5 --slow-rank 0 --hog"),
    ("ddp4-mlm-l3-hog-r3", "user_join_mlm.py", "--seed 27 --layers 3 --tokens 1024 --slow-rank 3 --hog"),
    # Local SGD / DiLoCo: --inner-steps H local AdamW steps without communication, then an all-reduce of the pseudo-gradient
    ("ddp4-lsgd-h2-healthy", "user_localsgd.py", "--seed 0"),
    ("ddp4-lsgd-w192-h3-flat-healthy", "user_localsgd.py", "--width 192 --seq 64 --inner-steps 3 --steps 12 --flat --seed 2"),
    ("ddp4-lsgd-avg-h1-shapes-healthy", "user_localsgd.py", "--inner-steps 1 --outer-lr 1 --no-nesterov --shapes --seed 9"),
    ("ddp4-lsgd-seqlognorm0.5", "user_localsgd.py", "--seq-sigma 0.5 --seed 1"),
    ("ddp4-lsgd-w160-flat-seqlognorm0.4", "user_localsgd.py", "--seq-sigma 0.4 --width 160 --flat --seed 12"),
    ("ddp4-lsgd-skew1.5", "user_localsgd.py", "--big-rank 2 --big 1.5 --seed 13"),
    ("ddp4-lsgd-flat-fwd2x-r1", "user_localsgd.py", "--slow-rank 1 --factor 2 --flat --seed 3"),
    ("ddp4-lsgd-w192-h3-fwd2x-r2", "user_localsgd.py", "--slow-rank 2 --factor 2 --width 192 --seq 64 --inner-steps 3 --steps 12 --seed 14"),
    ("ddp4-lsgd-h1-shapes-fwd2.2x-r0", "user_localsgd.py", "--slow-rank 0 --factor 2.2 --inner-steps 1 --shapes --seed 15"),
    ("ddp4-lsgd-flat-sleep100-r2", "user_localsgd.py", "--slow-rank 2 --sleep-ms 100 --flat --seed 6"),
    ("ddp4-lsgd-w160-sleep130-r1", "user_localsgd.py", "--slow-rank 1 --sleep-ms 130 --width 160 --seed 21"),
    ("ddp4-lsgd-h3-datasleep100-r3", "user_localsgd.py", "--slow-rank 3 --data-sleep-ms 100 --inner-steps 3 --steps 12 --seed 7"),
    ("ddp4-lsgd-hog-r1", "user_localsgd.py", "--slow-rank 1 --hog --seed 11"),
    ("ddp4-lsgd-w160-h4-flat-hog-r3", "user_localsgd.py", "--slow-rank 3 --hog --width 160 --inner-steps 4 --steps 12 --flat --seed 16"),
]
USERS89B = [  # held out in the eighty-ninth session (at 2385872): image classification behind a real DataLoader (workers, a slow decoder on one rank)
    ("ddp4-ldr-shapes-healthy", "user_loader_resnet.py", "--shapes --seed 1"),
    ("ddp4-ldr-w0-amp-healthy", "user_loader_resnet.py", "--workers 0 --amp --seed 2"),
    ("ddp4-ldr-w2-cl-w24-accum2-healthy", "user_loader_resnet.py", "--workers 2 --channels-last --width 24 --accum 2 --label-smoothing 0.1 --seed 3"),
    ("ddp4-ldr-fwd2x-r2", "user_loader_resnet.py", "--slow-rank 2 --factor 2 --seed 4"),
    ("ddp4-ldr-w0-cl-fwd1.6x-r3", "user_loader_resnet.py", "--workers 0 --channels-last --slow-rank 3 --factor 1.6 --seed 6"),
    ("ddp4-ldr-w2-stepsleep80ms-r1", "user_loader_resnet.py", "--workers 2 --slow-rank 1 --sleep-ms 80 --seed 7"),
    ("ddp4-ldr-accum2-stepsleep150ms-r0", "user_loader_resnet.py", "--accum 2 --slow-rank 0 --sleep-ms 150 --seed 8"),
    ("ddp4-ldr-amp-shapes-hog-r3", "user_loader_resnet.py", "--amp --shapes --slow-rank 3 --hog --seed 9"),
    ("ddp4-ldr-w0-decodesleep2ms-r0", "user_loader_resnet.py", "--workers 0 --slow-rank 0 --decode-sleep-ms 2 --seed 10"),
    ("ddp4-ldr-w1-decodesleep20ms-r2", "user_loader_resnet.py", "--slow-rank 2 --decode-sleep-ms 20 --seed 11"),
    ("ddp4-ldr-w2-decodesleep40ms-r3", "user_loader_resnet.py", "--workers 2 --slow-rank 3 --decode-sleep-ms 40 --seed 12"),
    ("ddp4-ldr-skew1.5", "user_loader_resnet.py", "--big-rank 1 --big 1.5 --seed 13"),
    ("ddp4-ldr-w2-w24-skew1.25", "user_loader_resnet.py", "--workers 2 --width 24 --big-rank 3 --big 1.25 --seed 14"),
    ("ddp4-ldr-w0-seqlognorm0.4", "user_loader_resnet.py", "--workers 0 --res-sigma 0.4 --seed 15"),
]
USERS90 = [  # held out in the ninetieth session (at 8ee3172): data parallelism and Adam written by hand, gradients all-reduced from post-accumulate hooks, no DDP, no torch.optim
    ("ddp4-msgd-healthy", "user_manual_sgd.py", "--seed 0"),
    ("ddp4-msgd-bucket-healthy", "user_manual_sgd.py", "--bucket --seed 1"),
    ("ddp4-msgd-sgd-c96-l8-shapes-healthy", "user_manual_sgd.py", "--opt sgd --channels 96 --layers 8 --shapes --seed 2"),
    ("ddp4-msgd-fwd2x-r2", "user_manual_sgd.py", "--slow-rank 2 --factor 2 --seed 3"),
    ("ddp4-msgd-bucket-fwd1.6x-r0", "user_manual_sgd.py", "--bucket --slow-rank 0 --factor 1.6 --seed 4"),
    ("ddp4-msgd-sgd-fwd3x-r1", "user_manual_sgd.py", "--opt sgd --slow-rank 1 --factor 3 --seed 5"),
    ("ddp4-msgd-stepsleep150ms-r3", "user_manual_sgd.py", "--slow-rank 3 --sleep-ms 150 --seed 6"),
    ("ddp4-msgd-clipsleep150ms-r0", "user_manual_sgd.py", "--slow-rank 0 --clip-sleep-ms 150 --seed 7"),
    ("ddp4-msgd-bucket-clipsleep300ms-r1", "user_manual_sgd.py", "--bucket --slow-rank 1 --clip-sleep-ms 300 --seed 8"),
    ("ddp4-msgd-gradnoise30x-r2", "user_manual_sgd.py", "--slow-rank 2 --grad-noise 30 --seed 9"),
    ("ddp4-msgd-hog-r3", "user_manual_sgd.py", "--slow-rank 3 --hog --seed 10"),
    ("ddp4-msgd-skew1.5", "user_manual_sgd.py", "--big-rank 1 --big 1.5 --seed 11"),
    ("ddp4-msgd-bucket-skew2", "user_manual_sgd.py", "--bucket --big-rank 3 --big 2 --seed 12"),
    ("ddp4-msgd-seqlognorm0.6", "user_manual_sgd.py", "--seq-sigma 0.6 --seed 13"),
]
USERS90B = [  # held out in the ninetieth session: a synchronous parameter server over torch.distributed.rpc (rank 0 the server, 1-3 trainers; a sleep before a trainer's push is its host's)
    ("ps4-healthy", "user_param_server.py", "--transport uv --seed 0"),
    ("ps4-tpdefault-healthy", "user_param_server.py", "--seed 1"),
    ("ps4-pull-w512-healthy", "user_param_server.py", "--transport uv --pull --width 512 --seed 2"),
    ("ps4-handler-shapes-healthy", "user_param_server.py", "--transport uv --update-in-handler --shapes --seed 3"),
    ("ps4-fwd2x-r2", "user_param_server.py", "--transport uv --slow-rank 2 --factor 2 --seed 4"),
    ("ps4-fwd3x-r1", "user_param_server.py", "--transport uv --slow-rank 1 --factor 3 --seed 5"),
    ("ps4-tpdefault-fwd2x-r3", "user_param_server.py", "--slow-rank 3 --factor 2 --seed 14"),
    ("ps4-optim4x-r0", "user_param_server.py", "--transport uv --slow-rank 0 --factor 4 --seed 6"),
    ("ps4-pssleep60ms-r0", "user_param_server.py", "--transport uv --ps-slow-ms 60 --seed 7"),
    ("ps4-stepsleep40ms-r3", "user_param_server.py", "--transport uv --slow-rank 3 --sleep-ms 40 --seed 8"),
    ("ps4-datasleep40ms-r1", "user_param_server.py", "--transport uv --slow-rank 1 --data-sleep-ms 40 --seed 9"),
    ("ps4-sendsleep60ms-r2", "user_param_server.py", "--transport uv --slow-rank 2 --send-delay-ms 60 --seed 10"),
    ("ps4-hog-r2", "user_param_server.py", "--transport uv --slow-rank 2 --hog --seed 11"),
    ("ps4-skew1.5", "user_param_server.py", "--transport uv --big-rank 3 --big 1.5 --seed 12"),
    ("ps4-seqlognorm0.5", "user_param_server.py", "--transport uv --seq-sigma 0.5 --seed 13"),
]
USERS90C = [  # held out in the ninetieth session: a data-service rank (0) building and augmenting batches and isend-ing them to three DDP trainers on a subgroup
    ("svc4-healthy", "user_data_service.py", "--seed 0"),
    ("svc4-w24-healthy", "user_data_service.py", "--width 24 --seed 1"),
    ("svc4-blocks2-shapes-healthy", "user_data_service.py", "--blocks 2 --shapes --seed 2"),
    ("svc4-fwd2x-r2", "user_data_service.py", "--slow-rank 2 --factor 2 --seed 3"),
    ("svc4-fwd3x-r1", "user_data_service.py", "--slow-rank 1 --factor 3 --seed 4"),
    ("svc4-stepsleep100ms-r2", "user_data_service.py", "--slow-rank 2 --sleep-ms 100 --seed 5"),
    ("svc4-svcsleep50ms-r0", "user_data_service.py", "--slow-rank 0 --sleep-ms 50 --seed 6"),
    ("svc4-svcsleep75ms-r0", "user_data_service.py", "--slow-rank 0 --sleep-ms 75 --seed 7"),
    ("svc4-augment6x-r0", "user_data_service.py", "--slow-rank 0 --factor 6 --seed 8"),
    ("svc4-hog-r3", "user_data_service.py", "--slow-rank 3 --hog --seed 9"),
    ("svc4-skew1.5", "user_data_service.py", "--big-rank 2 --big 1.5 --seed 10"),
    ("svc4-skew2", "user_data_service.py", "--big-rank 1 --big 2 --seed 11"),
    ("svc4-seqlognorm0.6", "user_data_service.py", "--seq-sigma 0.6 --seed 12"),
]
USERS91 = [  # held out in the ninety-first session: a megatron-core MoE GPT (8 experts, top-2, alltoall dispatcher) with expert parallelism, trained by a hand-written loop
    ("moe4-healthy", "user_mcore_moe.py", "--seed 0"),
    ("moe4-h192-healthy", "user_mcore_moe.py", "--hidden 192 --seed 1"),
    ("moe4-allgather-shapes-healthy", "user_mcore_moe.py", "--dispatcher allgather --shapes --seed 2"),
    ("moe4-ep2-overlap-healthy", "user_mcore_moe.py", "--ep 2 --overlap-grad-reduce --seed 3"),
    ("moe4-l3-healthy", "user_mcore_moe.py", "--layers 3 --seed 14"),
    ("moe4-fwd3x-r2", "user_mcore_moe.py", "--slow-rank 2 --factor 3 --seed 4"),
    ("moe4-fwd4x-r1", "user_mcore_moe.py", "--slow-rank 1 --factor 4 --seed 5"),
    ("moe4-expert4x-r3", "user_mcore_moe.py", "--slow-rank 3 --expert-factor 4 --seed 6"),
    ("moe4-ep2-fwd3x-r0", "user_mcore_moe.py", "--ep 2 --slow-rank 0 --factor 3 --seed 7"),
    ("moe4-stepsleep100ms-r1", "user_mcore_moe.py", "--slow-rank 1 --sleep-ms 100 --seed 8"),
    ("moe4-shapes-stepsleep80ms-r3", "user_mcore_moe.py", "--shapes --slow-rank 3 --sleep-ms 80 --seed 9"),
    ("moe4-hog-r0", "user_mcore_moe.py", "--slow-rank 0 --hog --seed 10"),
    ("moe4-hot-skew0.6", "user_mcore_moe.py", "--hot-expert 4 --hot 0.6 --seed 11"),
    ("moe4-ep2-hot-skew0.5", "user_mcore_moe.py", "--ep 2 --hot-expert 1 --hot 0.5 --seed 15"),
    ("moe4-skew2", "user_mcore_moe.py", "--big-rank 2 --big 2 --seed 12"),
    ("moe4-seqlognorm0.6", "user_mcore_moe.py", "--seq-sigma 0.6 --seed 13"),
]
USERS92 = [  # held out in the ninety-second session: decentralized (gossip) SGD, D-PSGD style: each rank averages its parameters with its graph neighbours by isend/irecv, no collective
    ("gsp4-healthy", "user_gossip_sgd.py", "--seed 0"),
    ("gsp4-exp-healthy", "user_gossip_sgd.py", "--topology exp --seed 1"),
    ("gsp4-pair-shapes-healthy", "user_gossip_sgd.py", "--topology pair --shapes --seed 2"),
    ("gsp4-overlap-w192-healthy", "user_gossip_sgd.py", "--overlap --width 192 --seed 3"),
    ("gsp4-eval2-l3-healthy", "user_gossip_sgd.py", "--eval-every 2 --layers 3 --seed 4"),
    ("gsp4-fwd2x-r2", "user_gossip_sgd.py", "--slow-rank 2 --factor 2 --seed 5"),
    ("gsp4-exp-fwd1.6x-r1", "user_gossip_sgd.py", "--topology exp --slow-rank 1 --factor 1.6 --seed 6"),
    ("gsp4-overlap-fwd2x-r3", "user_gossip_sgd.py", "--overlap --slow-rank 3 --factor 2 --seed 7"),
    ("gsp4-stepsleep50ms-r1", "user_gossip_sgd.py", "--slow-rank 1 --sleep-ms 50 --seed 8"),
    ("gsp4-pair-datasleep50ms-r0", "user_gossip_sgd.py", "--topology pair --slow-rank 0 --data-sleep-ms 50 --seed 9"),
    ("gsp4-hog-r3", "user_gossip_sgd.py", "--slow-rank 3 --hog --seed 10"),
    ("gsp4-shapes-link1-2-x8", "user_gossip_sgd.py", "--shapes --slow-link 1 2 --extra 8 --seed 11"),
    ("gsp4-link3-0-x8", "user_gossip_sgd.py", "--slow-link 3 0 --extra 8 --seed 12"),
    ("gsp4-seqlognorm0.6", "user_gossip_sgd.py", "--seq-sigma 0.6 --seed 13"),
    ("gsp4-skew2", "user_gossip_sgd.py", "--big-rank 2 --big 2 --seed 14"),
    ("gsp4-uneven", "user_gossip_sgd.py", "--uneven --seed 15"),
]

USERS92B = [  # held out in the ninety-second session: online knowledge distillation, teachers on ranks 0-1 send each batch and its logits to students 2-3 (DDP over a subgroup)
    ("kd4-healthy", "user_distill.py", "--seed 0"),
    ("kd4-prefetch-healthy", "user_distill.py", "--prefetch --seed 1"),
    ("kd4-tw384-shapes-healthy", "user_distill.py", "--teacher-width 384 --shapes --seed 2"),
    ("kd4-sl3-healthy", "user_distill.py", "--student-layers 3 --seed 3"),
    ("kd4-teacher2x-r0", "user_distill.py", "--slow-rank 0 --teacher-factor 2 --seed 4"),
    ("kd4-fwd2x-r3", "user_distill.py", "--slow-rank 3 --factor 2 --seed 5"),
    ("kd4-prefetch-fwd1.6x-r1", "user_distill.py", "--prefetch --slow-rank 1 --factor 1.6 --seed 6"),
    ("kd4-stepsleep40ms-r2", "user_distill.py", "--slow-rank 2 --sleep-ms 40 --seed 7"),
    ("kd4-stepsleep40ms-r1", "user_distill.py", "--slow-rank 1 --sleep-ms 40 --seed 8"),
    ("kd4-shapes-fwd1.5x-r2", "user_distill.py", "--shapes --slow-rank 2 --factor 1.5 --seed 9"),
    ("kd4-hog-r3", "user_distill.py", "--slow-rank 3 --hog --seed 10"),
    ("kd4-shapes-link0-2-x8", "user_distill.py", "--shapes --slow-link 0 2 --extra 8 --seed 11"),
    ("kd4-link1-3-x8", "user_distill.py", "--slow-link 1 3 --extra 8 --seed 12"),
    ("kd4-seqlognorm0.6", "user_distill.py", "--seq-sigma 0.6 --seed 13"),
    ("kd4-skew2", "user_distill.py", "--big-rank 1 --big 2 --seed 14"),
    ("kd4-prefetch-seqlognorm0.8", "user_distill.py", "--prefetch --seq-sigma 0.8 --seed 15"),
]

USERS92C = [  # held out in the ninety-second session: Horovod-style data parallelism, gradients fused and all-reduced by a background communication thread
    ("hvd4-healthy", "user_hvd_fusion.py", "--seed 0"),
    ("hvd4-fusion0-healthy", "user_hvd_fusion.py", "--fusion-mb 0 --seed 1"),
    ("hvd4-fusion1-shapes-healthy", "user_hvd_fusion.py", "--fusion-mb 1 --shapes --seed 2"),
    ("hvd4-d192-l3-healthy", "user_hvd_fusion.py", "--d-model 192 --layers 3 --seed 3"),
    ("hvd4-cycle10-healthy", "user_hvd_fusion.py", "--cycle-ms 10 --seed 4"),
    ("hvd4-fwd2x-r1", "user_hvd_fusion.py", "--slow-rank 1 --factor 2 --seed 5"),
    ("hvd4-fusion1-fwd1.6x-r3", "user_hvd_fusion.py", "--fusion-mb 1 --slow-rank 3 --factor 1.6 --seed 6"),
    ("hvd4-stepsleep40ms-r2", "user_hvd_fusion.py", "--slow-rank 2 --sleep-ms 40 --seed 7"),
    ("hvd4-shapes-stepsleep30ms-r0", "user_hvd_fusion.py", "--shapes --slow-rank 0 --sleep-ms 30 --seed 8"),
    ("hvd4-commsleep20ms-r3", "user_hvd_fusion.py", "--slow-rank 3 --comm-sleep-ms 20 --seed 9"),
    ("hvd4-fusion1-commsleep10ms-r1", "user_hvd_fusion.py", "--fusion-mb 1 --slow-rank 1 --comm-sleep-ms 10 --seed 10"),
    ("hvd4-hog-r0", "user_hvd_fusion.py", "--slow-rank 0 --hog --seed 11"),
    ("hvd4-seqlognorm0.6", "user_hvd_fusion.py", "--seq-sigma 0.6 --seed 12"),
    ("hvd4-skew2", "user_hvd_fusion.py", "--big-rank 1 --big 2 --seed 13"),
    ("hvd4-fwd1.5x-r0", "user_hvd_fusion.py", "--slow-rank 0 --factor 1.5 --seed 14"),
    ("hvd4-d192-seqlognorm0.8", "user_hvd_fusion.py", "--d-model 192 --seq-sigma 0.8 --seed 15"),
]

USERS93 = [  # held out in the ninety-third session: word2vec-style skip-gram with sparse embedding gradients under DDP (gloo's sparse all-reduce)
    ("emb4-healthy", "user_sparse_embed.py", "--seed 0"),
    ("emb4-d128-healthy", "user_sparse_embed.py", "--dim 128 --seed 1"),
    ("emb4-bucket0.05-shapes-healthy", "user_sparse_embed.py", "--bucket-mb 0.05 --shapes --seed 2"),
    ("emb4-commhook-healthy", "user_sparse_embed.py", "--comm-hook --seed 3"),
    ("emb4-fwd3x-r1", "user_sparse_embed.py", "--slow-rank 1 --factor 3 --seed 4"),
    ("emb4-shapes-fwd2x-r2", "user_sparse_embed.py", "--shapes --slow-rank 2 --factor 2 --seed 5"),
    ("emb4-stepsleep50ms-r3", "user_sparse_embed.py", "--slow-rank 3 --sleep-ms 50 --seed 6"),
    ("emb4-stepsleep35ms-r0", "user_sparse_embed.py", "--slow-rank 0 --sleep-ms 35 --seed 7"),
    ("emb4-commsleep30ms-r2", "user_sparse_embed.py", "--slow-allreduce-rank 2 --comm-sleep-ms 30 --seed 8"),
    ("emb4-commsleep15ms-r1", "user_sparse_embed.py", "--slow-allreduce-rank 1 --comm-sleep-ms 15 --seed 9"),
    ("emb4-hog-r0", "user_sparse_embed.py", "--slow-rank 0 --hog --seed 10"),
    ("emb4-seqlognorm0.6", "user_sparse_embed.py", "--seq-sigma 0.6 --seed 11"),
    ("emb4-skew4", "user_sparse_embed.py", "--big-rank 1 --big 4 --seed 12"),
    ("emb4-skewhot8", "user_sparse_embed.py", "--hot-rank 2 --hot-ids 8 --seed 13"),
    ("emb4-fwd1.6x-r3", "user_sparse_embed.py", "--slow-rank 3 --factor 1.6 --seed 14"),
    ("emb4-rows200k-seqlognorm0.8", "user_sparse_embed.py", "--rows 200000 --seq-sigma 0.8 --seed 15"),
]

USERS93B = [  # held out in the ninety-third session: a classifier fine-tune interleaving training with distributed evaluation, metrics through object collectives, rank 0 checkpointing
    ("ev4-healthy", "user_eval_loop.py", "--seed 0"),
    ("ev4-nockpt-healthy", "user_eval_loop.py", "--no-checkpoint --seed 1"),
    ("ev4-every2-shapes-healthy", "user_eval_loop.py", "--eval-every 2 --shapes --seed 2"),
    ("ev4-w192-l3-healthy", "user_eval_loop.py", "--width 192 --layers 3 --seed 3"),
    ("ev4-w256-fwd2x-r1", "user_eval_loop.py", "--width 256 --slow-rank 1 --factor 2 --seed 4"),
    ("ev4-w256-fwd2.5x-r0", "user_eval_loop.py", "--width 256 --slow-rank 0 --factor 2.5 --seed 5"),
    ("ev4-stepsleep50ms-r2", "user_eval_loop.py", "--slow-rank 2 --sleep-ms 50 --seed 6"),
    ("ev4-stepsleep100ms-r0", "user_eval_loop.py", "--slow-rank 0 --sleep-ms 100 --seed 7"),
    ("ev4-iosleep50ms-r3", "user_eval_loop.py", "--slow-io-rank 3 --io-sleep-ms 50 --seed 8"),
    ("ev4-shapes-iosleep80ms-r1", "user_eval_loop.py", "--shapes --slow-io-rank 1 --io-sleep-ms 80 --seed 9"),
    ("ev4-hog-r2", "user_eval_loop.py", "--slow-rank 2 --hog --seed 10"),
    ("ev4-seqlognorm0.6", "user_eval_loop.py", "--seq-sigma 0.6 --seed 11"),
    ("ev4-skew2", "user_eval_loop.py", "--big-rank 0 --big 2 --seed 12"),
    ("ev4-skeweval4", "user_eval_loop.py", "--eval-skew-rank 1 --eval-skew 4 --seed 13"),
    ("ev4-l3-seqlognorm0.8", "user_eval_loop.py", "--layers 3 --seq-sigma 0.8 --seed 14"),
    ("ev4-w256-hog-r3", "user_eval_loop.py", "--width 256 --slow-rank 3 --hog --seed 15"),
]

USERS94 = [  # held out in the ninety-fourth session: a masked-LM encoder trained with LayerDrop under DDP (find_unused_parameters), each rank skipping its own blocks each step
    ("ld4-healthy", "user_layerdrop.py", "--seed 0"),
    ("ld4-drop0-healthy", "user_layerdrop.py", "--drop-rate 0 --seed 1"),
    ("ld4-l8-w96-bucket1-shapes-healthy", "user_layerdrop.py", "--layers 8 --width 96 --bucket-cap-mb 1 --gradient-as-bucket-view --shapes --seed 2"),
    ("ld4-drop0.5-healthy", "user_layerdrop.py", "--drop-rate 0.5 --seed 3"),
    ("ld4-fwd2x-r1", "user_layerdrop.py", "--slow-rank 1 --factor 2 --seed 4"),
    ("ld4-shapes-fwd3x-r2", "user_layerdrop.py", "--shapes --slow-rank 2 --factor 3 --seed 5"),
    ("ld4-fwd1.6x-r3", "user_layerdrop.py", "--slow-rank 3 --factor 1.6 --seed 6"),
    ("ld4-stepsleep80ms-r0", "user_layerdrop.py", "--slow-rank 0 --sleep-ms 80 --seed 7"),
    ("ld4-stepsleep120ms-r2", "user_layerdrop.py", "--slow-rank 2 --sleep-ms 120 --seed 8"),
    ("ld4-hog-r1", "user_layerdrop.py", "--slow-rank 1 --hog --seed 9"),
    ("ld4-seqlognorm0.6", "user_layerdrop.py", "--seq-sigma 0.6 --seed 10"),
    ("ld4-skew2", "user_layerdrop.py", "--big-rank 3 --big 2 --seed 11"),
    ("ld4-skew-nodrop2", "user_layerdrop.py", "--nodrop-rank 2 --seed 12"),
    ("ld4-drop0.5-skew-nodrop0", "user_layerdrop.py", "--drop-rate 0.5 --nodrop-rank 0 --seed 13"),
    ("ld4-l8-seqlognorm0.8", "user_layerdrop.py", "--layers 8 --seq-sigma 0.8 --seed 14"),
    ("ld4-drop0-fwd2x-r0", "user_layerdrop.py", "--drop-rate 0 --slow-rank 0 --factor 2 --seed 15"),
]

USERS94B = [  # held out in the ninety-fourth session: a llama-style decoder under HSDP (FSDP2 fully_shard on a 2x2 replicate x shard mesh), parameters all-gathered within each shard pair, gradients reduced there and all-reduced across the replicas
    ("hsdp4-healthy", "user_hsdp.py", "--seed 0"),
    ("hsdp4-noreshard-healthy", "user_hsdp.py", "--no-reshard --seed 1"),
    ("hsdp4-mesh1x4-shapes-healthy", "user_hsdp.py", "--mesh 1x4 --shapes --seed 2"),
    ("hsdp4-learned-l6-healthy", "user_hsdp.py", "--pos learned --layers 6 --seed 3"),
    ("hsdp4-b8-fwd3x-r1", "user_hsdp.py", "--batch 8 --slow-rank 1 --factor 3 --seed 4"),
    ("hsdp4-b8-shapes-fwd2x-r2", "user_hsdp.py", "--batch 8 --shapes --slow-rank 2 --factor 2 --seed 5"),
    ("hsdp4-stepsleep100ms-r3", "user_hsdp.py", "--slow-rank 3 --sleep-ms 100 --seed 6"),
    ("hsdp4-stepsleep150ms-r0", "user_hsdp.py", "--slow-rank 0 --sleep-ms 150 --seed 7"),
    ("hsdp4-prefetchsleep50ms-r1", "user_hsdp.py", "--slow-rank 1 --prefetch-sleep-ms 50 --seed 8"),
    ("hsdp4-prefetchsleep30ms-r2", "user_hsdp.py", "--slow-rank 2 --prefetch-sleep-ms 30 --seed 9"),
    ("hsdp4-hog-r3", "user_hsdp.py", "--slow-rank 3 --hog --seed 10"),
    ("hsdp4-seqlognorm0.6", "user_hsdp.py", "--seq-sigma 0.6 --seed 11"),
    ("hsdp4-skew3", "user_hsdp.py", "--big-rank 1 --big 3 --seed 12"),
    ("hsdp4-skewreplica2", "user_hsdp.py", "--big-replica 1 --big 2 --seed 13"),
    ("hsdp4-noreshard-seqlognorm0.8", "user_hsdp.py", "--no-reshard --seq-sigma 0.8 --seed 14"),
    ("hsdp4-b8-fwd2.5x-r0", "user_hsdp.py", "--batch 8 --slow-rank 0 --factor 2.5 --seed 15"),
]

USERS95 = [  # held out in the ninety-fifth session: serving a decoder with hand-written Megatron-style TP and a KV cache (prefill, then one-token decode steps, 2 all-reduces a layer each), replicas meeting once a request batch
    ("tp2dp2-gen-healthy", "user_tp_generate.py", "--seed 101"),
    ("tp2dp2-gen-greedy-healthy", "user_tp_generate.py", "--seed 102 --temperature 0 --shapes"),
    ("tp2dp2-gen-deep-healthy", "user_tp_generate.py", "--seed 103 --layers 3 --dim 256 --heads 4"),
    ("tp2dp2-gen-long-healthy", "user_tp_generate.py", "--seed 104 --batch 4 --new-tokens 24"),
    ("tp4-gen-healthy", "user_tp_generate.py", "--seed 105 --tp 4"),
    ("tp2dp2-gen-fwd6x-r2", "user_tp_generate.py", "--seed 106 --slow-rank 2 --factor 6"),
    ("tp2dp2-gen-fwd8x-r1", "user_tp_generate.py", "--seed 107 --slow-rank 1 --factor 8"),
    ("tp2dp2-gen-fwd8x-r3", "user_tp_generate.py", "--seed 108 --slow-rank 3 --factor 8"),
    ("tp2dp2-gen-stepsleep100ms-r3", "user_tp_generate.py", "--seed 109 --slow-rank 3 --sleep-ms 100"),
    ("tp2dp2-gen-tokensleep10ms-r0", "user_tp_generate.py", "--seed 110 --slow-rank 0 --token-sleep-ms 10"),
    ("tp2dp2-gen-hog-r2", "user_tp_generate.py", "--seed 111 --slow-rank 2 --hog"),
    ("tp4-gen-tokensleep10ms-r1", "user_tp_generate.py", "--seed 112 --tp 4 --slow-rank 1 --token-sleep-ms 10"),
    ("tp4-gen-stepsleep100ms-r2", "user_tp_generate.py", "--seed 113 --tp 4 --slow-rank 2 --sleep-ms 100"),
    ("tp2dp2-gen-seqlognorm0.6", "user_tp_generate.py", "--seed 114 --seq-sigma 0.6"),
    ("tp2dp2-gen-gen-seqlognorm0.6", "user_tp_generate.py", "--seed 115 --gen-sigma 0.6"),
    ("tp2dp2-gen-skew2", "user_tp_generate.py", "--seed 116 --big-replica 1 --big 2"),
]

USERS95B = [  # held out in the ninety-fifth session: megatron-core GPT with mcore's DDP and distributed optimizer (ZeRO-1: gradients reduce-scattered, parameters all-gathered), DP4 or TP2 x DP2, get_forward_backward_func over microbatches
    ("dopt4-healthy", "user_mcore_distopt.py", "--seed 501 --shapes"),
    ("dopt4-tp2-healthy", "user_mcore_distopt.py", "--seed 502 --tp 2"),
    ("dopt4-ovl-healthy", "user_mcore_distopt.py", "--seed 503 --overlap-grad-reduce --overlap-param-gather --bucket-size 200000"),
    ("dopt4-l3h192-noclip-healthy", "user_mcore_distopt.py", "--seed 504 --layers 3 --hidden 192 --clip-grad 0"),
    ("dopt4-tp2-mb3-healthy", "user_mcore_distopt.py", "--seed 505 --tp 2 --micro-batches 3"),
    ("dopt4-tp2-fwd5x-r2", "user_mcore_distopt.py", "--seed 511 --tp 2 --slow-rank 2 --factor 5"),
    ("dopt4-ovl-fwd6x-r0", "user_mcore_distopt.py", "--seed 512 --overlap-grad-reduce --overlap-param-gather --bucket-size 200000 --slow-rank 0 --factor 6"),
    ("dopt4-stepsleep200ms-r3", "user_mcore_distopt.py", "--seed 513 --slow-rank 3 --sleep-ms 200"),
    ("dopt4-ovl-stepsleep150ms-r1", "user_mcore_distopt.py", "--seed 514 --overlap-grad-reduce --overlap-param-gather --bucket-size 200000 --slow-rank 1 --sleep-ms 150"),
    ("dopt4-tp2-mb3-datasleep60ms-r1", "user_mcore_distopt.py", "--seed 515 --tp 2 --micro-batches 3 --slow-rank 1 --data-sleep-ms 60"),
    ("dopt4-tp2-mb3-datasleep40ms-r2", "user_mcore_distopt.py", "--seed 516 --tp 2 --micro-batches 3 --slow-rank 2 --data-sleep-ms 40"),
    ("dopt4-hog-r3", "user_mcore_distopt.py", "--seed 517 --slow-rank 3 --hog"),
    ("dopt4-seqlognorm0.5", "user_mcore_distopt.py", "--seed 521 --seq-sigma 0.5"),
    ("dopt4-tp2-seqlognorm0.8", "user_mcore_distopt.py", "--seed 522 --tp 2 --seq-sigma 0.8"),
    ("dopt4-skew2", "user_mcore_distopt.py", "--seed 523 --big-rank 1 --big 2"),
    ("dopt4-tp2-mb3-skew2", "user_mcore_distopt.py", "--seed 524 --tp 2 --micro-batches 3 --big-rank 2 --big 2"),
]

USERS96 = [  # held out in the ninety-sixth session: gradient-boosted trees by hand in torch (XGBoost "hist" / rabit style), per-level histograms all-reduced, no neural network
    ("gbt4-default-healthy", "user_gbdt_hist.py", "--seed 101"),
    ("gbt4-d5-bins256-healthy", "user_gbdt_hist.py", "--depth 5 --bins 256 --seed 102"),
    ("gbt4-binary-colsample05-healthy", "user_gbdt_hist.py", "--objective binary --colsample 0.5 --seed 103"),
    ("gbt4-f48-rows20k-shapes-healthy", "user_gbdt_hist.py", "--features 48 --rows 20000 --shapes --seed 104"),
    ("gbt4-nosubtract-d4-healthy", "user_gbdt_hist.py", "--no-subtract --depth 4 --subsample 1.0 --seed 105"),
    ("gbt4-fwd8x-r1", "user_gbdt_hist.py", "--slow-rank 1 --factor 8 --seed 106"),
    ("gbt4-fwd8x-r3", "user_gbdt_hist.py", "--slow-rank 3 --factor 8 --seed 107"),
    ("gbt4-fwd8x-r2", "user_gbdt_hist.py", "--slow-rank 2 --factor 8 --seed 108"),
    ("gbt4-stepsleep100ms-r3", "user_gbdt_hist.py", "--slow-rank 3 --sleep-ms 100 --seed 109"),
    ("gbt4-stepsleep150ms-r1", "user_gbdt_hist.py", "--slow-rank 1 --sleep-ms 150 --seed 110"),
    ("gbt4-predictsleep150ms-r3", "user_gbdt_hist.py", "--slow-rank 3 --predict-sleep-ms 150 --seed 111"),
    ("gbt4-predictsleep150ms-r2", "user_gbdt_hist.py", "--slow-rank 2 --predict-sleep-ms 150 --seed 112"),
    ("gbt4-hog-r0", "user_gbdt_hist.py", "--slow-rank 0 --hog --seed 113"),
    ("gbt4-bigrank2-skew3", "user_gbdt_hist.py", "--big-rank 2 --big 3 --seed 114"),
    ("gbt4-bigrank1-skew2", "user_gbdt_hist.py", "--big-rank 1 --big 2 --seed 115"),
    ("gbt4-seqlognorm0.8", "user_gbdt_hist.py", "--seq-sigma 0.8 --seed 116"),
]

USERS96B = [  # held out in the ninety-sixth session: a DDP language model saving torch.distributed.checkpoint (DCP) checkpoints every few steps, sync or async, on a gloo group of their own
    ("ckpt4-default-healthy", "user_dcp_ckpt.py", "--seed 101"),
    ("ckpt4-async-healthy", "user_dcp_ckpt.py", "--seed 102 --async-ckpt"),
    ("ckpt4-every2-healthy", "user_dcp_ckpt.py", "--seed 103 --ckpt-every 2"),
    ("ckpt4-l4w160-healthy", "user_dcp_ckpt.py", "--seed 104 --layers 4 --width 160"),
    ("ckpt4-shapes-healthy", "user_dcp_ckpt.py", "--seed 105 --shapes"),
    ("ckpt4-fwd10x-r2", "user_dcp_ckpt.py", "--seed 106 --slow-rank 2 --factor 10"),
    ("ckpt4-fwd12x-r1", "user_dcp_ckpt.py", "--seed 107 --slow-rank 1 --factor 12"),
    ("ckpt4-stepsleep150ms-r3", "user_dcp_ckpt.py", "--seed 108 --slow-rank 3 --sleep-ms 150"),
    ("ckpt4-datasleep150ms-r0", "user_dcp_ckpt.py", "--seed 109 --slow-rank 0 --data-sleep-ms 150"),
    ("ckpt4-disksleep300ms-r1", "user_dcp_ckpt.py", "--seed 110 --slow-rank 1 --slow-disk-ms 300"),
    ("ckpt4-disksleep300ms-r2", "user_dcp_ckpt.py", "--seed 111 --slow-rank 2 --slow-disk-ms 300 --ckpt-every 2"),
    ("ckpt4-hog-r0", "user_dcp_ckpt.py", "--seed 112 --slow-rank 0 --hog"),
    ("ckpt4-seqlognorm0.5", "user_dcp_ckpt.py", "--seed 113 --seq-sigma 0.5"),
    ("ckpt4-seqlognorm0.8", "user_dcp_ckpt.py", "--seed 114 --seq-sigma 0.8"),
    ("ckpt4-skew3", "user_dcp_ckpt.py", "--seed 115 --big-rank 1 --big 3"),
    ("ckpt4-skew4", "user_dcp_ckpt.py", "--seed 116 --big-rank 3 --big 4"),
]

USERS97 = [  # held out in the ninety-seventh session: an MLP-Mixer with a hand-written distributed Shampoo (flat gradient all-reduce, Kronecker factors on every rank, inverse roots of round-robin blocks by their owners, updates all-gathered)
    ("shp4-default-healthy", "user_shampoo.py", "--seed 101"),
    ("shp4-bcast-b64-healthy", "user_shampoo.py", "--seed 102 --share broadcast --block-size 64"),
    ("shp4-w160-buckets4-shapes-healthy", "user_shampoo.py", "--seed 103 --width 160 --buckets 4 --shapes"),
    ("shp4-b24-p1-sgdgraft-healthy", "user_shampoo.py", "--seed 104 --batch 24 --precond-every 1 --grafting sgd"),
    ("shp4-fwd4x-r0", "user_shampoo.py", "--seed 105 --slow-rank 0 --factor 4"),
    ("shp4-fwd5x-r3", "user_shampoo.py", "--seed 106 --slow-rank 3 --factor 5"),
    ("shp4-bcast-fwd4x-r2", "user_shampoo.py", "--seed 107 --share broadcast --slow-rank 2 --factor 4"),
    ("shp4-w160-fwd5x-r1", "user_shampoo.py", "--seed 108 --width 160 --slow-rank 1 --factor 5"),
    ("shp4-stepsleep150ms-r1", "user_shampoo.py", "--seed 109 --slow-rank 1 --sleep-ms 150"),
    ("shp4-datasleep150ms-r2", "user_shampoo.py", "--seed 110 --slow-rank 2 --data-sleep-ms 150"),
    ("shp4-p2-eighsleep400ms-r3", "user_shampoo.py", "--seed 111 --precond-every 2 --slow-rank 3 --slow-eigh-ms 400"),
    ("shp4-p1-eighsleep200ms-r0", "user_shampoo.py", "--seed 112 --precond-every 1 --slow-rank 0 --slow-eigh-ms 200"),
    ("shp4-d6-hog-r2", "user_shampoo.py", "--seed 113 --depth 6 --slow-rank 2 --hog"),
    ("shp4-seqlognorm0.7", "user_shampoo.py", "--seed 114 --seq-sigma 0.7"),
    ("shp4-bcast-seqlognorm0.5", "user_shampoo.py", "--seed 115 --share broadcast --seq-sigma 0.5"),
    ("shp4-bigrank1-skew3", "user_shampoo.py", "--seed 116 --big-rank 1 --big 3"),
]

USERS97B = [  # held out in the ninety-seventh session (b): an implicit heat-equation solver on a 2D grid split over 4 ranks (strips or 2x2 blocks), fixed-iteration block-Jacobi CG with isend/irecv halo exchanges and scalar all_reduces, plus a small conv surrogate trained data-parallel
    ("cg4-default-healthy", "user_halo_cg.py", "--seed 201"),
    ("cg2d4-blocks-healthy", "user_halo_cg.py", "--seed 202 --decomp blocks"),
    ("cg4-conv-f32-batchp2p-healthy", "user_halo_cg.py", "--seed 203 --stencil conv --dtype float32 --p2p batch"),
    ("cg4-g512-i12-shapes-healthy", "user_halo_cg.py", "--seed 204 --grid 512 --iters 12 --shapes"),
    ("cg4-plaincg-g768-nosurrogate-healthy", "user_halo_cg.py", "--seed 205 --grid 768 --precond none --no-surrogate"),
    ("cg4-fwd8x-r1", "user_halo_cg.py", "--seed 206 --slow-rank 1 --factor 8"),
    ("cg4-fwd10x-r0", "user_halo_cg.py", "--seed 207 --slow-rank 0 --factor 10"),
    ("cg2d4-blocks-fwd8x-r3", "user_halo_cg.py", "--seed 208 --decomp blocks --slow-rank 3 --factor 8"),
    ("cg4-g512-i30-fwd8x-r2", "user_halo_cg.py", "--seed 209 --grid 512 --iters 30 --slow-rank 2 --factor 8"),
    ("cg4-stepsleep200ms-r3", "user_halo_cg.py", "--seed 210 --slow-rank 3 --sleep-ms 200"),
    ("cg4-datasleep250ms-r2", "user_halo_cg.py", "--seed 211 --slow-rank 2 --data-sleep-ms 250"),
    ("cg4-writesleep200ms-r1", "user_halo_cg.py", "--seed 212 --slow-rank 1 --write-sleep-ms 200"),
    ("cg4-hog-r0", "user_halo_cg.py", "--seed 213 --slow-rank 0 --hog"),
    ("cg4-link1-2-x4096", "user_halo_cg.py", "--seed 214 --link-src 1 --link-dst 2 --link-factor 4096"),
    ("cg4-seqlognorm0.8", "user_halo_cg.py", "--seed 215 --seq-sigma 0.8"),
    ("cg4-bigrank3-skew3", "user_halo_cg.py", "--seed 216 --big-rank 3 --big 3"),
]

USERS98 = [  # held out in the ninety-eighth session: a pseudo-spectral 2D Navier-Stokes (vorticity) solver, slab-decomposed, 2D FFTs by local 1D FFTs and a global transpose (all_to_all_single or pairwise isend/irecv), RK2/RK3, Lagrangian tracers and an online-trained pointwise MLP closure (gradient all-reduce)
    ("fft4-n768-a2a-healthy", "user_spectral_fft.py", "--seed 301"),
    ("fft4-pairwise-healthy", "user_spectral_fft.py", "--seed 302 --transpose pairwise"),
    ("fft4-rk3-n512-shapes-healthy", "user_spectral_fft.py", "--seed 303 --rk 3 --grid 512 --shapes"),
    ("fft4-f32-noclosure-healthy", "user_spectral_fft.py", "--seed 304 --dtype float32 --no-closure"),
    ("fft4-n640-tr32k-diag1-healthy", "user_spectral_fft.py", "--seed 305 --grid 640 --tracers 32000 --diag-every 1"),
    ("fft4-fwd5x-r1", "user_spectral_fft.py", "--seed 306 --slow-rank 1 --factor 5"),
    ("fft4-fwd6x-r0", "user_spectral_fft.py", "--seed 307 --slow-rank 0 --factor 6"),
    ("fft4-pairwise-fwd5x-r3", "user_spectral_fft.py", "--seed 308 --transpose pairwise --slow-rank 3 --factor 5"),
    ("fft4-rk3-n512-fwd5x-r2", "user_spectral_fft.py", "--seed 309 --rk 3 --grid 512 --slow-rank 2 --factor 5"),
    ("fft4-stepsleep120ms-r3", "user_spectral_fft.py", "--seed 310 --slow-rank 3 --sleep-ms 120"),
    ("fft4-datasleep120ms-r2", "user_spectral_fft.py", "--seed 311 --slow-rank 2 --data-sleep-ms 120"),
    ("fft4-writesleep120ms-r1", "user_spectral_fft.py", "--seed 312 --slow-rank 1 --write-sleep-ms 120"),
    ("fft4-hog-r0", "user_spectral_fft.py", "--seed 313 --slow-rank 0 --hog"),
    ("fft4-pairwise-link1-2-x32", "user_spectral_fft.py", "--seed 314 --transpose pairwise --link-src 1 --link-dst 2 --link-factor 32"),
    ("fft4-seqlognorm0.8", "user_spectral_fft.py", "--seed 315 --seq-sigma 0.8"),
    ("fft4-bigrank3-skew2", "user_spectral_fft.py", "--seed 316 --big-rank 3 --big 2"),
]
USERS98B = [  # held out in the ninety-eighth session (b): a linear-recurrence (LRU/Mamba-style) LM with sequence parallelism, chunked local scans and per-layer carries sent 0->1->2->3 (state gradients back 3->2->1->0) by isend/irecv, gradients all-reduced
    ("scan4-default-healthy", "user_seq_scan.py", "--seed 301"),
    ("scan4-sendrecv-shapes-healthy", "user_seq_scan.py", "--seed 302 --shapes --p2p send"),
    ("scan4-d96-l6-buckets-healthy", "user_seq_scan.py", "--seed 303 --dim 96 --layers 6 --bucket-kb 256"),
    ("scan4-c32-s768-e1-v1024-healthy", "user_seq_scan.py", "--seed 304 --scan-chunk 32 --seq-len 768 --expand 1 --vocab 1024"),
    ("scan4-fwd6x-r1", "user_seq_scan.py", "--seed 305 --slow-rank 1 --factor 6"),
    ("scan4-fwd7x-r0", "user_seq_scan.py", "--seed 306 --slow-rank 0 --factor 7"),
    ("scan4-d96-l6-fwd6x-r3", "user_seq_scan.py", "--seed 307 --dim 96 --layers 6 --slow-rank 3 --factor 6"),
    ("scan4-sendrecv-fwd5x-r2", "user_seq_scan.py", "--seed 308 --p2p send --slow-rank 2 --factor 5"),
    ("scan4-stepsleep140ms-r2", "user_seq_scan.py", "--seed 309 --slow-rank 2 --sleep-ms 140"),
    ("scan4-datasleep150ms-r3", "user_seq_scan.py", "--seed 310 --slow-rank 3 --data-sleep-ms 150"),
    ("scan4-logsleep160ms-r0", "user_seq_scan.py", "--seed 311 --slow-rank 0 --log-sleep-ms 160"),
    ("scan4-hog-r1", "user_seq_scan.py", "--seed 312 --slow-rank 1 --hog"),
    ("scan4-link1-2-x16384", "user_seq_scan.py", "--seed 313 --link-src 1 --link-dst 2 --link-factor 16384"),
    ("scan4-link3-2-x16384", "user_seq_scan.py", "--seed 314 --link-src 3 --link-dst 2 --link-factor 16384"),
    ("scan4-seqlognorm0.7", "user_seq_scan.py", "--seed 315 --seq-sigma 0.7"),
    ("scan4-bigrank2-skew2.5", "user_seq_scan.py", "--seed 316 --big-rank 2 --big 2.5"),
]

USERS100B = [  # held out in the hundredth session (b): a small CNN trained data-parallel without DDP, top-k gradient sparsification with error feedback (indices and values all-gathered, scatter-averaged), dense all_reduce resyncs every few steps, lr broadcast from rank 0, per-rank loss gathered to rank 0, a parameter-fingerprint isend/irecv ring r -> r+1
    ("topk4-default-healthy", "user_topk_ddp.py", "--seed 401"),
    ("topk4-gatherlist-halfvals-shapes-healthy", "user_topk_ddp.py", "--seed 402 --gather list --half-values --shapes"),
    ("topk4-w48-b24-d0.5pct-healthy", "user_topk_ddp.py", "--seed 403 --width 48 --batch 24 --density 0.005"),
    ("topk4-stages4-img48-dense3-healthy", "user_topk_ddp.py", "--seed 404 --stages 4 --blocks 1 --image 48 --dense-every 3"),
    ("topk4-dense2-d5pct-b48-healthy", "user_topk_ddp.py", "--seed 405 --dense-every 2 --density 0.05 --batch 48"),
    ("topk4-fwd4x-r1", "user_topk_ddp.py", "--seed 406 --slow-rank 1 --factor 4"),
    ("topk4-fwd5x-r3", "user_topk_ddp.py", "--seed 407 --slow-rank 3 --factor 5"),
    ("topk4-gatherlist-fwd4x-r0", "user_topk_ddp.py", "--seed 408 --gather list --slow-rank 0 --factor 4"),
    ("topk4-w48-b24-fwd5x-r2", "user_topk_ddp.py", "--seed 409 --width 48 --batch 24 --slow-rank 2 --factor 5"),
    ("topk4-stepsleep300ms-r2", "user_topk_ddp.py", "--seed 410 --slow-rank 2 --sleep-ms 300"),
    ("topk4-datasleep300ms-r3", "user_topk_ddp.py", "--seed 411 --slow-rank 3 --data-sleep-ms 300"),
    ("topk4-uploadsleep300ms-r1", "user_topk_ddp.py", "--seed 412 --slow-rank 1 --upload-sleep-ms 300"),
    ("topk4-hog-r0", "user_topk_ddp.py", "--seed 413 --slow-rank 0 --hog"),
    ("topk4-link2-3-x16384", "user_topk_ddp.py", "--seed 414 --link-src 2 --link-dst 3 --link-factor 16384"),
    ("topk4-seqlognorm0.8", "user_topk_ddp.py", "--seed 415 --seq-sigma 0.8"),
    ("topk4-bigrank3-skew3", "user_topk_ddp.py", "--seed 416 --big-rank 3 --big 3"),
]

USERS100 = [  # held out in the hundredth session: parallel tempering (replica exchange) of an MLP energy-based model, one temperature a rank, Langevin negatives (autograd w.r.t. the samples), neighbour swaps of energies then samples by blocking send/recv (pairs (0,1),(2,3) on even steps, (1,2) on odd), contrastive-divergence gradients all-reduced, acceptance stats all-gathered
    ("pt4-default-healthy", "user_replica_exchange.py", "--seed 501"),
    ("pt4-d2-h192-shapes-healthy", "user_replica_exchange.py", "--seed 502 --data-dim 2 --hidden 192 --shapes"),
    ("pt4-swapreplica-buckets-healthy", "user_replica_exchange.py", "--seed 503 --swap replica --bucket-kb 128"),
    ("pt4-k16-c640-healthy", "user_replica_exchange.py", "--seed 504 --langevin-steps 16 --chains 640"),
    ("pt4-tmax8-depth4-h224-healthy", "user_replica_exchange.py", "--seed 505 --t-max 8 --depth 4 --hidden 224"),
    ("pt4-fwd2x-r1", "user_replica_exchange.py", "--seed 506 --slow-rank 1 --factor 2"),
    ("pt4-fwd1.6x-r3", "user_replica_exchange.py", "--seed 507 --slow-rank 3 --factor 1.6"),
    ("pt4-d2-fwd2.5x-r0", "user_replica_exchange.py", "--seed 508 --data-dim 2 --slow-rank 0 --factor 2.5"),
    ("pt4-swapreplica-fwd1.8x-r2", "user_replica_exchange.py", "--seed 509 --swap replica --slow-rank 2 --factor 1.8"),
    ("pt4-stepsleep300ms-r2", "user_replica_exchange.py", "--seed 510 --slow-rank 2 --sleep-ms 300"),
    ("pt4-datasleep300ms-r3", "user_replica_exchange.py", "--seed 511 --slow-rank 3 --data-sleep-ms 300"),
    ("pt4-dumpsleep300ms-r0", "user_replica_exchange.py", "--seed 512 --slow-rank 0 --dump-sleep-ms 300"),
    ("pt4-hog-r1", "user_replica_exchange.py", "--seed 513 --slow-rank 1 --hog"),
    ("pt4-link1-2-x2048", "user_replica_exchange.py", "--seed 514 --link-src 1 --link-dst 2 --link-factor 2048"),
    ("pt4-seqlognorm0.8", "user_replica_exchange.py", "--seed 515 --seq-sigma 0.8"),
    ("pt4-bigrank3-skew3", "user_replica_exchange.py", "--seed 516 --big-rank 3 --big 3"),
]

USERS99B = [  # held out in the ninety-ninth session (b): distributed k-means for a data pipeline, per-step shards, Lloyd/mini-batch iterations with all_reduce of partial sums/counts (+ MAX/MIN convergence), sample-sort redistribution by cluster owner (all_to_all of counts, uneven all_to_all_single of points), per-cluster MLPs with a shared head (gradient all-reduce)
    ("km4-default-healthy", "user_kmeans_sort.py", "--seed 901"),
    ("km4-list-shapes-healthy", "user_kmeans_sort.py", "--seed 902 --exchange list --shapes"),
    ("km4-minibatch-balanced-healthy", "user_kmeans_sort.py", "--seed 903 --algo minibatch --owner balanced"),
    ("km4-p20k-d24-k48-healthy", "user_kmeans_sort.py", "--seed 904 --points 20000 --dim 24 --clusters 48 --iters 4 --hidden 48"),
    ("km4-p12k-it8-tol-fit3-healthy", "user_kmeans_sort.py", "--seed 905 --points 12000 --iters 8 --tol 0.14 --fit-iters 3"),
    ("km4-fwd2x-r1", "user_kmeans_sort.py", "--seed 906 --slow-rank 1 --factor 2"),
    ("km4-fwd3x-r2", "user_kmeans_sort.py", "--seed 907 --slow-rank 2 --factor 3"),
    ("km4-list-fwd2.5x-r3", "user_kmeans_sort.py", "--seed 908 --exchange list --slow-rank 3 --factor 2.5"),
    ("km4-minibatch-balanced-fwd3x-r0", "user_kmeans_sort.py", "--seed 909 --algo minibatch --owner balanced --slow-rank 0 --factor 3"),
    ("km4-stepsleep250ms-r3", "user_kmeans_sort.py", "--seed 910 --slow-rank 3 --sleep-ms 250"),
    ("km4-datasleep250ms-r2", "user_kmeans_sort.py", "--seed 911 --slow-rank 2 --data-sleep-ms 250"),
    ("km4-writesleep250ms-r1", "user_kmeans_sort.py", "--seed 912 --slow-rank 1 --write-sleep-ms 250"),
    ("km4-hog-r0", "user_kmeans_sort.py", "--seed 913 --slow-rank 0 --hog"),
    ("km4-link3-1-x512", "user_kmeans_sort.py", "--seed 914 --link-src 3 --link-dst 1 --link-factor 512"),
    ("km4-seqlognorm0.8", "user_kmeans_sort.py", "--seed 915 --seq-sigma 0.8"),
    ("km4-bigrank3-skew3", "user_kmeans_sort.py", "--seed 916 --big-rank 3 --big 3"),
]

USERS99 = [  # held out in the ninety-ninth session: 2D tensor parallelism by SUMMA on a 2x2 grid (a residual FFN stack, MLP regression): panels broadcast along process-row / -column subgroups with rotating roots, backward partials reduced, norm statistics all-reduced over the row, loss and every-3-steps grad-norm all_reduces
    ("summa4-default-healthy", "user_summa.py", "--seed 401"),
    ("summa4-prefetch-shapes-healthy", "user_summa.py", "--seed 402 --prefetch --shapes"),
    ("summa4-cache-nonorm-healthy", "user_summa.py", "--seed 403 --cache-panels --no-norm"),
    ("summa4-b3-d384-h1536-healthy", "user_summa.py", "--seed 404 --blocks 3 --dim 384 --hidden 1536"),
    ("summa4-b4-bs768-h1024-clip1-healthy", "user_summa.py", "--seed 405 --blocks 4 --batch 768 --hidden 1024 --clip-every 1"),
    ("summa4-fwd4x-r2", "user_summa.py", "--seed 406 --slow-rank 2 --factor 4"),
    ("summa4-fwd3x-r0", "user_summa.py", "--seed 407 --slow-rank 0 --factor 3"),
    ("summa4-prefetch-fwd3x-r3", "user_summa.py", "--seed 408 --prefetch --slow-rank 3 --factor 3"),
    ("summa4-b3-d384-h1536-fwd4x-r1", "user_summa.py", "--seed 409 --blocks 3 --dim 384 --hidden 1536 --slow-rank 1 --factor 4"),
    ("summa4-stepsleep300ms-r1", "user_summa.py", "--seed 410 --slow-rank 1 --sleep-ms 300"),
    ("summa4-datasleep350ms-r3", "user_summa.py", "--seed 411 --slow-rank 3 --data-sleep-ms 350"),
    ("summa4-ckptsleep350ms-r0", "user_summa.py", "--seed 412 --slow-rank 0 --ckpt-sleep-ms 350"),
    ("summa4-hog-r2", "user_summa.py", "--seed 413 --slow-rank 2 --hog"),
    ("summa4-link1-3-x32", "user_summa.py", "--seed 414 --link-src 1 --link-dst 3 --link-factor 32"),
    ("summa4-seqlognorm0.8", "user_summa.py", "--seed 415 --seq-sigma 0.8"),
    ("summa4-bigrank3-skew3", "user_summa.py", "--seed 416 --big-rank 3 --big 3"),
]

USERS101B = [  # held out in the hundred-and-first session (b): a 2-layer LSTM LM with hand-written tensor parallelism on TP2 x DP2 (TP groups {0,1},{2,3}, DP groups {0,2},{1,3}): column-parallel gates, the hidden state all-gathered over the TP group at every time step (backward reduce_scatter or all_reduce + slice), row-parallel output projection all-reduced over TP, bucketed DP gradient all_reduces, a TP grad-norm all_reduce, a world loss all_reduce every 2nd step
    ("tplstm4-default-healthy", "user_tp_lstm.py", "--seed 1101"),
    ("tplstm4-gatherlist-gradallreduce-shapes-healthy", "user_tp_lstm.py", "--seed 1102 --gather list --gather-grad allreduce --shapes"),
    ("tplstm4-h384-b96-bucket1024-healthy", "user_tp_lstm.py", "--seed 1103 --hidden 384 --batch 96 --bucket-kb 1024"),
    ("tplstm4-seq16-e96-log1-healthy", "user_tp_lstm.py", "--seed 1104 --seq-len 16 --embed 96 --log-every 1"),
    ("tplstm4-layers3-seq8-flat-healthy", "user_tp_lstm.py", "--seed 1105 --layers 3 --seq-len 8 --bucket-kb 0"),
    ("tplstm4-fwd4x-r1", "user_tp_lstm.py", "--seed 1106 --slow-rank 1 --factor 4"),
    ("tplstm4-gatherlist-fwd3x-r2", "user_tp_lstm.py", "--seed 1107 --gather list --slow-rank 2 --factor 3"),
    ("tplstm4-h384-b96-fwd5x-r0", "user_tp_lstm.py", "--seed 1108 --hidden 384 --batch 96 --slow-rank 0 --factor 5"),
    ("tplstm4-seq16-fwd4x-r3", "user_tp_lstm.py", "--seed 1109 --seq-len 16 --slow-rank 3 --factor 4"),
    ("tplstm4-stepsleep200ms-r2", "user_tp_lstm.py", "--seed 1110 --slow-rank 2 --sleep-ms 200"),
    ("tplstm4-datasleep200ms-r3", "user_tp_lstm.py", "--seed 1111 --slow-rank 3 --data-sleep-ms 200"),
    ("tplstm4-prefetchsleep200ms-r1", "user_tp_lstm.py", "--seed 1112 --slow-rank 1 --prefetch-sleep-ms 200"),
    ("tplstm4-hog-r0", "user_tp_lstm.py", "--seed 1113 --slow-rank 0 --hog"),
    ("tplstm4-link3-1-x96", "user_tp_lstm.py", "--seed 1114 --link-src 3 --link-dst 1 --link-factor 96"),
    ("tplstm4-seqlognorm0.8", "user_tp_lstm.py", "--seed 1115 --seq-sigma 0.8"),
    ("tplstm4-bigrank3-skew2", "user_tp_lstm.py", "--seed 1116 --big-rank 3 --big 2"),
]

USERS101 = [  # held out in the hundred-and-first session: soft-DTW alignment of DNA read pairs trained through a small conv embedding net, the DP matrix split by columns, a wavefront of row blocks (last-column boundaries 0 -> 1 -> 2 -> 3 by blocking send/recv, the hand-written gradient recursion 3 -> 2 -> 1 -> 0), net gradients and loss stats all-reduced
    ("wave4-default-healthy", "user_wavefront_dp.py", "--seed 1001"),
    ("wave4-q48-shapes-gradparams-healthy", "user_wavefront_dp.py", "--seed 1002 --query-len 48 --shapes --grad-sync params"),
    ("wave4-rb8-t32-healthy", "user_wavefront_dp.py", "--seed 1003 --row-block 8 --target-len 32"),
    ("wave4-p768-k5-h96-healthy", "user_wavefront_dp.py", "--seed 1004 --pairs 768 --kernel 5 --hidden 96"),
    ("wave4-g0.05-rb32-t64-healthy", "user_wavefront_dp.py", "--seed 1005 --gamma 0.05 --row-block 32 --target-len 64"),
    ("wave4-fwd4x-r1", "user_wavefront_dp.py", "--seed 1006 --slow-rank 1 --factor 4"),
    ("wave4-fwd5x-r3", "user_wavefront_dp.py", "--seed 1007 --slow-rank 3 --factor 5"),
    ("wave4-gradparams-fwd4x-r0", "user_wavefront_dp.py", "--seed 1008 --grad-sync params --slow-rank 0 --factor 4"),
    ("wave4-rb8-t32-fwd5x-r2", "user_wavefront_dp.py", "--seed 1009 --row-block 8 --target-len 32 --slow-rank 2 --factor 5"),
    ("wave4-stepsleep300ms-r2", "user_wavefront_dp.py", "--seed 1010 --slow-rank 2 --sleep-ms 300"),
    ("wave4-datasleep300ms-r0", "user_wavefront_dp.py", "--seed 1011 --slow-rank 0 --data-sleep-ms 300"),
    ("wave4-writesleep300ms-r3", "user_wavefront_dp.py", "--seed 1012 --slow-rank 3 --write-sleep-ms 300"),
    ("wave4-hog-r1", "user_wavefront_dp.py", "--seed 1013 --slow-rank 1 --hog"),
    ("wave4-link2-3-x8192", "user_wavefront_dp.py", "--seed 1014 --link-src 2 --link-dst 3 --link-factor 8192"),
    ("wave4-q48-seqlognorm0.8", "user_wavefront_dp.py", "--seed 1015 --query-len 48 --seq-sigma 0.8"),
    ("wave4-q48-rb24-bigrank3-skew3", "user_wavefront_dp.py", "--seed 1016 --query-len 48 --row-block 24 --big-rank 3 --big 3"),
]

USERS102B = [  # held out in the hundred-and-second session (b): an MLP-Mixer classifier trained data-parallel without DDP, gradients in buckets averaged by a hand-written Rabenseifner all-reduce (recursive-halving reduce-scatter with rank^2 then rank^1, recursive-doubling all-gather back) over isend/irecv (or batch_isend_irecv), an lr-scale broadcast from rank 0 each step, a loss all_reduce every 2nd step
    ("bfly4-default-healthy", "user_butterfly_allreduce.py", "--seed 1201"),
    ("bfly4-batched-shapes-healthy", "user_butterfly_allreduce.py", "--seed 1202 --batched --shapes"),
    ("bfly4-w160-d4-b0.5mb-healthy", "user_butterfly_allreduce.py", "--seed 1203 --width 160 --depth 4 --bucket-mb 0.5"),
    ("bfly4-clip-log1-b4mb-healthy", "user_butterfly_allreduce.py", "--seed 1204 --clip --log-every 1 --bucket-mb 4"),
    ("bfly4-img48-p6-bs24-healthy", "user_butterfly_allreduce.py", "--seed 1205 --image 48 --patch 6 --batch 24 --token-hidden 96"),
    ("bfly4-fwd3x-r1", "user_butterfly_allreduce.py", "--seed 1206 --slow-rank 1 --factor 3"),
    ("bfly4-fwd4x-r3", "user_butterfly_allreduce.py", "--seed 1207 --slow-rank 3 --factor 4"),
    ("bfly4-batched-fwd3x-r0", "user_butterfly_allreduce.py", "--seed 1208 --batched --slow-rank 0 --factor 3"),
    ("bfly4-w160-d4-fwd3.5x-r2", "user_butterfly_allreduce.py", "--seed 1209 --width 160 --depth 4 --bucket-mb 0.5 --slow-rank 2 --factor 3.5"),
    ("bfly4-stepsleep250ms-r2", "user_butterfly_allreduce.py", "--seed 1210 --slow-rank 2 --sleep-ms 250"),
    ("bfly4-datasleep250ms-r3", "user_butterfly_allreduce.py", "--seed 1211 --slow-rank 3 --data-sleep-ms 250"),
    ("bfly4-tbsleep250ms-r1", "user_butterfly_allreduce.py", "--seed 1212 --slow-rank 1 --tb-sleep-ms 250"),
    ("bfly4-hog-r0", "user_butterfly_allreduce.py", "--seed 1213 --slow-rank 0 --hog"),
    ("bfly4-link0-2-x256", "user_butterfly_allreduce.py", "--seed 1214 --link-src 0 --link-dst 2 --link-factor 256"),
    ("bfly4-seqlognorm0.8", "user_butterfly_allreduce.py", "--seed 1215 --seq-sigma 0.8"),
    ("bfly4-bigrank3-skew3", "user_butterfly_allreduce.py", "--seed 1216 --big-rank 3 --big 3"),
]

USERS102 = [  # held out in the hundred-and-second session: a small GPT in 4 pipeline stages under a hand-written zero-bubble (ZB-H1) schedule, backward split into B (input grad, autograd.grad w.r.t. the stage input, retain_graph) and deferred W (weight grads, filling the cool-down bubbles), activations 0->1->2->3 and input grads 3->2->1->0 by isend/irecv, loss broadcast from the last stage, grad-norm all_reduce, per-step checkpoint shards
    ("zb4-default-healthy", "user_zero_bubble.py", "--seed 1301"),
    ("zb4-store-shapes-healthy", "user_zero_bubble.py", "--seed 1302 --split store --shapes --microbatches 6"),
    ("zb4-sync-d192-healthy", "user_zero_bubble.py", "--seed 1303 --p2p sync --dim 192 --heads 6 --microbatches 6"),
    ("zb4-l1-d192-mb12-healthy", "user_zero_bubble.py", "--seed 1304 --layers 1 --dim 192 --heads 6 --microbatches 12 --mb-size 2"),
    ("zb4-store-s128-v1024-healthy", "user_zero_bubble.py", "--seed 1305 --split store --seq-len 128 --mb-size 2 --ckpt-every 2 --vocab 1024"),
    ("zb4-d192-fwd4x-r1", "user_zero_bubble.py", "--seed 1306 --dim 192 --heads 6 --microbatches 6 --slow-rank 1 --factor 4"),
    ("zb4-fwd5x-r0", "user_zero_bubble.py", "--seed 1307 --microbatches 5 --slow-rank 0 --factor 5"),
    ("zb4-sync-fwd4x-r2", "user_zero_bubble.py", "--seed 1308 --p2p sync --microbatches 6 --slow-rank 2 --factor 4"),
    ("zb4-store-fwd3x-r3", "user_zero_bubble.py", "--seed 1309 --split store --slow-rank 3 --factor 3"),
    ("zb4-stepsleep200ms-r2", "user_zero_bubble.py", "--seed 1310 --slow-rank 2 --sleep-ms 200"),
    ("zb4-datasleep200ms-r3", "user_zero_bubble.py", "--seed 1311 --slow-rank 3 --data-sleep-ms 200"),
    ("zb4-ckptsleep200ms-r0", "user_zero_bubble.py", "--seed 1312 --slow-rank 0 --ckpt-sleep-ms 200"),
    ("zb4-hog-r1", "user_zero_bubble.py", "--seed 1313 --slow-rank 1 --hog"),
    ("zb4-link2-1-x1024", "user_zero_bubble.py", "--seed 1314 --link-src 2 --link-dst 1 --link-factor 1024"),
    ("zb4-seqlognorm0.8", "user_zero_bubble.py", "--seed 1315 --seq-sigma 0.8 --microbatches 5"),
    ("zb4-bigrank2-skew2.5", "user_zero_bubble.py", "--seed 1316 --big-rank 2 --big 2.5 --microbatches 4 --steps 6"),
]

USERS103 = [  # held out in the hundred-and-third session: Graph500-style graph analytics on an R-MAT graph 1D-partitioned over 4 ranks, no neural network: level-synchronous BFS (counts all_to_all_single, uneven all_to_all_single of (vertex, parent) rows, frontier all_reduce), push PageRank (all_to_all_single of target sums, residual all_reduce), local neighbourhood queries, tree validation all_reduces
    ("bfs4-default-healthy", "user_graph_bfs.py", "--seed 1401"),
    ("bfs4-shapes-pr6-healthy", "user_graph_bfs.py", "--seed 1402 --shapes --pr-iters 6"),
    ("bfs4-s17-e8-healthy", "user_graph_bfs.py", "--seed 1403 --scale 17 --edge-factor 8 --pr-iters 3"),
    ("bfs4-nodedupe-healthy", "user_graph_bfs.py", "--seed 1404 --no-dedupe"),
    ("bfs4-roots3-q20k-e12-healthy", "user_graph_bfs.py", "--seed 1405 --roots 3 --queries 20000 --edge-factor 12"),
    ("bfs4-fwd3x-r1", "user_graph_bfs.py", "--seed 1406 --slow-rank 1 --factor 3"),
    ("bfs4-fwd2x-r0", "user_graph_bfs.py", "--seed 1407 --slow-rank 0 --factor 2"),
    ("bfs4-s17-e8-fwd2.5x-r3", "user_graph_bfs.py", "--seed 1408 --scale 17 --edge-factor 8 --pr-iters 3 --slow-rank 3 --factor 2.5"),
    ("bfs4-nodedupe-fwd3x-r2", "user_graph_bfs.py", "--seed 1409 --no-dedupe --slow-rank 2 --factor 3"),
    ("bfs4-stepsleep150ms-r2", "user_graph_bfs.py", "--seed 1410 --slow-rank 2 --sleep-ms 150"),
    ("bfs4-datasleep150ms-r3", "user_graph_bfs.py", "--seed 1411 --slow-rank 3 --data-sleep-ms 150"),
    ("bfs4-validatesleep150ms-r0", "user_graph_bfs.py", "--seed 1412 --slow-rank 0 --validate-sleep-ms 150"),
    ("bfs4-hog-r1", "user_graph_bfs.py", "--seed 1413 --slow-rank 1 --hog"),
    ("bfs4-link1-2-x128", "user_graph_bfs.py", "--seed 1414 --link-src 1 --link-dst 2 --link-factor 128"),
    ("bfs4-seqlognorm0.8", "user_graph_bfs.py", "--seed 1415 --seq-sigma 0.8"),
    ("bfs4-bigrank3-skew2.5", "user_graph_bfs.py", "--seed 1416 --big-rank 3 --big 2.5"),
]

USERS103B = [  # held out in the hundred-and-third session (b): IMPALA-style actor-learner RL, rank 0 the learner (V-trace, RMSProp), ranks 1-3 actors (conv policy on hand-written batched grid-world mazes rendered to pixels), trajectories actor -> learner by isend (blocking send in sync mode) as 4 flat tensors, received in rank order, parameters broadcast from rank 0 every step, a 5-float stats all_reduce
    ("impala4-default-healthy", "user_actor_learner.py", "--seed 1501"),
    ("impala4-sync-u12-shapes-healthy", "user_actor_learner.py", "--seed 1502 --mode sync --shapes --unroll 12"),
    ("impala4-e48-u12-g9-healthy", "user_actor_learner.py", "--seed 1503 --envs 48 --unroll 12 --grid 9"),
    ("impala4-adam-h512-render4-healthy", "user_actor_learner.py", "--seed 1504 --optim adam --hidden 512 --render-scale 4"),
    ("impala4-sync-e24-u20-ep40-healthy", "user_actor_learner.py", "--seed 1505 --mode sync --envs 24 --unroll 20 --max-episode 40"),
    ("impala4-fwd3x-r1", "user_actor_learner.py", "--seed 1506 --slow-rank 1 --factor 3"),
    ("impala4-e48-u12-fwd2.5x-r3", "user_actor_learner.py", "--seed 1507 --envs 48 --unroll 12 --slow-rank 3 --factor 2.5"),
    ("impala4-fwd2x-r0", "user_actor_learner.py", "--seed 1508 --slow-rank 0 --factor 2"),
    ("impala4-sync-fwd3x-r2", "user_actor_learner.py", "--seed 1509 --mode sync --slow-rank 2 --factor 3"),
    ("impala4-stepsleep250ms-r3", "user_actor_learner.py", "--seed 1510 --slow-rank 3 --sleep-ms 250"),
    ("impala4-datasleep250ms-r1", "user_actor_learner.py", "--seed 1511 --slow-rank 1 --data-sleep-ms 250"),
    ("impala4-logsleep200ms-r0", "user_actor_learner.py", "--seed 1512 --slow-rank 0 --log-sleep-ms 200"),
    ("impala4-hog-r2", "user_actor_learner.py", "--seed 1513 --slow-rank 2 --hog"),
    ("impala4-link2-0-x128", "user_actor_learner.py", "--seed 1514 --link-src 2 --link-dst 0 --link-factor 128"),
    ("impala4-seqlognorm0.6", "user_actor_learner.py", "--seed 1515 --seq-sigma 0.6"),
    ("impala4-bigrank3-skew2.5", "user_actor_learner.py", "--seed 1516 --big-rank 3 --big 2.5"),
]

USERS104 = [  # held out in the hundred-and-fourth session: population-based training (PBT) of a small CNN classifier, one member a rank with its own hyperparameters, weights sent one hop around a ring r -> r+1 every step for cross-evaluation (isend/irecv), a stats all_reduce every step, every few steps an all_gather of scores and hyperparameters, then the bottom member copies a top member's weights (send/recv, or broadcast) and perturbs its hyperparameters
    ("pbt4-default-healthy", "user_pbt.py", "--seed 1601"),
    ("pbt4-bcast-shapes-healthy", "user_pbt.py", "--seed 1602 --exploit broadcast --shapes"),
    ("pbt4-w20-b24-i4-ready3-noxeval-healthy", "user_pbt.py", "--seed 1603 --width 20 --batch 24 --inner-steps 4 --ready 3 --cross-eval off"),
    ("pbt4-img20-eval384-b24-healthy", "user_pbt.py", "--seed 1604 --image 20 --eval-batch 384 --batch 24"),
    ("pbt4-ready1-q50-healthy", "user_pbt.py", "--seed 1605 --ready 1 --quantile 0.5"),
    ("pbt4-fwd4x-r1", "user_pbt.py", "--seed 1606 --slow-rank 1 --factor 4"),
    ("pbt4-bcast-fwd3x-r2", "user_pbt.py", "--seed 1607 --exploit broadcast --slow-rank 2 --factor 3"),
    ("pbt4-i2-fwd5x-r0", "user_pbt.py", "--seed 1608 --inner-steps 2 --slow-rank 0 --factor 5"),
    ("pbt4-noxeval-ready3-fwd4x-r3", "user_pbt.py", "--seed 1609 --cross-eval off --ready 3 --slow-rank 3 --factor 4"),
    ("pbt4-stepsleep200ms-r2", "user_pbt.py", "--seed 1610 --slow-rank 2 --sleep-ms 200"),
    ("pbt4-datasleep250ms-r3", "user_pbt.py", "--seed 1611 --slow-rank 3 --data-sleep-ms 250"),
    ("pbt4-ckptsleep250ms-r0", "user_pbt.py", "--seed 1612 --slow-rank 0 --ckpt-sleep-ms 250"),
    ("pbt4-hog-r1", "user_pbt.py", "--seed 1613 --slow-rank 1 --hog"),
    ("pbt4-link1-2-x256", "user_pbt.py", "--seed 1614 --link-src 1 --link-dst 2 --link-factor 256"),
    ("pbt4-seqlognorm0.8", "user_pbt.py", "--seed 1615 --seq-sigma 0.8"),
    ("pbt4-bigrank3-skew3", "user_pbt.py", "--seed 1616 --big-rank 3 --big 3"),
]

USERS104B = [  # held out in the hundred-and-fourth session (b): a small GPT under hand-written GPipe x data parallelism (PP2 x DP2: pipelines 0->1 and 2->3, all microbatch forwards then all backwards, activations and their gradients by isend/irecv or blocking send/recv), each stage's gradients all_reduced with its twin on a DP subgroup {0,2}/{1,3}, optional pipeline grad-norm all_reduce, a world loss all_reduce every few steps
    ("gp22-default-healthy", "user_gpipe_dp.py", "--seed 1701"),
    ("gp22-sendrecv-shapes-healthy", "user_gpipe_dp.py", "--seed 1702 --shapes --p2p send --steps 8"),
    ("gp22-mb6-l1-d160-buckets-healthy", "user_gpipe_dp.py", "--seed 1703 --microbatches 6 --layers 1 --dim 160 --bucket-kb 256"),
    ("gp22-clip-s192-mbs1-d96-healthy", "user_gpipe_dp.py", "--seed 1704 --clip --seq-len 192 --mb-size 1 --dim 96"),
    ("gp22-mb8-l1-h8-log1-healthy", "user_gpipe_dp.py", "--seed 1705 --microbatches 8 --layers 1 --heads 8 --log-every 1 --ckpt-every 3"),
    ("gp22-fwd5x-r0", "user_gpipe_dp.py", "--seed 1706 --slow-rank 0 --factor 5"),
    ("gp22-fwd4x-r1", "user_gpipe_dp.py", "--seed 1707 --slow-rank 1 --factor 4"),
    ("gp22-sendrecv-fwd5x-r2", "user_gpipe_dp.py", "--seed 1708 --p2p send --slow-rank 2 --factor 5"),
    ("gp22-clip-mb6-l1-fwd4.5x-r3", "user_gpipe_dp.py", "--seed 1709 --clip --microbatches 6 --layers 1 --slow-rank 3 --factor 4.5"),
    ("gp22-stepsleep140ms-r1", "user_gpipe_dp.py", "--seed 1710 --slow-rank 1 --sleep-ms 140"),
    ("gp22-datasleep140ms-r2", "user_gpipe_dp.py", "--seed 1711 --slow-rank 2 --data-sleep-ms 140"),
    ("gp22-logsleep150ms-r0", "user_gpipe_dp.py", "--seed 1712 --slow-rank 0 --log-sleep-ms 150"),
    ("gp22-hog-r3", "user_gpipe_dp.py", "--seed 1713 --slow-rank 3 --hog"),
    ("gp22-link2-3-x512", "user_gpipe_dp.py", "--seed 1714 --link-src 2 --link-dst 3 --link-factor 512"),
    ("gp22-seqlognorm0.8", "user_gpipe_dp.py", "--seed 1715 --seq-sigma 0.8"),
    ("gp22-bigrank3-skew3", "user_gpipe_dp.py", "--seed 1716 --layers 1 --big-rank 3 --big 3 --microbatches 3"),
]

USERS105B = [  # held out in the hundred-and-fifth session (b): distributed evolution strategies (OpenAI ES) on an MLP policy for hand-written batched cart-pole / point-mass reacher, a shared noise table indexed by offsets, antithetic rollouts, all_gather of (offset, flag, R+, R-) rows, the same update rebuilt and Adam-stepped on every rank, obs-norm stats all_reduced every step, theta broadcast from rank 0 every few steps, each rank's elite noise vector sent one hop around a ring r -> r+1 (isend/irecv)
    ("es4-default-healthy", "user_evo_strategies.py", "--seed 2051"),
    ("es4-reacher-shapes-healthy", "user_evo_strategies.py", "--seed 2052 --env reacher --shapes"),
    ("es4-p24-e4-h96-sync1-healthy", "user_evo_strategies.py", "--seed 2053 --pop-per-rank 24 --episodes 4 --hidden 96 --sync-every 1"),
    ("es4-t56-e6-nomix-healthy", "user_evo_strategies.py", "--seed 2054 --episode-len 56 --episodes 6 --elite-mix 0"),
    ("es4-reacher-h160-sig0.1-sync5-p12-healthy", "user_evo_strategies.py", "--seed 2055 --env reacher --hidden 160 --sigma 0.1 --sync-every 5 --pop-per-rank 12"),
    ("es4-fwd2x-r0", "user_evo_strategies.py", "--seed 2056 --slow-rank 0 --factor 2"),
    ("es4-fwd3x-r1", "user_evo_strategies.py", "--seed 2057 --slow-rank 1 --factor 3"),
    ("es4-reacher-fwd2.5x-r2", "user_evo_strategies.py", "--seed 2058 --env reacher --slow-rank 2 --factor 2.5"),
    ("es4-p24-sync1-fwd2.5x-r3", "user_evo_strategies.py", "--seed 2059 --pop-per-rank 24 --sync-every 1 --slow-rank 3 --factor 2.5"),
    ("es4-stepsleep150ms-r2", "user_evo_strategies.py", "--seed 2060 --slow-rank 2 --sleep-ms 150"),
    ("es4-datasleep150ms-r3", "user_evo_strategies.py", "--seed 2061 --slow-rank 3 --data-sleep-ms 150"),
    ("es4-rendersleep150ms-r1", "user_evo_strategies.py", "--seed 2062 --slow-rank 1 --render-sleep-ms 150"),
    ("es4-hog-r0", "user_evo_strategies.py", "--seed 2063 --slow-rank 0 --hog"),
    ("es4-link2-3-x2048", "user_evo_strategies.py", "--seed 2064 --link-src 2 --link-dst 3 --link-factor 2048"),
    ("es4-seqlognorm0.8", "user_evo_strategies.py", "--seed 2065 --seq-sigma 0.8"),
    ("es4-bigrank3-skew3", "user_evo_strategies.py", "--seed 2066 --big-rank 3 --big 3"),
]

USERS105 = [  # held out in the hundred-and-fifth session: a small GPT under a hand-written Chimera bidirectional pipeline (4 stages; "down" pipeline stage s on rank s, "up" pipeline stage s on rank 3-s, each rank two replicas' stages), half the microbatches each way in a simulated 1F1B-like (or all-F-then-all-B) schedule, activations/gradients by isend/irecv (or globally ordered blocking send/recv), stage replicas' gradients all_reduced on {0,3}/{1,2}, a world loss all_reduce every step, a per-step activation-memory logger
    ("chim4-default-healthy", "user_chimera_pipe.py", "--seed 1801"),
    ("chim4-blocking-shapes-healthy", "user_chimera_pipe.py", "--seed 1802 --blocking --shapes --steps 8"),
    ("chim4-fthenb-perstage-clip-healthy", "user_chimera_pipe.py", "--seed 1803 --schedule fthenb --grad-sync per-stage --clip"),
    ("chim4-mb4-l2-d96-healthy", "user_chimera_pipe.py", "--seed 1804 --microbatches 4 --layers 2 --dim 96"),
    ("chim4-loops2-mb4-s192-h8-healthy", "user_chimera_pipe.py", "--seed 1805 --loops 2 --microbatches 4 --seq-len 192 --heads 8"),
    ("chim4-fwd5x-r0", "user_chimera_pipe.py", "--seed 1806 --slow-rank 0 --factor 5"),
    ("chim4-fwd4x-r1", "user_chimera_pipe.py", "--seed 1807 --slow-rank 1 --factor 4"),
    ("chim4-blocking-fwd3x-r2", "user_chimera_pipe.py", "--seed 1808 --blocking --slow-rank 2 --factor 3"),
    ("chim4-fthenb-fwd4x-r3", "user_chimera_pipe.py", "--seed 1809 --schedule fthenb --slow-rank 3 --factor 4"),
    ("chim4-stepsleep150ms-r1", "user_chimera_pipe.py", "--seed 1810 --slow-rank 1 --sleep-ms 150"),
    ("chim4-datasleep150ms-r3", "user_chimera_pipe.py", "--seed 1811 --slow-rank 3 --data-sleep-ms 150"),
    ("chim4-memlogsleep150ms-r2", "user_chimera_pipe.py", "--seed 1812 --slow-rank 2 --memlog-sleep-ms 150"),
    ("chim4-hog-r0", "user_chimera_pipe.py", "--seed 1813 --slow-rank 0 --hog"),
    ("chim4-link1-2-x512", "user_chimera_pipe.py", "--seed 1814 --link-src 1 --link-dst 2 --link-factor 512"),
    ("chim4-seqlognorm0.8", "user_chimera_pipe.py", "--seed 1815 --loops 2 --microbatches 4 --seq-sigma 0.8"),
    ("chim4-bigrank3-skew3", "user_chimera_pipe.py", "--seed 1816 --microbatches 4 --big-rank 3 --big 3"),
]

USERS106 = [  # held out in the hundred-and-sixth session: DSGD matrix factorisation for a recommender (Gemulla et al. 2011, stratified SGD), no neural network: a synthetic sparse rating matrix in a 4x4 grid of blocks, rank r owns user block r, in sub-epoch s vectorised minibatch SGD on block (r, r+s mod 4) (index_select / index_add_), then the item-factor block rotated one hop r -> r-1 around the ring (isend/irecv, or blocking send/recv), 4 rotations an epoch, a train-RMSE all_reduce every epoch, every few epochs an all_gather of the item blocks and a test-RMSE all_reduce, a per-epoch user-factor snapshot
    ("dsgd4-default-healthy", "user_dsgd_mf.py", "--seed 1801"),
    ("dsgd4-blocking-shapes-healthy", "user_dsgd_mf.py", "--seed 1802 --blocking --shapes"),
    ("dsgd4-k32-b4096-n400k-healthy", "user_dsgd_mf.py", "--seed 1803 --latent-dim 32 --batch-size 4096 --ratings 400000"),
    ("dsgd4-u30k-i12k-n800k-ev2-healthy", "user_dsgd_mf.py", "--seed 1804 --users 30000 --items 12000 --ratings 800000 --eval-every 2"),
    ("dsgd4-passes2-k64-healthy", "user_dsgd_mf.py", "--seed 1805 --passes 2 --latent-dim 64 --lr-decay 0.9 --reg 0.05"),
    ("dsgd4-fwd3x-r2", "user_dsgd_mf.py", "--seed 1806 --slow-rank 2 --factor 3"),
    ("dsgd4-blocking-fwd2.5x-r1", "user_dsgd_mf.py", "--seed 1807 --blocking --slow-rank 1 --factor 2.5"),
    ("dsgd4-k32-n400k-fwd3x-r0", "user_dsgd_mf.py", "--seed 1808 --latent-dim 32 --ratings 400000 --slow-rank 0 --factor 3"),
    ("dsgd4-u30k-i12k-fwd2.5x-r3", "user_dsgd_mf.py", "--seed 1809 --users 30000 --items 12000 --slow-rank 3 --factor 2.5"),
    ("dsgd4-stepsleep200ms-r1", "user_dsgd_mf.py", "--seed 1810 --slow-rank 1 --sleep-ms 200"),
    ("dsgd4-datasleep200ms-r2", "user_dsgd_mf.py", "--seed 1811 --slow-rank 2 --data-sleep-ms 200"),
    ("dsgd4-snapsleep200ms-r0", "user_dsgd_mf.py", "--seed 1812 --slow-rank 0 --snapshot-sleep-ms 200"),
    ("dsgd4-hog-r3", "user_dsgd_mf.py", "--seed 1813 --slow-rank 3 --hog"),
    ("dsgd4-link2-1-x256", "user_dsgd_mf.py", "--seed 1814 --link-src 2 --link-dst 1 --link-factor 256"),
    ("dsgd4-seqlognorm0.8", "user_dsgd_mf.py", "--seed 1815 --seq-sigma 0.8"),
    ("dsgd4-bigrank3-skew3", "user_dsgd_mf.py", "--seed 1816 --big-rank 3 --big 3"),
]

USERS106B = [  # held out in the hundred-and-sixth session (b): a small GPT with 4-way tensor + sequence parallelism and hand-written collective matmuls (async-TP): all_gather->matmul and matmul->reduce_scatter decomposed into 3-hop isend/irecv rings r -> r+1 overlapped with the chunk products (partial sums forward, or r -> r-1 with --rs-dir opposite), backward the mirrored rings in autograd Functions, replicated LayerNorm/embedding grads and the loss all-reduced, a per-rank aux head
    ("cmm4-default-healthy", "user_collective_matmul.py", "--seed 2101"),
    ("cmm4-opposite-shapes-healthy", "user_collective_matmul.py", "--seed 2102 --rs-dir opposite --shapes"),
    ("cmm4-l3-d192-healthy", "user_collective_matmul.py", "--seed 2103 --layers 3 --dim 192"),
    ("cmm4-s768-h4-ffn2-perparam-healthy", "user_collective_matmul.py", "--seed 2104 --seq-len 768 --heads 4 --ffn-mult 2 --ln-sync per-param"),
    ("cmm4-b4-s256-aux1-healthy", "user_collective_matmul.py", "--seed 2105 --batch 4 --seq-len 256 --aux-reps 1"),
    ("cmm4-fwd3x-r2", "user_collective_matmul.py", "--seed 2106 --slow-rank 2 --factor 3"),
    ("cmm4-fwd4x-r0", "user_collective_matmul.py", "--seed 2107 --slow-rank 0 --factor 4"),
    ("cmm4-opposite-fwd2.5x-r3", "user_collective_matmul.py", "--seed 2108 --rs-dir opposite --slow-rank 3 --factor 2.5"),
    ("cmm4-l3-d192-fwd3.5x-r1", "user_collective_matmul.py", "--seed 2109 --layers 3 --dim 192 --slow-rank 1 --factor 3.5 --steps 8"),
    ("cmm4-stepsleep250ms-r1", "user_collective_matmul.py", "--seed 2110 --slow-rank 1 --sleep-ms 250"),
    ("cmm4-datasleep250ms-r3", "user_collective_matmul.py", "--seed 2111 --slow-rank 3 --data-sleep-ms 250"),
    ("cmm4-countersleep250ms-r0", "user_collective_matmul.py", "--seed 2112 --slow-rank 0 --counter-sleep-ms 250"),
    ("cmm4-hog-r2", "user_collective_matmul.py", "--seed 2113 --slow-rank 2 --hog"),
    ("cmm4-link2-3-x32", "user_collective_matmul.py", "--seed 2114 --link-src 2 --link-dst 3 --link-factor 32"),
    ("cmm4-seqlognorm0.8", "user_collective_matmul.py", "--seed 2115 --seq-sigma 0.8"),
    ("cmm4-bigrank3-skew3", "user_collective_matmul.py", "--seed 2116 --big-rank 3 --big 3"),
]

USERS107B = [  # held out in the hundred-and-seventh session (b): a 1-D CNN sequence classifier trained data-parallel without DDP, gradients averaged by a hand-written binomial-tree all-reduce of point-to-point messages per bucket (reduce 1->0, 3->2 then 2->0; broadcast 0->2 then 0->1, 2->3; blocking send/recv or isend/irecv + wait), a loss all_reduce every few steps, a barrier before each evaluation, a per-step metrics push
    ("tree4-default-healthy", "user_tree_allreduce.py", "--seed 1701"),
    ("tree4-async-shapes-healthy", "user_tree_allreduce.py", "--seed 1702 --async-p2p --shapes"),
    ("tree4-c128-l6-k3-bucket1mb-healthy", "user_tree_allreduce.py", "--seed 1703 --channels 128 --layers 6 --kernel 3 --bucket-mb 1"),
    ("tree4-s512-b8-bucket0.1mb-log1-healthy", "user_tree_allreduce.py", "--seed 1704 --seq-len 512 --batch 8 --bucket-mb 0.1 --log-every 1 --eval-every 3"),
    ("tree4-c64-l8-b32-async-9buckets-healthy", "user_tree_allreduce.py", "--seed 1705 --channels 64 --layers 8 --batch 32 --seq-len 128 --async-p2p --bucket-mb 0.05"),
    ("tree4-fwd2x-r1", "user_tree_allreduce.py", "--seed 1706 --slow-rank 1 --factor 2"),
    ("tree4-fwd3x-r2", "user_tree_allreduce.py", "--seed 1707 --slow-rank 2 --factor 3"),
    ("tree4-async-fwd2.5x-r0", "user_tree_allreduce.py", "--seed 1708 --async-p2p --slow-rank 0 --factor 2.5"),
    ("tree4-c128-l6-fwd3x-r3", "user_tree_allreduce.py", "--seed 1709 --channels 128 --layers 6 --kernel 3 --bucket-mb 1 --slow-rank 3 --factor 3"),
    ("tree4-stepsleep160ms-r1", "user_tree_allreduce.py", "--seed 1710 --slow-rank 1 --sleep-ms 160"),
    ("tree4-datasleep150ms-r3", "user_tree_allreduce.py", "--seed 1711 --slow-rank 3 --data-sleep-ms 150"),
    ("tree4-metricssleep140ms-r0", "user_tree_allreduce.py", "--seed 1712 --slow-rank 0 --metrics-sleep-ms 140"),
    ("tree4-hog-r2", "user_tree_allreduce.py", "--seed 1713 --slow-rank 2 --hog"),
    ("tree4-link2-0-x512", "user_tree_allreduce.py", "--seed 1714 --link-src 2 --link-dst 0 --link-factor 512"),
    ("tree4-seqlognorm0.8", "user_tree_allreduce.py", "--seed 1715 --seq-sigma 0.8"),
    ("tree4-bigrank3-skew3", "user_tree_allreduce.py", "--seed 1716 --big-rank 3 --big 3"),
]

USERS107 = [  # held out in the hundred-and-seventh session: an N-body / MD simulation with a learned radial force-correction MLP, no DDP: particles in 4 blocks, all pairs by the systolic ring (a travelling (x, m) block passed one hop r -> r+1 three times a step by isend/irecv + wait, or parity-ordered blocking send/recv, optionally overlapped), block-block interactions in row tiles incl. per-rank field probes, leapfrog integration, the MLP trained on a memory-mapped reference table (gradients all-reduced), a 7-float energy/momentum all_reduce every step, a per-step trajectory frame writer
    ("nbody4-default-healthy", "user_nbody_ring.py", "--seed 3701"),
    ("nbody4-blocking-shapes-healthy", "user_nbody_ring.py", "--seed 3702 --blocking --shapes"),
    ("nbody4-overlap-b640-p192-healthy", "user_nbody_ring.py", "--seed 3703 --overlap --block 640 --probes 192"),
    ("nbody4-lj-h24-it2-healthy", "user_nbody_ring.py", "--seed 3704 --potential lj --hidden 24 --train-iters 2"),
    ("nbody4-b384-p64-t128-tb16k-healthy", "user_nbody_ring.py", "--seed 3705 --block 384 --probes 64 --tile 128 --train-batch 16384"),
    ("nbody4-fwd2x-r2", "user_nbody_ring.py", "--seed 3706 --slow-rank 2 --factor 2"),
    ("nbody4-blocking-fwd2.5x-r1", "user_nbody_ring.py", "--seed 3707 --blocking --slow-rank 1 --factor 2.5"),
    ("nbody4-overlap-fwd2x-r0", "user_nbody_ring.py", "--seed 3708 --overlap --slow-rank 0 --factor 2"),
    ("nbody4-lj-fwd3x-r3", "user_nbody_ring.py", "--seed 3709 --potential lj --slow-rank 3 --factor 3"),
    ("nbody4-stepsleep350ms-r1", "user_nbody_ring.py", "--seed 3710 --slow-rank 1 --sleep-ms 350"),
    ("nbody4-datasleep350ms-r3", "user_nbody_ring.py", "--seed 3711 --slow-rank 3 --data-sleep-ms 350"),
    ("nbody4-trajsleep350ms-r0", "user_nbody_ring.py", "--seed 3712 --slow-rank 0 --traj-sleep-ms 350"),
    ("nbody4-hog-r2", "user_nbody_ring.py", "--seed 3713 --slow-rank 2 --hog"),
    ("nbody4-link2-3-x32768", "user_nbody_ring.py", "--seed 3714 --link-src 2 --link-dst 3 --link-factor 32768"),
    ("nbody4-seqlognorm0.8", "user_nbody_ring.py", "--seed 3715 --seq-sigma 0.8"),
    ("nbody4-bigrank3-skew3", "user_nbody_ring.py", "--seed 3716 --big-rank 3 --big 3"),
]

USERS108 = [  # held out in the hundred-and-first session: federated averaging (FedAvg) of a small CNN (or MLP) over 4 non-IID clients (Dirichlet label skew), rank 0 the server and a client: global weights broadcast from 0 each round, local SGD steps, DP clipping + a per-round audit log, optional secure-aggregation masks (seed all_gather), updates and sample counts uploaded k -> 0 by blocking send/recv (or isend/irecv), weighted average on rank 0, a round barrier, an eval-accuracy all_reduce every few rounds
    ("fed4-default-healthy", "user_fedavg.py", "--seed 10801"),
    ("fed4-async-secagg-healthy", "user_fedavg.py", "--seed 10802 --async-upload --secure-agg"),
    ("fed4-mlp-h512-bcastsync-shapes-healthy", "user_fedavg.py", "--seed 10803 --model mlp --hidden 512 --round-sync broadcast --shapes"),
    ("fed4-dp-fedavgm-eval1-healthy", "user_fedavg.py", "--seed 10804 --clip 2 --noise 0.02 --server-momentum 0.7 --server-lr 0.7 --eval-every 1"),
    ("fed4-ls16-b32-a0.1-h256-healthy", "user_fedavg.py", "--seed 10805 --local-steps 16 --batch 32 --alpha 0.1 --hidden 256"),
    ("fed4-fwd2x-r1", "user_fedavg.py", "--seed 10806 --slow-rank 1 --factor 2"),
    ("fed4-async-fwd2.5x-r3", "user_fedavg.py", "--seed 10807 --async-upload --slow-rank 3 --factor 2.5"),
    ("fed4-fwd2x-r0", "user_fedavg.py", "--seed 10808 --slow-rank 0 --factor 2"),
    ("fed4-secagg-ls6-fwd3x-r2", "user_fedavg.py", "--seed 10809 --secure-agg --local-steps 6 --slow-rank 2 --factor 3"),
    ("fed4-stepsleep250ms-r3", "user_fedavg.py", "--seed 10810 --slow-rank 3 --sleep-ms 250"),
    ("fed4-datasleep300ms-r1", "user_fedavg.py", "--seed 10811 --slow-rank 1 --data-sleep-ms 300"),
    ("fed4-auditsleep250ms-r2", "user_fedavg.py", "--seed 10812 --slow-rank 2 --audit-sleep-ms 250"),
    ("fed4-hog-r0", "user_fedavg.py", "--seed 10813 --slow-rank 0 --hog"),
    ("fed4-link3-0-x1024", "user_fedavg.py", "--seed 10814 --link-src 3 --link-dst 0 --link-factor 1024"),
    ("fed4-seqlognorm0.8", "user_fedavg.py", "--seed 10815 --seq-sigma 0.8"),
    ("fed4-bigrank2-skew3", "user_fedavg.py", "--seed 10816 --big-rank 2 --big 3"),
]

USERS108B = [  # held out in the hundred-and-first session (b): Gaussian-process regression by marginal likelihood, a hand-written right-looking distributed Cholesky over 1-D block-cyclic column blocks (each block's owner k mod 4 factors it and broadcasts the panel, every rank updates its own trailing blocks), a pipelined forward substitution whose partial right-hand side travels r -> r+1 (3 -> 0 wrapping) by send/recv or isend/irecv, log-det/quadratic pieces and minibatch hyperparameter gradients all-reduced, Adam on every rank, a per-step experiment-tracker write
    ("chol4-default-healthy", "user_cholesky_gp.py", "--seed 4801"),
    ("chol4-async-n1536-shapes-healthy", "user_cholesky_gp.py", "--seed 4802 --async-p2p --n-points 1536 --shapes"),
    ("chol4-b128-n2560-healthy", "user_cholesky_gp.py", "--seed 4803 --block 128 --n-points 2560"),
    ("chol4-f32-o4-d5-healthy", "user_cholesky_gp.py", "--seed 4804 --dtype float32 --outputs 4 --dims 5"),
    ("chol4-b32-n1024-gp512-healthy", "user_cholesky_gp.py", "--seed 4805 --block 32 --n-points 1024 --grad-points 512"),
    ("chol4-fwd4x-r2", "user_cholesky_gp.py", "--seed 4806 --slow-rank 2 --factor 4"),
    ("chol4-async-fwd5x-r0", "user_cholesky_gp.py", "--seed 4807 --async-p2p --slow-rank 0 --factor 5"),
    ("chol4-b128-n2560-fwd3x-r1", "user_cholesky_gp.py", "--seed 4808 --block 128 --n-points 2560 --slow-rank 1 --factor 3"),
    ("chol4-f32-o4-fwd6x-r3", "user_cholesky_gp.py", "--seed 4809 --dtype float32 --outputs 4 --dims 5 --slow-rank 3 --factor 6"),
    ("chol4-stepsleep250ms-r1", "user_cholesky_gp.py", "--seed 4810 --slow-rank 1 --sleep-ms 250"),
    ("chol4-datasleep250ms-r3", "user_cholesky_gp.py", "--seed 4811 --slow-rank 3 --data-sleep-ms 250"),
    ("chol4-trackersleep250ms-r0", "user_cholesky_gp.py", "--seed 4812 --slow-rank 0 --tracker-sleep-ms 250"),
    ("chol4-hog-r2", "user_cholesky_gp.py", "--seed 4813 --slow-rank 2 --hog"),
    ("chol4-link2-3-x4096", "user_cholesky_gp.py", "--seed 4814 --link-src 2 --link-dst 3 --link-factor 4096"),
    ("chol4-seqlognorm0.8", "user_cholesky_gp.py", "--seed 4815 --seq-sigma 0.8"),
    ("chol4-bigrank3-skew3", "user_cholesky_gp.py", "--seed 4816 --big-rank 3 --big 3"),
]

USERS109 = [  # held out in the hundred-and-first session (c): a 4-stage GPipe pipeline (attention-free MLP LM) in older research-code style, neighbour activations 0->1->2->3 and input grads 3->2->1->0 moved by dist.broadcast in two-rank groups new_group([r, r+1]) (sender = src, receiver a pre-allocated buffer), optional world barrier after every microbatch forward, a per-step activation spill to disk, global grad-norm clip by a world all_reduce, the last stage's loss broadcast to all every few steps
    ("bpp4-default-healthy", "user_bcast_pipe.py", "--seed 10901"),
    ("bpp4-isync-shapes-healthy", "user_bcast_pipe.py", "--seed 10902 --interleave-sync --shapes"),
    ("bpp4-mb8-d96-healthy", "user_bcast_pipe.py", "--seed 10903 --microbatches 8 --dim 96 --mb-size 2"),
    ("bpp4-l3-s128-log1-healthy", "user_bcast_pipe.py", "--seed 10904 --layers 3 --seq-len 128 --mb-size 2 --log-every 1"),
    ("bpp4-mb2-ffn2-sgd-healthy", "user_bcast_pipe.py", "--seed 10905 --microbatches 2 --ffn-mult 2 --optim sgd --mb-size 8"),
    ("bpp4-fwd4x-r1", "user_bcast_pipe.py", "--seed 10906 --slow-rank 1 --factor 4"),
    ("bpp4-fwd3x-r3", "user_bcast_pipe.py", "--seed 10907 --slow-rank 3 --factor 3"),
    ("bpp4-isync-fwd3x-r0", "user_bcast_pipe.py", "--seed 10908 --interleave-sync --slow-rank 0 --factor 3"),
    ("bpp4-mb8-d96-fwd3x-r2", "user_bcast_pipe.py", "--seed 10909 --microbatches 8 --dim 96 --mb-size 2 --steps 8 --slow-rank 2 --factor 3"),
    ("bpp4-stepsleep150ms-r2", "user_bcast_pipe.py", "--seed 10910 --slow-rank 2 --sleep-ms 150"),
    ("bpp4-datasleep150ms-r0", "user_bcast_pipe.py", "--seed 10911 --slow-rank 0 --data-sleep-ms 150"),
    ("bpp4-spillsleep150ms-r1", "user_bcast_pipe.py", "--seed 10912 --slow-rank 1 --spill-sleep-ms 150"),
    ("bpp4-hog-r3", "user_bcast_pipe.py", "--seed 10913 --slow-rank 3 --hog"),
    ("bpp4-link1-2-x512", "user_bcast_pipe.py", "--seed 10914 --link-src 1 --link-dst 2 --link-factor 512"),
    ("bpp4-seqlognorm0.8", "user_bcast_pipe.py", "--seed 10915 --seq-sigma 0.8"),
    ("bpp4-bigrank3-skew3", "user_bcast_pipe.py", "--seed 10916 --big-rank 3 --big 3"),
]

USERS109B = [  # held out in the hundred-and-first session (d): a wide bias-free two-layer MLP tagger (multi-label BCE) 2D-sharded on a 2x2 process grid, every weight product by Cannon's algorithm (initial skew, 2 rounds of local block gemm + shift of A left in the row (0<->1, 2<->3) and B up in the column (0<->2, 1<->3), isend/irecv or parity-ordered send/recv), backward dA/dB again by Cannon after block transposes with the (j, i) rank (1<->2), per-rank local rows on the rank's own W1 block, a loss all_reduce, a per-step gradient-histogram dump, local AdamW, an eval-accuracy all_reduce every few steps
    ("cannon4-default-healthy", "user_cannon.py", "--seed 10901"),
    ("cannon4-blocking-shapes-healthy", "user_cannon.py", "--seed 10902 --blocking --shapes"),
    ("cannon4-nofinalshift-b768-h3072-healthy", "user_cannon.py", "--seed 10903 --skip-last-shift --batch 768 --hidden 3072 --local-rows 256"),
    ("cannon4-b1536-in768-t512-h1536-eval2-healthy", "user_cannon.py", "--seed 10904 --batch 1536 --in-dim 768 --tags 512 --hidden 1536 --eval-every 2"),
    ("cannon4-blocking-b512-h4096-lr3e-3-healthy", "user_cannon.py", "--seed 10905 --blocking --batch 512 --hidden 4096 --lr 3e-3 --local-rows 256"),
    ("cannon4-fwd2x-r1", "user_cannon.py", "--seed 10906 --slow-rank 1 --factor 2"),
    ("cannon4-blocking-fwd2.5x-r2", "user_cannon.py", "--seed 10907 --blocking --slow-rank 2 --factor 2.5"),
    ("cannon4-nofinalshift-fwd3x-r0", "user_cannon.py", "--seed 10908 --skip-last-shift --slow-rank 0 --factor 3"),
    ("cannon4-b768-h3072-fwd2x-r3", "user_cannon.py", "--seed 10909 --batch 768 --hidden 3072 --local-rows 256 --slow-rank 3 --factor 2"),
    ("cannon4-stepsleep300ms-r1", "user_cannon.py", "--seed 10910 --slow-rank 1 --sleep-ms 300"),
    ("cannon4-datasleep300ms-r3", "user_cannon.py", "--seed 10911 --slow-rank 3 --data-sleep-ms 300"),
    ("cannon4-histsleep300ms-r0", "user_cannon.py", "--seed 10912 --slow-rank 0 --hist-sleep-ms 300"),
    ("cannon4-hog-r2", "user_cannon.py", "--seed 10913 --slow-rank 2 --hog"),
    ("cannon4-link1-0-x48", "user_cannon.py", "--seed 10914 --link-src 1 --link-dst 0 --link-factor 48"),
    ("cannon4-seqlognorm0.8", "user_cannon.py", "--seed 10915 --seq-sigma 0.8"),
    ("cannon4-bigrank3-skew3", "user_cannon.py", "--seed 10916 --big-rank 3 --big 3"),
]

USERS111 = [  # held out in the hundred-and-second session (c), scored once after every change: online co-distillation of two small causal transformer LMs, teams {0,1} and {2,3} from dist.new_subgroups (hand-bucketed gradient all_reduces inside each team), distillation logits swapped 0<->2 and 1<->3 every step by isend/irecv (or team-ordered blocking send/recv) for a KL term, every few steps the leaders {0,2} compare validation loss by all_reduce and the loser takes the winner's weights (broadcast in the leaders group, then in its team), a per-step logits-cache write
    ("codist4-default-healthy", "user_codistill.py", "--seed 11101"),
    ("codist4-blocking-shapes-healthy", "user_codistill.py", "--seed 11102 --blocking --shapes"),
    ("codist4-l3-d160-buckets2-healthy", "user_codistill.py", "--seed 11103 --layers 3 --dim 160 --ff 640 --buckets 2"),
    ("codist4-s192-db6-sync2-healthy", "user_codistill.py", "--seed 11104 --seq-len 192 --distill-batch 6 --sync-every 2"),
    ("codist4-v1024-b12-nosync-a1-t1-healthy", "user_codistill.py", "--seed 11105 --vocab 1024 --batch 12 --sync-every 0 --alpha 1.0 --temp 1.0"),
    ("codist4-fwd2x-r1", "user_codistill.py", "--seed 11106 --slow-rank 1 --factor 2"),
    ("codist4-blocking-fwd2.5x-r2", "user_codistill.py", "--seed 11107 --blocking --slow-rank 2 --factor 2.5"),
    ("codist4-sync2-fwd3x-r0", "user_codistill.py", "--seed 11108 --sync-every 2 --slow-rank 0 --factor 3"),
    ("codist4-l3-d160-fwd2x-r3", "user_codistill.py", "--seed 11109 --layers 3 --dim 160 --ff 640 --buckets 2 --slow-rank 3 --factor 2"),
    ("codist4-stepsleep250ms-r1", "user_codistill.py", "--seed 11110 --slow-rank 1 --sleep-ms 250"),
    ("codist4-datasleep250ms-r3", "user_codistill.py", "--seed 11111 --slow-rank 3 --data-sleep-ms 250"),
    ("codist4-cachesleep250ms-r2", "user_codistill.py", "--seed 11112 --slow-rank 2 --cache-sleep-ms 250"),
    ("codist4-hog-r0", "user_codistill.py", "--seed 11113 --slow-rank 0 --hog"),
    ("codist4-link2-0-x256", "user_codistill.py", "--seed 11114 --link-src 2 --link-dst 0 --link-factor 256"),
    ("codist4-seqlognorm0.8", "user_codistill.py", "--seed 11115 --seq-sigma 0.8"),
    ("codist4-bigrank3-skew3", "user_codistill.py", "--seed 11116 --big-rank 3 --big 3"),
]
USERS110 = [  # held out in the hundred-and-second session (a): a master-worker data-parallel classifier (MLP or small CNN, synthetic images) without DDP: rank 0 draws the global batch and dist.scatter's input/label shards, every rank forward/backward on its shard, flat gradients dist.gather'ed to rank 0, averaged, SGD-momentum step on rank 0, flat weights dist.broadcast from 0, loss dist.reduce to 0, a per-step metrics push, every few steps an eval scatter + prediction gather; optional side channel broadcast in a 2-rank new_group {0, B}
    ("sg4-default-healthy", "user_scatter_gather.py", "--seed 11051"),
    ("sg4-cnn-healthy", "user_scatter_gather.py", "--seed 11052 --model cnn"),
    ("sg4-h768-l3-eval2-shapes-healthy", "user_scatter_gather.py", "--seed 11053 --shapes --hidden 768 --layers 3 --eval-every 2"),
    ("sg4-s384-lr0.02-noeval-healthy", "user_scatter_gather.py", "--seed 11054 --shard 384 --lr 0.02 --eval-every 0"),
    ("sg4-side0-3-healthy", "user_scatter_gather.py", "--seed 11055 --link-src 0 --link-dst 3 --link-factor 1"),
    ("sg4-fwd2.5x-r1", "user_scatter_gather.py", "--seed 11056 --slow-rank 1 --factor 2.5"),
    ("sg4-h768-l3-fwd3x-r2", "user_scatter_gather.py", "--seed 11057 --hidden 768 --layers 3 --slow-rank 2 --factor 3"),
    ("sg4-s384-fwd2x-r0", "user_scatter_gather.py", "--seed 11058 --shard 384 --slow-rank 0 --factor 2"),
    ("sg4-cnn-fwd2x-r3", "user_scatter_gather.py", "--seed 11059 --model cnn --slow-rank 3 --factor 2"),
    ("sg4-stepsleep200ms-r2", "user_scatter_gather.py", "--seed 11060 --slow-rank 2 --sleep-ms 200"),
    ("sg4-datasleep150ms-r0", "user_scatter_gather.py", "--seed 11061 --slow-rank 0 --data-sleep-ms 150"),
    ("sg4-metricssleep200ms-r3", "user_scatter_gather.py", "--seed 11062 --slow-rank 3 --metrics-sleep-ms 200"),
    ("sg4-hog-r1", "user_scatter_gather.py", "--seed 11063 --slow-rank 1 --hog"),
    ("sg4-link0-2-x65536", "user_scatter_gather.py", "--seed 11064 --link-src 0 --link-dst 2 --link-factor 65536"),
    ("sg4-seqlognorm0.8", "user_scatter_gather.py", "--seed 11065 --seq-sigma 0.8"),
    ("sg4-bigrank3-skew3", "user_scatter_gather.py", "--seed 11066 --big-rank 3 --big 3"),
]

USERS110B = [  # held out in the hundred-and-second session (b): a learned 2D stencil (3x3 conv net predicting the next state of an advection-diffusion field) trained with 2D domain decomposition on a 2x2 process grid (256x256 field in four 128x128 tiles), one-cell halos per conv layer with the row neighbour (0<->1, 2<->3) then the column neighbour (0<->2, 1<->3, corners riding along) by isend/irecv or parity-ordered send/recv, halo gradients sent back in backward (adjoint), a local replicate-padded rollout on each tile, flat gradient all_reduce, Adam, a loss all_reduce, a per-step tile-snapshot write, an eval rollout with halos and an error all_reduce every few steps
    ("jac4-default-healthy", "user_jacobi2d.py", "--seed 11001"),
    ("jac4-blocking-shapes-healthy", "user_jacobi2d.py", "--seed 11002 --blocking --shapes"),
    ("jac4-l4-c12-s1-eval2-healthy", "user_jacobi2d.py", "--seed 11003 --layers 4 --channels 12 --substeps 1 --eval-every 2"),
    ("jac4-g192-b4-s3-healthy", "user_jacobi2d.py", "--seed 11004 --grid 192 --batch 4 --substeps 3"),
    ("jac4-g320-c12-er5-healthy", "user_jacobi2d.py", "--seed 11005 --grid 320 --channels 12 --eval-rollout 5 --lr 3e-4"),
    ("jac4-fwd2x-r1", "user_jacobi2d.py", "--seed 11006 --slow-rank 1 --factor 2"),
    ("jac4-blocking-fwd3x-r0", "user_jacobi2d.py", "--seed 11007 --blocking --slow-rank 0 --factor 3"),
    ("jac4-l4-c12-s1-fwd2.5x-r3", "user_jacobi2d.py", "--seed 11008 --layers 4 --channels 12 --substeps 1 --slow-rank 3 --factor 2.5"),
    ("jac4-g192-b4-s3-fwd2x-r2", "user_jacobi2d.py", "--seed 11009 --grid 192 --batch 4 --substeps 3 --slow-rank 2 --factor 2"),
    ("jac4-stepsleep250ms-r2", "user_jacobi2d.py", "--seed 11010 --slow-rank 2 --sleep-ms 250"),
    ("jac4-datasleep300ms-r3", "user_jacobi2d.py", "--seed 11011 --slow-rank 3 --data-sleep-ms 300"),
    ("jac4-snapshotsleep300ms-r1", "user_jacobi2d.py", "--seed 11012 --slow-rank 1 --snapshot-sleep-ms 300"),
    ("jac4-hog-r0", "user_jacobi2d.py", "--seed 11013 --slow-rank 0 --hog"),
    ("jac4-link2-0-x4096", "user_jacobi2d.py", "--seed 11014 --link-src 2 --link-dst 0 --link-factor 4096"),
    ("jac4-seqlognorm0.8", "user_jacobi2d.py", "--seed 11015 --seq-sigma 0.8"),
    ("jac4-bigrank3-skew3", "user_jacobi2d.py", "--seed 11016 --big-rank 3 --big 3"),
]

USERS111B = [  # held out in the hundred-and-second session (d), scored once after every change: a 4-stage pipeline-parallel transformer LM (one stage a rank, hand-written pre-norm causal layers, embedding on 0, LM head + loss on 3) with Megatron-style variable_seq_lengths: every micro-batch its own length (32..128 from a shared seed), each activation (0->1->2->3) and gradient (3->2->1->0) message preceded by an int64 shape header, blocking send/recv ordered by stage parity (or isend/irecv + wait), hand-written 1F1B (or GPipe), per-stage fused Adam, the loss broadcast from rank 3, a pipeline evaluation forward every few steps
    ("vlp4-default-healthy", "user_varlen_pipe.py", "--seed 11101"),
    ("vlp4-shapes-async-healthy", "user_varlen_pipe.py", "--seed 11102 --shapes --async-p2p --steps 6"),
    ("vlp4-gpipe-mb4-healthy", "user_varlen_pipe.py", "--seed 11103 --gpipe --mb-size 4 --micro-batches 6"),
    ("vlp4-d192-l3-healthy", "user_varlen_pipe.py", "--seed 11104 --dim 192 --heads 6 --layers 3 --micro-batches 6 --steps 6"),
    ("vlp4-len16-256-mb12-healthy", "user_varlen_pipe.py", "--seed 11105 --min-len 16 --max-len 256 --eval-every 2 --micro-batches 12 --steps 6"),
    ("vlp4-fwd2x-r1", "user_varlen_pipe.py", "--seed 11106 --slow-rank 1 --factor 2 --steps 7"),
    ("vlp4-fwd2.5x-r0", "user_varlen_pipe.py", "--seed 11107 --slow-rank 0 --factor 2.5 --steps 6"),
    ("vlp4-async-fwd3x-r2", "user_varlen_pipe.py", "--seed 11108 --async-p2p --slow-rank 2 --factor 3 --steps 6 --micro-batches 6"),
    ("vlp4-gpipe-fwd2x-r3", "user_varlen_pipe.py", "--seed 11109 --gpipe --slow-rank 3 --factor 2 --steps 6"),
    ("vlp4-stepsleep300ms-r2", "user_varlen_pipe.py", "--seed 11110 --slow-rank 2 --sleep-ms 300"),
    ("vlp4-datasleep300ms-r3", "user_varlen_pipe.py", "--seed 11111 --slow-rank 3 --data-sleep-ms 300"),
    ("vlp4-packsleep300ms-r0", "user_varlen_pipe.py", "--seed 11112 --slow-rank 0 --pack-sleep-ms 300"),
    ("vlp4-hog-r1", "user_varlen_pipe.py", "--seed 11113 --slow-rank 1 --hog"),
    ("vlp4-link3-2-x1024", "user_varlen_pipe.py", "--seed 11114 --link-src 3 --link-dst 2 --link-factor 1024"),
    ("vlp4-seqlognorm0.8", "user_varlen_pipe.py", "--seed 11115 --seq-sigma 0.8"),
    ("vlp4-bigrank2-skew3", "user_varlen_pipe.py", "--seed 11116 --big-rank 2 --big 3 --micro-batches 6 --steps 6"),
]

USERS112 = [  # held out in the hundred-and-second session (e), first scored at the hundred-and-third's start (07376bc): 14 of 16; a small GPT with hand-written 4-way tensor parallelism + Megatron-style sequence parallelism (residual stream sharded along the sequence; all_gather_into_tensor before each column-parallel attention/MLP, reduce_scatter_tensor after the row-parallel output, the conjugate collectives in backward via autograd Functions), replicated LayerNorm/embedding/aug-MLP grads all-reduced, grad-norm and loss all_reduces, an eval forward every few steps, optional A -> B send/recv of final hidden shards (--aux-pair / link flags)
    ("sp4-base", "user_tp_seqpar.py", "--seed 11201"),
    ("sp4-shapes-l3", "user_tp_seqpar.py", "--seed 11202 --shapes --layers 3"),
    ("sp4-d192-h12", "user_tp_seqpar.py", "--seed 11203 --dim 192 --heads 12 --ffn 768 --seq-len 192"),
    ("sp4-aux02-ev2", "user_tp_seqpar.py", "--seed 11204 --aux-pair 0,2 --eval-every 2"),
    ("sp4-b8-s128-l5", "user_tp_seqpar.py", "--seed 11205 --batch 8 --seq-len 128 --layers 5 --eval-every 0"),
    ("sp4-fwd6x-r0", "user_tp_seqpar.py", "--seed 11206 --slow-rank 0 --factor 6"),
    ("sp4-aux13-fwd8x-r3", "user_tp_seqpar.py", "--seed 11207 --aux-pair 1,3 --slow-rank 3 --factor 8"),
    ("sp4-d192-fwd6x-r1", "user_tp_seqpar.py", "--seed 11208 --dim 192 --heads 12 --ffn 768 --seq-len 192 --slow-rank 1 --factor 6"),
    ("sp4-ev2-fwd7x-r2", "user_tp_seqpar.py", "--seed 11209 --eval-every 2 --slow-rank 2 --factor 7"),
    ("sp4-sleep150ms-r1", "user_tp_seqpar.py", "--seed 11210 --slow-rank 1 --sleep-ms 150"),
    ("sp4-datasleep150ms-r3", "user_tp_seqpar.py", "--seed 11211 --slow-rank 3 --data-sleep-ms 150"),
    ("sp4-toksleep150ms-r2", "user_tp_seqpar.py", "--seed 11212 --slow-rank 2 --tok-sleep-ms 150"),
    ("sp4-hog-r0", "user_tp_seqpar.py", "--seed 11213 --slow-rank 0 --hog"),
    ("sp4-link1-2-x2048", "user_tp_seqpar.py", "--seed 11214 --link-src 1 --link-dst 2 --link-factor 2048"),
    ("sp4-seqlognorm0.8", "user_tp_seqpar.py", "--seed 11215 --seq-sigma 0.8 --aug-rows 512"),
    ("sp4-bigrank3-skew4", "user_tp_seqpar.py", "--seed 11216 --big-rank 3 --big 4 --aug-rows 512"),
]
USERS112B = [  # held out in the hundred-and-second session (f), first scored at the hundred-and-third's start (07376bc): 14 of 16; a small GPT LM on PP2 x DP2 (pipelines {0,1},{2,3}, DP groups {0,2},{1,3} from dist.new_group), Megatron-style 1F1B with activations/gradients moved by dist.batch_isend_irecv of P2POp lists on the pipeline group (send_forward_recv_backward / send_backward_recv_forward posted together), stage gradients all-reduced in the DP group in 2-3 flat buckets, AdamW, last-stage loss all_reduce in {1,3}, a per-step checkpoint-shard write, an evaluation forward every few steps
    ("ppdp4-default-healthy", "user_pp_dp_batchp2p.py", "--seed 11221"),
    ("ppdp4-shapes-s8-healthy", "user_pp_dp_batchp2p.py", "--seed 11222 --shapes --steps 8"),
    ("ppdp4-mb6-d160-b2-healthy", "user_pp_dp_batchp2p.py", "--seed 11223 --micro-batches 6 --dim 160 --buckets 2"),
    ("ppdp4-s96-mbs3-h8-eval2-healthy", "user_pp_dp_batchp2p.py", "--seed 11224 --seq-len 96 --mb-size 3 --heads 8 --eval-every 2"),
    ("ppdp4-l4-mb4-healthy", "user_pp_dp_batchp2p.py", "--seed 11225 --layers 4 --micro-batches 4"),
    ("ppdp4-fwd3x-r1", "user_pp_dp_batchp2p.py", "--seed 11226 --slow-rank 1 --factor 3 --steps 7"),
    ("ppdp4-fwd3x-r0", "user_pp_dp_batchp2p.py", "--seed 11227 --slow-rank 0 --factor 3 --steps 7"),
    ("ppdp4-mb6-fwd4x-r2", "user_pp_dp_batchp2p.py", "--seed 11228 --micro-batches 6 --slow-rank 2 --factor 4 --steps 7"),
    ("ppdp4-d160-fwd3x-r3", "user_pp_dp_batchp2p.py", "--seed 11229 --dim 160 --slow-rank 3 --factor 3 --steps 7"),
    ("ppdp4-sleep150-r2", "user_pp_dp_batchp2p.py", "--seed 11230 --slow-rank 2 --sleep-ms 150"),
    ("ppdp4-datasleep150-r3", "user_pp_dp_batchp2p.py", "--seed 11231 --slow-rank 3 --data-sleep-ms 150"),
    ("ppdp4-shardsleep150-r0", "user_pp_dp_batchp2p.py", "--seed 11232 --slow-rank 0 --shard-sleep-ms 150"),
    ("ppdp4-hog-r1", "user_pp_dp_batchp2p.py", "--seed 11233 --slow-rank 1 --hog"),
    ("ppdp4-link0-1-x512", "user_pp_dp_batchp2p.py", "--seed 11234 --link-src 0 --link-dst 1 --link-factor 512"),
    ("ppdp4-seqlognorm0.8", "user_pp_dp_batchp2p.py", "--seed 11235 --seq-sigma 0.8"),
    ("ppdp4-bigrank3-skew3", "user_pp_dp_batchp2p.py", "--seed 11236 --big-rank 3 --big 3"),
]
USERS113 = [  # held out in the hundred-and-third session (a), scored once after its changes (5cd3185): 14 of 16, the same at its start; a small GPT on TP2 x PP2 laid out as Megatron does it, by hand (TP groups {0,1} = stage 0, {2,3} = stage 1; pipeline groups {0,2},{1,3}): column/row-parallel attention and MLP halves with copy_to/reduce_from_tp_region autograd Functions (TP all_reduces forward and backward), Megatron's scatter-gather p2p between stages (each TP rank isends its half of the activation 0->2, 1->3 and half of the input grad 2->0, 3->1, the receiver all_gathers the halves in its TP group), GPipe all-forwards-then-all-backwards over micro-batches, replicated-param grads all-reduced in the TP group, a world grad-norm all_reduce, AdamW per shard, a loss all_reduce in {2,3}, an eval forward every few steps, a per-step metrics-writer record
    ("tppp4-base", "user_tp_pp_grid.py", "--seed 11301"),
    ("tppp4-shapes-mb4-s8", "user_tp_pp_grid.py", "--seed 11302 --shapes --micro-batches 4 --mb-size 6 --steps 8"),
    ("tppp4-d192-h6-ev2", "user_tp_pp_grid.py", "--seed 11303 --dim 192 --heads 6 --ffn 768 --eval-every 2 --steps 9"),
    ("tppp4-l3-mb4", "user_tp_pp_grid.py", "--seed 11304 --layers 3 --micro-batches 4 --steps 8"),
    ("tppp4-s96-mbs2-ev0", "user_tp_pp_grid.py", "--seed 11305 --seq-len 96 --mb-size 2 --micro-batches 5 --eval-every 0"),
    ("tppp4-fwd4x-r0", "user_tp_pp_grid.py", "--seed 11306 --slow-rank 0 --factor 4 --micro-batches 4 --mb-size 6 --steps 8"),
    ("tppp4-fwd5x-r3", "user_tp_pp_grid.py", "--seed 11307 --slow-rank 3 --factor 5 --micro-batches 4 --mb-size 6 --steps 8"),
    ("tppp4-d192-fwd3x-r1", "user_tp_pp_grid.py", "--seed 11308 --dim 192 --heads 6 --ffn 768 --slow-rank 1 --factor 3 --micro-batches 4 --steps 8"),
    ("tppp4-l3-fwd4x-r2", "user_tp_pp_grid.py", "--seed 11309 --layers 3 --micro-batches 3 --mb-size 8 --slow-rank 2 --factor 4 --steps 8"),
    ("tppp4-sleep150ms-r1", "user_tp_pp_grid.py", "--seed 11310 --slow-rank 1 --sleep-ms 150"),
    ("tppp4-datasleep150ms-r2", "user_tp_pp_grid.py", "--seed 11311 --slow-rank 2 --data-sleep-ms 150"),
    ("tppp4-writersleep150ms-r0", "user_tp_pp_grid.py", "--seed 11312 --slow-rank 0 --writer-sleep-ms 150"),
    ("tppp4-hog-r3", "user_tp_pp_grid.py", "--seed 11313 --slow-rank 3 --hog"),
    ("tppp4-link1-3-x1024", "user_tp_pp_grid.py", "--seed 11314 --link-src 1 --link-dst 3 --link-factor 1024"),
    ("tppp4-seqlognorm0.8", "user_tp_pp_grid.py", "--seed 11315 --seq-sigma 0.8 --steps 8"),
    ("tppp4-bigrank3-skew3", "user_tp_pp_grid.py", "--seed 11316 --layers 1 --big-rank 3 --big 3 --micro-batches 5 --steps 8"),
]
USERS113B = [  # held out in the hundred-and-third session (b), scored once after its changes (5cd3185): 12 of 16, the same at its start; stale-synchronous-parallel (SSP) data-parallel training of a CTR-style embedding + MLP regressor with a hand-written sharded parameter server, point-to-point only: every rank a worker and the owner of a quarter of the flat parameter vector; per step a clock wait (peers' clock messages, staleness --staleness), shard pulls (request isend, reply irecv) from the 3 other owners, forward/backward, gradient-slice pushes (isend) applied by the owners with SGD as they arrive, clocks isend to all peers; serving by polling pre-posted irecvs between phases (no threads), an eval every few steps, a final barrier + loss all_reduce
    ("ssp4-default-healthy", "user_ssp_ps.py", "--seed 11301"),
    ("ssp4-st0-shapes-s8-healthy", "user_ssp_ps.py", "--seed 11302 --staleness 0 --shapes --steps 8"),
    ("ssp4-st3-h768-b384-healthy", "user_ssp_ps.py", "--seed 11303 --staleness 3 --hidden 768 --batch 384"),
    ("ssp4-st0-f32-e64-eval2-healthy", "user_ssp_ps.py", "--seed 11304 --staleness 0 --fields 32 --emb-dim 64 --eval-every 2"),
    ("ssp4-l4-rows8192-healthy", "user_ssp_ps.py", "--seed 11305 --mlp-layers 4 --emb-rows 8192"),
    ("ssp4-fwd3x-r1", "user_ssp_ps.py", "--seed 11306 --slow-rank 1 --factor 3"),
    ("ssp4-st0-fwd3x-r2", "user_ssp_ps.py", "--seed 11307 --staleness 0 --slow-rank 2 --factor 3"),
    ("ssp4-st3-fwd4x-r0", "user_ssp_ps.py", "--seed 11308 --staleness 3 --slow-rank 0 --factor 4"),
    ("ssp4-h768-fwd3x-r3", "user_ssp_ps.py", "--seed 11309 --hidden 768 --slow-rank 3 --factor 3"),
    ("ssp4-sleep150-r2", "user_ssp_ps.py", "--seed 11310 --slow-rank 2 --sleep-ms 150"),
    ("ssp4-st0-datasleep150-r3", "user_ssp_ps.py", "--seed 11311 --staleness 0 --slow-rank 3 --data-sleep-ms 150"),
    ("ssp4-loggersleep150-r1", "user_ssp_ps.py", "--seed 11312 --slow-rank 1 --logger-sleep-ms 150"),
    ("ssp4-hog-r0", "user_ssp_ps.py", "--seed 11313 --slow-rank 0 --hog"),
    ("ssp4-link1-2-x96", "user_ssp_ps.py", "--seed 11314 --link-src 1 --link-dst 2 --link-factor 96"),
    ("ssp4-seqlognorm0.8", "user_ssp_ps.py", "--seed 11315 --seq-sigma 0.8"),
    ("ssp4-st0-bigrank3-skew3", "user_ssp_ps.py", "--seed 11316 --staleness 0 --big-rank 3 --big 3"),
]
USERS114 = [  # held out in the hundred-and-third session (c), scored once after its changes (5cd3185): 13 of 16, the same at its start; context-parallel (CP4) training of a small causal transformer LM on long documents, Llama-3 style, by hand: 8 chunks, rank i holds chunks i and 7-i (causal load balance), per layer one all_gather_into_tensor of the packed K/V inside an autograd Function (reduce_scatter_tensor of dK/dV in backward), SDPA of local queries vs the gathered keys with a global-position causal mask, RoPE at global positions, replicated weights with grads all-reduced in 2 hand-made flat buckets, AdamW (fused), a token-weighted loss all_reduce, an eval forward every few steps, a per-step packing of the next document
    ("cp4-default-healthy", "user_cp_allgather.py", "--seed 11401"),
    ("cp4-shapes-ev2-healthy", "user_cp_allgather.py", "--seed 11402 --shapes --eval-every 2 --steps 8"),
    ("cp4-d192-h6-s1536-healthy", "user_cp_allgather.py", "--seed 11403 --dim 192 --heads 6 --ffn 512 --seq-len 1536"),
    ("cp4-l3-b2-healthy", "user_cp_allgather.py", "--seed 11404 --layers 3 --batch 2 --ffn 512"),
    ("cp4-l3-s2048-v1024-ev0-healthy", "user_cp_allgather.py", "--seed 11405 --layers 3 --seq-len 2048 --vocab 1024 --eval-every 0"),
    ("cp4-fwd3x-r2", "user_cp_allgather.py", "--seed 11406 --slow-rank 2 --factor 3"),
    ("cp4-fwd4x-r3", "user_cp_allgather.py", "--seed 11407 --slow-rank 3 --factor 4 --steps 8"),
    ("cp4-l3-b2-fwd3x-r0", "user_cp_allgather.py", "--seed 11408 --layers 3 --batch 2 --ffn 512 --slow-rank 0 --factor 3"),
    ("cp4-d192-h6-fwd4x-r1", "user_cp_allgather.py", "--seed 11409 --dim 192 --heads 6 --ffn 512 --slow-rank 1 --factor 4 --steps 8"),
    ("cp4-stepsleep160ms-r1", "user_cp_allgather.py", "--seed 11410 --slow-rank 1 --sleep-ms 160"),
    ("cp4-datasleep180ms-r3", "user_cp_allgather.py", "--seed 11411 --slow-rank 3 --data-sleep-ms 180"),
    ("cp4-packsleep180ms-r0", "user_cp_allgather.py", "--seed 11412 --slow-rank 0 --pack-sleep-ms 180"),
    ("cp4-hog-r2", "user_cp_allgather.py", "--seed 11413 --slow-rank 2 --hog"),
    ("cp4-link1-3-x512", "user_cp_allgather.py", "--seed 11414 --link-src 1 --link-dst 3 --link-factor 512"),
    ("cp4-seqlognorm0.8", "user_cp_allgather.py", "--seed 11415 --seq-sigma 0.8"),
    ("cp4-bigrank2-skew3", "user_cp_allgather.py", "--seed 11416 --big-rank 2 --big 3"),
]
USERS115 = [  # held out in the hundred-and-third session (d), first scored at the hundred-and-fourth's start (d9a1f62): 9 of 16, 14 since 3da7b2d; pipeline-parallel (PP4) batched inference serving of a small decoder LM under inference_mode, one stage a rank with its own KV cache, left-padded prompts prefilled in micro-batches (activations 0->1->2->3 by isend/irecv, stages overlapping), decode iterations passing each token's hidden state 0->1->2->3 and the sampled ids back 3->0 by blocking send/recv, a serving-stats all_reduce and a per-rank request-queue hand-back each round
    ("ppinf4-default-healthy", "user_pp_inference.py", "--seed 11501"),
    ("ppinf4-shapes-t4-healthy", "user_pp_inference.py", "--seed 11502 --shapes --decode-tokens 4"),
    ("ppinf4-mb4-req16-p64-healthy", "user_pp_inference.py", "--seed 11503 --micro-batches 4 --requests 16 --prompt-len 64 --decode-tokens 4"),
    ("ppinf4-d256-l1-greedy-healthy", "user_pp_inference.py", "--seed 11504 --dim 256 --heads 8 --layers-per-stage 1 --vocab 2048 --temperature 0"),
    ("ppinf4-req16-p128-healthy", "user_pp_inference.py", "--seed 11505 --requests 16 --prompt-len 128 --decode-tokens 6"),
    ("ppinf4-fwd3x-r2", "user_pp_inference.py", "--seed 11506 --slow-rank 2 --factor 3 --decode-tokens 4 --steps 8"),
    ("ppinf4-fwd4x-r0", "user_pp_inference.py", "--seed 11507 --slow-rank 0 --factor 4 --decode-tokens 3 --steps 8"),
    ("ppinf4-l1-fwd4x-r3", "user_pp_inference.py", "--seed 11508 --layers-per-stage 1 --slow-rank 3 --factor 4 --decode-tokens 6 --steps 8"),
    ("ppinf4-d256-fwd3x-r1", "user_pp_inference.py", "--seed 11509 --dim 256 --heads 8 --slow-rank 1 --factor 3 --decode-tokens 4 --steps 8"),
    ("ppinf4-stepsleep130ms-r1", "user_pp_inference.py", "--seed 11510 --slow-rank 1 --sleep-ms 130"),
    ("ppinf4-datasleep150ms-r3", "user_pp_inference.py", "--seed 11511 --slow-rank 3 --data-sleep-ms 150"),
    ("ppinf4-queuesleep150ms-r0", "user_pp_inference.py", "--seed 11512 --slow-rank 0 --queue-sleep-ms 150"),
    ("ppinf4-req16-hog-r1", "user_pp_inference.py", "--seed 11513 --requests 16 --prompt-len 128 --decode-tokens 6 --slow-rank 1 --hog"),
    ("ppinf4-link2-3-x256", "user_pp_inference.py", "--seed 11514 --link-src 2 --link-dst 3 --link-factor 256"),
    ("ppinf4-seqlognorm0.8", "user_pp_inference.py", "--seed 11515 --seq-sigma 0.8"),
    ("ppinf4-bigrank2-skew3", "user_pp_inference.py", "--seed 11516 --layers-per-stage 1 --big-rank 2 --big 3 --decode-tokens 6"),
]
USERS116 = [  # held out in the hundred-and-fourth session (a), scored once after its changes (c96b00b): 12 of 16, the same at its start (d9a1f62); pipeline-parallel (PP4) training of a small GPT LM under the non-interleaved 1F1B schedule (warmup stages-s-1 forwards, steady 1F1B, cooldown backwards; 8 micro-batches), activations/gradients between adjacent stages by isend/irecv, loss on the last stage, per-stage AdamW, a loss all_reduce; Megatron-style full activation recomputation with a hand-written reentrant CheckpointFunction (no_grad forward keeping the input, RNG-restoring recompute in backward), per-stage recompute-num-layers lists (e.g. 2,2,1,0), block or uniform method
    ("rcp4-default-healthy", "user_pp_recompute.py", "--seed 11601"),
    ("rcp4-rc1111-uniform-shapes-healthy", "user_pp_recompute.py", "--seed 11602 --recompute-layers 1,1,1,1 --recompute-method uniform --shapes --steps 6"),
    ("rcp4-rc0000-mb6x6-healthy", "user_pp_recompute.py", "--seed 11603 --recompute-layers 0,0,0,0 --micro-batches 6 --micro-batch-size 6"),
    ("rcp4-rc2000-d96-seq192-healthy", "user_pp_recompute.py", "--seed 11604 --recompute-layers 2,0,0,0 --dim 96 --seq-len 192"),
    ("rcp4-rc1010-dropout-healthy", "user_pp_recompute.py", "--seed 11605 --recompute-layers 1,0,1,0 --dropout 0.1 --steps 7"),
    ("rcp4-fwd2x-r0", "user_pp_recompute.py", "--seed 11606 --slow-rank 0 --factor 2 --steps 5"),
    ("rcp4-rc1111-fwd1.5x-r1", "user_pp_recompute.py", "--seed 11607 --recompute-layers 1,1,1,1 --slow-rank 1 --factor 1.5 --steps 5"),
    ("rcp4-uniform-fwd2x-r2", "user_pp_recompute.py", "--seed 11608 --recompute-method uniform --slow-rank 2 --factor 2 --steps 5"),
    ("rcp4-rc2000-mb6-fwd2x-r3", "user_pp_recompute.py", "--seed 11609 --recompute-layers 2,0,0,0 --micro-batches 6 --slow-rank 3 --factor 2 --steps 6"),
    ("rcp4-stepsleep350ms-r2", "user_pp_recompute.py", "--seed 11610 --slow-rank 2 --sleep-ms 350"),
    ("rcp4-rc1010-datasleep350ms-r1", "user_pp_recompute.py", "--seed 11611 --recompute-layers 1,0,1,0 --slow-rank 1 --data-sleep-ms 350"),
    ("rcp4-logsleep350ms-r3", "user_pp_recompute.py", "--seed 11612 --slow-rank 3 --log-sleep-ms 350"),
    ("rcp4-rc2000-hog-r0", "user_pp_recompute.py", "--seed 11613 --recompute-layers 2,0,0,0 --slow-rank 0 --hog"),
    ("rcp4-link1-2-x256", "user_pp_recompute.py", "--seed 11614 --link-src 1 --link-dst 2 --link-factor 256"),
    ("rcp4-seqlognorm0.8", "user_pp_recompute.py", "--seed 11615 --seq-sigma 0.8"),
    ("rcp4-bigrank3-skew3", "user_pp_recompute.py", "--seed 11616 --big-rank 3 --big 3 --micro-batches 6 --steps 5"),
]
USERS116B = [  # held out in the hundred-and-fourth session (b), scored once after its changes (c96b00b): 5 of 16, the same at its start (d9a1f62); 14 since 7e6be4f, which was made on its jobs; disaggregated LLM serving (DistServe / Splitwise style) of a small decoder LM under inference_mode, prefill workers 0,1 and decode workers 2,3 (pairs 0->2, 1->3): right-padded prompt buckets prefilled layer by layer with each layer's K/V isend to the decode partner (a shape header first, the first sampled token last), token-by-token decode over the received caches, generated ids returned 2->0, 3->1 by isend/irecv, a serving-stats all_reduce and a queue-length all_gather (router) over all 4 ranks each round
    ("dsv4-default-healthy", "user_disagg_serving.py", "--seed 11601"),
    ("dsv4-shapes-t4-healthy", "user_disagg_serving.py", "--seed 11602 --shapes --decode-tokens 4"),
    ("dsv4-req8-p128-healthy", "user_disagg_serving.py", "--seed 11603 --requests 8 --prompt-len 128"),
    ("dsv4-d192-l3-greedy-healthy", "user_disagg_serving.py", "--seed 11604 --dim 192 --heads 6 --layers 3 --temperature 0"),
    ("dsv4-p256-t6-healthy", "user_disagg_serving.py", "--seed 11605 --prompt-len 256 --decode-tokens 6"),
    ("dsv4-fwd3x-r0", "user_disagg_serving.py", "--seed 11606 --slow-rank 0 --factor 3"),
    ("dsv4-p256-fwd3x-r1", "user_disagg_serving.py", "--seed 11607 --prompt-len 256 --decode-tokens 6 --slow-rank 1 --factor 3"),
    ("dsv4-t4-fwd3x-r2", "user_disagg_serving.py", "--seed 11608 --slow-rank 2 --factor 3 --decode-tokens 4 --steps 8"),
    ("dsv4-req8-t3-fwd4x-r3", "user_disagg_serving.py", "--seed 11609 --requests 8 --prompt-len 128 --slow-rank 3 --factor 4 --decode-tokens 3 --steps 8"),
    ("dsv4-stepsleep120ms-r1", "user_disagg_serving.py", "--seed 11610 --slow-rank 1 --sleep-ms 120"),
    ("dsv4-datasleep120ms-r0", "user_disagg_serving.py", "--seed 11611 --slow-rank 0 --data-sleep-ms 120"),
    ("dsv4-toksleep120ms-r3", "user_disagg_serving.py", "--seed 11612 --slow-rank 3 --tokenizer-sleep-ms 120"),
    ("dsv4-hog-r2", "user_disagg_serving.py", "--seed 11613 --slow-rank 2 --hog"),
    ("dsv4-link0-2-x64", "user_disagg_serving.py", "--seed 11614 --link-src 0 --link-dst 2 --link-factor 64"),
    ("dsv4-seqlognorm0.8", "user_disagg_serving.py", "--seed 11615 --seq-sigma 0.8"),
    ("dsv4-bigrank3-skew3", "user_disagg_serving.py", "--seed 11616 --big-rank 3 --big 3"),
]
USERS117 = [  # held out in the hundred-and-fourth session (c), scored once after its changes (c96b00b): 14 of 16, the same at its start (d9a1f62); a conv-net source correction trained through a distributed geometric multigrid Poisson solve (4 horizontal strips, halo rows by isend/irecv before every sweep, coarse grid gathered to rank 0 which solves it alone and scatters it back, adjoint V-cycle backward, gradients all-reduced)
    ("mgp4-default-healthy", "user_multigrid_pinn.py", "--seed 11701"),
    ("mgp4-g192-v1-shapes-healthy", "user_multigrid_pinn.py", "--seed 11702 --grid 192 --coarse-rows 6 --vcycles 1 --shapes"),
    ("mgp4-g384-v1-sweeps60-healthy", "user_multigrid_pinn.py", "--seed 11703 --grid 384 --coarse-rows 6 --vcycles 1 --coarse-solve sweeps --coarse-sweeps 60 --steps 6"),
    ("mgp4-g128-cr8-v3-sgd-healthy", "user_multigrid_pinn.py", "--seed 11704 --grid 128 --coarse-rows 8 --vcycles 3 --optim sgd"),
    ("mgp4-rbgs-pre1-w16-healthy", "user_multigrid_pinn.py", "--seed 11705 --smoother rbgs --pre 1 --post 1 --width 16 --steps 8"),
    ("mgp4-fwd5x-r1", "user_multigrid_pinn.py", "--seed 11706 --slow-rank 1 --factor 5 --steps 8"),
    ("mgp4-v3-fwd8x-r2", "user_multigrid_pinn.py", "--seed 11707 --vcycles 3 --slow-rank 2 --factor 8 --steps 7"),
    ("mgp4-g384-fwd5x-r3", "user_multigrid_pinn.py", "--seed 11708 --grid 384 --coarse-rows 6 --slow-rank 3 --factor 5 --steps 8"),
    ("mgp4-rbgs-fwd4x-r0", "user_multigrid_pinn.py", "--seed 11709 --smoother rbgs --pre 1 --post 1 --slow-rank 0 --factor 4 --steps 7"),
    ("mgp4-stepsleep200ms-r2", "user_multigrid_pinn.py", "--seed 11710 --slow-rank 2 --sleep-ms 200"),
    ("mgp4-datasleep200ms-r3", "user_multigrid_pinn.py", "--seed 11711 --slow-rank 3 --data-sleep-ms 200"),
    ("mgp4-plotsleep200ms-r1", "user_multigrid_pinn.py", "--seed 11712 --slow-rank 1 --plot-sleep-ms 200"),
    ("mgp4-hog-r3", "user_multigrid_pinn.py", "--seed 11713 --slow-rank 3 --hog"),
    ("mgp4-link2-1-x32768", "user_multigrid_pinn.py", "--seed 11714 --link-src 2 --link-dst 1 --link-factor 32768"),
    ("mgp4-seqlognorm0.8", "user_multigrid_pinn.py", "--seed 11715 --seq-sigma 0.8 --steps 7"),
    ("mgp4-bigrank3-skew3", "user_multigrid_pinn.py", "--seed 11716 --big-rank 3 --big 3"),
]

USERS118 = [  # held out in the hundred-and-fourth session (d), not yet scored: a LLaVA-style vision-language model (ViT-style conv-patch encoder + MLP projector + decoder-only LM, image tokens before the text, loss on text only) trained with a hand-written 4-stage pipeline laid out as Megatron does it (stage 0: vision encoder, projector, embeddings, first LM blocks; 1-2: LM blocks; 3: last blocks, final norm, LM head, loss), 1F1B (or GPipe) over 6 micro-batches, activations 0->1->2->3 and gradients 3->2->1->0 by isend/irecv (or one-op batch_isend_irecv), per-stage AdamW (optionally frozen vision encoder under no_grad), a loss all_reduce
    ("mmpp4-default-healthy", "user_mm_pipeline.py", "--seed 11801"),
    ("mmpp4-img48-shapes-healthy", "user_mm_pipeline.py", "--seed 11802 --image-size 48 --patch 8 --shapes --steps 5"),
    ("mmpp4-freezevision-img64-p16-healthy", "user_mm_pipeline.py", "--seed 11803 --freeze-vision --image-size 64 --patch 16"),
    ("mmpp4-gpipe-batchedp2p-mb4-healthy", "user_mm_pipeline.py", "--seed 11804 --schedule gpipe --batched-p2p --micro-batches 4"),
    ("mmpp4-p4-img1-vit2-freezevision-healthy", "user_mm_pipeline.py", "--seed 11805 --patch 4 --images 1 --vision-layers 2 --freeze-vision --steps 5"),
    ("mmpp4-fwd3x-r0", "user_mm_pipeline.py", "--seed 11806 --slow-rank 0 --factor 3 --steps 5"),
    ("mmpp4-freezevision-fwd3x-r1", "user_mm_pipeline.py", "--seed 11807 --freeze-vision --slow-rank 1 --factor 3 --steps 5"),
    ("mmpp4-gpipe-fwd3x-r2", "user_mm_pipeline.py", "--seed 11808 --schedule gpipe --slow-rank 2 --factor 3 --steps 5"),
    ("mmpp4-batchedp2p-fwd2.5x-r3", "user_mm_pipeline.py", "--seed 11809 --batched-p2p --slow-rank 3 --factor 2.5 --steps 5"),
    ("mmpp4-stepsleep200ms-r2", "user_mm_pipeline.py", "--seed 11810 --slow-rank 2 --sleep-ms 200"),
    ("mmpp4-datasleep200ms-r3", "user_mm_pipeline.py", "--seed 11811 --slow-rank 3 --data-sleep-ms 200"),
    ("mmpp4-decodesleep200ms-r0", "user_mm_pipeline.py", "--seed 11812 --slow-rank 0 --decode-sleep-ms 200"),
    ("mmpp4-hog-r1", "user_mm_pipeline.py", "--seed 11813 --slow-rank 1 --hog"),
    ("mmpp4-link1-2-x512", "user_mm_pipeline.py", "--seed 11814 --link-src 1 --link-dst 2 --link-factor 512"),
    ("mmpp4-seqlognorm0.8", "user_mm_pipeline.py", "--seed 11815 --seq-sigma 0.8"),
    ("mmpp4-bigrank3-skew3", "user_mm_pipeline.py", "--seed 11816 --big-rank 3 --big 3 --steps 5"),
]
BATTERIES = {"users74": USERS74, "users81": USERS81, "users83": USERS83, "users83b": USERS83B, "users83c": USERS83C, "users84": USERS84, "users84b": USERS84B, "users84c": USERS84C, "users84d": USERS84D, "users85": USERS85, "users86": USERS86, "users86b": USERS86B, "users87": USERS87, "users87b": USERS87B, "users88": USERS88, "users88b": USERS88B, "users88c": USERS88C, "users89": USERS89, "users89b": USERS89B, "users90": USERS90, "users90b": USERS90B, "users90c": USERS90C, "users91": USERS91, "users92": USERS92, "users92b": USERS92B, "users92c": USERS92C, "users93": USERS93, "users93b": USERS93B, "users94": USERS94, "users94b": USERS94B, "users95": USERS95, "users95b": USERS95B, "users96": USERS96, "users96b": USERS96B, "users97": USERS97, "users97b": USERS97B, "users98": USERS98, "users98b": USERS98B, "users100b": USERS100B, "users100": USERS100, "users99b": USERS99B, "users99": USERS99, "users101b": USERS101B, "users101": USERS101, "users102b": USERS102B, "users102": USERS102, "users103": USERS103, "users103b": USERS103B, "users104": USERS104, "users104b": USERS104B, "users105b": USERS105B, "users105": USERS105, "users106": USERS106, "users106b": USERS106B, "users107b": USERS107B, "users107": USERS107, "users108": USERS108, "users108b": USERS108B, "users109": USERS109, "users109b": USERS109B, "users111": USERS111, "users110b": USERS110B, "users110": USERS110, "users111b": USERS111B, "users112": USERS112, "users112b": USERS112B, "users113": USERS113, "users113b": USERS113B, "users114": USERS114, "users115": USERS115, "users116": USERS116, "users116b": USERS116B, "users117": USERS117, "users118": USERS118}
_LAYOUTS = {"pp4": (1, 4, 1), "pp2dp2": (1, 2, 2), "tp4": (4, 1, 1), "dp2tp2": (2, 1, 2), "tp2dp2": (2, 1, 2),
            "dp4": (1, 1, 4), "dp2": (1, 1, 2), "tp2": (2, 1, 1), "pp2": (1, 2, 1)}
"""(tp, pp, dp) by the id's first word; any other word (``ddp4``, ``fsdp4``): 4 data-parallel ranks."""


def layout_of(case_id: str) -> tuple[int, int, int]:
    return _LAYOUTS.get(case_id.split("-")[0], (1, 1, 4))


def world_of(case_id: str) -> int:
    """The job's processes: as many as its layout's ranks."""
    tp, pp, dp = layout_of(case_id)
    return tp * pp * dp


def expected(case_id: str) -> tuple[str, dict | None]:
    """(class, expect.suspect) from the id (see the module doc)."""
    if m := re.search(r"-link(\d+)-(\d+)(?:-|$)", case_id):   # a heavier link from rank A to rank B
        return "fault", {"rank": int(m.group(1)), "peer": int(m.group(2)), "kinds": ["slow_link"]}
    if m := re.search(r"-r(\d+)$", case_id):
        kinds = (["slow_host"] if "sleep" in case_id
                 else ["slow_compute", "slow_host"] if "hog" in case_id   # a busy thread beside the rank's own
                 else ["slow_compute"])
        return "fault", {"rank": int(m.group(1)), "kinds": kinds}
    # skew: favoured experts; causal: a ring's contiguous chunks under a causal mask; uneven: batch sizes
    imbalanced = any(w in case_id for w in ("seqlognorm", "-last", "-skew", "-causal", "-uneven"))
    return ("imbalance" if imbalanced else "healthy"), None


def entry(case_id: str, script: str, args: str) -> dict:
    cls, suspect = expected(case_id)
    tp, pp, dp = layout_of(case_id)
    return {"id": case_id, "path": case_id, "format": "kineto", "class": cls, "injected": [],
            "layout": {"tp": tp, "pp": pp, "dp": dp}, "expect": {"suspect": suspect},
            "source": f"CPU gloo, torchrun {tp * pp * dp} processes, a user-written job (tests/corpus/{script})",
            "command": f"OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node={tp * pp * dp} "
                       f"tests/corpus/{script} --out $TRACE_DIR {args}"}


def run_job(case_id: str, script: str, args: str, out: Path, timeout: int) -> str | None:
    """Run one job into ``out`` (made only when the job ends well); None, or why it failed."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_of(case_id)}",
           str(HERE / script), "--out", "", *args.split()]
    with tempfile.TemporaryDirectory(prefix=f"users-{case_id}-", dir=out.parent) as tmp:
        cmd[cmd.index("--out") + 1] = str(Path(tmp) / "trace")
        # its own session: on a timeout every rank ends with torchrun, none skews the next job
        proc = subprocess.Popen(cmd, env=os.environ | {"OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            log, _ = proc.communicate(timeout=timeout)
        except BaseException as error:
            _kill_group(proc)
            if isinstance(error, subprocess.TimeoutExpired):
                return f"no end after {timeout} s, stopped"
            raise
        if proc.returncode != 0:
            return f"exit {proc.returncode}: " + " | ".join(log.strip().splitlines()[-3:])
        shutil.move(str(Path(tmp) / "trace"), out)
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--battery", choices=sorted(BATTERIES), default="users74")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--only", nargs="*", default=None, help="ids of the battery to run")
    ap.add_argument("--list", action="store_true", help="print the battery's ids and stop")
    ap.add_argument("--timeout", type=int, default=240, help="seconds a job may run")
    a = ap.parse_args()
    known = {c[0] for c in BATTERIES[a.battery]}
    if a.only is not None and (unknown := sorted(set(a.only) - known)):
        sys.exit(f"error: not in battery {a.battery}: {', '.join(unknown)} (see --list)")
    battery = [c for c in BATTERIES[a.battery] if a.only is None or c[0] in a.only]
    if a.list:
        print("\n".join(c[0] for c in battery))
        return
    if a.out is None:
        sys.exit("error: --out DIR is needed (where the jobs' traces and the manifest go)")
    a.out.mkdir(parents=True, exist_ok=True)
    manifest = a.out / "manifest.json"
    kept = json.loads(manifest.read_text())["cases"] if manifest.is_file() else []
    failed = []
    for case_id, script, args in battery:
        out = a.out / case_id
        if out.exists():
            print(f"{case_id}: already in {a.out}, kept")
            continue
        start = time.monotonic()
        why = run_job(case_id, script, args, out, a.timeout)
        print(f"{case_id}: {why or 'done'} ({time.monotonic() - start:.0f} s)")
        if why is not None:
            failed.append(case_id)
            continue
        kept = [c for c in kept if c["id"] != case_id] + [entry(case_id, script, args)]
        manifest.write_text(json.dumps({"version": 1, "cases": kept}, indent=1) + "\n")
    if failed:
        sys.exit(f"error: {len(failed)} job(s) failed: {', '.join(failed)} (run again to retry them)")


if __name__ == "__main__":
    main()
