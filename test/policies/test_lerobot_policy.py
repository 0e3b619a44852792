"""The `lerobot` policy plugin on a real (tiny, randomly initialised) LeRobot ACT checkpoint.

LeRobot with torch is ~8 GB and is not installed in CI: the checkpoint tests skip there with that
reason; the argument checks (which need no LeRobot) always run. Where LeRobot is installed
(`pip install '.[lerobot]'`) the checkpoint is saved with LeRobot's own `save_pretrained` (policy and
processors) and loaded through `load_policy('lerobot', ...)`; its actions are compared with
LeRobot's own inference path (`prepare_observation_for_inference` → preprocessor → `select_action`
→ postprocessor) fed the same state in LeRobot units.
"""
from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from support.lerobot_act import HAVE_LEROBOT, NEEDS_LEROBOT, save_act

from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
from teleop_flywheel.policies import load_policy

S = 1_000_000_000
CAMERA = "wrist"
H, W = 24, 32


def _files_only(root: Path) -> Path:
    """A directory with the file names of a checkpoint (contents irrelevant to the checks before loading)."""
    root.mkdir()
    for name in ("config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json"):
        (root / name).write_text("{}")
    return root


def test_bad_args_name_the_path_and_the_reason(tmp_path: Path) -> None:
    half = tmp_path / "half"
    half.mkdir()
    (half / "config.json").write_text("{}")
    cases = {
        "": "needs policy_args = CHECKPOINT_DIR",
        str(tmp_path / "nope"): "nope: no such LeRobot checkpoint directory",
        str(half): "half: not a LeRobot 0.4 pretrained policy directory .*model.safetensors, policy_preprocessor",
        f"{_files_only(tmp_path / 'ck')},speed=3": "option 'speed=3' is not one of calibration=",
        f"{tmp_path / 'ck'},fps=fast": "fps must be a number",
        f"{tmp_path / 'ck'},fps=0": "fps must be positive",
        f"{tmp_path / 'ck'},threads=two": "threads must be a whole number >= 0, got 'two'",
        f"{tmp_path / 'ck'},calibration={tmp_path}/none.yaml": "none.yaml: cannot read calibration",
    }
    for args, reason in cases.items():
        with pytest.raises(ValueError, match=reason):
            load_policy("lerobot", args, "")


def test_on_a_real_follower_a_checkpoint_needs_the_followers_calibration_before_anything_loads(
        tmp_path: Path) -> None:
    """Refused before LeRobot and torch are imported: without a calibration named, or with a
    simulator's (its offsets and ranges would turn the policy's degrees into the wrong angles)."""
    checkpoint = _files_only(tmp_path / "ck")
    with pytest.raises(ValueError, match=r"follower is not a simulator \(simulated: false\): add calibration=FILE"):
        load_policy("lerobot", str(checkpoint), "")
    sim = sim_calibration_file("follower")
    with pytest.raises(ValueError, match=re.escape(f"{sim}: a simulator's calibration, and the follower is not a")):
        load_policy("lerobot", f"{checkpoint},calibration={sim}", "")


@pytest.mark.skipif(HAVE_LEROBOT, reason="LeRobot is installed: the missing-install message cannot be shown")
def test_without_lerobot_the_error_says_how_to_install(tmp_path: Path) -> None:
    """A real follower's own calibration passes: what stops it then is the missing install."""
    from teleop_flywheel.core.resources import config_path

    real = config_path("calibration/example_real_follower.yaml")
    with pytest.raises(ImportError, match=r"needs LeRobot 0.4.x: pip install 'teleop_flywheel\[lerobot\]'"):
        load_policy("lerobot", f"{_files_only(tmp_path / 'ck')},calibration={real}", "")


# -- a real checkpoint ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_act(tmp_path_factory.mktemp("ckpt") / "act_tiny",
                     {"observation.state": ("STATE", (6,)), f"observation.images.{CAMERA}": ("VISUAL", (3, H, W))})


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (H, W, 3), dtype=np.uint8)


def _lerobot_reference(root: Path, state_units: np.ndarray, rgb: np.ndarray, steps: int) -> np.ndarray:
    """LeRobot's own inference path (as its record loop runs it), `steps` successive actions, LeRobot units."""
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    from lerobot.policies.utils import prepare_observation_for_inference

    config = PreTrainedConfig.from_pretrained(root)
    config.device = "cpu"
    policy = get_policy_class(config.type).from_pretrained(root, config=config)
    pre, post = make_pre_post_processors(config, pretrained_path=str(root))
    out = []
    for _ in range(steps):
        obs = {"observation.state": state_units.astype(np.float32), f"observation.images.{CAMERA}": rgb.copy()}
        with torch.inference_mode():
            batch = pre(prepare_observation_for_inference(obs, torch.device("cpu"), "", "so101_follower"))
            out.append(post(policy.select_action(batch)).reshape(-1).numpy())
    return np.array(out, dtype=float)


