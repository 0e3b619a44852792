"""The clock probe parses captured linuxptp `pmc` and `chronyc -c tracking` outputs; names only, never commands."""
from __future__ import annotations

import pytest

from teleop_flywheel.recording.errors import ClockProbeError
from teleop_flywheel.recording.recorder import clock_probe

PMC_LOCKED = """sending: GET TIME_STATUS_NP
\t90e2ba.fffe.0c3a1d-0 seq 0 RESPONSE MANAGEMENT TIME_STATUS_NP
\t\tmaster_offset              -1532
\t\tingress_time               1764750000123456789
\t\tcumulativeScaledRateOffset +0.000000000
\t\tscaledLastGmPhaseChange    0
\t\tgmTimeBaseIndicator        0
\t\tlastGmPhaseChange          0x0000'0000000000000000.0000
\t\tgmPresent                  true
\t\tgmIdentity                 001c73.fffe.b1a2c3
"""
PMC_NO_GM = PMC_LOCKED.replace("gmPresent                  true", "gmPresent                  false")
CHRONY_SYNCED = ("A29FC87B,162.159.200.123,3,1764750000.123456789,-0.000012345,-0.000003456,0.000023456,"
                 "-1.234,-0.001,0.012,0.010234567,0.001234567,1025.3,Normal\n")
CHRONY_UNSYNCED = (
    "7F7F0101,,10,0.000000000,0.000000000,0.000000000,0.000000000,0.000,0.000,0.000,0.0,0.0,0.0,Not synchronised\n"
)


def test_pmc_offset_and_no_grandmaster() -> None:
    assert clock_probe.parse_pmc(PMC_LOCKED) == -1532
    with pytest.raises(ClockProbeError, match="gmPresent false"):
        clock_probe.parse_pmc(PMC_NO_GM)
    with pytest.raises(ClockProbeError, match="master_offset"):
        clock_probe.parse_pmc("sending: GET TIME_STATUS_NP\n")


def test_chrony_offset_and_unsynchronised() -> None:
    assert clock_probe.parse_chrony(CHRONY_SYNCED) == -12345
    with pytest.raises(ClockProbeError, match="not synchronised"):
        clock_probe.parse_chrony(CHRONY_UNSYNCED)
    with pytest.raises(ClockProbeError, match="14 CSV fields"):
        clock_probe.parse_chrony("Reference ID    : A29FC87B\n")


def test_only_known_names_are_accepted() -> None:
    assert clock_probe.check_probe("") == "" and clock_probe.check_probe("chrony") == "chrony"
    for name in ("sh -c id", "pmc -u -b 0", "/usr/sbin/pmc"):
        with pytest.raises(ClockProbeError, match="unknown clock probe"):
            clock_probe.check_probe(name)


def test_missing_program_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ClockProbeError, match="chronyc is not on PATH"):
        clock_probe.probe("chrony")
