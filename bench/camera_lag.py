"""Camera-lag-from-content benchmark on the motion the rig really produces.

Episodes: `testing/synthetic_session` with `motion="rig"` — the demo's own scripted policy (2 s
minimum-jerk moves through its waypoints, every second one wrong), the simulator's sweeping human
(`rig_human="sinusoid"`, `sim_servo.default_human`: the hard case; the demo's leader now reaches) in
a takeover at 2.4–4.4 s, the arm driver's `CommandGuard` (2 rad/s) and the simulated STS3215s (top
speed, acceleration, position loop, gravity sag) moving the follower; one 30 fps camera drawing
the follower at each exposure (`--camera`, 640×480 by default: the camera node's own default; the
demo's 320×240 draws the arm a third as tall below its timecode strip, and the validator's 1/8-scale
decode leaves it a few pixels wide), written with the project's `BagWriter`. Why not the demo
itself: a demo episode costs ~10 s of a loaded machine's ROS graph and the demo injects other
faults into most of them; this runs the same policy, guard and servo model offline, 0.6 s per
8 s episode, so hundreds of episodes fit. Skews: the camera's header stamp, publish and receive
times shifted together (the pipeline latency looks normal: only the pixels can tell).

Motion kinds (`--motions`): `policy`, the above; `teleop`, the simulator's teleop operator alone
(`session_kind="teleop"`: every joint a slow sinusoid, `sim_servo.default_human`, through the same
guard and servos) — the motion whose periodic, unsynchronised reversals give the squared error
several minima of nearly the same depth (`camera_lag`'s module doc, 6.): never still, no grasp, its
only sharp event the first second's catch-up, kept as the hard case; `reach`, teleoperation by a
hand at work (`rig_human="reach"`: minimum-jerk moves of 0.5–1 s between poses with 0.1–0.4 s
pauses, the gripper closing and opening as in pick-and-place, through the same guard and servos).
Every rate below is given per motion kind (`per_motion`); the top-level summary is the `policy`
motion's.

Measured with the shipped thresholds (`config/validate.yaml`), every episode through the
validator (`validate_bag`), the pools through `lag_pool.apply_lag_pools`:

- per episode and skew (0, ±15, ±25, ±35, ±60 ms): rejected CLOCK_OFFSET on its own, "cannot
  tell" (CAMERA_LAG_UNKNOWN), and whether the 95 % interval (lag ± 1.96 standard errors) holds
  the true lag; the share of "cannot tell" among episodes with ≥ 2 s of arm motion;
- through the session pool: the episodes of each skew in sessions of 10 (one camera instance),
  each rejected when its instance's pool is beyond the bound;
- restart sessions: 10 episodes, the camera restarting before episode 6 with a 30 ms shift —
  which episodes are rejected, with the instance id in the frames and without it (a foreign
  driver: the change point splits the session);
- short clean episodes (3–7 s, `--short-seeds` each): how many are rejected on their own and how
  many cannot tell (fewer than `camera_lag.MIN_BLOCKS` one-second blocks: no verdict);
- time: the estimator alone, per minute of video.

`--probe` (or a motion named `teleop+probe`, `policy+probe`) records every episode under a task
spec with a clock probe (wrist_flex ±0.1 rad in 0.3 s, 0.5 s after the reset: played by the
policy, added to the leader's command in teleop).

Usage: `python bench/camera_lag.py [--seeds 30] [--seconds 8] [--restarts 3] [--short-seeds 12]
[--skews 0,15,-15,25,-25,35,-35,60,-60] [--motions policy,teleop,teleop+probe,reach] [--camera 640x480]
[--probe] [--probe-seeds N] [--jobs 1] [--out bench/results/camera_lag.json]` (`--jobs N`: N episodes
written and validated at once)
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent))

SKEWS_MS = (0.0, 15.0, -15.0, 25.0, -25.0, 35.0, -35.0, 60.0, -60.0)
SESSION = 10  # episodes per pooled session
RESTART_AT = 5  # 0-based: the camera restarts before the 6th episode
RESTART_SHIFT_MS = 30.0
MOVING_RAD_S = 0.05  # a joint faster than this is the arm moving
SHORT_S = (3.0, 4.0, 5.0, 6.0, 7.0)  # clean episodes shorter than the main ones
PROBE = {"joint": "wrist_flex", "amplitude_rad": 0.1, "duration_s": 0.3}  # docs/task_spec.md's example


def _spec(seed: int, skew: float, args: argparse.Namespace, session: str, index: int, instance: str) -> Any:
    from teleop_flywheel.core.task_spec import parse_task_spec
    from teleop_flywheel.testing.synthetic_session import SessionSpec

    takeover = ((2.4, 4.4, "wrong_grasp"),) if args.motion == "policy" else ()
    task = parse_task_spec({"instruction": "bench", "clock_probe": PROBE}) if args.probe else None
    return SessionSpec(duration_s=args.seconds, motion="rig", seed=seed, camera_clock_skew_ms=skew,
                       cameras=("front",), session_kind="policy" if args.motion == "policy" else "teleop",
                       rig_human="reach" if args.motion == "reach" else "sinusoid", interventions=takeover,
                       session_time_s=60.0 + 20.0 * index, rig_id=session, camera_instance=instance,
                       width=args.width, height=args.height, task_spec=task)


def _moving_s(bag: Path) -> float:
    import numpy as np

    from teleop_flywheel.core.bag_topics import FOLLOWER_STATE
    from teleop_flywheel.recording.mcap.reader import open_bag

    js = open_bag(bag).joint_state(FOLLOWER_STATE)
    t = np.asarray(js.stamps_ns, np.int64) / 1e9
    speed = np.abs(np.diff(np.asarray(js.position), axis=0)).max(axis=1) / np.maximum(np.diff(t), 1e-6)
    return float(np.diff(t)[speed > MOVING_RAD_S].sum())


def _episode(root: Path, seed: int, skew: float, args: argparse.Namespace, session: str, index: int,
             instance: str, cfg: Any, keep: bool = False) -> tuple[dict[str, Any], Any]:
    """Write one episode, validate it: (its row, its report). The bag is removed unless `keep`."""
    from teleop_flywheel.data.validate import validator as val
    from teleop_flywheel.testing.synthetic_session import write_session

    bag_dir = root / f"{session}_{index:02d}_{skew:+.0f}"
    bag = write_session(bag_dir, _spec(seed, skew, args, session, index, instance)).bag
    t = time.perf_counter()
    report = val.validate_bag((str(bag), cfg))
    est = report.camera_lag["front"]
    lag, se = est["lag_ms"], est["stderr_ms"]
    row = {"seed": seed, "skew_ms": skew, "session": session, "index": index, "lag_ms": lag, "stderr_ms": se,
           "r2": est["r2"], "events": est["events"], "note": est["note"], "status": report.status,
           "codes": report.codes, "warnings": sorted({w.code for w in report.warnings}),
           "error_ms": None if lag is None else round(lag - skew, 2),
           "cannot_tell": "CAMERA_LAG_UNKNOWN" in {w.code for w in report.warnings},
           "covered": None if lag is None or se is None or est["note"] else abs(lag - skew) <= 1.96 * se,
           "moving_s": round(_moving_s(bag), 2), "validate_s": round(time.perf_counter() - t, 3)}
    if not keep:
        shutil.rmtree(bag_dir)
    return row, report


def _episodes(jobs: int, calls: list[tuple[Any, ...]]) -> list[tuple[dict[str, Any], Any]]:
    """`_episode(*call)` for every call, `jobs` at a time (processes: the estimator is CPU-bound), in order."""
    if jobs <= 1:
        out = [_episode(*call) for call in calls]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            out = list(pool.map(_episode, *zip(*calls, strict=True)))
    for row, _report in out:
        print(json.dumps(row), flush=True)
    return out


def _pooled(reports: list[Any], cfg: Any) -> list[bool]:
    """Each episode's CLOCK_OFFSET after its session's pools (copies: the per-episode reports stay)."""
    from teleop_flywheel.data.validate.lag_pool import apply_lag_pools

    copies = [copy.deepcopy(r) for r in reports]
    apply_lag_pools(copies, cfg)
    return ["CLOCK_OFFSET" in r.codes for r in copies]


def _estimate_s_per_minute(bag_dir: Path, seconds: float) -> float:
    from teleop_flywheel.core.bag_topics import FOLLOWER_STATE, camera_image
    from teleop_flywheel.data.validate.camera_lag import MotionEnergy, estimate_lag, small_grey
    from teleop_flywheel.recording.mcap.reader import open_bag

    b = open_bag(bag_dir)
    im, js = b.images(camera_image("front")), b.joint_state(FOLLOWER_STATE)
    energy = MotionEnergy()
    for d in im.data:
        img = small_grey(d)
        if img is not None:
            energy.add(img)
    e = energy.energy()
    t = time.perf_counter()
    estimate_lag(im.stamps_ns, e, js.stamps_ns, js.position)
    return (time.perf_counter() - t) * 60.0 / seconds


def _rate(xs: list[bool]) -> dict[str, Any]:
    return {"of": len(xs), "n": sum(xs), "share": round(sum(xs) / len(xs), 3) if xs else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--restarts", type=int, default=3, help="restart sessions of 10 episodes")
    parser.add_argument("--short-seeds", type=int, default=12, help="clean episodes per short length")
    parser.add_argument("--skews", default=",".join(f"{x:g}" for x in SKEWS_MS),
                        help="injected skews in ms, comma-separated (0 first: the clean episodes)")
    parser.add_argument("--motions", default="policy,teleop,teleop+probe,reach",
                        help="motion kinds, comma-separated (policy, teleop, reach; +probe: with the clock probe)")
    parser.add_argument("--camera", default="640x480",
                        help="the camera's frame size WxH (640x480: the camera node's default, hw/camera/source.py)")
    parser.add_argument("--probe", action="store_true",
                        help="every episode under a task spec with a clock probe (wrist_flex ±0.1 rad in 0.3 s)")
    parser.add_argument("--probe-seeds", type=int, help="seeds of the +probe motions (default: --seeds)")
    parser.add_argument("--jobs", type=int, default=1, help="episodes written and validated at once (processes)")
    parser.add_argument("--out", type=Path, default=HERE.parent / "results" / "camera_lag.json")
    args = parser.parse_args()
    args.skews = tuple(float(x) for x in args.skews.split(","))
    try:
        args.width, args.height = (int(x) for x in args.camera.lower().split("x"))
    except ValueError:
        parser.error(f"--camera: expected WxH such as 640x480, got {args.camera!r}")
    load_before = os.getloadavg()
    per_motion, all_rows, all_short = {}, [], []
    for motion in args.motions.split(","):
        kind, _, probe = motion.partition("+")
        if kind not in ("policy", "teleop", "reach") or probe not in ("", "probe"):
            parser.error(f"--motions: unknown motion {motion!r} (policy, teleop, reach; +probe for the clock probe)")
        seeds = args.probe_seeds if probe and args.probe_seeds is not None else args.seeds
        summary, rows, short = _measure(argparse.Namespace(**vars(args) | {"motion": kind, "label": motion,
                                                                           "probe": args.probe or bool(probe),
                                                                           "seeds": seeds}))
        per_motion[motion] = summary
        all_rows += [r | {"motion": motion} for r in rows]
        all_short += [r | {"motion": motion} for r in short]
    first = next(iter(per_motion.values()))
    summary = {**first, "per_motion": per_motion, "load_average_before": load_before,
               "load_average_after": os.getloadavg(), "cpus": os.cpu_count()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "episodes": all_rows, "short_episodes": all_short},
                                   indent=2) + "\n")
    for motion, s in per_motion.items():
        print(motion, json.dumps({k: v for k, v in s.items() if k not in ("per_skew", "restarts", "short_clean")},
                                 indent=2))
    print(f"wrote {args.out}")
    return 0


def _measure(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """Every measurement of the module doc on one motion kind: (summary, episode rows, short rows)."""
    from teleop_flywheel.data.validate.reasons import ValidateConfig

    cfg = ValidateConfig.load()
    rows: list[dict[str, Any]] = []
    reports: dict[tuple[float, int], Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench_camera_lag_") as tmp:
        root = Path(tmp) / args.label
        root.mkdir()
        keys = [(skew, seed) for skew in args.skews for seed in range(args.seeds)]
        calls = [(root, seed, skew, args, f"rig{skew:+.0f}s{seed // SESSION}", seed % SESSION,
                  f"cam-rig{skew:+.0f}s{seed // SESSION}", cfg, skew == 0.0 and seed < 5) for skew, seed in keys]
        for key, (row, rep) in zip(keys, _episodes(args.jobs, calls), strict=True):
            rows.append(row)
            reports[key] = rep
        per_minute = [_estimate_s_per_minute(root / f"rig+0s{s // SESSION}_{s % SESSION:02d}_+0", args.seconds)
                      for s in range(min(args.seeds, 5))]
        # the pools: sessions of 10 consecutive seeds per skew, one camera instance each
        pooled: dict[float, list[bool]] = {}
        for skew in args.skews:
            pooled[skew] = []
            for first in range(0, args.seeds - SESSION + 1, SESSION):
                pooled[skew] += _pooled([reports[(skew, s)] for s in range(first, first + SESSION)], cfg)
        # restart sessions: 1-5 clean (instance a), 6-10 30 ms late (instance b, a restarted camera)
        restarts = []
        for k in range(args.restarts):
            session = f"restart{k}"
            calls = [(root, 1000 + SESSION * k + i, RESTART_SHIFT_MS if i >= RESTART_AT else 0.0, args, session, i,
                      f"cam-{session}-{'b' if i >= RESTART_AT else 'a'}", cfg) for i in range(SESSION)]
            members = []
            for row, rep in _episodes(args.jobs, calls):
                rows.append(row | {"restart_session": k})
                members.append(rep)
            with_id = _pooled(members, cfg)
            anonymous = [copy.deepcopy(r) for r in members]
            for r in anonymous:
                r.camera_instance = {c: "" for c in r.camera_instance}
            without_id = _pooled(anonymous, cfg)
            restarts.append({"session": k, "own": ["CLOCK_OFFSET" in r.codes for r in members],
                             "with_instance_id": with_id, "without_instance_id": without_id,
                             "expected": [i >= RESTART_AT for i in range(SESSION)]})
            print(json.dumps(restarts[-1]), flush=True)
        lengths = [(seconds, seed) for seconds in SHORT_S for seed in range(args.short_seeds)]
        calls = [(root, 2000 + seed, 0.0, argparse.Namespace(**vars(args) | {"seconds": seconds}),
                  f"short{seconds:g}", seed, "", cfg) for seconds, seed in lengths]
        short = [row | {"seconds": seconds} for (seconds, _seed), (row, _rep) in
                 zip(lengths, _episodes(args.jobs, calls), strict=True)]
    skewed = [r for r in rows if "restart_session" not in r]
    per_skew = {}
    for skew in args.skews:
        rs = [r for r in skewed if r["skew_ms"] == skew]
        errs = [r["error_ms"] for r in rs if r["error_ms"] is not None and not r["note"]]
        per_skew[f"{skew:+.0f}"] = {
            "episodes": len(rs),
            "rejected_on_own": _rate(["CLOCK_OFFSET" in r["codes"] for r in rs]),
            "rejected_with_pool": _rate(pooled[skew]),
            "cannot_tell": _rate([r["cannot_tell"] for r in rs]),
            "covered_95": _rate([bool(r["covered"]) for r in rs if r["covered"] is not None]),
            "rms_error_ms": round(statistics.fmean(x * x for x in errs) ** 0.5, 2) if errs else None,
            "max_abs_error_ms": round(max(abs(x) for x in errs), 2) if errs else None,
            "median_stderr_ms": round(statistics.median(r["stderr_ms"] for r in rs if r["stderr_ms"] is not None), 2)}
    moving = [r for r in rows if r["moving_s"] >= 2.0]
    big = [r for r in skewed if abs(r["skew_ms"]) >= 35.0]
    mid = [s for s in args.skews if abs(s) == 25.0]
    summary = {
        "episodes": len(rows), "episode_s": args.seconds, "seeds": args.seeds,
        "camera": f"{args.width}x{args.height} JPEG q90 @ 30 fps", "clock_probe": PROBE if args.probe else None,
        "motion": {"policy": "rig (demo policy, takeover, 2 rad/s guard, simulated servos)",
                   "teleop": "rig (sinusoidal teleop operator, 2 rad/s guard, simulated servos)",
                   "reach": "rig (reaching teleop operator: moves, pauses, grasps; 2 rad/s guard, simulated servos)"
                   }[args.motion],
        "clean_rejected": _rate(["CLOCK_OFFSET" in r["codes"] for r in skewed if r["skew_ms"] == 0.0]),
        "clean_rejected_with_pool": _rate(pooled[0.0]),
        "skew_ge_35_rejected_on_own": _rate(["CLOCK_OFFSET" in r["codes"] for r in big]),
        "skew_25_rejected_with_pool": _rate([x for s in mid for x in pooled[s]]),
        "cannot_tell_moving_ge_2s": _rate([r["cannot_tell"] for r in moving]),
        "clean_cannot_tell": _rate([r["cannot_tell"] for r in skewed if r["skew_ms"] == 0.0]),
        "skew_ge_35_cannot_tell": _rate([r["cannot_tell"] for r in big]),
        "covered_95": _rate([bool(r["covered"]) for r in rows if r["covered"] is not None]),
        # the clean episodes (1-5) of the restart sessions, each on its own: a false rejection is the worst outcome
        "restart_clean_rejected_on_own": _rate([own for r in restarts for own in r["own"][:RESTART_AT]]),
        "restart_sessions": len(restarts),
        "restart_as_expected_with_id": sum(r["with_instance_id"] == r["expected"] for r in restarts),
        "restart_as_expected_without_id": sum(r["without_instance_id"] == r["expected"] for r in restarts),
        "estimate_s_per_minute_of_video": {"median": round(statistics.median(per_minute), 3),
                                           "max": round(max(per_minute), 3)},
        "short_clean_rejected": _rate(["CLOCK_OFFSET" in r["codes"] for r in short]),
        "short_clean": {f"{s:g}s": {"rejected_on_own": _rate(["CLOCK_OFFSET" in r["codes"] for r in short
                                                              if r["seconds"] == s]),
                                    "cannot_tell": _rate([r["cannot_tell"] for r in short if r["seconds"] == s])}
                        for s in SHORT_S},
        "per_skew": per_skew, "restarts": restarts}
    return summary, rows, short


if __name__ == "__main__":
    sys.exit(main())
