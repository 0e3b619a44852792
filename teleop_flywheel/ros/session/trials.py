"""Walking an evaluation protocol on a live session: with an operator, or unattended in the simulator.

`teleop-flywheel run rollout --protocol eval.yaml` puts the protocol on the operator's
terminal: which condition is next and how to reset for it, start, then the outcome (success,
or failure with one of the protocol's failure labels); the time limit ends a trial as a
`timeout` failure, and where the protocol forbids interventions a takeover (which always
works: safety first) ends it as an `intervened` failure. `teleop-flywheel run sim --protocol
eval.yaml --unattended` runs the same walk on simulated hardware with nobody at the keys: each
trial's checkpoint — any policy the policy node can load, a LeRobot checkpoint included — runs
under its condition's simulated world (`sim:` start pose, camera latency, encoder noise), and
the protocol's machine check judges it on the follower's final state as the bag recorded it.
Both go through `TrialDriver`, so an attended and an unattended trial differ only in who
decides the outcome. One bag per trial, carrying the protocol hash, the condition and the
checkpoint; when the walk ends, the results table is printed.
"""
from __future__ import annotations

import json
import os
import select
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from teleop_flywheel.core.clock import now_ns, to_ros_ns
from teleop_flywheel.core.files import replace_atomic
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.core.topics import (
    FOLLOWER_COMMAND,
    FOLLOWER_STATE,
    INTERVENTION,
    POLICY_COMMAND,
    RESET,
    arm_fault,
)
from teleop_flywheel.evaluation.errors import ProtocolError
from teleop_flywheel.evaluation.protocol import Condition, Protocol, ProtocolWalker, Slot, TrialRecord
from teleop_flywheel.evaluation.report import final_follower_pose, read_trial
from teleop_flywheel.hw.feetech.sim import WORLD_POLL_S
from teleop_flywheel.hw.pedal.virtual import VirtualPedal
from teleop_flywheel.ros.errors import InterfaceError
from teleop_flywheel.ros.nodes.recorder_client import RecorderClient
from teleop_flywheel.ros.session.clients import ParameterClient, PolicyClient, RecorderStatus

READY_S = 30.0  # how long the walk waits for the recorder to find every stream before the first trial
HOLD_S = 1.0  # unattended: a follower within the machine check's tolerance this long ends the trial
RESET_SPEED_RAD_S = 1.0  # the move to a condition's start pose (under the rig's 2 rad/s bound)
RESET_TIMEOUT_S = 20.0  # how long the follower may take to reach a start pose
RESET_CHECKPOINT = "sim-reset"  # the tag of the commands that move the follower to a start pose
SETTLE_STEP_S = 0.05
STILL_S = 0.3
START_TOLERANCE_RAD = 0.15  # where a follower at rest may be from its start pose (gravity sags it <= 0.07)
REDO_LIMIT = 3  # unattended: how often a trial is redone that could not be judged (finish_judged)
SPAN_MARGIN_S = 0.5  # unattended: a trial ends early no sooner than this past the validator's shortest episode
LABEL_AFTER_S = 0.3  # unattended takeover: the scripted operator presses the trigger label this long after the pedal
VERDICT_WAIT_S = 120.0  # unattended: how long the walk waits for the validator's verdicts on its bags


def _recorded_wall_ns(bag: Path) -> int:
    """When a trial was recorded, on the wall clock (monotonic time does not survive a reboot)."""
    from teleop_flywheel.recording.mcap.reader import open_bag

    meta = open_bag(bag).episode
    return int((meta.clock_start or {}).get("wall_ns", 0)) if meta else 0


