"""Bring-up commands against the simulator, as a user runs them (real processes, real ptys), and
find-port / doctor against directory trees shaped like sysfs for real USB adapters."""
from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from teleop_flywheel import cli as cli_main
from teleop_flywheel.core.calibration import load_calibration
from teleop_flywheel.hw.bringup.usb_adapter import SYSFS_ENV
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.hw.feetech.control_table import PHASE_MULTI_TURN
from teleop_flywheel.hw.feetech.sim import Faults, SimulatedArm, parse_fault

CLI = [sys.executable, "-m", "teleop_flywheel.cli"]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def test_setup_motors_gives_a_factory_servo_its_joint_id(tmp_path: Path) -> None:
    link = tmp_path / "bench"
    with SimulatedArm("follower", factory_new=True, link=link) as arm:
        done = cli(
            "setup-motors", "--port", str(link), "--arm", "follower", "--non-interactive", "--joint", "wrist_flex"
        )
        assert done.returncode == 0, done.stderr
        assert "wrist_flex: servo id 1" in done.stdout and "-> id 4" in done.stdout
        with FeetechBus(str(link)) as bus:
            assert bus.scan() == [4] and bus.read_register(4, "Lock")[0] == 1
        assert arm.servos[1].get("ID") == 4


def test_setup_motors_refuses_more_than_one_servo(tmp_path: Path) -> None:
    link = tmp_path / "arm"
    with SimulatedArm("follower", link=link):
        done = cli("setup-motors", "--port", str(link), "--arm", "follower", "--non-interactive", "--joint", "gripper")
    assert done.returncode == 1
    assert "6 servos answer" in done.stderr and "connect exactly one servo" in done.stderr
    missing = cli("setup-motors", "--port", str(link), "--arm", "follower", "--non-interactive")
    assert missing.returncode == 2 and "--joint" in missing.stderr


def test_setup_motors_names_two_servos_at_one_id(tmp_path: Path) -> None:
    """Two factory servos (both id 1) answer a broadcast PING as one: setup-motors used to go on and
    give both the gripper's id, and the driver then failed to connect without saying why."""
    link = tmp_path / "bench"
    faults = Faults()
    parse_fault("duplicate:1", faults)
    with SimulatedArm("follower", factory_new=True, link=link, faults=faults) as arm:
        with FeetechBus(str(link)) as bus:
            assert bus.scan() == [1], "the broadcast PING sees one servo"
        done = cli("setup-motors", "--port", str(link), "--arm", "follower", "--non-interactive", "--joint", "gripper")
        assert arm.servos[1].get("ID") == 1 and arm.duplicates[1].get("ID") == 1, "nothing written"
    assert done.returncode == 1, done.stderr
    line = one_error_line(done.stderr)
    assert "two servos answer to id 1" in line and "connect exactly one servo" in line, line


def test_calibrate_records_ranges_and_writes_eeprom_yaml_and_lerobot_json(tmp_path: Path) -> None:
    link = tmp_path / "follower"
    out, lerobot = tmp_path / "my_follower.yaml", tmp_path / "my_follower.json"
    with SimulatedArm("follower", human=True, link=link) as arm:
        done = cli("calibrate", "--port", str(link), "--arm", "follower", "--out", str(out),
                   "--lerobot-json", str(lerobot), "--non-interactive", "4")
        assert done.returncode == 0, done.stderr
        cal = load_calibration(out)
        with FeetechBus(str(link)) as bus:
            for joint in cal.joints:
                assert bus.read_register(joint.id, "Homing_Offset")[0] == joint.homing_offset
                assert bus.read_register(joint.id, "Min_Position_Limit")[0] == joint.range_min
                assert bus.read_register(joint.id, "Max_Position_Limit")[0] == joint.range_max
                assert bus.read_register(joint.id, "Lock")[0] == 1
        assert arm.servos[1].get("Homing_Offset") == cal["shoulder_pan"].homing_offset
    assert cal.arm_id == "my_follower"
    assert cal["wrist_roll"].range_min == 0 and cal["wrist_roll"].range_max == 4095
    for joint in cal.joints:
        assert joint.range_max - joint.range_min > 300, joint  # the scripted human swept it
    doc = json.loads(lerobot.read_text())
    assert set(doc) == {j.name for j in cal.joints}
    assert load_calibration(lerobot).to_dict()["joints"] == cal.to_dict()["joints"]
    again = cli("calibrate", "--port", str(link), "--arm", "follower", "--out", str(out), "--non-interactive", "1")
    assert again.returncode == 2 and "never overwritten" in again.stderr
    assert yaml.safe_load(out.read_text())["arm_id"] == "my_follower"