@NEEDS_LEROBOT
def test_act_matches_lerobot_inference_in_radians_on_the_training_frame_rate(checkpoint: Path) -> None:
    cal = load_calibration(sim_calibration_file("follower"))
    pol = load_policy("lerobot", f"{checkpoint},fps=20", "", simulated=True)
    assert pol.cameras == (CAMERA,)
    assert pol.checkpoint_id.startswith("lerobot:act_tiny:") and len(pol.checkpoint_id.rsplit(":", 1)[1]) == 12
    state = [0.1, -0.2, 0.3, -0.1, 0.2, 0.4]
    rgb = _image(1)
    assert pol.act(None, 0, {CAMERA: rgb}) is None  # no follower state yet
    assert pol.act(state, 0, {}) is None  # no image yet

    t0 = 5 * S
    period = S // 20
    pol.reset(state, t0)
    got = [pol.act(state, t0 + k * period, {CAMERA: rgb}) for k in range(5)]  # chunk of 4, then a new chunk
    ref = cal.lerobot_to_rad(_lerobot_reference(checkpoint, cal.rad_to_lerobot(state), rgb, 5))
    assert all(len(a) == 6 for a in got)
    np.testing.assert_allclose(np.array(got), ref, atol=1e-5)
    assert len({tuple(a) for a in got[:4]}) > 1  # the chunk plays out, one action per frame
    # between frames the action holds: no extra select_action (the chunk would run ahead otherwise)
    assert pol.act(state, t0 + 5 * period - 1, {CAMERA: rgb}) == got[4]

    pol.reset(state, t0)  # LeRobot's reset empties the chunk queue: the same observation → the same first action
    assert pol.act(state, t0, {CAMERA: rgb}) == pytest.approx(got[0], abs=1e-6)
    pol.reset(state, t0)
    moved = pol.act([s + 0.3 for s in state], t0, {CAMERA: rgb})
    pol.reset(state, t0)
    other_image = pol.act(state, t0, {CAMERA: _image(2)})
    assert not np.allclose(moved, got[0], atol=1e-4) and not np.allclose(other_image, got[0], atol=1e-4)

    # Hand-back: drop_plan empties the chunk queue too — mid-chunk, the next action is inferred
    # afresh from the present observation (the rest of the old chunk never plays).
    pol.reset(state, t0)
    first = pol.act(state, t0, {CAMERA: rgb})
    second = pol.act(state, t0 + period, {CAMERA: rgb})
    pol.drop_plan()
    assert pol.act(state, t0 + 2 * period, {CAMERA: rgb}) == pytest.approx(first, abs=1e-6)
    assert second != pytest.approx(first, abs=1e-6)

    # A camera of another size is scaled to the feature's (as `materialize --resolution` scaled the
    # training frames): the frame at twice the size, each pixel 2×2, acts as the frame itself.
    pol.reset(state, t0)
    assert pol.act(state, t0, {CAMERA: rgb.repeat(2, axis=0).repeat(2, axis=1)}) == pytest.approx(got[0], abs=1e-6)
    with pytest.raises(ValueError, match=f"feature observation.images.{CAMERA} wants 32x24x3 images.*delivers 32x24x4"):
        pol.reset(state, t0)
        pol.act(state, t0, {CAMERA: np.zeros((H, W, 4), np.uint8)})


@NEEDS_LEROBOT
def test_a_checkpoint_id_changes_with_the_weights_and_a_given_one_wins(checkpoint: Path, tmp_path: Path) -> None:
    import shutil

    assert load_policy("lerobot", str(checkpoint), "ckpt-7", simulated=True).checkpoint_id == "ckpt-7"
    copy = tmp_path / "act_tiny"
    shutil.copytree(checkpoint, copy)
    first = load_policy("lerobot", str(copy), "", simulated=True).checkpoint_id
    assert first == load_policy("lerobot", str(checkpoint), "", simulated=True).checkpoint_id  # content, not location
    config = json.loads((copy / "config.json").read_text())
    config["n_action_steps"] = 2
    (copy / "config.json").write_text(json.dumps(config))
    assert load_policy("lerobot", str(copy), "", simulated=True).checkpoint_id != first


