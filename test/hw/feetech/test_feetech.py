"""Feetech codec, bus and simulator — against the vendor SDK and through real pseudo-terminals."""
from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.cli import run_cli

from teleop_flywheel.core.calibration import load_calibration, parse_calibration, sim_calibration_file
from teleop_flywheel.hw.bringup import REPLY_TIMEOUT_S
from teleop_flywheel.hw.errors import BusTimeout, PortUnavailable, ServoError
from teleop_flywheel.hw.feetech import codec as p
from teleop_flywheel.hw.feetech.bus import BusStats, FeetechBus
from teleop_flywheel.hw.feetech.control_table import register
from teleop_flywheel.hw.feetech.sim import Faults, SimulatedArm, parse_fault
from teleop_flywheel.testing.latching_arm import REQUEST_WIRE_NS, STATUS_WIRE_NS, LatchedRun, read_run

scs = pytest.importorskip("scservo_sdk")


# -- codec ----------------------------------------------------------------------------------

def test_spec_example_read_packet() -> None:
    assert p.read(1, 56, 2) == bytes.fromhex("FF FF 01 04 02 38 02 BE")


class _CapturePort:
    """A vendor-SDK PortHandler stand-in that keeps the bytes the SDK writes."""

    def __init__(self) -> None:
        self.sent = bytearray()
        self.is_using = False
        self.tx_time_per_byte = 0.01

    def clearPort(self) -> None:  # noqa: N802 - vendor SDK interface
        pass

    def writePort(self, packet: list[int]) -> int:  # noqa: N802
        self.sent += bytes(packet)
        return len(packet)

    def readPort(self, length: int) -> list[int]:  # noqa: N802
        return []

    def setPacketTimeout(self, n: int) -> None:  # noqa: N802
        pass

    def isPacketTimeout(self) -> bool:  # noqa: N802
        return True


def _sdk_bytes(call) -> bytes:
    port = _CapturePort()
    call(scs.PacketHandler(0), port)
    return bytes(port.sent)


def test_codec_bytes_equal_vendor_sdk() -> None:
    assert p.ping(3) == _sdk_bytes(lambda ph, port: ph.ping(port, 3))
    assert p.read(2, 56, 2) == _sdk_bytes(lambda ph, port: ph.readTx(port, 2, 56, 2))
    assert p.write(4, 42, p.encode_value(3000, 2)) == _sdk_bytes(
        lambda ph, port: ph.writeTxOnly(port, 4, 42, 2, [3000 & 0xFF, 3000 >> 8]))
    assert p.reg_write(5, 40, b"\x01") == _sdk_bytes(lambda ph, port: ph.regWriteTxOnly(port, 5, 40, 1, [1]))
    assert p.action(p.BROADCAST_ID) == _sdk_bytes(lambda ph, port: ph.action(port, p.BROADCAST_ID))
    assert p.sync_read(56, 2, [1, 2, 3]) == _sdk_bytes(lambda ph, port: ph.syncReadTx(port, 56, 2, [1, 2, 3], 3))
    values = {1: 100, 2: 4000}
    param = [b for sid, v in values.items() for b in (sid, v & 0xFF, v >> 8)]
    assert p.sync_write(42, 2, values) == _sdk_bytes(
        lambda ph, port: ph.syncWriteTxOnly(port, 42, 2, param, len(param))
    )


def test_sign_magnitude_matches_vendor_sdk() -> None:
    for value in (-2047, -1, 0, 1, 2047):
        assert p.to_sign_magnitude(value, 11) == scs.SCS_TOSCS(value, 11)
        assert p.from_sign_magnitude(scs.SCS_TOSCS(value, 15), 15) == value


