"""A small real session output, as `demo` leaves it: bags/, quarantine/<REASON>/<bag>/ with the validator's
records, validation.json; made with the synthetic session (the recorder's bag writer) and the validator."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from teleop_flywheel.data.review.server import ReviewSite, serve, url_of
from teleop_flywheel.data.validate.reasons import ValidateConfig
from teleop_flywheel.data.validate.validator import find_bags, quarantine, validate_paths
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

SESSIONS = {
    "ep_clean": SessionSpec(duration_s=3.0, seed=1),
    "ep_stall": SessionSpec(duration_s=3.0, seed=2, camera_stall=(1.0, 0.8)),
    "ep_unset": SessionSpec(duration_s=3.0, seed=3, outcome="unset", operator="bo"),
    "ep_corrupt": SessionSpec(duration_s=3.0, seed=4, corrupt_chunk=True),
}


@pytest.fixture(scope="module")
def session_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("session_out")
    bags = out / "bags"
    for name, spec in SESSIONS.items():
        write_session(bags / name, spec)
    reports = validate_paths(find_bags([bags])[0], ValidateConfig.load(), workers=1)
    for r in reports:
        if not r.passed and r.error is None:
            quarantine(r, out / "quarantine")
    (out / "validation.json").write_text(json.dumps({"episodes": [r.to_dict() for r in reports]}))
    # A bag recorded after the validation ran, whose file is no MCAP at all: listed with why, never a dead page.
    (bags / "ep_garbage").mkdir()
    (bags / "ep_garbage" / "ep_garbage_0.mcap").write_bytes(b"not an mcap file at all" * 10)
    return out


@dataclass
class Served:
    site: ReviewSite
    url: str
    root: Path


@pytest.fixture()
def served(session_out: Path) -> Iterator[Served]:
    """The real server on 127.0.0.1 (a free port) over a fresh copy's review log."""
    log = session_out / "reviews.jsonl"
    log.unlink(missing_ok=True)
    site = ReviewSite(session_out, "tester")
    server = serve(site)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Served(site, url_of(server, site), session_out)
    finally:
        server.shutdown()
        server.server_close()