def test_calibrate_names_a_joint_that_never_moved(tmp_path: Path) -> None:
    link = tmp_path / "follower"
    with SimulatedArm("follower", human=False, link=link):
        done = cli("calibrate", "--port", str(link), "--arm", "follower", "--out", str(tmp_path / "c.yaml"),
                   "--non-interactive", "0.5")
    assert done.returncode == 1 and "did not move" in done.stderr and "shoulder_pan" in done.stderr
    assert not (tmp_path / "c.yaml").exists()


def test_find_port_names_the_port_that_disappeared(tmp_path: Path) -> None:
    keep, arm_link = tmp_path / "other", tmp_path / "so101"
    with SimulatedArm("leader", link=keep):
        arm = SimulatedArm("follower", link=arm_link)
        arm.start()
        proc = subprocess.Popen([*CLI, "find-port", "--ports", str(tmp_path / "*"), "--after-seconds", "2"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and "ports now" in proc.stdout.readline()
        finally:
            arm.stop()  # the user unplugs the arm
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"the arm is on {arm_link}" in out
    assert f"{arm_link}: a pseudo-terminal: no USB adapter" in out  # read before the unplug took it away


def test_find_cameras_lists_the_synthetic_camera_with_a_still(tmp_path: Path) -> None:
    done = cli("find-cameras", "--synthetic", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "640x480" in done.stdout and (tmp_path / "synthetic.png").stat().st_size > 1000


@pytest.mark.skipif(not glob.glob("/dev/video*"), reason="no V4L2 device on this machine (/dev/video*)")
def test_find_cameras_describes_v4l2_devices(tmp_path: Path) -> None:
    done = cli("find-cameras", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "/dev/video" in done.stdout and " fps" in done.stdout


def test_find_cameras_without_devices_says_so(tmp_path: Path) -> None:
    if glob.glob("/dev/video*"):
        pytest.skip("this machine has V4L2 devices")
    done = cli("find-cameras", "--out", str(tmp_path))
    assert done.returncode == 2 and "no V4L2 capture device" in done.stderr
    time.sleep(0)


LINE = re.compile(r"^teleop-flywheel (?P<command>[a-z-]+): error: (?P<what>.+) \((?P<fix>.+)\)$")


def one_error_line(stderr: str) -> str:
    """The last stderr line, checked to be the one error line (no traceback, no second error)."""
    lines = stderr.rstrip("\n").splitlines()
    assert lines and LINE.match(lines[-1]), stderr[-2000:]
    assert "Traceback" not in stderr and sum(": error:" in x for x in lines) == 1, stderr[-2000:]
    return lines[-1]


def test_setup_motors_clears_multi_turn_on_a_factory_servo(tmp_path: Path) -> None:
    link = tmp_path / "bench"
    with SimulatedArm("follower", factory_new=True, link=link, faults=Faults(multi_turn={1: 1})) as arm:
        assert arm.servos[1].get("Phase") & PHASE_MULTI_TURN
        done = cli("setup-motors", "--port", str(link), "--arm", "follower", "--non-interactive", "--joint", "gripper")
        assert done.returncode == 0, done.stderr
        assert "multi-turn readings turned off" in done.stdout
        servo = arm.servos[1]
        assert not servo.get("Phase") & PHASE_MULTI_TURN and servo.get("Lock") == 1 and servo.get("ID") == 6
        with FeetechBus(str(link)) as bus:
            assert 0 <= bus.read_register(6, "Present_Position")[0] <= 4095  # a turn past, read within one turn


def test_calibrate_clears_multi_turn_and_calibrates(tmp_path: Path) -> None:
    """A servo a turn past reads above 4095 with Phase bit 4 set: its offset would not fit ±2047."""
    link, out = tmp_path / "follower", tmp_path / "c.yaml"
    with SimulatedArm("follower", uncalibrated=True, human=True, link=link, faults=Faults(multi_turn={3: 1})) as arm:
        with FeetechBus(str(link)) as bus:
            assert bus.read_register(3, "Present_Position")[0] > 4095
        done = cli("calibrate", "--port", str(link), "--arm", "follower", "--out", str(out), "--non-interactive", "3")
        assert done.returncode == 0, done.stderr
        assert all(servo.get("Lock") == 1 for servo in arm.servos.values())
        assert not arm.servos[3].get("Phase") & PHASE_MULTI_TURN
        elbow = load_calibration(out)["elbow_flex"]
        assert elbow.range_max - elbow.range_min > 300, elbow
        with FeetechBus(str(link)) as bus:
            assert 0 <= bus.read_register(3, "Present_Position")[0] <= 4095


def _silence_wrist_flex(arm: SimulatedArm, proc: subprocess.Popen[str]) -> None:
    arm.faults.silent[4] = 0.0


def _unplug_and_replug(arm: SimulatedArm, proc: subprocess.Popen[str]) -> None:
    arm.faults.replug_after = 0.3
    arm.faults.unplug_at = 0.0


def _ctrl_c(arm: SimulatedArm, proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)


@pytest.mark.parametrize("failure,code,says", [
    (_silence_wrist_flex, 1, "wrist_flex (servo 4) did not answer"),
    (_unplug_and_replug, 1, "every servo's offset and limits put back"),
    (_ctrl_c, 130, "interrupted (Ctrl-C); every servo's offset and limits put back"),
], ids=["servo-stops-answering", "unplugged", "ctrl-c"])
def test_calibration_stopped_midway_puts_every_reachable_servo_back_locked(
        tmp_path: Path, failure: Callable[[SimulatedArm, subprocess.Popen[str]], None], code: int, says: str) -> None:
    """Interactive, as an operator runs it: recording lasts until Enter, so only the failure can end
    it (a timed recording raced the failure: under load it ended "did not move" first)."""
    link = tmp_path / "follower"
    with SimulatedArm("follower", link=link) as arm:  # boots with the shipped simulator calibration
        before = {sid: [s.get(r) for r in ("Homing_Offset", "Min_Position_Limit", "Max_Position_Limit")]
                  for sid, s in arm.servos.items()}
        # As in an operator's terminal, Ctrl-C reaches it: a shell that starts a job in the background
        # (`pytest … &`) ignores SIGINT, an exec keeps it ignored, and calibrate then never saw it. A
        # signal with a handler is reset to its default by the exec, so one is set around the start.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            proc = subprocess.Popen([sys.executable, "-X", "faulthandler", *CLI[1:], "calibrate", "--port", str(link),
                                     "--arm", "follower", "--out", str(tmp_path / "c.yaml")],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        finally:
            signal.signal(signal.SIGINT, previous)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            assert "MIDDLE" in proc.stdout.readline()  # asked once the servos are unlocked and reset
            assert all(s.get("Lock") == 0 and s.get("Max_Position_Limit") == 4095 for s in arm.servos.values())
            proc.stdin.write("\n")
            proc.stdin.flush()
            assert "Recording" in proc.stdout.readline()  # recording until Enter, which never comes
            failure(arm, proc)
            try:
                proc.wait(timeout=60)  # stdin stays open: its end would be an Enter
            except subprocess.TimeoutExpired:  # where it hangs: faulthandler prints every thread's stack
                proc.send_signal(signal.SIGABRT)
                stacks = proc.communicate(timeout=30)[1]
                pytest.fail(f"calibrate still running 60 s after the failure:\n{stacks[-6000:]}")
            err = proc.stderr.read()
        finally:
            proc.kill()
            proc.wait()
        reachable = {sid: s for sid, s in arm.servos.items() if not s.silent}
        assert {sid: s.get("Lock") for sid, s in reachable.items()} == {sid: 1 for sid in reachable}
        assert {sid: [s.get(r) for r in ("Homing_Offset", "Min_Position_Limit", "Max_Position_Limit")]
                for sid, s in reachable.items()} == {sid: before[sid] for sid in reachable}
    assert proc.returncode == code, err
    line = one_error_line(err)
    assert line.startswith("teleop-flywheel calibrate: error: calibration stopped:") and says in line, line
    assert not (tmp_path / "c.yaml").exists()


def usb_adapter(sysfs: Path, tty: str, usb_path: str, driver: str, vendor: str, product: str,
                serial: str | None = None, latency_ms: int | None = None) -> None:
    """A USB-serial adapter as sysfs shows it: class/tty/<tty> -> the tty under the USB device
    (<usb_path>, with a hub above it); `device` is the usb-serial port (ttyUSB*) or, for cdc_acm,
    the USB interface (ttyACM*), with its `driver` link and an FTDI's latency_timer."""
    def link(at: Path, to: Path) -> None:
        at.parent.mkdir(parents=True, exist_ok=True)
        at.symlink_to(os.path.relpath(to, at.parent))

    hub = sysfs / "devices/pci0000:00/0000:00:14.0/usb1" / usb_path.rsplit(".", 1)[0]
    hub.mkdir(parents=True, exist_ok=True)
    (hub / "idVendor").write_text("1d6b\n")  # the hub's own ids: the nearest USB device is the adapter
    usb = hub / usb_path
    usb.mkdir()
    for name, value in (("idVendor", vendor), ("idProduct", product), ("product", "USB Serial"), ("serial", serial)):
        if value is not None:
            (usb / name).write_text(value + "\n")
    interface = usb / f"{usb_path}:1.0"
    acm = driver == "cdc_acm"
    port = interface if acm else interface / tty
    port.mkdir(parents=True)
    drivers = sysfs / ("bus/usb/drivers" if acm else "bus/usb-serial/drivers") / driver
    drivers.mkdir(parents=True, exist_ok=True)
    link(port / "driver", drivers)
    if latency_ms is not None:
        (port / "latency_timer").write_text(f"{latency_ms}\n")
    link(port / "tty" / tty / "device", port)
    link(sysfs / "class/tty" / tty, port / "tty" / tty)


ADAPTERS = {  # name -> (usb_adapter arguments, what find-port says, the udev rule it gives)
    "ftdi-1ms": (("ttyUSB0", "1-1.2", "ftdi_sio", "0403", "6001", "A50285BI", 1),
                 ["FTDI adapter (ftdi_sio, 0403:6001", "serial A50285BI", "latency timer 1 ms", "~330 sync reads/s"],
                 'SUBSYSTEM=="tty", ATTRS{idVendor}=="0403", ATTRS{idProduct}=="6001", ATTRS{serial}=="A50285BI", '
                 'SYMLINK+="so101_leader", ENV{ID_MM_DEVICE_IGNORE}="1", ATTR{device/latency_timer}="1"'),
    "ftdi-16ms": (("ttyUSB1", "1-1.3", "ftdi_sio", "0403", "6014", "FT7XK2QZ", 16),
                  ["latency timer 16 ms", "~55 sync reads/s with sporadic timeouts",
                   "echo 1 | sudo tee /sys/bus/usb-serial/devices/ttyUSB1/latency_timer"],
                  'SUBSYSTEM=="tty", ATTRS{idVendor}=="0403", ATTRS{idProduct}=="6014", ATTRS{serial}=="FT7XK2QZ", '
                  'SYMLINK+="so101_leader", ENV{ID_MM_DEVICE_IGNORE}="1", ATTR{device/latency_timer}="1"'),
    "ch340": (("ttyUSB2", "3-2.4", "ch341-uart", "1a86", "7523", None, None),
              ["WCH CH340/CH343 adapter (ch341-uart, 1a86:7523", "no serial number", "USB port 3-2.4",
               "no latency timer", "~330 reads/s"],
              'SUBSYSTEM=="tty", KERNELS=="3-2.4", ATTRS{idVendor}=="1a86", ATTRS{idProduct}=="7523", '
              'SYMLINK+="so101_leader", ENV{ID_MM_DEVICE_IGNORE}="1"'),
    "ch343-acm": (("ttyACM0", "1-4", "cdc_acm", "1a86", "55d3", "58FA101995", None),
                  ["WCH CH340/CH343 adapter (cdc_acm, 1a86:55d3", "serial 58FA101995", "no latency timer"],
                  'SUBSYSTEM=="tty", ATTRS{idVendor}=="1a86", ATTRS{idProduct}=="55d3", ATTRS{serial}=="58FA101995", '
                  'SYMLINK+="so101_leader", ENV{ID_MM_DEVICE_IGNORE}="1"'),
}


@pytest.fixture
def sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "sys"
    for args, _says, _rule in ADAPTERS.values():
        usb_adapter(root, *args)
    monkeypatch.setenv(SYSFS_ENV, str(root))
    return root


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_find_port_reads_the_adapter_and_writes_its_udev_rule(name: str, sysfs: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tty, *_), says, rule = ADAPTERS[name]
    rules = tmp_path / "99-so101-leader.rules"
    argv = ["find-port", "--port", f"/dev/{tty}", "--arm", "leader", "--udev-rule", str(rules)]
    assert cli_main.main(argv) == 0
    out = capsys.readouterr().out
    for text in says:
        assert text in out, (text, out)
    assert rules.read_text().splitlines()[1:] == [rule]
    assert cli_main.main(argv) == 2  # never overwritten
    assert "never overwritten" in one_error_line(capsys.readouterr().err)
    assert cli_main.main(argv[:-2]) == 0  # printed instead
    assert f"  {rule}\n" in capsys.readouterr().out


def test_find_port_matches_the_usb_port_when_asked(sysfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["find-port", "--port", "/dev/ttyUSB0", "--by-usb-port"]) == 0
    assert ('SUBSYSTEM=="tty", KERNELS=="1-1.2", ATTRS{idVendor}=="0403", ATTRS{idProduct}=="6001", '
            'SYMLINK+="so101_follower"') in capsys.readouterr().out


def test_doctor_flags_an_ftdi_at_16_ms(sysfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["doctor", "--port", "/dev/ttyUSB0", "--port", "/dev/ttyUSB2"]) == 0
    out = capsys.readouterr().out
    assert "port /dev/ttyUSB0: FTDI adapter" in out and "port /dev/ttyUSB2: WCH CH340/CH343" in out
    assert "problem:" not in out
    assert cli_main.main(["doctor", "--port", "/dev/ttyUSB1"]) == 1
    out = capsys.readouterr().out
    assert "problem: /dev/ttyUSB1: FTDI latency timer 16 ms, not 1 ms" in out and "find-port --port /dev/ttyUSB1" in out
    assert cli_main.main(["doctor", "--port", "/dev/ttyUSB1", "--port", "/dev/ttyACM0", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [(p["device"], p["kind"], p["latency_ms"], p["needs_tuning"]) for p in doc["ports"]] == [
        ("ttyUSB1", "ftdi", 16, True), ("ttyACM0", "wch", None, False)]
    assert cli_main.main(["doctor", "--port", "/dev/ttyUSB9"]) == 2
    assert "no such serial port, /dev/ttyUSB9" in one_error_line(capsys.readouterr().err)
    assert cli_main.main(["doctor"]) == 2
    assert "nothing to check" in one_error_line(capsys.readouterr().err)


def test_a_pseudo_terminal_has_no_usb_adapter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    link = tmp_path / "follower"
    with SimulatedArm("follower", link=link):
        assert cli_main.main(["find-port", "--port", str(link)]) == 0
        out = capsys.readouterr().out
        assert "a pseudo-terminal: no USB adapter" in out and "~930 sync reads/s" in out and "udev rule" in out
        assert cli_main.main(["find-port", "--port", str(link), "--udev-rule", str(tmp_path / "r.rules")]) == 2
        assert "no USB adapter" in one_error_line(capsys.readouterr().err)
        assert cli_main.main(["doctor", "--port", str(link)]) == 0
        assert "a pseudo-terminal: no USB adapter" in capsys.readouterr().out
    assert not (tmp_path / "r.rules").exists()


def test_a_still_keeps_the_cameras_colours(tmp_path: Path) -> None:
    """Frames are BGR (OpenCV's order, what the camera node JPEG-encodes): a still written with an
    RGB→BGR swap showed a blue scene orange."""
    import cv2
    import numpy as np

    from teleop_flywheel.hw.bringup.find_cameras import still
    from teleop_flywheel.hw.camera import CameraConfig, open_source

    config = CameraConfig(name="synthetic", source="synthetic", device="synthetic")
    png = cv2.imread(str(still(config, tmp_path / "still.png")))
    source = open_source(config)
    try:
        frame = source.read(timeout_s=5.0)
    finally:
        source.close()
    assert frame is not None
    means = png.reshape(-1, 3).mean(axis=0), frame.image.reshape(-1, 3).mean(axis=0)
    assert np.allclose(*means, atol=3.0), means
    assert abs(means[0][0] - means[0][2]) > 10, "a scene whose channels differ, or the check proves nothing"


def test_a_still_is_taken_in_a_mode_the_camera_offers() -> None:
    from teleop_flywheel.hw.bringup.find_cameras import PREFERRED, preferred_mode
    from teleop_flywheel.hw.camera.offers import CameraInfo, Offer

    def info(*modes: Offer) -> CameraInfo:
        return CameraInfo("/dev/video0", "cam", list(modes))

    assert preferred_mode(info(Offer("YUYV", 640, 480, [30.0]), Offer("MJPG", 640, 480, [30.0, 15.0]))) == PREFERRED
    assert preferred_mode(info(Offer("YUYV", 1280, 720, [10.0]), Offer("MJPG", 1920, 1080, [30.0]))) == \
        Offer("MJPG", 1920, 1080, [30.0])
    assert preferred_mode(info(Offer("YUYV", 1280, 720, [10.0]))) == Offer("YUYV", 1280, 720, [10.0])
    assert preferred_mode(info()) is None
