"""`teleop-flywheel eval watch`: evaluate each new checkpoint unattended in the simulator, against the incumbent."""
from __future__ import annotations

import argparse
from pathlib import Path

from teleop_flywheel.data.provenance import default_registry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoints", type=Path, metavar="CHECKPOINTS_DIR",
                        help="folder to watch for LeRobot checkpoint directories (any depth)")
    parser.add_argument("--protocol", type=Path, required=True, metavar="EVAL_YAML",
                        help="the evaluation protocol; its first checkpoint is the incumbent")
    parser.add_argument("--out", type=Path, default=Path("eval_watch"),
                        help="where trial bags, reports and index.html go (default: ./eval_watch)")
    parser.add_argument("--once", action="store_true", help="evaluate what is there now, then exit")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between looks (default 30)")
    parser.add_argument("--registry", type=Path, help=f"lineage registry (default {default_registry()})")
    parser.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                        help="session argument for the simulated rig, as for `run` (e.g. cameras=wrist:synthetic)")
    parser.add_argument("--param-file", action="append", default=[], type=Path,
                        help="ROS 2 parameter YAML for the session's nodes, as for `run`; repeatable")


def run(args: argparse.Namespace) -> int:
    from teleop_flywheel.ros.commands import eval_watch  # ROS is imported only when the verb runs

    return eval_watch.run(args)