@given(st.binary(max_size=200), st.integers(1, 6), st.binary(max_size=8))
@settings(max_examples=300, deadline=None)
def test_parser_never_raises_and_finds_the_next_valid_packet(noise: bytes, sid: int, data: bytes) -> None:
    parser = p.StatusParser()
    parser.feed(noise)
    while parser.next() is not None:  # whatever the noise happens to contain
        pass
    good = p.status(sid, 0, data)
    parser.feed(good)
    found = []
    while (s := parser.next()) is not None:
        found.append(s)
    assert p.Status(sid, 0, data) in found


def test_parser_reports_skipped_bytes_and_bad_checksums() -> None:
    parser = p.StatusParser()
    bad = bytearray(p.status(2, 0, b"\x10\x20"))
    bad[-1] ^= 0xFF
    parser.feed(b"\x00\x13\x37" + bytes(bad) + p.status(3, 0x20, b"\x01\x02"))
    assert parser.next() == p.Status(3, 0x20, b"\x01\x02")
    assert parser.bad_checksums == 1 and parser.skipped_bytes >= 3


def test_truncated_packet_waits_for_the_rest() -> None:
    parser = p.StatusParser()
    pkt = p.status(1, 0, b"\xaa\xbb")
    parser.feed(pkt[:5])
    assert parser.next() is None
    parser.feed(pkt[5:])
    assert parser.next() == p.Status(1, 0, b"\xaa\xbb")


# -- vendor SDK against the simulator ------------------------------------------------------

def test_vendor_sdk_drives_the_simulator(tmp_path: Path) -> None:
    # The simulator runs in its own process (as `sim-bus` does for users): the vendor SDK
    # busy-polls the port and would starve an in-process simulator thread of the GIL.
    link = tmp_path / "follower"
    sim = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "sim-bus", "--arm", "follower",
                            "--link", str(link)], stdout=subprocess.PIPE, text=True)
    try:
        sim.stdout.readline()  # type: ignore[union-attr]
        _drive_with_vendor_sdk(str(link))
    finally:
        sim.terminate()
        sim.wait(10)


def _sdk(port, call, attempts: int = 5):
    """A vendor-SDK call, retried: its fixed ~34 ms reply timeout is tight on a loaded machine.
    After a timeout the late reply is discarded (the SDK's clearPort does not), so a retry never
    reads the previous request's answer."""
    for _ in range(attempts):
        result = call()
        code = result if isinstance(result, int) else result[1] if len(result) == 3 else result[0]
        if code == scs.COMM_SUCCESS:
            return result
        time.sleep(0.05)
        port.ser.reset_input_buffer()
    return result


def _drive_with_vendor_sdk(device: str) -> None:
    port = scs.PortHandler(device)
    assert port.openPort() and port.setBaudRate(1_000_000)
    ph = scs.PacketHandler(0)
    model, result, error = _sdk(port, lambda: ph.ping(port, 1))
    assert (model, result, error) == (777, scs.COMM_SUCCESS, 0)
    assert _sdk(port, lambda: ph.write1ByteTxRx(port, 3, register("Torque_Enable").address, 1))[0] == scs.COMM_SUCCESS
    writer = scs.GroupSyncWrite(port, ph, register("Goal_Position").address, 2)
    for sid in range(1, 7):
        writer.addParam(sid, [3000 & 0xFF, 3000 >> 8])
    assert writer.txPacket() == scs.COMM_SUCCESS
    time.sleep(0.5)
    reader = scs.GroupSyncRead(port, ph, register("Present_Position").address, 2)
    for sid in range(1, 7):
        reader.addParam(sid)
    assert _sdk(port, reader.txRxPacket) == scs.COMM_SUCCESS
    positions = {sid: reader.getData(sid, register("Present_Position").address, 2) for sid in range(1, 7)}
    assert abs(positions[3] - 3000) < 30  # torque on: moved to the goal
    assert abs(positions[1] - 3000) > 500  # torque off: did not move
    value, result, _ = _sdk(port, lambda: ph.read2ByteTxRx(port, 1, register("Model_Number").address))
    assert (value, result) == (777, scs.COMM_SUCCESS)
    port.closePort()


# -- our bus against the simulator ---------------------------------------------------------

