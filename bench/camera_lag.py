"""Camera-lag-from-content benchmark: how well the validator finds a camera's clock offset
in its pixels.

Synthetic episodes (`testing/synthetic_session`, the project's own BagWriter; a scripted hand doing
reach-and-place moves; the camera draws the follower arm as it was at each exposure instant) with
the camera's header stamp, publish and receive times shifted together by an injected skew — so the
receive − stamp latency the stamp-based check reads is normal — are validated with the shipped
thresholds (`config/validate.yaml`: reject above 15 ms, trust an estimate with a standard error of
at most 5 ms). Per skew and seed: the estimate, its standard error, the verdict. Also slow, smooth
motion (sinusoids with 7–13 s periods), where the content cannot tell: the verdict must be the
warning CAMERA_LAG_UNKNOWN, never a pass or a rejection. Time: the estimator alone, per minute of
30 fps video.

Usage: `python bench/camera_lag.py [--seeds 6] [--seconds 20] [--width 320 --height 240]
[--out bench/results/camera_lag.json]`
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent))

SKEWS_MS = (0.0, 25.0, -25.0, 40.0, -40.0, 60.0, -60.0)


def _episode(root: Path, seed: int, skew: float, args: argparse.Namespace, motion: str = "reach") -> dict[str, Any]:
    import numpy as np

    from teleop_flywheel.core.bag_topics import FOLLOWER_STATE, camera_image
    from teleop_flywheel.data.validate import validator as val
    from teleop_flywheel.data.validate.camera_lag import MotionEnergy, estimate_lag, small_grey
    from teleop_flywheel.recording.mcap.reader import open_bag
    from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

    spec = SessionSpec(duration_s=args.seconds, stamp_clock="ros", motion=motion, seed=seed, camera_clock_skew_ms=skew,
                       width=args.width, height=args.height)
    bag = write_session(root / f"{motion}_{seed}_{skew:+.0f}", spec).bag
    t = time.perf_counter()
    report = val.validate_bag((str(bag), val.ValidateConfig.load()))
    validate_s = time.perf_counter() - t
    b = open_bag(bag)
    im, js = b.images(camera_image("wrist")), b.joint_state(FOLLOWER_STATE)
    energy = MotionEnergy()
    for d in im.data:
        img = small_grey(d)
        if img is not None:
            energy.add(img)
    e = energy.energy()
    t = time.perf_counter()
    estimate_lag(im.stamps_ns, e, js.stamps_ns, js.position)
    estimate_s = time.perf_counter() - t
    est = report.camera_lag["wrist"]
    return {"seed": seed, "skew_ms": skew, "motion": motion, "lag_ms": est["lag_ms"], "stderr_ms": est["stderr_ms"],
            "r2": est["r2"], "note": est["note"], "status": report.status, "codes": report.codes,
            "warnings": sorted({w.code for w in report.warnings}),
            "error_ms": None if est["lag_ms"] is None else round(est["lag_ms"] - skew, 2),
            "frames": int(len(np.asarray(im.stamps_ns))), "validate_s": round(validate_s, 3),
            "estimate_s": round(estimate_s, 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--height", type=int, default=240)
    parser.add_argument("--out", type=Path, default=HERE.parent / "results" / "camera_lag.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench_camera_lag_") as tmp:
        for seed in range(1, args.seeds + 1):
            for skew in SKEWS_MS:
                rows.append(_episode(Path(tmp), seed, skew, args))
                print(json.dumps(rows[-1]), flush=True)
            rows.append(_episode(Path(tmp), seed, 0.0, args, motion="smooth"))
            print(json.dumps(rows[-1]), flush=True)
    reach = [r for r in rows if r["motion"] == "reach"]
    errors = [r["error_ms"] for r in reach if r["error_ms"] is not None]
    per_skew = {}
    for skew in SKEWS_MS:
        rs = [r for r in reach if r["skew_ms"] == skew]
        errs = [r["error_ms"] for r in rs if r["error_ms"] is not None]
        per_skew[f"{skew:+.0f}"] = {
            "episodes": len(rs), "mean_error_ms": round(statistics.fmean(errs), 2) if errs else None,
            "max_abs_error_ms": round(max(abs(x) for x in errs), 2) if errs else None,
            "median_stderr_ms": round(statistics.median(r["stderr_ms"] for r in rs), 2),
            "rejected_clock_offset": sum("CLOCK_OFFSET" in r["codes"] for r in rs),
            "passed": sum(r["status"] == "PASS" for r in rs), "warned": sum(r["status"] == "WARN" for r in rs)}
    smooth = [r for r in rows if r["motion"] == "smooth"]
    per_minute = [r["estimate_s"] * 60.0 / args.seconds for r in reach]
    summary = {
        "episodes": len(rows), "episode_s": args.seconds, "camera": f"{args.width}x{args.height} JPEG q90 @ 30 fps",
        "within_5ms": sum(abs(x) <= 5.0 for x in errors), "estimated": len(errors),
        "rms_error_ms": round(statistics.fmean(x * x for x in errors) ** 0.5, 2) if errors else None,
        "mean_error_ms": round(statistics.fmean(errors), 2) if errors else None,
        "max_abs_error_ms": round(max(abs(x) for x in errors), 2) if errors else None,
        "skewed_rejected": sum("CLOCK_OFFSET" in r["codes"] for r in reach if r["skew_ms"] != 0.0),
        "skewed": sum(r["skew_ms"] != 0.0 for r in reach),
        "clean_passed": sum(r["status"] == "PASS" for r in reach if r["skew_ms"] == 0.0),
        "clean": sum(r["skew_ms"] == 0.0 for r in reach),
        "smooth_warned": sum(r["status"] == "WARN" and "CAMERA_LAG_UNKNOWN" in r["warnings"] for r in smooth),
        "smooth": len(smooth),
        "estimate_s_per_minute_of_video": {"median": round(statistics.median(per_minute), 3),
                                           "max": round(max(per_minute), 3)},
        "per_skew": per_skew, "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "cpus": os.cpu_count()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "episodes": rows}, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
