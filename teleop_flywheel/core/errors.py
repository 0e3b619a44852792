"""One root for every error the project raises on purpose, and the one voice the CLI tells them in.

Each specific error also keeps its natural built-in base (ValueError for bad input, RuntimeError
for a failed operation, OSError for the disk), so callers that catch those keep working, while
the CLI catches `FlywheelError` (and `OSError`) once and prints ONE line instead of a traceback:

    teleop-flywheel <command>: error: <what>, <where> (<how to fix>)

An error may carry `where` (the file, port or node) and `fix` (what to do) itself; otherwise a
message written the old way, `<path>: <what>`, is turned around into `<what>, <path>`, and the fix
is the error class's `fix`, the one an `OSError`'s errno implies, or the command's `--help`.

Exit codes, the same for every command (`EXIT_CODES`, shown in every `--help`):
0 the command ran to completion (rejected episodes and warnings are results);
1 it ran, but some inputs could not be processed (an unreadable bag, a failed encode), or a check
  (`manifest verify`, `doctor`) found the data differs;
2 usage error, or nothing could be read.

Every floor keeps its errors in one `errors.py` beside this one (`hw/errors.py`, `data/errors.py`,
…), each class a subclass of `FlywheelError`; the classes at the end of this file are core's own.
"""
from __future__ import annotations

import errno
import re

PROG = "teleop-flywheel"
EXIT_OK, EXIT_PARTIAL, EXIT_USAGE = 0, 1, 2
EXIT_CODES = ("exit codes: 0 ran to completion (rejected episodes and warnings are results); "
              "1 ran, but some inputs could not be processed (or a check found a difference); "
              "2 usage error, or nothing could be read. An error is one line on stderr: "
              f"{PROG} <command>: error: <what>, <where> (<how to fix>); --debug adds the traceback.")


class FlywheelError(Exception):
    """An expected failure whose message names the file/port/node and the reason.

    Class attributes a subclass (or an instance) may set: `exit_code` (what a command that stops
    on it returns), `fix` (how to fix it, when the message does not say), `where`.
    """

    exit_code: int = EXIT_USAGE
    fix: str = ""
    where: str = ""
    details: tuple[str, ...] = ()  # lines the CLI prints above the one error line (what differs, one a line)


class UsageError(FlywheelError, ValueError):
    """A command cannot run as asked: a bad argument, or input it cannot read at all (exit 2)."""

    def __init__(self, what: str, where: str = "", fix: str = "", exit_code: int = EXIT_USAGE) -> None:
        super().__init__(what)
        self.where, self.fix, self.exit_code = where, fix, exit_code


class PartialFailure(FlywheelError, RuntimeError):
    """A command ran, but some inputs could not be processed (exit 1); the lines above say which."""

    exit_code = EXIT_PARTIAL

    def __init__(self, what: str, where: str = "", fix: str = "") -> None:
        super().__init__(what)
        self.where, self.fix = where, fix


_OS_FIXES = {
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "check the path",
    errno.EISDIR: "give a file, not a directory",
    errno.EACCES: "check its permissions",
    errno.EPERM: "check its permissions",
    errno.ENOSPC: "free disk space and run it again",
    errno.EDQUOT: "free disk space and run it again",
    errno.EROFS: "choose a writable place",
    errno.EEXIST: "choose another name; nothing is ever overwritten",
    errno.ENODEV: "is the device plugged in?",
    errno.EBUSY: "another program holds it: close that one first",
}
# `<path>: <what>`: a leading path-like word (no spaces, a `/` or a file suffix in it), then `: `.
_LEADING_PATH = re.compile(r"^(?P<where>[^\s:]*(?:/|\.[A-Za-z0-9]{1,8})[^\s:]*|/[^:]*): (?P<what>.+)$", re.S)


def one_line(text: str) -> str:
    """Text on one line: lines joined with spaces, a YAML error's caret line and blank lines dropped."""
    parts = [line.strip() for line in str(text).splitlines()]
    return " ".join(p for p in parts if p and set(p) != {"^"})


def yaml_problem(exc: BaseException) -> str:
    """A YAML parser error as one phrase: `line 2, column 4: expected ',' or ']', but got ':'`."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return one_line(str(exc))


def _parts(exc: BaseException) -> tuple[str, str, str]:
    """(what, where, fix) of an exception."""
    if isinstance(exc, OSError) and not isinstance(exc, FlywheelError) and exc.strerror:
        where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
        what = exc.strerror[:1].lower() + exc.strerror[1:]
        return what, where, _OS_FIXES.get(exc.errno or 0, "")
    text = one_line(str(exc)) or type(exc).__name__
    if not isinstance(exc, (FlywheelError, OSError)):
        text = f"{type(exc).__name__}: {text}"
    return text, str(getattr(exc, "where", "") or ""), _fix(exc)


def _fix(exc: BaseException) -> str:
    """The fix set on this error itself, else the innermost one along the errors it wraps
    (`raise Outer(...) from inner`): the deepest cause knows best what went wrong."""
    if vars(exc).get("fix"):
        return str(vars(exc)["fix"])
    found, seen = "", set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if getattr(cause, "fix", ""):
            found = str(cause.fix)  # type: ignore[attr-defined]
        elif isinstance(cause, OSError) and cause.errno in _OS_FIXES:
            found = _OS_FIXES[cause.errno]
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return found


def error_line(command: str, error: BaseException | str, where: str = "", fix: str = "") -> str:
    """`teleop-flywheel <command>: error: <what>, <where> (<how to fix>)`, one line.

    `error` is an exception or the text of what went wrong; `where`/`fix` given here win over the
    exception's own. Without a known fix the command's `--help` is named."""
    if isinstance(error, BaseException):
        what, own_where, own_fix = _parts(error)
    else:
        what, own_where, own_fix = one_line(error), "", ""
    where, fix = one_line(where or own_where), one_line(fix or own_fix)
    if not where:
        m = _LEADING_PATH.match(what)
        if m and m.group("what").strip():
            what, where = m.group("what").strip(), m.group("where")
    what = what.rstrip(" .;")
    text = what if not where or where in what else f"{what}, {where}"
    if not fix:
        fix = f"see {PROG} {command} --help"
    if fix.startswith("(") and fix.endswith(")"):
        fix = fix[1:-1]
    return f"{PROG} {command}: error: {text} ({fix})"


# -- what core's own checks refuse: a calibration, a name, a file, a task spec ---------------------


class CalibrationError(FlywheelError, ValueError):
    """A calibration file is missing or wrong; the message names the file and the field."""

    fix = "docs/arm_driver.md lists a calibration file's fields; teleop-flywheel calibrate writes one"


class OutsideRootError(FlywheelError, ValueError):
    """A path built from a name would leave the folder it must stay in: nothing is written."""


class FileExistsRefused(FlywheelError, FileExistsError):
    """The target exists (or is a symlink): it is never overwritten."""


class UnsafeNameError(FlywheelError, ValueError):
    """A name read from a recording that is not a name (it could be read as a path)."""

    def __init__(self, field: str, value: object, why: str) -> None:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{field} {shown} is not a safe name: {why}")
        self.field = field
        self.value = value


class TaskSpecError(FlywheelError, ValueError):
    """A task spec that cannot be used; the message names the file and the field (exit 2)."""

    fix = "docs/task_spec.md describes every field; `teleop-flywheel task init` writes a template"
