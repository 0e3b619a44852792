"""Pedal: real struct input_event bytes through a FIFO into the real pedal node."""
from __future__ import annotations

import grp
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from teleop_flywheel.core.clock import now_ns, sample_mapping, to_ros_ns
from teleop_flywheel.hw.pedal.events import (
    EV_KEY,
    EV_SYN,
    EVENT,
    InputEvent,
    KeyMap,
    PedalState,
    decode,
    device_changed,
    encode,
    open_device,
    realtime_to_monotonic,
    resolve_device,
)

MS = 1_000_000
SAME_INSTANT_NS = 20_000  # one instant converted to ROS time and back, with offsets sampled apart


def test_decode_matches_kernel_layout() -> None:
    assert EVENT.size == 24  # 64-bit Linux: 16-byte timeval + 2 + 2 + 4
    raw = encode(InputEvent(12_345_678_000, EV_KEY, 30, 1)) + encode(InputEvent(12_345_679_000, EV_SYN, 0, 0))
    events, rest = decode(raw + b"\x01\x02")
    assert events == [InputEvent(12_345_678_000, EV_KEY, 30, 1), InputEvent(12_345_679_000, EV_SYN, 0, 0)]
    assert rest == b"\x01\x02"


def test_debounce_ignores_bounce_and_keeps_event_time() -> None:
    st = PedalState(KeyMap(takeover=30, labels={48: "wrong_grasp"}, debounce_ms=30))
    t = 1_000 * MS
    for dt, value in ((0, 1), (5, 0), (9, 1), (12, 0)):  # bouncing contact, ends up
        st.feed(InputEvent(t + dt * MS, EV_KEY, 30, value))
    assert st.settle(t + 100 * MS) == []  # settled on "up": no handover
    st.feed(InputEvent(t + 200 * MS, EV_KEY, 30, 1))
    assert st.settle(t + 210 * MS) == []  # not held long enough yet
    assert st.settle(t + 240 * MS) == [("takeover", True, t + 200 * MS)]
    assert st.feed(InputEvent(t + 300 * MS, EV_KEY, 48, 1)) == [("label", "wrong_grasp", t + 300 * MS)]
    assert st.feed(InputEvent(t + 301 * MS, EV_KEY, 30, 2)) == []  # autorepeat is not a press


def test_a_label_pressed_while_the_takeover_settles_follows_it() -> None:
    """Pedal down, the label key 10 ms later: the label waits for the takeover it labels and keeps
    its own stamp. Sent at once, it reached the teleop node before the takeover (the unattended
    walk, starved past its 0.3 s between the two, recorded its takeover unlabelled)."""
    st = PedalState(KeyMap(takeover=30, labels={48: "too_slow"}, debounce_ms=30))
    t = 1_000 * MS
    assert st.feed(InputEvent(t, EV_KEY, 30, 1)) == []
    assert st.feed(InputEvent(t + 10 * MS, EV_KEY, 48, 1)) == []
    assert st.settle(t + 20 * MS) == []
    assert st.settle(t + 31 * MS) == [("takeover", True, t), ("label", "too_slow", t + 10 * MS)]
    # A label during a bounce that settles back where it was is still the operator's press.
    st.feed(InputEvent(t + 100 * MS, EV_KEY, 30, 0))
    st.feed(InputEvent(t + 102 * MS, EV_KEY, 48, 1))
    st.feed(InputEvent(t + 104 * MS, EV_KEY, 30, 1))
    assert st.settle(t + 140 * MS) == [("label", "too_slow", t + 102 * MS)]
    # A device lost while a level settles drops the labels that waited for it with it.
    st.feed(InputEvent(t + 200 * MS, EV_KEY, 30, 0))
    st.feed(InputEvent(t + 201 * MS, EV_KEY, 48, 1))
    st.forget()
    assert st.settle(t + 300 * MS) == []


def test_keymap_rejects_unknown_labels(tmp_path: Path) -> None:
    bad = tmp_path / "pedal.yaml"
    bad.write_text("takeover: 30\nlabels:\n  48: bored\n")
    with pytest.raises(ValueError, match="pedal.yaml.*unknown trigger label"):
        KeyMap.load(bad)


