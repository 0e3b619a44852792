"""A camera's lag pooled over the episodes of one camera instance in a session (no ROS import).

A camera's lag is a property of the camera process, not of one episode: a driver that stamps
frames on delivery is late by the same 30–40 ms on every frame until it restarts (the seeds'
episodes 31–34). One episode's content estimate (`camera_lag.py`) is a few ms uncertain; pooled
over an instance's episodes the bound gets tight, so a 25 ms lag that no single episode can prove
is proved by ten.

**The instance.** Our camera node writes its instance id into every JPEG (`core.frame_meta`, key
`instance`: a new random id each time it opens its device, i.e. on every process start and every
reopen); for a camera driver that is not ours the recorder writes the publishers' GIDs of each
camera topic into the episode metadata (`extra["camera_publishers"]`, camera → GIDs in the order
first seen; a restarted process publishes under a new GID). An episode's instance is the one most of its
frames carry, else its camera's last publisher GID. Ids are data, kept only when they match
`INSTANCE_PATTERN`.

**The pool** (`pools`): per rig, camera and run of consecutive episodes (by start time) of one
instance (episodes without an id: per session, `session_drift.session_of`: rig and UTC day), the
inverse-variance weighted median (between the middle two) of the episodes' estimates whose standard error is within
`camera_lag_max_stderr_ms` (a content estimate is sometimes 20 ms off on a false peak:
`bench/camera_lag.py` measures how often). Its standard error is 1.2533/√Σw, scaled up by the robust
scatter ratio when the estimates scatter more than their errors say (a camera whose lag wanders is
not as well known as the count of episodes suggests). Where an episode has no instance id (foreign
bags without a GID), consecutive episodes without one are split where the lag changes
(`change_points`: binary segmentation, kept where the two sides' pools differ by more than
`CHANGE_Z` standard errors): the restart the ids would have shown.

**The verdict** (`apply_lag_pools`): a pool whose lag is beyond `camera_lag_max_ms` with 95 %
confidence (`camera_lag.beyond`) rejects every one of its episodes CLOCK_OFFSET — also those that
could not tell — when at least `camera_lag_pool_min_episodes` of its estimates agree with it (the
pooled lag inside their 95 % intervals) and they are most of its estimates: two episodes whose false
peaks happen to lie beyond the bound, among others that say something else, prove nothing about the
camera. The reason names the pooled figure, how many estimates agree and of how many members.
Every pool is in each member's report (`camera_pool`), as the console shows it:
`camera front lag +2 ± 3 ms (12 episodes)`.

**An episode the pool contradicts.** The same evidence works the other way: an episode rejected on
its own estimate (`checks.camera_lags`) whose camera instance's pool *proves* the camera within the
bound (the pool's whole 95 % interval inside ±`camera_lag_max_ms`, held by at least
`camera_lag_pool_min_episodes` agreeing estimates that are most of the pool's) while the pooled lag
lies outside that episode's own 95 % interval is an outlier of the estimator, not of the camera: a
false peak of smooth motion (on the simulator's slow, sinusoidal operator about one clean 8 s teleop
episode in four gives a confident estimate 35–175 ms off). Its CLOCK_OFFSET becomes the warning
CAMERA_LAG_UNKNOWN naming both figures. A camera cannot be late in one episode and on time in the
episodes around it without a restart, and a restart is a new instance (or a change point).

**An instance whose estimates contradict their own errors.** When at least `UNRELIABLE_MIN_ESTIMATES`
estimates of one instance scatter more than `UNRELIABLE_SCATTER` times what their standard errors
say (`scatter_ratio`), the error model does not hold for this motion: none of them decides. The pool
rejects nothing and every member's own CLOCK_OFFSET becomes CAMERA_LAG_UNKNOWN, saying so. This is
what the simulator's slow sinusoidal operator produces in teleop sessions (24 clean 8 s episodes:
estimates from −175 to +152 ms at ± 6 ms, scatter about 3): "cannot tell", never a false rejection.
"""
from __future__ import annotations

import bisect
import itertools
import math
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from teleop_flywheel.core import frame_meta
from teleop_flywheel.core.episode import CAMERA_PUBLISHERS, EpisodeMeta
from teleop_flywheel.data.validate.camera_lag import Z95, beyond
from teleop_flywheel.data.validate.reasons import CAMERA_LAG_UNKNOWN, CLOCK_OFFSET, Reason, ValidateConfig
from teleop_flywheel.recording.mcap.reader import ImageStream

INSTANCE_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,64}")

