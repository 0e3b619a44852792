"""Realistic episode bags without ROS or hardware: simulated arm dynamics, synthetic camera, seed faults.

Why: the validator and the converter must be tested on bags that look exactly like the
recorder's (same `BagWriter`, same topics, same stamp rules, same metadata), including the
failures the seeds describe — and a newcomer can make a session to convert with no arm.

The session, offline (simulated time, no threads): a scripted human moves the leader (smooth
sinusoids, quantised to servo steps); the command sent = α·human + (1−α)·policy, quantised;
the follower follows it with a first-order lag (the simulated servo dynamics, τ = 50 ms), optionally
no faster than a top speed (`follower_max_speed`), its gripper closing on an object (`grip_object`)
and slowed and load-capped by a torque limit (`gripper_torque`: a grasp held at the force limit,
as the arm driver holds one); a leader shaken faster than the follower can turn (`human_fast`);
`/teleop/authority` carries [alpha, mode, intervention_id, trigger]; cameras render the follower
(`camera.synthetic.draw_arm`) with the true capture time in the pixels (`camera.timecode`) and
deliver after a pipeline latency. Receive times (`log_time`) are wall clock through the
episode's `ClockMapping`.

`SessionSpec.stamp_clock`: "ros" (default) writes what the recorder writes — header stamps in ROS
time (the monotonic capture instant + the wall−monotonic offset at that instant), `publish_time` =
the DDS send time (receive time less a transport delay, as rosbag2 records it), `stamp_clock: ros`,
intervention times in ROS time, and (monotonic, wall) `clock_samples` every second; "monotonic"
writes what it wrote before the ROS-time revision — header stamps, `publish_time` and intervention
times on CLOCK_MONOTONIC, no `stamp_clock` — the old bag readers refuse and `migrate` upgrades. A system-clock
step (`clock_step`) moves the wall clock, hence the samples, the receive times and ROS-time stamps.

Faults (`SessionSpec`): `camera_stall` (no frames for a window), `dead_air` (the human lets go:
bit-identical commands for a window), `camera_stamp_offset_ms` (header stamp = capture + offset:
the restarted camera), outcome unset, an unlabelled intervention, extra cameras (schema drift),
`truncate_bag` (cut mid-chunk, as a crash leaves it) and `corrupt_chunk` (bytes flipped inside
one chunk); `camera_publish_offset_ms` (publish_time = header stamp + offset on the cameras: a
pipeline latency rosbag2 would record, which must change nothing), `clock_step`, and
`camera_clock_skew_ms` (stamp, publish and receive times of the camera shifted together: only the
pixels tell, through the content-based camera lag). The camera draws the arm as it was at each
frame's exposure instant (the follower's samples interpolated to it), so a clean episode's true
camera lag is 0. The follower's JointState carries efforts (`effort`, on by default): its load as a
signed fraction of max torque, as the arm driver publishes Present_Load. `feedback` adds the leader's
`/leader/feedback` on the leader's ticks as the arm driver publishes it (docs/CONTRACTS.md): `off`
zeros, `gripper` the grasp rendered on the leader's gripper (goal pulled to where the follower's jaws
stopped, ceiling `FEEDBACK_CEILING`, while the follower's gripper load is at least
`FEEDBACK_GRASP_LOAD`); `feedback_stall` silences it for a window (the leader driver's publisher stuck).
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import yaml
from mcap.opcode import Opcode

from teleop_flywheel.core import frame_meta
from teleop_flywheel.core.bag_topics import (
    AUTHORITY,
    FOLLOWER_COMMAND,
    FOLLOWER_STATE,
    INTERVENTION,
    LEADER_FEEDBACK,
    LEADER_STATE,
    PEDAL_JOY,
    POLICY_COMMAND,
    camera_image,
)
from teleop_flywheel.core.calibration import sim_calibration_file
from teleop_flywheel.core.clock import ClockMapping
from teleop_flywheel.core.episode import CALIBRATION_ROLES, EpisodeMeta, Intervention
from teleop_flywheel.core.labels import mode_code, trigger_code
from teleop_flywheel.core.so101 import JOINT_NAMES, RAD_PER_STEP
from teleop_flywheel.core.task_spec import TaskSpec
from teleop_flywheel.core.topics import AUTHORITY_FIELDS
from teleop_flywheel.hw.arm.config import ArmConfig
from teleop_flywheel.hw.camera import timecode
from teleop_flywheel.hw.camera.synthetic import _background, draw_arm
from teleop_flywheel.hw.feetech.sim.servo import REACH_AMP, REACH_CENTER, Reaching
from teleop_flywheel.recording.mcap.cdr import compressed_image_cdr, joint_state_cdr, string_cdr
from teleop_flywheel.recording.mcap.scan import record_spans
from teleop_flywheel.recording.mcap.writer import BagWriter

AUTHORITY_NAMES = list(AUTHORITY_FIELDS)
JOINT_STATE = "sensor_msgs/msg/JointState"
# The arm driver's defaults: the follower gripper load that is a grasp, and the leader gripper's
# Torque_Limit while it renders one (0.1 % units) as a fraction of max torque.
FEEDBACK_GRASP_LOAD = ArmConfig().feedback_grasp_load
FEEDBACK_CEILING = ArmConfig().feedback_torque_limit / 1000
FEEDBACK_MODES = ("", "off", "gripper")  # "": not recorded (bags from before the leader rendered feedback)
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
    stamp_clock: str = "ros"  # "monotonic": a bag as recorded before the ROS-time revision (`migrate`'s input)
    camera_publish_offset_ms: float | None = None  # publish_time = header stamp + this on the cameras
    clock_step: tuple[float, float] | None = None  # (at s, ms): the system clock steps during the episode
    # The scripted human: "smooth" (slow sinusoids, periods 7–13 s) or "reach" (a hand at work:
    # minimum-jerk moves of 0.5–1 s between poses with short pauses, as in pick-and-place); or "rig":
    # the demo's motion (`_rig_motion`: the scripted policy, the simulated leader's human in
    # takeovers, the speed limit, the simulated servos with gravity).
    motion: str = "smooth"
    # Who holds the leader in the "rig" motion: "sinusoid" (the simulator's sweeping human,
    # `sim.servo.default_human`: every joint a slow sinusoid, never still — the hard case the benchmark
    # keeps) or "reach" (`_reaches`: a hand at work — point-to-point moves with pauses, the gripper
    # closing and opening on an object, as the simulated leader's own operator moves, `sim-bus`).
    rig_human: str = "sinusoid"
    # header stamp, publish and receive times of every camera message shifted together (a camera whose
    # frames are stamped when the driver got them, not when exposed: the pipeline latency looks normal)
    camera_clock_skew_ms: float = 0.0
    # Our camera node's instance id in every frame (`core.frame_meta` key "instance"; "" = none, as a foreign driver)
    camera_instance: str = ""
    effort: bool = True  # the follower's JointState.effort (load as a signed fraction of max torque)
    pedal_topic: bool = False  # record /pedal/joy (listed in the metadata) although nobody pressed the pedal
    corrections: tuple[tuple[float, float, str | None], ...] = ()  # teleop-mode correction spans (start, end, label)
    # The operator labels each takeover/correction this long after it started (0: at once). While
    # unlabelled, /teleop/authority's trigger is 0; a label after the hand-back never reaches it.
    label_delay_s: float = 0.0
    # A session of episodes: this one starts this long after the session's first (both clocks move on).
    session_time_s: float = 0.0
    rig_id: str = "sim-rig"
    # The PTP/chrony offset the recorder's probe reads at the episode's end (`extra["ptp_offset_end_ns"]`).
    ptp_offset_end_ns: int | None = None
    # The task spec the rig records under: its content and id in the metadata, and the rig's own
    # verdict of its success predicate on the final follower pose (`outcome_check`).
    task_spec: TaskSpec | None = None
    # The follower's top shaft speed, rad/s (an STS3215 turns at most ~4.7 rad/s at 12 V; None: unbounded).
    follower_max_speed: float | None = None
    # An object between the gripper's jaws (rad): closing below it the jaws stall on it and the load
    # builds to full torque while the command goes on closing — a grasp held by the force limit.
    grip_object: float | None = None
    # The gripper's torque limit (fraction of max torque), as the arm driver's grasp holds it: its load caps
    # there and its position loop slows by the same factor (the simulated servo's rule).
    gripper_torque: float = 1.0
    # (start s, length s): the human shakes the leader (±0.5 rad at 2 Hz on the five body joints, up to
    # 6.3 rad/s) — faster than the follower can turn when `follower_max_speed` is set.
    human_fast: tuple[float, float] | None = None
    feedback: str = ""  # FEEDBACK_MODES: the leader's /leader/feedback (module doc)
    feedback_stall: tuple[float, float] | None = None  # (start s, length s): no /leader/feedback in it


class _SimClock:
    """The simulated host's clocks: monotonic instants, the wall clock (with an optional step) and
    what a driver writes into header.stamp."""

    def __init__(self, spec: SessionSpec) -> None:
        if spec.stamp_clock not in ("monotonic", "ros"):
            raise ValueError(f"stamp_clock must be 'monotonic' or 'ros', got {spec.stamp_clock!r}")
        self.ros = spec.stamp_clock == "ros"
        self.mono0 = MONO0_NS + int(spec.session_time_s * 1e9)
        self.step_at = self.mono0 + int(spec.clock_step[0] * 1e9) if spec.clock_step else None
        self.step_ns = int(spec.clock_step[1] * 1e6) if spec.clock_step else 0

    def offset(self, mono: Any) -> Any:
        """wall − monotonic at monotonic instant(s) `mono`."""
        base = WALL0_NS - MONO0_NS
        if self.step_at is None:
            return base + np.zeros_like(mono) if isinstance(mono, np.ndarray) else base
        return base + np.where(np.asarray(mono) >= self.step_at, self.step_ns, 0).astype(np.int64)

    def wall(self, mono: Any) -> Any:
        return mono + self.offset(mono)

    def stamp(self, mono: Any) -> Any:
        """header.stamp for a capture at monotonic `mono`: ROS time, or the monotonic instant itself."""
        return self.wall(mono) if self.ros else mono

    def sample(self, mono: int) -> ClockMapping:
        return ClockMapping(int(mono), int(self.wall(np.int64(mono))), 2_000)

    def publish(self, log: int, stamp: int) -> int:
        """rosbag2's publish_time (the DDS send time, a little before receipt), or the header stamp."""
        return log - 150_000 if self.ros else stamp


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


