"""`teleop-flywheel card`: write a data card (README.md) beside a dataset."""
from __future__ import annotations

import argparse
from pathlib import Path

from teleop_flywheel.data.lerobot.commit import upload_note
from teleop_flywheel.data.reports.card import LICENSE, write_card


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", type=Path, help="LeRobot v3.0 dataset directory; the card is its README.md")
    parser.add_argument("--validation", type=Path, metavar="REPORT",
                        help="the validator's JSON report (teleop-flywheel validate ... --json > report.json)")
    parser.add_argument("--force", action="store_true", help="overwrite a README.md this command did not write")
    parser.add_argument("--license", default=None, metavar="ID",
                        help=f"license in the card's front matter (default: the card's own, else {LICENSE}, "
                             "as LeRobot's push_to_hub)")
    parser.add_argument("--tag", action="append", default=[], metavar="TAG",
                        help="an extra tag for the hub (repeatable; LeRobot, the robot type, teleoperation are "
                             "always there)")
    parser.add_argument("--manifest", type=Path, metavar="M",
                        help="the card of a manifest's episodes, with the filter that chose them (written to "
                             "<M>.card.md, not the dataset's README.md)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="where to write the card (default: see above)")


def run(args: argparse.Namespace) -> int:
    out = write_card(args.dataset, args.validation, args.force, args.license, args.tag,  # DatasetError: exit 2
                     args.manifest, args.out)
    print(f"wrote {out}")
    if args.manifest is None and (note := upload_note(args.dataset)):
        print(f"note: {note}")
    return 0
