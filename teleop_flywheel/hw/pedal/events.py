"""Decode Linux `struct input_event` records and turn key events into pedal actions.

A USB foot pedal is a keyboard to the kernel: each press is an EV_KEY event with the key
code, value 1 (down), 0 (up) or 2 (autorepeat), and the kernel's own timestamp. Reading the
event device (or a FIFO fed with the same records, as the simulator's virtual pedal is)
gives 24-byte records on 64-bit Linux: timeval (sec, usec), type, code, value. The stamp
the kernel writes is CLOCK_MONOTONIC once EVIOCSCLOCKID has asked for it (`open_device`); a
kernel that refuses keeps its default CLOCK_REALTIME, and `realtime_to_monotonic` converts
those stamps with a measured realtime−monotonic offset (`teleop_flywheel.core.clock.sample_mapping`).
"""
from __future__ import annotations

import ctypes
import dataclasses
import errno
import fcntl
import glob
import grp
import os
import pwd
import stat
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from evdev import InputDevice, list_devices

from teleop_flywheel.core.labels import TRIGGER_LABELS

EVENT = struct.Struct("@llHHi")  # struct timeval {long sec; long usec}; __u16 type, code; __s32 value
EV_SYN, EV_KEY = 0x00, 0x01
# _IOW('E', 0xa0, int) and _IOW('E', 0x90, int) from linux/input.h
EVIOCSCLOCKID = (1 << 30) | (ctypes.sizeof(ctypes.c_int) << 16) | (ord("E") << 8) | 0xA0
EVIOCGRAB = (1 << 30) | (ctypes.sizeof(ctypes.c_int) << 16) | (ord("E") << 8) | 0x90


@dataclass(frozen=True)
class InputEvent:
    stamp_ns: int
    type: int
    code: int
    value: int


def encode(ev: InputEvent) -> bytes:
    """The bytes the kernel would deliver for `ev` (used by the virtual pedal and tests)."""
    return EVENT.pack(ev.stamp_ns // 1_000_000_000, (ev.stamp_ns % 1_000_000_000) // 1000, ev.type, ev.code, ev.value)


def decode(data: bytes) -> tuple[list[InputEvent], bytes]:
    """Whole records in `data` and the incomplete remainder."""
    n = len(data) // EVENT.size
    events = []
    for i in range(n):
        sec, usec, typ, code, value = EVENT.unpack_from(data, i * EVENT.size)
        events.append(InputEvent(sec * 1_000_000_000 + usec * 1000, typ, code, value))
    return events, data[n * EVENT.size:]


@dataclass
class KeyMap:
    """Which key codes mean takeover and which pick a trigger label (config/pedal.yaml)."""

    takeover: int = 30  # KEY_A: what most 3-pedal USB foot switches send for the left pedal
    labels: dict[int, str] = field(default_factory=dict)
    debounce_ms: float = 30.0

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> KeyMap:
        p = Path(path)
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"{p}: cannot read pedal key map ({exc})") from exc
        labels = {int(code): str(label) for code, label in (data.get("labels") or {}).items()}
        bad = [lb for lb in labels.values() if lb not in TRIGGER_LABELS]
        if bad:
            raise ValueError(f"{p}: labels: unknown trigger label(s) {bad}; expected {list(TRIGGER_LABELS)}")
        try:
            return cls(int(data.get("takeover", 30)), labels, float(data.get("debounce_ms", 30.0)))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{p}: takeover/debounce_ms must be numbers ({exc})") from exc


@dataclass
class PedalState:
    """Debounced state: a level change shorter than `debounce_ms` is contact bounce, ignored.

    Actions leave in the order the operator made them. A trigger label pressed while the takeover
    level is still settling (a label stamped right after stepping on the pedal) waits for that level:
    sent at once, it would reach the teleop node before the takeover it labels, which then has no
    intervention to put it on, or puts it on the previous one."""

    keymap: KeyMap
    down: bool = False
    _pending: tuple[bool, int] | None = None
    _held: list[tuple[str, bool | str, int]] = field(default_factory=list)

    def feed(self, ev: InputEvent) -> list[tuple[str, bool | str, int]]:
        """Actions from one event: ("takeover", down, stamp) or ("label", name, stamp)."""
        if ev.type != EV_KEY or ev.value == 2:
            return []
        if ev.code in self.keymap.labels and ev.value == 1:
            label: tuple[str, bool | str, int] = ("label", self.keymap.labels[ev.code], ev.stamp_ns)
            if self._pending is not None:
                self._held.append(label)
                return []
            return [label]
        if ev.code != self.keymap.takeover:
            return []
        self._pending = (ev.value == 1, ev.stamp_ns)
        return []

    def settle(self, now_ns: int) -> list[tuple[str, bool | str, int]]:
        """Commit a pending level once it has held for the debounce window, then the labels pressed
        while it settled."""
        if self._pending is None:
            return []
        level, stamp = self._pending
        if now_ns - stamp < self.keymap.debounce_ms * 1e6:
            return []
        self._pending = None
        held, self._held = self._held, []
        if level == self.down:
            return held
        self.down = level
        return [("takeover", level, stamp), *held]

    def forget(self) -> None:
        """The device is gone: nobody released the pedal, but whatever comes back starts up (and a
        level still settling is dropped, with the labels that waited for it). The node says "lost",
        not "released" (ros/nodes/pedal.py)."""
        self._pending = None
        self._held = []
        self.down = False


MONOTONIC, REALTIME, WRITER = "monotonic", "realtime", "writer"
"""Event stamp clocks: the kernel's after EVIOCSCLOCKID, its refused-default, a FIFO writer's own."""