def _reaches(t: np.ndarray, center: Sequence[float], amp: Sequence[float], rng: np.random.Generator,
             grasps: bool = False) -> np.ndarray:
    """The hand at work (`sim.servo.Reaching`: minimum-jerk moves with pauses, grasps) at every `t`."""
    out = np.empty((len(t), 6))
    moves = Reaching(center, amp, lambda lo, hi: float(rng.uniform(lo, hi)), grasps).until(float(t[-1]))
    for i, m in enumerate(moves):
        u = np.clip((t - m.start) / m.seconds, 0, 1)[:, None]
        end = moves[i + 1].start if i + 1 < len(moves) else math.inf
        inside = (t >= m.start) & (t < end)
        source, goal = np.array(m.source), np.array(m.goal)
        out[inside] = (source + (goal - source) * (10 * u**3 - 15 * u**4 + 6 * u**5))[inside]
    return out


# The demo's scripted policy file (`ros/commands/demo.py`: home, grasp, place, place held; every second
# move heads 0.35 rad wrong) and the speed limit every follower command passes (`max_speed_rad_s`).
RIG_WAYPOINTS = ([0.0, -0.3, 0.4, 0.2, 0.0, 0.1], [0.5, 0.1, 0.1, -0.2, 0.6, 0.8],
                 [-0.4, 0.2, -0.2, 0.3, -0.5, 0.2], [-0.75, -0.15, -0.55, -0.05, -0.85, -0.15])
