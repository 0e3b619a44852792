"""`teleop-flywheel calibrate`: LeRobot's SO-101 calibration procedure, writing our YAML.

The steps are LeRobot 0.4's (`SO101Follower.calibrate`), so a calibration made here means the
same thing to LeRobot's driver:
1. torque off, EEPROM unlocked, Phase bit 4 cleared and read back (multi-turn readings off, as
   LeRobot's `configure_motors` does: with it set a shaft a turn past reads above 4095 and its
   offset does not fit the servo), homing offsets and position limits reset (0, 0..4095);
2. the arm is held at the middle of its range: each joint's homing offset becomes
   `Present_Position − 2047`, so that pose reads 2047 (half a turn);
3. every joint except wrist_roll is moved through its whole range while positions are recorded:
   min and max become range_min/range_max (wrist_roll turns fully: 0..4095);
4. offsets and limits are written to EEPROM, which is locked again; Lock and Phase are read back.
A joint that never moved is an error naming it, not a calibration with an empty range. The
output files are created exclusively (an existing file is never overwritten). `--lerobot-json`
also writes LeRobot's calibration JSON; every command of ours reads either format.

A failed calibration never leaves a servo's EEPROM unlocked. Each servo's offset and limits are
read before anything is written; whatever stops the procedure (a servo that stops answering, an
unplugged arm, a bad range, Ctrl-C) the port is opened afresh (an adapter plugged back within
2 s is found), every servo that answers gets back the offset and limits it held (Phase bit 4
stays cleared) and is locked, and the one-line error says which servos were put back and which
could not be reached (those may be unlocked with reset or new offsets until calibrate runs again).

`--non-interactive SECONDS` holds the start pose as the middle and records for SECONDS without
prompts: with `sim-bus --human` the scripted human moves the arm, so tests and CI run it.
"""
from __future__ import annotations

import select
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from teleop_flywheel.core.calibration import MAX_HOMING_OFFSET, ArmCalibration, JointCalibration, parse_calibration
from teleop_flywheel.core.errors import EXIT_PARTIAL, CalibrationError, FlywheelError, one_line
from teleop_flywheel.core.so101 import FULL_TURN_JOINTS, JOINT_IDS, JOINT_NAMES, MAX_RAW
from teleop_flywheel.hw.bringup import clear_multi_turn
from teleop_flywheel.hw.errors import BusError, CalibrationStopped, PortUnavailable
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.hw.feetech.control_table import PHASE_MULTI_TURN

HALF_TURN = MAX_RAW // 2  # 2047: LeRobot's half-turn homing for Feetech servos
IDS = [JOINT_IDS[n] for n in JOINT_NAMES]
NAMES = dict(zip(IDS, JOINT_NAMES, strict=True))
CALIBRATION_REGISTERS = ("Homing_Offset", "Min_Position_Limit", "Max_Position_Limit")
# How long a failed calibration waits for the port to come back before putting the servos back:
# a USB adapter that was pulled and plugged straight back in takes about a second to re-enumerate.
REPLUG_WAIT_S = 2.0
EXIT_INTERRUPTED = 130  # docs/cli.md: Ctrl-C before a command finished

Held = dict[int, tuple[int, ...]]  # servo id -> its CALIBRATION_REGISTERS as found


def read_held(bus: FeetechBus) -> Held:
    """Each servo's homing offset and position limits as they are now: what a failure puts back."""
    values = [bus.sync_read_register(name, IDS).values for name in CALIBRATION_REGISTERS]
    return {sid: tuple(v[sid] for v in values) for sid in IDS}


def unlock_and_reset(bus: FeetechBus) -> None:
    """Torque off, EEPROM writable, multi-turn readings off (read back), offsets 0 and limits
    0..4095 (LeRobot's configure_motors and reset_calibration)."""
    for sid in IDS:
        bus.write_register(sid, "Torque_Enable", 0)
        bus.write_register(sid, "Lock", 0)
        clear_multi_turn(bus, sid)
        bus.write_register(sid, "Homing_Offset", 0)
        bus.write_register(sid, "Min_Position_Limit", 0)
        bus.write_register(sid, "Max_Position_Limit", MAX_RAW)
    phase = bus.sync_read_register("Phase", IDS).values
    kept = [f"{NAMES[sid]} (servo {sid})" for sid in IDS if phase[sid] & PHASE_MULTI_TURN]
    if kept:
        raise CalibrationError(f"{bus.port}: {', '.join(kept)} kept Phase bit 4 (multi-turn readings) set after it "
                               "was cleared")


def homing_offsets(bus: FeetechBus) -> dict[int, int]:
    """Offsets that make the current pose read half a turn, written to the servos."""
    present = bus.sync_read_register("Present_Position", IDS).values
    offsets = {sid: present[sid] - HALF_TURN for sid in IDS}
    for sid, offset in offsets.items():
        if abs(offset) > MAX_HOMING_OFFSET:  # 4095 in the middle pose: 2048 needs a 12th bit
            raise CalibrationError(f"{bus.port}: {NAMES[sid]} (servo {sid}) reads {present[sid]} in the middle "
                                   f"pose: its homing offset {offset:+d} does not fit the servo's "
                                   f"±{MAX_HOMING_OFFSET}; move it a little and calibrate again")
    for sid, offset in offsets.items():
        bus.write_register(sid, "Homing_Offset", offset)
    return offsets


