"""`teleop-flywheel review`: a page to look at the rejections (video and plots at the failing instant)."""
from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from pathlib import Path

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.core.names import text_problem
from teleop_flywheel.data.review.server import ReviewSite, is_loopback, serve, url_of
from teleop_flywheel.data.review.suggest import report_json, report_text, summarise_reviews
from teleop_flywheel.data.validate.reasons import ValidateConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, help="a session's output folder (bags, quarantine/, validation.json)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1); another one is served only with "
                             "--allow-remote, and a warning")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow a non-loopback --host: anyone who reaches it with the URL reads the bags")
    parser.add_argument("--reviewer", default=None, help="the name written in the review log (default: your login)")
    parser.add_argument("--summary", action="store_true",
                        help="serve nothing: print per reason code how many rejections were reviewed, confirmed and "
                             "overruled, and the threshold that would have kept the overruled ones")
    parser.add_argument("--json", action="store_true", help="with --summary: JSON instead of text")
    parser.add_argument("--config", type=Path, default=None,
                        help="with --summary: the validator thresholds the verdicts were made with "
                             "(default: the shipped config/validate.yaml)")


def run(args: argparse.Namespace) -> int:
    root: Path = args.dir
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory", where=str(root), fix="name a session's output folder")
    if not is_loopback(args.host):
        if not args.allow_remote:
            raise UsageError(f"--host {args.host} is not a loopback address", where="--host",
                             fix="add --allow-remote to serve it beyond this machine")
        print(f"review: warning: serving {root} on {args.host}: anyone who can reach this port and learns the URL "
              "can read every bag in it and write reviews", file=sys.stderr)
    reviewer = args.reviewer or os.environ.get("USER") or getpass.getuser()
    why = text_problem(reviewer)
    if why:
        raise UsageError(f"--reviewer {reviewer!r}: {why}", where="--reviewer", fix="give a plain name")
    site = ReviewSite(root, reviewer)
    if args.summary:
        tallies, suggestions = summarise_reviews(site.episodes(), ValidateConfig.load(args.config))
        print(json.dumps(report_json(tallies, suggestions), indent=2) if args.json
              else report_text(tallies, suggestions))
        return 0
    server = serve(site, args.host, args.port)
    print(f"review: {len(site.episodes())} episodes in {root}; open {url_of(server, site)}  (Ctrl-C stops)",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
