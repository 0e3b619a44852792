"""The follower's bus loop under cProfile, timed by the thread's CPU clock: CPU per tick per
function, self and cumulative (`rig_cpu.py --profile-seconds`)."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any


def profiled(fn: Any, out: str) -> Any:
    """`fn` under cProfile timed by this thread's CPU clock (time spent waiting is not counted),
    the statistics written to `out` when it returns."""
    import cProfile

    def run(*args: Any, **kwargs: Any) -> Any:
        prof = cProfile.Profile(time.thread_time)
        prof.enable()
        try:
            return fn(*args, **kwargs)
        finally:
            prof.disable()
            prof.dump_stats(out)

    return run


def role_profiled_driver(profile_out: str, ros_args: list[str]) -> None:
    """The `arm_driver` node as its console script runs it, its bus loop (`ArmDriver.run`, the
    thread that ticks) under `profiled`."""
    from teleop_flywheel.ros.nodes import arm_driver

    driver = arm_driver.ArmDriver
    driver.run = profiled(driver.run, profile_out)
    sys.argv = [sys.argv[0], *ros_args]
    arm_driver.main()


def per_tick(stats_file: Path, top: int = 30) -> dict[str, Any]:
    """A bus loop's cProfile statistics per tick (ticks = calls of rclpy's Publisher.publish: one
    sample published per tick): CPU microseconds per function, self and with what it calls."""
    import pstats

    stats: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = pstats.Stats(str(stats_file)).stats  # type: ignore[attr-defined]
    ticks = next(nc for (path, _line, name), (_cc, nc, *_r) in stats.items()
                 if name == "publish" and path.endswith("rclpy/publisher.py"))

    def label(key: tuple[str, int, str]) -> str:
        path, line, name = key
        short = path.split("site-packages/")[-1].split("/teleop_flywheel/")[-1].split("/bench/")[-1]
        return f"{name} ({short}:{line})" if line else name

    def table(column: int) -> list[list[Any]]:
        ranked = sorted(stats.items(), key=lambda kv: -kv[1][column])[:top]
        return [[label(k), round(v[column] / ticks * 1e6, 2), round(v[1] / ticks, 2)] for k, v in ranked]

    return {"ticks": ticks, "us_per_tick": round(sum(v[2] for v in stats.values()) / ticks * 1e6, 1),
            "columns": ["function", "us_per_tick", "calls_per_tick"],
            "self": table(2), "cumulative": table(3)}
