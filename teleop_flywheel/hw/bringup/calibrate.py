"""`teleop-flywheel calibrate`: LeRobot's SO-101 calibration procedure, writing our YAML.

The steps are LeRobot 0.4's (`SO101Follower.calibrate`), so a calibration made here means the
same thing to LeRobot's driver:
1. torque off, EEPROM unlocked, homing offsets and position limits reset (0, 0..4095);
2. the arm is held at the middle of its range: each joint's homing offset becomes
   `Present_Position − 2047`, so that pose reads 2047 (half a turn);
3. every joint except wrist_roll is moved through its whole range while positions are recorded:
   min and max become range_min/range_max (wrist_roll turns fully: 0..4095);
4. offsets and limits are written to EEPROM, which is locked again.
A joint that never moved is an error naming it, not a calibration with an empty range. The
output files are created exclusively (an existing file is never overwritten). `--lerobot-json`
also writes LeRobot's calibration JSON; every command of ours reads either format.

`--non-interactive SECONDS` holds the start pose as the middle and records for SECONDS without
prompts: with `sim-bus --human` the scripted human moves the arm, so tests and CI run it.
"""
from __future__ import annotations

import argparse
import json
import select
import sys
import time
from pathlib import Path
from typing import TextIO

import yaml

from teleop_flywheel.core.calibration import ArmCalibration, CalibrationError, JointCalibration, parse_calibration
from teleop_flywheel.core.errors import EXIT_PARTIAL, FlywheelError, UsageError
from teleop_flywheel.core.files import create_exclusive
from teleop_flywheel.core.so101 import JOINT_IDS, JOINT_NAMES, MAX_RAW
from teleop_flywheel.hw.bringup import REPLY_TIMEOUT_S, require_port
from teleop_flywheel.hw.feetech.bus import FeetechBus

HALF_TURN = MAX_RAW // 2  # 2047: LeRobot's half-turn homing for Feetech servos
FULL_TURN_JOINTS = ("wrist_roll",)
IDS = [JOINT_IDS[n] for n in JOINT_NAMES]


def unlock_and_reset(bus: FeetechBus) -> None:
    """Torque off, EEPROM writable, offsets 0 and limits 0..4095 (LeRobot's reset_calibration)."""
    for sid in IDS:
        bus.write_register(sid, "Torque_Enable", 0)
        bus.write_register(sid, "Lock", 0)
        bus.write_register(sid, "Homing_Offset", 0)
        bus.write_register(sid, "Min_Position_Limit", 0)
        bus.write_register(sid, "Max_Position_Limit", MAX_RAW)


def homing_offsets(bus: FeetechBus) -> dict[int, int]:
    """Offsets that make the current pose read half a turn, written to the servos."""
    present = bus.sync_read_register("Present_Position", IDS).values
    offsets = {sid: present[sid] - HALF_TURN for sid in IDS}
    for sid, offset in offsets.items():
        bus.write_register(sid, "Homing_Offset", offset)
    return offsets


def record_ranges(bus: FeetechBus, until: "Stop") -> dict[int, tuple[int, int]]:
    """Min and max Present_Position of every joint while `until` says go on."""
    lo = {sid: MAX_RAW for sid in IDS}
    hi = {sid: 0 for sid in IDS}
    while not until():
        values = bus.sync_read_register("Present_Position", IDS).values
        for sid, v in values.items():
            lo[sid], hi[sid] = min(lo[sid], v), max(hi[sid], v)
        time.sleep(0.01)
    return {sid: (lo[sid], hi[sid]) for sid in IDS}


class Stop:
    """When recording ends: after `seconds`, or when Enter is pressed on `stream`."""

    def __init__(self, seconds: float | None, stream: TextIO | None) -> None:
        self.deadline = time.monotonic() + seconds if seconds is not None else None
        self.stream = stream

    def __call__(self) -> bool:
        if self.deadline is not None:
            return time.monotonic() >= self.deadline
        assert self.stream is not None
        ready, _, _ = select.select([self.stream], [], [], 0)
        return bool(ready) and self.stream.readline() is not None


def calibrate(bus: FeetechBus, arm_id: str, seconds: float | None = None, prompt: TextIO | None = None,
              answers: TextIO | None = None) -> ArmCalibration:
    """Run the procedure on an open bus; prompts go to `prompt` unless `seconds` is given."""
    def ask(text: str) -> None:
        if seconds is None and prompt is not None and answers is not None:
            prompt.write(text)
            prompt.flush()
            answers.readline()

    unlock_and_reset(bus)
    ask("Move the arm to the MIDDLE of its range of motion (see docs/arm_driver.md), then press Enter.\n")
    offsets = homing_offsets(bus)
    ask("Move every joint except wrist_roll through its ENTIRE range, then press Enter to stop recording.\n")
    ranges = record_ranges(bus, Stop(seconds, answers))
    joints = []
    for name, sid in zip(JOINT_NAMES, IDS):
        lo, hi = (0, MAX_RAW) if name in FULL_TURN_JOINTS else ranges[sid]
        if lo >= hi:
            raise CalibrationError(f"{bus.port}: {name} (servo {sid}) did not move while recording "
                                   f"(stayed at {lo}); move every joint through its whole range")
        joints.append(JointCalibration(name, sid, 0, offsets[sid], lo, hi))
    cal = parse_calibration(ArmCalibration(arm_id, tuple(joints)).to_dict(), bus.port)  # the file's own rules
    for joint in cal.joints:
        bus.write_register(joint.id, "Min_Position_Limit", joint.range_min)
        bus.write_register(joint.id, "Max_Position_Limit", joint.range_max)
        bus.write_register(joint.id, "Lock", 1)
    return cal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", required=True, help="the arm's serial port (e.g. /dev/so101_follower)")
    parser.add_argument("--arm", choices=("leader", "follower"), required=True, help="which arm this is")
    parser.add_argument("--out", required=True, type=Path, help="calibration YAML to create (never overwritten)")
    parser.add_argument("--arm-id", default="", help="name stored in the file (default: the --out file name)")
    parser.add_argument("--lerobot-json", type=Path, help="also write LeRobot's calibration JSON here")
    parser.add_argument("--non-interactive", type=float, metavar="SECONDS",
                        help="no prompts: the start pose is the middle, record motion for SECONDS")


def run(args: argparse.Namespace) -> int:
    for path in filter(None, (args.out, args.lerobot_json)):
        if path.exists() or path.is_symlink():
            raise UsageError("already exists", where=str(path),
                             fix="choose another path: a calibration is never overwritten")
    require_port(args.port)
    try:
        with FeetechBus(args.port, timeout_s=REPLY_TIMEOUT_S) as bus:
            cal = calibrate(bus, args.arm_id or args.out.stem, args.non_interactive, sys.stdout, sys.stdin)
        create_exclusive(args.out, f"# {args.arm} arm, calibrated with teleop-flywheel calibrate on {args.port}\n"
                         + yaml.safe_dump(cal.to_dict(), sort_keys=False))
        if args.lerobot_json:
            create_exclusive(args.lerobot_json, json.dumps(cal.to_lerobot_json(), indent=4) + "\n")
    except FlywheelError as exc:  # it ran on the arm and failed there: one line, exit 1 (cli.py)
        exc.exit_code = EXIT_PARTIAL
        raise
    for j in cal.joints:
        print(f"calibrate: {j.name:13s} id {j.id}  homing_offset {j.homing_offset:+5d}  "
              f"range {j.range_min}..{j.range_max}")
    print(f"calibrate: wrote {args.out}" + (f" and {args.lerobot_json}" if args.lerobot_json else ""))
    return 0
