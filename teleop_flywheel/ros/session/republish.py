"""`teleop-flywheel replay BAG --ros`: a bag back onto the ROS graph, for machines without `ros2 bag play`.

Every message is published byte for byte (the stored CDR, nothing decoded) with the original
spacing (scaled by `--rate`), on the topic it was recorded from and with the QoS its publishers
offered (the channel's `offered_qos_profiles`, as rosbag2 stores them): the latched
`/teleop/intervention` is transient-local again, so a transient-local subscriber — the project's
own console — matches it and receives the events it missed. Profiles are combined as rosbag2's
player does: reliable only if every recorded publisher was, transient-local only if every one was,
the deepest history kept. A channel without profiles (a bag from elsewhere) is published reliable
and volatile.

By default playback waits for subscribers, so the first seconds are not sent to nobody: it starts
once some subscriber has matched one of the topics and no new match has appeared for
`SETTLE_S` (one node's subscriptions are discovered together). `--wait-for-subscribers N` waits
for N on every topic instead; `--no-wait` starts at once.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from teleop_flywheel.recording.mcap.metadata import Qos, parse_qos_yaml
from teleop_flywheel.recording.mcap.player import BagSource, Player
from teleop_flywheel.recording.mcap.reader import RawChannel
from teleop_flywheel.ros.nodes.common import message_class

SETTLE_S = 0.5
DEFAULT_QOS = Qos(depth=50)  # what the project's streams use: reliable, volatile


@dataclass(frozen=True)
class WaitPolicy:
    """When playback starts: `every` subscribers on each topic, or (any_subscriber) the first
    match plus SETTLE_S of quiet discovery; `timeout_s` > 0 starts anyway after that long."""

    every: int = 0
    any_subscriber: bool = True
    timeout_s: float = 0.0

    @property
    def waits(self) -> bool:
        return self.every > 0 or self.any_subscriber


def recorded_qos(channel: RawChannel) -> Qos:
    """One profile for a channel's publisher, from the profiles its recorded publishers offered."""
    text = channel.metadata.get("offered_qos_profiles", "")
    try:
        offered = parse_qos_yaml(text) if text.strip() else []
    except (ValueError, KeyError, TypeError):
        offered = []
    if not offered:
        return DEFAULT_QOS
    reliable = all(q.reliability == "reliable" for q in offered)
    latched = all(q.durability == "transient_local" for q in offered)
    return Qos(history="keep_last", depth=max(max(q.depth for q in offered), 1),
               reliability="reliable" if reliable else "best_effort",
               durability="transient_local" if latched else "volatile")


def ros_qos(qos: Qos) -> Any:
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=qos.depth,
                      reliability=ReliabilityPolicy.RELIABLE if qos.reliability == "reliable"
                      else ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if qos.durability == "transient_local"
                      else DurabilityPolicy.VOLATILE)




def wait_for_subscribers(publishers: dict[int, Any], policy: WaitPolicy, say: Any = print) -> bool:
    """Block until `policy` is met; False if it timed out (playback then starts anyway)."""
    if not policy.waits or not publishers:
        return True
    deadline = time.monotonic() + policy.timeout_s if policy.timeout_s > 0 else None
    say("replay: waiting for subscribers (--no-wait starts at once; Ctrl-C to stop)")
    matched: set[int] = set()
    quiet_since = None
    while deadline is None or time.monotonic() < deadline:
        counts = {cid: pub.get_subscription_count() for cid, pub in publishers.items()}
        if policy.every > 0:
            if all(n >= policy.every for n in counts.values()):
                return True
        else:
            now_matched = {cid for cid, n in counts.items() if n > 0}
            if now_matched - matched:
                matched |= now_matched
                quiet_since = time.monotonic()
            if quiet_since is not None and time.monotonic() - quiet_since >= SETTLE_S:
                return True
        time.sleep(0.05)
    say(f"replay: no subscriber within {policy.timeout_s:g} s; playing anyway")
    return False


def republish_ros(source: BagSource, speed: float = 1.0, loop: bool = False,
                  wait: WaitPolicy | None = None) -> int:
    """Publish every message of the bag onto the ROS graph with original timing and QoS."""
    import rclpy
    from rclpy.duration import Duration
    from rclpy.node import Node

    policy = wait if wait is not None else WaitPolicy()
    rclpy.init()
    node = Node("bag_replay")
    publishers: dict[int, Any] = {}
    for cid, ch in source.channels.items():
        try:
            publishers[cid] = node.create_publisher(message_class(ch.schema_name), ch.topic, ros_qos(recorded_qos(ch)))
        except (ImportError, AttributeError, ValueError) as exc:
            print(f"replay: skipping {ch.topic}: message type {ch.schema_name} not installed ({exc})", file=sys.stderr)
    player = Player(source, lambda m: publishers[m.channel_id].publish(m.data) if m.channel_id in publishers else None,
                    speed=speed, loop=loop)
    try:
        wait_for_subscribers(publishers, policy, lambda text: print(text, flush=True))
        thread = threading.Thread(target=player.run, daemon=True)
        thread.start()
        while thread.is_alive() and not player.ended:
            thread.join(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        player.stop()
        for pub in publishers.values():  # let reliable subscribers receive the tail
            pub.wait_for_all_acked(Duration(seconds=2))
        node.destroy_node()
        rclpy.shutdown()
    print(f"replay: published {player.emitted} of {source.message_count} messages from {source.path}")
    return 0