def open_device(path: str, grab: bool = True) -> tuple[int, str]:
    """Open an event device (or FIFO) non-blocking; return the fd and the clock its stamps are on.

    A real device is asked for CLOCK_MONOTONIC stamps; if the kernel refuses (ioctl error) its
    stamps stay CLOCK_REALTIME and the caller converts them. A FIFO carries whatever clock its
    writer stamped with (the virtual pedal writes monotonic time).
    """
    mode = os.stat(path).st_mode
    if stat.S_ISFIFO(mode):
        # Read-write keeps a writer on the FIFO, so it never reads as end-of-file between writers.
        return _open(path, os.O_RDWR | os.O_NONBLOCK), WRITER
    if not stat.S_ISCHR(mode):
        # A regular file is always "readable" and then at end-of-file: the read loop would spin.
        raise OSError(errno.ENODEV, "not an input event device (character device) or a FIFO", path)
    fd = _open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        try:
            fcntl.ioctl(fd, EVIOCSCLOCKID, struct.pack("i", time.CLOCK_MONOTONIC))
            clock = MONOTONIC
        except OSError:
            clock = REALTIME
        if grab:
            fcntl.ioctl(fd, EVIOCGRAB, 1)
    except OSError:
        os.close(fd)
        raise
    return fd, clock


def _open(path: str, flags: int) -> int:
    """os.open, with a permission error that says whose the device is and how to be let in."""
    try:
        return os.open(path, flags)
    except PermissionError as exc:
        raise PermissionError(exc.errno, permission_denied(path), path) from None


def _name(lookup: Callable[[int], Any], ident: int) -> str:
    try:
        return str(lookup(ident)[0])
    except KeyError:
        return str(ident)


def permission_denied(path: str) -> str:
    """Why this user may not read `path`, and the fix (docs/teleop.md, Pedal: permissions).

    /dev/input/eventN is root:input, mode 660, on every mainstream distribution: members of
    `input` read it. Where the group may not read it (or is root, which no operator should join),
    a udev rule giving the pedal to `input` is the fix.
    """
    real = os.path.realpath(path)
    st = os.stat(real)
    owner = f"{_name(pwd.getpwuid, st.st_uid)}:{_name(grp.getgrgid, st.st_gid)}"
    if st.st_mode & stat.S_IRGRP and st.st_gid != 0:
        group = _name(grp.getgrgid, st.st_gid)
        fix = f"add the user to group {group}: sudo usermod -aG {group} $USER, then log in again"
    else:
        fix = ('a udev rule for the pedal, e.g. SUBSYSTEM=="input", ATTRS{idVendor}=="VVVV", '
               'ATTRS{idProduct}=="PPPP", MODE="0660", GROUP="input" in /etc/udev/rules.d/99-pedal.rules '
               '(then sudo udevadm control --reload && sudo udevadm trigger), and the user in group input')
    return f"permission denied on {real} (owned by {owner}, mode {stat.S_IMODE(st.st_mode):o}): {fix}"


def realtime_to_monotonic(events: list[InputEvent], offset_ns: int) -> list[InputEvent]:
    """Events stamped on CLOCK_REALTIME, restamped on CLOCK_MONOTONIC.

    `offset_ns` is realtime − monotonic as measured (`ClockMapping.offset_ns`); re-measure it
    periodically, since NTP may step the realtime clock while the monotonic one runs on.
    """
    return [dataclasses.replace(ev, stamp_ns=ev.stamp_ns - offset_ns) for ev in events]


def device_changed(path: str, fd: int) -> str:
    """Why `path` no longer leads to the open `fd` ("" if it still does).

    An unplugged FIFO never errors on read, and a replugged USB device comes back as a new
    /dev/input/eventN behind the same by-id link: comparing the file the path resolves to now
    with the one that is open catches both.
    """
    try:
        now = os.stat(path)
    except OSError as exc:
        return f"{path} is gone ({exc.strerror})"
    was = os.fstat(fd)
    if (now.st_dev, now.st_ino, now.st_rdev) != (was.st_dev, was.st_ino, was.st_rdev):
        return f"{path} now leads to a different device (replugged)"
    return ""


def resolve_device(spec: str, input_dir: str = "/dev/input") -> str:
    """A device given by path, by-id link name, or device name (matched with python-evdev).

    Names are read from each readable event device with evdev's EVIOCGNAME; without an
    input directory (containers, CI) there is nothing to match and the error says so. A name
    not found while some event devices may not be read by this user is a permission error: the
    pedal is most likely one of those.
    """
    if Path(spec).exists():
        return spec
    by_id = Path(input_dir) / "by-id" / spec
    if by_id.exists():
        return str(by_id)
    for path in sorted(list_devices(input_dir, writable=False)):
        try:
            device = InputDevice(path, readonly=True)
        except OSError:
            continue  # vanished or not ours to open: not the pedal
        name = device.name
        device.close()
        if name == spec:
            return path
    unreadable = [path for path in sorted(glob.glob(f"{input_dir}/event*"))
                  if os.path.exists(path) and not os.access(path, os.R_OK)]
    if unreadable:
        raise PermissionError(errno.EACCES, f"no evdev device of that name among those this user may read, and "
                                            f"{len(unreadable)} it may not: {permission_denied(unreadable[0])}", spec)
    raise FileNotFoundError(errno.ENOENT, f"no such path, {input_dir}/by-id entry or evdev device name", spec)


def read_available(fd: int, remainder: bytes = b"") -> tuple[list[InputEvent], bytes]:
    """Everything readable now (non-blocking) as events, plus the incomplete tail."""
    chunks = [remainder]
    while True:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            break
        if not data:
            break
        chunks.append(data)
    return decode(b"".join(chunks))
