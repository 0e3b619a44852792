"""The rig's streams as a bag names them once the reader has stripped its namespace.

The data engine, evaluation and policy replay look streams up by these names, and so does
`config/validate.yaml`: `/` + the relative ROS name of `core/topics.py`, the same for every rig
(a bag recorded under `namespace:=rig_a` holds `/rig_a/leader/joint_states`; its episode
metadata names the namespace and `recording.reader` strips it).
"""
from __future__ import annotations

from teleop_flywheel.core import topics as ros

LEADER_STATE = ros.qualify(ros.LEADER_STATE)
FOLLOWER_STATE = ros.qualify(ros.FOLLOWER_STATE)
LEADER_COMMAND = ros.qualify(ros.LEADER_COMMAND)
LEADER_FEEDBACK = ros.qualify(ros.LEADER_FEEDBACK)
FOLLOWER_COMMAND = ros.qualify(ros.FOLLOWER_COMMAND)
POLICY_COMMAND = ros.qualify(ros.POLICY_COMMAND)
POLICY_INFERENCE = ros.qualify(ros.POLICY_INFERENCE)
AUTHORITY = ros.qualify(ros.AUTHORITY)
INTERVENTION = ros.qualify(ros.INTERVENTION)
PEDAL_JOY = ros.qualify(ros.PEDAL_JOY)
LEADER_FAULT = ros.qualify(ros.LEADER_FAULT)
FOLLOWER_FAULT = ros.qualify(ros.FOLLOWER_FAULT)
DIAGNOSTICS = ros.DIAGNOSTICS
CAMERA_PREFIX = "/" + ros.CAMERA_PREFIX
camera_name = ros.camera_name


def arm_state(role: str) -> str:
    """`/<role>/joint_states`."""
    return ros.qualify(ros.arm_state(role))


def camera_image(name: str) -> str:
    """`/cameras/<name>/image/compressed`."""
    return ros.qualify(ros.camera_image(name))
