"""`teleop-flywheel replay BAG`'s body: play a recorded episode to Foxglove or back onto the ROS graph.

`--foxglove` serves the bag over the Foxglove WebSocket protocol, bound to 127.0.0.1
(`ros/session/foxglove/playback.py`); `--ros` republishes every message, byte for byte, onto the
ROS graph (`ros/session/republish.py`). Both pace the bag with `recording/mcap/player.py`'s
`Player`; messages are forwarded as the CDR bytes stored in the bag.
"""
from __future__ import annotations

import argparse
import os

from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.core.topics import camera_name
from teleop_flywheel.recording.mcap.player import BagSource
from teleop_flywheel.ros.session.foxglove.layout import write_layout
from teleop_flywheel.ros.session.foxglove.playback import serve_foxglove


def run(args: argparse.Namespace) -> int:
    from teleop_flywheel.ros.session.republish import WaitPolicy, republish_ros

    if not args.foxglove and not args.ros:
        raise UsageError("nothing to replay to", where="the command line", fix="choose --foxglove and/or --ros")
    if args.rate <= 0:
        raise UsageError(f"--rate must be positive, got {args.rate}", fix="1.0 is the recorded speed")
    source = BagSource(args.bag)  # ReplayError: one line on stderr, exit 2 (cli/)
    wait = WaitPolicy(0 if args.no_wait else (args.wait_for_subscribers or 0),
                      any_subscriber=not args.no_wait and args.wait_for_subscribers is None,
                      timeout_s=args.wait_timeout)
    if args.ros:  # the bag's streams stay on this machine unless the user opened discovery on purpose
        os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    if args.foxglove:
        if args.layout is not None:
            cameras = sorted({name for ch in source.channels.values() if (name := camera_name(ch.topic))})
            write_layout(args.layout, cameras)
            print(f"replay: layout for cameras {', '.join(cameras) or '(none)'} written to {args.layout}")
        session = serve_foxglove(source, args.host, args.port, args.rate, args.loop, args.paused)
        print(f"replay: serving {source.path} on ws://{args.host}:{session.port} "
              f"(Foxglove: Open connection → Foxglove WebSocket); Ctrl-C to stop", flush=True)
        try:
            if args.ros:
                republish_ros(source, args.rate, args.loop, wait)
            while session.thread.is_alive():
                session.thread.join(0.2)
        except KeyboardInterrupt:
            pass
        finally:
            session.stop()
        return 0
    return republish_ros(source, args.rate, args.loop, wait)

