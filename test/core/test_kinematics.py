"""Forward kinematics from the shipped URDF, against poses computed by hand from its dimensions:
pan axis 0.095 m above the base, upper arm 0.116 m, forearm 0.135 m, wrist 0.061 m, tool 0.098 m."""
from __future__ import annotations

import math

import numpy as np
import pytest

from teleop_flywheel.core.kinematics import parse_urdf, quaternion, so101
from teleop_flywheel.core.so101 import JOINT_NAMES

REACH = 0.135 + 0.061 + 0.098  # forearm + wrist + tool, all along +x at zero


def tool(**q: float) -> np.ndarray:
    return so101().link_poses(q)["tool_link"]


def test_the_model_has_the_so101_joints_in_order() -> None:
    assert so101().movable == JOINT_NAMES
    assert so101().root == "base_link"


@pytest.mark.parametrize(("q", "position"), [
    ({}, (REACH, 0.0, 0.095 + 0.116)),
    ({"shoulder_pan": math.pi / 2}, (0.0, REACH, 0.095 + 0.116)),
    # Lift +90° about +y tips the upper arm forward (+x) and the forearm down (−z).
    ({"shoulder_lift": math.pi / 2}, (0.116, 0.0, 0.095 - REACH)),
    # Elbow −90° about +y points the forearm straight up.
    ({"elbow_flex": -math.pi / 2}, (0.0, 0.0, 0.095 + 0.116 + REACH)),
    # Wrist +90° about +y points wrist and tool down from the elbow's end.
    ({"wrist_flex": math.pi / 2}, (0.135, 0.0, 0.211 - 0.061 - 0.098)),
    ({"wrist_roll": 1.0, "gripper": 0.7}, (REACH, 0.0, 0.211)),  # roll and jaw do not move the tool point
])
def test_tool_position_matches_hand_computation(q: dict[str, float], position: tuple[float, float, float]) -> None:
    assert tool(**q)[:3, 3] == pytest.approx(position, abs=1e-9)


def test_orientations_and_quaternions() -> None:
    pose = tool(shoulder_pan=math.pi / 2, wrist_roll=math.pi / 2)
    # Tool x axis along world +y (pan), its y axis rolled onto world +z.
    assert pose[:3, 0] == pytest.approx((0, 1, 0), abs=1e-9)
    assert pose[:3, 1] == pytest.approx((0, 0, 1), abs=1e-9)
    half = math.sqrt(0.5)
    pan = [t for t in so101().transforms({"shoulder_pan": math.pi / 2}) if t.child == "shoulder_link"][0]
    assert pan.rotation == pytest.approx((0.0, 0.0, half, half), abs=1e-12)
    assert pan.translation == pytest.approx((0.0, 0.0, 0.095))
    assert quaternion(np.diag([1.0, -1.0, -1.0])) == pytest.approx((1.0, 0.0, 0.0, 0.0), abs=1e-12)


def test_prefixed_transforms_form_one_tree_per_arm() -> None:
    q = dict.fromkeys(JOINT_NAMES, 0.3)
    leader = so101().transforms(q, prefix="leader/")
    follower = so101().transforms(q, prefix="follower/")
    assert {t.parent for t in leader} | {t.child for t in leader} >= {"leader/base_link", "leader/tool_link"}
    assert not ({t.child for t in leader} & {t.child for t in follower})
    assert [t.translation for t in leader] == [t.translation for t in follower]


def test_a_urdf_without_a_single_root_is_refused() -> None:
    broken = ("<robot name='x'><joint name='a' type='fixed'><parent link='p'/><child link='c'/></joint>"
              "<joint name='b' type='fixed'><parent link='q'/><child link='d'/></joint></robot>")
    with pytest.raises(ValueError, match="one root link"):
        parse_urdf(broken)
