"""Names read from recordings are data, never paths: the strict patterns they must match.

A bag comes from another rig, another person or the internet, and every name in it that reaches
a path or a feature key (a camera's `observation.images.<camera>` and its video folder, an episode's
task and operator columns) is checked here where it is read (`EpisodeMeta.from_strings`, the bag
reader) before anything else sees it. Two kinds:

- identifiers (camera, rig, episode, robot type, session kind): ASCII letters, digits
  and `_ . , : + @ = -`, starting with a letter or digit, at most `MAX_IDENTIFIER` characters, no
  `..` (so never a path separator, a parent, an absolute path or a hidden file);
- text (task, operator, checkpoint, condition, failure label): at most `MAX_TEXT` printable characters
  (no NUL or other control character), no `/` or `\\`, not `.` or `..`, and unchanged by Unicode
  NFKC normalisation (a fullwidth solidus `／` or a one-dot leader `․` would become `/` or `.`
  in whatever normalises it later).

Stream names are ROS names (`core.topics.is_ros_name`). A name that fails is an `UnsafeNameError`
naming the field: the validator rejects the bag with `UNSAFE_NAME` (docs/validate.md), `convert`
and `ingest` refuse it whatever their flags. Paths the engine builds are checked once more, by
`core.files.inside` (resolve and compare), before anything is written.
"""
from __future__ import annotations

import re
import unicodedata

from teleop_flywheel.core.errors import UnsafeNameError

UNSAFE_NAME = "UNSAFE_NAME"  # the validator's reason code (data/validate/reasons.py)
MAX_IDENTIFIER = 128
MAX_TEXT = 1000
# The identifier rule as one regex (the recorder's parameters check it too): no `..`, bounded.
IDENTIFIER_PATTERN = rf"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.,:+@=-]{{0,{MAX_IDENTIFIER - 1}}}"
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,:+@=-]*")


def identifier_problem(value: object) -> str | None:
    """Why `value` is not an identifier (module docstring); None if it is one. "" is not checked
    here: callers decide whether a field may be empty."""
    if not isinstance(value, str):
        return f"not a string ({type(value).__name__})"
    if len(value) > MAX_IDENTIFIER:
        return f"longer than {MAX_IDENTIFIER} characters"
    if not _IDENTIFIER.fullmatch(value):
        return (f"only ASCII letters, digits and {'_.,:+@=-'!r}, starting with a letter or digit, are allowed")
    if ".." in value:
        return "'..' is not allowed"
    return None


def text_problem(value: object) -> str | None:
    """Why `value` is not safe text (module docstring); None if it is."""
    if not isinstance(value, str):
        return f"not a string ({type(value).__name__})"
    if len(value) > MAX_TEXT:
        return f"longer than {MAX_TEXT} characters"
    if not value.isprintable():
        return "control characters (NUL, newline, escape ...) are not allowed"
    if "/" in value or "\\" in value:
        return "path separators ('/', '\\') are not allowed"
    if value.strip() in (".", ".."):
        return "'.' and '..' are not names"
    if unicodedata.normalize("NFKC", value) != value:
        return "characters that Unicode normalisation changes (look-alikes such as '／' or '․') are not allowed"
    return None


def check_identifier(field: str, value: object, empty: bool = True) -> str:
    """`value` if it is an identifier (or "" where `empty` is allowed), else UnsafeNameError."""
    if empty and value == "":
        return ""
    why = identifier_problem(value) if value != "" else "empty"
    if why:
        raise UnsafeNameError(field, value, why)
    return str(value)


def check_text(field: str, value: object) -> str:
    """`value` if it is safe text, else UnsafeNameError."""
    why = text_problem(value)
    if why:
        raise UnsafeNameError(field, value, why)
    return str(value)