def test_bus_reads_with_source_stamps_and_moves_servos() -> None:
    with SimulatedArm("follower") as arm, FeetechBus(arm.port) as bus:
        assert bus.ping(1) == 777
        for sid in range(1, 7):
            bus.write_register(sid, "Torque_Enable", 1)
        bus.sync_write_register("Goal_Position", {sid: 2500 for sid in range(1, 7)})
        time.sleep(0.4)
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        reading = bus.sync_read_register("Present_Position", range(1, 7))
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        assert before <= reading.stamp_ns <= after
        assert all(abs(v - 2500) < 25 for v in reading.values.values())
        bus.write_register(2, "Homing_Offset", -100)
        assert bus.read_register(2, "Homing_Offset")[0] == -100
        # Present = shaft - offset: the same shaft position now reads 100 steps higher.
        assert abs(bus.read_register(2, "Present_Position")[0] - 2600) < 25


def test_a_world_file_sets_encoder_noise_while_the_arm_runs(tmp_path: Path) -> None:
    """`world=` (sim-bus --world): joint_noise_rad is the standard deviation of every Present_Position
    reading, changed while the simulator runs; removing the noise makes readings of a still arm equal."""
    from teleop_flywheel.hw.feetech.sim import WORLD_POLL_S
    from teleop_flywheel.hw.feetech.sim.servo import STEPS_PER_RAD

    world = tmp_path / "world.json"

    def readings(n: int = 200) -> list[list[int]]:
        return [list(bus.sync_read_register("Present_Position", range(1, 7)).values.values()) for _ in range(n)]

    with SimulatedArm("follower", world=world) as arm, FeetechBus(arm.port) as bus:
        for sid in range(1, 7):  # held where it booted (torque off, gravity would move it)
            bus.write_register(sid, "Torque_Enable", 1)
        time.sleep(1.0)
        still = readings(20)  # no world file yet: no noise
        assert all(r == still[0] for r in still)
        world.write_text(json.dumps({"joint_noise_rad": 0.01}))
        time.sleep(3 * WORLD_POLL_S)
        noisy = readings()
        sigma = [statistics.pstdev(r[j] for r in noisy) / STEPS_PER_RAD for j in range(6)]
        assert all(0.007 < s < 0.013 for s in sigma), sigma  # 200 readings: the std within ±30 %
        world.write_text(json.dumps({"joint_noise_rad": 0.0}))
        time.sleep(3 * WORLD_POLL_S)
        quiet = readings(20)
        assert all(r == quiet[0] for r in quiet)
        world.write_text("not json")  # an unreadable world leaves it as it was
        time.sleep(3 * WORLD_POLL_S)
        assert all(r == quiet[0] for r in readings(20))


# -- stamps and latency behind each USB-serial adapter -------------------------------------

STAMP_READS = 250


@pytest.fixture(scope="module", params=["pty", "ftdi1", "ch343", "ftdi16"])
def adapter_run(request: pytest.FixtureRequest) -> LatchedRun:
    return read_run(request.param, STAMP_READS)


def _abs_ms(errors_ns: list[int]) -> tuple[float, float]:
    """Median and p99 (nearest rank) of |error| in ms."""
    ordered = sorted(abs(e) / 1e6 for e in errors_ns)
    return statistics.median(ordered), ordered[math.ceil(0.99 * len(ordered)) - 1]


def test_stamps_are_the_latch_instant_within_a_millisecond_behind_every_adapter(adapter_run: LatchedRun) -> None:
    reads = adapter_run.served_on_time()
    assert len(reads) >= 0.8 * STAMP_READS, f"the host held the simulator up for {STAMP_READS - len(reads)} reads"
    median, p99 = _abs_ms([r.stamp - r.latched for r in reads])
    assert median <= 1.0 and p99 <= 1.0, f"stamp error |median| {median:.3f} ms, p99 {p99:.3f} ms"


