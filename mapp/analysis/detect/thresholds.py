"""The detector's four cut-offs, each named for what it decides.

``mapp detect --threshold T`` sets the first; the other three follow from it unless given
(``Thresholds.derive``), so that one number still tunes the detector as it always did:

============  ======================  ===========  ==============================================
field         option                  default      decides
============  ======================  ===========  ==============================================
slowdown      ``--threshold``         0.1          a GPU, host or link is a suspect only when it is
                                                   slower than (1 + this) x its peers; in stage 1
                                                   an op counts as slow (the evidence's
                                                   ``share_slow_ops``) by the same cut
link          ``--link-threshold``    T            stage 3: a link's or group's transfers are slow
                                                   when they take more than (1 + this) x like
                                                   transfers (and more than their scatter explains)
imbalance     ``--imbalance-          T            a pipeline stage computing more than (1 + this)
              threshold``                          x the lightest stage is reported as imbalance
min_effect    ``--min-effect``        T / 3        stage 1: a rank (or one of its iterations) is an
                                                   outlier, and its idle launch gaps a slow host,
                                                   only when at least this much slower than its
                                                   peers, however certain the statistics; a slow
                                                   link only when its transfers cost a tenth of
                                                   this of the iteration
============  ======================  ===========  ==============================================

Why ``T / 3`` for ``min_effect``: below a third of the threshold a rank's slowdown is within
the spread of healthy GPUs of one model (a few percent); smaller effects are not worth a
verdict however certain. It is lower than the slowdown cut because stage 1 finds candidates
(a rank-iteration, launch gaps, a rank that stage 2 corroborates) whose estimated slowdown the
final cut (``slowdown``) then judges.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from mapp.errors import InputError

__all__ = ["Thresholds", "DEFAULT_THRESHOLD", "CONSISTENT"]

DEFAULT_THRESHOLD = 0.1
"""``--threshold``'s default: 10% slower than its peers."""

CONSISTENT = 0.75
"""Share of the traced iterations in which a rank (a host, a link) must be slower for a lasting
verdict: a fault lasts, noise on a shared machine comes and goes. Not an option: every stage
reads it from here."""

ALIKE = 1.03
"""Ranks whose slowdowns are within this factor of each other are slowed alike: a whole replica
slower so is its data (``imbalance.heavy_replicas``), peers leading their others so one block
(``slow_blocks.block_note``)."""


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The detector's cut-offs (ratios over 1: 0.1 means 10% slower). See the module docstring."""

    slowdown: float = DEFAULT_THRESHOLD
    link: float = DEFAULT_THRESHOLD
    imbalance: float = DEFAULT_THRESHOLD
    min_effect: float = DEFAULT_THRESHOLD / 3

    @classmethod
    def derive(cls, threshold: float = DEFAULT_THRESHOLD, *, link: float | None = None,
               imbalance: float | None = None, min_effect: float | None = None) -> Thresholds:
        """``threshold`` for the slowdown cut; each other cut as given, else derived from it:
        ``link`` and ``imbalance`` equal to it, ``min_effect`` a third of it."""
        _check("--threshold", threshold, "e.g. --threshold 0.1 (10% slower than peers)")
        return cls(
            slowdown=threshold,
            link=threshold if link is None else link,
            imbalance=threshold if imbalance is None else imbalance,
            min_effect=threshold / 3 if min_effect is None else min_effect,
        )

    def __post_init__(self) -> None:
        _check("--threshold", self.slowdown, "e.g. --threshold 0.1 (10% slower than peers)")
        _check("--link-threshold", self.link, "e.g. --link-threshold 0.1 (transfers 10% slower than like ones)")
        _check("--imbalance-threshold", self.imbalance, "e.g. --imbalance-threshold 0.1")
        if not self.min_effect >= 0:
            raise InputError(f"--min-effect {self.min_effect}: must be >= 0", "e.g. --min-effect 0.03")

    def to_json(self) -> dict[str, float]:
        return asdict(self)


def _check(option: str, value: float, hint: str) -> None:
    if not value > 0:
        raise InputError(f"{option} {value}: must be > 0", hint)
