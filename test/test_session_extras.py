"""The Foxglove layout shows topics the graph really has; `run` shuts down cleanly on SIGTERM."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from teleop_flywheel.ros.session.graph import SessionConfig, build_graph

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = {"/leader/joint_states", "/follower/joint_states", "/follower/joint_command", "/policy/joint_command",
             "/teleop/authority", "/teleop/intervention", "/diagnostics", "/pedal/joy"}


def _panels(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    return _panels(node["first"]) + _panels(node["second"])  # type: ignore[index]


def test_foxglove_layout_panels_and_topics() -> None:
    layout = json.loads((ROOT / "config" / "foxglove_layout.json").read_text())
    assert sorted(_panels(layout["layout"])) == sorted(layout["configById"])
    text = json.dumps(layout["configById"])
    topics = set(re.findall(r"(/[a-z_/]+?)(?:\.position|\")", text))
    cams = {f"/cameras/{name}/image/compressed" for name in ("front", "wrist")}
    recorded = set(build_graph("sim", SessionConfig(sim_dir="/tmp/tf_layout_probe")).node("recorder").parameters["topics"])
    assert topics <= PUBLISHED | cams, topics - PUBLISHED - cams
    assert topics - cams <= recorded  # every plotted stream is also recorded


def test_run_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    pytest.importorskip("rclpy")
    proc = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "run", "record",
                             "--arg", "cameras=front:synthetic", "--arg", f"output_dir={tmp_path}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert "session up" in line, line + proc.stderr.read()  # type: ignore[union-attr]
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "session stopped cleanly" in out
