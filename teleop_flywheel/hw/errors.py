"""Every error the hardware floor raises on purpose, in one place: a servo bus, a camera, the arm
driver and the bring-up steps. Callers catch them by name without importing the device that raised
them. Each is a `FlywheelError`: one line naming the port or device, and a `fix` where one is known.

The devices (hw/feetech, hw/camera, hw/pedal) stand apart (.importlinter), so this module imports
none of them: it sits beside them and each device imports its errors from here. That is why
`ServoError` is given the names of its fault bits by the bus, which decodes them with feetech's
control table, instead of decoding them itself.
"""
from __future__ import annotations

from teleop_flywheel.core.errors import EXIT_PARTIAL, FlywheelError

# -- a servo bus (hw/feetech) ----------------------------------------------------------------------


class BusError(FlywheelError, RuntimeError):
    """A bus operation failed; the message names the port."""

    def __init__(self, port: str, message: str) -> None:
        super().__init__(f"{port}: {message}")
        self.port = port


class BusTimeout(BusError):
    """A servo did not answer in time (after the retries)."""


class PortUnavailable(BusError):
    """The serial port cannot be opened or has gone away (unplugged)."""


class ServoError(BusError):
    """A status packet carried fault bits (voltage, angle sensor, overheat, overcurrent, overload).

    `faults` are the bits' names, which the bus decodes with feetech's control table (see above).
    """

    def __init__(self, port: str, servo_id: int, bits: int, faults: list[str]) -> None:
        self.servo_id, self.bits, self.faults = servo_id, bits, faults
        super().__init__(port, f"servo {servo_id} reports {', '.join(self.faults)} (error 0x{bits:02x})")


# -- a camera (hw/camera) --------------------------------------------------------------------------


class CameraError(FlywheelError, RuntimeError):
    """A camera cannot be opened or stopped delivering; the message names the device."""


class CameraFatalError(CameraError):
    """A camera that opened but cannot be recorded as configured: reopening it cannot help."""


class CameraClockError(CameraFatalError):
    """A camera's stamps are not on CLOCK_MONOTONIC."""


class CameraModeError(CameraFatalError):
    """A camera did not grant the format asked for (size, rate or pixel format)."""


class TimecodeError(FlywheelError, ValueError):
    """No valid timecode in the image (missing, damaged or CRC mismatch)."""


# -- the arm driver and the bring-up steps (hw/arm, hw/bringup) ------------------------------------


class CalibrationMismatch(FlywheelError, RuntimeError):
    """The servos' EEPROM does not hold the calibration the driver was given: it refuses to drive."""


class CalibrationStopped(FlywheelError, RuntimeError):
    """Calibration stopped; the message says what state it left each servo in."""

    def __init__(self, what: str, where: str, fix: str, exit_code: int = EXIT_PARTIAL) -> None:
        super().__init__(what)
        self.where, self.fix, self.exit_code = where, fix, exit_code


class SetupError(FlywheelError, RuntimeError):
    """The connected servos are not what the step needs; the message says what to do."""
