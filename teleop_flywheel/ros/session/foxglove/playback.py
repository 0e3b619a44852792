"""A bag served over the Foxglove WebSocket protocol (foxglove-sdk's server) with ranged playback:
the Foxglove app's play, pause, speed and seek controls drive a `Player`, and at the end of the data
every client is told `Ended` (its player stops waiting).

Besides the bag's own channels it serves the 3D scene of `arms3d.ArmScene`: the URDF on
`/robot_description` and both arms' frame transforms on `/tf`, computed from the recorded joint
states. A bag recorded under a rig namespace is served with the namespace stripped from its topic
names (as the data engine reads it), so the shipped layout fits every rig. Messages are forwarded
as the CDR bytes stored in the bag, with their stored `log_time`.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any

import foxglove
from foxglove import Channel, Schema
from foxglove.websocket import (
    Capability,
    PlaybackCommand,
    PlaybackControlRequest,
    PlaybackState,
    PlaybackStatus,
    ServerListener,
)

from teleop_flywheel.core.episode import METADATA_RECORD
from teleop_flywheel.core.topics import normalize_namespace, strip_namespace
from teleop_flywheel.recording.mcap.exceptions import BagReadError, CdrError
from teleop_flywheel.recording.mcap.player import BagSource, Player
from teleop_flywheel.recording.mcap.reader import RawMessage
from teleop_flywheel.ros.session.foxglove.arms3d import DESCRIPTION_TOPIC, ArmScene, arm_of

TIME_EVERY_NS = 50_000_000  # how often the clients' clocks (and the kept URDF) follow the player


@dataclass
class FoxgloveReplay:
    """A running Foxglove replay. Holds the SDK context, channels and 3D scene: the SDK detaches
    channels whose Python objects are collected, so they live exactly as long as this."""

    server: Any
    player: Player
    thread: threading.Thread
    context: Any
    channels: dict[int, Any]
    scene: ArmScene

    @property
    def port(self) -> int:
        return int(self.server.port)

    def stop(self) -> None:
        self.player.stop()
        self.thread.join(2)
        self.server.stop()


def recorded_namespace(source: BagSource) -> str:
    """The rig namespace a bag was recorded under ("" if none, or an older bag)."""
    try:
        record = source.metadata().get(METADATA_RECORD) or {}
        return normalize_namespace(str(record.get("namespace", "")))
    except (BagReadError, ValueError, OSError):
        return ""


class _Stage:
    """What the bag looks like to Foxglove: its channels (namespace-free) and the 3D scene fed from
    its joint states. `emit` is the player's callback."""

    def __init__(self, source: BagSource, context: Any) -> None:
        self.source = source
        self.context = context
        self.namespace = recorded_namespace(source)
        self.scene = ArmScene(context)  # frames namespace-free, like the topics served: the layout fits any rig
        self.arms = {cid: role for cid, ch in source.channels.items() if (role := arm_of(ch.topic, self.namespace))}
        self.channels: dict[int, Any] = {}

    def open_channels(self) -> None:
        """Made after the server exists, so that it advertises them to every client."""
        for cid, ch in self.source.channels.items():
            self.channels[cid] = Channel(
                strip_namespace(ch.topic, self.namespace) if self.namespace else ch.topic,
                schema=Schema(name=ch.schema_name, encoding=ch.schema_encoding, data=ch.schema_data),
                message_encoding=ch.message_encoding,
                context=self.context,
            )

    def emit(self, m: RawMessage) -> None:
        self.channels[m.channel_id].log(m.data, log_time=m.log_time)
        role = self.arms.get(m.channel_id)
        if role is not None:
            # a damaged joint state: its own channel still carries it; no transforms
            with contextlib.suppress(CdrError):
                self.scene.on_joint_state(role, m.data, m.log_time)


class _Controls(ServerListener):
    """The app's side: playback requests drive the player; its time and its end reach every client.
    The player (made with this object's callbacks) is given right after, before the server starts."""

    player: Player

    def __init__(self, stage: _Stage) -> None:
        self.stage = stage
        self.server: Any = None
        self._last_time = 0

    def state(self, request_id: str | None, did_seek: bool = False) -> PlaybackState:
        player = self.player
        if player.ended:
            status = PlaybackStatus.Ended
        else:
            status = PlaybackStatus.Playing if player.playing else PlaybackStatus.Paused
        return PlaybackState(status=status, current_time=player.position_ns, playback_speed=player.speed,
                             did_seek=did_seek, request_id=request_id)

    def on_subscribe(self, client: object, channel: Any) -> None:
        if channel.topic == DESCRIPTION_TOPIC:  # not latched: each new subscriber needs it once
            threading.Thread(target=self.stage.scene.send_description, args=(self.player.position_ns,),
                             daemon=True).start()

    def on_unsubscribe(self, client: object, channel: object) -> None:
        pass

    def on_playback_control_request(self, request: PlaybackControlRequest) -> PlaybackState:
        player = self.player
        seek = request.seek_time
        if seek is not None:
            player.seek(seek)
        if request.playback_command == PlaybackCommand.Play:
            player.play(request.playback_speed)
        else:
            player.pause()
        return self.state(request.request_id, did_seek=seek is not None)

    def on_time(self, t: int) -> None:
        if self.server is not None and t - self._last_time >= TIME_EVERY_NS:
            self._last_time = t
            self.server.broadcast_time(t)
            self.stage.scene.keep_description(t)

    def on_end(self) -> None:  # tell every client the data is over (its player stops waiting)
        if self.server is not None:
            self.server.broadcast_time(self.player.position_ns)
            self.server.broadcast_playback_state(self.state(None))

def serve_foxglove(
    source: BagSource, host: str = "127.0.0.1", port: int = 8765, speed: float = 1.0,
    loop: bool = False, start_paused: bool = False,
) -> FoxgloveReplay:
    """Start a Foxglove WebSocket server playing `source` in a background thread."""
    context = foxglove.Context()
    stage = _Stage(source, context)
    controls = _Controls(stage)
    controls.player = player = Player(source, stage.emit, speed=speed, playing=not start_paused, loop=loop,
                                      on_time=controls.on_time, on_end=controls.on_end)
    controls.server = server = foxglove.start_server(
        name=f"teleop_flywheel replay {source.path.name}",
        host=host,
        port=port,
        capabilities=[Capability.PlaybackControl, Capability.Time],
        playback_time_range=(source.start_ns, source.end_ns),
        server_listener=controls,
        context=context,
    )
    stage.open_channels()
    thread = threading.Thread(target=player.run, name="foxglove-replay", daemon=True)
    thread.start()
    return FoxgloveReplay(server, player, thread, context, stage.channels, stage.scene)
