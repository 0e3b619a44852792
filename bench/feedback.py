"""Force feedback on the simulator with the modelled hand (issue 35, SPEC §9 `bench/feedback.py`).

Two simulated SO-101s on ptys, each driven by the real `ArmDriver` at 200 Hz on its own thread, wired
as the session wires them minus ROS: every leader reading commands the follower (`ArmPair`, as the
teleop node maps it), every follower reading is felt back by the leader (`ArmDriver.feel`, as the
leader's node passes `follower/joint_states` on). The leader is held by the simulator's `Hand` (an
impedance on every shaft: stiffness, force limit) and moved by a scripted **operator**:

- the operator pushes one joint's intended pose toward a target past where the follower will stop,
  at `PUSH_RAD_S`, and **stops advancing once it feels the leader push back** — the force on its
  hand opposing the push above `FEEL` (0.08 of the servo's maximum torque, above the 0.05 the
  shaft's own drag costs at that speed) as it was `REACTION_S` (0.15 s, a human's reaction)
  earlier —, then eases off at `EASE_RAD_S` while it still feels more than that (it keeps a light
  touch on what it met). Without feedback it feels only the drag and pushes on to the target: that
  is the mash the issue names. The behaviour is a model of an operator, stated here, not measured
  on people;
- every run starts with `FREE_S` of free motion (what `contact` learns the expected load from).

Scenarios, each with feedback `off`, `gripper` and `contact`:

- `grasp`: the follower's jaws close on an object (`grip_object`), the operator squeezing the
  trigger toward fully shut; with the follower's own force limit (`grip_force_limit` 0.2, the
  default) and without it (0: the servo's own Max_Torque_Limit 0.5 and overload trip are all);
- `push`: the follower's shoulder_pan blocked, the operator pushing 0.3 rad past it; with the
  follower's collision hold (the default: a latched fault ~0.4 s in without feedback, the press
  ended by a safety stop, not by the operator) and without it (`settings.COLLISION` off for the
  pan: only the servo's own overload trip, ~2 s at full load, ends a press) — the fair comparison
  of how long the operator presses, as the grasp without the force limit is for the grasp;
- the grasp without the force limit at slower squeezes (`SQUEEZE_RAD_S`), `off` against `gripper`
  (`grasp_peak_by_squeeze_speed`): the load at the first contact reading and its climb both grow
  with the squeeze's speed, and the operator's reaction comes after a fixed time, so whether
  feedback can halve the peak depends on how fast the trigger is squeezed;
- the same grasp at `PUSH_RAD_S` with other hands (`HANDS`, `grasp_peak_by_hand`): a light finger
  (one that presses with at most 0.1 of the servo's maximum torque, which the leader's 0.15
  ceiling overpowers) and a soft hand (a tenth of the default stiffness). Before any reaction only
  the leader's push against the hand itself can stop the trigger: it does so for a hand it
  overpowers, or yields to, not for the default's firm one.

Each scenario and mode runs `REPEATS` times, the modes of one repeat back to back (they share the
machine's load); each figure is the median, each ratio the medians' and every repeat's. Measured:
the follower's peak load on the joint and its time above `LOAD_LIMIT` (the grip limit, 0.2) with
the joint stopped (pressing, not free motion's lag), from the follower's own readings; how hard it
pressed over the whole contact, not its first instant (`sustained`: mean and 90th percentile load,
load above the limit integrated, load·s, from the joint standing still on something to the end of
the run or, after a fault, to its last loaded reading); the mash (how far the operator's intended
pose ran past where the follower stopped, rad, in the leader's terms, at the end of the run); the
follower's faults (a collision hold, an overload trip); and `first_contact`, the trace of why the
peak is what it is: ms after the contact and the follower's load then, of the leader's first
rendering tick, the hand first feeling `FEEL`, the operator stopping, the peak, and how fast the
load climbs. Also:

- `drag`: the hand force needed to follow a reference motion (every joint, the follower free), RMS
  over the joints and the run, per mode, `DRAG_SEEDS` runs each starting elsewhere along the motion
  (the modes of a seed back to back); the ratio of the medians to `off` and each seed's (goal:
  within 10 %);
- `stability`: the push with a hand that does not react (its intended pose held 0.1 rad past the
  blocked one) over a range of hand stiffness, and the grasp so (the trigger held 0.1 rad past
  where it was when the jaws met the object, `stability_grasp`); the leader's joint's velocity (its
  own readings) RMS above 2 Hz, against the same run without feedback, and how often the rendering
  switched on;
- `latency`: over `LATENCY_STEPS` grasps in one rig (`latency_steps`: the trigger squeezed until
  the grasp is rendered, then let open), from the follower reading that first shows the grasp to
  the leader tick whose write rendered it (`Rendered.stamp_ns`), in bus ticks (goal: two): median,
  p95, max, and its two parts: to the read of that tick (its phase, and a loaded machine's
  scheduling delay of the drivers' threads) and the tick itself (the read, the ceiling written and
  read back, the goal and the torque written; the torque's read-back follows the stamp). Beside
  it, what the machine delays any thread at the bench's priority by (`SLEEPER`, a process of its
  own: a sleep's lateness and a byte's pass through a pty) and how many other processes' threads
  are real-time: another simulated rig competes with the bench's at the same priority. Each grasp
  during which the sleeper saw a stall says so, and the maximum is also given without those
  (`max_without_machine_stalls`). `--tty-workers` (with `--latency-only`, root) runs the kernel's
  unbound kworkers at SCHED_FIFO for the while: the experiment that shows the tty work's share.
  Also the grasp's peak with the follower's own force limit (the soft hold, on by default)
  against without it, per mode.

Every thread of the bench runs at SCHED_FIFO 50 where permitted (`--priority`; 0: the normal
policy), as the rig's arm drivers and `sim-bus` run. Beside two CPU-burning processes, grasps with
`gripper`: the latency 8.6 and 22.7 ticks at the normal policy (the rendering tick's serial bus
round trips waiting for a core), 0.75, 0.95 and 2.9 at SCHED_FIFO 50.

Usage: `python bench/feedback.py [--out FILE] [--priority 50] [--steps 50] [--burners 2]
[--latency-only [--tty-workers]]`
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
from result_file import RESULTS, load_average, write_result

from teleop_flywheel.core.calibration import (
    RAD_PER_STEP,
    ArmCalibration,
    ArmPair,
    load_calibration,
    sim_calibration_file,
)
from teleop_flywheel.core.clock import NS_PER_S, now_ns
from teleop_flywheel.core.priority import RT_PRIORITY, request_realtime
from teleop_flywheel.core.safety import CommandGuard
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.hw.arm import ArmConfig, ArmDriver, Reading, effective_limits, settings
from teleop_flywheel.hw.arm.grasp import STALLED_RAD_S
from teleop_flywheel.hw.arm.rendering import Rendered
from teleop_flywheel.hw.feetech.bus import FeetechBus
from teleop_flywheel.hw.feetech.sim import Hand, SimulatedArm
from teleop_flywheel.hw.feetech.sim.servo import STEPS_PER_RAD, YIELDING_FINGER

RATE_HZ = 200.0
MODES = ("off", "gripper", "contact")
GRIPPER = JOINT_NAMES.index("gripper")
PAN = JOINT_NAMES.index("shoulder_pan")
LOAD_LIMIT = 0.2  # the follower's grip limit (`grip_force_limit`'s default): pressing harder is mashing
FEEL = 80.0  # Present_Load units (0.1 % of max torque): a push back the operator notices and stops at
REACTION_S = 0.15
PUSH_RAD_S = 0.5
EASE_RAD_S = 0.1
FREE_S = 3.0
OBJECT = 2300.0  # follower gripper shaft steps where its jaws meet the object
GRASP_HELD_S = 2.25  # a grasp run's length after the jaws meet the object (at PUSH_RAD_S the trigger is then shut)
# Squeeze speeds the grasp's peak is measured at besides PUSH_RAD_S (`grasp_peak_by_squeeze_speed`):
# the load at the first contact reading, and how fast it climbs, grow with the speed.
SQUEEZE_RAD_S = (0.1, 0.15, 0.2, 0.3)
# Hands the grasp's peak is measured with besides the default (`grasp_peak_by_hand`), at PUSH_RAD_S:
# what stops the trigger before the operator's reaction is the leader's push against the hand itself.
HANDS = {"light_finger": YIELDING_FINGER, "soft_hand": Hand(stiffness=2.0)}
POSE = [2050.0, 2050.0, 1975.0, 2025.0, 2050.0, 3000.0]  # leader shaft steps: the operator's start (trigger open)
CONTACT_LOAD = 0.05  # a joint standing still with this load is on something (the contact's start)
REPEATS = 3  # each scenario and mode, interleaved (the modes of one repeat share the machine's load)
DRAG_SEEDS = 5  # drag runs per mode, each starting elsewhere along the free motion
GRASP_FEEDBACK_LOAD = 0.1  # `feedback_grasp_load`'s default: a follower reading this loaded and stalled is a grasp
# A rig keeps every reading and hand sample of its run (objects the cyclic collector tracks), and all
# its threads share one GIL: a full collection walking them stalls every tick. Measured over a rig
# of three minutes, each full collection took longer as the records grew, 25 to 240 ms (a leader
# tick 225 ms). They are moved out of its reach (`gc.freeze`) this often as they accumulate, so a
# collection walks only what was allocated since, and given back to it when the rig stops.
FREEZE_RECORDS_S = 0.5
LATENCY_STEPS = 50  # grasps in one rig for the latency (`latency_steps`)
# A process at the bench's SCHED_FIFO priority that says what the machine, not the bench, delays a
# thread at that priority by (it shares no GIL with the bench): it sleeps 1 ms and says how late it
# woke (other real-time processes, the hypervisor), then passes one byte through a pty of its own
# and says how long that took. A pty's bytes, as a USB-serial adapter's, reach the reader through
# the kernel's tty work (flush_to_ldisc), run by an unbound kworker at the normal policy: a machine
# busy with normal work delays it however high the reader's priority (measured beside two CPU
# burners: a pass took up to 86 ms, 111 of 37,341 over 2 ms, while the sleep woke at most 8.6 ms
# late; with those kworkers at SCHED_FIFO 49, at most 8.6 ms, 4 over 2 ms).
SLEEPER = """
import json, os, signal, sys, time, tty
if int(sys.argv[1]) > 0:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(sys.argv[1])))
master, slave = os.openpty()
tty.setraw(master)
tty.setraw(slave)
done, late, passes, stalls = [], [], [], []
signal.signal(signal.SIGTERM, lambda *_: done.append(1))
while not done:
    t = time.monotonic_ns()
    time.sleep(0.001)
    woke = time.monotonic_ns()
    os.write(master, b"x")
    os.read(slave, 1)
    passed = time.monotonic_ns()
    late.append(woke - t - 1_000_000)
    passes.append(passed - woke)
    if late[-1] > int(sys.argv[2]):
        stalls.append(("sleep", t, woke))
    if passes[-1] > int(sys.argv[2]):
        stalls.append(("tty", woke, passed))
