"""`teleop-flywheel setup-motors`: give factory-new servos their SO-101 ids and the bus baud.

Servos leave the factory at id 1, so they cannot share a bus until each has its own id. As in
LeRobot's procedure, the user connects ONE servo at a time (gripper first, then down the arm);
for each, the command finds it at whatever baud it answers, refuses if more than one servo
answers (two at one id answer a broadcast PING as one: a read of their shafts, which collide,
tells them apart), checks the model number, unlocks its EEPROM, clears Phase bit 4 (multi-turn readings, as
LeRobot does: with it set a turned shaft reads above 4095 and calibration cannot take an offset
from it), writes the joint's id and the bus baud, locks it again and verifies all of it by reading
back at the new id and baud. EEPROM writes happen here and in `calibrate` only — never at a
session start.

`--non-interactive --joint NAME` configures exactly the one connected servo as NAME (tests, CI).
"""
from __future__ import annotations

from teleop_flywheel.core.so101 import BAUD_RATE, JOINT_IDS, MODEL_NUMBER
from teleop_flywheel.hw.bringup import REPLY_TIMEOUT_S, clear_multi_turn, multi_turn
from teleop_flywheel.hw.errors import SetupError
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.hw.feetech.control_table import BAUD_RATES

BAUD_CODES = {rate: code for code, rate in BAUD_RATES.items()}


def find_single_servo(port: str) -> tuple[int, int]:
    """(id, baud) of the one servo on `port`, trying every STS baud rate, factory rate first."""
    found: list[tuple[int, int]] = []
    for baud in sorted(BAUD_RATES.values(), key=lambda b: (b != BAUD_RATE, -b)):
        with FeetechBus(port, baudrate=baud, timeout_s=REPLY_TIMEOUT_S) as bus:
            found += [(sid, baud) for sid in bus.scan()]
        if found:
            break
    if not found:
        raise SetupError(f"{port}: no servo answers at any baud rate (is it powered and connected?)")
    if len(found) > 1:
        raise SetupError(f"{port}: {len(found)} servos answer (ids {[sid for sid, _ in found]}); "
                         "connect exactly one servo for this step")
    sid, baud = found[0]
    with FeetechBus(port, baudrate=baud, timeout_s=REPLY_TIMEOUT_S) as bus:
        if bus.duplicated(sid):  # two servos at one id answer a broadcast PING as one
            raise SetupError(f"{port}: two servos answer to id {sid} (their replies collide); "
                             "connect exactly one servo for this step")
    return sid, baud


def configure(port: str, joint: str, baud: int = BAUD_RATE) -> str:
    """Make the one connected servo `joint`'s (id, `baud`); returns what was done."""
    sid, current_baud = find_single_servo(port)
    target = JOINT_IDS[joint]
    with FeetechBus(port, baudrate=current_baud, timeout_s=REPLY_TIMEOUT_S) as bus:
        model = bus.ping(sid)
        if model != MODEL_NUMBER:
            raise SetupError(f"{port}: servo {sid} is model {model}, not an STS3215 ({MODEL_NUMBER})")
        bus.write_register(sid, "Torque_Enable", 0)
        bus.write_register(sid, "Lock", 0)
        cleared = clear_multi_turn(bus, sid)
        if sid != target:
            bus.write_register(sid, "ID", target, ack=False)  # it answers as its new id
        if current_baud != baud:
            bus.write_register(target, "Baud_Rate", BAUD_CODES[baud], ack=False)  # it answers at the new baud
    with FeetechBus(port, baudrate=baud, timeout_s=REPLY_TIMEOUT_S) as bus:
        bus.write_register(target, "Lock", 1)
        if bus.ping(target) != MODEL_NUMBER or bus.scan() != [target]:
            raise SetupError(f"{port}: the servo did not come back as id {target} at {baud} baud")
        if multi_turn(bus, target):
            raise SetupError(
                f"{port}: servo {target} kept Phase bit 4 (multi-turn readings) set after it was "
                "cleared; run setup-motors again (if it stays set, this servo's firmware refuses the write)"
            )
    return (f"{joint}: servo id {sid} @ {current_baud} baud -> id {target} @ {baud} baud"
            + (", multi-turn readings turned off (Phase bit 4 cleared)" if cleared else "") + ", verified")

