"""Coverage of start states: each one's distance to its nearest other, greedy farthest-point order, a
Halton candidate set, target start poses.

Used by `curate` (each episode's coverage contribution: `nearest_other`, kept as the episodes table's
`coverage_gain` and brought up to date by an append with `nearest_other_added`; the farthest-point
order; where to send operators next; the coverage a drop plan loses) and by `stats` (deterministic
k-means seeding).

The covering radius of a set of start states is the largest distance from any of `CANDIDATES` Halton
points filling the (box-normalised) joint-range box to its nearest start state: the radius of the
biggest hole in the coverage. Lower is better; dropping episodes never lowers it.
"""
from __future__ import annotations

import numpy as np

CANDIDATES = 4096


def farthest_point_order(points: np.ndarray, first: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Greedy farthest-point order and each pick's distance to the points picked before it.

    The first pick is `first`, by default the point farthest from the mean (its "gap" is that
    distance). Ties go to the lowest index, so the order is deterministic.
    """
    pts = np.asarray(points, dtype=np.float64)
    n = len(pts)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    if first is None:
        to_mean = np.linalg.norm(pts - pts.mean(axis=0), axis=1)
        first = int(np.argmax(to_mean))
        first_gap = float(to_mean[first])
    else:
        first_gap = float(np.linalg.norm(pts[first] - pts.mean(axis=0)))
    order = np.empty(n, dtype=np.int64)
    gaps = np.empty(n)
    order[0], gaps[0] = first, first_gap
    nearest = np.linalg.norm(pts - pts[first], axis=1)
    nearest[first] = -1.0
    # Each pick's distances column by column into reused buffers: the sum of squares in the order
    # `np.linalg.norm` adds them (the same values), ~5x faster at 10,000 points than a norm over rows.
    # Only the points not picked yet are worked on: whenever half the arrays are picked points (-1),
    # they are dropped, keeping the rest in index order (so argmax's first maximum is still the
    # lowest index): half the work, the same order and gaps.
    cols = np.ascontiguousarray(pts.T)
    index = np.arange(n)
    left = n - 1
    dist_buf, term_buf = np.empty(n), np.empty(n)
    for k in range(1, n):
        if 2 * left < len(index) and left >= 64:
            keep = nearest >= 0.0
            index, cols, nearest = index[keep], np.ascontiguousarray(cols[:, keep]), nearest[keep]
        dist, term = dist_buf[:len(index)], term_buf[:len(index)]
        at = int(np.argmax(nearest))
        pick = int(index[at])
        order[k], gaps[k] = pick, nearest[at]
        _distances(cols, cols[:, at], dist, term)
        np.minimum(nearest, dist, out=nearest)
        nearest[at] = -1.0  # the points picked before stay -1: the minimum keeps it
        left -= 1
    return order, gaps


def _distances(cols: np.ndarray, point: np.ndarray, out: np.ndarray, term: np.ndarray | None = None) -> np.ndarray:
    """Distances from `point` to every column of `cols` (one row per coordinate) into `out`: the sum
    of squared differences coordinate by coordinate in order, then the root. Every distance in this
    module's nearest-other functions is computed this way, so a pair gives the same bits whichever
    side asks ((a - b)^2 equals (b - a)^2 exactly)."""
    term = np.empty_like(out) if term is None else term
    np.subtract(cols[0], point[0], out=out)
    np.multiply(out, out, out=out)
    for j in range(1, len(cols)):
        np.subtract(cols[j], point[j], out=term)
        np.multiply(term, term, out=term)
        np.add(out, term, out=out)
    return np.sqrt(out, out=out)


def nearest_other(points: np.ndarray) -> np.ndarray:
    """Each point's distance to its nearest other point (NaN for a lone point; 0 for a duplicate).

    Adding a point changes only the values it is nearer to than their nearest was, so an append
    brings these up to date in one pass over the points (`nearest_other_added`), equal bit for bit
    to computing them again."""
    pts = np.asarray(points, dtype=np.float64)
    return nearest_other_added(pts, np.zeros(0))


def nearest_other_added(points: np.ndarray, known: np.ndarray) -> np.ndarray:
    """`nearest_other(points)`, given `known` = `nearest_other` of the first `len(known)` points: each
    later point is added in turn (its distance to every point before it: the nearest of them is its
    value, and each of them keeps the smaller of its value and that distance). A minimum does not
    depend on the order its terms come in and each distance has the same bits from either side, so
    the result equals `nearest_other` of all the points exactly; one pass per added point."""
    pts = np.asarray(points, dtype=np.float64)
    n, k0 = len(pts), len(known)
    out = np.full(n, np.nan)
    out[:k0] = known
    cols = np.ascontiguousarray(pts.T)
    buf = np.empty(n)
    for k in range(max(k0, 1), n):
        d = _distances(cols[:, :k], pts[k], buf[:k])
        out[k] = d.min()
        np.fmin(out[:k], d, out=out[:k])  # fmin: a lone point's NaN gives way to its first neighbour
    return out


def halton(n: int, dims: int, skip: int = 20) -> np.ndarray:
    """The first n points of the Halton sequence in [0, 1)^dims (deterministic, well spread)."""
    primes: list[int] = []
    candidate = 2
    while len(primes) < dims:
        if all(candidate % p for p in primes):
            primes.append(candidate)
        candidate += 1
    out = np.empty((n, dims))
    idx = np.arange(skip + 1, skip + n + 1)
    for d, base in enumerate(primes):
        value, f, i = np.zeros(n), 1.0, idx.copy()
        while np.any(i > 0):
            f /= base
            value += f * (i % base)
            i //= base
        out[:, d] = value
    return out


def target_start_poses(starts: np.ndarray, box_lo: np.ndarray, box_hi: np.ndarray, count: int,
                       vary: np.ndarray | None = None, candidates: int = CANDIDATES) -> tuple[np.ndarray, np.ndarray]:
    """`count` start poses farthest (box-normalised) from the recorded starts and from each other.

    Candidates are a Halton sequence filling the box over the joints in `vary`; joints not varied
    stay at the median recorded start. Returns (poses in dataset units, normalised gap of each).
    """
    dims = starts.shape[1]
    vary = np.ones(dims, dtype=bool) if vary is None else vary
    width = np.where(box_hi - box_lo > 0, box_hi - box_lo, 1.0)
    cand = np.tile(np.median(starts, axis=0), (candidates, 1))
    cand[:, vary] = box_lo[vary] + halton(candidates, int(vary.sum())) * (box_hi - box_lo)[vary]
    norm_c = cand / width
    nearest = nearest_distance(norm_c, starts / width)
    picks, gaps = [], []
    for _ in range(min(count, candidates)):
        k = int(np.argmax(nearest))
        picks.append(k)
        gaps.append(float(nearest[k]))
        nearest = np.minimum(nearest, np.linalg.norm(norm_c - norm_c[k], axis=1))
    return cand[picks], np.asarray(gaps)


def nearest_distance(points: np.ndarray, to: np.ndarray) -> np.ndarray:
    """Each point's Euclidean distance to its nearest point of `to` (inf if `to` is empty)."""
    nearest = np.full(len(points), np.inf)
    for lo in range(0, len(to), 512):
        block = to[lo:lo + 512]
        d = np.sqrt(((points[:, None, :] - block[None, :, :]) ** 2).sum(axis=2)).min(axis=1)
        nearest = np.minimum(nearest, d)
    return nearest


def covering_radius(starts: np.ndarray, box_lo: np.ndarray, candidates: int = CANDIDATES) -> float:
    """The covering radius of box-normalised start states: the farthest of `candidates` Halton points
    filling the unit box at `box_lo` from its nearest start state."""
    cand = box_lo + halton(candidates, starts.shape[1])
    return float(nearest_distance(cand, starts).max())
