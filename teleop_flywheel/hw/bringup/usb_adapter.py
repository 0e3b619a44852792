"""Which USB-serial adapter a port is on (read from sysfs), what rate the arm loop can reach through
it, and the udev rule that names it, keeps ModemManager off it and tunes it.

The adapter, not the 1 Mbaud wire, sets how fast an arm can be read. Sync reads per second of six
servos, measured with `sim-bus --adapter`, which emulates each (docs/arm_driver.md):
- FTDI (`ftdi_sio`): the chip holds received bytes until its latency timer fires, 16 ms by default
  on Linux: ~55 reads/s and sporadic timeouts. At 1 ms ~330/s; at N ms about 1000/(N + 2).
- WCH CH340 (`ch341`) and CH343 (`cdc_acm`): no timer, 2-3.5 ms per read: ~330/s.
- a pseudo-terminal (`sim-bus`): no adapter at all, ~930/s, the bus's and Python's own limit.

The rule matches the adapter's serial number, or the physical USB port it is plugged into
(`KERNELS`, the USB device's sysfs name) when it has none, as CH340 boards do. For an FTDI it sets
`ATTR{device/latency_timer}="1"`: the attribute belongs to the usb-serial port, which is the tty's
`device`, and udev writes attributes by a path relative to the device it handles. It has no
ACTION match: udev re-applies SYMLINK on every event of the device, and `udevadm trigger` sends
"change", so the rule (timer included) also applies to an adapter already plugged in.

The sysfs root is $TELEOP_FLYWHEEL_SYSFS (default /sys), so tests read a tree shaped like it.
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

SYSFS_ENV = "TELEOP_FLYWHEEL_SYSFS"
WCH_VENDOR = "1a86"
FTDI_DRIVER = "ftdi_sio"
# A serial number a udev match takes literally (no quote, no glob character, not empty).
SERIAL = re.compile(r"[A-Za-z0-9_.-]+")
PTY_READS_S, FAST_READS_S, FTDI16_READS_S = 930, 330, 55


def sysfs_root() -> Path:
    return Path(os.environ.get(SYSFS_ENV) or "/sys")


@dataclass(frozen=True)
class Adapter:
    """What sysfs says about the adapter behind a serial port."""

    port: str  # as given
    device: str  # the kernel's name (ttyUSB0, ttyACM0); "" for a pseudo-terminal
    kind: str  # pty | ftdi | wch | usb (another USB adapter) | not-usb | unknown (no sysfs entry)
    driver: str = ""
    latency_ms: int | None = None  # FTDI's latency timer; None elsewhere (or unreadable)
    vendor_id: str = ""
    product_id: str = ""
    product: str = ""
    serial: str = ""
    usb_path: str = ""  # the USB device's sysfs name (1-1.2): the physical port it is plugged into

    @property
    def needs_tuning(self) -> bool:
        """An FTDI whose latency timer is not 1 ms: the arm loop cannot hold its rate through it."""
        return self.kind == "ftdi" and self.latency_ms != 1

    def to_dict(self) -> dict[str, object]:
        expect, action = advice(self)
        return {**asdict(self), "summary": summary(self), "expect": expect, "action": action,
                "needs_tuning": self.needs_tuning}


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def describe(port: str) -> Adapter:
    """The adapter behind `port` (a device path or a link to one, e.g. /dev/serial/by-id/...)."""
    real = os.path.realpath(port)
    if real.startswith("/dev/pts/"):
        return Adapter(port, "", "pty")
    root = sysfs_root()
    name = os.path.basename(real)
    entry = root / "class" / "tty" / name
    if not (entry / "device").exists():
        return Adapter(port, name, "unknown")
    device = (entry / "device").resolve()
    driver = (device / "driver").resolve().name if (device / "driver").exists() else ""
    usb = next((d for d in (device, *device.parents) if (d / "idVendor").is_file()
                and d.is_relative_to(root.resolve())), None)
    if usb is None:
        return Adapter(port, name, "not-usb", driver)
    vendor = _read(usb / "idVendor")
    kind = "ftdi" if driver == FTDI_DRIVER else "wch" if vendor == WCH_VENDOR or "ch34" in driver else "usb"
    latency = _read(device / "latency_timer") if kind == "ftdi" else ""
    return Adapter(port, name, kind, driver, int(latency) if latency.isdigit() else None, vendor,
                   _read(usb / "idProduct"), _read(usb / "product"), _read(usb / "serial"), usb.name)


def summary(a: Adapter) -> str:
    """One phrase: what the adapter is."""
    if a.kind == "pty":
        return "a pseudo-terminal: no USB adapter (a simulator's port)"
    if a.kind == "unknown":
        return f"no sysfs entry for {a.device} (class/tty/{a.device} under {sysfs_root()}): not a serial device " \
               "the kernel lists"
    if a.kind == "not-usb":
        return "a serial port, not on USB" + (f" (driver {a.driver})" if a.driver else "")
    what = {"ftdi": "FTDI adapter", "wch": "WCH CH340/CH343 adapter", "usb": "USB-serial adapter"}[a.kind]
    ids = f"{a.vendor_id}:{a.product_id}" + (f' "{a.product}"' if a.product else "")
    serial = f"serial {a.serial}" if a.serial else "no serial number"
    text = f"{what} ({a.driver}, {ids}, {serial}, USB port {a.usb_path})"
    if a.kind == "ftdi":
        text += f", latency timer {a.latency_ms} ms" if a.latency_ms is not None else ", latency timer unreadable"
    return text


def advice(a: Adapter) -> tuple[str, str]:
    """(the sync-read rate to expect through the adapter, what to do about it or "")."""
    if a.kind == "pty":
        return (f"expect ~{PTY_READS_S} sync reads/s, the bus's and Python's own limit; a real arm's USB adapter "
                "is slower (docs/arm_driver.md)", "")
    if a.kind in ("unknown", "not-usb"):
        return "not an SO-101 servo board (they connect over USB)", "check the port: teleop-flywheel find-port"
    if a.kind == "wch":
        return (f"no latency timer ({a.driver}): 2-3.5 ms per sync read, expect ~{FAST_READS_S} reads/s; "
                "nothing to tune", "")
    if a.kind == "usb":
        return (f"{a.driver}: this adapter's timing was not measured here; the arm driver's /diagnostics "
                "report the loop rate it reaches (rate_hz)", "")
    set_now = f"echo 1 | sudo tee /sys/bus/usb-serial/devices/{a.device}/latency_timer"
    if a.latency_ms == 1:
        return (f"latency timer at 1 ms: expect ~{FAST_READS_S} sync reads/s",
                "the udev rule keeps it at 1 ms when the adapter is plugged in again")
    if a.latency_ms is None:
        return (
            "the latency timer could not be read (16 ms unless something set it): at 16 ms expect "
            f"~{FTDI16_READS_S} sync reads/s with sporadic timeouts",
            f"set it to 1 ms: the udev rule, or now: {set_now}",
        )
    rate = FTDI16_READS_S if a.latency_ms == 16 else round(1000 / (a.latency_ms + 2))
    return (f"its {a.latency_ms} ms latency timer holds every reply until it fires: expect ~{rate} sync reads/s "
            "with sporadic timeouts (the arm loop cannot hold 200 Hz)",
            f"set it to 1 ms (~{FAST_READS_S} reads/s): install the udev rule, or for now: {set_now}")


def no_rule_reason(a: Adapter) -> str:
    """Why `udev_rule` gives none for this port ("" if it gives one)."""
    if a.kind == "pty":
        return "a pseudo-terminal has no USB adapter to write a udev rule for (sim-bus --link PATH names it)"
    if a.kind in ("unknown", "not-usb"):
        return f"{a.port} is not a USB adapter: no udev rule"
    return ""


def udev_rule(a: Adapter, link: str, by_usb_port: bool = False) -> str | None:
    """One udev rule line: /dev/`link` for this adapter, ModemManager off, an FTDI's timer at 1 ms.

    By serial number when the adapter has a plain one, else (or with `by_usb_port`: two adapters
    that report the same serial) by the USB port it is plugged into."""
    if no_rule_reason(a):
        return None
    by_serial = bool(SERIAL.fullmatch(a.serial)) and not by_usb_port
    match = ['SUBSYSTEM=="tty"']
    if not by_serial:
        match.append(f'KERNELS=="{a.usb_path}"')
    match += [f'ATTRS{{idVendor}}=="{a.vendor_id}"', f'ATTRS{{idProduct}}=="{a.product_id}"']
    if by_serial:
        match.append(f'ATTRS{{serial}}=="{a.serial}"')
    actions = [f'SYMLINK+="{link}"', 'ENV{ID_MM_DEVICE_IGNORE}="1"']
    if a.kind == "ftdi":
        actions.append('ATTR{device/latency_timer}="1"')
    return ", ".join(match + actions)
