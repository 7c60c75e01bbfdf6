"""Global, robust clock solve over the rank graph.

Unknowns per rank ``r``: an offset ``a_r`` (ns, at its first event ``t0_r``) and a rate
correction ``s_r`` (ns per second of its own clock), so that raw ``t`` maps to
``t + a_r + s_r * (t - t0_r) / 1e9`` on the reference clock. Every equality anchor
(``u`` on rank i equals ``v`` on rank j) gives one linear equation

    a_j - a_i + s_j x_j - s_i x_i = u - v        (x = seconds since that rank's t0)

The normal equations are accumulated per rank pair (nine weighted sums per edge, so millions of
anchors cost a few ``bincount`` passes) and solved as one sparse system, with each connected
component's reference rank held at zero. Outliers are handled by iteratively reweighted least
squares (Huber, then Tukey's biweight, with a robust scale per anchor kind). Inequalities (a
receive cannot end before its send starts) are then enforced by an active set: violated ones
are added as equalities at their bound and the system is solved again.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy import sparse
from scipy.sparse import csgraph
from scipy.sparse.linalg import MatrixRankWarning, cg, lsqr, spsolve

from mapp.analysis.align.anchors import Anchors, anchors_from
from mapp.analysis.align.clock import ClockModel, RankClock
from mapp.analysis.graph.diagnose import rank_list

__all__ = ["AlignOptions", "solve", "align_bundle"]

_NS_PER_S = 1e9
_MIN_SCALE_NS = 20.0
_SCALE_SAMPLE = 1 << 18
_CONVERGED_NS = 10.0
# conjugate gradients for systems of at least this many unknowns (smaller: the direct solver,
# already fast there), to this relative residual
_CG_MIN_UNKNOWNS = 512
_CG_RTOL = 1e-12


@dataclass(kw_only=True, slots=True)
class AlignOptions:
    """How to align clocks."""

    reference_rank: int | None = None
    """Rank whose clock the others are mapped onto (default: the lowest traced rank)."""
    drift: bool = True
    """Estimate a drift (rate) per rank as well as an offset."""
    p2p_weight: float = 1.0
    """Weight of "a send and its receive end together" anchors relative to collective ones (0: off)."""
    iterations: int = 8
    """Most reweighting rounds of the robust solve."""
    inequality_rounds: int = 4
    """Most active-set rounds enforcing "a receive cannot end before its send starts"."""


@dataclass(slots=True)
class _System:
    n: int
    i: np.ndarray
    j: np.ndarray
    xi: np.ndarray
    xj: np.ndarray
    y: np.ndarray
    w0: np.ndarray
    kind: np.ndarray
    edge: np.ndarray
    edge_i: np.ndarray
    edge_j: np.ndarray


def _system(frame: pl.DataFrame, index: dict[int, int], t0: np.ndarray, with_weight: bool) -> _System:
    n = len(index)
    keys = np.array(sorted(index), dtype=np.int64)
    lookup = np.full(int(keys.max()) + 2 if len(keys) else 1, -1, dtype=np.int64)
    lookup[keys] = np.arange(n)
    ri = frame["i"].to_numpy().astype(np.int64)
    rj = frame["j"].to_numpy().astype(np.int64)
    known = (ri >= 0) & (rj >= 0) & (ri < len(lookup)) & (rj < len(lookup))
    ri, rj = ri[known], rj[known]
    i, j = lookup[ri], lookup[rj]
    ok = (i >= 0) & (j >= 0)
    u = frame["u_ns"].cast(pl.Float64).to_numpy()[known][ok]
    v = frame["v_ns"].cast(pl.Float64).to_numpy()[known][ok]
    w0 = frame["weight"].cast(pl.Float64).to_numpy()[known][ok] if with_weight else np.ones(len(u))
    kind = frame["kind"].to_numpy()[known][ok].astype(np.int64) if with_weight else np.zeros(len(u), np.int64)
    # a self-anchor says nothing; a missing time (null end) or weight cannot be used
    good = np.isfinite(u) & np.isfinite(v) & np.isfinite(w0) & (w0 > 0) & (i[ok] != j[ok])
    i, j, u, v, w0, kind = i[ok][good], j[ok][good], u[good], v[good], w0[good], kind[good]
    y = u - v
    xi = (u - t0[i]) / _NS_PER_S
    xj = (v - t0[j]) / _NS_PER_S
    edge, unique = _edges(i * n + j, n)
    return _System(n, i, j, xi, xj, y, w0, kind, edge, unique // n, unique % n)


def _edges(codes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Index of each anchor's rank pair among the distinct pairs, and those pairs' codes."""
    if n * n <= 1 << 26:
        counts = np.bincount(codes, minlength=n * n)
        present = counts > 0
        index = np.cumsum(present) - 1
        return index[codes], np.flatnonzero(present)
    unique, edge = np.unique(codes, return_inverse=True)
    return edge.ravel(), unique


