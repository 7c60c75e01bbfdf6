"""``mapp detect``: which GPU, host or link slowed the job, and which ranks only waited."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mapp.cli._ui import console, err_console, guarded, progress_bar
from mapp.cli._shared import (DEFAULT_THRESHOLD, FormerFormatOption, ImbalanceThresholdOption, InputFormatOption,
                               LinkThresholdOption, MinEffectOption, ThresholdOption, check_engine, input_format, load,
                               thresholds)
from mapp.errors import InputError
from mapp.output import check_output, is_stdout

__all__ = ["commands", "detect"]

commands = typer.Typer()  # its commands join the top level of `mapp` (see mapp.cli.app)


@commands.command("detect")
@guarded
def detect(
    directory: Annotated[Path, typer.Argument(help="Directory holding the per-rank trace files.")],
    threshold: ThresholdOption = DEFAULT_THRESHOLD,
    link_threshold: LinkThresholdOption = None,
    imbalance_threshold: ImbalanceThresholdOption = None,
    min_effect: MinEffectOption = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the verdict as JSON to this file (- for stdout; the report then goes to stderr).")] = None,
    layout: Annotated[Optional[str], typer.Option("--layout", help="tp=..,pp=..,dp=.. for traces that do not record their layout.")] = None,
    input_format_: InputFormatOption = None,
    former_format: FormerFormatOption = None,
    fail_on_suspect: Annotated[bool, typer.Option("--fail-on-suspect", help="Exit with status 1 when there is a suspect.")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Re-read the traces even if DIR/.mapp is current.")] = False,
    window: Annotated[Optional[int], typer.Option("--window", metavar="N", help="Analyse N traced iterations at a time "
                                                  "and merge the verdicts: memory follows N, not the trace. \\[default: all at once]")] = None,
    engine: Annotated[Optional[str], typer.Option("--engine", metavar="ENGINE", help="With --window: run the windows on a "
                                                  "cluster engine: ray (workers read the dataset at the same path).")] = None,
    address: Annotated[Optional[str], typer.Option("--address", help="The Ray cluster to join (as mapp trace ingest). "
                                                   "\\[default: start a local one]")] = None,
    workers: Annotated[Optional[int], typer.Option("--workers", metavar="N", help="CPUs of the local cluster started "
                                                   "without --address.")] = None,
) -> None:
    """Find the straggler: slow GPU, slow host, slow link or slow NIC, told apart from its victims.

    Three stages: each rank's compute against its peers', who arrives last at collectives on
    aligned clocks, and the effective bandwidth of links and collective transfers. Workload
    imbalance (a heavy stage, uneven sequence lengths) is reported as imbalance, not a fault.
    Exit status 0 whether or not there are suspects, unless --fail-on-suspect.

    For traces too large to analyse at once, --window N judges N iterations at a time (each
    window matched, aligned and judged on its own, --engine ray on a cluster's workers): a
    suspect is one found in nearly every window, or in two or more, and says in which.
    """
    from mapp.analysis.detect import detect_bundle, detect_windows, parse_layout
    from mapp.report.verdict import DetectReport

    sizes = parse_layout(layout) if layout else None
    cuts = thresholds(threshold, link_threshold, imbalance_threshold, min_effect)
    check_output(json_out, directory, option="--json")
    check_engine(engine, address, workers)
    if engine is not None and window is None:
        raise InputError("--engine needs --window", "add --window N: each window of N iterations is one task")
    if window is not None and window < 1:
        raise InputError(f"--window {window}: must be at least 1", "give the iterations per window")
    bundle = load(directory, input_format(input_format_, former_format), use_cache=not no_cache)
    if window is None:
        verdict = detect_bundle(bundle, threshold=cuts, layout=sizes)
    elif engine is None:
        with progress_bar(f"detecting in windows of {window} iterations", unit="windows") as update:
            verdict = detect_windows(bundle, window=window, threshold=cuts, layout=sizes, progress=update)
    else:
        from mapp.analysis.cluster import connect, detect_on_cluster

        with connect(address, workers) as cluster, progress_bar(f"detecting in windows of {window} iterations on ray",
                                                                unit="windows") as update:
            verdict = detect_on_cluster(bundle, cluster, window=window, threshold=cuts, layout=sizes, progress=update)
    report = DetectReport(verdict, source=str(directory))
    # with --json -, stdout carries the JSON alone (for jq and scripts); the report goes to stderr
    (err_console if is_stdout(json_out) else console).print(report)
    if json_out is not None:
        report.write_json(json_out)
        if not is_stdout(json_out):
            console.print(f"verdict: [mapp.path]{json_out}[/]", style="mapp.dim")
    if fail_on_suspect and not verdict.healthy:
        raise typer.Exit(1)