RIG_MAX_SPEED = 2.0
RIG_SUBSTEPS = 5


def _rig_motion(t: np.ndarray, alpha: np.ndarray, spec: SessionSpec, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The demo's motion without its processes: the scripted policy (2 s minimum-jerk moves through
    the demo's waypoints, every second one wrong), blended with the simulator's sweeping human
    (`sim.servo.default_human`, at a random time into its session; or, with `rig_human="reach"`, a
    hand at work as the demo's leader moves: `_reaches` with grasps) where α > 0 — and the task
    spec's `clock_probe` at the reset, when it has one (the policy plays it; in a teleop session it
    is added to the leader's command) — rate-limited by the
    arm driver's `CommandGuard` (2 rad/s), and the follower as the simulated STS3215s move it (top
    speed, acceleration, the position loop, gravity sag) — the motion the rig really produces:
    smooth, speed-limited moves whose corners carry the timing. The start pose varies a little
    (where the previous reset left the arm). Returns human, policy, command, follower (radians)."""
    from teleop_flywheel.core.safety import CommandGuard, JointLimits
    from teleop_flywheel.hw.feetech.sim.servo import SERVO_IDS, Servo, default_human, gravity_load
    from teleop_flywheel.policies.scripted import ScriptedPolicy

    n, dt = len(t), float(t[1] - t[0])
    mid = 2048.0
    probe = spec.task_spec.clock_probe if spec.task_spec is not None else None
    probe_joint = JOINT_NAMES.index(probe.joint) if probe is not None else 0
    policy_run = ScriptedPolicy("scripted-v0", [list(w) for w in RIG_WAYPOINTS], 2.0, 2, 0.35, probe)
    start = np.array(RIG_WAYPOINTS[0]) + rng.normal(0, 0.03, 6)
    if spec.rig_human == "reach":
        human = _reaches(t, REACH_CENTER, REACH_AMP, rng, grasps=True)
    elif spec.rig_human == "sinusoid":
        human_t0 = rng.uniform(0, 60)
        human = np.array([[(raw - mid) * RAD_PER_STEP for raw in default_human(human_t0 + x)] for x in t])
    else:
        raise ValueError(f"rig_human must be 'sinusoid' or 'reach', got {spec.rig_human!r}")
    guard = CommandGuard(JOINT_NAMES, JointLimits({}), max_speed=RIG_MAX_SPEED)
    servos = [Servo(sid, 0) for sid in SERVO_IDS]
    for servo, q in zip(servos, start, strict=True):
        servo.position = mid + q / RAD_PER_STEP
        servo.set("Goal_Position", int(round(servo.position)))
        servo.set("Torque_Enable", 1)
    policy = np.empty((n, 6))
    command = np.empty((n, 6))
    follower = np.empty((n, 6))
    for i in range(n):  # state read at tick i, then command i sent
        state = [(s.position - mid) * RAD_PER_STEP for s in servos]
        follower[i] = state
        ns = int(t[i] * 1e9)
        if alpha[i] > 0:  # the human moves the arm: the policy's move under way re-plans from where it is
            policy_run.drop_plan()
        policy[i] = policy_run.act(state, ns) or state
        wanted = alpha[i] * human[i] + (1 - alpha[i]) * policy[i]
        if probe is not None and spec.session_kind == "teleop":  # on the leader's command
            wanted[probe_joint] += probe.offset(t[i] - policy_run.probe_at_s)
        guard.command(JOINT_NAMES, list(wanted), ns)
        command[i] = _quantise(np.array(guard.step(state, ns)))
        for servo, q in zip(servos, command[i], strict=True):
            servo.set("Goal_Position", int(round(mid + q / RAD_PER_STEP)))
        for _ in range(RIG_SUBSTEPS):
            for servo in servos:
                servo.step(dt / RIG_SUBSTEPS, gravity=gravity_load(servo.id, servo.position))
    return _quantise(human), _quantise(policy), command, _quantise(follower)


@dataclass
class SessionTruth:
    """What the simulation knows (tests compare the bag and the dataset with it)."""

    bag: Path
    joint_stamps_ns: np.ndarray
    command: np.ndarray
    follower: np.ndarray
    camera_capture_ns: dict[str, np.ndarray]
    camera_stamp_ns: dict[str, np.ndarray]


@dataclass
class _Joints:
    """The joint streams on the session's ticks: receive instants, stamps, and what each arm did."""

    t: np.ndarray  # seconds since the episode's start, one per tick
    mono: np.ndarray  # each sample's monotonic instant (the tick with its jitter)
    stamps: np.ndarray  # header.stamp of each sample
    alpha: np.ndarray  # the human's share of the command
    human: np.ndarray
    policy: np.ndarray
    command: np.ndarray
    follower: np.ndarray
    effort: np.ndarray | None  # the follower's load, when it publishes one


def _ticks(spec: SessionSpec, rng: np.random.Generator, clock: _SimClock) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t, monotonic instants, header stamps) of the joint samples: `joint_hz` with a little jitter."""
    n = int(spec.duration_s * spec.joint_hz)
    t = np.arange(n) * (1.0 / spec.joint_hz)
    jitter = rng.normal(0, 0.2e-3, n).clip(-0.4e-3, 0.4e-3)
    mono = clock.mono0 + ((t + jitter) * 1e9).astype(np.int64)
    return t, mono, clock.stamp(mono)


def _motion(t: np.ndarray, alpha: np.ndarray, spec: SessionSpec, rng: np.random.Generator
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The scripted human (with its dead air and fast shakes), the policy, their blend and the
    follower's lag behind it: human, policy, command, follower (radians)."""
    phase = rng.uniform(0, 2 * math.pi, 6)
    amp, center = np.array(REACH_AMP), np.array(REACH_CENTER)
    human_t = t.copy()
    if spec.dead_air is not None:  # the human's hand is off the leader: it holds still
        a, length = spec.dead_air
        held = (t >= a) & (t < a + length)
        human_t = np.where(held, a, t)
        human_t = np.where(t >= a + length, t - length, human_t)
    if spec.motion == "rig":
        return _rig_motion(t, alpha, spec, rng)
    if spec.motion == "reach":
        human = _reaches(human_t, REACH_CENTER, REACH_AMP, rng, grasps=spec.grip_object is not None)
    elif spec.motion == "smooth":
        human = center + amp * np.sin(0.5 * human_t[:, None] * (1 + np.arange(6) * 0.15) + phase)
    else:
        raise ValueError(f"motion must be 'smooth', 'reach' or 'rig', got {spec.motion!r}")
    if spec.human_fast is not None:
        a, length = spec.human_fast
        fast = (t >= a) & (t < a + length)
        human[fast, :5] += 0.5 * np.sin(2 * math.pi * 2.0 * (t[fast, None] - a))
    human = _quantise(human)
    policy = _quantise(center + 0.8 * amp * np.sin(0.4 * t[:, None] + phase + 0.3))
    command = _quantise(alpha[:, None] * human + (1 - alpha[:, None]) * policy)
    return human, policy, command, _quantise(_follow(command, spec, 1.0 / spec.joint_hz))


