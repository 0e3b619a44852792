"""The rig's PTP/chrony offset for the episode metadata, read through a fixed mechanism.

The probe is chosen by name (`pmc` or `chrony`), never by a command line: a parameter that named
a program would let any participant of the ROS graph run it as the recorder's user. Each name
maps to one fixed argv, run without a shell:

- `pmc`: linuxptp's `pmc -u -b 0 "GET TIME_STATUS_NP"` → `master_offset` (ns). An answer with
  `gmPresent false` has no grandmaster, so its offset means nothing and is refused.
- `chrony`: `chronyc -c tracking` → the CSV "System time" field (seconds, chrony's sign: the
  correction chronyd is slewing out), reported in ns. `Not synchronised` is refused.
"""
from __future__ import annotations

import re
import shutil
import subprocess

from teleop_flywheel.recording.errors import ClockProbeError

PROBES: dict[str, tuple[str, ...]] = {
    "pmc": ("pmc", "-u", "-b", "0", "GET TIME_STATUS_NP"),
    "chrony": ("chronyc", "-c", "tracking"),
}
NONE = ""

_MASTER_OFFSET = re.compile(r"^\s*master_offset\s+(-?\d+)\s*$", re.MULTILINE)
_GM_PRESENT = re.compile(r"^\s*gmPresent\s+(\w+)\s*$", re.MULTILINE)


def check_probe(name: str) -> str:
    """`name` if it is a known probe (or empty for none), else ClockProbeError listing the choices."""
    if name != NONE and name not in PROBES:
        raise ClockProbeError(f"unknown clock probe {name!r}; choose one of: {', '.join(PROBES)} (or empty for none)")
    return name


def parse_pmc(text: str) -> int:
    """master_offset (ns) from `pmc … "GET TIME_STATUS_NP"` output."""
    present = _GM_PRESENT.search(text)
    if present is not None and present.group(1).lower() != "true":
        raise ClockProbeError("pmc: no grandmaster (gmPresent false): the PTP offset is meaningless")
    match = _MASTER_OFFSET.search(text)
    if match is None:
        raise ClockProbeError("pmc: no 'master_offset' in its output (is ptp4l running?)")
    return int(match.group(1))


def parse_chrony(text: str) -> int:
    """System-time offset (ns) from `chronyc -c tracking` (CSV: field 5 in seconds, field 14 the leap status)."""
    fields = text.strip().splitlines()[-1].split(",") if text.strip() else []
    if len(fields) < 14:
        raise ClockProbeError(f"chronyc: expected 14 CSV fields from 'tracking', got {len(fields)}")
    if fields[13].strip().lower() == "not synchronised":
        raise ClockProbeError("chronyc: not synchronised: the clock offset is meaningless")
    try:
        return round(float(fields[4]) * 1e9)
    except ValueError as exc:
        raise ClockProbeError(f"chronyc: System time field {fields[4]!r} is not a number") from exc


_PARSERS = {"pmc": parse_pmc, "chrony": parse_chrony}


def probe(name: str, timeout_s: float = 2.0) -> int:
    """Run the named probe's fixed argv and parse its offset in ns."""
    argv = PROBES[check_probe(name)]
    program = shutil.which(argv[0])
    if program is None:
        raise ClockProbeError(f"clock probe {name}: {argv[0]} is not on PATH")
    try:
        res = subprocess.run([program, *argv[1:]], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClockProbeError(f"clock probe {name}: {exc}") from exc
    if res.returncode != 0:
        raise ClockProbeError(f"clock probe {name}: {argv[0]} exited {res.returncode}: {res.stderr.strip()[:200]}")
    return _PARSERS[name](res.stdout)
