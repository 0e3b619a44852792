"""Forward kinematics of the SO-101 from the shipped URDF (`urdf/so101.urdf`), no ROS.

The URDF is the one description of the arm: the Foxglove 3D view draws it, `robot_state_publisher`
(on a real ROS install) reads it, and this module computes the same frame transforms from it,
so the 3D view and the kinematics cannot disagree. Two arms share one TF tree through a prefix
on every link (`leader/base_link`, `follower/gripper_link`).
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from teleop_flywheel.core.resources import package_file

ARMS = ("leader", "follower")


def rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    """3×3 rotation of `angle` rad about the unit vector `axis` (Rodrigues)."""
    x, y, z = axis / np.linalg.norm(axis)
    c, s, t = math.cos(angle), math.sin(angle), 1.0 - math.cos(angle)
    return np.array([[t * x * x + c, t * x * y - s * z, t * x * z + s * y],
                     [t * x * y + s * z, t * y * y + c, t * y * z - s * x],
                     [t * x * z - s * y, t * y * z + s * x, t * z * z + c]])


def rpy_matrix(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """URDF's fixed-axis roll, pitch, yaw: R = Rz(yaw) · Ry(pitch) · Rx(roll)."""
    ex, ey, ez = np.eye(3)
    return rotation(ez, yaw) @ rotation(ey, pitch) @ rotation(ex, roll)


def quaternion(matrix: np.ndarray) -> tuple[float, float, float, float]:
    """(x, y, z, w) of a rotation matrix, w ≥ 0."""
    m = matrix
    w = math.sqrt(max(0.0, 1.0 + m[0, 0] + m[1, 1] + m[2, 2])) / 2
    x = math.copysign(math.sqrt(max(0.0, 1.0 + m[0, 0] - m[1, 1] - m[2, 2])) / 2, m[2, 1] - m[1, 2])
    y = math.copysign(math.sqrt(max(0.0, 1.0 - m[0, 0] + m[1, 1] - m[2, 2])) / 2, m[0, 2] - m[2, 0])
    z = math.copysign(math.sqrt(max(0.0, 1.0 - m[0, 0] - m[1, 1] + m[2, 2])) / 2, m[1, 0] - m[0, 1])
    return x, y, z, w


@dataclass(frozen=True)
class Transform:
    """A parent→child frame transform, as TF and Foxglove's FrameTransform carry it."""

    parent: str
    child: str
    translation: tuple[float, float, float]
    rotation: tuple[float, float, float, float]  # quaternion x, y, z, w


@dataclass(frozen=True)
class Joint:
    name: str
    kind: str  # revolute | continuous | prismatic | fixed
    parent: str
    child: str
    origin: np.ndarray  # 4×4
    axis: np.ndarray

    def motion(self, q: float) -> np.ndarray:
        out = np.eye(4)
        if self.kind in ("revolute", "continuous"):
            out[:3, :3] = rotation(self.axis, q)
        elif self.kind == "prismatic":
            out[:3, 3] = self.axis * q
        return out


def _floats(text: str | None, default: str) -> np.ndarray:
    return np.array([float(v) for v in (text or default).split()])


@dataclass(frozen=True)
class Model:
    """A kinematic tree: joints in parent-before-child order."""

    name: str
    root: str
    joints: tuple[Joint, ...]
    text: str  # the URDF itself (what `/robot_description` carries)

    @property
    def movable(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.joints if j.kind != "fixed")

    def joint_matrices(self, positions: Mapping[str, float]) -> list[tuple[Joint, np.ndarray]]:
        """Each joint's parent→child 4×4 at `positions` (missing joints at 0)."""
        return [(j, j.origin @ j.motion(float(positions.get(j.name, 0.0)))) for j in self.joints]

    def transforms(self, positions: Mapping[str, float], prefix: str = "") -> list[Transform]:
        """Parent→child transforms of every joint, link names prefixed (`"leader/"`)."""
        return [Transform(prefix + j.parent, prefix + j.child, tuple(m[:3, 3].tolist()),  # type: ignore[arg-type]
                          quaternion(m[:3, :3])) for j, m in self.joint_matrices(positions)]

    def link_poses(self, positions: Mapping[str, float]) -> dict[str, np.ndarray]:
        """Every link's 4×4 pose in the root frame."""
        poses = {self.root: np.eye(4)}
        for joint, matrix in self.joint_matrices(positions):
            poses[joint.child] = poses[joint.parent] @ matrix
        return poses


def parse_urdf(text: str) -> Model:
    """The kinematic tree of a URDF document (visuals are ignored here)."""
    robot = ET.fromstring(text)
    joints = {}
    for el in robot.iter("joint"):
        origin = el.find("origin")
        matrix = np.eye(4)
        if origin is not None:
            matrix[:3, :3] = rpy_matrix(*_floats(origin.get("rpy"), "0 0 0"))
            matrix[:3, 3] = _floats(origin.get("xyz"), "0 0 0")
        axis = el.find("axis")
        parent, child = el.find("parent"), el.find("child")
        if parent is None or child is None:
            raise ValueError(f"URDF joint {el.get('name')!r} has no parent or child")
        joints[child.get("link", "")] = Joint(str(el.get("name")), str(el.get("type")), parent.get("link", ""),
                                              child.get("link", ""), matrix,
                                              _floats(axis.get("xyz") if axis is not None else None, "1 0 0"))
    children = set(joints)
    roots = {j.parent for j in joints.values()} - children
    if len(roots) != 1:
        raise ValueError(f"URDF must have one root link, found {sorted(roots)}")
    root = roots.pop()
    ordered: list[Joint] = []
    frontier = [root]
    while frontier:
        link = frontier.pop(0)
        for joint in sorted((j for j in joints.values() if j.parent == link), key=lambda j: j.name):
            ordered.append(joint)
            frontier.append(joint.child)
    return Model(str(robot.get("name")), root, tuple(ordered), text)


@cache
def so101() -> Model:
    """The shipped SO-101 model."""
    path: Path = package_file("urdf", "so101.urdf")
    return parse_urdf(path.read_text(encoding="utf-8"))
