"""Trim a PyTorch profiler (Kineto) trace to a few whole profiler steps, for committing as test data.

    python tests/corpus/public/trim.py IN [IN ...] -o OUT_DIR --steps 16,17 [--gzip]

Each IN (``.json`` or ``.json.gz``) becomes ``OUT_DIR/<same name>`` (``.json`` minified, or
``.json.gz`` with ``--gzip``). What is kept, so that mapp's Kineto reader sees the same thing
for the kept steps as in the whole file:

* the ``ProfilerStep#N`` spans of the chosen steps (all of them if ``--steps`` is not given) and
  the window they cover on the host, from the first one's start to the last one's end;
* CPU events (``cpu_op``, ``user_annotation``, any event carrying ``Collective name``) that start
  inside the window, and the CUDA/HIP runtime and driver calls that start inside it;
* GPU events (``kernel``, ``gpu_memcpy``, ``gpu_memset``, ``gpu_user_annotation``) launched inside
  the window (by ``correlation`` to a kept runtime call), or, with no launch record (RCCL
  kernels on ROCm have none), that start inside the window or whose ``External id`` is that of a
  kept CPU event; GPU work runs behind the host, so its end may lie past the window;
* process/thread name metadata (``ph: M``) and these top-level keys when present:
  ``schemaVersion``, ``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``,
  ``displayTimeUnit``, ``record_shapes``, ``with_stack``, ``profile_memory``, ``with_flops``,
  ``with_modules``, ``roctracer_version``, ``hip_runtime_version``, ``hip_driver_version``,
  ``cuda_runtime_version``, ``cuda_driver_version``, ``cupti_version``, ``trace_id``.

Dropped: ``python_function`` events, flows (``s``/``f``/``t``), instants (``i``/``I``), counters,
``Trace`` spans, events of any other category, everything outside the window, and every other
top-level key (some traces carry their job's whole environment there, tokens included).
The script only reads and writes JSON; it imports nothing of mapp.
"""

from __future__ import annotations

import argparse
import gzip
import json
import pathlib
import re
import sys

KEEP_KEYS = (
    "schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "displayTimeUnit",
    "record_shapes", "with_stack", "profile_memory", "with_flops", "with_modules", "roctracer_version",
    "hip_runtime_version", "hip_driver_version", "cuda_runtime_version", "cuda_driver_version",
    "cupti_version", "trace_id",
)
CPU_CATS = {"cpu_op", "user_annotation", "Operator"}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Kernel", "Memcpy", "Memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}
STEP = re.compile(r"ProfilerStep#(\d+)$")


def load(path: pathlib.Path) -> dict:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data)


def trim(doc: dict, steps: set[int] | None) -> tuple[dict, dict]:
    """(trimmed document, counts of what was kept/dropped)."""
    events = [e for e in doc.get("traceEvents", []) if isinstance(e, dict)]
    spans = [e for e in events if e.get("ph") == "X" and e.get("cat") in CPU_CATS
             and STEP.match(str(e.get("name", ""))) and (steps is None or int(STEP.match(e["name"])[1]) in steps)]
    if not spans:
        raise SystemExit(f"no ProfilerStep#N span for steps {sorted(steps) if steps else 'any'}")
    span_ids = {id(e) for e in spans}
    start = min(e["ts"] for e in spans)
    end = max(e["ts"] + e.get("dur", 0) for e in spans)

    def inside(e: dict) -> bool:
        return isinstance(e.get("ts"), (int, float)) and start <= e["ts"] <= end

    kept_launch: set = set()
    kept_ext: set = set()
    keep: list[dict] = []
    for e in events:
        cat, ph, args = e.get("cat"), e.get("ph"), e.get("args") or {}
        if ph == "X" and (cat in CPU_CATS or ("Collective name" in args and cat not in GPU_CATS)):
            if STEP.match(str(e.get("name", ""))) and id(e) not in span_ids:
                continue
            if inside(e):
                keep.append(e)
                if "External id" in args:
                    kept_ext.add(args["External id"])
        elif ph == "X" and cat in LAUNCH_CATS and inside(e):
            keep.append(e)
            if "correlation" in args:
                kept_launch.add(args["correlation"])
    launched = {e.get("args", {}).get("correlation") for e in events if e.get("cat") in LAUNCH_CATS}
    for e in events:
        cat, args = e.get("cat"), e.get("args") or {}
        if e.get("ph") != "X" or cat not in GPU_CATS:
            continue
        corr = args.get("correlation")
        if corr in kept_launch or (corr not in launched and (inside(e) or args.get("External id") in kept_ext)):
            keep.append(e)
    meta = [e for e in events if e.get("ph") == "M"]
    out = {k: doc[k] for k in KEEP_KEYS if k in doc}
    kept_ids = {id(e) for e in keep}
    out["traceEvents"] = meta + [e for e in events if id(e) in kept_ids]
    counts = {"events_in": len(events), "events_out": len(out["traceEvents"]),
              "steps": sorted(int(STEP.match(e["name"])[1]) for e in spans)}
    return out, counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", type=pathlib.Path)
    parser.add_argument("-o", "--out", type=pathlib.Path, required=True, help="output directory")
    parser.add_argument("--steps", help="comma-separated ProfilerStep numbers to keep (default: all)")
    parser.add_argument("--gzip", action="store_true", help="write .json.gz instead of minified .json")
    args = parser.parse_args(argv)
    steps = {int(s) for s in args.steps.split(",")} if args.steps else None
    args.out.mkdir(parents=True, exist_ok=True)
    for path in args.inputs:
        doc, counts = trim(load(path), steps)
        name = path.name.removesuffix(".gz")
        body = json.dumps(doc, separators=(",", ":")).encode()
        target = args.out / (name + ".gz" if args.gzip else name)
        target.write_bytes(gzip.compress(body, mtime=0) if args.gzip else body)
        print(f"{path} -> {target}: steps {counts['steps']}, {counts['events_in']} -> {counts['events_out']} "
              f"events, {target.stat().st_size} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