print(json.dumps({"late": late, "passes": passes, "stalls": stalls}))
"""
# The sleeper waking, or its pty's byte passing, this much later than asked (ms) is a stall of the
# machine: one during a grasp's latency is said with that grasp, and the maximum is also given over
# the grasps without one.
STALL_MS = 2.0


def free(t: float, phase: float = 0.0) -> list[float]:
    """Free motion about the start pose: every body joint ±0.18 rad at ~0.3 Hz (`phase` rad along
    it), the trigger still."""
    return [p + (120.0 * math.sin(2.0 * t + i + phase) if i != GRIPPER else 0.0) for i, p in enumerate(POSE)]


@dataclass
class Operator:
    """The scripted operator (module doc): free motion, then a push of one joint toward `target`
    (shaft steps) that stops once the hand felt `FEEL` against it `REACTION_S` earlier (`react`)."""

    leader: SimulatedArm
    joint: int = PAN
    target: float = 0.0
    react: bool = True
    phase: float = 0.0  # where along the free motion it starts (rad): a seed of the drag runs
    speed: float = PUSH_RAD_S  # how fast it pushes (rad/s)
    push_at: float | None = None  # simulator time the push starts (None: free motion)
    intended: float = 0.0  # the pushed joint's intended pose now (shaft steps)
    stopped: bool = False
    stopped_ns: int | None = None  # when it first stopped advancing (`now_ns` clock)
    _felt: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=2000))
    _last: float | None = None

    def __call__(self, t: float) -> list[float]:
        """Called by the simulator's physics (its lock held: the hand's force is read directly)."""
        if self.push_at is None or t < self.push_at:
            pose = free(t, self.phase) if self.push_at is None else list(POSE)
            self.intended = pose[self.joint]
            return pose
        direction = math.copysign(1.0, self.target - POSE[self.joint])
        force = self.leader.servos[self.joint + 1].hand_force * direction  # the hand pushing against resistance
        self._felt.append((t, force))
        felt_then = next((f for s, f in reversed(self._felt) if s <= t - REACTION_S), 0.0)
        felt = self.react and felt_then >= FEEL
        if felt and not self.stopped:
            self.stopped, self.stopped_ns = True, int((self.leader.started + t) * NS_PER_S)
        dt = 0.0 if self._last is None else t - self._last
        self._last = t
        if not self.stopped:
            step = direction * self.speed * STEPS_PER_RAD * dt
            self.intended = min(self.intended + step, self.target) if direction > 0 else max(self.intended + step,
                                                                                                   self.target)
        elif felt:
            self.intended -= direction * EASE_RAD_S * STEPS_PER_RAD * dt
        pose = list(POSE)
        pose[self.joint] = self.intended
        return pose


def calibration(role: str) -> ArmCalibration:
    return load_calibration(sim_calibration_file(role))


def driver(arm: SimulatedArm, **config: Any) -> ArmDriver:
    """The driver as the node makes it with its defaults (speed 2 rad/s, goal within 0.35 rad of
    present, watchdog 100 ms)."""
    cal = calibration(arm.role)
    guard = CommandGuard(JOINT_NAMES, effective_limits(cal, [-6.3] * 6, [6.3] * 6), max_speed=2.0,
                         max_relative=0.35, watchdog_ns=100_000_000)
    return ArmDriver(FeetechBus(str(arm.link)), cal, guard, ArmConfig(role=arm.role, **config))


@dataclass
class Run:
    """One rig's record: the follower's readings, the leader's readings and what each of its ticks
    rendered, the hand's force on every joint (sampled every 2 ms)."""

    leader: SimulatedArm
    follower: SimulatedArm
    lead: ArmDriver
    follow: ArmDriver
    operator: Operator
    follower_readings: list[Reading] = field(default_factory=list)
    leader_readings: list[tuple[Reading, Rendered | None]] = field(default_factory=list)
    hand: list[tuple[float, list[float]]] = field(default_factory=list)

    def since(self, t_ns: int) -> tuple[list[Reading], list[tuple[Reading, Rendered | None]]]:
        return ([r for r in list(self.follower_readings) if r.stamp_ns >= t_ns],
                [(r, d) for r, d in list(self.leader_readings) if r.stamp_ns >= t_ns])


