"""Every error the bag format raises, in one place (no ROS import), as the `mcap` library keeps its
own: readers, the writer, the scan, the player, `recover` and `migrate` raise these, and callers
catch them by name without importing the module that raised them. Each is a `FlywheelError`: one
line naming the file, and a `fix` where one is known.
"""
from __future__ import annotations

from pathlib import Path

from teleop_flywheel.core.errors import FlywheelError

# -- reading a bag ---------------------------------------------------------------------------------


class BagReadError(FlywheelError, RuntimeError):
    """The bag cannot be read at all (missing, not MCAP, no definitions); names the path."""

    fix = 'a crashed or damaged bag: teleop-flywheel recover BAG'


class NotABagError(BagReadError):
    """No bag at that path: missing, no .mcap in the directory, or a FIFO/device instead of a file."""

    fix = "check the path: a bag is a directory holding metadata.yaml and one .mcap file"


class OutdatedBagError(BagReadError):
    """A bag in an older format of ours (`upgrade.outdated`): `migrate` writes it upgraded."""

    fix = "migrate writes an upgraded copy beside it; the original is kept"


class UnindexedBagError(BagReadError):
    """The MCAP has no summary/index (a crashed recording): `recover` it before seeking in it."""


class BagNotFoundError(FlywheelError, FileNotFoundError):
    """No bag at that path, or a directory without exactly one `.mcap` to read."""

    fix = 'check the path: a bag is a directory holding metadata.yaml and one .mcap file'


class MissingMetadataError(FlywheelError, FileNotFoundError):
    """A bag directory without metadata.yaml: a recording that crashed before its stop."""

    fix = "a crashed recording: teleop-flywheel recover BAG writes it"


class BadMetadataError(FlywheelError, ValueError):
    """A metadata.yaml that is not rosbag2's: not YAML, or without its mapping."""

    fix = "teleop-flywheel recover BAG --output NEW writes a fresh bag from the .mcap"


class NotMcapError(FlywheelError, ValueError):
    """The file does not start with the MCAP magic, or is not a regular file."""

    fix = 'give a bag directory or its .mcap file; a crashed bag: teleop-flywheel recover BAG'


class NotRegularFileError(NotMcapError):
    """A FIFO, device, socket or directory where an MCAP file should be: never opened for reading."""


class CdrError(FlywheelError, ValueError):
    """Bytes too short or malformed for the field asked for."""


class DefinitionNotFoundError(FlywheelError, LookupError):
    """An interface type has no installed `.msg` file (or `.json` description)."""


# -- writing a bag ---------------------------------------------------------------------------------


class BagError(FlywheelError, RuntimeError):
    """Misuse of a bag (unknown topic, closed writer, …)."""


class BagExistsError(FlywheelError, FileExistsError):
    """The bag directory already exists: bags are never overwritten."""


class BagWriteError(FlywheelError, OSError):
    """Writing a bag failed (from `write`, `flush`, `close` or the flusher thread); `path` names the file.

    The bag is then failed: every later `write`/`flush`/`close` raises this same error.
    """

    def __init__(self, path: Path, cause: BaseException, what: str = "error writing") -> None:
        detail = (cause.strerror if isinstance(cause, OSError) else None) or cause
        super().__init__(getattr(cause, "errno", None), f"{what} {path}: {detail}", str(path))
        self.path = Path(path)


class DiskFullError(BagWriteError):
    """No space left while writing a bag; `path` names the file being written."""

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(path, cause, "disk full writing")


# -- repairing and upgrading a bag -----------------------------------------------------------------


class RecoverError(FlywheelError, RuntimeError):
    """The bag cannot be recovered (not an MCAP bag, nothing readable, …)."""


class MigrateError(FlywheelError, RuntimeError):
    """The bag cannot be upgraded (not MCAP, damaged before its definitions, no clock mapping)."""


# -- replaying a bag -------------------------------------------------------------------------------


class ReplayError(FlywheelError, RuntimeError):
    """A bag cannot be replayed; the message names the file and the reason."""
