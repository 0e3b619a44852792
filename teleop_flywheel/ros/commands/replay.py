"""`teleop-flywheel replay BAG`: play a recorded episode to Foxglove or back onto the ROS graph.

`--foxglove` serves the bag over the Foxglove WebSocket protocol (foxglove-sdk's server, bound to
127.0.0.1) with ranged playback: the Foxglove app's play, pause, speed and seek controls drive a
`Player` here, and at the end of the data every client is told `Ended` (its player stops waiting).
Besides the bag's own channels it serves the 3D scene of `arms3d.ArmScene`: the URDF on
`/robot_description` and both arms' frame transforms on `/tf`, computed from the recorded joint
states. A bag recorded under a rig namespace is served with the namespace stripped from its topic
names (as the data engine reads it), so the shipped layout fits every rig.
`--ros` republishes every message, byte for byte, onto the ROS graph (`republish.py`).

Messages are forwarded as the CDR bytes stored in the bag — nothing is decoded but the joint
states the 3D scene needs — with their stored `log_time` (receive time, wall clock).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teleop_flywheel.core.episode import METADATA_RECORD
from teleop_flywheel.core.errors import FlywheelError, UsageError
from teleop_flywheel.core.topics import camera_name, normalize_namespace, strip_namespace
from teleop_flywheel.recording.mcap.exceptions import BagReadError, CdrError
from teleop_flywheel.recording.mcap.reader import IndexedBag, RawMessage
from teleop_flywheel.ros.session.foxglove.arms3d import DESCRIPTION_TOPIC, ArmScene, arm_of
from teleop_flywheel.ros.session.foxglove.layout import write_layout


class ReplayError(FlywheelError, RuntimeError):
    """A bag cannot be replayed; the message names the file and the reason."""


class BagSource(IndexedBag):
    """Indexed, seekable access to one bag's raw messages in log-time order (`recording.reader`)."""

    def __init__(self, bag: Path) -> None:
        try:
            super().__init__(bag)
        except BagReadError as exc:
            raise ReplayError(str(exc)) from exc


