"""`teleop-flywheel info`: describe a bag like `ros2 bag info`, plus episode metadata."""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from teleop_flywheel.core.errors import FlywheelError, UsageError
from teleop_flywheel.data.reports.bag_info import bag_info, camera_lags, format_info
from teleop_flywheel.recording.mcap.exceptions import BagReadError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", type=Path, help="bag directory (or its .mcap file)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--no-lag", action="store_true",
                        help="skip estimating the cameras' lag from their images (when the bag has no verdict.json)")


def run(args: argparse.Namespace) -> int:
    try:  # a bag it cannot read ends the command with one line (cli/): exit 2, nothing could be read
        info = bag_info(args.bag)
        if not args.no_lag:
            try:
                info.camera_lag, info.camera_lag_source = camera_lags(args.bag)
            except (BagReadError, OSError, ValueError) as exc:
                info.warnings.append(f"camera lag not estimated: {exc}")
    except KeyError as exc:
        raise UsageError(f"metadata.yaml lacks the key {exc}", where=str(args.bag),
                         fix="teleop-flywheel recover BAG --output NEW writes a complete bag") from exc
    except ValueError as exc:
        if isinstance(exc, FlywheelError):
            raise
        raise UsageError(str(exc), where=str(args.bag)) from exc
    print(json.dumps(asdict(info), indent=2) if args.json else format_info(info))
    return 0