@NEEDS_LEROBOT
def test_an_input_the_node_cannot_feed_is_refused_by_name(tmp_path: Path) -> None:
    root = save_act(tmp_path / "env", {"observation.state": ("STATE", (6,)),
                                         "observation.environment_state": ("ENV", (4,))})
    with pytest.raises(ValueError, match="needs input feature 'observation.environment_state' .*cannot provide"):
        load_policy("lerobot", str(root), "", simulated=True)


@NEEDS_LEROBOT
@pytest.mark.parametrize("leader", ["observation.leader_state", "complementary_info.leader_state"])
def test_a_checkpoint_that_reads_the_leader_is_refused_naming_migrate(tmp_path: Path, leader: str) -> None:
    """Trained on a dataset of layout 1, a policy takes the leader's reading as an input: the node
    never feeds it (nobody moves the leader at deployment), whatever the feature is called."""
    root = save_act(tmp_path / "leader", {"observation.state": ("STATE", (6,)), leader: ("STATE", (6,)),
                                            f"observation.images.{CAMERA}": ("VISUAL", (3, H, W))})
    with pytest.raises(ValueError, match=re.escape(f"takes the leader arm's reading ('{leader}') as an input")
                       + ".*`teleop-flywheel migrate DATASET` and train again"):
        load_policy("lerobot", str(root), "", simulated=True)


@NEEDS_LEROBOT
def test_policy_node_runs_the_checkpoint_on_camera_images(checkpoint: Path) -> None:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import CompressedImage, JointState

    from teleop_flywheel.core.clock import now_ns
    from teleop_flywheel.core.so101 import JOINT_NAMES
    from teleop_flywheel.core.topics import camera_image
    from teleop_flywheel.hw.camera.source import encode_jpeg
    from teleop_flywheel.ros.nodes.common import IMAGE_QOS, STREAM_QOS, joint_state, stamp
    from teleop_flywheel.ros.nodes.policy import PolicyNode

    rclpy.init()
    node = PolicyNode(parameter_overrides=[Parameter("policy", value="lerobot"),
                                           Parameter("policy_args", value=str(checkpoint)),
                                           Parameter("checkpoint_id", value=""),
                                           Parameter("simulated", value=True)])
    tag = node.policy.checkpoint_id
    got: list[JointState] = []
    node.create_subscription(JointState, "/policy/joint_command", got.append, STREAM_QOS)
    state = node.create_publisher(JointState, "/follower/joint_states", STREAM_QOS)
    camera = node.create_publisher(CompressedImage, camera_image(CAMERA), IMAGE_QOS)
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    threading.Thread(target=ex.spin, daemon=True).start()
    frame = CompressedImage(format="jpeg", data=encode_jpeg(_image(3)[..., ::-1], 95))
    try:
        for _ in range(25):  # state only: the policy needs the wrist image, so nothing is commanded
            state.publish(joint_state(JOINT_NAMES, [0.1] * 6, now_ns()))
            time.sleep(0.02)
        without_image = len(got)
        deadline = time.monotonic() + 60
        while len(got) < 5 and time.monotonic() < deadline:
            state.publish(joint_state(JOINT_NAMES, [0.1] * 6, now_ns()))
            stamp(frame.header.stamp, now_ns())
            camera.publish(frame)
            time.sleep(0.02)
    finally:
        ex.shutdown()
        node.destroy_node()
        rclpy.shutdown()
    assert without_image == 0
    assert len(got) >= 5
    assert tag.startswith("lerobot:act_tiny:") and {m.header.frame_id for m in got} == {tag}
    assert list(got[0].name) == list(JOINT_NAMES)
    assert all(len(m.position) == 6 and np.isfinite(m.position).all() for m in got)


def test_a_checkpoint_in_lerobots_training_layout_is_named_by_its_run_and_step(tmp_path: Path) -> None:
    """Every LeRobot training checkpoint is a `pretrained_model` directory: the id names the run and
    the step instead (`train` registers this id in lineage; the node tags commands with it)."""
    from teleop_flywheel.policies.lerobot_checkpoint import checkpoint_hash, default_checkpoint_id

    (tmp_path / "act47" / "checkpoints" / "020000").mkdir(parents=True)
    step = _files_only(tmp_path / "act47" / "checkpoints" / "020000" / "pretrained_model")
    assert default_checkpoint_id(step) == f"lerobot:act47-020000:{checkpoint_hash(step)}"
    (tmp_path / "act47" / "checkpoints" / "last").symlink_to("020000")
    assert default_checkpoint_id(tmp_path / "act47" / "checkpoints" / "last" / "pretrained_model") == \
        default_checkpoint_id(step)
    plain = _files_only(tmp_path / "mine")
    assert default_checkpoint_id(plain) == f"lerobot:mine:{checkpoint_hash(plain)}"
