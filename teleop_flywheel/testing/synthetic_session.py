"""Realistic episode bags without ROS or hardware: simulated arm dynamics, synthetic camera, seed faults.

Why: the validator and the converter must be tested on bags that look exactly like the
recorder's (same `BagWriter`, same topics, same stamp rules, same metadata), including the
failures the seeds describe — and a newcomer can make a session to convert with no arm.

The session, offline (simulated time, no threads): a scripted human moves the leader (smooth
sinusoids, quantised to servo steps); the command sent = α·human + (1−α)·policy, quantised;
the follower follows it with a first-order lag (the simulated servo dynamics, τ = 50 ms);
`/teleop/authority` carries [alpha, mode, intervention_id, trigger]; cameras render the follower
(`camera.synthetic.draw_arm`) with the true capture time in the pixels (`camera.timecode`) and
deliver after a pipeline latency. Receive times (`log_time`) are wall clock through the
episode's `ClockMapping`; `publish_time` = source stamp, as the recorder writes them.

Faults (`SessionSpec`): `camera_stall` (no frames for a window), `dead_air` (the human lets go:
bit-identical commands for a window), `camera_stamp_offset_ms` (header stamp = capture + offset:
the restarted camera), outcome unset, an unlabelled intervention, extra cameras (schema drift),
`truncate_bag` (cut mid-chunk, as a crash leaves it) and `corrupt_chunk` (bytes flipped inside
one chunk).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import yaml
from mcap.opcode import Opcode

from teleop_flywheel.core.calibration import sim_calibration_file
from teleop_flywheel.core.clock import ClockMapping
from teleop_flywheel.core.episode import CALIBRATION_ROLES, EpisodeMeta, Intervention
from teleop_flywheel.core.labels import mode_code, trigger_code
from teleop_flywheel.core.so101 import JOINT_NAMES, RAD_PER_STEP
from teleop_flywheel.core.topics import (
    AUTHORITY,
    FOLLOWER_COMMAND,
    FOLLOWER_STATE,
    INTERVENTION,
    LEADER_STATE,
    POLICY_COMMAND,
    camera_image,
)
from teleop_flywheel.hw.camera import timecode
from teleop_flywheel.hw.camera.synthetic import _background, draw_arm
from teleop_flywheel.recording.cdr import compressed_image_cdr, joint_state_cdr, string_cdr
from teleop_flywheel.recording.scan import record_spans
from teleop_flywheel.recording.writer import BagWriter

AUTHORITY_NAMES = ["alpha", "mode", "intervention_id", "trigger"]
JOINT_STATE = "sensor_msgs/msg/JointState"
WALL0_NS = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z
MONO0_NS = 1_000 * 10**9


@dataclass
class SessionSpec:
    duration_s: float = 6.0
    joint_hz: float = 100.0
    cameras: tuple[str, ...] = ("wrist",)
    width: int = 320
    height: int = 240
    camera_fps: float = 30.0
    jpeg_quality: int = 90
    camera_latency_ms: float = 8.0
    joint_latency_ms: float = 1.0
    camera_stamp_offset_ms: float = 0.0
    camera_stall: tuple[float, float] | None = None  # (start s, length s) for the first camera
    dead_air: tuple[float, float] | None = None  # (start s, length s): human holds still
    interventions: tuple[tuple[float, float, str | None], ...] = ()  # policy session takeovers
    session_kind: str = "teleop"  # "teleop" (α = 1) or "policy" (α = 0 outside takeovers)
    outcome: str = "success"
    ptp_offset_ns: int | None = None
    task: str = "pick the brick"
    operator: str = "ana"
    seed: int = 0
    ramp_s: float = 0.15
    tau_s: float = 0.05
    chunk_size: int = 256 * 1024
    compression: str = "zstd"
    truncate_bag: float | None = None  # keep this fraction of the .mcap bytes (cut mid-chunk)
    corrupt_chunk: bool = False
    policy_checkpoint: str = "ckpt-sim"
    protocol_hash: str = ""  # evaluation trials (teleop_flywheel.evaluation.protocol)
    condition: str = ""
    failure_label: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    calibration: dict[str, Any] | None = None  # EpisodeMeta.calibration; None: the simulated arms' files by role


# -- the simulated session ---------------------------------------------------------------------

def _quantise(rad: np.ndarray) -> np.ndarray:
    return np.round(rad / RAD_PER_STEP) * RAD_PER_STEP


def _alpha(t: np.ndarray, spec: SessionSpec) -> np.ndarray:
    if spec.session_kind == "teleop":
        return np.ones_like(t)
    a = np.zeros_like(t)
    for start, end, _ in spec.interventions:
        up = np.clip((t - start) / spec.ramp_s, 0, 1)
        down = np.clip((end - t) / spec.ramp_s, 0, 1)
        a = np.maximum(a, 0.5 - 0.5 * np.cos(math.pi * np.minimum(up, down)))
    return a


@dataclass
class SessionTruth:
    """What the simulation knows (tests compare the bag and the dataset with it)."""

    bag: Path
    joint_stamps_ns: np.ndarray
    command: np.ndarray
    follower: np.ndarray
    camera_capture_ns: dict[str, np.ndarray]
    camera_stamp_ns: dict[str, np.ndarray]


def write_session(bag_dir: str | Path, spec: SessionSpec | None = None) -> SessionTruth:
    """Simulate one episode and record it with the project's `BagWriter`; apply file faults."""
    spec = spec or SessionSpec()
    rng = np.random.default_rng(spec.seed)
    bag_dir = Path(bag_dir)
    n = int(spec.duration_s * spec.joint_hz)
    dt = 1.0 / spec.joint_hz
    t = np.arange(n) * dt
    jitter = rng.normal(0, 0.2e-3, n).clip(-0.4e-3, 0.4e-3)
    stamps = MONO0_NS + ((t + jitter) * 1e9).astype(np.int64)

    phase = rng.uniform(0, 2 * math.pi, 6)
    amp = np.array([0.6, 0.4, 0.5, 0.4, 0.8, 0.5])
    center = np.array([0.0, -0.3, 0.4, 0.2, 0.0, 0.6])
    human_t = t.copy()
    if spec.dead_air is not None:  # the human's hand is off the leader: it holds still
        a, length = spec.dead_air
        held = (t >= a) & (t < a + length)
        human_t = np.where(held, a, t)
        human_t = np.where(t >= a + length, t - length, human_t)
    human = _quantise(center + amp * np.sin(0.5 * human_t[:, None] * (1 + np.arange(6) * 0.15) + phase))
    policy = _quantise(center + 0.8 * amp * np.sin(0.4 * t[:, None] + phase + 0.3))
    alpha = _alpha(t, spec)
    command = _quantise(alpha[:, None] * human + (1 - alpha[:, None]) * policy)
    follower = np.empty_like(command)
    k = 1 - math.exp(-dt / spec.tau_s)
    state = command[0].copy()
    for i in range(n):  # state read at tick i, then command i sent
        follower[i] = state
        state = state + (command[i] - state) * k
    follower = _quantise(follower)

    interv_id = np.zeros(n)
    trig = np.zeros(n)
    interventions: list[Intervention] = []
    for j, (start, end, label) in enumerate(spec.interventions, start=1):
        inside = (t >= start) & (t < end)
        interv_id[inside] = j
        trig[inside] = trigger_code(label)
        interventions.append(Intervention(j, int(MONO0_NS + start * 1e9), int(MONO0_NS + end * 1e9), label))
    mode = np.full(n, mode_code("teleop" if spec.session_kind == "teleop" else "policy"), float)
    authority = np.stack([alpha, mode, interv_id, trig], axis=1)

    mapping = ClockMapping(MONO0_NS, WALL0_NS, 2_000)
    wall = mapping.offset_ns

    def joint_log(lat_ms: float) -> np.ndarray:
        lat = np.abs(rng.normal(lat_ms, 0.2, n)) * 1e6
        return stamps + lat.astype(np.int64) + wall

    records: list[tuple[int, str, int, bytes]] = []
    names = list(JOINT_NAMES)
    for topic, values, frame in ((FOLLOWER_STATE, follower, ""), (FOLLOWER_COMMAND, command, ""),
                                 (LEADER_STATE, human, ""), (POLICY_COMMAND, policy, spec.policy_checkpoint)):
        logs = joint_log(spec.joint_latency_ms)
        records += [(int(logs[i]), topic, int(stamps[i]), joint_state_cdr(int(stamps[i]), names, values[i], frame))
                    for i in range(n)]
    logs = joint_log(spec.joint_latency_ms)
    records += [(int(logs[i]), AUTHORITY, int(stamps[i]),
                 joint_state_cdr(int(stamps[i]), AUTHORITY_NAMES, authority[i])) for i in range(n)]
    for iv in interventions:
        for event_ns, end_ns in ((iv.start_ns, None), (iv.end_ns, iv.end_ns)):  # the start event, then the end event
            if event_ns is None:
                continue
            text = json.dumps({"id": iv.id, "start_ns": iv.start_ns, "end_ns": end_ns, "trigger": iv.trigger})
            records.append((int(event_ns + wall), INTERVENTION, int(event_ns), string_cdr(text)))

    captures: dict[str, np.ndarray] = {}
    cam_stamps: dict[str, np.ndarray] = {}
    background = _background(spec.width, spec.height)
    top = timecode.strip_height(spec.width, spec.height)
    period = 1.0 / spec.camera_fps
    for c, cam in enumerate(spec.cameras):
        ct = np.arange(int(spec.duration_s / period)) * period + 0.3 * period * (c + 1)
        ct = ct[ct < t[-1]]
        if spec.camera_stall is not None and c == 0:
            a, length = spec.camera_stall
            ct = ct[(ct < a) | (ct >= a + length)]
        cap_ns = MONO0_NS + (ct * 1e9).astype(np.int64) + rng.integers(-50_000, 50_000, len(ct))
        lat = np.abs(rng.normal(spec.camera_latency_ms, 1.5, len(ct))) * 1e6
        # As a recorder stops: frames still in the pipeline when the last joint sample arrived are not in the bag.
        arrived = cap_ns + lat.astype(np.int64) <= stamps[-1] + int(spec.joint_latency_ms * 1e6)
        ct, cap_ns, lat = ct[arrived], cap_ns[arrived], lat[arrived]
        stamp_ns = cap_ns + int(spec.camera_stamp_offset_ms * 1e6)
        logs_c = cap_ns + lat.astype(np.int64) + wall
        idx = np.searchsorted(stamps, cap_ns, side="right") - 1
        for i in range(len(ct)):
            image = background.copy()
            draw_arm(image, dict(zip(names, follower[max(idx[i], 0)])), top=top)
            timecode.encode(image, int(cap_ns[i]))
            ok, jpeg = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, spec.jpeg_quality])
            if not ok:
                raise RuntimeError(f"JPEG encode failed for camera {cam}")
            records.append((int(logs_c[i]), camera_image(cam), int(stamp_ns[i]),
                            compressed_image_cdr(int(stamp_ns[i]), jpeg.tobytes(), cam)))
        captures[cam], cam_stamps[cam] = cap_ns, stamp_ns

    records.sort(key=lambda r: r[0])
    calibration = spec.calibration if spec.calibration is not None else {
        role: yaml.safe_load(sim_calibration_file(role).read_text()) for role in CALIBRATION_ROLES}
    topics = [FOLLOWER_STATE, FOLLOWER_COMMAND, LEADER_STATE, POLICY_COMMAND, AUTHORITY, INTERVENTION] + \
        [camera_image(cam) for cam in spec.cameras]
    meta = EpisodeMeta(
        episode_name=bag_dir.name, task=spec.task, operator=spec.operator, rig_id="sim-rig",
        session_kind=spec.session_kind, software_version="sim", policy_checkpoint=spec.policy_checkpoint,
        calibration=calibration, cameras=list(spec.cameras), topics=topics, outcome=spec.outcome,
        attempts=1 if spec.outcome != "unset" else None, interventions=interventions,
        clock_start=mapping.to_dict(),
        clock_end=ClockMapping(int(stamps[-1]), int(stamps[-1]) + wall, 2_000).to_dict(),
        ptp_offset_ns=spec.ptp_offset_ns, started_mono_ns=int(stamps[0]), stopped_mono_ns=int(stamps[-1]),
        protocol_hash=spec.protocol_hash, condition=spec.condition, failure_label=spec.failure_label,
        extra=dict(spec.extra))
    with BagWriter(bag_dir, episode=meta, chunk_size=spec.chunk_size, compression=spec.compression,
                   fsync=False, max_chunk_age_s=1e6) as bag:
        for topic in topics:
            if topic == INTERVENTION:
                bag.add_topic(topic, "std_msgs/msg/String")
            elif topic.startswith("/cameras/"):
                bag.add_topic(topic, "sensor_msgs/msg/CompressedImage")
            else:
                bag.add_topic(topic, JOINT_STATE)
        for seq, (log, topic, pub, data) in enumerate(records):
            bag.write(topic, data, log_time_ns=log, publish_time_ns=pub, sequence=seq + 1)
    mcap = bag.mcap_path
    if spec.corrupt_chunk:
        corrupt_one_chunk(mcap)
    if spec.truncate_bag is not None:
        size = mcap.stat().st_size
        with open(mcap, "r+b") as f:
            f.truncate(int(size * spec.truncate_bag))
    return SessionTruth(bag_dir, stamps, command, follower, captures, cam_stamps)


def corrupt_one_chunk(mcap: Path) -> int:
    """Flip bytes in the middle of the middle chunk's compressed payload; returns its offset."""
    chunks = record_spans(mcap, Opcode.CHUNK)
    if not chunks:
        raise ValueError(f"{mcap}: no chunks to corrupt")
    pos, length = chunks[len(chunks) // 2]
    with open(mcap, "r+b") as f:
        f.seek(pos + length // 2)
        block = bytearray(f.read(64))
        f.seek(pos + length // 2)
        f.write(bytes(b ^ 0xA5 for b in block))
    return pos