class TrialDriver:
    """One trial at a time on a running `supervisor.Session`, over the nodes' ROS interfaces: the
    checkpoint on the policy node (its parameters), protocol fields and outcome on the recorder,
    interventions and the follower's pose watched."""

    def __init__(self, session: Any, protocol: Protocol) -> None:
        from diagnostic_msgs.msg import DiagnosticStatus
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String
        from std_srvs.srv import Trigger

        from teleop_flywheel.ros.nodes.common import CONTROL_QOS, LATCHED_QOS, STREAM_QOS

        names = set(session.node_names)
        if not {"policy", "recorder"} <= names:
            raise ProtocolError(f"{protocol.path}: an evaluation needs a session with a policy and a recorder "
                                f"(kind rollout or sim), got nodes {sorted(names)}")
        self.session = session
        self.protocol = protocol
        self.walker = ProtocolWalker(protocol)
        self.started_with = dict(session.graph.node("policy").parameters)  # what the policy node was given
        self.client = RecorderClient(session.context, "protocol_operator")
        self.policy = PolicyClient(self.client.node)
        self.status = RecorderStatus(self.client.node)
        self._pose: list[float] | None = None
        self._latest: dict[str, list[float]] = {}  # the newest policy and follower commands
        self._events: dict[int, dict[str, Any]] = {}
        self._t0_ns = 0
        self.slot: Slot | None = None
        self.bags: list[Path] = []
        # What `apply_world` varies: the synthetic cameras' latency, the follower simulator's world file.
        self.cameras = [ParameterClient(self.client.node, n.fully_qualified_name)
                        for n in session.graph.nodes if n.executable == "camera"]
        self.world = next((Path(a.world) for a in session.graph.sim_arms if a.role == "follower" and a.world), None)
        self._world_now: dict[str, float] | None = None
        self._moves = 0
        self._pedal: VirtualPedal | None = None  # the scripted operator's, opened at its first takeover
        # Each arm's latched hold (`<role>/fault`) and its driver's `~/reset`: an unattended walk is
        # the operator who resets an arm a servo fault held (`reset_held_arms`).
        self._faults: dict[str, Any] = {}
        self._resets: dict[str, Any] = {
            str(n.parameters.get("role")): self.client.node.create_client(Trigger, f"{n.fully_qualified_name}/{RESET}")
            for n in session.graph.nodes if n.executable == "arm_driver"}
        for role in self._resets:
            self.client.node.create_subscription(DiagnosticStatus, arm_fault(role),
                                                 lambda m, r=role: self._on_fault(r, m), LATCHED_QOS)
        self.disagreement = ""  # why the last trial judged unattended was discarded (finish_judged)
        self.client.node.create_subscription(JointState, FOLLOWER_STATE, self._on_pose, STREAM_QOS)
        for topic in (POLICY_COMMAND, FOLLOWER_COMMAND):
            self.client.node.create_subscription(JointState, topic, lambda m, t=topic: self._on_command(t, m),
                                                 CONTROL_QOS)
        self.client.node.create_subscription(String, INTERVENTION, self._on_event, LATCHED_QOS)
        session.add_node(self.client.node)
        if not self.client.ready(30.0):
            raise ProtocolError("the recorder's services did not come up within 30 s")
        try:  # a trial's bag must hold every stream from its start
            self.status.wait_all_topics(READY_S)
        except InterfaceError as exc:
            print(f"run: warning: {exc}; still missing: {(self.status.latest or {}).get('missing_topics')}",
                  file=sys.stderr, flush=True)

    def duration_range(self) -> tuple[float, float]:
        """The episode spans (seconds) the recorder's verdict accepts: its thresholds file, the
        session's task spec where it states a duration. A trial outside is DURATION_OUT_OF_RANGE
        whatever its checkpoint did."""
        from teleop_flywheel.core.task_spec import parse_task_spec
        from teleop_flywheel.data.validate.reasons import ValidateConfig
        from teleop_flywheel.data.validate.task_checks import spec_config

        params = self.session.graph.node("recorder").parameters
        content = str(params.get("task_spec") or "")
        spec = parse_task_spec(json.loads(content), "task_spec") if content else None
        cfg = spec_config(ValidateConfig.load(str(params.get("validate_config") or "") or None), spec)
        return cfg.min_duration_s, cfg.max_duration_s

    def reset_held_arms(self, log: Callable[[str], None]) -> None:
        """Between unattended trials: reset every arm a servo fault holds (its driver's `~/reset`,
        what the operator does at the console) and wait until its hold is off. The trial it
        happened in keeps its SERVO_FAULT verdict; the walk goes on instead of stopping at the next
        start pose (a starved simulator misses a reply on a loaded machine)."""
        from diagnostic_msgs.msg import DiagnosticStatus

        from teleop_flywheel.ros.session.clients import trigger

        held = {role: m.message for role, m in list(self._faults.items()) if m.level == DiagnosticStatus.ERROR}
        for role, why in held.items():
            log(f"  the {role} arm is held ({why}): reset, as an operator would")
            trigger(self._resets[role])
        deadline = time.monotonic() + RESET_TIMEOUT_S
        while held and any(self._faults[r].level == DiagnosticStatus.ERROR for r in held):
            if time.monotonic() > deadline:
                raise ProtocolError(f"{self.protocol.path}: the {', '.join(held)} arm(s) still held "
                                    f"{RESET_TIMEOUT_S:g} s after a reset (their diagnostics say why)")
            time.sleep(SETTLE_STEP_S)

    def pedal(self, down: bool, label: str = "") -> None:
        """The scripted operator's foot on the simulator's pedal (the pedal node's FIFO): down or up,
        then the trigger label, as the demo's operator presses them."""
        if self._pedal is None:
            fifo = self.session.graph.pedal_fifo
            if not fifo:
                raise ProtocolError(f"{self.protocol.path}: a condition scripts a takeover, and this session has no "
                                    "simulated pedal (kind sim)")
            self._pedal = VirtualPedal(fifo)
        if label:
            self._pedal.label(label)
        else:
            self._pedal.takeover(down)

    def scratch(self) -> Path:
        """A directory of this walk's own files (unattended trials' policy files), inside the
        session's directory: it goes when the session stops."""
        path = Path(self.session.dir) / "walk"
        path.mkdir(exist_ok=True)
        return path

    def apply_world(self, condition: Condition) -> None:
        """Put a condition's simulated world in place before its trial: the follower simulator's
        encoder noise, the synthetic cameras' latency, then the follower driven to the start pose
        (the scripted policy, tagged `sim-reset`, while nothing records)."""
        world = condition.sim
        wanted = {"joint_noise_rad": world.joint_noise_rad, "camera_latency_ms": world.camera_latency_ms}
        if wanted != self._world_now:
            if self.world is None:
                raise ProtocolError(f"{self.protocol.path}: condition {condition.name!r} sets the simulator, and "
                                    "this session has no simulated follower (kind sim)")
            replace_atomic(self.world, json.dumps({"joint_noise_rad": world.joint_noise_rad}) + "\n")
            for camera in self.cameras:
                camera.set(latency_ms=world.camera_latency_ms)
            time.sleep(2 * WORLD_POLL_S)  # the simulator has read its world file
            self._world_now = wanted
        if world.start_pose is not None:
            self.move_to(world.start_pose, condition.name, still_rad=0.003 + 4 * world.joint_noise_rad)

    def move_to(self, pose: tuple[float, ...], what: str, still_rad: float) -> None:
        """Drive the follower to `pose` (radians) at `RESET_SPEED_RAD_S` and wait until it rests
        there (no joint moving more than `still_rad` per `SETTLE_STEP_S` for `STILL_S`)."""
        here = self._pose
        distance = max(abs(a - b) for a, b in zip(here, pose, strict=True)) if here is not None else 1.0
        self._moves += 1
        path = self.scratch() / f"start_pose_{self._moves}.yaml"
        path.write_text(yaml.safe_dump({"waypoints": [list(pose)], "move_s": max(0.3, distance / RESET_SPEED_RAD_S)}))
        self.policy.swap(policy="scripted", policy_args=str(path), checkpoint_id=RESET_CHECKPOINT)
        self.policy.reset()
        # There once the policy commands the pose and the follower has stopped moving: where it
        # rests (gravity sags the shoulder and elbow a little) is the trial's true start state.
        deadline = time.monotonic() + RESET_TIMEOUT_S
        goal = np.asarray(pose)
        still_since: float | None = None
        previous = self._pose
        while True:
            time.sleep(SETTLE_STEP_S)
            now, current, commanded = time.monotonic(), self._pose, self._latest.get(POLICY_COMMAND)
            moved = (current is None or previous is None
                     or float(np.max(np.abs(np.asarray(current) - previous))) > still_rad)
            there = commanded is not None and float(np.max(np.abs(np.asarray(commanded) - goal))) <= 1e-3
            previous = current
            still_since = None if moved or not there else (now if still_since is None else still_since)
            if still_since is not None and now - still_since >= STILL_S:
                off = float(np.max(np.abs(np.asarray(current) - goal)))
                if off > START_TOLERANCE_RAD:  # commanded there and still, yet elsewhere: the arm holds
                    raise ProtocolError(f"{self.protocol.path}: condition {what!r}: the follower rests {off:.2f} rad "
                                        f"from its start_pose, commanded there (an arm held by a fault? its "
                                        "diagnostics say why)")
                return
            if now > deadline:
                raise ProtocolError(f"{self.protocol.path}: condition {what!r}: the follower did not come to rest "
                                    f"at its start_pose within {RESET_TIMEOUT_S:g} s (last pose {current})")

    def resume(self, bag_dir: Path) -> int:
        """Count the trials of this protocol already recorded in `bag_dir` as done (their
        slots, per checkpoint × condition in recording order), so an afternoon's walk continues
        where the morning's stopped. Returns how many were taken over."""
        from teleop_flywheel.evaluation.errors import EvalError
        from teleop_flywheel.recording.mcap.exceptions import BagReadError

        found = []
        for d in sorted(p for p in bag_dir.iterdir() if p.is_dir()) if bag_dir.is_dir() else []:
            try:
                t = read_trial(d)
            except (BagReadError, EvalError):
                continue
            if t.protocol_hash == self.protocol.hash and t.outcome in ("success", "failure"):
                found.append((_recorded_wall_ns(d), t))
        counts: dict[tuple[str, str], int] = {}
        for _t0, t in sorted(found, key=lambda x: x[0]):
            k = counts[t.checkpoint, t.condition] = counts.get((t.checkpoint, t.condition), 0) + 1
            slot = Slot(t.checkpoint, t.condition, k)
            if slot in self.walker.plan():
                self.walker.done.append(TrialRecord(slot, t.outcome, t.failure_label, t.interventions))
                self.bags.append(Path(t.bag))
        return len(self.walker.done)

    def _on_pose(self, msg: Any) -> None:
        by_name = dict(zip(msg.name, msg.position, strict=False))
        if all(n in by_name for n in JOINT_NAMES):
            self._pose = [float(by_name[n]) for n in JOINT_NAMES]

    def _on_command(self, topic: str, msg: Any) -> None:
        by_name = dict(zip(msg.name, msg.position, strict=False))
        if all(n in by_name for n in JOINT_NAMES):
            self._latest[topic] = [float(by_name[n]) for n in JOINT_NAMES]

    def _on_fault(self, role: str, msg: Any) -> None:
        self._faults[role] = msg

    def _on_event(self, msg: Any) -> None:
        event = json.loads(msg.data)
        self._events[int(event["id"])] = event

    def pose(self) -> list[float] | None:
        return self._pose

    def interventions(self) -> int:
        """Takeovers during the running trial, including one already held when it started (the
        recorder stores every takeover that overlaps the episode; the walk counts the same)."""
        if self.slot is None:
            return 0
        t0 = to_ros_ns(self._t0_ns)  # event times are ROS time
        return sum(1 for e in list(self._events.values()) if e["end_ns"] is None or e["end_ns"] >= t0)

    def elapsed_s(self) -> float:
        return (now_ns() - self._t0_ns) / 1e9 if self.slot else 0.0

    def prepare(self, slot: Slot, policy_args: str | None = None) -> None:
        """Put the slot's checkpoint on the policy node (swapping what it runs if it runs
        something else; `policy_args` overrides the checkpoint's) and the protocol's fields on
        the recorder."""
        spec = self.protocol.checkpoint(slot.checkpoint)
        wanted = {"checkpoint_id": spec.id}
        if spec.policy:
            wanted["policy"] = spec.policy
        if policy_args is not None or spec.policy_args:
            wanted["policy_args"] = policy_args if policy_args is not None else spec.policy_args
        current = self.policy.current()
        if any(current.get(k) != v for k, v in wanted.items()):
            try:
                self.policy.swap(**wanted)
            except InterfaceError as exc:  # a checkpoint that cannot load
                raise ProtocolError(f"{self.protocol.path}: checkpoint {spec.id}: the policy node cannot run it "
                                    f"({exc}); the running policy is unchanged") from exc
        self.client.set(**self.walker.trial_metadata(slot))

    def start(self, slot: Slot) -> None:
        if slot != self.walker.next_slot():
            raise ProtocolError(f"{self.protocol.path}: {slot} is not the next planned trial")
        self._t0_ns = now_ns()  # before the recorder's start: the trial's window covers the bag's
        self.client.call("start")
        # The checkpoint (swapped in by `prepare`, idle until now) starts once the bag records: its
        # first recorded follower state is the start pose, not wherever the policy had driven it.
        self.policy.reset()
        self.slot = slot

    def finish(self, outcome: str, failure_label: str = "") -> tuple[Path, str]:
        """Set the outcome, close the bag, enter the trial; returns (bag, machine-check verdict)."""
        slot, interventions, bag, verdict = self._close(outcome, failure_label)
        self._enter(slot, outcome, failure_label, interventions, bag)
        return bag, verdict

    def finish_judged(self) -> tuple[Path, str] | None:
        """Unattended: the machine check decides the outcome from the last follower state seen,
        the bag closes, and the check is run again on the follower's final state as the bag
        recorded it. They agree: the trial is entered, (bag, verdict) returned. They disagree (the
        follower crossed the tolerance between the last sample seen and the stop), or the bag holds
        no follower state to judge (every read lost a servo: the arm, not the checkpoint, failed):
        the bag is moved to discarded/, `disagreement` says why and None is returned — the same
        slot comes up again."""
        check = self.protocol.machine_check
        if check is None:
            raise ProtocolError(f"{self.protocol.path}: no success.machine_check to judge the trial")
        passed, _why = check.judge(self._pose)
        outcome, label = ("success", "") if passed else ("failure", check.failure_label)
        slot, interventions, bag, verdict = self._close(outcome, label)
        recorded = final_follower_pose(bag)
        if recorded is None or check.judge(recorded)[0] != passed:
            self.client.call("discard")  # the last one stopped: moved to discarded/
            self.disagreement = (f"the recorded final state disagrees with the last one seen (the follower moved at "
                                 f"the stop: seen {self._pose}, recorded {recorded})" if recorded is not None else
                                 "its bag recorded no follower state with every joint (servos that stopped answering: "
                                 "the follower arm's diagnostics say why)")
            return None
        self._enter(slot, outcome, label, interventions, bag)
        return bag, verdict

    def _close(self, outcome: str, failure_label: str) -> tuple[Slot, int, Path, str]:
        """Label the running trial and stop its bag: (slot, interventions, bag, machine-check verdict)."""
        if self.slot is None:
            raise ProtocolError("no trial is running")
        verdict = ""
        if self.protocol.machine_check is not None:
            passed, why = self.protocol.machine_check.judge(self._pose)
            verdict = f"{'pass' if passed else 'fail'}: {why}"
        # Checked before anything is written, so a refused entry leaves the bag open to fix.
        probe = ProtocolWalker(self.protocol, list(self.walker.done))
        probe.record(self.slot, outcome, failure_label, self.interventions())
        self.client.label(outcome=outcome, failure_label=failure_label, machine_check=verdict,
                          attempts=1 if outcome == "success" else 0)
        before = self.status.last_saved()
        self.client.call("stop")
        slot, interventions = self.slot, self.interventions()
        self.slot = None
        return slot, interventions, Path(self.status.saved_after(before)), verdict

    def _enter(self, slot: Slot, outcome: str, failure_label: str, interventions: int, bag: Path) -> None:
        self.walker.record(slot, outcome, failure_label, interventions)
        self.bags.append(bag)

    def verdicts(self, timeout_s: float) -> list[str]:
        """Wait for the recorder's validator to judge this walk's bags (its worker runs at low
        priority; a session stopped before it answers leaves them unjudged); lines naming the bags it
        rejected, or saying it did not answer in time."""
        from teleop_flywheel.recording.recorder.verdict import PENDING

        names = {bag.name for bag in self.bags}

        def judged(status: dict[str, Any]) -> bool:
            seen = {v["episode"]: v for v in status.get("verdicts", [])}
            return all(name in seen and seen[name]["verdict"] != PENDING for name in names if name in seen)

        try:
            status = self.status.wait(judged, timeout_s, "the validator's verdicts on the walk's bags")
        except InterfaceError as exc:
            return [f"warning: {exc}; the bags' verdict.json files are written when it answers"]
        return [f"validator: trial bag {v['episode']} FAILED {' '.join(v['codes'])}: its outcome still counts; "
                "look at its verdict.json before trusting the table" for v in status.get("verdicts", [])
                if v["episode"] in names and v["verdict"] == "FAIL"]

    def discard(self) -> None:
        """Throw the running trial away (bag deleted); the same slot comes up again."""
        if self.slot is not None:
            self.client.call("discard")
            self.slot = None

    def close(self) -> None:
        try:
            if self._pedal is not None:
                self._pedal.takeover(False)
                self._pedal.close()
            self.discard()
        except RuntimeError as exc:  # the recorder is gone (the session is stopping anyway)
            print(f"run: the running trial could not be discarded: {exc}", file=sys.stderr, flush=True)
        finally:
            self.session.remove_node(self.client.node)