def test_realtime_kernel_stamps_convert_to_monotonic() -> None:
    """A kernel that refused EVIOCSCLOCKID stamps CLOCK_REALTIME; converted, the stamp is "now" on monotonic."""
    before = now_ns()
    wall = time.time_ns()
    after = now_ns()
    raw = EVENT.pack(wall // 10**9, wall % 10**9 // 1000, EV_KEY, 30, 1) + EVENT.pack(wall // 10**9, 0, EV_SYN, 0, 0)
    events, rest = decode(raw)
    mapping = sample_mapping()
    converted = realtime_to_monotonic(events, mapping.offset_ns)
    assert rest == b"" and [(e.type, e.code, e.value) for e in converted] == [(EV_KEY, 30, 1), (EV_SYN, 0, 0)]
    slack = mapping.uncertainty_ns + 1_000 + MS  # µs truncation of the record, read latency, NTP slew
    assert before - slack <= converted[0].stamp_ns <= after + slack
    # NTP steps realtime by an hour: stamps taken after the step, converted with a re-measured offset, agree.
    stepped = realtime_to_monotonic([InputEvent(e.stamp_ns + 3600 * 10**9, e.type, e.code, e.value) for e in events],
                                    mapping.offset_ns + 3600 * 10**9)
    assert stepped == converted


def test_a_lost_device_forgets_the_pedal_state() -> None:
    st = PedalState(KeyMap(takeover=30, debounce_ms=30))
    st.feed(InputEvent(100 * MS, EV_KEY, 30, 1))
    assert st.settle(200 * MS) == [("takeover", True, 100 * MS)]
    st.forget()
    assert not st.down
    st.feed(InputEvent(700 * MS, EV_KEY, 30, 1))
    st.forget()  # a press still settling when the device went is dropped with it
    assert st.settle(800 * MS) == [] and not st.down


def test_device_path_identity(tmp_path: Path) -> None:
    fifo = tmp_path / "pedal"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        assert device_changed(str(fifo), fd) == ""
        fifo.unlink()
        assert device_changed(str(fifo), fd).startswith(f"{fifo} is gone")
        os.mkfifo(fifo)  # same path, a new file: as a replugged pedal behind the same by-id link
        assert "different device" in device_changed(str(fifo), fd)
    finally:
        os.close(fd)


def test_resolve_device_by_path_by_id_and_name(tmp_path: Path) -> None:
    target = tmp_path / "event7"
    target.write_bytes(b"")
    (tmp_path / "by-id").mkdir()
    (tmp_path / "by-id" / "usb-pedal-event-kbd").symlink_to(target)
    assert resolve_device(str(target), str(tmp_path)) == str(target)
    assert resolve_device("usb-pedal-event-kbd", str(tmp_path)) == str(tmp_path / "by-id" / "usb-pedal-event-kbd")
    # By name, evdev lists only character devices: none here (and no /dev/input on CI) → a clear error.
    with pytest.raises(FileNotFoundError, match="evdev device name.*Foot Pedal"):
        resolve_device("Foot Pedal", str(tmp_path))


NOBODY = 65534


def as_nobody(call: Callable[[], object]) -> str:
    """Run `call` in a forked child that dropped to uid/gid 65534 with no other groups, where file
    permissions bite (this suite runs as root, which reads anything): the OSError it raised as
    "<type>: <strerror>", or "opened"."""
    if os.geteuid() != 0:
        pytest.skip(f"dropping to another uid needs root; this run is uid {os.geteuid()}")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        status = 1
        try:
            os.close(read_end)
            try:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            except OSError as exc:
                os.write(write_end, f"drop: {exc}".encode())
                status = 3
            else:
                try:
                    call()
                    out = "opened"
                except OSError as exc:
                    out = f"{type(exc).__name__}: {exc.strerror}"
                os.write(write_end, out.encode())
                status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        said = pipe.read().decode()
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code == 3:
        pytest.skip(f"cannot drop to uid {NOBODY} here ({said})")
    assert code == 0, f"the child failed: exit {code}, {said!r}"
    return said


@pytest.fixture()
def input_dir() -> Iterator[Path]:
    """A directory uid 65534 may enter, holding a root-owned event device node `event9`, mode 600
    (a FIFO where this machine may not make device nodes)."""
    root = Path(tempfile.mkdtemp(prefix="input-"))
    try:
        root.chmod(0o755)
        try:
            os.mknod(root / "event9", stat.S_IFCHR | 0o600, os.makedev(13, 73))  # evdev's major
        except PermissionError:
            os.mkfifo(root / "event9", 0o600)
        yield root
    finally:
        shutil.rmtree(root)


def test_a_device_this_user_may_not_read_says_permission_denied_and_how_to_be_let_in(input_dir: Path) -> None:
    device = input_dir / "event9"
    said = as_nobody(lambda: open_device(str(device), grab=False))
    assert said.startswith(f"PermissionError: permission denied on {device} (owned by root:root, mode 600): "
                           'a udev rule for the pedal, e.g. SUBSYSTEM=="input"'), said
    # As /dev/input/eventN is on a desktop: root:<group>, mode 660. The fix is that group.
    gid, group = next((g.gr_gid, g.gr_name) for g in grp.getgrall() if g.gr_gid not in (0, NOBODY))
    os.chown(device, 0, gid)
    device.chmod(0o660)
    said = as_nobody(lambda: open_device(str(device), grab=False))
    assert said == (f"PermissionError: permission denied on {device} (owned by root:{group}, mode 660): add the "
                    f"user to group {group}: sudo usermod -aG {group} $USER, then log in again"), said
    # Found by name: a device this user may not read cannot be asked its name. Not "no such device".
    said = as_nobody(lambda: resolve_device("Foot Pedal", str(input_dir)))
    assert said.startswith("PermissionError: no evdev device of that name among those this user may read, and 1 "
                           f"it may not: permission denied on {device}"), said


@dataclass
class PedalRig:
    """A pedal node reading a FIFO, with everything it published."""

    node: Any
    fifo: Path
    joy: list[tuple[int, list[int]]] = field(default_factory=list)  # (stamp on this host's monotonic clock, buttons)
    raw: list[int] = field(default_factory=list)  # header stamps as published (ROS time)
    diags: list[tuple[int, str, dict[str, str]]] = field(default_factory=list)  # (level, message, values)
    beats: list[tuple[int, list[int]]] = field(default_factory=list)  # heartbeats: (received, monotonic; buttons)

    def wait(self, condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.02)

    def writer(self) -> int:
        """A writer on the FIFO, opened once the node's latest diagnostic says open (so a reader exists)."""
        self.wait(lambda: self.diags and self.diags[-1][0] == 0, "pedal open")
        return os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)


