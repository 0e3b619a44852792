"""The review server over HTTP (no browser): the token, paths kept inside the folder, Range, the log."""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from teleop_flywheel.data.provenance.reviews import LOG_FILE, read_reviews

from .conftest import Served


def status(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def rows(served: Served) -> dict[str, dict[str, object]]:
    code, body = status(served.url + "api/episodes")
    assert code == 200
    return {r["name"]: r for r in json.loads(body)["episodes"]}


def test_every_episode_listed_with_its_verdict_and_the_unreadable_one_with_why(served: Served) -> None:
    by_name = rows(served)
    assert set(by_name) == {"ep_clean", "ep_stall", "ep_unset", "ep_corrupt", "ep_garbage"}
    assert by_name["ep_stall"]["codes"] == ["FRAME_GAP"] and by_name["ep_stall"]["quarantined"]
    assert "OUTCOME_UNSET" in by_name["ep_unset"]["codes"] and by_name["ep_unset"]["operator"] == "bo"
    assert "CORRUPT" in by_name["ep_corrupt"]["codes"]
    assert by_name["ep_garbage"]["status"] == "ERROR" and "metadata unreadable" in by_name["ep_garbage"]["error"]
    gap = by_name["ep_stall"]["reasons"][0]
    assert gap["interval"] == [gap["numbers"]["at_s"], gap["numbers"]["at_s"] + gap["numbers"]["gap_s"]]


def test_without_the_token_or_outside_the_folder_nothing_is_served(served: Served, tmp_path: Path) -> None:
    base = served.url.rsplit("/", 2)[0]
    secret = tmp_path / "secret.txt"
    secret.write_text("do not serve")
    for url in (base + "/api/episodes", base + "/", base + "/files/bags", served.url[:-2] + "/api/episodes"):
        assert status(url)[0] == 404, url
    assert status(base + "/" + "x" * len(served.site.token) + "/api/episodes")[0] == 404
    escape = "/".join([".."] * 12) + str(secret)
    for rel in (escape, "%2e%2e/%2e%2e/" + str(secret), "%2F" + str(secret).lstrip("/")):
        code, body = status(served.url + "files/" + rel)
        assert code in (403, 404) and b"do not serve" not in body, rel
    (served.root / "link_out").symlink_to(secret)
    try:
        code, body = status(served.url + "files/link_out")
        assert code == 403 and b"do not serve" not in body
    finally:
        (served.root / "link_out").unlink()


def test_the_bag_is_served_with_range_requests(served: Served) -> None:
    mcap = served.root / "bags" / "ep_clean" / "ep_clean_0.mcap"
    data = mcap.read_bytes()
    code, body = status(served.url + "files/bags/ep_clean/ep_clean_0.mcap", {"Range": "bytes=8-15"})
    assert (code, body) == (206, data[8:16])
    code, body = status(served.url + "files/bags/ep_clean/ep_clean_0.mcap", {"Range": "bytes=-8"})
    assert (code, body) == (206, data[-8:])
    assert status(served.url + "files/bags/ep_clean/ep_clean_0.mcap", {"Range": f"bytes={len(data)}-"})[0] == 416
    assert status(served.url + "files/bags/ep_clean/ep_clean_0.mcap") == (200, data)


def test_concurrent_reviews_are_all_kept_whole(served: Served) -> None:
    path_of = {r["key"]: r["path"] for r in rows(served).values() if r["name"] != "ep_garbage"}
    jobs = [(k, v, f"note {i}") for i in range(10) for k in path_of for v in ("confirm", "overrule")]
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda j: post(served.url + "api/review", {"key": j[0], "verdict": j[1],
                                                                         "note": j[2]})[0], jobs))
    assert codes == [200] * len(jobs)
    lines = (served.root / LOG_FILE).read_text().splitlines()
    assert len(lines) == len(jobs) and len(read_reviews(served.root)) == len(jobs)
    logged = sorted((r["path"], r["verdict"], r["note"], r["reviewer"]) for r in map(json.loads, lines))
    assert logged == sorted((path_of[k], v, note, "tester") for k, v, note in jobs)


def test_a_bad_review_is_refused_and_not_logged(served: Served) -> None:
    key = rows(served)["ep_stall"]["key"]
    assert post(served.url + "api/review", {"key": key, "verdict": "delete"})[0] == 400
    assert post(served.url + "api/review", {"key": key, "verdict": "note", "note": "a\x00b"})[0] == 400
    assert post(served.url + "api/review", {"key": "0" * 16, "verdict": "confirm"})[0] == 404
    assert not (served.root / LOG_FILE).exists()


def test_a_non_loopback_host_needs_to_be_asked_for(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", "review", str(tmp_path), "--host", "0.0.0.0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--allow-remote" in proc.stderr.splitlines()[-1]


@pytest.mark.parametrize("missing", ["nowhere"])
def test_a_folder_that_is_not_there_is_one_line(tmp_path: Path, missing: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", "review", str(tmp_path / missing)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and missing in proc.stderr


def test_a_list_rereads_a_bag_whose_files_changed_and_only_that(served: Served) -> None:
    assert rows(served)["ep_clean"]["status"] == "WARN"
    validation = served.root / "validation.json"
    before = validation.read_text()
    doc = json.loads(before)
    clean = next(e for e in doc["episodes"] if e["name"] == "ep_clean")
    clean["status"], clean["reasons"] = "FAIL", [{"code": "DEAD_AIR", "detail": "re-judged", "numbers": {}}]
    try:
        validation.write_text(json.dumps(doc))
        assert rows(served)["ep_clean"]["codes"] == ["DEAD_AIR"]
    finally:
        validation.write_text(before)
    assert rows(served)["ep_clean"]["status"] == "WARN"