MEDIAN_EFFICIENCY = 1.2533  # the median's standard error over the mean's, for normal errors (√(π/2))
MAD_TO_SIGMA = 1.4826  # a normal distribution's σ over its median absolute deviation
CHANGE_Z = 3.0  # a change point where the two sides differ by more than this many standard errors (a false
# split of a clean session costs nothing: both sides pool near 0)
CHANGE_MIN_SIDE = 2  # estimates on each side of a change point: one outlier is not a restart
# An instance whose estimates scatter this much beyond their own errors (honest errors: about 1; the
# simulator's sinusoidal operator: about 3) decides nothing; five honest estimates exceed it ~1 % of the time.
UNRELIABLE_SCATTER = 2.5
UNRELIABLE_MIN_ESTIMATES = 5


class Pooled(Protocol):
    """What the pool reads of an episode's report (`validator.EpisodeReport`)."""

    session: str
    camera_lag: dict[str, dict[str, Any]]
    camera_instance: dict[str, str]
    clock_points: dict[str, list[list[float]]]
    camera_pool: dict[str, dict[str, Any]]
    reasons: list[Reason]
    warnings: list[Reason]
    error: str | None


def frame_instance(images: ImageStream) -> str:
    """The instance id most of a camera's frames carry ("" for none)."""
    ids = Counter(str(meta["instance"]) for data in images.data
                  if (meta := frame_meta.read(data)) is not None and "instance" in meta)
    if not ids:
        return ""
    best = ids.most_common(1)[0][0]
    return best if INSTANCE_PATTERN.fullmatch(best) else ""


def camera_instances(images: dict[str, ImageStream], ep: EpisodeMeta | None) -> dict[str, str]:
    """camera -> its instance in this episode: the frames' own id, else the last publisher GID the
    recorder saw ("" where neither is there)."""
    publishers = ep.extra.get(CAMERA_PUBLISHERS) if ep is not None else None
    out = {}
    for cam, im in images.items():
        inst = frame_instance(im)
        gids = publishers.get(cam) if isinstance(publishers, dict) else None
        if not inst and isinstance(gids, list) and gids and isinstance(gids[-1], str) \
                and INSTANCE_PATTERN.fullmatch(gids[-1]):
            inst = "gid:" + gids[-1]
        out[cam] = inst
    return out


@dataclass(frozen=True)
class LagPool:
    """One camera instance's lag over a run of a session's episodes."""

    session: str
    camera: str
    instance: str  # "" = no id (split at change points)
    run: int  # its index among the session's runs of this camera (0 first)
    episodes: int  # estimates pooled
    members: int  # episodes of the run (also those that could not tell)
    lag_ms: float | None
    stderr_ms: float | None
    bound_ms: float
    rejected: bool
    agreeing: int = 0  # estimates whose 95 % interval holds the pooled lag
    scatter: float = 1.0  # `scatter_ratio` of its estimates about the pooled lag

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        if self.lag_ms is None or self.stderr_ms is None:
            return f"camera {self.camera} lag unknown (0 of {self.members} episodes could tell)"
        n = self.episodes
        return f"camera {self.camera} lag {self.lag_ms:+.0f} ± {self.stderr_ms:.0f} ms ({n} episode{'s' * (n != 1)})"


def pool(estimates: list[tuple[float, float]]) -> tuple[float, float] | None:
    """The pooled lag of (lag, stderr) pairs and its standard error: the inverse-variance weighted
    median, read between the two estimates around half the weight (one episode whose estimate fell on
    a false peak moves it little: a restart's episodes at +24, +7, +23, +29 pool to +23.5, where their
    mean said +21 and the scatter widened it to nothing), its error 1.2533 / √Σw (the median's, for
    normal errors), widened by the robust scatter ratio 1.4826 · median |(lag − pooled) / stderr| when
    the estimates scatter more than their errors say."""
    if not estimates:
        return None
    ranked = sorted(estimates)
    w = [1.0 / max(se, 1e-3) ** 2 for _, se in ranked]
    total = sum(w)
    # each estimate stands at the middle of its weight on the cumulative scale, and the median is read off
    # between the two around half (an even count of equal weights: the middle of the middle two). Taking
    # the estimate where the weight first passes half picked one of the middle two by a weight 2 % larger:
    # a 25 ms camera's ten 320x240 estimates pooled at +19.5 ms, not beyond 15 ms, their middle +21.0.
    mids = list(itertools.accumulate(w, initial=0.0))
    at = [(lo + hi) / 2 / total for lo, hi in itertools.pairwise(mids)]
    k = bisect.bisect_left(at, 0.5)
    if k == 0 or k == len(at):
        median = ranked[min(k, len(at) - 1)][0]
    else:
        share = (0.5 - at[k - 1]) / (at[k] - at[k - 1])
        median = ranked[k - 1][0] + share * (ranked[k][0] - ranked[k - 1][0])
    stderr = MEDIAN_EFFICIENCY / math.sqrt(total)
    if len(estimates) > 1:
        stderr *= max(1.0, scatter_ratio(estimates, median))
    return median, stderr


