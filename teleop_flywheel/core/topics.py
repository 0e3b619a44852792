"""Every topic and service name of the project, once.

Rig names are **relative** (no leading `/`): a node resolves them inside its namespace, so a rig
started with `namespace:=rig_a` publishes `/rig_a/leader/joint_states`, and two rigs share one ROS
domain without seeing each other's streams. Without a namespace they resolve to `/leader/…` as
before. `/diagnostics`, `/tf` and `/tf_static` stay global (ROS conventions: one diagnostics
aggregator, frames told apart by prefix).

A bag records fully qualified names (`/rig_a/leader/joint_states`) and its episode metadata the
namespace; the reader strips it, so the data engine and `config/validate.yaml` see the rig's
streams as `/leader/joint_states` whatever rig recorded them (`core/bag_topics.py` holds those
names).
"""
from __future__ import annotations

import re

LEADER_STATE = "leader/joint_states"  # rad; stamp = bus arrival − wire time
FOLLOWER_STATE = "follower/joint_states"  # rad; stamp = bus arrival − wire time
LEADER_COMMAND = "leader/joint_command"  # empty = release the leader's torque
# What the leader rendered to the hand (docs/teleop.md "Force feedback"), once per leader tick.
LEADER_FEEDBACK = "leader/feedback"  # position goal − present (rad), effort Torque_Limit/1000; 0 not rendering
FOLLOWER_COMMAND = "follower/joint_command"  # the command actually sent: the dataset's action
POLICY_COMMAND = "policy/joint_command"  # header.frame_id = checkpoint id
POLICY_INFERENCE = "policy/inference"  # name [inference_ms, period_ms, late] per action; stamp = when it was available
AUTHORITY = "teleop/authority"  # name [alpha, mode, intervention_id, trigger], values in position; every tick
AUTHORITY_FIELDS = ("alpha", "mode", "intervention_id", "trigger")  # authority names; mode, trigger: labels codes
INTERVENTION = "teleop/intervention"  # one JSON event per takeover start, end and label change
PEDAL_JOY = "pedal/joy"  # buttons[0] takeover, [1..5] trigger labels, none = pedal lost; stamp = kernel event time
PEDAL_FRAME = "pedal"  # frame_id of the pedal node's edges (stamp: the kernel's event time)
PEDAL_HEARTBEAT_FRAME = "pedal_heartbeat"  # its last state again at 10 Hz (stamp: when sent)
TELEOP_FAULT = "teleop/fault"  # DiagnosticStatus, latched, on change: what holds the follower (OK: nothing)
CAMERA_PREFIX = "cameras/"  # cameras/<name>/image/compressed: JPEG; stamp = capture time
# Global by ROS convention, in every namespace.
DIAGNOSTICS = "/diagnostics"  # every node: rates, drops, bus errors, temperatures
TF = "/tf"
TF_STATIC = "/tf_static"


def arm_state(role: str) -> str:
    """`<role>/joint_states` (role: leader | follower)."""
    return f"{role}/joint_states"


def arm_command(role: str) -> str:
    """`<role>/joint_command` (role: leader | follower)."""
    return f"{role}/joint_command"


def arm_fault(role: str) -> str:
    """`<role>/fault` (diagnostic_msgs/DiagnosticStatus, latched): the arm's hold — a servo fault or
    an e-stop — as it begins and ends (level ERROR/WARN while held, OK once reset)."""
    return f"{role}/fault"


def camera_image(name: str) -> str:
    """`cameras/<name>/image/compressed`."""
    return f"{CAMERA_PREFIX}{name}/image/compressed"


def camera_name(topic: str) -> str | None:
    """The camera name of a camera image topic (relative or namespace-stripped), else None."""
    topic = topic.lstrip("/")
    if topic.startswith(CAMERA_PREFIX) and topic.endswith("/image/compressed"):
        return topic[len(CAMERA_PREFIX):-len("/image/compressed")]
    return None


# What a session records (cameras are added per session).
LEADER_FAULT = arm_fault("leader")
FOLLOWER_FAULT = arm_fault("follower")
# Latched states: the message in force when an episode starts is recorded with it, so an episode
# begun while an arm holds for a servo fault carries that fault, however long ago it was published.
STATE_TOPICS = (LEADER_FAULT, FOLLOWER_FAULT)
RECORDED = (LEADER_STATE, FOLLOWER_STATE, FOLLOWER_COMMAND, LEADER_COMMAND, LEADER_FEEDBACK, POLICY_COMMAND,
            POLICY_INFERENCE, AUTHORITY, INTERVENTION, PEDAL_JOY, LEADER_FAULT, FOLLOWER_FAULT, DIAGNOSTICS)

# Nodes whose services other nodes call (relative: `recorder` in a namespaced rig is
# `/<namespace>/recorder`), and their services (relative to the node: `~/start`).
RECORDER_NODE = "recorder"
TELEOP_NODE = "teleop"
RECORDER_START, RECORDER_STOP, RECORDER_DISCARD, RECORDER_STATUS = "start", "stop", "discard", "status"
# Outcome, attempts, failure_label, machine_check of the episode being recorded (rcl_interfaces/SetParameters).
RECORDER_LABEL = "label_episode"
SET_POLICY_MODE = "set_policy_mode"
# The e-stop and its reset, on the teleop node and on each arm driver (std_srvs/Trigger, relative to the node).
ESTOP, RESET = "estop", "reset"


def label_service(label: str) -> str:
    """The teleop node's service that labels the current intervention with a trigger label:
    `label/<label>`."""
    return f"label/{label}"


# -- namespaces ------------------------------------------------------------------------------------
_TOKEN = r"[A-Za-z_][A-Za-z0-9_]*"


def normalize_namespace(namespace: str) -> str:
    """`rig_a`, `/rig_a` or `/lab/rig_a/` → `/rig_a` / `/lab/rig_a`; empty or `/` → "" (none).
    ValueError for anything ROS would refuse (tokens of letters, digits and `_`, not starting with
    a digit; no `//`, `~` or spaces)."""
    text = namespace.strip().strip("/")
    if not text:
        return ""
    if not re.fullmatch(rf"{_TOKEN}(/{_TOKEN})*", text):
        raise ValueError(f"namespace {namespace!r} is not a ROS namespace: tokens of letters, digits and '_' "
                         "separated by '/', none starting with a digit")
    return "/" + text


def is_ros_name(name: object) -> bool:
    """A fully qualified or relative ROS name (`/rig_a/leader/joint_states`): tokens of letters,
    digits and `_`, none starting with a digit, separated by single `/`; at most 256 characters.
    What a bag's stream names must be: nothing else (`..`, `~`, a NUL, a look-alike) gets through."""
    return isinstance(name, str) and len(name) <= 256 and re.fullmatch(rf"/?{_TOKEN}(/{_TOKEN})*", name) is not None


def qualify(name: str, namespace: str = "") -> str:
    """The fully qualified name of `name` in `namespace` (absolute names are left as they are)."""
    if name.startswith("/"):
        return name
    return f"{normalize_namespace(namespace)}/{name}"


def strip_namespace(name: str, namespace: str) -> str:
    """A fully qualified name with the rig's namespace removed: `/rig_a/leader/joint_states` →
    `/leader/joint_states`; a name outside the namespace (`/diagnostics`) is returned unchanged."""
    ns = normalize_namespace(namespace)
    if ns and name.startswith(ns + "/"):
        return name[len(ns):]
    return name