@pytest.mark.parametrize("adapter_run", ["ftdi16"], indirect=True)
def test_stamps_by_arrival_would_be_late_behind_a_16ms_latency_timer(adapter_run: LatchedRun) -> None:
    """Why the bus stamps from the request: a stamp from the reply's arrival (last byte in, minus
    one status's wire time) is milliseconds behind the latch behind an FTDI adapter at its default."""
    errors = [r.received - STATUS_WIRE_NS - r.latched for r in adapter_run.served_on_time()]
    median, _p99 = _abs_ms(errors)
    assert median > 5.0 and min(errors) > 0, f"arrival-based stamps were {median:.3f} ms late (median)"


def test_latency_summary_is_the_round_trips_the_reads_took(adapter_run: LatchedRun) -> None:
    latency = adapter_run.stats.latency()
    assert latency is not None and latency.count == STAMP_READS
    assert sorted(r.received - r.sent for r in adapter_run.reads)[-1] / 1e6 == latency.max_ms
    calls_ms = sorted((r.end - r.start) / 1e6 for r in adapter_run.reads)
    wire_ms = (REQUEST_WIRE_NS + 6 * STATUS_WIRE_NS) / 1e6
    # Each round trip lies within its call and takes at least the wire time.
    assert wire_ms <= latency.p50_ms <= latency.p99_ms <= latency.max_ms <= calls_ms[-1]
    assert latency.p50_ms <= statistics.median(calls_ms)


def test_latency_summary_percentiles_and_window() -> None:
    stats = BusStats()
    assert stats.latency() is None
    stats.round_trips_ns.extend(ms * 1_000_000 for ms in range(1, 1001))
    latency = stats.latency()
    assert latency is not None and (latency.count, latency.p50_ms, latency.p99_ms, latency.max_ms) == (
        1000,
        500,
        990,
        1000,
    )
    stats.round_trips_ns.extend(ms * 1_000_000 for ms in range(2001, 2501))
    latency = stats.latency()  # the oldest half has left the window
    assert latency is not None and (latency.count, latency.p50_ms, latency.p99_ms, latency.max_ms) == (
        1000,
        1000,
        2490,
        2500,
    )


def test_error_bits_are_typed_errors_naming_servo_and_fault() -> None:
    faults = Faults()
    parse_fault("error:4:0x24", faults)
    with SimulatedArm("follower", faults=faults) as arm, FeetechBus(arm.port) as bus:
        with pytest.raises(ServoError, match=r"servo 4 reports overheat, overload") as info:
            bus.read_register(4, "Present_Position")
        assert info.value.port == arm.port
        assert bus.sync_read_register("Present_Position", range(1, 7)).errors == {4: 0x24}


def test_retries_recover_dropped_and_corrupted_replies() -> None:
    faults = Faults(drop=0.05, corrupt=0.03, noise=0.2)
    with SimulatedArm("follower", faults=faults, seed=7) as arm, FeetechBus(arm.port, retries=10) as bus:
        for _ in range(40):
            assert len(bus.sync_read_register("Present_Position", range(1, 7)).values) == 6
        assert bus.stats.retries > 0 and bus.stats.bad_checksums > 0 and bus.stats.skipped_bytes > 0


def test_stall_is_a_timeout_naming_the_port() -> None:
    with (SimulatedArm("follower", faults=Faults(stall_at=0.0, stall_for=60)) as arm, FeetechBus(arm.port) as bus,
          pytest.raises(BusTimeout, match=arm.port)):
        bus.ping(1)


def test_unplug_then_replug(tmp_path: Path) -> None:
    link = tmp_path / "follower"
    with SimulatedArm("follower", faults=Faults(unplug_at=0.5, replug_after=0.5), link=link) as arm:
        bus = FeetechBus(str(link))
        bus.open()
        assert bus.ping(1) == 777
        with pytest.raises(PortUnavailable, match=str(link)):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                bus.ping(1)
                time.sleep(0.05)
        deadline = time.monotonic() + 10
        while not (arm.plugged.is_set() and link.exists()) and time.monotonic() < deadline:
            time.sleep(0.05)
        bus.open()
        assert bus.ping(1) == 777
        bus.close()


