"""Every error the data engine raises on purpose, in one place: a dataset that is not what its
metadata says, a thresholds file, a filter, a manifest that no longer matches, a format's input.
Callers catch them by name without importing the module that raised them. Each is a
`FlywheelError` naming the file (and episode) and the reason, with a `fix` where one is known;
those a command survives with exit 1 say so in `exit_code`.

`convert.align.AlignError` stays in the aligner: it carries the aligner's own `Dropout` records
and reason code, and this module importing the aligner would make an import cycle.
"""
from __future__ import annotations

from typing import Any

from teleop_flywheel.core.errors import EXIT_PARTIAL, FlywheelError, UsageError
from teleop_flywheel.recording.mcap.exceptions import MigrateError

# -- a dataset on disk (data/lerobot) --------------------------------------------------------------


class DatasetError(FlywheelError, ValueError):
    """The dataset on disk is not what its metadata says; the message names file and episode."""


class CommitError(FlywheelError, RuntimeError):
    """A commit that cannot be made (a new file's name is taken, a pointer we did not make)."""


# -- checking and describing episodes (data/validate, data/provenance) -----------------------------


class ConfigError(FlywheelError, ValueError):
    """A validator thresholds file that cannot be used; names the file (every command: exit 2)."""

    fix = "config/validate.yaml shows every threshold"


class DecodeError(FlywheelError, ValueError):
    """An episode that cannot be decoded as the engine reads it; `code` is its reason code."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


class FilterError(FlywheelError, ValueError):
    """A filter that does not parse, or names a column the episodes table does not have."""

    fix = "see docs/dataset_reports.md, 'Filter expressions'"


class ReviewError(FlywheelError, ValueError):
    """A review that cannot be recorded as asked (unknown verdict, a note that is no text)."""


class LineageError(DatasetError):
    """A lineage registry or source that cannot be read (missing, not JSON, not a registry), or a
    checkpoint without an id or already registered to another source; names the file or checkpoint."""


class ManifestMismatch(DatasetError):
    """The dataset no longer holds what the manifest froze: training on it would not be that manifest."""

    exit_code = EXIT_PARTIAL
    fix = ("`teleop-flywheel manifest verify DATASET MANIFEST --subset` explains each; give the dataset the "
           "manifest was frozen from (--dataset), or create a new manifest")

    def __init__(self, message: str, lines: list[str]) -> None:
        super().__init__(message)
        self.details = tuple(lines)


# -- converting bags into a dataset (data/convert) -------------------------------------------------


class AppendRefused(UsageError):
    """This run cannot append to this dataset (fps or codec differ): nothing was done."""


class EncoderStalled(FlywheelError, RuntimeError):
    """A video encoder made no progress for its stall time (`lerobot/encoder_process.py`): killed, its
    file removed; the command stops (exit 1), publishing nothing it had not published before."""

    exit_code = EXIT_PARTIAL
    fix = ("run it again (a stalled encoder is the library's fault, e.g. an SVT-AV1 deadlock, and rarely repeats); "
           "--encode-timeout S sets how long an encode may make no progress")


class MissingCalibrationError(FlywheelError, ValueError):
    """An episode recorded no calibration for a role and none was supplied with --calibration."""

    fix = 'supply it with --calibration ROLE=FILE'


class InconsistentDatasetError(FlywheelError, ValueError):
    """The dataset on disk is inconsistent; convert never appends to it (run `teleop-flywheel doctor`)."""


class FeatureSetError(FlywheelError, ValueError):
    """The episode's features differ from the target dataset's (a feature-set change is a new dataset)."""


# -- exporting and importing other formats (data/formats) ------------------------------------------


class ExportError(DatasetError):
    """The dataset failed under the export (a video that does not decode, frames missing): exit 1."""

    exit_code = EXIT_PARTIAL
    fix = "`teleop-flywheel doctor DATASET` checks the dataset's files"


class ForeignArmError(DatasetError):
    """A dataset of another arm (other joints, or none): its values are not the SO-101's (exit 1)."""

    exit_code = EXIT_PARTIAL
    fix = "export a dataset of the SO-101 (the one `teleop-flywheel convert` writes)"


class AlohaInputError(FlywheelError, ValueError):
    """An episode file cannot be imported; the message names the file and what is wrong."""

    exit_code = EXIT_PARTIAL
    fix = "docs/formats.md lists what an ALOHA episode file must hold"


class V21InputError(FlywheelError, ValueError):
    """A file of the v2.1 dataset cannot be migrated; the message names it and what is wrong."""

    exit_code = EXIT_PARTIAL
    fix = "docs/formats.md lists what a LeRobot v2.1 dataset must hold"


# -- the engine's own machinery: locks, parallel jobs, migration -----------------------------------


class LockError(FlywheelError, RuntimeError):
    """The lock is held by another process (wait=False) or cannot be taken."""

    fix = 'another command is using it: wait for it to finish'


class ParallelJobError(FlywheelError, RuntimeError):
    """A job failed; names which input it was so a fleet run points at the bad bag."""

    def __init__(self, index: int, item: Any, cause: BaseException) -> None:
        super().__init__(f"job {index} ({item!r}) failed: {type(cause).__name__}: {cause}")
        self.index = index
        self.item = item


class FrozenEpisodesChanged(MigrateError):
    """The dataset no longer holds what the old manifest froze: migrating it would hide that."""

    exit_code = EXIT_PARTIAL
    fix = "migrate it against the dataset it was frozen from (--dataset), or create a new manifest"
