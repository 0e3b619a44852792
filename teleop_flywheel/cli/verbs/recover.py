"""`teleop-flywheel recover`: rebuild an indexed MCAP and metadata.yaml from a crashed bag."""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from teleop_flywheel.recording.mcap.recover import recover


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", type=Path, help="bag directory (or its .mcap file)")
    parser.add_argument("--output", "-o", type=Path, default=None,
                        help="write the repaired bag to this new directory instead of in place")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    report = recover(args.bag, args.output)  # RecoverError/OSError: one line on stderr, exit 2 (cli/)
    if args.json:
        print(json.dumps(asdict(report), indent=2))
        return 0
    span = ""
    if report.start_log_ns is not None and report.end_log_ns is not None:
        span = f" spanning {(report.end_log_ns - report.start_log_ns) / 1e9:.3f} s"
    if not report.rewritten:
        print(f"{report.bag}: complete bag, {report.messages} messages{span}; not rewritten")
        for note in report.notes:
            print(f"note: {note}")
        return 0
    print(f"{report.bag}: {report.messages} messages recovered{span}")
    for topic, count in report.topic_counts.items():
        print(f"  {topic}: {count}")
    print(f"lost: {report.discarded_bytes} trailing bytes (incomplete record), {report.bad_chunks} corrupt chunks;"
          " anything the recorder had not yet flushed (≤ max_chunk_age_s) was never on disk")
    print(f"repaired file: {report.mcap}")
    if report.damaged:
        print(f"damaged original kept as: {report.damaged}")
    for note in report.notes:
        print(f"note: {note}")
    return 0