def record_ranges(bus: FeetechBus, until: Stop) -> dict[int, tuple[int, int]]:
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
    """Run the procedure on an open bus; prompts go to `prompt` unless `seconds` is given. Whatever
    stops it once it has begun writing, the servos are put back and locked (`CalibrationStopped`)."""
    try:
        held = read_held(bus)
    except KeyboardInterrupt:
        raise CalibrationStopped("interrupted (Ctrl-C) before anything was written: the servos are as they were",
                                 bus.port, "run calibrate again when ready", EXIT_INTERRUPTED) from None
    try:
        return _procedure(bus, arm_id, seconds, prompt, answers)
    except BaseException as exc:
        raise stopped(exc, bus, held) from exc


def _procedure(bus: FeetechBus, arm_id: str, seconds: float | None, prompt: TextIO | None,
               answers: TextIO | None) -> ArmCalibration:
    interactive = seconds is None and prompt is not None and answers is not None

    def say(text: str) -> None:
        if interactive:
            assert prompt is not None
            prompt.write(text)
            prompt.flush()

    unlock_and_reset(bus)
    say("Move the arm to the MIDDLE of its range of motion (see docs/arm_driver.md), then press Enter.\n")
    if interactive:
        assert answers is not None
        answers.readline()
    offsets = homing_offsets(bus)
    # Recording starts with this prompt and runs until Enter: the motion the operator makes now counts.
    say("Recording: move every joint except wrist_roll through its ENTIRE range, then press Enter to stop.\n")
    ranges = record_ranges(bus, Stop(seconds, answers))
    joints = []
    for name, sid in zip(JOINT_NAMES, IDS, strict=True):
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
    lock, phase = (bus.sync_read_register(name, IDS).values for name in ("Lock", "Phase"))
    bad = [f"{NAMES[sid]} (servo {sid})" for sid in IDS if lock[sid] != 1 or phase[sid] & PHASE_MULTI_TURN]
    if bad:
        raise CalibrationError(f"{bus.port}: {', '.join(bad)} did not read back Lock 1 and Phase bit 4 clear")
    return cal


def stopped(exc: BaseException, bus: FeetechBus, held: Held) -> CalibrationStopped:
    """The one-line error of a calibration that stopped: why, and the state of every servo after
    `put_back`."""
    if isinstance(exc, KeyboardInterrupt):
        why = "interrupted (Ctrl-C)"
    else:
        text = one_line(str(exc)).removeprefix(f"{bus.port}: ")
        why = text if isinstance(exc, (FlywheelError, OSError)) else f"{type(exc).__name__}: {text}"
    back, missing = put_back(bus, held)
    lost = ", ".join(f"{NAMES[sid]} (servo {sid})" for sid in missing)
    if not missing:
        state, fix = "every servo's offset and limits put back as they were, EEPROM locked", "run calibrate again"
    elif back:
        state = (f"servos {', '.join(map(str, back))} put back as they were and locked; {lost} did not answer "
                 "and may be left unlocked with reset or new offsets")
        fix = "reconnect what did not answer and run calibrate again: it rewrites and locks every servo"
    else:
        state = "no servo answered to be put back: they may be left unlocked with reset or new offsets"
        fix = "plug the arm in and run calibrate again: it rewrites and locks every servo"
    code = EXIT_INTERRUPTED if isinstance(exc, KeyboardInterrupt) else EXIT_PARTIAL
    return CalibrationStopped(f"calibration stopped: {why}; {state}", bus.port, fix, code)


def put_back(bus: FeetechBus, held: Held) -> tuple[list[int], list[int]]:
    """Give every servo that answers what `held` says it held, and lock it: (ids put back, ids not).

    The port is opened afresh: a reply may still be in flight from the exchange that was cut
    short, and a fresh bus fences it off before its first exchange."""
    with _interrupts_held():
        bus.close()
        deadline = time.monotonic() + REPLUG_WAIT_S
        while True:
            try:
                bus.open()
                break
            except PortUnavailable:
                if time.monotonic() >= deadline:
                    return [], list(IDS)
                time.sleep(0.1)
        try:
            answering = set(bus.scan())
        except BusError:
            return [], list(IDS)
        back = []
        for sid in sorted(answering & set(IDS)):
            try:
                bus.write_register(sid, "Lock", 0)
                for name, value in zip(CALIBRATION_REGISTERS, held[sid], strict=True):
                    bus.write_register(sid, name, value)
                bus.write_register(sid, "Lock", 1)
                if bus.read_register(sid, "Lock")[0] == 1:
                    back.append(sid)
            except BusError:
                continue
        return back, [sid for sid in IDS if sid not in back]


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C is ignored while the servos are put back: a second press there would leave them
    unlocked. Python delivers signals to the main thread only, so another thread needs nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)

