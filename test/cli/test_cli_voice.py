"""One CLI voice: every bad input of every command that takes one is ONE line, the last
on stderr, `teleop-flywheel <command>: error: <what>, <where> (<how to fix>)`, with the documented
exit code (2: usage error or nothing could be read) and no traceback. Table-driven: missing path,
empty dir, garbage file, bad YAML, nonexistent port; an empty camera list is valid, and a `run`
whose port is missing keeps retrying after one line naming the port."""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.paths import ROOT

from teleop_flywheel import cli
from teleop_flywheel.core.errors import EXIT_CODES, error_line

LINE = re.compile(r"^teleop-flywheel (?P<command>[a-z-]+(?: [a-z]+)?): error: (?P<what>.+) \((?P<fix>.+)\)$")


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad")
    (root / "empty").mkdir()
    garbage = root / "garbage.mcap"
    garbage.write_bytes(bytes(range(256)) * 12)
    (root / "bad.yaml").write_text("a: [1, 2\n  b: }\n")
    (root / "garbage.json").write_text("{not json")
    badmeta = root / "badmeta"
    badmeta.mkdir()
    (badmeta / "badmeta_0.mcap").write_bytes(garbage.read_bytes())
    (badmeta / "metadata.yaml").write_text("a: [1, 2\n  b: }\n")
    dataset = root / "garbage_ds"
    (dataset / "meta").mkdir(parents=True)
    (dataset / "meta" / "info.json").write_text("{not json")
    (root / "full").mkdir()
    (root / "full" / "x").write_text("x")
    return {"root": root, "missing": root / "nope", "empty": root / "empty", "garbage": garbage,
            "yaml": root / "bad.yaml", "json": root / "garbage.json", "badmeta": badmeta, "dataset": dataset,
            "full": root / "full"}


# (command line with {placeholders}, what the line must name; exit code 2 for all of them)
CASES = [
    ("info {missing}", "{missing}"),
    ("info {empty}", "{empty}"),
    ("info {badmeta}", "metadata.yaml"),
    ("validate {missing}", "{missing}"),
    ("validate {empty}", "{empty}"),
    ("validate {empty} --config {yaml}", "{yaml}"),
    ("convert {missing} --dataset {root}/ds1", "{missing}"),
    ("convert {empty} --dataset {root}/ds1", "{empty}"),
    ("convert {garbage} --dataset {root}/ds1", "{garbage}"),
    ("convert {garbage} --dataset {root}/ds1 --config {yaml}", "{yaml}"),
    ("convert {garbage}", "--dataset"),  # argparse: the usage line above, the one line last
    ("recover {missing}", "{missing}"),
    ("recover {empty}", "{empty}"),
    ("recover {garbage}", "{garbage}"),
    ("migrate {missing}", "{missing}"),
    ("migrate {garbage}", "{garbage}"),
    ("migrate {json}", "{json}"),
    ("audit {missing}", "{missing}"),
    ("audit {empty}", "{empty}"),
    ("audit {dataset}", "info.json"),
    ("curate {empty}", "{empty}"),
    ("curate {dataset}", "info.json"),
    ("card {missing}", "{missing}"),
    ("card {dataset}", "info.json"),
    ("doctor {missing}", "{missing}"),
    ("ingest {missing} --dataset {root}/ids --once", "{missing}"),
    ("ingest {empty} --dataset {root}/ids --once --config {yaml}", "{yaml}"),
    ("doctor {empty}", "{empty}"),
    ("manifest verify {missing} {json}", "{missing}"),
    ("manifest create {empty} --out {root}/m.json", "{empty}"),
    ("lineage --registry {json} list", "{json}"),
    ("train {missing} --policy act --out {root}/run", "{missing}"),
    ("train {json} --policy act --out {root}/run", "{json}"),
    ("stats {missing}", "{missing}"),
    ("stats {empty}", "{empty}"),
    ("eval {missing}", "{missing}"),
    ("eval --protocol {yaml}", "{yaml}"),
    ("eval --protocol {missing}", "{missing}"),
    ("replay {missing} --foxglove", "{missing}"),
    ("replay {empty} --foxglove", "{empty}"),
    ("replay {garbage} --foxglove", "{garbage}"),
    ("replay {garbage}", "--foxglove"),
    ("run teleop --arg nonsense", "nonsense"),
    ("run teleop --arg nosuch=1", "nosuch"),
    ("run sim --param-file {yaml}", "{yaml}"),
    ("run sim --param-file {missing}", "{missing}"),
    ("run sim --arg follower_calibration={yaml}", "{yaml}"),
    ("run sim --arg follower_calibration={missing}", "{missing}"),
    ("calibrate --port /dev/no_such_arm --arm follower --out {root}/c.yaml", "/dev/no_such_arm"),
    ("setup-motors --port /dev/no_such_arm --arm follower", "/dev/no_such_arm"),
    ("sim-bus --arm leader --calibration {yaml}", "{yaml}"),
    ("sim-bus --arm leader --fault nonsense", "nonsense"),
    ("find-port --ports {missing}* --after-seconds 0", "{missing}"),
    ("mirror --seconds 0", "--seconds"),
    ("view --namespace 1rig", "1rig"),
    ("console", "standard input"),
    ("demo --out {full}", "{full}"),
    ("demo --out {root}/d --seconds 1", "--seconds"),
]