@pytest.fixture()
def rig(tmp_path: Path) -> Iterator[PedalRig]:
    fifo = tmp_path / "pedal"
    os.mkfifo(fifo)
    yield from _running(str(fifo), fifo)


def _running(device: str, fifo: Path) -> Iterator[PedalRig]:
    """A real PedalNode on `device`, spinning, with a subscriber collecting what it publishes."""
    rclpy = pytest.importorskip("rclpy")
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import Joy

    from teleop_flywheel.ros.nodes.common import STREAM_QOS, msg_stamp_ns
    from teleop_flywheel.ros.nodes.pedal import PedalNode

    rclpy.init()
    try:
        node = PedalNode(parameter_overrides=[Parameter("device", value=device)])
        rig = PedalRig(node, fifo)
        def on_joy(m: Joy) -> None:
            if m.header.frame_id == "pedal_heartbeat":  # the last state again, not an event
                rig.beats.append((now_ns(), list(m.buttons)))
                return
            rig.raw.append(m.header.stamp.sec * 10**9 + m.header.stamp.nanosec)
            rig.joy.append((msg_stamp_ns(m), list(m.buttons)))  # back on the monotonic clock, as teleop reads it

        node.create_subscription(Joy, "/pedal/joy", on_joy, STREAM_QOS)
        node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: rig.diags.extend(
            (s.level[0] if isinstance(s.level, bytes) else s.level, s.message, {kv.key: kv.value for kv in s.values})
            for s in m.status if s.name.endswith("foot pedal")), 10)
        ex = SingleThreadedExecutor()
        ex.add_node(node)
        threading.Thread(target=ex.spin, daemon=True).start()
        try:
            yield rig
        finally:
            node.close()
            ex.shutdown()
            node.destroy_node()
    finally:
        rclpy.shutdown()


