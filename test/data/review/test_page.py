"""The review page in a real browser: Playwright driving Debian's chromium against the real server on a
real session output (conftest.py). Skips, saying why, where chromium or playwright is absent."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from teleop_flywheel.data.provenance.reviews import LOG_FILE

from .conftest import Served

CHROMIUM = "/usr/bin/chromium"
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
pytestmark = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                                reason="chromium is not installed (Debian: apt-get install chromium; .ci/run does)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


class Tab:
    """A page whose every request is logged: the test asserts none left the loopback server."""

    def __init__(self, browser: Any, served: Served) -> None:
        self.context = browser.new_context()
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.served = served

    def open(self, path: str = "") -> Any:
        self.page.goto(self.served.url + path)
        self.page.wait_for_selector("body[data-ready='1']")
        return self.page

    def assert_local(self) -> None:
        origin = self.served.url.split("/", 3)[:3]
        assert self.requests and all(u.split("/", 3)[:3] == origin for u in self.requests), self.requests


@pytest.fixture()
def tab(browser: Any, served: Served) -> Iterator[Tab]:
    t = Tab(browser, served)
    yield t
    t.assert_local()
    t.context.close()


def names_shown(page: Any) -> list[str]:
    return page.locator("#episodes tbody tr td:first-child").all_inner_texts()


def row_text(page: Any, name: str) -> str:
    return page.locator("#episodes tbody tr", has_text=name).inner_text()


def api(served: Served, path: str) -> Any:
    import urllib.request
    with urllib.request.urlopen(served.url + path, timeout=10) as r:
        return json.loads(r.read())


def key_of(served: Served, name: str) -> str:
    return next(r["key"] for r in api(served, "api/episodes")["episodes"] if r["name"] == name)


def test_the_list_shows_every_episode_with_its_codes_and_filters(tab: Tab) -> None:
    page = tab.open()
    shown = names_shown(page)
    assert sorted(shown) == ["ep_clean", "ep_corrupt", "ep_garbage", "ep_stall", "ep_unset"]
    assert shown[-1] == "ep_clean"  # passed (with a warning) comes after every rejection
    assert "FRAME_GAP" in row_text(page, "ep_stall")
    assert "OUTCOME_UNSET" in row_text(page, "ep_unset")
    assert "CORRUPT" in row_text(page, "ep_corrupt")
    assert "ERROR" in row_text(page, "ep_garbage") and "metadata unreadable" in row_text(page, "ep_garbage")
    page.select_option("select[name=code]", "FRAME_GAP")
    assert sorted(names_shown(page)) == ["ep_corrupt", "ep_stall"]
    page.select_option("select[name=code]", "")
    page.select_option("select[name=operator]", "bo")
    assert names_shown(page) == ["ep_unset"]
    page.select_option("select[name=operator]", "")
    page.select_option("select[name=status]", "ERROR")
    assert names_shown(page) == ["ep_garbage"]


def test_a_frame_gap_episode_opens_at_the_gap_plays_and_seeks(tab: Tab) -> None:
    served = tab.served
    key = key_of(served, "ep_stall")
    detail = api(served, f"api/episode/{key}")
    gap = detail["row"]["reasons"][0]
    assert gap["code"] == "FRAME_GAP"
    stamps = detail["cameras"]["wrist"]
    at = gap["numbers"]["at_s"]
    before_gap = max(i for i, s in enumerate(stamps) if s <= at)
    page = tab.open(f"episode.html?key={key}")
    page.wait_for_selector(f"body[data-frame='{before_gap}']")
    assert page.evaluate("window.review.time") == pytest.approx(at, abs=1e-9)
    assert page.evaluate("document.getElementById('frame').naturalWidth") == 320
    assert stamps[before_gap + 1] - stamps[before_gap] > 0.5  # the next frame is across the gap
    page.keyboard.press(" ")
    page.wait_for_function("t => window.review.time > t", arg=at + 0.3)
    page.keyboard.press(" ")
    assert not page.evaluate("window.review.playing")
    # Seek by clicking the first plot at a quarter of the episode: its frame shows.
    canvas = page.locator("#plots canvas").first
    box = canvas.bounding_box()
    canvas.click(position={"x": box["width"] / 4, "y": box["height"] / 2})
    target = max(i for i, s in enumerate(stamps) if s <= page.evaluate("window.review.time"))
    page.wait_for_selector(f"body[data-frame='{target}']")
    assert 0 < target < before_gap and page.evaluate("window.review.seekMs") > 0


def test_confirm_and_overrule_from_the_keyboard_survive_a_reload_and_are_logged(tab: Tab) -> None:
    served = tab.served
    page = tab.open()
    page.select_option("select[name=status]", "FAIL")
    first, second = names_shown(page)[:2]
    page.locator("body").press("Enter")
    page.wait_for_selector("body[data-ready='1']")
    assert first in page.locator("#title").inner_text()
    page.keyboard.press("c")
    page.wait_for_selector("body[data-review='confirm']")
    page.keyboard.press("j")
    page.wait_for_selector(f"#title:has-text('{second}')")
    page.wait_for_selector("body[data-ready='1']")
    page.keyboard.press("o")
    page.wait_for_selector("body[data-review='overrule']")
    page.keyboard.press("n")
    page.keyboard.type("the gripper was occluded, not stalled")
    page.keyboard.press("Enter")
    page.wait_for_selector("#history li:has-text('occluded')")
    page.reload()
    page.wait_for_selector("body[data-review='overrule']")
    page = tab.open()
    assert "confirm" in row_text(page, first) and "overrule" in row_text(page, second)
    lines = [json.loads(x) for x in (served.root / LOG_FILE).read_text().splitlines()]
    rows = {r["name"]: r for r in api(served, "api/episodes")["episodes"]}
    assert [(x["episode_id"], x["verdict"], x["reviewer"]) for x in lines[:2]] == [
        (rows[first]["episode_id"], "confirm", "tester"), (rows[second]["episode_id"], "overrule", "tester")]
    assert lines[2]["verdict"] == "note" and lines[2]["note"] == "the gripper was occluded, not stalled"
    assert lines[0]["codes"] == rows[first]["codes"] + rows[first]["warning_codes"]


def test_two_tabs_reviewing_at_once_lose_nothing(browser: Any, served: Served) -> None:
    tabs = [Tab(browser, served), Tab(browser, served)]
    keys = [key_of(served, "ep_stall"), key_of(served, "ep_unset")]
    pages = [t.open(f"episode.html?key={k}") for t, k in zip(tabs, keys, strict=True)]
    burst = """async ([key, verdict]) => Promise.all([...Array(20).keys()].map(i => fetch("api/review",
        {method: "POST", body: JSON.stringify({key, verdict, note: "n" + i})}).then(r => r.status)))"""
    handles = [p.evaluate_handle(burst, [k, v]) for p, k, v in zip(pages, keys, ("confirm", "overrule"), strict=True)]
    assert [h.json_value() for h in handles] == [[200] * 20, [200] * 20]
    lines = [json.loads(x) for x in (served.root / LOG_FILE).read_text().splitlines()]
    assert sorted((x["verdict"], x["note"]) for x in lines) == sorted(
        (v, f"n{i}") for v in ("confirm", "overrule") for i in range(20))
    for t in tabs:
        t.assert_local()
        t.context.close()


def test_a_corrupt_bag_opens_with_its_reason_and_the_page_keeps_working(tab: Tab) -> None:
    page = tab.open(f"episode.html?key={key_of(tab.served, 'ep_garbage')}")
    assert "cannot show this bag" in page.locator("#error").inner_text()
    page.keyboard.press("c")  # no content id can be computed: said on the page, nothing logged, no crash
    page.wait_for_selector("#review-status:has-text('NOT recorded')")
    assert not (tab.served.root / LOG_FILE).exists()
    page.goto(tab.served.url)
    page.wait_for_selector("body[data-ready='1']")
    assert len(names_shown(page)) == 5


def test_without_the_token_or_outside_the_folder_the_browser_gets_nothing(tab: Tab) -> None:
    base = tab.served.url.rsplit("/", 2)[0]
    assert tab.page.goto(base + "/").status == 404
    assert tab.page.goto(base + "/api/episodes").status == 404
    # The browser folds %2e%2e itself (the token is gone: 404); an encoded slash reaches the server (403).
    for rel, status in (("%2e%2e/%2e%2e/%2e%2e/etc/passwd", 404), ("..%2f..%2f..%2f..%2fetc%2fpasswd", 403)):
        response = tab.page.goto(tab.served.url + "files/" + rel)
        assert response.status == status and b"root:" not in response.body(), rel