def _follow(command: np.ndarray, spec: SessionSpec, dt: float) -> np.ndarray:
    """The follower's first-order lag behind `command` (τ; the gripper slowed by its torque limit),
    no faster than its top speed, its jaws stopped by the object between them."""
    follower = np.empty_like(command)
    k = np.full(6, 1 - math.exp(-dt / spec.tau_s))
    k[5] = 1 - math.exp(-dt * spec.gripper_torque / spec.tau_s)
    state = command[0].copy()
    max_step = math.inf if spec.follower_max_speed is None else spec.follower_max_speed * dt
    for i in range(len(command)):  # state read at tick i, then command i sent
        follower[i] = state
        state = state + np.clip((command[i] - state) * k, -max_step, max_step)
        if spec.grip_object is not None:
            state[5] = max(state[5], spec.grip_object)  # the jaws stop on the object
    return follower


def _joints(spec: SessionSpec, rng: np.random.Generator, clock: _SimClock) -> _Joints:
    t, mono, stamps = _ticks(spec, rng, clock)
    alpha = _alpha(t, spec)
    human, policy, command, follower = _motion(t, alpha, spec, rng)
    # Load follows the position loop's effort: proportional to the tracking error, saturating at full torque.
    cap = np.array([1.0] * 5 + [spec.gripper_torque])
    effort = np.clip((command - follower) * 8.0, -cap, cap) if spec.effort else None
    return _Joints(t, mono, stamps, alpha, human, policy, command, follower, effort)