def scatter_ratio(estimates: list[tuple[float, float]], center: float) -> float:
    """How much more the estimates scatter about `center` than their standard errors say: 1.4826 ·
    median |(lag − center) / stderr| (about 1 when the errors are honest)."""
    z = sorted(abs(lag - center) / max(se, 1e-3) for lag, se in estimates)
    mid = len(z) // 2
    return MAD_TO_SIGMA * (z[mid] if len(z) % 2 else (z[mid - 1] + z[mid]) / 2)


def _mean(estimates: list[tuple[float, float]]) -> tuple[float, float]:
    w = [1.0 / max(se, 1e-3) ** 2 for _, se in estimates]
    return sum(wi * lag for wi, (lag, _) in zip(w, estimates, strict=True)) / sum(w), 1.0 / math.sqrt(sum(w))


def change_points(estimates: list[tuple[float, float] | None]) -> list[int]:
    """Indices where a new run starts (0 first): binary segmentation of the episodes' estimates
    (None: no estimate, goes with its neighbours). The split is where the two sides' inverse-variance
    means differ most in standard errors (every episode counts where the split falls: the medians
    would jump by whole episodes); it stands when the sides' pools (`pool`: robust to one false peak)
    still differ by more than CHANGE_Z standard errors, with at least CHANGE_MIN_SIDE estimates on
    each side. Episodes without an estimate between the last one before the change and the first
    after it are a run of their own: nothing says on which side of the restart they were recorded,
    and either pool would judge them by a lag that may not be theirs (at 320x240, two clean episodes
    that could not tell, just before a 30 ms restart, were rejected with the late run)."""

    def split(lo: int, hi: int) -> list[int]:
        best, where = 0.0, -1
        for k in range(lo + 1, hi):
            lefts = [e for e in estimates[lo:k] if e is not None]
            rights = [e for e in estimates[k:hi] if e is not None]
            if min(len(lefts), len(rights)) < CHANGE_MIN_SIDE:
                continue
            (ml, sl), (mr, sr) = _mean(lefts), _mean(rights)
            z = abs(ml - mr) / math.hypot(sl, sr)
            if z > best:
                best, where = z, k
        if where < 0:
            return []
        left = pool([e for e in estimates[lo:where] if e is not None])
        right = pool([e for e in estimates[where:hi] if e is not None])
        if left is None or right is None or abs(left[0] - right[0]) / math.hypot(left[1], right[1]) <= CHANGE_Z:
            return []
        after = next(k for k in range(where, hi) if estimates[k] is not None)
        return split(lo, where) + [where] + ([after] if after > where else []) + split(after, hi)

    return [0] + split(0, len(estimates))


def _start(r: Pooled) -> float:
    return min((p[0] for pts in r.clock_points.values() for p in pts), default=0.0)


def pools(reports: list[Any], cfg: ValidateConfig) -> list[tuple[LagPool, list[Pooled]]]:
    """Every run of one camera instance in every session, with its members (module doc)."""
    by_camera: dict[tuple[str, str], list[Pooled]] = defaultdict(list)
    for r in reports:
        if r.error is None and r.session:
            for cam in r.camera_lag:
                # an instance is one run of the camera process: a session that crosses midnight UTC
                # (a Californian evening) is still one pool; without an id, the rig's UTC day bounds it
                rig = r.session.rsplit(" ", 1)[0]
                by_camera[(rig if r.camera_instance.get(cam) else r.session, cam)].append(r)
    out = []
    for (_group, cam), members in sorted(by_camera.items()):
        members.sort(key=_start)
        session = members[0].session
        runs: list[list[Pooled]] = []
        for r in members:
            inst = r.camera_instance.get(cam, "")
            if runs and inst == runs[-1][0].camera_instance.get(cam, ""):
                runs[-1].append(r)
            else:
                runs.append([r])
        run_index = -1
        for run in runs:
            inst = run[0].camera_instance.get(cam, "")
            ests = [_trusted(r.camera_lag[cam], cfg) for r in run]
            starts = change_points(ests) if not inst else [0]
            for a, b in zip(starts, starts[1:] + [len(run)], strict=True):
                run_index += 1
                got = pool([e for e in ests[a:b] if e is not None])
                n = sum(e is not None for e in ests[a:b])
                lag, se = got if got is not None else (None, None)
                agreeing = 0 if lag is None else sum(abs(e[0] - lag) <= Z95 * e[1] for e in ests[a:b] if e)
                scatter = 1.0 if lag is None or n < 2 else scatter_ratio([e for e in ests[a:b] if e], lag)
                rejected = (agreeing >= cfg.camera_lag_pool_min_episodes and 2 * agreeing > n
                            and beyond(lag, se, cfg.camera_lag_max_ms) and not _unreliable(n, scatter))
                out.append((LagPool(session, cam, inst, run_index, n, b - a, None if lag is None else round(lag, 2),
                                    None if se is None else round(se, 2), cfg.camera_lag_max_ms, rejected, agreeing,
                                    round(scatter, 2)),
                            run[a:b]))
    return out