class Player:
    """Paces a BagSource in real time (× speed) with play, pause and seek.

    Thread-safe controls; `run()` blocks until the bag ends (or forever with loop=True)
    or `stop()` is called. `emit(msg)` is called for each message when its time comes.
    """

    def __init__(
        self,
        source: BagSource,
        emit: Callable[[RawMessage], None],
        speed: float = 1.0,
        playing: bool = True,
        loop: bool = False,
        on_time: Callable[[int], None] | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        if speed <= 0:
            raise ValueError(f"playback rate must be positive, got {speed}")
        self.source = source
        self._emit = emit
        self._on_time = on_time
        self._on_end = on_end
        self._lock = threading.Condition()
        self._speed = speed
        self._playing = playing
        self._position = source.start_ns
        self._seek_to: int | None = None
        self._stopped = False
        self.loop = loop
        self.ended = False
        self.emitted = 0

    # -- controls -----------------------------------------------------------------
    def play(self, speed: float | None = None) -> None:
        """Play (at `speed` if given); after the end, from the start again unless a seek is pending."""
        with self._lock:
            if speed is not None and speed > 0:
                self._speed = speed
            if self.ended and self._seek_to is None:
                self._seek_to = self._position = self.source.start_ns
            self._playing = True
            self.ended = False
            self._lock.notify_all()

    def pause(self) -> None:
        with self._lock:
            self._playing = False
            self._lock.notify_all()

    def seek(self, time_ns: int) -> None:
        with self._lock:
            self._seek_to = min(max(int(time_ns), self.source.start_ns), self.source.end_ns)
            self._position = self._seek_to
            self.ended = False
            self._lock.notify_all()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._lock.notify_all()

    @property
    def position_ns(self) -> int:
        with self._lock:
            return self._position

    @property
    def playing(self) -> bool:
        with self._lock:
            return self._playing and not self.ended

    @property
    def speed(self) -> float:
        with self._lock:
            return self._speed

    # -- loop ---------------------------------------------------------------------
    def run(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
                start = self._seek_to if self._seek_to is not None else self._position
                self._seek_to = None
            finished = self._play_from(start)
            if finished:
                with self._lock:
                    if self.loop and not self._stopped:
                        self._position = self.source.start_ns
                        continue
                    self.ended = True
                    self._playing = False
                if self._on_end is not None:  # outside the lock: it reads the player's state
                    self._on_end()
                with self._lock:
                    while not self._stopped and self.ended:
                        self._lock.wait(0.1)
                    if self._stopped:
                        return

    def _play_from(self, start_ns: int) -> bool:
        """Emit from start_ns; True when the bag ran out, False when interrupted by a seek/stop."""
        anchor_bag = start_ns
        anchor_wall = time.monotonic_ns()
        anchor_speed = self.speed
        for msg in self.source.messages(start_ns):
            while True:
                with self._lock:
                    if self._stopped or self._seek_to is not None:
                        return False
                    if not self._playing:
                        self._lock.wait(0.05)
                        # Resume pacing from where playback stands now.
                        anchor_bag, anchor_wall, anchor_speed = self._position, time.monotonic_ns(), self._speed
                        continue
                    if self._speed != anchor_speed:
                        anchor_bag, anchor_wall, anchor_speed = self._position, time.monotonic_ns(), self._speed
                due_wall = anchor_wall + (msg.log_time - anchor_bag) / anchor_speed
                wait_s = (due_wall - time.monotonic_ns()) / 1e9
                if wait_s <= 0:
                    break
                with self._lock:
                    self._lock.wait(min(wait_s, 0.05))
            self._emit(msg)
            self.emitted += 1
            with self._lock:
                self._position = msg.log_time
            if self._on_time is not None:
                self._on_time(msg.log_time)
        return True


# -- Foxglove ---------------------------------------------------------------------------

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


def serve_foxglove(
    source: BagSource, host: str = "127.0.0.1", port: int = 8765, speed: float = 1.0,
    loop: bool = False, start_paused: bool = False,
) -> FoxgloveReplay:
    """Start a Foxglove WebSocket server playing `source` in a background thread."""
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

    context = foxglove.Context()
    channels: dict[int, Any] = {}
    holder: dict[str, Any] = {}
    namespace = recorded_namespace(source)
    scene = ArmScene(context)  # frames namespace-free, like the topics served: the layout fits any rig
    arms = {cid: role for cid, ch in source.channels.items() if (role := arm_of(ch.topic, namespace))}

    def state(request_id: str | None, did_seek: bool = False) -> PlaybackState:
        if player.ended:
            status = PlaybackStatus.Ended
        else:
            status = PlaybackStatus.Playing if player.playing else PlaybackStatus.Paused
        return PlaybackState(status=status, current_time=player.position_ns, playback_speed=player.speed,
                             did_seek=did_seek, request_id=request_id)

    class Listener(ServerListener):
        def on_subscribe(self, client: object, channel: Any) -> None:
            if channel.topic == DESCRIPTION_TOPIC:  # not latched: each new subscriber needs it once
                threading.Thread(target=scene.send_description, args=(player.position_ns,), daemon=True).start()

        def on_unsubscribe(self, client: object, channel: object) -> None:
            pass

        def on_playback_control_request(self, request: PlaybackControlRequest) -> PlaybackState:
            seek = request.seek_time
            if seek is not None:
                player.seek(seek)
            if request.playback_command == PlaybackCommand.Play:
                player.play(request.playback_speed)
            else:
                player.pause()
            return state(request.request_id, did_seek=seek is not None)

    last_time = [0]

    def on_time(t: int) -> None:
        server = holder.get("server")
        if server is not None and t - last_time[0] >= 50_000_000:
            last_time[0] = t
            server.broadcast_time(t)
            scene.keep_description(t)

    def on_end() -> None:  # tell every client the data is over (its player stops waiting)
        server = holder.get("server")
        if server is not None:
            server.broadcast_time(player.position_ns)
            server.broadcast_playback_state(state(None))

    def emit(m: RawMessage) -> None:
        channels[m.channel_id].log(m.data, log_time=m.log_time)
        role = arms.get(m.channel_id)
        if role is not None:
            # a damaged joint state: its own channel still carries it; no transforms
            with contextlib.suppress(CdrError):
                scene.on_joint_state(role, m.data, m.log_time)

    player = Player(source, emit, speed=speed, playing=not start_paused, loop=loop, on_time=on_time, on_end=on_end)
    server = foxglove.start_server(
        name=f"teleop_flywheel replay {source.path.name}",
        host=host,
        port=port,
        capabilities=[Capability.PlaybackControl, Capability.Time],
        playback_time_range=(source.start_ns, source.end_ns),
        server_listener=Listener(),
        context=context,
    )
    holder["server"] = server
    # Channels are made after the server exists so that it advertises them to every client.
    for cid, ch in source.channels.items():
        channels[cid] = Channel(
            strip_namespace(ch.topic, namespace) if namespace else ch.topic,
            schema=Schema(name=ch.schema_name, encoding=ch.schema_encoding, data=ch.schema_data),
            message_encoding=ch.message_encoding,
            context=context,
        )
    thread = threading.Thread(target=player.run, name="foxglove-replay", daemon=True)
    thread.start()
    return FoxgloveReplay(server, player, thread, context, channels, scene)


# -- CLI --------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    from teleop_flywheel.ros.commands.replay_ros import WaitPolicy, republish_ros

    if not args.foxglove and not args.ros:
        raise UsageError("nothing to replay to", where="the command line", fix="choose --foxglove and/or --ros")
    if args.rate <= 0:
        raise UsageError(f"--rate must be positive, got {args.rate}", fix="1.0 is the recorded speed")
    source = BagSource(args.bag)  # ReplayError: one line on stderr, exit 2 (cli.py)
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