@contextmanager
def rig(tmp: Path, mode: str, hand: Hand | None = None, grip_object: float | None = None,
        grip_force_limit: float = LOAD_LIMIT) -> Iterator[Run]:
    name = f"{mode}_{len(list(tmp.iterdir()))}"
    (tmp / name).mkdir()
    with (SimulatedArm("leader", link=tmp / name / "leader", hand=hand or Hand()) as leader,
          SimulatedArm("follower", link=tmp / name / "follower", grip_object=grip_object) as follower):
        operator = Operator(leader)
        leader.set_human(operator)
        lead = driver(leader, feedback=mode)
        follow = driver(follower, grip_force_limit=grip_force_limit)
        run = Run(leader, follower, lead, follow, operator)
        pair = ArmPair(calibration("leader"), calibration("follower"))

        def on_leader(reading: Reading) -> None:
            run.leader_readings.append((reading, lead.rendered))
            if len(reading.names) == len(JOINT_NAMES):
                follow.command(JOINT_NAMES, pair.to_follower(reading.positions), now_ns())

        def on_follower(reading: Reading) -> None:
            run.follower_readings.append(reading)
            if len(reading.names) == len(JOINT_NAMES):
                lead.feel(pair.to_leader(reading.positions), reading.efforts, reading.velocities, now_ns())

        stop = threading.Event()
        gc.collect()
        gc.freeze()
        threads = [threading.Thread(target=d.run, args=(RATE_HZ, stop, cb), daemon=True)
                   for d, cb in ((lead, on_leader), (follow, on_follower))]
        for thread in threads:
            thread.start()

        def sample() -> None:
            frozen = time.monotonic()
            while not stop.is_set():
                run.hand.append((time.monotonic(), leader.hand_forces()))
                if time.monotonic() - frozen >= FREEZE_RECORDS_S:
                    gc.freeze()
                    frozen = time.monotonic()
                time.sleep(0.002)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            wait(lambda: len(run.follower_readings) > 20 and len(run.leader_readings) > 20, 30)
            yield run
        finally:
            stop.set()
            for thread in [*threads, sampler]:
                thread.join(5)
            gc.unfreeze()
            follow.close("release")
            lead.close()


