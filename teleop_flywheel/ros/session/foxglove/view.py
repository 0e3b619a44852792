"""`teleop-flywheel view`: the live session in Foxglove, without foxglove_bridge.

What LeRobot users get from `--display_data`: start a session (`teleop-flywheel run sim`, or
`ros2 launch ...`), then `teleop-flywheel view`, and open `ws://127.0.0.1:8765` in Foxglove
(Open connection → Foxglove WebSocket) with the layout `config/foxglove_layout.json` (or the one
`--layout FILE` writes for the cameras the session really has).

A ROS node (`foxglove_view`, in the rig's namespace) serves the graph over foxglove-sdk's
WebSocket server, bound to 127.0.0.1 unless `--host` says otherwise:
- every topic of the rig (under `--namespace`, plus the global `/diagnostics`) is advertised under
  its namespace-free name (`/leader/joint_states` for `/rig_a/leader/joint_states`), so the one
  layout fits every rig; schemas are the installed `.msg` definitions (what the recorder writes),
  messages the CDR bytes as received (raw subscriptions, nothing decoded), log time = receive
  time;
- a topic is subscribed on the ROS side only while some Foxglove client subscribes to it (as
  foxglove_bridge does), except the arms' joint states, which always feed the 3D scene
  (`arms3d.ArmScene`: `/robot_description` and both arms' `/tf`);
- QoS follows the publishers (reliable unless one is best-effort, transient-local when all are);
  the last messages of a transient-local topic (`/teleop/intervention`) are kept and re-sent to a
  client that subscribes later, as a latched topic would give them.
ROS's own `/tf`, `/tf_static` and `robot_description` topics (a real install's
robot_state_publisher) are not forwarded: the view serves its own, from the same URDF.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from teleop_flywheel.core.topics import DIAGNOSTICS, camera_name, normalize_namespace, strip_namespace
from teleop_flywheel.recording.mcap import msgdefs
from teleop_flywheel.ros.nodes.common import message_class
from teleop_flywheel.ros.session.foxglove.arms3d import DESCRIPTION_TOPIC, ArmScene, arm_of

NOT_FORWARDED = {"/rosout", "/parameter_events", "/tf", "/tf_static"}
DISCOVERY_PERIOD_S = 0.5


def forwarded(topic: str, namespace: str) -> bool:
    """Is a graph topic part of the rig the view serves?"""
    if topic in NOT_FORWARDED or topic.endswith("/robot_description") or "/_" in topic:
        return False
    if not namespace:
        return True
    return topic.startswith(namespace + "/") or topic == DIAGNOSTICS


@dataclass
class _Stream:
    """One forwarded ROS topic: its Foxglove channel and (while wanted) its ROS subscription."""

    topic: str
    type_name: str
    msg_class: Any
    channel: Any
    qos: Any
    latched: bool
    role: str | None
    subscription: Any = None
    clients: set[int] = field(default_factory=set)
    recent: deque[tuple[bytes, int]] = field(default_factory=lambda: deque(maxlen=20))


class LiveView:
    """The view's node and server; `close()` ends both."""

    def __init__(self, context: Any = None, namespace: str = "", host: str = "127.0.0.1", port: int = 8765) -> None:
        import foxglove
        import rclpy
        from foxglove.websocket import ServerListener

        self.namespace = normalize_namespace(namespace)
        self.node = rclpy.create_node("foxglove_view", namespace=self.namespace or "/", context=context,
                                      start_parameter_services=False)
        self.fox = foxglove.Context()
        self.scene = ArmScene(self.fox)  # frames namespace-free, like the topics it serves
        self.streams: dict[str, _Stream] = {}  # by ROS topic
        self.skipped: dict[str, str] = {}
        self._lock = threading.Lock()
        view = self

        class Listener(ServerListener):
            def on_subscribe(self, client: Any, channel: Any) -> None:
                view._wanted(channel.topic, client.id, True)

            def on_unsubscribe(self, client: Any, channel: Any) -> None:
                view._wanted(channel.topic, client.id, False)

        self.server = foxglove.start_server(
            name=f"teleop_flywheel live view{' ' + self.namespace if self.namespace else ''}",
            host=host,
            port=port,
            server_listener=Listener(),
            context=self.fox,
        )
        self.scene.send_description()
        self._discover()
        self._timer = self.node.create_timer(DISCOVERY_PERIOD_S, self._tick)

    @property
    def port(self) -> int:
        return int(self.server.port)

    @property
    def cameras(self) -> list[str]:
        return sorted({name for s in self.streams.values() if (name := camera_name(self._served_name(s.topic)))})

    def _served_name(self, topic: str) -> str:
        return strip_namespace(topic, self.namespace) if self.namespace else topic

    # -- discovery and subscriptions (executor thread) -------------------------------------------
    def _discover(self) -> None:
        from foxglove import Channel, Schema

        for topic, types in self.node.get_topic_names_and_types():
            if topic in self.streams or topic in self.skipped or not forwarded(topic, self.namespace):
                continue
            offered = self.node.get_publishers_info_by_topic(topic)
            if not offered:
                continue
            try:
                definition = msgdefs.definition(types[0])
                msg_class = message_class(definition.type_name)
            except (ImportError, AttributeError, ValueError, msgdefs.DefinitionNotFoundError) as exc:
                self.skipped[topic] = str(exc)
                self.node.get_logger().warning(f"not serving {topic} ({types[0]}): {exc}")
                continue
            qos, latched = _qos_for(offered)
            channel = Channel(self._served_name(topic), schema=Schema(name=definition.type_name, encoding="ros2msg",
                                                                       data=definition.text.encode()),
                              message_encoding="cdr", context=self.fox)
            with self._lock:
                self.streams[topic] = _Stream(topic, definition.type_name, msg_class, channel, qos, latched,
                                              arm_of(topic, self.namespace))

    def _tick(self) -> None:
        self._discover()
        with self._lock:
            streams = list(self.streams.values())
        for stream in streams:
            want = bool(stream.clients) or stream.role is not None
            if want and stream.subscription is None:
                stream.subscription = self.node.create_subscription(
                    stream.msg_class, stream.topic, lambda data, s=stream: self._on_message(s, data), stream.qos,
                    raw=True)
            elif not want and stream.subscription is not None:
                self.node.destroy_subscription(stream.subscription)
                stream.subscription = None
        self.scene.keep_description()

    def _on_message(self, stream: _Stream, data: bytes) -> None:
        now = time.time_ns()
        stream.channel.log(data, log_time=now)
        if stream.latched:
            stream.recent.append((data, now))
        if stream.role is not None:
            with contextlib.suppress(ValueError):  # a malformed joint state: forwarded as it is, no transforms
                self.scene.on_joint_state(stream.role, data, now)

    # -- Foxglove clients (server threads) --------------------------------------------------------
    def _wanted(self, served: str, client: int, subscribed: bool) -> None:
        if served == DESCRIPTION_TOPIC and subscribed:
            threading.Thread(target=self.scene.send_description, daemon=True).start()
            return
        with self._lock:
            stream = next((s for s in self.streams.values() if self._served_name(s.topic) == served), None)
            if stream is None:
                return
            (stream.clients.add if subscribed else stream.clients.discard)(client)
            backlog = list(stream.recent) if subscribed and stream.latched else []
        for data, log_time in backlog:  # a latched topic's last messages, for the newcomer
            stream.channel.log(data, log_time=log_time)

    def close(self) -> None:
        self.server.stop()
        self.node.destroy_node()


def _qos_for(offered: list[Any]) -> tuple[Any, bool]:
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    reliable = all(e.qos_profile.reliability == ReliabilityPolicy.RELIABLE for e in offered)
    latched = all(e.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for e in offered)
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=20 if latched else 10,
                      reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE), latched


# -- CLI --------------------------------------------------------------------------------------------