# -- unattended (simulator) ---------------------------------------------------------------------------

def run_unattended(driver: TrialDriver, stop: threading.Event, log: Callable[[str], None] = print) -> None:
    """The whole protocol with nobody at the keys (sim sessions only): each trial's condition put
    in place (`TrialDriver.apply_world`), its checkpoint run for the time limit — or until the
    follower has held within the machine check's tolerance for `HOLD_S`, once the trial is long
    enough for the validator (`TrialDriver.duration_range`) and any scripted takeover
    (`Takeover`: pedal down, label, pedal up) is over — and judged by the machine check on the
    recorded final state. `stop` ends it (a trial under way is discarded)."""
    p = driver.protocol
    check = p.machine_check
    if check is None:
        raise ProtocolError(f"{p.path}: an unattended run needs success.machine_check to judge its trials")
    shortest, longest = driver.duration_range()
    if not shortest + SPAN_MARGIN_S <= p.time_limit_s <= longest:
        raise ProtocolError(f"{p.path}: time_limit_s {p.time_limit_s:g} does not fit the episode spans the "
                            f"recorder's validator accepts, [{shortest:g}, {longest:g}] s (less {SPAN_MARGIN_S:g} s "
                            "at the short end): every trial would be DURATION_OUT_OF_RANGE")
    if any(c.sim_failure_rate is not None for c in p.conditions):
        log("note: sim_failure_rate is the statistics demo of `eval --simulate` (drawn outcomes); here every "
            "trial is judged by what its checkpoint did")
    redone: dict[Slot, int] = {}
    while (slot := driver.walker.next_slot()) is not None and not stop.is_set():
        driver.reset_held_arms(log)
        driver.apply_world(p.condition(slot.condition))
        driver.prepare(slot)
        log(driver.walker.reset_prompt(slot))
        driver.start(slot)
        t0 = time.monotonic()
        takeover = p.condition(slot.condition).sim.takeover
        operator = [] if takeover is None else [(takeover.at_s, True, ""),
                                                (takeover.at_s + LABEL_AFTER_S, True, takeover.label),
                                                (takeover.end_s, False, "")]
        earliest_end = max(shortest + SPAN_MARGIN_S, takeover.end_s if takeover else 0.0)
        held_since: float | None = None
        while not stop.is_set() and (now := time.monotonic()) < t0 + p.time_limit_s:
            while operator and now >= t0 + operator[0][0]:
                _at, down, label = operator.pop(0)
                driver.pedal(down, label)
            if check.judge(driver.pose())[0] and not operator:
                held_since = now if held_since is None else held_since
                if now - held_since >= HOLD_S and now - t0 >= earliest_end:
                    break
            else:
                held_since = None
            time.sleep(0.02)
        for _at, down, label in operator:  # a starved loop reached the time limit first: hand back before the stop
            driver.pedal(down, label)
        if stop.is_set():
            driver.discard()
            return
        judged = driver.finish_judged()
        if judged is None:
            redone[slot] = redone.get(slot, 0) + 1
            if redone[slot] > REDO_LIMIT:
                raise ProtocolError(f"{p.path}: trial {slot}: discarded {REDO_LIMIT + 1} times, the last because "
                                    f"{driver.disagreement}")
            log(f"  -> {driver.disagreement}: trial discarded, run again")
            continue
        bag, verdict = judged
        log(f"  -> {'success' if verdict.startswith('pass') else 'failure'} ({verdict}); bag {bag.name}")
    for line in driver.verdicts(VERDICT_WAIT_S):
        log(line)