def _normal(sys_: _System, w: np.ndarray, drift: bool, ridge: np.ndarray) -> tuple[sparse.csr_matrix, np.ndarray]:
    n, e = sys_.n, len(sys_.edge_i)
    sums = lambda values: np.bincount(sys_.edge, weights=values, minlength=e)  # noqa: E731
    W = sums(w)
    Sy = sums(w * sys_.y)
    I, J = sys_.edge_i, sys_.edge_j
    rows = [J, I, I, J]
    cols = [J, I, J, I]
    vals = [W, W, -W, -W]
    rhs = np.zeros(2 * n if drift else n)
    np.add.at(rhs, J, Sy)
    np.add.at(rhs, I, -Sy)
    if drift:
        wxi, wxj = w * sys_.xi, w * sys_.xj
        Sxi, Sxj = sums(wxi), sums(wxj)
        Sxixi, Sxjxj, Sxixj = sums(wxi * sys_.xi), sums(wxj * sys_.xj), sums(wxi * sys_.xj)
        Syxi, Syxj = sums(wxi * sys_.y), sums(wxj * sys_.y)
        sI, sJ = I + n, J + n
        rows += [J, sJ, J, sI, I, sJ, I, sI, sJ, sI, sI, sJ]
        cols += [sJ, J, sI, J, sJ, I, sI, I, sJ, sI, sJ, sI]
        vals += [Sxj, Sxj, -Sxi, -Sxi, -Sxj, -Sxj, Sxi, Sxi, Sxjxj, Sxixi, -Sxixj, -Sxixj]
        np.add.at(rhs, sJ, Syxj)
        np.add.at(rhs, sI, -Syxi)
        rows.append(np.arange(n) + n)
        cols.append(np.arange(n) + n)
        vals.append(ridge)
    size = 2 * n if drift else n
    matrix = sparse.coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(size, size)
    ).tocsr()
    return matrix, rhs


def _ridge(sys_: _System, w: np.ndarray) -> np.ndarray:
    """A tiny prior pulling each rate toward zero, so a rank whose anchors span no time stays
    solvable; relative to its own data it is negligible."""
    x2 = np.bincount(sys_.i, weights=w * sys_.xi**2, minlength=sys_.n)
    x2 += np.bincount(sys_.j, weights=w * sys_.xj**2, minlength=sys_.n)
    count = np.bincount(sys_.i, weights=w, minlength=sys_.n) + np.bincount(sys_.j, weights=w, minlength=sys_.n)
    return 1e-9 * x2 + 1e-12 * count + 1e-15