def wait(until: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if until():
            return True
        time.sleep(0.01)
    return until()


def settle(run: Run, seconds: float) -> None:
    """The operator holds still at the start pose for `seconds`."""
    run.operator.push_at = time.monotonic() - run.leader.started + 1e9
    time.sleep(seconds)


def push(run: Run, joint: int, target: float, react: bool = True, speed: float = PUSH_RAD_S) -> None:
    """The operator starts pushing `joint` toward `target` (shaft steps) at `speed` (rad/s) now."""
    op = run.operator
    op.joint, op.target, op.react, op.intended, op.speed = joint, target, react, POSE[joint], speed
    op._last = None  # noqa: SLF001 - a push after a pause advances from its start, not by the pause
    op.push_at = time.monotonic() - run.leader.started


def warm_up(run: Run) -> None:
    """`FREE_S` of free motion, and for `contact` until its expected load is learned."""
    time.sleep(FREE_S)
    wait(lambda: run.lead.config.feedback != "contact" or bool(run.lead.health().values["feedback_contact_ready"]),
         30)


def leader_rad(joint: int, steps: float) -> float:
    """A leader shaft position (steps) in the leader's radians."""
    j = calibration("leader").joints[joint]
    return float(j.raw_to_rad(steps - j.homing_offset))


def pressing(readings: list[Reading], joint: int) -> dict[str, float]:
    """The follower's peak load on `joint` and its time above LOAD_LIMIT with the joint stopped (from
    its readings' stamps): pressing on something, not the lag of free motion (the half-torque
    gripper closing at a hand's pace is loaded near the limit too)."""
    full = [r for r in readings if len(r.names) == len(JOINT_NAMES)]
    loads = [abs(r.efforts[joint]) for r in full]
    still = [abs(r.velocities[joint]) < STALLED_RAD_S for r in full]
    stamps = [r.stamp_ns for r in full]
    above = sum((b - a) for (a, b), load, s in zip(pairwise(stamps), loads, still, strict=False)
                if load > LOAD_LIMIT and s)
    return {"peak_load": round(max(loads, default=0.0), 3), "time_above_limit_s": round(above / NS_PER_S, 3)}


@contextmanager
def collision_hold(on: bool) -> Iterator[None]:
    """The follower's collision hold on shoulder_pan as configured (`on`), or off for the run: a
    follower whose own protection is only the servo's overload trip (both drivers run in this
    process, and only a follower checks for collisions)."""
    kept = settings.COLLISION["shoulder_pan"]
    if not on:
        del settings.COLLISION["shoulder_pan"]
    try:
        yield
    finally:
        settings.COLLISION["shoulder_pan"] = kept


def scenario(tmp: Path, kind: str, mode: str, grip_force_limit: float = LOAD_LIMIT,
             hold: bool = True, speed: float = PUSH_RAD_S, hand: Hand | None = None) -> dict[str, Any]:
    """One `grasp` or `push` run: free motion, then the operator's push at `speed` with `hand`
    (None: the simulator's default); what the follower pressed. A grasp goes on for `GRASP_HELD_S`
    after the jaws meet the object."""
    grasp = kind == "grasp"
    joint = GRIPPER if grasp else PAN
    target = 2000.0 if grasp else POSE[PAN] + 0.3 * STEPS_PER_RAD  # the trigger shut; 0.3 rad past the pan
    with (collision_hold(hold),
          rig(tmp, mode, hand=hand, grip_object=OBJECT if grasp else None, grip_force_limit=grip_force_limit) as run):
        warm_up(run)
        settle(run, 1.0)
        start = now_ns()
        if not grasp:
            pan = run.follower.servos[PAN + 1]
            pan.blocked_at = pan.position
        push(run, joint, target, speed=speed)
        if grasp:
            jaws = run.follower.servos[GRIPPER + 1]
            wait(lambda: jaws.position <= OBJECT + 1.0, 60.0)
            time.sleep(GRASP_HELD_S)
        else:
            time.sleep(3.0)  # the pan stopped at once, the target reached at PUSH_RAD_S, then 2.4 s
        followers, leaders = run.since(start)
        stopped_at = followers[-1].positions[joint]  # where the follower's joint stopped (its own reading)
        stopped = ArmPair(calibration("leader"), calibration("follower")).to_leader(followers[-1].positions)[joint]
        past = (leader_rad(joint, run.operator.intended) - stopped) * math.copysign(1.0, target - POSE[joint])
        forces = [(t, f) for t, f in list(run.hand) if t * NS_PER_S >= start]
        out = pressing(followers, joint) | sustained(followers, joint, run.follow.state.faults.summary() != "") | {
            "mash_rad": round(max(0.0, past), 3),
            "operator_stopped": run.operator.stopped,
            "follower_faults": run.follow.state.faults.summary(),
            "follower_stopped_at_rad": round(stopped_at, 3),
        }
        out["first_contact"] = first_contact(followers, leaders, forces, joint,
                                             math.copysign(1.0, target - POSE[joint]), run.operator.stopped_ns)
        if grasp:
            parts = latency(followers, leaders)
            out["latency_ticks"] = parts and parts["ticks"]
            out["latency_parts"] = parts and {k: parts[k] for k in ("wait", "tick")}
        return out


def contact_start(readings: list[Reading], joint: int) -> int | None:
    """The first follower reading with `joint` standing still (within Present_Velocity's one step/s)
    and loaded: the jaws on the object, the pan against its block."""
    return next((r.stamp_ns for r in readings if len(r.names) == len(JOINT_NAMES)
                 and abs(r.velocities[joint]) <= RAD_PER_STEP and abs(r.efforts[joint]) >= CONTACT_LOAD), None)


def first_contact(followers: list[Reading], leaders: list[tuple[Reading, Rendered | None]],
                  hand: list[tuple[float, list[float]]], joint: int, direction: float,
                  stopped_ns: int | None) -> dict[str, Any]:
    """What happens after the follower's joint first stands still on something, each as ms after
    it and the follower's load then: the leader's first tick rendering that joint, the hand first
    feeling `FEEL` against its push (what the operator reacts to, `REACTION_S` later), the operator
    stopping, the peak. The peak after the felt push back by less than the reaction is what the
    operator's reaction, not the rendering, lets through."""
    t0 = contact_start(followers, joint)
    if t0 is None:
        return {}
    full = [r for r in followers if len(r.names) == len(JOINT_NAMES) and r.stamp_ns >= t0]

    def at(stamp: int | None) -> dict[str, float] | None:
        if stamp is None:
            return None
        load = next((abs(r.efforts[joint]) for r in full if r.stamp_ns >= stamp), abs(full[-1].efforts[joint]))
        return {"ms": round((stamp - t0) / 1e6, 1), "load": round(load, 3)}

    rendered = next((d.stamp_ns for _r, d in leaders if d is not None and d.ceilings[joint] > 0
                     and d.stamp_ns >= t0), None)
    felt = next((int(t * NS_PER_S) for t, f in hand if t * NS_PER_S >= t0 and f[joint] * direction >= FEEL / 1000.0),
                None)
    peak = max(full, key=lambda r: abs(r.efforts[joint]))
    return {"contact_load": round(abs(full[0].efforts[joint]), 3), "rendered": at(rendered), "felt": at(felt),
            "operator_stopped": at(stopped_ns), "peak": at(peak.stamp_ns),
            "load_rise_per_s": rise(full, joint)}


def rise(full: list[Reading], joint: int) -> float | None:
    """How fast the follower's load climbs after contact (fraction of max torque per second): from
    the contact reading to the first at 90 % of the peak."""
    peak = max(abs(r.efforts[joint]) for r in full)
    top = next((r for r in full if abs(r.efforts[joint]) >= 0.9 * peak), None)
    if top is None or top.stamp_ns == full[0].stamp_ns:
        return None
    seconds = (top.stamp_ns - full[0].stamp_ns) / NS_PER_S
    return round((abs(top.efforts[joint]) - abs(full[0].efforts[joint])) / seconds, 2)


def sustained(readings: list[Reading], joint: int, faulted: bool) -> dict[str, Any]:
    """How hard the follower pressed over the whole contact, not its first instant: its load from
    the first reading standing on something to the end of the run (or, after a fault, to the last
    reading that still carried load: the hold or the trip ended the press), mean, 90th percentile
    and load above LOAD_LIMIT integrated over time (load·s)."""
    t0 = contact_start(readings, joint)
    full = [r for r in readings if len(r.names) == len(JOINT_NAMES) and t0 is not None and r.stamp_ns >= t0]
    if faulted:
        last = max((k for k, r in enumerate(full) if abs(r.efforts[joint]) >= CONTACT_LOAD), default=-1)
        full = full[:last + 1]
    if len(full) < 2:
        return {"mean_load": None, "p90_load": None, "excess_load_s": None, "contact_s": 0.0}
    loads = np.array([abs(r.efforts[joint]) for r in full])
    dt = np.diff([r.stamp_ns for r in full]) / NS_PER_S
    return {"mean_load": round(float(loads.mean()), 3), "p90_load": round(float(np.percentile(loads, 90)), 3),
            "excess_load_s": round(float(np.sum(np.clip(loads[:-1] - LOAD_LIMIT, 0.0, None) * dt)), 3),
            "contact_s": round(float(np.sum(dt)), 2)}


def latency(followers: list[Reading], leaders: list[tuple[Reading, Rendered | None]]) -> dict[str, float] | None:
    """From the follower reading that began the grasp the leader rendered (load at
    `feedback_grasp_load`, jaws stalled and not gaining speed: `grasp.stopped`, in every reading
    from it to the rendering tick) to the first leader tick whose write rendered it, in bus ticks
    (`ticks`), in two parts: to that tick's read (`wait`: the tick's phase and the threads'
    scheduling) and from its read to its last write (`tick`: the read, the ceiling written and read
    back, the goal, the torque switched on and read back); None if never rendered. Not the first
    such reading of the run: jaws setting off from rest show one for a sample (loaded, not yet
    moving), which a leader ticking between two follower samples never sees, and which made a
    grasp rendered seconds later read as hundreds of ticks late."""
    shown = next(((r.stamp_ns, d.stamp_ns) for r, d in leaders if d is not None and d.ceilings[GRIPPER] > 0),
                 None)
    if shown is None:
        return None
    first = None
    for r, before in reversed(list(zip(followers[1:], followers, strict=False))):
        if r.stamp_ns > shown[1]:
            continue
        if not (abs(r.efforts[GRIPPER]) >= GRASP_FEEDBACK_LOAD and abs(r.velocities[GRIPPER]) < STALLED_RAD_S
                and abs(r.velocities[GRIPPER]) <= abs(before.velocities[GRIPPER]) + RAD_PER_STEP):
            break
        first = r.stamp_ns
    if first is None:
        return None
    tick = NS_PER_S / RATE_HZ
    return {"ticks": round((shown[1] - first) / tick, 2), "wait": round((shown[0] - first) / tick, 2),
            "tick": round((shown[1] - shown[0]) / tick, 2), "from_ns": first, "to_ns": shown[1]}


def drag(tmp: Path, mode: str, phase: float, seconds: float = 4.0) -> float:
    """RMS hand force (fraction of max torque) over every joint while the hand moves the leader in
    free motion (starting `phase` rad along it), the follower free, after the warm-up."""
    with rig(tmp, mode) as run:
        run.operator.phase = phase
        warm_up(run)
        start = time.monotonic()
        time.sleep(seconds)
        forces = np.array([f for t, f in list(run.hand) if t >= start])
    return float(np.sqrt(np.mean(forces ** 2)))


def rendering_grasp(run: Run) -> bool:
    """The leader's last ticks render the grasp."""
    return any(d is not None and d.ceilings[GRIPPER] > 0 for _r, d in run.leader_readings[-3:])


def latency_steps(tmp: Path, steps: int) -> list[dict[str, float] | None]:
    """`steps` grasps in one rig with `gripper` feedback (the follower's force limit on): the
    operator squeezes the trigger toward shut at `PUSH_RAD_S` without reacting, until the leader
    renders the grasp, holds 0.3 s, then lets the trigger open until the rendering lets go and 1 s
    more. Each grasp's `latency` (None: not rendered within 10 s)."""
    out: list[dict[str, float] | None] = []
    with rig(tmp, "gripper", grip_object=OBJECT) as run:
        warm_up(run)
        settle(run, 1.0)
        for _ in range(steps):
            start = now_ns()
            push(run, GRIPPER, 2000.0, react=False)
            wait(lambda: rendering_grasp(run), 10)
            time.sleep(0.3)
            out.append(latency(*run.since(start)))
            settle(run, 0.0)
            wait(lambda: not rendering_grasp(run), 5)
            time.sleep(1.0)
    return out


@contextmanager
def machine_stalls(priority: int) -> Iterator[dict[str, Any]]:
    """What the machine delays a thread at `priority` by meanwhile (`SLEEPER`): its late wake-ups
    (ms), and the other processes' real-time threads before and after."""
    out: dict[str, Any] = {"realtime_threads_elsewhere": [realtime_threads_elsewhere()]}
    sleeper = subprocess.Popen([sys.executable, "-c", SLEEPER, str(priority), str(int(STALL_MS * 1e6))],
                               stdout=subprocess.PIPE, text=True)
    try:
        yield out
    finally:
        sleeper.terminate()
        slept = json.loads(sleeper.communicate(timeout=30)[0] or '{"late": [], "passes": [], "stalls": []}')
        out["realtime_threads_elsewhere"].append(realtime_threads_elsewhere())
        out["sleeps"] = len(slept["late"])
        out["stalls_ns"] = slept["stalls"]
        for key, name in (("late", "late"), ("passes", "tty_pass")):
            ms = np.array(slept[key], dtype=float) / 1e6
            out |= {f"{name}_over_2ms": int(np.sum(ms > STALL_MS)),
                    f"{name}_p99_ms": round(float(np.percentile(ms, 99)), 2) if len(ms) else None,
                    f"{name}_max_ms": round(float(ms.max()), 1) if len(ms) else None}


@contextmanager
def tty_workers_realtime(priority: int) -> Iterator[list[int]]:
    """The kernel's unbound kworkers (which run a pty's, or a USB-serial adapter's, tty work) at
    SCHED_FIFO `priority` for the while, where permitted (root); the normal policy again after. An
    experiment that changes the machine for its duration (`--tty-workers`): it shows what of the
    latency is that work waiting behind normal-priority load. Workers the kernel starts meanwhile
    run at the normal policy. Yields the thread ids changed."""
    changed = []
    for tid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if (Path(f"/proc/{tid}/comm").read_text().startswith("kworker/u")
                    and os.sched_getscheduler(int(tid)) == os.SCHED_OTHER):
                os.sched_setscheduler(int(tid), os.SCHED_FIFO, os.sched_param(priority))
                changed.append(int(tid))
        except OSError:
            continue
    try:
        yield changed
    finally:
        for tid in changed:
            with suppress(OSError):
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))