# -- attended (operator console) ----------------------------------------------------------------------

def _screen(driver: TrialDriver, mode: str, message: str, status: list[str]) -> list[str]:
    p, w = driver.protocol, driver.walker
    done, total = w.progress()
    lines = [f"evaluation protocol {p.name} (hash {p.hash}) — {done}/{total} trials done", ""]
    slot = w.next_slot()
    if mode == "idle" and slot is not None:
        lines += [w.reset_prompt(slot), "", "keys: s start the trial   space take over/hand back   1-5 trigger label   "
                  "q quit (the protocol stays incomplete)"]
    elif mode == "running" and driver.slot is not None:
        lines += [f"TRIAL RUNNING: checkpoint {driver.slot.checkpoint}, condition {driver.slot.condition}, "
                  f"trial {driver.slot.index}: {driver.elapsed_s():5.1f} / {p.time_limit_s:g} s, "
                  f"interventions {driver.interventions()}"
                  + ("" if p.interventions_allowed else " (NOT allowed: a takeover ends the trial as a failure)"),
                  "", "keys: y success   n failure   x discard and redo   space take over/hand back   "
                  "1-5 trigger label   q discard and quit"]
    elif mode == "label":
        lines += ["failure: why? " + "  ".join(f"{i + 1}={lb}" for i, lb in enumerate(p.failure_labels)),
                  "keys: a digit picks the label   b back to the running trial"]
    if message:
        lines += ["", f"> {message}"]
    return lines + ["", *status]


