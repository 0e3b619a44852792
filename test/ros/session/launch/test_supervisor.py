"""The environment a session's processes run in: discovery on localhost and the session's Fast DDS
profile (participants announce every 0.5 s), unless the user chose their own."""
from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from teleop_flywheel.ros.session.launch.supervisor import child_env

PROFILE_VARS = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")
NS = "{http://www.eprosima.com}"


def test_session_processes_announce_every_half_second_unless_the_user_set_a_profile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for var in PROFILE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("ROS_AUTOMATIC_DISCOVERY_RANGE", raising=False)
    env = child_env()
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    participant = ET.parse(env["FASTDDS_DEFAULT_PROFILES_FILE"]).getroot().find(f"{NS}profiles/{NS}participant")
    assert participant is not None and participant.get("is_default_profile") == "true"
    period = participant.find(f"{NS}rtps/{NS}builtin/{NS}discovery_config/{NS}leaseAnnouncement")
    assert period is not None
    assert int(period.findtext(f"{NS}sec", "0")) + int(period.findtext(f"{NS}nanosec", "0")) / 1e9 == 0.5
    # The user's own choices stand: their range, their profile under either name.
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "SUBNET")
    monkeypatch.setenv("FASTRTPS_DEFAULT_PROFILES_FILE", "/etc/mine.xml")
    env = child_env()
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET" and "FASTDDS_DEFAULT_PROFILES_FILE" not in env
    monkeypatch.delenv("FASTRTPS_DEFAULT_PROFILES_FILE")
    monkeypatch.setenv("FASTDDS_DEFAULT_PROFILES_FILE", "/etc/mine.xml")
    assert child_env()["FASTDDS_DEFAULT_PROFILES_FILE"] == "/etc/mine.xml"


def test_fast_dds_reads_the_session_profile_without_a_complaint(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    """Fast DDS ignores a profile it cannot parse, saying so on stderr (`XMLPARSER Error`): a node
    started with the session's environment says nothing."""
    pytest.importorskip("rclpy")
    for var in PROFILE_VARS:
        monkeypatch.delenv(var, raising=False)
    code = ("import rclpy; rclpy.init(); node = rclpy.create_node('profile_check'); node.destroy_node(); "
            "rclpy.shutdown()")
    done = subprocess.run([sys.executable, "-c", code], env=child_env(),
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0 and "XMLPARSER" not in done.stderr and "Error" not in done.stderr, done.stderr