def test_pedal_node_reads_a_fifo(rig: PedalRig) -> None:
    writer = rig.writer()
    t_down = (now_ns() - 5 * MS) // 1000 * 1000  # kernel event time (µs resolution), before we read it
    os.write(writer, encode(InputEvent(t_down, EV_KEY, 30, 1)) + encode(InputEvent(t_down, EV_SYN, 0, 0)))
    rig.wait(lambda: rig.joy, "pedal down")
    os.write(writer, encode(InputEvent(now_ns(), EV_KEY, 3, 1)))  # KEY_2 = wrong_grasp in config/pedal.yaml
    rig.wait(lambda: len(rig.joy) >= 3, "label press and release")
    os.close(writer)
    # The kernel's event time, in ROS time on the wire (two conversions sampled at two instants
    # agree within microseconds): the teleop node gets back the instant the pedal went down.
    assert rig.joy[0] == (pytest.approx(t_down, abs=SAME_INSTANT_NS), [1, 0, 0, 0, 0, 0])
    assert rig.raw[0] == pytest.approx(to_ros_ns(t_down), abs=SAME_INSTANT_NS)
    assert rig.joy[1][1] == [1, 0, 1, 0, 0, 0] and rig.joy[2][1] == [1, 0, 0, 0, 0, 0]
    assert rig.diags[-1][2]["clock"].startswith("as written")


def test_pedal_node_bounce_inside_the_debounce_window_publishes_nothing(rig: PedalRig) -> None:
    """Contact bounce (down/up flicker within 30 ms, settling up) reaches no one: no Joy, so no
    takeover can start; the press that follows and holds is the first thing published."""
    writer = rig.writer()
    t = now_ns() // 1000 * 1000
    os.write(writer, b"".join(encode(InputEvent(t + dt * MS, EV_KEY, 30, v))
                              for dt, v in ((0, 1), (4, 0), (9, 1), (13, 0))))
    time.sleep(0.3)  # ten debounce windows
    assert rig.joy == []
    t_press = now_ns() // 1000 * 1000
    os.write(writer, encode(InputEvent(t_press, EV_KEY, 30, 1)))
    rig.wait(lambda: rig.joy, "the real press")
    os.close(writer)
    assert rig.joy == [(pytest.approx(t_press, abs=SAME_INSTANT_NS), [1, 0, 0, 0, 0, 0])]


def test_pedal_node_refuses_a_regular_file(tmp_path: Path) -> None:
    """A regular file is no pedal (it would read as end-of-file forever): ERROR naming it and why."""
    plain = tmp_path / "pedal.bin"
    plain.write_bytes(encode(InputEvent(now_ns(), EV_KEY, 30, 1)))
    rig_iter = _running(str(plain), plain)
    rig = next(rig_iter)
    try:
        rig.wait(lambda: any(level == 2 for level, _m, _v in rig.diags), "diagnostic ERROR")
        message = next(m for level, m, _v in rig.diags if level == 2)
        assert message == f"{plain}: not an input event device (character device) or a FIFO", message
        assert rig.joy == []
    finally:
        next(rig_iter, None)


def test_pedal_node_unplug_says_lost_and_reconnects(rig: PedalRig) -> None:
    """An unplugged pedal used to publish pedal-up, handing the arm back to the policy mid-takeover."""
    writer = rig.writer()
    t = now_ns() // 1000 * 1000
    os.write(writer, encode(InputEvent(t, EV_KEY, 30, 1)))
    rig.wait(lambda: rig.joy and rig.joy[-1][1][0] == 1, "pedal down")
    os.close(writer)
    t_unplug = now_ns()
    rig.fifo.unlink()  # a FIFO never errors when removed: only the path check can notice
    rig.wait(lambda: any(level == 2 and "unplugged" in m for level, m, _v in rig.diags), "diagnostic ERROR")
    error = next(m for level, m, _v in rig.diags if level == 2 and "unplugged" in m)
    assert error.startswith(f"{rig.fifo}: unplugged: {rig.fifo} is gone"), error
    rig.wait(lambda: rig.joy[-1][1] == [], "a Joy without buttons on unplug: the pedal is lost")
    assert t_unplug <= rig.joy[-1][0] <= now_ns()  # stamped when the loss was noticed
    assert [0] * 6 not in [b for _t, b in rig.joy], "never a release nobody made"

    os.mkfifo(rig.fifo)  # plugged back in
    writer = rig.writer()
    assert rig.diags[-1][0] == 0 and rig.diags[-1][2]["down"] == "False"
    rig.wait(lambda: rig.joy[-1][1] == [0] * 6, "its state once back: up")
    n = len(rig.joy)
    t = now_ns() // 1000 * 1000
    os.write(writer, encode(InputEvent(t, EV_KEY, 30, 1)))
    rig.wait(lambda: len(rig.joy) > n, "a press through the new FIFO")
    os.write(writer, encode(InputEvent(t + 100 * MS, EV_KEY, 30, 0)))
    rig.wait(lambda: len(rig.joy) > n + 1, "its release")
    os.close(writer)
    assert rig.joy[n:] == [(pytest.approx(t, abs=SAME_INSTANT_NS), [1, 0, 0, 0, 0, 0]),
                           (pytest.approx(t + 100 * MS, abs=SAME_INSTANT_NS), [0, 0, 0, 0, 0, 0])]