def run_attended(driver: TrialDriver, console: Any, fd: int, write: Callable[[str], None],
                 stop: threading.Event, refresh_s: float = 0.2) -> None:
    """The operator's loop on terminal `fd` (cbreak mode set by the caller). `console` is a
    `console.ConsoleNode` for the live status, the space-bar pedal and trigger labels. A trial
    still running when `stop` is set (Ctrl-C, SIGTERM) is discarded: without an outcome it is no trial."""
    p = driver.protocol
    mode, message = "idle", ""
    while driver.walker.next_slot() is not None and not stop.is_set():
        if mode == "running" and driver.slot is not None:  # not while the operator picks a failure label
            if driver.elapsed_s() >= p.time_limit_s:
                bag, verdict = driver.finish("failure", "timeout")
                mode, message = "idle", f"time limit {p.time_limit_s:g} s reached: failure (timeout), {bag.name}"
            elif not p.interventions_allowed and driver.interventions():
                bag, verdict = driver.finish("failure", "intervened")
                mode, message = (
                    "idle",
                    f"intervention in a protocol that forbids them: failure (intervened), {bag.name}",
                )
        columns = os.get_terminal_size(fd).columns if os.isatty(fd) else 0
        lines = _screen(driver, mode, message, console.state.render(columns or 100, keys=False))
        write("\x1b[H\x1b[2J" + "\r\n".join(line[: columns or 100] for line in lines) + "\r\n")
        ready, _, _ = select.select([fd], [], [], refresh_s)
        if not ready:
            continue
        key = os.read(fd, 1).decode(errors="replace")
        try:
            if mode != "label" and (key == " " or key.isdigit()):
                from teleop_flywheel.ros.session.console_view import KEYS

                if key in KEYS:  # the terminal pedal and trigger labels work between trials too
                    console.act(*KEYS[key])
            elif mode == "idle":
                if key == "s" and (slot := driver.walker.next_slot()) is not None:
                    driver.prepare(slot)
                    driver.start(slot)
                    mode, message = "running", "recording"
                elif key == "q":
                    return
            elif mode == "running":
                if key == "y":
                    bag, verdict = driver.finish("success")
                    mode, message = "idle", f"success, {bag.name}" + (f"; machine check {verdict}" if verdict else "")
                elif key == "n":
                    mode, message = "label", ""
                elif key == "x":
                    driver.discard()
                    mode, message = "idle", "trial discarded: the same trial comes up again"
                elif key == "q":
                    driver.discard()
                    return
            elif mode == "label":
                if key == "b":
                    mode = "running"
                elif key.isdigit() and 1 <= int(key) <= len(p.failure_labels):
                    label = p.failure_labels[int(key) - 1]
                    bag, verdict = driver.finish("failure", label)
                    mode, message = (
                        "idle",
                        f"failure ({label}), {bag.name}" + (f"; machine check {verdict}" if verdict else ""),
                    )
        except (ProtocolError, RuntimeError) as exc:
            message = f"refused: {exc}"