def _spans(spans: tuple[tuple[float, float, str | None], ...], clock: _SimClock) -> list[Intervention]:
    """Takeover or correction spans (seconds into the episode) as the metadata records them."""
    return [Intervention(j, int(clock.stamp(np.int64(clock.mono0 + start * 1e9))),
                         int(clock.stamp(np.int64(clock.mono0 + end * 1e9))), label)
            for j, (start, end, label) in enumerate(spans, start=1)]


def _authority(joints: _Joints, spec: SessionSpec) -> np.ndarray:
    """/teleop/authority on every tick: [alpha, mode, intervention_id, trigger] (the trigger once labelled)."""
    t, n = joints.t, len(joints.t)
    interv_id = np.zeros(n)
    trig = np.zeros(n)
    for j, (start, end, label) in enumerate(spec.interventions, start=1):
        inside = (t >= start) & (t < end)
        interv_id[inside] = j
        trig[inside & (t >= start + spec.label_delay_s)] = trigger_code(label)
    mode = np.full(n, mode_code("teleop" if spec.session_kind == "teleop" else "policy"), float)
    return np.stack([joints.alpha, mode, interv_id, trig], axis=1)


Record = tuple[int, str, int, bytes]  # (receive time, topic, publish time, serialized message)


def _joint_records(joints: _Joints, spec: SessionSpec, rng: np.random.Generator, clock: _SimClock) -> list[Record]:
    """The four arm streams and /teleop/authority, each received after its own transport latency."""
    n, stamps = len(joints.t), joints.stamps

    def joint_log(lat_ms: float) -> np.ndarray:
        lat = np.abs(rng.normal(lat_ms, 0.2, n)) * 1e6
        return clock.wall(joints.mono + lat.astype(np.int64))

    records: list[Record] = []
    names = list(JOINT_NAMES)
    for topic, values, frame in ((FOLLOWER_STATE, joints.follower, ""), (FOLLOWER_COMMAND, joints.command, ""),
                                 (LEADER_STATE, joints.human, ""), (POLICY_COMMAND, joints.policy,
                                                                    spec.policy_checkpoint)):
        logs = joint_log(spec.joint_latency_ms)
        efforts = joints.effort if topic == FOLLOWER_STATE else None
        records += [(int(logs[i]), topic, clock.publish(int(logs[i]), int(stamps[i])),
                     joint_state_cdr(int(stamps[i]), names, values[i], frame,
                                     effort=None if efforts is None else efforts[i])) for i in range(n)]
    if spec.feedback:
        offset, ceiling = _feedback(joints, spec)
        logs = joint_log(spec.joint_latency_ms)
        live = np.ones(n, bool) if spec.feedback_stall is None else ~(
            (joints.t >= spec.feedback_stall[0]) & (joints.t < sum(spec.feedback_stall)))
        records += [(int(logs[i]), LEADER_FEEDBACK, clock.publish(int(logs[i]), int(stamps[i])),
                     joint_state_cdr(int(stamps[i]), names, offset[i], effort=ceiling[i]))
                    for i in np.flatnonzero(live)]
    authority = _authority(joints, spec)
    logs = joint_log(spec.joint_latency_ms)
    records += [(int(logs[i]), AUTHORITY, clock.publish(int(logs[i]), int(stamps[i])),
                 joint_state_cdr(int(stamps[i]), AUTHORITY_NAMES, authority[i])) for i in range(n)]
    return records


