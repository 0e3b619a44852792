"""`teleop-flywheel doctor`: is a dataset consistent; explain and (--repair) repair it."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from teleop_flywheel.core.errors import EXIT_USAGE, FlywheelError, UsageError
from teleop_flywheel.data.convert.doctor import adapters
from teleop_flywheel.data.errors import CommitError, DatasetError
from teleop_flywheel.data.lerobot import commit
from teleop_flywheel.data.lerobot.consistency import problems, repair
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.reports.audit import load
from teleop_flywheel.data.reports.frame_contract import FrameContract, check_contract, contract_lines
from teleop_flywheel.data.validate.validator import display
from teleop_flywheel.hw.bringup.usb_adapter import Adapter


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", type=Path, nargs="?", help="LeRobot v3.0 dataset directory (made by convert)")
    parser.add_argument("--repair", action="store_true",
                        help="apply the repairs that lose nothing (remove what an interrupted commit left, move "
                             "orphan files aside, recompute totals and stats)")
    parser.add_argument("--port", action="append", default=[], metavar="PORT",
                        help="check the USB adapter of an arm's serial port (repeatable): driver, FTDI latency timer, "
                             "the loop rate to expect")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")


def run(args: argparse.Namespace) -> int:
    if args.dataset is None and not args.port:
        raise UsageError("nothing to check", fix="give a DATASET, --port PORT (an arm's serial port), or both")
    if args.repair and args.dataset is None:
        raise UsageError("--repair repairs a dataset", where="--repair", fix="give the DATASET to repair")
    ports = adapters(args.port)
    bad_ports = sum(a.needs_tuning for a in ports)
    if args.json and args.dataset is None:
        print(json.dumps({"ports": [a.to_dict() for a in ports]}, indent=2))
    elif not args.json:
        for a in ports:
            doc = a.to_dict()
            print(f"port {a.port}: {doc['summary']}\n    {doc['expect']}")
            if a.needs_tuning:
                timer = "unreadable" if a.latency_ms is None else f"{a.latency_ms} ms"
                print(f"problem: {a.port}: FTDI latency timer {timer}, not 1 ms\n    fix: {doc['action']} "
                      f"(teleop-flywheel find-port --port {a.port} --arm ARM gives the rule)")
    if args.dataset is None:
        return 0 if not bad_ports else 1
    return max(_dataset(args, ports), 1 if bad_ports else 0)


def _version(root: Path) -> str | None:
    """The version the dataset's pointer names (`data/lerobot/commit/`); None for a plain directory."""
    try:
        version = commit.current(root)
    except CommitError:
        return None
    return version.name if version is not None else None


def _dataset(args: argparse.Namespace, ports: list[Adapter]) -> int:
    root = Path(os.path.abspath(args.dataset))
    if not root.exists() and not commit.pending(root):
        raise UsageError("no such dataset (and nothing an interrupted commit left beside it)", where=display(root),
                         fix="give a dataset's root folder, the one `teleop-flywheel convert --dataset` wrote")
    done: list[str] = []
    try:
        with commit.locked_dataset(root):
            if args.repair:
                done, found = repair(root)
            else:
                found = problems(root)
    except FlywheelError as exc:  # one line on stderr, exit 2 (cli/)
        exc.exit_code = EXIT_USAGE
        raise
    if not found and not done and not (root / "meta" / "info.json").is_file():
        raise UsageError("not a LeRobot dataset (no meta/info.json)", where=display(root),
                         fix="give a dataset's root folder, the one `teleop-flywheel convert --dataset` wrote")
    version = _version(root)
    note = commit.upload_note(root) if version is not None else None
    # The contract needs only the state and action columns: a dataset whose videos are gone (a copy
    # without its large files, a download cut short) is still checked.
    contract = _contract(root)
    broken = contract is not None and bool(contract.problem or contract.flagged)
    if args.json:
        print(json.dumps({"dataset": display(root), "version": version, "repaired": done,
                          "problems": [p.to_dict() for p in found],
                          "consistent": not found, "upload_note": note,
                          "frame_contract": None if contract is None else contract.to_dict(),
                          **({"ports": [a.to_dict() for a in ports]} if ports else {})},
                         indent=2))
    else:
        for line in done:
            print(f"repaired: {display(line)}")
        for p in found:
            fix = f"\n    repair: {p.repair} (run with --repair)" if p.repair else \
                "\n    not repaired here: the dataset's pointer or versions are not as commits leave them" if p.layout \
                else "\n    not repairable here: the episodes named are lost; re-convert their bags into a new dataset"
            print(f"problem: {display(p.detail)}{fix}")
        if contract is not None:
            print("\n".join(contract_lines(contract)))
            if broken:
                print("problem: the frame contract is broken (above)\n    not repairable here: re-convert the bags, "
                      "or fix the writer that stored the actions")
        if note:
            print(f"note: {display(root)}: {note}")
        print(f"{display(root)}" + (f" ({version})" if version else "") + ": "
              + ("consistent" if not found else f"{len(found)} problem(s)"
                                     + (f", {sum(1 for p in found if p.repair)} repairable with --repair"
                                        if not args.repair else "")))
    return 0 if not found and not broken else 1


def _contract(root: Path) -> FrameContract | None:
    """The frame contract (None: no state and action to compare, or its frames cannot be read)."""
    try:
        ds = LeRobotDataset.open(root)
        data = load(ds)
    except DatasetError:
        return None
    return check_contract(ds, data.spans, data.state, data.action, ds.joint_names(data.state_feature))
