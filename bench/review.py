"""Review page benchmark (issue 36): a folder of 1,000 episodes lists in < 1 s, an episode opens in < 1 s,
a seek shows its frame in < 200 ms — in the browser (Debian's chromium), timed by Playwright.

The folder: one synthetic episode with a camera stall (FRAME_GAP), recorded by the synthetic session
(the recorder's bag writer) and validated, then hard-linked N times into `quarantine/FRAME_GAP/`
with its record beside each copy, as `validate --quarantine` leaves them (the server reads every
bag's metadata and record; the bytes are shared, which the page cannot tell). Measured, the median
of `--repeat` runs each: the server's first scan (every bag's metadata read; `review` does it before
it prints the URL, later lists re-read only bags whose files changed), list (navigation to the table
drawn), open (navigation to the first frame decoded, plots drawn), seek (a click on a plot to its frame
decoded: the page's own performance.now() from the new frame URL to the image's load, and
Playwright's wall time around the click).

Usage: `python bench/review.py [--episodes 1000] [--repeat 5] [--out bench/results/review.json]`
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from result_file import write_result

from teleop_flywheel.data.review.server import ReviewSite, serve, url_of
from teleop_flywheel.data.validate.reasons import ValidateConfig
from teleop_flywheel.data.validate.validator import validate_paths
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

HERE = Path(__file__).resolve()
CHROMIUM = "/usr/bin/chromium"


def build(root: Path, n: int) -> None:
    src = root / "src" / "ep"
    write_session(src, SessionSpec(duration_s=10.0, seed=7, camera_stall=(4.0, 1.0)))
    record = validate_paths([src], ValidateConfig.load(), workers=1)[0].to_dict()
    assert record["codes"] == ["FRAME_GAP"], record["codes"]
    for i in range(n):
        name = f"ep_{i:05d}"
        dest = root / "out" / "quarantine" / "FRAME_GAP" / name
        dest.mkdir(parents=True)
        for f in src.iterdir():
            target = dest / (f"{name}_0.mcap" if f.suffix == ".mcap" else f.name)
            os.link(f, target)
        (dest.parent / f"{name}.json").write_text(json.dumps(record | {"name": name}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=HERE.parent / "results" / "review.json")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        build(root, args.episodes)
        built_s = time.perf_counter() - t
        site = ReviewSite(root / "out", "bench")
        server = serve(site)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = url_of(server, site)
        t = time.perf_counter()
        key = site.episodes()[args.episodes // 2]["key"]  # what `review` does before it prints the URL
        cold_s = time.perf_counter() - t
        lists, opens, seeks, seek_walls = [], [], [], []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            for _ in range(args.repeat):
                t = time.perf_counter()
                page.goto(url)
                page.wait_for_selector("body[data-ready='1']")
                lists.append(time.perf_counter() - t)
                shown = page.locator("#episodes tbody tr").count()
                t = time.perf_counter()
                page.goto(url + f"episode.html?key={key}")
                page.wait_for_selector("body[data-frame]")
                opens.append(time.perf_counter() - t)
                canvas = page.locator("#plots canvas").first
                box = canvas.bounding_box()
                for x in (0.1, 0.3, 0.7, 0.9):
                    before = page.evaluate("window.review.frame")
                    t = time.perf_counter()
                    canvas.click(position={"x": box["width"] * x, "y": box["height"] / 2})
                    frame = page.evaluate("window.review.frame")
                    assert frame != before
                    page.wait_for_selector(f"body[data-frame='{frame}']")
                    seek_walls.append(time.perf_counter() - t)
                    seeks.append(page.evaluate("window.review.seekMs") / 1e3)
            browser.close()
        server.shutdown()
        server.server_close()
    result = {
        "episodes": args.episodes, "listed": shown, "repeat": args.repeat, "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()), "build_s": round(built_s, 1),
        "first_scan_s": round(cold_s, 3),
        "list_s": round(statistics.median(lists), 3), "list_max_s": round(max(lists), 3),
        "open_s": round(statistics.median(opens), 3), "open_max_s": round(max(opens), 3),
        "seek_ms": round(statistics.median(seeks) * 1e3, 1), "seek_max_ms": round(max(seeks) * 1e3, 1),
        "seek_wall_ms": round(statistics.median(seek_walls) * 1e3, 1),
        "targets": {"list_s": 1.0, "open_s": 1.0, "seek_ms": 200.0},
    }
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