def test_leader_moves_by_itself_and_follows_when_torqued() -> None:
    with SimulatedArm("leader") as arm, FeetechBus(arm.port) as bus:
        first = bus.sync_read_register("Present_Position", range(1, 7)).values
        time.sleep(1.0)
        second = bus.sync_read_register("Present_Position", range(1, 7)).values
        assert any(abs(first[s] - second[s]) > 20 for s in range(1, 7)), "the scripted human should move the leader"
        bus.write_register(1, "Torque_Enable", 1)
        bus.write_register(1, "Goal_Position", 1500)
        time.sleep(0.6)
        assert abs(bus.read_register(1, "Present_Position")[0] - 1500) < 30


def test_sim_bus_command_prints_the_pty_first(tmp_path: Path) -> None:
    link = tmp_path / "leader"
    proc = subprocess.Popen([sys.executable, "-m", "teleop_flywheel.cli", "sim-bus", "--arm", "leader",
                             "--link", str(link)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert port.startswith("/dev/pts/") and link.resolve() == Path(port)
        with FeetechBus(str(link)) as bus:
            assert bus.ping(6) == 777
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_bad_fault_spec_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="bad fault"):
        parse_fault("drop:2", Faults())
    code, _out, err = run_cli(capsys, "sim-bus", "--arm", "leader", "--fault", "explode")
    assert code == 2 and "bad fault" in err


def test_a_reboot_reloads_ram_from_eeprom_and_a_refused_write_is_acknowledged_not_kept() -> None:
    """The servo loads Torque_Limit from Max_Torque_Limit at power-on only; a reboot (sim-bus --fault
    reboot:ID[:T]) turns torque off and reloads RAM; refuse:ID:REGISTER acknowledges and keeps."""
    faults = Faults()
    for spec in ("reboot:2:0.3", "refuse:1:Phase", "sag:9.5:0.3"):
        parse_fault(spec, faults)
    with pytest.raises(ValueError, match="bad fault"):
        parse_fault("refuse:1:NoSuchRegister", Faults())
    with SimulatedArm("follower", faults=faults) as arm, FeetechBus(arm.port) as bus:
        bus.write_register(1, "Phase", 0x1C)  # EEPROM unlocked: acknowledged, not kept
        assert bus.read_register(1, "Phase")[0] == 0x0C and arm.servos[1].eeprom_writes == 1
        bus.write_register(2, "Max_Torque_Limit", 500)
        bus.write_register(2, "Torque_Limit", 700)
        bus.write_register(2, "Torque_Enable", 1)
        assert bus.read_register(2, "Torque_Limit")[0] == 700, "the live limit changes only at power-on"
        deadline = time.monotonic() + 5
        while arm.servos[2].torque_on and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not arm.servos[2].torque_on and bus.read_register(2, "Torque_Limit")[0] == 500
        assert bus.read_register(2, "Present_Voltage")[0] == 95


def test_a_wrist_placed_at_its_seam_reads_there_and_holds_there() -> None:
    """`place:5:5` with a homing offset of -60: the shaft is 55 steps short of its own seam. The
    firmware's error is goal minus reading, so a goal at the reading holds (the simulator used to
    turn the shaft a whole turn less one)."""
    data = load_calibration(sim_calibration_file("follower")).to_dict()
    data["joints"]["wrist_roll"].update(range_min=0, range_max=4095)
    faults = Faults()
    parse_fault("place:5:5", faults)
    with SimulatedArm("follower", calibration=parse_calibration(data), faults=faults) as arm, \
            FeetechBus(arm.port) as bus:
        assert bus.read_register(5, "Present_Position")[0] == 5
        bus.write_register(5, "Goal_Position", 5)
        bus.write_register(5, "Torque_Enable", 1)
        time.sleep(0.3)
        assert abs(bus.read_register(5, "Present_Position")[0] - 5) <= 2
        bus.write_register(5, "Goal_Position", 4090)  # across the seam: the servo turns the long way, as a real one
        time.sleep(0.3)
        assert 100 < bus.read_register(5, "Present_Position")[0] < 4000
    with pytest.raises(ValueError, match="bad fault"):
        parse_fault("place:5:4096", Faults())


# -- bring-up: calibration preload, factory-new servo, Lock, baud, broadcast PING -----------

def test_simulator_boots_with_the_eeprom_of_its_calibration() -> None:
    cal = load_calibration(sim_calibration_file("follower"))
    with SimulatedArm("follower", calibration=cal) as arm, FeetechBus(arm.port) as bus:
        for joint in cal.joints:
            assert bus.read_register(joint.id, "Homing_Offset")[0] == joint.homing_offset
            assert bus.read_register(joint.id, "Min_Position_Limit")[0] == joint.range_min
            assert bus.read_register(joint.id, "Max_Position_Limit")[0] == joint.range_max


def test_broadcast_ping_finds_every_servo_in_id_order() -> None:
    with SimulatedArm("follower", return_delay=20) as arm, FeetechBus(arm.port) as bus:
        assert bus.scan() == [1, 2, 3, 4, 5, 6]
        assert bus.ping(4) == 777  # late answers to the scan are held off, then the bus carries on


def test_factory_new_servo_takes_id_and_baud_only_while_unlocked() -> None:
    # Bring-up semantics, with bring-up's reply timeout: the simulator shares this process, and on a
    # loaded machine its replies can take longer than the control loop's 20 ms (CI: 3 late replies).
    with SimulatedArm("follower", factory_new=True) as arm:
        with FeetechBus(arm.port, timeout_s=REPLY_TIMEOUT_S) as bus:
            assert bus.scan() == [1]
            bus.write_register(1, "Lock", 1)
            bus.write_register(1, "ID", 5)  # EEPROM is locked: the write is ignored
            assert bus.scan() == [1]
            bus.write_register(1, "Lock", 0)
            bus.write_register(1, "ID", 5, ack=False)  # the servo answers as its new id
            bus.write_register(5, "Lock", 1)
            assert bus.scan() == [5] and bus.ping(5) == 777
            bus.write_register(5, "Lock", 0)
            bus.write_register(5, "Baud_Rate", 1, ack=False)  # 500 kbaud: it no longer hears 1 Mbaud
            with pytest.raises(BusTimeout):
                bus.ping(5)
        with FeetechBus(arm.port, baudrate=500_000, timeout_s=REPLY_TIMEOUT_S) as slow:
            assert slow.ping(5) == 777


def test_scripted_human_can_move_a_follower_with_torque_off() -> None:
    with SimulatedArm("follower", human=True) as arm, FeetechBus(arm.port) as bus:
        first = bus.sync_read_register("Present_Position", range(1, 7)).values
        time.sleep(1.0)
        second = bus.sync_read_register("Present_Position", range(1, 7)).values
        assert any(abs(first[s] - second[s]) > 20 for s in range(1, 7))


def test_a_whole_sync_read_reply_splits_in_one_pass_as_the_parser_reads_it() -> None:
    ids = [1, 2, 3]
    reply = b"".join(p.status(sid, 0x20 if sid == 2 else 0, bytes([sid, 9, 8, 7, 6, 5])) for sid in ids)
    parser = p.StatusParser()
    parser.feed(reply)
    assert p.split_statuses(reply, ids, 6) == [parser.next() for _ in ids]
    assert p.split_statuses(reply, [2, 1, 3], 6) is None  # out of order: the parser decides
    assert p.split_statuses(reply[:-1] + bytes([reply[-1] ^ 1]), ids, 6) is None  # a bad checksum
    assert p.split_statuses(reply, ids, 5) is None  # another shape
    assert p.split_statuses(reply + b"\x00", ids, 6) is None  # a byte more
