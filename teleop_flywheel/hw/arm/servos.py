"""One arm's six servos on its bus: what the driver asks of the hardware, and nothing it decides.

`ArmServos(bus, calibration, role)` checks identity and calibration, writes the EEPROM settings of
`settings.py` that differ (bounded retries) and every RAM setting (read back), tells a rebooted
servo by its RAM marker, changes torque with a read-back, reads the fast block (position,
velocity, load → a `Reading` in radians, unwrapped across the encoder's seam) and the slow block,
writes goals, and finds a servo that stopped answering. Policy — when to hold, what a fault means,
what to send — is the driver's (`driver.py`). Status bits on any reply or write acknowledgement go
to `on_status` (the driver latches faults from them); they are never raised from here.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from teleop_flywheel.core.calibration import RAD_PER_STEP, ArmCalibration
from teleop_flywheel.core.clock import now_ns
from teleop_flywheel.core.so101 import JOINT_NAMES, MODEL_NUMBER, STEPS_PER_TURN
from teleop_flywheel.hw.arm import settings
from teleop_flywheel.hw.errors import BusError, BusTimeout, CalibrationMismatch, ServoError
from teleop_flywheel.hw.feetech import codec as proto
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.hw.feetech.control_table import register

# The fast read: Present_Position (56), Present_Velocity (58), Present_Load (60), one block.
POS_ADDR = register("Present_Position").address
POS_SIZE = register("Present_Load").address + register("Present_Load").size - POS_ADDR
LOAD_SIGN = 1 << (register("Present_Load").sign_bit or 10)
LOAD_MAGNITUDE = LOAD_SIGN - 1
# The slow read: Voltage (62), Temperature (63), -, Status (65), Moving (66), -, -, Present_Current (69-70).
SLOW_ADDR = register("Present_Voltage").address
SLOW_SIZE = register("Present_Current").address + register("Present_Current").size - SLOW_ADDR
CURRENT_AT = register("Present_Current").address - SLOW_ADDR
GOAL_ADDR, GOAL_SIZE = register("Goal_Position").address, register("Goal_Position").size
LOAD_FULL_SCALE = 1000.0  # Present_Load counts 0.1 % of the servo's maximum torque
CURRENT_MA_PER_UNIT = 6.5  # Present_Current of an STS3215
HALF_TURN = STEPS_PER_TURN // 2
# A servo is named silent after this many more misses, each between answers of another servo: a
# simulator starved of CPU on a loaded machine misses one or two such reads, a hung servo every one.
SILENT_CONFIRMATIONS = 3
CALIBRATION_REGISTERS = ("Homing_Offset", "Min_Position_Limit", "Max_Position_Limit")

Log = Callable[[str, str], None]  # (level "info" | "error", message)
StatusSink = Callable[[dict[int, int]], object]  # servo id → status bits seen (what it returns is ignored)


@dataclass(frozen=True)
class Reading:
    """One sample of the arm in `names` order (all six unless a servo stopped answering): radians,
    rad/s, bus stamp (monotonic ns), fault bits seen, load as a signed fraction of max torque."""

    positions: list[float]
    velocities: list[float]
    stamp_ns: int
    errors: dict[int, int] = field(default_factory=dict)  # servo id → fault bits seen on this read
    efforts: list[float] = field(default_factory=list)
    names: tuple[str, ...] = JOINT_NAMES
    round_trip_ns: int = 0  # request to reply, as the host saw it


@dataclass(frozen=True)
class SlowReading:
    """Per servo id: supply volts, °C, Status bits (with the reply's own), mA."""

    voltage_v: dict[int, float]
    temperature_c: dict[int, int]
    status: dict[int, int]
    current_ma: dict[int, float]


class ArmServos:
    """The hardware side of one arm (see the module doc). Not thread-safe: the bus thread owns it."""

    def __init__(self, bus: FeetechBus, calibration: ArmCalibration, role: str,
                 on_status: StatusSink | None = None, log: Log | None = None) -> None:
        self.bus = bus
        self.calibration = calibration
        self.role = role
        self.ids = calibration.ids
        self.active = list(self.ids)  # servos read each tick: a silent one is left out until restore()
        self._on_status = on_status or (lambda _errors: None)
        self._log = log or (lambda _level, _message: None)
        self._raw: dict[int, int] = {}  # last unwrapped raw position per servo
        self._joints = {j.id: j for j in calibration.joints}
        self._power_on_torque: dict[int, int] = {}  # Max_Torque_Limit per servo: its Torque_Limit at power-on

    @property
    def port(self) -> str:
        return self.bus.port

    def name(self, sid: int) -> str:
        return JOINT_NAMES[self.ids.index(sid)]

    def restore(self) -> None:
        """Read every servo again (after a reconnect or the operator's reset)."""
        self.active = list(self.ids)

    def duplicated(self) -> str:
        """After a read of the arm failed: the ids two servos answer to, named, with what to do
        ("" if none is)."""
        both = [sid for sid in self.ids if self.bus.duplicated(sid)]
        if not both:
            return ""
        names = ", ".join(f"id {sid} ({self.name(sid)})" for sid in both)
        return (f"{self.port}: two servos answer to {names}: their replies collide, so the arm cannot be "
                "read; disconnect the servos, give each its own id with teleop-flywheel setup-motors (one "
                "servo connected at a time) and connect them again")

    # -- identity, calibration, settings ------------------------------------------------------
    def check_models(self) -> None:
        models = self.bus.sync_read_register("Model_Number", self.ids)
        for joint in self.calibration.joints:
            if models.values[joint.id] != MODEL_NUMBER:
                raise BusError(self.port, f"servo {joint.id} ({joint.name}) is model {models.values[joint.id]}, "
                                          f"expected {MODEL_NUMBER}")
        self._on_status(models.errors)

    def check_calibration(self) -> None:
        """CalibrationMismatch unless every servo's EEPROM holds this calibration."""
        current = {name: self.bus.sync_read_register(name, self.ids).values for name in CALIBRATION_REGISTERS}
        for joint in self.calibration.joints:
            wanted = dict(
                zip(CALIBRATION_REGISTERS, (joint.homing_offset, joint.range_min, joint.range_max), strict=True)
            )
            for name, value in wanted.items():
                if current[name][joint.id] != value:
                    raise CalibrationMismatch(
                        f"{self.port}: {joint.name} (servo {joint.id}) {name} is {current[name][joint.id]} "
                        "in the servo "
                        f"but {value} in {self.calibration.source or self.calibration.arm_id}: this arm was calibrated "
                        f"with another file. Give the driver that file, or recalibrate: teleop-flywheel calibrate "
                        f"--port {self.port} --arm {self.role} --out NEW.yaml"
                    )

    def write_eeprom(self, acceleration: int, speed: int, skip: Iterable[int] = ()) -> tuple[list[int], dict[int, str]]:
        """Write every EEPROM setting of `settings.py` that differs (never one that matches), read
        back, at most `settings.EEPROM_ATTEMPTS` times; servos in `skip` are left alone. Returns the
        servos whose torque that dropped (an EEPROM write is made with that one servo's torque off,
        behind Lock) and, per servo, what it refused to keep (it stays without torque)."""
        bus = self.bus
        names = sorted({n for j in self.calibration.joints
                        for n in settings.wanted(self.role, j.name, acceleration, speed) if settings.in_eeprom(n)}
                       | {"Phase"})
        current = {name: bus.sync_read_register(name, self.ids).values for name in names}
        dropped: list[int] = []
        refused: dict[int, str] = {}
        for joint in self.calibration.joints:
            sid = joint.id
            if sid in skip:
                continue
            want = {n: v for n, v in settings.wanted(self.role, joint.name, acceleration, speed).items()
                    if settings.in_eeprom(n)}
            want["Phase"] = settings.phase_wanted(current["Phase"][sid])
            before = {n: current[n][sid] for n in want}
            changed = {n: v for n, v in want.items() if before[n] != v}
            if not changed:
                continue
            self.set_torque([sid], False)
            dropped.append(sid)
            pending = dict(changed)
            for _attempt in range(settings.EEPROM_ATTEMPTS):
                self._write_acked(sid, "Lock", 0)
                try:
                    for name, value in pending.items():
                        self._write_acked(sid, name, value)
                finally:
                    self._write_acked(sid, "Lock", 1)
                got = {n: bus.sync_read_register(n, [sid]).values[sid] for n in pending}  # bits reported
                pending = {n: v for n, v in pending.items() if got[n] != v}
                if not pending:
                    break
            if pending:
                refused[sid] = ", ".join(f"EEPROM {n} stays {got[n]} after {settings.EEPROM_ATTEMPTS} writes of {v}"
                                         for n, v in pending.items())
            self._log("info", f"{self.port}: {joint.name} (servo {sid}) set "
                              + ", ".join(f"{n} {before[n]} -> {v}" for n, v in changed.items() if n not in pending))
        return dropped, refused

    def write_ram(self, acceleration: int, speed: int, ids: Sequence[int] | None = None) -> None:
        """Write the RAM settings of `settings.ram_wanted` (lost at a reboot) to every servo (or
        `ids`) and read them back; BusError naming the servo and register if one did not keep it."""
        ids = list(self.ids if ids is None else ids)
        if not ids:
            return
        max_torque = self.registers("Max_Torque_Limit", ids)
        self._power_on_torque.update(max_torque)
        want = {sid: settings.ram_wanted(self.role, self.name(sid), acceleration, speed, max_torque[sid])
                for sid in ids}
        for name in want[ids[0]]:
            self.bus.sync_write_register(name, {sid: want[sid][name] for sid in ids})
        for name in want[ids[0]]:
            got = self.registers(name, ids)
            wrong = [sid for sid in ids if got[sid] != want[sid][name]]
            if wrong:
                raise BusError(self.port, ", ".join(f"{self.name(sid)} (servo {sid}) keeps {name} at {got[sid]} "
                                                    f"after writing {want[sid][name]}" for sid in wrong))

    def rebooted(self, ids: Sequence[int]) -> list[int]:
        """The servos among `ids` whose Torque_Limit reads its power-on value again (Max_Torque_Limit):
        they rebooted since `write_ram` (a brown-out) and lost every RAM setting."""
        ids = [sid for sid in ids if self._power_on_torque.get(sid, 0) >= settings.REBOOT_MARKER]
        if not ids:
            return []
        live = self.registers("Torque_Limit", ids)
        return [sid for sid in ids if live[sid] == self._power_on_torque[sid]]

    def _write_acked(self, sid: int, name: str, value: int) -> None:
        try:
            self.bus.write_register(sid, name, value)
        except ServoError as exc:  # acknowledged, with fault bits: written
            self._on_status({sid: exc.bits})

    # -- torque ----------------------------------------------------------------------------------
    def registers(self, name: str, ids: Sequence[int] | None = None) -> dict[int, int]:
        return dict(self.bus.sync_read_register(name, list(self.ids if ids is None else ids)).values)

    def set_torque(self, ids: Iterable[int], on: bool) -> int:
        """Torque on or off, checked: one SYNC_WRITE, Torque_Enable read back, a servo that did not
        take it written again on its own (acknowledged), and named if it still has not. When the
        SYNC_WRITE was handed to the port (`now_ns` clock; now if `ids` is empty): when a servo
        that took it switched."""
        ids = list(ids)
        if not ids:
            return now_ns()
        self.bus.sync_write_register("Torque_Enable", {sid: int(on) for sid in ids})
        written = now_ns()
        wrong = [sid for sid, v in self.torque_states(ids).items() if v != on]
        for sid in wrong:
            for _attempt in range(2):
                try:
                    self._write_acked(sid, "Torque_Enable", int(on))
                    break
                except BusTimeout:
                    continue
        still = [sid for sid, v in self.torque_states(wrong).items() if v != on] if wrong else []
        if still:
            names = ", ".join(f"{self.name(sid)} (servo {sid})" for sid in still)
            raise BusError(self.port, f"{names} did not take torque {'on' if on else 'off'}")
        return written

    def torque_states(self, ids: list[int]) -> dict[int, bool | None]:
        """Torque_Enable of each servo (None: it did not answer), by one sync read or, if that
        fails, one read per servo."""
        try:
            return {sid: bool(v) for sid, v in self.registers("Torque_Enable", ids).items()}
        except BusTimeout:
            states: dict[int, bool | None] = {}
            for sid in ids:
                try:
                    states[sid] = bool(self.registers("Torque_Enable", [sid])[sid])
                except BusTimeout:
                    states[sid] = None
            return states

    # -- the control period ----------------------------------------------------------------------
    def read(self) -> Reading:
        """One SYNC_READ of position, velocity and load of every servo still answering."""
        t0 = now_ns()
        reading = self.bus.sync_read(POS_ADDR, POS_SIZE, self.active)
        done = now_ns()
        names, rad, rad_s, effort = [], [], [], []
        unwrapped = self._raw
        for sid in self.active:
            value = reading.values[sid]
            joint = self._joints[sid]
            # Sign-magnitude, inline: this runs for every joint of every tick.
            pos, vel, load = value & 0xFFFF, (value >> 16) & 0xFFFF, (value >> 32) & 0xFFFF
            raw = -(pos & 0x7FFF) if pos & 0x8000 else pos
            last = unwrapped.get(sid)
            if last is not None:
                # A single-turn reading continued across the encoder's seam: no joint moves half a
                # turn in one tick, so a jump of more than that is the reading wrapping, not the shaft.
                raw = last + (raw - last + HALF_TURN) % STEPS_PER_TURN - HALF_TURN
            unwrapped[sid] = raw
            names.append(joint.name)
            rad.append(joint.raw_to_rad(raw))
            rad_s.append(joint.sign * (-(vel & 0x7FFF) if vel & 0x8000 else vel) * RAD_PER_STEP)
            effort.append(joint.sign * (-(load & LOAD_MAGNITUDE) if load & LOAD_SIGN else load) / LOAD_FULL_SCALE)
        return Reading(rad, rad_s, reading.stamp_ns, dict(reading.errors), effort, tuple(names), done - t0)

    def forget_positions(self) -> None:
        """Start unwrapping afresh (a reconnect: the joints may have moved meanwhile)."""
        self._raw.clear()

    def write_goals(self, positions: Sequence[float], ids: Sequence[int] | None = None) -> None:
        """Goal_Position of every servo (or of `ids`) from radians in joint order; a goal is always
        within the calibrated range, so never negative: no sign-magnitude to apply."""
        raws = dict(zip(self.ids, self.calibration.rad_to_raw(positions), strict=True))
        self.bus.sync_write(GOAL_ADDR, GOAL_SIZE, {sid: raws[sid] for sid in (self.ids if ids is None else ids)})

    def read_slow(self) -> SlowReading:
        """Voltage, temperature, Status and current of every servo still answering."""
        reading = self.bus.sync_read(SLOW_ADDR, SLOW_SIZE, self.active)
        volts, celsius, status, current = {}, {}, {}, {}
        for sid, value in reading.values.items():
            data = value.to_bytes(SLOW_SIZE, "little")
            volts[sid] = data[0] / 10.0
            celsius[sid] = data[1]
            status[sid] = data[3] | reading.errors.get(sid, 0)
            raw = int.from_bytes(data[CURRENT_AT:CURRENT_AT + 2], "little")
            current[sid] = abs(proto.from_sign_magnitude(raw, 15)) * CURRENT_MA_PER_UNIT
        return SlowReading(volts, celsius, status, current)

    def isolate(self) -> list[int]:
        """After a sync read timed out: read each servo on its own; the ones that do not answer
        are left out of `active` and returned (empty: none in particular, or all of them).

        A stall of the whole line (a USB adapter's hiccup, a simulator starved of CPU on a loaded
        machine) silences whichever servos happen to be asked during it, the first ones in id
        order, so a servo is silent only if it does not answer again after another one did, and
        that other one answers right after it, `SILENT_CONFIRMATIONS` times over: asked between two
        answers, its silence is its own. One let off wrongly is asked again at the next timeout."""
        silent = [sid for sid in self.active if not self._answers(sid)]
        if len(silent) == len(self.active):
            return []
        witness = next(sid for sid in self.active if sid not in silent)
        for _ in range(SILENT_CONFIRMATIONS):
            silent = [sid for sid in silent if not self._answers(sid) and self._answers(witness)]
        for sid in silent:
            self.active.remove(sid)
        return silent

    def _answers(self, sid: int) -> bool:
        """Whether the servo answers a read of its position (with fault bits or not)."""
        try:
            self.bus.read(sid, POS_ADDR, POS_SIZE)
        except BusTimeout:
            return False
        except ServoError:
            pass  # it answered (with fault bits the next sync read reports)
        return True