def realtime_threads_elsewhere() -> int:
    """Threads of other processes at SCHED_FIFO or SCHED_RR, kernel threads left out (another
    simulated rig on the machine competes with the bench's at the same priority)."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            if not Path(f"/proc/{pid}/cmdline").read_bytes():
                continue  # a kernel thread
            for tid in os.listdir(f"/proc/{pid}/task"):
                count += os.sched_getscheduler(int(tid)) in (os.SCHED_FIFO, os.SCHED_RR)
        except OSError:
            continue
    return count


def stability(tmp: Path, mode: str, stiffness: float, kind: str = "push") -> dict[str, Any]:
    """A hand of `stiffness` that does not react, its intended pose held 0.1 rad past where the
    follower stops: for `push`, past the blocked shoulder_pan; for `grasp`, past where the trigger
    was when the jaws met the object (squeezed at `PUSH_RAD_S`, the follower's force limit on). The
    leader's joint's velocity RMS above 2 Hz (rad/s, its own readings) and how often the rendering
    switched on."""
    grasp = kind == "grasp"
    joint = GRIPPER if grasp else PAN
    with rig(tmp, mode, hand=Hand(stiffness=stiffness), grip_object=OBJECT if grasp else None) as run:
        warm_up(run)
        settle(run, 1.0)
        if grasp:
            push(run, GRIPPER, 2000.0, react=False)
            jaws = run.follower.servos[GRIPPER + 1]
            wait(lambda: jaws.position <= OBJECT + 1.0, 60.0)
            run.operator.target = run.leader.servos[GRIPPER + 1].position - 0.1 * STEPS_PER_RAD
        else:
            pan = run.follower.servos[PAN + 1]
            pan.blocked_at = pan.position
            push(run, PAN, POSE[PAN] + 0.1 * STEPS_PER_RAD, react=False)
        time.sleep(1.0)  # the push reaches its pose (0.2 s) and settles
        start = now_ns()
        time.sleep(2.0)
        _followers, leaders = run.since(start)
    v = np.array([r.velocities[joint] for r, _d in leaders])
    x = np.array([r.positions[joint] for r, _d in leaders])
    on = [bool(d is not None and d.ceilings[joint] > 0) for _r, d in leaders]
    high, peak_hz = above_2hz(v)
    return {"stiffness": stiffness, "velocity_rms_above_2hz_rad_s": round(high, 4),
            "position_rms_above_2hz_rad": round(above_2hz(x)[0], 5), "peak_hz": peak_hz,
            "rendering_switched_on": sum(1 for a, b in zip(on, on[1:], strict=False) if b and not a),
            "rendering_share": round(sum(on) / max(1, len(on)), 3)}


def above_2hz(samples: np.ndarray) -> tuple[float, float]:
    """The RMS of what a signal sampled at RATE_HZ (at about that rate: the driver's ticks) holds
    above 2 Hz, and the frequency of its largest component there."""
    spectrum = np.fft.rfft(samples - samples.mean())
    freqs = np.fft.rfftfreq(len(samples), 1.0 / RATE_HZ)
    high = freqs > 2.0
    rms = float(np.sqrt(2.0 * np.sum(np.abs(spectrum[high]) ** 2)) / len(samples))
    return rms, round(float(freqs[high][np.argmax(np.abs(spectrum[high]))]), 1)


def median(values: list[Any]) -> float | None:
    got = [v for v in values if v is not None]
    return round(float(np.median(got)), 3) if got else None


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The repeats of one scenario and mode: the median of every figure (and of the first
    contact's), every fault seen, and the runs themselves."""
    out: dict[str, Any] = {key: median([r[key] for r in runs]) for key in runs[0] if key != "latency_parts" and (
        isinstance(runs[0][key], (int, float)) and not isinstance(runs[0][key], bool) or runs[0][key] is None)}
    out["operator_stopped"] = [r["operator_stopped"] for r in runs]
    out["follower_faults"] = sorted({r["follower_faults"] for r in runs if r["follower_faults"]})
    events = ("rendered", "felt", "operator_stopped", "peak")
    out["first_contact"] = {"contact_load": median([r["first_contact"].get("contact_load") for r in runs]),
                            "load_rise_per_s": median([r["first_contact"].get("load_rise_per_s") for r in runs])} | {
        event: {field: median([(r["first_contact"].get(event) or {}).get(field) for r in runs])
                for field in ("ms", "load")} for event in events}
    out["runs"] = runs
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def peak_row(summaries: dict[str, dict[str, Any]], runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """A grasp's peak `off` against `gripper` (`summaries` of the `runs` per mode): each median, the
    ratio of the medians and each repeat's (its modes ran back to back)."""
    off, on = summaries["off"]["peak_load"], summaries["gripper"]["peak_load"]
    return {"off": off, "gripper": on, "ratio": ratio(on, off),
            "repeats": [ratio(a["peak_load"], b["peak_load"])
                        for a, b in zip(runs["gripper"], runs["off"], strict=True)]}


def latency_result(tmp: Path, steps: int, priority: int) -> dict[str, Any]:
    """`latency_steps` summarised: every grasp's ticks (sorted), median, p95, max, how many within
    two ticks, the parts' medians and maxima, and the machine's own stalls meanwhile."""
    with machine_stalls(priority) as machine:
        parts = latency_steps(tmp, steps)
    rendered = [p for p in parts if p is not None]
    stalls = machine.pop("stalls_ns")
    for p in rendered:
        during = [(kind, (end - begin) / 1e6 - (1.0 if kind == "sleep" else 0.0)) for kind, begin, end in stalls
                  if begin < p["to_ns"] and end > p["from_ns"]]
        p["machine_stall_ms"] = round(max((ms for _kind, ms in during), default=0.0), 1)
        p["machine_stall_kinds"] = sorted({kind for kind, _ms in during})
    ticks = sorted(p["ticks"] for p in rendered)
    ran = [p["ticks"] for p in rendered if not p["machine_stall_ms"]]
    return {"steps": steps, "rendered": len(rendered), "ticks": ticks,
            "median": median(ticks), "p95": round(float(np.percentile(ticks, 95)), 2) if ticks else None,
            "max": max(ticks, default=None), "within_two_ticks": sum(t <= 2.0 for t in ticks),
            "parts_median": {part: median([p[part] for p in rendered]) for part in ("wait", "tick")},
            "parts_max": {part: max((p[part] for p in rendered), default=None) for part in ("wait", "tick")},
            "during_machine_stalls": [{"ticks": p["ticks"], "stall_ms": p["machine_stall_ms"],
                                       "kinds": p["machine_stall_kinds"]} for p in rendered if p["machine_stall_ms"]],
            "max_without_machine_stalls": max(ran, default=None), "machine": machine}


@contextmanager
def burners(n: int) -> Iterator[None]:
    """`n` CPU-burning processes for the while (the load the timing tests pass beside)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def run(out: Path, priority: int = RT_PRIORITY, steps: int = LATENCY_STEPS, burning: int = 0) -> dict[str, Any]:
    """Every part; `burning`: how many CPU burners run beside it (said in the result)."""
    began = time.monotonic()
    # As the rig runs its arms: every thread (the drivers' bus loops, the simulated servos) at
    # SCHED_FIFO `priority` where permitted, as an `arm_driver` node in its own process and
    # `sim-bus` do (0: the normal policy).
    realtime = request_realtime(priority, whole_process=True)
    kinds = {"grasp": ("grasp", LOAD_LIMIT, True), "grasp_without_follower_force_limit": ("grasp", 0.0, True),
             "push": ("push", LOAD_LIMIT, True), "push_without_follower_collision_hold": ("push", LOAD_LIMIT, False)}
    with tempfile.TemporaryDirectory(prefix="bench_feedback_") as name:
        tmp = Path(name)
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {k: {m: [] for m in MODES} for k in kinds}
        for _repeat in range(REPEATS):
            for key, (kind, limit, hold) in kinds.items():
                for mode in MODES:
                    runs[key][mode].append(scenario(tmp, kind, mode, grip_force_limit=limit, hold=hold))
        # The grasp without the follower's force limit at slower squeezes, `off` against `gripper`,
        # each speed's modes back to back.
        squeezes: dict[float, dict[str, list[dict[str, Any]]]] = {v: {"off": [], "gripper": []} for v in SQUEEZE_RAD_S}
        for _repeat in range(REPEATS):
            for v, by_mode in squeezes.items():
                for mode, done in by_mode.items():
                    done.append(scenario(tmp, "grasp", mode, grip_force_limit=0.0, speed=v))
        # The same at PUSH_RAD_S with other hands, each hand's modes back to back.
        by_hand: dict[str, dict[str, list[dict[str, Any]]]] = {h: {"off": [], "gripper": []} for h in HANDS}
        for _repeat in range(REPEATS):
            for h, by_mode in by_hand.items():
                for mode, done in by_mode.items():
                    done.append(scenario(tmp, "grasp", mode, grip_force_limit=0.0, hand=HANDS[h]))
        # Each seed a start along the free motion, the modes of one seed back to back (paired).
        drag_runs = {mode: [] for mode in MODES}
        for seed in range(DRAG_SEEDS):
            for mode in MODES:
                drag_runs[mode].append(round(drag(tmp, mode, 2.0 * math.pi * seed / DRAG_SEEDS), 4))
        drags = {mode: median(v) for mode, v in drag_runs.items()}
        stiffness = (0.5, 2.0, 20.0)  # Present_Load units per step: a hand ~40x softer than the default to it
        stable = {mode: [stability(tmp, mode, k) for k in stiffness] for mode in ("off", "contact")}
        stable_grasp = {mode: [stability(tmp, mode, k, "grasp") for k in stiffness] for mode in ("off", "gripper")}
        latencies = latency_result(tmp, steps, realtime.priority)
    grasp = {m: summarise(r) for m, r in runs["grasp"].items()}
    grasp_unlimited = {m: summarise(r) for m, r in runs["grasp_without_follower_force_limit"].items()}
    push = {m: summarise(r) for m, r in runs["push"].items()}
    push_unheld = {m: summarise(r) for m, r in runs["push_without_follower_collision_hold"].items()}

    def ratios_of(key: str, mode: str, figure: str) -> dict[str, Any]:
        """The ratio of the medians, and each repeat's (its modes ran back to back)."""
        medians = {"grasp": grasp, "grasp_without_follower_force_limit": grasp_unlimited, "push": push,
                   "push_without_follower_collision_hold": push_unheld}[key]
        each = [ratio(a[figure], b[figure]) for a, b in zip(runs[key][mode], runs[key]["off"], strict=True)]
        return {"median": ratio(medians[mode][figure], medians["off"][figure]), "repeats": each}

    figures = ("peak_load", "time_above_limit_s", "mean_load", "p90_load", "excess_load_s", "mash_rad")
    ratios: dict[str, Any] = {
        "grasp_gripper_vs_off": {f: ratios_of("grasp", "gripper", f) for f in figures},
        "grasp_unlimited_gripper_vs_off": {f: ratios_of("grasp_without_follower_force_limit", "gripper", f)
                                           for f in figures},
        "push_contact_vs_off": {f: ratios_of("push", "contact", f) for f in figures},
        "push_unheld_contact_vs_off": {f: ratios_of("push_without_follower_collision_hold", "contact", f)
                                       for f in figures},
        "drag_gripper_vs_off": ratio(drags["gripper"], drags["off"]),
        "drag_contact_vs_off": ratio(drags["contact"], drags["off"]),
        # Each seed's ratio (its modes ran back to back): the spread.
        "drag_gripper_vs_off_seeds": [ratio(a, b) for a, b in zip(drag_runs["gripper"], drag_runs["off"], strict=True)],
        "drag_contact_vs_off_seeds": [ratio(a, b) for a, b in zip(drag_runs["contact"], drag_runs["off"], strict=True)],
        # The follower's own soft hold (its grip force limit, on by default) against none, per mode:
        # what bounds the grasp's peak, which peaks before an operator can react to what is felt.
        "grasp_peak_with_vs_without_follower_force_limit": {
            m: ratio(grasp[m]["peak_load"], grasp_unlimited[m]["peak_load"]) for m in MODES},
    }
    squeezed = {**{v: {m: summarise(r) for m, r in by_mode.items()} for v, by_mode in squeezes.items()},
                PUSH_RAD_S: grasp_unlimited}
    squeezed_runs = {**squeezes, PUSH_RAD_S: runs["grasp_without_follower_force_limit"]}
    by_speed = [{"rad_s": v, **peak_row(squeezed[v], squeezed_runs[v]),
                 "contact_load": squeezed[v]["gripper"]["first_contact"]["contact_load"],
                 "operator_stopped_ms": squeezed[v]["gripper"]["first_contact"]["operator_stopped"]["ms"]}
                for v in sorted(squeezed)]
    handed = {"firm_hand": grasp_unlimited} | {h: {m: summarise(r) for m, r in by_mode.items()}
                                               for h, by_mode in by_hand.items()}
    handed_runs = {"firm_hand": runs["grasp_without_follower_force_limit"]} | by_hand
    hands = {"firm_hand": Hand()} | HANDS
    by_hand_rows = [{"hand": h, "stiffness": hands[h].stiffness, "limit": hands[h].limit / 1000.0,
                     **peak_row(handed[h], handed_runs[h]),
                     "felt_ms": handed[h]["gripper"]["first_contact"]["felt"]["ms"],
                     "peak_ms": handed[h]["gripper"]["first_contact"]["peak"]["ms"],
                     "time_above_limit_ratio": ratio(handed[h]["gripper"]["time_above_limit_s"],
                                                     handed[h]["off"]["time_above_limit_s"])}
                    for h in handed]
    result: dict[str, Any] = {
        "rate_hz": RATE_HZ, "operator": {"feel": FEEL / 1000.0, "reaction_s": REACTION_S, "push_rad_s": PUSH_RAD_S},
        "load_limit": LOAD_LIMIT, "grasp": grasp, "grasp_without_follower_force_limit": grasp_unlimited,
        "push": push, "push_without_follower_collision_hold": push_unheld, "drag_rms": drags, "stability": stable,
        "stability_grasp": stable_grasp, "ratios": ratios, "grasp_peak_by_squeeze_speed": by_speed,
        "grasp_peak_by_hand": by_hand_rows, "latency": latencies,
        "load_average": load_average(), "burners": burning, "seconds": round(time.monotonic() - began, 1),
        "realtime": {"requested": realtime.requested, "priority": realtime.priority, "refused": realtime.refused},
    }
    unlimited, pushed = ratios["grasp_unlimited_gripper_vs_off"], ratios["push_contact_vs_off"]
    unheld = ratios["push_unheld_contact_vs_off"]

    def halved(figure: dict[str, Any]) -> bool:
        return figure["median"] is not None and figure["median"] <= 0.5

    result["met"] = {
        # The grasp without the follower's own force limit (with it, the follower never presses much).
        "grasp_pressing_time_halved": halved(unlimited["time_above_limit_s"]),
        "grasp_peak_load_halved": halved(unlimited["peak_load"]),
        # The hands whose peak feedback halves at PUSH_RAD_S.
        "grasp_peak_load_halved_with_hands": [r["hand"] for r in by_hand_rows
                                              if r["ratio"] is not None and r["ratio"] <= 0.5],
        # The fastest squeeze whose peak feedback halves (None: none of them).
        "grasp_peak_load_halved_up_to_rad_s": max((s["rad_s"] for s in by_speed
                                                   if s["ratio"] is not None and s["ratio"] <= 0.5), default=None),
        "grasp_mean_load_halved": halved(unlimited["mean_load"]),
        "push_pressing_time_halved": halved(pushed["time_above_limit_s"]),
        "push_peak_load_halved": halved(pushed["peak_load"]),
        "push_mean_load_halved": halved(pushed["mean_load"]),
        "push_excess_load_halved": halved(pushed["excess_load_s"]),
        # The push against a follower whose collision hold does not end the press without feedback.
        "push_unheld_pressing_time_halved": halved(unheld["time_above_limit_s"]),
        "push_unheld_excess_load_halved": halved(unheld["excess_load_s"]),
        "push_contact_without_fault": not (push["contact"]["follower_faults"]
                                           or push_unheld["contact"]["follower_faults"]),
        "drag_within_10_percent": all(r is not None and abs(r - 1.0) <= 0.1 for r in (ratios["drag_gripper_vs_off"],
                                                                                     ratios["drag_contact_vs_off"])),
        # No sustained oscillation: what the leader's pushed joint does above 2 Hz stays within one encoder step.
        "stable": all(s["position_rms_above_2hz_rad"] < RAD_PER_STEP
                      for s in [*stable["contact"], *stable_grasp["gripper"]]),
        "latency_two_ticks": latencies["max"] is not None and latencies["max"] <= 2.0,
        "latency_two_ticks_without_machine_stalls": (latencies["max_without_machine_stalls"] is not None
                                                     and latencies["max_without_machine_stalls"] <= 2.0),
    }
    write_result(out, result)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="where the result goes (default bench/results/feedback.json; with --latency-only, "
                             "stdout alone)")
    parser.add_argument("--priority", type=int, default=RT_PRIORITY,
                        help=f"SCHED_FIFO priority of the bench's threads, where permitted (default {RT_PRIORITY}, "
                             "as the arm drivers run; 0: the normal policy)")
    parser.add_argument("--steps", type=int, default=LATENCY_STEPS,
                        help=f"grasps the latency is measured over, in one rig (default {LATENCY_STEPS})")
    parser.add_argument("--burners", type=int, default=0,
                        help="CPU-burning processes beside the bench for its whole run (default 0)")
    parser.add_argument("--latency-only", action="store_true", help="measure the latency alone")
    parser.add_argument("--tty-workers", action="store_true",
                        help="with --latency-only: the kernel's unbound kworkers (the tty work) at SCHED_FIFO "
                             "one below --priority for the run (root; an experiment: it changes the machine "
                             "while it runs)")
    args = parser.parse_args()
    if args.tty_workers and not args.latency_only:
        parser.error("--tty-workers is an experiment on the latency alone: give --latency-only")
    workers = tty_workers_realtime(max(1, args.priority - 1)) if args.tty_workers else nullcontext([])
    with burners(args.burners), workers as raised:
        if not args.latency_only:
            run(args.out or RESULTS / "feedback.json", args.priority, args.steps, args.burners)
        else:
            realtime = request_realtime(args.priority, whole_process=True)
            with tempfile.TemporaryDirectory(prefix="bench_feedback_") as name:
                result = {"latency": latency_result(Path(name), args.steps, realtime.priority),
                          "realtime": {"requested": realtime.requested, "priority": realtime.priority,
                                       "refused": realtime.refused}, "load_average": load_average(),
                          "burners": args.burners, "tty_workers_raised": len(raised)}
            if args.out is None:
                print(json.dumps(result, indent=2))
            else:
                write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