def _feedback(joints: _Joints, spec: SessionSpec) -> tuple[np.ndarray, np.ndarray]:
    """(goal offset rad, torque ceiling) per tick and joint, as the leader's driver renders them."""
    if spec.feedback not in FEEDBACK_MODES:
        raise ValueError(f"feedback must be one of {FEEDBACK_MODES}, got {spec.feedback!r}")
    offset, ceiling = np.zeros((len(joints.t), 6)), np.zeros((len(joints.t), 6))
    if spec.feedback == "gripper" and joints.effort is not None:
        grasp = np.abs(joints.effort[:, 5]) >= FEEDBACK_GRASP_LOAD
        offset[grasp, 5] = joints.follower[grasp, 5] - joints.human[grasp, 5]
        ceiling[grasp, 5] = FEEDBACK_CEILING
    return offset, ceiling


def _event_records(spec: SessionSpec, clock: _SimClock, interventions: list[Intervention],
                   corrections: list[Intervention]) -> list[Record]:
    """/teleop/intervention as the teleop node publishes it: each span's start, its label, its end."""
    records: list[Record] = []
    for kind, spans, times in (("intervention", interventions, spec.interventions),
                               ("correction", corrections, spec.corrections)):
        for iv, (start, end, _label) in zip(spans, times, strict=True):
            label_at = start + spec.label_delay_s
            events = [(start, None, None), (end, iv.end_ns, iv.trigger if label_at <= end else None)]
            if iv.trigger is not None and spec.label_delay_s > 0:
                events.append((label_at, iv.end_ns if label_at > end else None, iv.trigger))
            for at_s, end_ns, trigger in sorted(events, key=lambda e: e[0]):  # start, label, end (as published)
                mono = np.int64(clock.mono0 + at_s * 1e9)
                text = json.dumps({"id": iv.id, "start_ns": iv.start_ns, "end_ns": end_ns,
                                   "trigger": trigger if spec.label_delay_s > 0 else iv.trigger, "kind": kind})
                log = int(clock.wall(mono)) + 300_000
                records.append((log, INTERVENTION, clock.publish(log, int(clock.stamp(mono))), string_cdr(text)))
    return records


