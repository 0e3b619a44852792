"""`task init`: the template's numbers are the audit's, in radians, and the file is a spec."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
from teleop_flywheel.core.so101 import GRIPPER, JOINT_NAMES
from teleop_flywheel.core.task_spec import load_task_spec
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.reports.audit import audit, load
from teleop_flywheel.data.reports.task_init import DURATION_MARGIN
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("task_init") / "brick"
    write(root, SyntheticSpec(episodes=12, seed=3))
    info = json.loads((root / "meta/info.json").read_text())  # a camera, as LeRobot declares a video feature
    info["features"]["observation.images.front"] = {"dtype": "video", "shape": [480, 640, 3],
                                                    "names": ["height", "width", "channels"],
                                                    "info": {"video.fps": 30, "video.codec": "av1"}}
    (root / "meta/info.json").write_text(json.dumps(info))
    return root


def test_the_template_holds_the_audits_ranges_and_parses(dataset: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "task.yaml"
    cal_file = sim_calibration_file("follower")
    assert cli_main(["task", "init", str(dataset), "--out", str(out), "--calibration", str(cal_file)]) == 0
    spec = load_task_spec(out)
    ds = LeRobotDataset.open(dataset)
    report = audit(ds)
    cal = load_calibration(cal_file)
    starts = cal.lerobot_to_rad(np.asarray(report.start_states))
    assert spec.start_region is not None and spec.start_region.box is not None
    box = spec.start_region.box.bounds
    assert list(box) == list(JOINT_NAMES)
    for j, name in enumerate(JOINT_NAMES):
        lo, hi = sorted((float(starts[:, j].min()), float(starts[:, j].max())))
        assert box[name][0] == pytest.approx(lo, abs=1e-6) and box[name][1] == pytest.approx(hi, abs=1e-6)
        assert box[name][0] <= lo and box[name][1] >= hi  # rounded outward: every recorded start is inside
    assert all(spec.start_region.judge(s)[0] for s in starts)
    spread = {s.joint.removesuffix(".pos"): s for s in report.start_spread}
    assert box["shoulder_pan"][1] == pytest.approx(math.radians(spread["shoulder_pan"].max), abs=1e-6)
    median = report.length_seconds["median"]
    assert spec.duration_s == pytest.approx((median / DURATION_MARGIN, median * DURATION_MARGIN), abs=1e-3)
    assert spec.instruction == "pick the brick" and dict(spec.cameras) == {"front": 27.0}
    assert spec.success is None  # a hint, commented: the final states' ranges
    data = load(ds)
    finals = cal.lerobot_to_rad(data.state[data.spans.stop - 1].astype(np.float64))
    text = out.read_text()
    lo = math.floor(float(finals[:, 0].min()) * 1e6) / 1e6
    assert f"#     shoulder_pan: [{lo:.6f}," in text
    # never overwritten
    before = out.read_bytes()
    assert cli_main(["task", "init", str(dataset), "--out", str(out)]) == 2
    assert out.read_bytes() == before and "never overwritten" in capsys.readouterr().err


def test_without_a_calibration_the_gripper_is_left_to_the_user(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "task.yaml"
    assert cli_main(["task", "init", str(dataset), "--out", str(out)]) == 0
    spec = load_task_spec(out)
    assert spec.start_region is not None and spec.start_region.box is not None
    assert GRIPPER not in spec.start_region.box.bounds and len(spec.start_region.box.bounds) == 5
    assert "# gripper: started within [" in out.read_text()