def _solve_once(sys_: _System, w: np.ndarray, drift: bool, fixed: np.ndarray,
                fixed_a: np.ndarray | None = None, ridge: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares with the offsets of ``fixed`` ranks held at ``fixed_a`` (default 0)
    and their rates at 0."""
    if drift and ridge is None:
        ridge = _ridge(sys_, w)
    matrix, rhs = _normal(sys_, w, drift, ridge if drift else np.zeros(0))
    n = sys_.n
    free = np.ones(2 * n if drift else n, dtype=bool)
    free[fixed] = False
    if drift:
        free[fixed + n] = False
    sol = np.zeros(len(free))
    if fixed_a is not None:
        sol[fixed] = fixed_a
    idx = np.flatnonzero(free)
    if len(idx):
        sub = matrix[idx][:, idx].tocsc()
        known = matrix[idx][:, np.flatnonzero(~free)] @ sol[~free]
        sol[idx] = _linear_solve(sub, rhs[idx] - known)
    a = sol[:n]
    s = sol[n:] if drift else np.zeros(n)
    return a, s


def _linear_solve(matrix: sparse.csc_matrix, rhs: np.ndarray) -> np.ndarray:
    """``matrix x = rhs``. The callers hold one rank fixed per connected component, so the
    system is regular; should it still be (numerically) singular, the least-squares solution of
    smallest norm is used instead of the NaNs a direct solver returns.

    Large systems go to conjugate gradients first: the matrix is a normal-equations matrix
    (symmetric, positive definite once a rank per component is fixed and the rates have their
    ridge), and scaled by its diagonal (offsets in ns and rates per ns differ by ~1e9) CG
    converges in a few hundred products. At 1,024 ranks (2,046 unknowns) that took 25 ms where
    SuperLU's fill-in took 100-140 ms, three times per alignment; the two answers differ by
    under 1 ns (SuperLU's own orderings disagree by as much)."""
    n = matrix.shape[0]
    if n >= _CG_MIN_UNKNOWNS:
        diagonal = matrix.diagonal()
        if np.all(diagonal > 0):
            scale = 1.0 / np.sqrt(diagonal)
            scaled = sparse.diags(scale) @ matrix @ sparse.diags(scale)
            y, info = cg(scaled.tocsr(), rhs * scale, rtol=_CG_RTOL, atol=0.0, maxiter=20 * n)
            if info == 0 and np.all(np.isfinite(y)):
                return y * scale
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MatrixRankWarning)
        x = spsolve(matrix, rhs)
    if np.all(np.isfinite(x)):
        return x
    return lsqr(matrix, rhs, atol=1e-12, btol=1e-12)[0]


def _residuals(sys_: _System, a: np.ndarray, s: np.ndarray) -> np.ndarray:
    return sys_.y - (a[sys_.j] - a[sys_.i] + s[sys_.j] * sys_.xj - s[sys_.i] * sys_.xi)


def _robust_weights(r: np.ndarray, kind: np.ndarray, tukey: bool) -> np.ndarray:
    """Huber or Tukey weights with a robust scale (MAD) per anchor kind, the scale estimated on
    at most ``_SCALE_SAMPLE`` anchors of each kind."""
    scale = np.full(int(kind.max()) + 1 if len(kind) else 1, _MIN_SCALE_NS)
    stride = max(1, len(r) // _SCALE_SAMPLE)
    sample_r, sample_k = r[::stride], kind[::stride]
    for k in np.unique(sample_k):
        rk = sample_r[sample_k == k]
        scale[k] = max(1.4826 * float(np.median(np.abs(rk - np.median(rk)))), _MIN_SCALE_NS)
    z = np.abs(r) / scale[kind]
    if tukey:
        c = 4.685
        return np.where(z < c, np.square(1 - np.square(z / c)), 0.0)
    c = 1.345
    return np.minimum(1.0, c / np.maximum(z, 1e-300))


def solve(
    anchors: Anchors,
    first_event_ns: dict[int, int],
    *,
    last_event_ns: dict[int, int] | None = None,
    wall_base_ns: dict[int, int] | None = None,
    options: AlignOptions | None = None,
) -> ClockModel:
    """Solve every rank's offset and drift from ``anchors``.

    ``first_event_ns`` lists the ranks to align (with each one's first raw timestamp);
    ``last_event_ns`` is only used to place constant shifts mid-trace; ``wall_base_ns``: each
    rank's wall-clock time at its raw time 0, where known, to place the groups of ranks that no
    anchor links to the reference's (``_by_wall_clock``).

    The steps: fit the equality anchors robustly (``_fit_equalities``); where there are
    send/recv bounds, place components they alone link and enforce them (``_respect_order``);
    leave on its own clock any rank whose solution is not finite (``_drop_non_finite``); say
    why each group off the reference's clock is there (``_unlinked_notes``); and state each
    rank's clock with the fit's residuals (``_clock_model``).
    """
    options = options or AlignOptions()
    ranks = sorted(first_event_ns)
    if not ranks:
        return ClockModel(options.reference_rank or 0, {}, [])
    index = {r: k for k, r in enumerate(ranks)}
    t0 = np.array([first_event_ns[r] for r in ranks], dtype=np.int64)
    eq = _system(anchors.equal, index, t0, True)
    reference = options.reference_rank if options.reference_rank in index else ranks[0]
    fit = _fit_equalities(eq, index[reference], options)
    violations, notes = 0, []
    if len(anchors.after):
        after = _system(anchors.after.with_columns(pl.lit(1.0).alias("weight"), pl.lit(2, pl.Int8).alias("kind")),
                        index, t0, True)
        violations, notes = _respect_order(fit, eq, after, ranks, options)
    notes += _drop_non_finite(fit, ranks)
    notes += _by_wall_clock(fit, ranks, wall_base_ns or {})
    fit.order = [c for c in fit.order if (fit.labels == c).any()]
    notes += _unlinked_notes(eq, fit.w, fit.linked, fit.labels, fit.order, ranks, reference)
    return _clock_model(fit, eq, ranks, t0, last_event_ns, reference, violations, notes)


@dataclass(slots=True)
class _Fit:
    """The solve's state: each rank's offset ``a`` (ns) and rate ``s`` (ns/s), the anchors'
    weights ``w``, each rank's component ``labels`` and the components' ``order`` (the
    reference's first); ``linked``: the components before outliers were rejected."""

    ref: int
    a: np.ndarray
    s: np.ndarray
    w: np.ndarray
    labels: np.ndarray
    order: list[int]
    n_comp: int
    linked: np.ndarray


def _fit_equalities(eq: _System, ref: int, options: AlignOptions) -> _Fit:
    """Iteratively reweighted least squares over the equality anchors: Huber weights, then
    Tukey's, until the offsets move less than ``_CONVERGED_NS`` (or ``options.iterations``)."""
    w = eq.w0.copy()
    n_comp, labels, order = _partition(eq, w, ref)
    fit = _Fit(ref, np.zeros(eq.n), np.zeros(eq.n), w, labels, order, n_comp, linked=labels)
    if not len(eq.y):
        return fit
    ridge = _ridge(eq, eq.w0) if options.drift else None
    for round_ in range(options.iterations):
        # outlier rejection may cut every anchor between two groups of ranks: each part
        # then needs a rank of its own held fixed, or the system is singular
        fit.n_comp, fit.labels, fit.order = _partition(eq, fit.w, ref)
        a, s = _solve_once(eq, fit.w, options.drift, _fixed(fit.labels, fit.order, ref), ridge=ridge)
        change = float(np.max(np.abs(a - fit.a))) if round_ else np.inf
        fit.a, fit.s = a, s
        if (round_ >= 2 and change < _CONVERGED_NS) or round_ == options.iterations - 1:
            break
        fit.w = eq.w0 * _robust_weights(_residuals(eq, fit.a, fit.s), eq.kind, tukey=round_ >= 1)
    return fit


def _respect_order(fit: _Fit, eq: _System, after: _System, ranks: list[int],
                   options: AlignOptions) -> tuple[int, list[str]]:
    """The send/recv bounds (a receive cannot end before its send starts): place the components
    only they link (``_bridge``), enforce them (``_active_set``), and count those no offset and
    drift can honour. Updates ``fit``; returns (violations, notes)."""
    fixed = _fixed(fit.labels, fit.order, fit.ref)
    fixed_a = np.zeros(len(fixed))
    notes: list[str] = []
    if fit.n_comp > 1:
        rank_of_comp = [[ranks[m] for m in np.flatnonzero(fit.labels == c)] for c in fit.order]
        fit.a, fixed_a, merged, notes = _bridge(after, fit.labels, fit.order, fit.a, fit.s, fixed, rank_of_comp)
        fit.labels = _merge_labels(fit.labels, fit.order, merged)
    fit.a, fit.s = _active_set(eq, after, fit.w, fit.a, fit.s, fixed, fixed_a, options)
    violations, note = _violations(after, fit.labels, fit.a, fit.s, ranks)
    return violations, notes + ([note] if note else [])


def _active_set(eq: _System, after: _System, w: np.ndarray, a: np.ndarray, s: np.ndarray, fixed: np.ndarray,
                fixed_a: np.ndarray, options: AlignOptions) -> tuple[np.ndarray, np.ndarray]:
    """Add each violated bound as a heavy equality at its bound and solve again, for at most
    ``options.inequality_rounds`` rounds."""
    heavy = 10.0 * (float(w.max()) if len(w) else 1.0)
    active = np.zeros(len(after.y), dtype=bool)
    for _ in range(options.inequality_rounds):
        # aligned v - aligned u = -(y - model) must be >= 0
        gap = -_residuals(after, a, s)
        violated = gap < -0.5
        if not violated.any():
            break
        active |= violated
        both = _concat(eq, after, active)
        a, s = _solve_once(both, np.concatenate([w, np.full(int(active.sum()), heavy)]), options.drift,
                           fixed, fixed_a)
    return a, s


def _violations(after: _System, labels: np.ndarray, a: np.ndarray, s: np.ndarray,
                ranks: list[int]) -> tuple[int, str | None]:
    """Bounds still violated between ranks that share a clock (across components a bound says
    nothing), and the note that explains them."""
    gap = np.where(labels[after.i] == labels[after.j], -_residuals(after, a, s), 0.0)
    violated = gap < -0.5
    violations = int(violated.sum())
    if not violations:
        return 0, None
    k = int(np.argmin(gap))
    return violations, (
        f"{violations} p2p messages (worst: rank {ranks[after.i[k]]} -> {ranks[after.j[k]]}, receive "
        f"ends {-gap[k] / 1000:.1f} us before the send starts) cannot be ordered by any one offset and "
        "drift per rank: the anchors contradict each other (wrongly paired calls, end times that are not "
        "simultaneous, or a clock that jumps); times between these ranks are uncertain by that much "
        "(compare with --no-align)")


def _drop_non_finite(fit: _Fit, ranks: list[int]) -> list[str]:
    """A rank whose offset or rate is not finite goes on its own clock, in a component of its
    own (never expected: the solve falls back to least squares; never passed on)."""
    bad = ~(np.isfinite(fit.a) & np.isfinite(fit.s))
    if not bad.any():
        return []
    notes = []
    fit.a, fit.s, fit.labels = np.where(bad, 0.0, fit.a), np.where(bad, 0.0, fit.s), fit.labels.copy()
    for k in np.flatnonzero(bad):
        fit.labels[k] = int(fit.labels.max()) + 1
        fit.order.append(int(fit.labels[k]))
        notes.append(f"rank {ranks[k]}: its clock could not be solved; left on its own clock")
    return notes


def _by_wall_clock(fit: _Fit, ranks: list[int], base: dict[int, int]) -> list[str]:
    """Place each group of ranks that no anchor links to the reference's by the wall clock its
    traces started on: a rank's raw time t is wall time ``base + t``. Left on its own clock,
    such a group is off by whatever its traces' starts differ (seconds: each rank's tracer
    starts when its process gets there), and every arrival order across groups is noise (4
    H200s, megatron-core DP4 with the distributed optimizer, every collective only launched:
    a rank 25-80 ms late at every step looked early). Exact up to the two clock reads on one
    host; across hosts as close as their clocks are kept (NTP: about a millisecond).
    Updates ``fit``; returns the notes."""
    ref = fit.ref
    if len(fit.order) < 2 or ranks[ref] not in base:
        return []
    notes = []
    for c in fit.order[1:]:
        members = np.flatnonzero(fit.labels == c)
        if not len(members):
            continue
        fixed = int(members.min())   # the rank its group's clock is (``_fixed``)
        if ranks[fixed] not in base:
            continue
        fit.a[members] += float(base[ranks[fixed]] - base[ranks[ref]])
        fit.labels[members] = fit.labels[ref]
        names = [ranks[m] for m in members]
        label = f"rank {names[0]}" if len(names) == 1 else f"ranks {rank_list(names)}"
        notes.append(f"{label}: no anchor links {'it' if len(names) == 1 else 'them'} to rank {ranks[ref]}'s "
                     "group; placed by the wall clock the traces started on (exact on one host, across hosts "
                     "as close as their clocks are kept)")
    return notes


def _clock_model(fit: _Fit, eq: _System, ranks: list[int], t0: np.ndarray, last_event_ns: dict[int, int] | None,
                 reference: int, violations: int, notes: list[str]) -> ClockModel:
    """Each rank's clock (its drift from the rate, the RMS of its inlier anchors' residuals) and
    the components, in ``fit.order``."""
    n = eq.n
    r = _residuals(eq, fit.a, fit.s) if len(eq.y) else np.zeros(0)
    inlier = fit.w > 0
    sq = np.where(inlier, r * r, 0.0)
    ssum = np.bincount(eq.i, weights=sq, minlength=n) + np.bincount(eq.j, weights=sq, minlength=n)
    cnt = (np.bincount(eq.i, weights=inlier.astype(float), minlength=n)
           + np.bincount(eq.j, weights=inlier.astype(float), minlength=n))
    rms = np.sqrt(np.divide(ssum, cnt, out=np.zeros(n), where=cnt > 0))
    position = {c: k for k, c in enumerate(fit.order)}
    clocks = {}
    for k, rank in enumerate(ranks):
        slope = fit.s[k] / _NS_PER_S
        clocks[rank] = RankClock(
            rank=rank, offset_ns=float(fit.a[k]), drift_ppm=float((1.0 / (1.0 + slope) - 1.0) * 1e6),
            t0_ns=int(t0[k]), t1_ns=None if last_event_ns is None else int(last_event_ns.get(rank, t0[k])),
            residual_ns=float(rms[k]), anchors=int(cnt[k]), component=position[fit.labels[k]],
        )
    components = [sorted(ranks[m] for m in np.flatnonzero(fit.labels == c)) for c in fit.order]
    return ClockModel(reference, clocks, components, violations=violations,
                      anchors_rejected=int((~inlier).sum()), notes=notes)


def _partition(eq: _System, w: np.ndarray, ref: int) -> tuple[int, np.ndarray, list[int]]:
    """Connected components of the ranks over anchors of positive weight: their count, each
    rank's label, and the labels in order (the reference's first, then by lowest rank)."""
    n = eq.n
    weight = np.bincount(eq.edge, weights=w, minlength=len(eq.edge_i)) if len(eq.edge) else np.zeros(0)
    keep = weight > 0
    graph = sparse.coo_matrix((np.ones(int(keep.sum())), (eq.edge_i[keep], eq.edge_j[keep])), shape=(n, n))
    n_comp, labels = csgraph.connected_components(graph, directed=False)
    first = np.full(n_comp, n)
    np.minimum.at(first, labels, np.arange(n))
    order = [int(labels[ref])] + [int(c) for c in np.argsort(first, kind="stable") if c != labels[ref]]
    return int(n_comp), labels, order


def _unlinked_notes(eq: _System, w: np.ndarray, linked: np.ndarray, labels: np.ndarray, order: list[int],
                    ranks: list[int], reference: int) -> list[str]:
    """Why each group of ranks off the reference's clock is there: no anchor at all, or every
    anchor linking it to the others rejected as an outlier (``linked``: components before
    outlier rejection; ``labels``: at the end)."""
    notes = []
    degree = np.bincount(eq.i, minlength=eq.n) + np.bincount(eq.j, minlength=eq.n)
    cut = labels[eq.i] != labels[eq.j]
    for c in order[1:]:
        members = np.flatnonzero(labels == c)
        names = [ranks[m] for m in members]
        label = f"rank {names[0]}" if len(names) == 1 else f"ranks {rank_list(names)}"
        if not degree[members].any():
            notes.append(f"{label}: no usable anchor (no complete collective with a known group, no matched "
                         "send/recv with another traced rank); left on its own clock")
            continue
        touching = cut & (np.isin(eq.i, members) | np.isin(eq.j, members))
        if touching.any() and np.isin(linked[members], linked[labels != c]).any():
            worst = float(np.max(np.abs(eq.y[touching]))) if touching.any() else 0.0
            notes.append(f"{label}: all {int(touching.sum()):,} anchors linking it to the other ranks were "
                         f"rejected as outliers (inconsistent end times, raw gaps up to {worst / 1000:.1f} us); "
                         f"aligned among themselves only, on rank {names[0]}'s clock")
        else:
            notes.append(f"{label}: no complete collective with a known group and no matched send/recv links "
                         f"{'it' if len(names) == 1 else 'them'} to rank {reference}'s group; "
                         f"aligned among themselves only, on rank {names[0]}'s clock")
    return notes


def _fixed(labels: np.ndarray, order: list[int], ref: int) -> np.ndarray:
    """The rank held fixed in each component (in ``order``): the reference, else the lowest."""
    return np.array([ref if k == 0 else int(np.flatnonzero(labels == c).min()) for k, c in enumerate(order)],
                    dtype=np.int64)


def _bridge(after: _System, labels: np.ndarray, order: list[int], a: np.ndarray, s: np.ndarray,
            fixed: np.ndarray, rank_of_comp: list[list[int]]):
    """Place components that only send/recv bounds link to the reference's component.

    Within each component the equality solve holds; between two components A and B, messages
    A -> B bound B's shift from below (the receive ends after the send starts) and messages
    B -> A bound it from above. The shift is the middle of the interval (NTP's assumption of
    symmetric minimum delays), or the one bound there is. Components are reached breadth-first
    from the reference's.
    """
    aligned_u = a[after.i] + s[after.i] * after.xi
    aligned_v = a[after.j] + s[after.j] * after.xj
    # need (aligned u) - (aligned v) in ns: raw u - v is y
    need = after.y + aligned_u - aligned_v  # shift_B - shift_A >= need, for A = comp(i), B = comp(j)
    ci, cj = labels[after.i], labels[after.j]
    cross = ci != cj
    tight = (
        pl.DataFrame({"a": ci[cross], "b": cj[cross], "need": need[cross]})
        .group_by("a", "b").agg(pl.col("need").max())
    )
    bounds = {(int(x), int(y)): float(v) for x, y, v in tight.iter_rows()}
    shift = {order[0]: 0.0}
    merged = [order[0]]
    notes: list[str] = []
    frontier = [order[0]]
    while frontier:
        nxt = []
        for known in frontier:
            for other in order:
                if other in shift:
                    continue
                lower = bounds.get((known, other))   # other - known >= lower
                upper_raw = bounds.get((other, known))  # known - other >= upper_raw
                if lower is None and upper_raw is None:
                    continue
                upper = None if upper_raw is None else -upper_raw
                if lower is not None and upper is not None:
                    rel, width = (lower + upper) / 2.0, (upper - lower) / 2.0
                else:
                    rel, width = (lower if lower is not None else upper), None
                shift[other] = shift[known] + rel
                merged.append(other)
                nxt.append(other)
                ranks_ = rank_of_comp[order.index(other)]
                label = f"{ranks_[0]}..{ranks_[-1]}" if len(ranks_) > 1 else f"{ranks_[0]}"
                if width is not None and width >= 0:
                    notes.append(f"ranks {label} ({len(ranks_)}) share no collective with rank "
                                 f"{rank_of_comp[0][0]}'s group; placed by send/recv order within "
                                 f"+/-{width / 1000:.1f} us")
                else:
                    notes.append(f"ranks {label} ({len(ranks_)}) are linked to rank {rank_of_comp[0][0]}'s "
                                 "group only by messages in one direction (or inconsistent ones); "
                                 "placed at the tightest bound")
        frontier = nxt
    a = a.copy()
    fixed_a = np.zeros(len(fixed))
    for k, comp in enumerate(order):
        if comp in shift and k > 0:
            a[labels == comp] += shift[comp]
            fixed_a[k] = shift[comp]
    return a, fixed_a, merged, notes


def _merge_labels(labels: np.ndarray, order: list[int], merged: list[int]) -> np.ndarray:
    labels = labels.copy()
    for comp in merged[1:]:
        labels[labels == comp] = order[0]
    return labels


def _concat(eq: _System, after: _System, active: np.ndarray) -> _System:
    i = np.concatenate([eq.i, after.i[active]])
    j = np.concatenate([eq.j, after.j[active]])
    n = eq.n
    edge, unique = _edges(i * n + j, n)
    return _System(
        n, i, j, np.concatenate([eq.xi, after.xi[active]]), np.concatenate([eq.xj, after.xj[active]]),
        np.concatenate([eq.y, after.y[active]]), np.concatenate([eq.w0, after.w0[active]]),
        np.concatenate([eq.kind, after.kind[active]]), edge, unique // n, unique % n,
    )


def align_bundle(bundle, matching=None, *, options: AlignOptions | None = None) -> ClockModel:
    """Align every rank of ``bundle`` onto the reference clock (matching it first if not given)."""
    if matching is None:
        from mapp.analysis.graph import match_bundle

        matching = match_bundle(bundle)
    options = options or AlignOptions()
    span = bundle.scan().group_by("rank").agg(t0_ns=pl.col("ts_ns").min(), t1_ns=pl.col("ts_ns").max()).collect()
    first = dict(zip(span["rank"].to_list(), span["t0_ns"].to_list()))
    last = dict(zip(span["rank"].to_list(), span["t1_ns"].to_list()))
    for rank in bundle.ranks["rank"].to_list():
        first.setdefault(rank, 0)
    wall = {}
    if "clock_base_unix_ns" in bundle.ranks.columns:
        wall = {r: b for r, b in bundle.ranks.select("rank", "clock_base_unix_ns").iter_rows() if b is not None}
    return solve(anchors_from(matching, p2p_weight=options.p2p_weight), first, last_event_ns=last,
                 wall_base_ns=wall, options=options)

