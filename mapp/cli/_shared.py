"""What several commands share: the input-format option, defined once, and loading a bundle.

``--input-format`` names the format of the traces read (mapp, megatronapp, kineto) on every
command that reads them; ``--format`` is always what a command writes (``mapp sql``'s table,
csv or json; ``mapp simulate``'s trace format). ``mapp detect`` and ``mapp trace merge`` took
``--format`` for their input before: it still works there, hidden.

The detector's cut-offs (``mapp.analysis.detect.Thresholds``): ``--threshold`` and the three
options it sets unless they are given, each with what it decides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mapp.analysis.detect import DEFAULT_THRESHOLD, Thresholds  # light: no polars
from mapp.analysis.ingest import FORMATS
from mapp.cli._ui import progress_bar, warn
from mapp.errors import InputError

__all__ = ["InputFormatOption", "FormerFormatOption", "input_format", "load", "DEFAULT_THRESHOLD", "ThresholdOption",
           "LinkThresholdOption", "ImbalanceThresholdOption", "MinEffectOption", "thresholds", "check_engine"]

InputFormatOption = Annotated[
    Optional[str],
    typer.Option("--input-format", metavar="FORMAT",
                 help=f"Trace format, instead of detecting it: {', '.join(FORMATS)}."),
]
FormerFormatOption = Annotated[
    Optional[str], typer.Option("--format", hidden=True, help="The former name of --input-format here."),
]

ThresholdOption = Annotated[
    float,
    typer.Option("--threshold", metavar="T",
                 help="A GPU, host or link is a suspect only when it is slower than (1 + T) x its peers (an op "
                 "counts as slow by the same cut). Also the default of the three options below."),
]
LinkThresholdOption = Annotated[
    Optional[float],
    typer.Option("--link-threshold", metavar="L",
                 help="Stage 3: a link's or group's transfers are slow when they take more than (1 + L) x like "
                 "transfers (and more than their scatter explains). \\[default: T]"),
]
ImbalanceThresholdOption = Annotated[
    Optional[float],
    typer.Option("--imbalance-threshold", metavar="I",
                 help="A pipeline stage computing more than (1 + I) x the lightest stage is reported as imbalance "
                 "(a heavy stage, not a fault). \\[default: T]"),
]
MinEffectOption = Annotated[
    Optional[float],
    typer.Option("--min-effect", metavar="E",
                 help="Stage 1: a rank (or one iteration of it) is an outlier, and its idle launch gaps a slow host, "
                 "only when at least E slower than its peers, however certain the statistics (healthy GPUs of one "
                 "model differ by a few percent). \\[default: T/3]"),
]


def thresholds(threshold: float, link: float | None, imbalance: float | None, min_effect: float | None) -> Thresholds:
    """The detector's cut-offs from the options: each as given, else derived from ``--threshold``."""
    return Thresholds.derive(threshold, link=link, imbalance=imbalance, min_effect=min_effect)


def input_format(given: str | None, former: str | None) -> str | None:
    """The input format from ``--input-format``, or the former ``--format`` spelling."""
    if given is not None and former is not None and given != former:
        raise InputError(f"--input-format {given} and --format {former}", "give the input format once, as --input-format")
    return given if given is not None else former


def load(directory: Path, format: str | None, *, use_cache: bool = True):
    """Load a bundle with a progress bar and warnings on stderr."""
    from mapp.analysis.ingest import load_bundle

    with progress_bar(f"reading {directory}", unit="bytes") as update:
        return load_bundle(directory, format=format, use_cache=use_cache, warn=warn, progress=update)


def check_engine(engine: str | None, address: str | None, workers: int | None) -> None:
    """``--engine``, ``--address`` and ``--workers`` as the commands that run on a cluster take them."""
    if engine is not None and engine != "ray":
        raise InputError(f"--engine {engine}: unknown engine", "use --engine ray (or leave it out to run here)")
    if engine is None and (address is not None or workers is not None):
        raise InputError("--address and --workers need --engine ray", "add --engine ray")