def test_pedal_node_beats_its_last_state_at_10_hz_once_opened(tmp_path: Path) -> None:
    """Edges alone made a dead pedal look like one nobody presses: the last state is re-sent at
    10 Hz once the device was opened — down while it is down, no buttons while it is lost — and
    nothing before (a rig without a pedal, the console's space bar standing in, is not held)."""
    fifo = tmp_path / "pedal"
    rig_iter = _running(str(fifo), fifo)  # no FIFO yet: a pedal not plugged in
    rig = next(rig_iter)
    try:
        time.sleep(0.5)
        assert rig.beats == [] and rig.joy == []
        os.mkfifo(fifo)
        writer = rig.writer()
        rig.wait(lambda: len(rig.beats) >= 3, "heartbeats once open")
        assert all(b == [0] * 6 for _t, b in rig.beats)
        os.write(writer, encode(InputEvent(now_ns() // 1000 * 1000, EV_KEY, 30, 1)))
        rig.wait(lambda: rig.joy and rig.joy[-1][1][0] == 1, "pedal down")
        n = len(rig.beats)
        rig.wait(lambda: len(rig.beats) >= n + 10, "a second of heartbeats")
        down = rig.beats[n + 1:]
        assert all(b == [1, 0, 0, 0, 0, 0] for _t, b in down), "the last state: down"
        span_s = (down[-1][0] - down[0][0]) / 1e9
        assert 0.7 <= span_s / (len(down) - 1) * 10 <= 1.5, f"{len(down)} beats in {span_s:.2f} s: not 10 Hz"
        os.close(writer)
        fifo.unlink()
        rig.wait(lambda: rig.joy[-1][1] == [], "lost")
        n = len(rig.beats)
        rig.wait(lambda: len(rig.beats) >= n + 3, "heartbeats while lost")
        assert all(b == [] for _t, b in rig.beats[n + 1:]), "the last state: lost"
    finally:
        next(rig_iter, None)


@pytest.mark.skipif(not os.access("/dev/uinput", os.W_OK), reason="no writable /dev/uinput on this machine")
def test_a_uinput_pedal_is_found_by_name_grabbed_and_unplugged() -> None:
    from teleop_flywheel.hw.pedal.virtual import UINPUT_NAME, UInputPedal

    pedal = UInputPedal()
    rig_iter = _running(UINPUT_NAME, Path("/nonexistent"))
    rig = next(rig_iter)
    try:
        rig.wait(lambda: rig.diags and rig.diags[-1][0] == 0, "uinput pedal open")
        assert rig.diags[-1][2]["clock"].startswith(("monotonic", "realtime"))  # kernel stamps, either way
        t_before = now_ns()
        pedal.takeover(True)
        rig.wait(lambda: rig.joy, "pedal down from the kernel device")
        assert rig.joy[0][1][0] == 1 and t_before <= rig.joy[0][0] <= now_ns()
        pedal.close()  # unplug: the node must say the pedal is lost
        rig.wait(lambda: rig.joy[-1][1] == [], "the pedal lost on unplug")
        rig.wait(lambda: rig.diags[-1][0] == 2, "diagnostic ERROR after unplug")
    finally:
        next(rig_iter, None)