def _trusted(est: dict[str, Any], cfg: ValidateConfig) -> tuple[float, float] | None:
    lag, se = est.get("lag_ms"), est.get("stderr_ms")
    if lag is None or se is None or se > cfg.camera_lag_max_stderr_ms or est.get("note"):
        return None
    return float(lag), float(se)


def _proves_within(p: LagPool, cfg: ValidateConfig) -> bool:
    """The pool shows its camera within the bound: its 95 % interval inside ±bound, held by enough
    agreeing estimates that are most of its estimates (module doc)."""
    return (p.lag_ms is not None and p.stderr_ms is not None and p.agreeing >= cfg.camera_lag_pool_min_episodes
            and 2 * p.agreeing > p.episodes and abs(p.lag_ms) + Z95 * p.stderr_ms <= p.bound_ms)


def _unreliable(estimates: int, scatter: float) -> bool:
    """An instance's estimates scatter far beyond their own errors (module doc)."""
    return estimates >= UNRELIABLE_MIN_ESTIMATES and scatter > UNRELIABLE_SCATTER


def _overrule_own(r: Pooled, p: LagPool, outlier_only: bool) -> None:
    """Turn `r`'s own content CLOCK_OFFSET for p's camera into a warning: every one when the pool's
    estimates are unreliable, else only one whose interval misses the pooled lag (module doc)."""
    assert p.lag_ms is not None and p.stderr_ms is not None
    for x in list(r.reasons):
        lag, se = x.numbers.get("lag_ms"), x.numbers.get("stderr_ms")
        if x.code != CLOCK_OFFSET or x.numbers.get("camera") != p.camera or "pool" in x.numbers \
                or lag is None or se is None:
            continue
        if outlier_only and abs(float(lag) - p.lag_ms) <= Z95 * float(se):
            continue
        why = (f"a false peak of this episode's motion, not the camera ({p.agreeing} of {p.episodes} estimates "
               "agree)" if outlier_only else
               f"its {p.episodes} estimates scatter {p.scatter:.1f}x beyond their own errors: this motion does "
               "not carry the camera's timing")
        r.reasons.remove(x)
        r.warnings.append(Reason(CAMERA_LAG_UNKNOWN, f"camera {p.camera}: its own estimate {float(lag):+.0f} ± "
                                 f"{float(se):.0f} ms set against the {p} pooled over its instance: {why}",
                                 {**x.numbers, "pool": p.to_dict()}))


def apply_lag_pools(reports: list[Any], cfg: ValidateConfig) -> list[LagPool]:
    """Pool every camera instance of every session; CLOCK_OFFSET on each member of a pool whose lag
    is beyond the bound (unless its own estimate already rejected it for that camera); an episode's
    own CLOCK_OFFSET that a pool proving the camera within the bound contradicts becomes a warning."""
    out = []
    for p, members in pools(reports, cfg):
        out.append(p)
        within, unreliable = _proves_within(p, cfg), _unreliable(p.episodes, p.scatter)
        for r in members:
            r.camera_pool[p.camera] = p.to_dict()
            if within or unreliable:
                _overrule_own(r, p, outlier_only=not unreliable)
            own = any(x.code == CLOCK_OFFSET and x.numbers.get("camera") == p.camera for x in r.reasons)
            if p.rejected and not own:
                where = f" of instance {p.instance}" if p.instance else ""
                r.reasons.append(Reason(CLOCK_OFFSET, f"{p} pooled over the session{where}, beyond "
                                        f"{p.bound_ms:g} ms; {p.agreeing} of its {p.episodes} estimates agree, "
                                        f"{p.members} episodes", {"camera": p.camera, "pool": p.to_dict()}))
    return out
