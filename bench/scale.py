"""How costs grow with the dataset (issue 38): the lineage registry with N checkpoints, and a
manifest's `create` and `verify` over a dataset of N episodes.

For each N a registry is built (one `Registry(...).save()` of N checkpoint entries, each trained on
a manifest of `--episodes` episodes; one manifest per `--share` checkpoints, as a sweep's or a
run's several checkpoints share theirs), then timed, the median of `--repeat` runs each (round-robin over the sizes):
- `register`: `register_checkpoint` of one more checkpoint on a new manifest file (what `train`
  and `lineage register` do);
- `which`: `Registry.load(path).which(id)` of a checkpoint in the middle (what `lineage which`,
  `eval watch` and an evaluation report do);
- the registry's size on disk (the file and, for SQLite, its WAL).
And for each dataset size (`--episode-sizes`; the synthetic dataset writer's episodes of 30
frames, numeric columns only: a manifest hashes data rows, video packets and files alike, and the
rows are what grows) `manifest.create` and `manifest.verify` of the whole dataset, the median of
`--manifest-repeat` runs, reported per episode.
The growth exponent is the slope of log(cost) over log(N) (least squares through the points;
its spread the slope's standard error); flat is 0 (for the manifest, of the cost per episode).
The issue's target: the cost (per episode) at the largest N within 1.3x of its cost at 100.

Usage: `python bench/scale.py [--sizes 100 1000 5000] [--episodes 1000] [--share 10] [--repeat 15]
[--episode-sizes 100 1000 10000] [--out bench/results/scale.json]`
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from result_file import RESULTS, load_average, write_result

from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.provenance.lineage import Registry, register_checkpoint
from teleop_flywheel.data.provenance.manifest import FORMAT as MANIFEST_FORMAT
from teleop_flywheel.data.provenance.manifest import create, verify
from teleop_flywheel.data.provenance.manifest_hash import manifest_sha256
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write


def _hex(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def manifest(seed: int, episodes: int) -> dict[str, Any]:
    """A manifest of the shape `manifest create` writes, its content ids distinct per seed."""
    eps = [{"episode_index": i, "episode_id": _hex(seed, i, "id"), "data_sha256": _hex(seed, i, "data"),
            "length": 300, "task": "pick the cube"} for i in range(episodes)]
    return {"format": MANIFEST_FORMAT, "dataset": f"/data/pick{seed}", "fingerprint": _hex(seed, "fp"),
            "filter": [], "episode_count": episodes, "frame_count": 300 * episodes,
            "created": "2026-12-06T00:00:00+00:00", "episodes": eps}


def build(path: Path, n: int, episodes: int, share: int) -> None:
    checkpoints = {}
    for k in range(0, n, share):
        m = manifest(k, episodes)
        sha = manifest_sha256(m)
        for c in range(k, min(n, k + share)):
            checkpoints[f"ckpt-{c:06d}"] = {"checkpoint": f"ckpt-{c:06d}", "run": f"run{k}",
                                            "manifest_path": f"/runs/run{k}.json", "manifest_sha256": sha,
                                            "registered": "2026-12-06T00:00:00+00:00", "manifest": m}
    Registry(path, checkpoints).save()


def size_on_disk(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())


def measure(tmp: Path, sizes: list[int], episodes: int, share: int, repeat: int) -> list[dict[str, Any]]:
    """Every registry built first, then the repeats taken round-robin over the sizes, so the load
    of a shared machine drifting during the run weighs on every size alike."""
    paths, built = {}, {}
    for n in sizes:
        paths[n] = tmp / f"lineage{n}.json"
        t0 = time.perf_counter()
        build(paths[n], n, episodes, share)
        built[n] = time.perf_counter() - t0
    register: dict[int, list[float]] = {n: [] for n in sizes}
    which: dict[int, list[float]] = {n: [] for n in sizes}
    for r in range(repeat):
        for n in sizes:
            mfile = tmp / f"new{n}_{r}.json"
            mfile.write_text(json.dumps(manifest(10**9 + r, episodes)))
            t0 = time.perf_counter()
            register_checkpoint(paths[n], f"new-{r}", mfile)
            register[n].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            entry = Registry.load(paths[n]).which(f"ckpt-{n // 2:06d}")
            which[n].append(time.perf_counter() - t0)
            assert entry["manifest"]["episode_count"] == episodes
    return [{"checkpoints": n, "build_s": round(built[n], 2),
             "register_ms": round(1e3 * statistics.median(register[n]), 2),
             "which_ms": round(1e3 * statistics.median(which[n]), 2), "bytes": size_on_disk(paths[n])}
            for n in sizes]


def measure_manifests(tmp: Path, sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    points = []
    for n in sizes:
        root = write(tmp / f"ds{n}", SyntheticSpec(episodes=n, min_length=30, max_length=30, seed=n)).root
        created, verified = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            m = create(LeRobotDataset.open(root))
            created.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            result = verify(LeRobotDataset.open(root), m)
            verified.append(time.perf_counter() - t0)
            assert m["episode_count"] == n and result.matched == n and not (result.added or result.changed)
        points.append({"episodes": n, "frames": m["frame_count"],
                       "create_ms_per_episode": round(1e3 * statistics.median(created) / n, 4),
                       "verify_ms_per_episode": round(1e3 * statistics.median(verified) / n, 4)})
    return points


def growth(points: list[dict[str, Any]], key: str, size: str = "checkpoints") -> dict[str, float]:
    """Slope of log(cost) on log(N) and its standard error."""
    xs = [math.log(p[size]) for p in points]
    ys = [math.log(max(p[key], 1e-6)) for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    resid = [y - (my + slope * (x - mx)) for x, y in zip(xs, ys, strict=True)]
    spread = math.sqrt(sum(e * e for e in resid) / (len(xs) - 2) / sxx) if len(xs) > 2 else 0.0
    return {"exponent": round(slope, 3), "spread": round(spread, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--share", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--episode-sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--manifest-repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "scale.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        points = measure(Path(tmp), args.sizes, args.episodes, args.share, args.repeat)
        manifest_points = measure_manifests(Path(tmp), args.episode_sizes, args.manifest_repeat)
    first, last = points[0], points[-1]
    result = {"benchmark": "scale", "what": "lineage registry: register and which with N checkpoints",
              "episodes_per_manifest": args.episodes, "checkpoints_per_manifest": args.share,
              "repeat": args.repeat, "load_average": load_average(), "points": points,
              "lineage": {op: {**growth(points, f"{op}_ms"),
                               "ratio_largest_to_smallest": round(last[f"{op}_ms"] / first[f"{op}_ms"], 2),
                               "within_1_3x": last[f"{op}_ms"] <= 1.3 * first[f"{op}_ms"]}
                          for op in ("register", "which")},
              "manifest_points": manifest_points,
              "manifest": {op: {**growth(manifest_points, f"{op}_ms_per_episode", "episodes"),
                                "ratio_largest_to_smallest": round(manifest_points[-1][f"{op}_ms_per_episode"]
                                                                   / manifest_points[0][f"{op}_ms_per_episode"], 2),
                                "within_1_3x": manifest_points[-1][f"{op}_ms_per_episode"]
                                <= 1.3 * manifest_points[0][f"{op}_ms_per_episode"]}
                           for op in ("create", "verify")}}
    write_result(args.out, result)


if __name__ == "__main__":
    main()
