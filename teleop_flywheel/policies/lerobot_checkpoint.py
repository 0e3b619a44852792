"""`lerobot` policy plugin: run a LeRobot 0.4.x pretrained policy directory on the SO-101 follower.

policy_args: `CHECKPOINT_DIR[,calibration=FILE][,device=cpu][,fps=30][,task=TEXT][,threads=1]`

* `CHECKPOINT_DIR` — what LeRobot 0.4 `save_pretrained` writes: `config.json`, `model.safetensors`,
  `policy_preprocessor.json`, `policy_postprocessor.json` (+ their state `.safetensors`). Loaded with
  LeRobot's own API: `PreTrainedConfig.from_pretrained`, the policy class's `from_pretrained` and
  `make_pre_post_processors(config, pretrained_path=...)` (normalisation stats come from there).
* `calibration` — the follower calibration (project YAML or LeRobot's JSON) the training data was
  recorded with; it converts radians ↔ LeRobot units (degrees, gripper 0–100). Required on a real
  follower, where a simulator's is refused before anything is loaded; on a simulated one the
  shipped `config/calibration/follower_sim.yaml` when none is named (`base.follower_calibration`).
* `device` (default `cpu`), `task` (the language instruction for policies that read one, default "").
* `fps` (default 30, the converter's default) — the rate the policy was trained at: `select_action`
  runs once per frame period and its action holds in between, so an action chunk plays at the
  speed it was recorded at whatever the node's `rate_hz`.
* `threads` (default 1; 0 = torch's default, every core) — torch's CPU threads. On a rig's CPU the
  policy shares the cores with the arm drivers, the cameras and the recorder; torch's default
  takes them all for each inference and starves the streams the episode is judged on
  (bench/rollout.py). A late action holds, a late camera frame fails the episode.

Inputs: `observation.state` ← the follower state; `observation.images.<camera>` ← the latest frame
of `/cameras/<camera>/image/compressed`, scaled to the feature's width and height when the camera
delivers another size (as `manifest materialize --resolution` scaled the training frames: the whole
frame, no crop); the node subscribes to the cameras listed in `cameras`. The leader arm's reading is
never an input: a checkpoint trained on a dataset of our layout 1, where it was
`observation.leader_state` (`data/lerobot/flywheel_schema.py`), is refused at load naming
`teleop-flywheel migrate` (at deployment nobody moves the leader, and the policy learnt to copy it).
A checkpoint needing any other input (e.g. `observation.environment_state`) is refused at load with
the feature named. LeRobot and torch are imported inside `make_policy` only.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from teleop_flywheel.core.calibration import ArmCalibration
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.data.lerobot.flywheel_schema import LEADER_STATE, names_of
from teleop_flywheel.policies.base import NO_IMAGES, Images, Policy, follower_calibration, split_args

KEYS = ("calibration", "device", "fps", "task", "threads")
STATE = "observation.state"
IMAGE_PREFIX = "observation.images."
ACTION = "action"
REQUIRED_FILES = ("config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json")


def checkpoint_hash(root: Path) -> str:
    """sha256 (12 hex) over config, weights and processor files: a changed checkpoint gets a new id."""
    digest = hashlib.sha256()
    files = [p for p in root.iterdir() if p.is_file() and (p.name in REQUIRED_FILES or p.name.startswith("policy_"))]
    for path in sorted(files):
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()[:12]


def default_checkpoint_id(root: Path) -> str:
    """The id commands are tagged with when none is given: `lerobot:<name>:<checkpoint_hash>`, <name>
    the directory's, or `RUN-STEP` in LeRobot's training layout (`RUN/checkpoints/STEP/pretrained_model`,
    where every checkpoint's directory is called `pretrained_model`). `train` registers this id."""
    root = root.resolve()
    name = root.name
    if name == "pretrained_model" and root.parent.parent.name == "checkpoints":
        name = f"{root.parent.parent.parent.name}-{root.parent.name}"
    return f"lerobot:{name}:{checkpoint_hash(root)}"


def check_dir(root: Path) -> None:
    if not root.is_dir():
        raise ValueError(f"{root}: no such LeRobot checkpoint directory")
    missing = [name for name in REQUIRED_FILES if not (root / name).is_file()]
    if missing:
        raise ValueError(f"{root}: not a LeRobot 0.4 pretrained policy directory (missing {', '.join(missing)})")


@dataclass
class LeRobotPolicy(Policy):
    """A loaded LeRobot policy with its processors, speaking radians and monotonic nanoseconds."""

    checkpoint_id: str
    policy: Any  # lerobot PreTrainedPolicy
    preprocessor: Any  # PolicyProcessorPipeline
    postprocessor: Any
    calibration: ArmCalibration
    image_shapes: dict[str, tuple[int, int, int]]  # camera -> (C, H, W) of observation.images.<camera>
    uses_state: bool
    period_ns: int
    device: str = "cpu"
    task: str = ""
    _next_ns: int | None = field(default=None, repr=False)
    _held: list[float] | None = field(default=None, repr=False)

    @property
    def cameras(self) -> tuple[str, ...]:
        return tuple(self.image_shapes)

    def reset(self, state: Sequence[float] | None, t_ns: int) -> None:
        """New episode: LeRobot's own reset (empties the action-chunk queue) and the processors'."""
        self.policy.reset()
        self.preprocessor.reset()
        self.postprocessor.reset()
        self._next_ns, self._held = None, None

    def drop_plan(self) -> None:
        """Hand-back after a takeover: LeRobot's reset empties the action-chunk queue (a chunk
        planned before the human moved the arm must not resume); processors and episode keep."""
        self.policy.reset()
        self._next_ns, self._held = None, None

    def act(self, state: Sequence[float] | None, t_ns: int, images: Images = NO_IMAGES) -> list[float] | None:
        if state is None or any(cam not in images for cam in self.image_shapes):
            return None
        if self._held is not None and self._next_ns is not None and t_ns < self._next_ns:
            return self._held
        self._held = self._infer(state, images)
        behind = self._next_ns is None or t_ns >= self._next_ns + self.period_ns
        self._next_ns = (
            t_ns if behind or self._next_ns is None else self._next_ns
        ) + self.period_ns  # late ticks do not pile up
        return self._held

    def _infer(self, state: Sequence[float], images: Images) -> list[float]:
        import torch

        obs: dict[str, Any] = {"task": self.task, "robot_type": "so101_follower"}
        if self.uses_state:
            units = self.calibration.rad_to_lerobot(np.asarray(state, dtype=float)).astype(np.float32)
            obs[STATE] = torch.from_numpy(units).unsqueeze(0).to(self.device)
        for cam, (c, h, w) in self.image_shapes.items():
            rgb = images[cam]
            if rgb.ndim != 3 or rgb.shape[2] != c:
                raise ValueError(f"{self.checkpoint_id}: feature {IMAGE_PREFIX}{cam} wants {w}x{h}x{c} images, "
                                 f"camera {cam!r} delivers {'x'.join(map(str, rgb.shape[1::-1] + rgb.shape[2:]))}")
            if rgb.shape[:2] != (h, w):
                rgb = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
            chw = torch.from_numpy(np.ascontiguousarray(rgb)).permute(2, 0, 1).float() / 255.0
            obs[IMAGE_PREFIX + cam] = chw.unsqueeze(0).to(self.device)
        with torch.inference_mode():
            action = self.postprocessor(self.policy.select_action(self.preprocessor(obs)))
        units = action.reshape(-1).detach().cpu().numpy().astype(float)
        return [float(v) for v in self.calibration.lerobot_to_rad(units)]


def node_feeds(key: str, feature_type: str) -> bool:
    """Whether the policy node feeds an input feature: the follower state and camera images (by
    LeRobot's `FeatureType` value, "STATE" or "VISUAL"); a policy trained on anything else is refused."""
    return (key == STATE and feature_type == "STATE") or (key.startswith(IMAGE_PREFIX) and feature_type == "VISUAL")


def _inputs(config: Any, root: Path) -> tuple[dict[str, tuple[int, int, int]], bool]:
    """The cameras (and whether the state) a checkpoint reads; any input the node cannot feed is an error."""
    from lerobot.configs.types import FeatureType

    cameras: dict[str, tuple[int, int, int]] = {}
    uses_state = False
    for key, feat in config.input_features.items():
        shape = tuple(int(s) for s in feat.shape)
        if key == STATE and feat.type is FeatureType.STATE:
            if shape != (len(JOINT_NAMES),):
                raise ValueError(f"{root}: feature {key} has shape {shape}; the SO-101 follower state is (6,)")
            uses_state = True
        elif key.startswith(IMAGE_PREFIX) and feat.type is FeatureType.VISUAL and len(shape) == 3:
            cameras[key[len(IMAGE_PREFIX):]] = shape  # type: ignore[assignment]
        elif key in names_of(LEADER_STATE):
            raise ValueError(f"{root}: the policy takes the leader arm's reading ({key!r}) as an input: it was "
                             "trained on a dataset of teleop_flywheel layout 1, where the leader was an observation, "
                             "and learnt to copy it; at deployment nobody moves the leader, so the node never feeds "
                             "it. Upgrade the dataset with `teleop-flywheel migrate DATASET` and train again")
        else:
            raise ValueError(f"{root}: the policy needs input feature {key!r} ({feat.type.value}, shape {shape}), "
                             f"which the policy node cannot provide (it has {STATE} and "
                             f"{IMAGE_PREFIX}<camera> from /cameras/<camera>/image/compressed)")
    out = config.output_features.get(ACTION)
    if out is None or tuple(out.shape) != (len(JOINT_NAMES),):
        got = None if out is None else tuple(out.shape)
        raise ValueError(f"{root}: the policy's {ACTION!r} output is {got}; the SO-101 follower takes (6,)")
    return cameras, uses_state


def make_policy(args: str, checkpoint_id: str, *, simulated: bool) -> LeRobotPolicy:
    """Entry point `lerobot`: policy_args as in the module docstring; `simulated`: the follower is a
    simulator (the checkpoint may then run without a calibration named)."""
    target, opts = split_args(args, KEYS)
    if not target:
        raise ValueError("lerobot policy needs policy_args = CHECKPOINT_DIR[,calibration=FILE][,device=...]")
    root = Path(target)
    check_dir(root)
    try:
        fps = float(opts.get("fps", "30"))
    except ValueError:
        raise ValueError(f"policy_args {args!r}: fps must be a number, got {opts['fps']!r}") from None
    if fps <= 0:
        raise ValueError(f"policy_args {args!r}: fps must be positive, got {fps}")
    threads = opts.get("threads", "1")
    if not threads.isdigit():
        raise ValueError(f"policy_args {args!r}: threads must be a whole number >= 0, got {threads!r}")
    calibration = follower_calibration(opts.get("calibration", ""), simulated)  # before torch: a refusal is quick
    device = opts.get("device", "cpu")
    try:
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    except ImportError as exc:
        raise ImportError(f"the lerobot policy needs LeRobot 0.4.x: pip install 'teleop_flywheel[lerobot]' "
                          f"({exc})") from exc
    import torch

    if int(threads):
        torch.set_num_threads(int(threads))
    config = PreTrainedConfig.from_pretrained(root)
    config.device = device
    cameras, uses_state = _inputs(config, root)
    policy = get_policy_class(config.type).from_pretrained(root, config=config)
    pre, post = make_pre_post_processors(config, pretrained_path=str(root),
                                         preprocessor_overrides={"device_processor": {"device": device}})
    tag = checkpoint_id or default_checkpoint_id(root)
    return LeRobotPolicy(tag, policy, pre, post, calibration, cameras, uses_state, round(1e9 / fps),
                         device, opts.get("task", ""))