def _fill(text: str, bad: dict[str, Path]) -> str:
    return text.format(**{k: str(v) for k, v in bad.items()})


@pytest.mark.parametrize("line,names", CASES, ids=[c[0].split("{")[0].strip() + f"-{i}" for i, c in enumerate(CASES)])
def test_bad_input_is_one_line_exit_2_no_traceback(line: str, names: str, bad: dict[str, Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    argv = _fill(line, bad).split()
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (argv, code, out[-500:], err[-500:])
    assert "Traceback" not in err + out
    lines = err.rstrip("\n").splitlines()
    assert lines, (argv, out)
    m = LINE.match(lines[-1])
    assert m, f"last stderr line not in the format: {lines[-1]!r}"
    assert m.group("command").split()[0] == argv[0]
    assert _fill(names, bad) in lines[-1], lines[-1]
    assert sum(": error:" in x for x in lines) == 1, lines  # one line; argparse's usage may stand above it
    assert ": error:" not in out


def test_a_debug_run_shows_the_traceback_above_the_line(bad: dict[str, Path],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["audit", str(bad["missing"]), "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and LINE.match(err.rstrip("\n").splitlines()[-1])


def test_garbage_bag_is_a_verdict_not_an_error(bad: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """validate judges what it can open as a bag: a garbage .mcap is CORRUPT, a result (exit 0)."""
    assert cli.main(["validate", str(bad["garbage"]), "--workers", "1"]) == 0
    out, err = capsys.readouterr()
    assert "FAIL garbage.mcap CORRUPT" in out and ": error:" not in err


def test_some_inputs_unreadable_is_exit_1_each_named_once(bad: dict[str, Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

    good = write_session(tmp_path / "ep", SessionSpec(duration_s=2.0))
    assert cli.main(["validate", str(good.bag), str(bad["missing"]), "--workers", "1"]) == 1
    err = capsys.readouterr().err.rstrip("\n").splitlines()
    errors = [x for x in err if ": error:" in x]
    assert len(errors) == 1 and str(bad["missing"]) in errors[0] and LINE.match(errors[0])


def test_error_line_format() -> None:
    assert error_line("info", FileNotFoundError(2, "No such file or directory", "/x/y")) == \
        "teleop-flywheel info: error: no such file or directory, /x/y (check the path)"
    assert error_line("audit", "/data/ds: not a dataset") == \
        "teleop-flywheel audit: error: not a dataset, /data/ds (see teleop-flywheel audit --help)"
    assert (
        error_line("run", "bad\nthing\n  ^", where="w", fix="(do this)")
        == "teleop-flywheel run: error: bad thing, w (do this)"
    )


def _actions(parser: argparse.ArgumentParser, prefix: str) -> list[tuple[str, argparse.Action]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _actions(sub, f"{prefix} {name}")
            continue
        out.append((prefix, action))
    return out


def test_every_option_has_help_and_every_help_has_the_exit_codes() -> None:
    missing = []
    for name in cli.SUBCOMMANDS:
        parser, _module = cli.command_parser(name)
        assert parser.epilog == EXIT_CODES
        missing += [f"{where} {a.option_strings or a.dest}" for where, a in _actions(parser, name)
                    if not a.help or a.help == argparse.SUPPRESS]
    assert not missing, missing
    assert "exit codes: 0 ran to completion" in cli.build_parser().format_help()


@pytest.mark.skipif(not hasattr(signal, "SIGINT"), reason="POSIX")
def test_run_with_missing_ports_retries_after_one_line_and_no_cameras_is_valid(tmp_path: Path) -> None:
    pytest.importorskip("rclpy")
    real = str(ROOT / "config" / "calibration" / "example_real_follower.yaml")
    cmd = [sys.executable, "-m", "teleop_flywheel.cli", "run", "teleop", "--seconds", "3",
           "--arg", "leader_port=/dev/no_such_leader", "--arg", "follower_port=/dev/no_such_follower",
           "--arg", f"leader_calibration={real}", "--arg", f"follower_calibration={real}",
           "--arg", "cameras=", "--arg", "metrics=off", "--arg", f"output_dir={tmp_path / 'bags'}"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # still running until --seconds ended it, retrying (backoff 0.1, 0.2, 0.4, 0.8 s...: four quiet retries by 3 s)
    assert time.monotonic() - t0 >= 3
    assert "session up" in proc.stdout and "camera" not in proc.stdout  # no camera nodes: valid
    for port in ("/dev/no_such_leader", "/dev/no_such_follower"):
        named = [x for x in proc.stderr.splitlines() if port in x]
        assert len(named) == 1 and "retrying" in named[0], named  # one line, then quiet retries
    assert "Traceback" not in proc.stderr


def test_progress_is_a_bar_only_on_a_terminal(tmp_path: Path) -> None:
    """In a log file (here a pipe) a long step says what it does in one line, never a line of
    carriage returns."""
    from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

    bags = [write_session(tmp_path / f"ep{i}", SessionSpec(duration_s=2.0, seed=i)).bag for i in range(2)]
    proc = subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", "validate", *map(str, bags), "--workers", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr + proc.stdout
    assert "validate: 2 bags..." in proc.stderr.splitlines()