def _camera_records(joints: _Joints, spec: SessionSpec, rng: np.random.Generator, clock: _SimClock
                    ) -> tuple[list[Record], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Each camera's frames, drawing the follower as it was at their exposure, delivered after the
    pipeline latency: (records, capture instants by camera, header stamps by camera)."""
    records: list[Record] = []
    captures: dict[str, np.ndarray] = {}
    cam_stamps: dict[str, np.ndarray] = {}
    t, mono_stamps = joints.t, joints.mono
    names = list(JOINT_NAMES)
    background = _background(spec.width, spec.height)
    top = timecode.strip_height(spec.width, spec.height)
    period = 1.0 / spec.camera_fps
    for c, cam in enumerate(spec.cameras):
        ct = np.arange(int(spec.duration_s / period)) * period + 0.3 * period * (c + 1)
        ct = ct[ct < t[-1]]
        if spec.camera_stall is not None and c == 0:
            a, length = spec.camera_stall
            ct = ct[(ct < a) | (ct >= a + length)]
        cap_mono = clock.mono0 + (ct * 1e9).astype(np.int64) + rng.integers(-50_000, 50_000, len(ct))
        lat = np.abs(rng.normal(spec.camera_latency_ms, 1.5, len(ct))) * 1e6
        # As a recorder stops: frames still in the pipeline when the last joint sample arrived are not in the bag.
        arrived = cap_mono + lat.astype(np.int64) <= mono_stamps[-1] + int(spec.joint_latency_ms * 1e6)
        ct, cap_mono, lat = ct[arrived], cap_mono[arrived], lat[arrived]
        cap_ns = clock.stamp(cap_mono)  # the capture instant on the stamp clock: the pixel truth
        skew = int(spec.camera_clock_skew_ms * 1e6)
        stamp_ns = cap_ns + int(spec.camera_stamp_offset_ms * 1e6) + skew
        logs_c = clock.wall(cap_mono + lat.astype(np.int64)) + skew
        # The arm as it was at the exposure instant: the follower's samples interpolated to it.
        pose = np.stack([np.interp(cap_mono, mono_stamps, joints.follower[:, j]) for j in range(6)], axis=1)
        for i in range(len(ct)):
            image = background.copy()
            draw_arm(image, dict(zip(names, pose[i], strict=True)), top=top)
            timecode.encode(image, int(cap_ns[i]))
            ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, spec.jpeg_quality])
            if not ok:
                raise RuntimeError(f"JPEG encode failed for camera {cam}")
            jpeg = encoded.tobytes()
            if spec.camera_instance:
                jpeg = frame_meta.add(jpeg, {"instance": spec.camera_instance})
            pub = (int(stamp_ns[i]) + int(spec.camera_publish_offset_ms * 1e6) if spec.camera_publish_offset_ms
                   is not None else clock.publish(int(logs_c[i]), int(stamp_ns[i])))
            records.append((int(logs_c[i]), camera_image(cam), pub,
                            compressed_image_cdr(int(stamp_ns[i]), jpeg, cam)))
        captures[cam], cam_stamps[cam] = cap_ns, stamp_ns
    return records, captures, cam_stamps


def _topics(spec: SessionSpec) -> list[str]:
    return [FOLLOWER_STATE, FOLLOWER_COMMAND, LEADER_STATE, POLICY_COMMAND, AUTHORITY, INTERVENTION] + \
        [camera_image(cam) for cam in spec.cameras] + ([PEDAL_JOY] if spec.pedal_topic else []) + \
        ([LEADER_FEEDBACK] if spec.feedback else [])


def _episode_meta(bag_dir: Path, spec: SessionSpec, clock: _SimClock, joints: _Joints,
                  interventions: list[Intervention], corrections: list[Intervention]) -> EpisodeMeta:
    """The metadata the recorder writes: the session's fields, its clocks, and the task spec's check at stop."""
    mono_stamps, t = joints.mono, joints.t
    calibration = spec.calibration if spec.calibration is not None else {
        role: yaml.safe_load(sim_calibration_file(role).read_text()) for role in CALIBRATION_ROLES}
    meta = EpisodeMeta(
        episode_name=bag_dir.name,
        task=spec.task,
        operator=spec.operator,
        session_kind=spec.session_kind,
        software_version="sim",
        policy_checkpoint=spec.policy_checkpoint,
        calibration=calibration,
        cameras=list(spec.cameras),
        topics=_topics(spec),
        outcome=spec.outcome,
        attempts=1 if spec.outcome != "unset" else None,
        interventions=interventions,
        corrections=corrections,
        clock_start=clock.sample(clock.mono0).to_dict(),
        clock_end=clock.sample(int(mono_stamps[-1])).to_dict(),
        clock_samples=[clock.sample(clock.mono0 + k * 10**9).to_dict() for k in range(int(t[-1]) + 1)]
        if clock.ros
        else [],
        stamp_clock="ros" if clock.ros else "",
        started_ros_ns=int(clock.wall(mono_stamps[0])) if clock.ros else 0,
        stopped_ros_ns=int(clock.wall(mono_stamps[-1])) if clock.ros else 0,
        ptp_offset_ns=spec.ptp_offset_ns,
        started_mono_ns=int(mono_stamps[0]),
        stopped_mono_ns=int(mono_stamps[-1]),
        protocol_hash=spec.protocol_hash,
        condition=spec.condition,
        failure_label=spec.failure_label,
        extra=dict(spec.extra) | ({} if spec.ptp_offset_end_ns is None
                                  else {"ptp_offset_end_ns": spec.ptp_offset_end_ns}),
        rig_id=spec.rig_id,
    )
    if spec.task_spec is not None and spec.task_spec.success is not None:
        passed, detail = spec.task_spec.success.judge(joints.follower[-1])
        meta.outcome_check = {"passed": passed, "detail": detail}
    if spec.task_spec is not None:
        meta.task_spec, meta.task_spec_id = dict(spec.task_spec.content), spec.task_spec.id
    return meta


def _write_bag(bag_dir: Path, meta: EpisodeMeta, records: list[Record], spec: SessionSpec) -> Path:
    """Every record in receive order through the recorder's `BagWriter`; returns the .mcap file."""
    with BagWriter(bag_dir, episode=meta, chunk_size=spec.chunk_size, compression=spec.compression,
                   fsync=False, max_chunk_age_s=1e6) as bag:
        for topic in meta.topics:
            if topic == INTERVENTION:
                bag.add_topic(topic, "std_msgs/msg/String")
            elif topic == PEDAL_JOY:
                bag.add_topic(topic, "sensor_msgs/msg/Joy")
            elif topic.startswith("/cameras/"):
                bag.add_topic(topic, "sensor_msgs/msg/CompressedImage")
            else:
                bag.add_topic(topic, JOINT_STATE)
        for seq, (log, topic, pub, data) in enumerate(sorted(records, key=lambda r: r[0])):
            bag.write(topic, data, log_time_ns=log, publish_time_ns=pub, sequence=seq + 1)
    return bag.mcap_path


def _damage(mcap: Path, spec: SessionSpec) -> None:
    """The file faults: a corrupted chunk, a file cut short as a crash leaves it."""
    if spec.corrupt_chunk:
        corrupt_one_chunk(mcap)
    if spec.truncate_bag is not None:
        size = mcap.stat().st_size
        with open(mcap, "r+b") as f:
            f.truncate(int(size * spec.truncate_bag))


def write_session(bag_dir: str | Path, spec: SessionSpec | None = None) -> SessionTruth:
    """Simulate one episode and record it with the project's `BagWriter`; apply file faults."""
    spec = spec or SessionSpec()
    rng = np.random.default_rng(spec.seed)
    bag_dir = Path(bag_dir)
    clock = _SimClock(spec)
    joints = _joints(spec, rng, clock)
    interventions, corrections = _spans(spec.interventions, clock), _spans(spec.corrections, clock)
    records = _joint_records(joints, spec, rng, clock) + _event_records(spec, clock, interventions, corrections)
    frames, captures, cam_stamps = _camera_records(joints, spec, rng, clock)
    meta = _episode_meta(bag_dir, spec, clock, joints, interventions, corrections)
    _damage(_write_bag(bag_dir, meta, records + frames, spec), spec)
    return SessionTruth(bag_dir, joints.stamps, joints.command, joints.follower, captures, cam_stamps)


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
