"""Every topic and service name of the project, once.

Nodes, the recorder, the session graph, the data engine and the tests all take names from here,
so a rename is one line and a recorded bag's topics always match what the engine looks for.
"""
from __future__ import annotations

LEADER_STATE = "/leader/joint_states"
FOLLOWER_STATE = "/follower/joint_states"
LEADER_COMMAND = "/leader/joint_command"  # empty = release the leader's torque
FOLLOWER_COMMAND = "/follower/joint_command"  # the command actually sent: the dataset's action
POLICY_COMMAND = "/policy/joint_command"  # header.frame_id = checkpoint id
AUTHORITY = "/teleop/authority"
INTERVENTION = "/teleop/intervention"
PEDAL_JOY = "/pedal/joy"
DIAGNOSTICS = "/diagnostics"
CAMERA_PREFIX = "/cameras/"


def arm_state(role: str) -> str:
    """`/<role>/joint_states` (role: leader | follower)."""
    return f"/{role}/joint_states"


def arm_command(role: str) -> str:
    """`/<role>/joint_command` (role: leader | follower)."""
    return f"/{role}/joint_command"


def camera_image(name: str) -> str:
    """`/cameras/<name>/image/compressed`."""
    return f"{CAMERA_PREFIX}{name}/image/compressed"


def camera_name(topic: str) -> str | None:
    """The camera name of a camera image topic, else None."""
    if topic.startswith(CAMERA_PREFIX) and topic.endswith("/image/compressed"):
        return topic[len(CAMERA_PREFIX):-len("/image/compressed")]
    return None


# What a session records (cameras are added per session).
RECORDED = (LEADER_STATE, FOLLOWER_STATE, FOLLOWER_COMMAND, LEADER_COMMAND, POLICY_COMMAND, AUTHORITY,
            INTERVENTION, PEDAL_JOY, DIAGNOSTICS)

# Nodes whose services other nodes call, and their services (relative to the node: `~/start`).
RECORDER_NODE = "/recorder"
TELEOP_NODE = "/teleop"
RECORDER_START, RECORDER_STOP, RECORDER_DISCARD, RECORDER_STATUS = "start", "stop", "discard", "status"
SET_POLICY_MODE = "set_policy_mode"


def label_service(trigger: str) -> str:
    """The teleop node's service that labels the current intervention: `label/<trigger>`."""
    return f"label/{trigger}"
