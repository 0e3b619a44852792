"""Complete intervention labels on real bags: the simulated rig records, through its real
nodes, a takeover labelled half a second in, one labelled after the hand-back, and a teleop-mode
correction; in the converted dataset every intervention frame carries its final label (before: the
frames before the label arrived were 0, and the late-labelled takeover was 0 throughout), and the
correction's frames are flagged with theirs. The bags keep when each label arrived."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("rclpy")

from rclpy.node import Node  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_srvs.srv import SetBool  # noqa: E402
from support.procs import wait_for  # noqa: E402

from teleop_flywheel.core.bag_topics import AUTHORITY  # noqa: E402
from teleop_flywheel.core.labels import trigger_code  # noqa: E402
from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.hw.pedal.virtual import VirtualPedal  # noqa: E402
from teleop_flywheel.recording.mcap.reader import open_bag  # noqa: E402
from teleop_flywheel.ros.nodes.common import STREAM_QOS  # noqa: E402
from teleop_flywheel.ros.nodes.recorder_client import RecorderClient  # noqa: E402
from teleop_flywheel.ros.session.clients import PolicyClient, RecorderStatus  # noqa: E402
from teleop_flywheel.ros.session.launch.graph import (  # noqa: E402
    CameraSpec,
    SessionConfig,
    build_graph,
    with_parameters,
)
from teleop_flywheel.ros.session.launch.supervisor import Session  # noqa: E402

# (takeover at, label at, hand back at, label, teleop-mode correction), seconds into a take of SECONDS: a
# label half a second in, one a second after the hand-back (1.3 s before the stop), a correction; each
# with half a second of frames before it.
PLAN = [(0.5, 1.0, 2.0, "wrong_grasp", False), (0.5, 2.2, 1.2, "too_slow", False), (0.5, 0.8, 1.5, "other", True)]
SECONDS = 3.5


class _Authority:
    """What the teleop publishes on `/teleop/authority`, by its stamps: when its intervention ended."""

    def __init__(self, node: Node) -> None:
        self._samples: list[tuple[int, float]] = []  # (header stamp ns, intervention id)
        node.create_subscription(JointState, AUTHORITY, self._on, STREAM_QOS)

    def _on(self, msg: JointState) -> None:
        self._samples.append((msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec, float(msg.position[2])))

    def handed_back_since(self, t_ns: int) -> bool:
        """An intervention ran, and a sample stamped after `t_ns` (ROS time) says it is over."""
        samples = sorted(self._samples)
        ran = [at for at, i in samples if i > 0]
        return bool(ran) and any(at > max(t_ns, ran[0]) and i == 0 for at, i in samples)


def _record(out: Path) -> list[Path]:
    # No metrics node and no verdict at stop: nothing here reads them; the recorder's validator worker
    # judged every episode beside the rig, and its stop waited up to 5 s for the last one's verdict.
    cfg = SessionConfig(cameras=(CameraSpec("front", source="synthetic", device="synthetic", fps=30.0, width=320,
                                            height=240),), output_dir=str(out), task="labels", operator="test",
                        checkpoint_id="scripted-v0", metrics="off")
    bags = []
    with Session(with_parameters(build_graph("sim", cfg), {"recorder": {"verdict": False}})) as session:
        operator = RecorderClient(session.context, "labels_operator")
        policy, status = PolicyClient(operator.node), RecorderStatus(operator.node)
        mode = operator.node.create_client(SetBool, "/teleop/set_policy_mode")
        authority = _Authority(operator.node)
        session.add_node(operator.node)
        assert operator.ready(120) and mode.wait_for_service(timeout_sec=60)
        status.wait_all_topics(120)
        pedal = VirtualPedal(session.graph.pedal_fifo)

        def set_mode(policy_mode: bool) -> None:
            future = mode.call_async(SetBool.Request(data=policy_mode))
            deadline = time.monotonic() + 20
            while not future.done() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert future.done() and future.result().success, "set_policy_mode"

        try:
            for takeover, label_at, back, label, correction in PLAN:
                set_mode(not correction)
                policy.reset()
                operator.call("start")
                t0, up_at = time.monotonic(), 0
                for at, action in sorted([(takeover, "down"), (label_at, "label"), (back, "up")]):
                    while time.monotonic() < t0 + at:
                        time.sleep(0.005)
                    if action == "label":
                        if label_at > back:  # after the hand-back the teleop has taken, not merely sent
                            wait_for(lambda t=up_at: authority.handed_back_since(t), 20, "the teleop's hand-back")
                        pedal.label(label)
                    else:
                        if action == "up":
                            up_at = time.time_ns()  # ROS time, as the teleop stamps
                        pedal.takeover(action == "down")
                while time.monotonic() < t0 + SECONDS:
                    time.sleep(0.01)
                operator.label(outcome="success", attempts=1)
                before = status.last_saved()
                operator.call("stop")
                bags.append(Path(status.saved_after(before)))
                operator.call("keep")
            set_mode(True)
        finally:
            pedal.close()
        session.remove_node(operator.node)
    return bags


@pytest.mark.timeout(600)
def test_final_labels_on_every_frame_of_real_bags(tmp_path: Path) -> None:
    bags = _record(tmp_path / "bags")
    # Each episode's flagged span (start, end ns): a correction's frames are flagged by the record's
    # span; an intervention's by the authority stream, whose id switches at the teleop's first tick
    # after the pedal's edge reached it: after the edge's source stamp, which the record keeps, by
    # however late a loaded machine delivered the edge.
    flagged_spans = []
    for bag, (_t, _l, _b, label, correction) in zip(bags, PLAN, strict=True):
        b = open_bag(bag)
        ep = b.episode
        assert ep is not None
        spans = ep.corrections if correction else ep.interventions
        assert [s.trigger for s in spans] == [label], (bag.name, ep.interventions, ep.corrections)
        span = spans[0]
        assert span.end_ns is not None
        if correction:
            flagged_spans.append((span.start_ns, span.end_ns))
            continue
        authority = b.authority(AUTHORITY)
        auth, stamps = authority.position, authority.stamps_ns
        running = auth[:, 2] > 0
        # the authority stream kept when the label arrived: 0 before it
        assert (auth[running, 3] == 0).any() and (auth[running, 3] == trigger_code(label)).any() != (
            label == "too_slow"
        )
        first = int(np.argmax(running))
        last = first + int(np.argmin(running[first:]))
        assert not running[last], f"{bag.name}: the authority never showed the hand-back"
        start, end = int(stamps[first]), int(stamps[last])
        assert span.start_ns <= start and span.end_ns <= end, (bag.name, span, start, end)
        flagged_spans.append((start, end))
    ds = tmp_path / "ds"
    res = conv.convert(bags, ds, codec="h264", workers=1, progress=False, include_failed=True)
    assert len(res.converted.get(str(ds), [])) == 3, res  # a bag refused: res says which and why
    data = pq.read_table(ds / "data/chunk-000/file-000.parquet").to_pandas()
    for e, ((start, end), (_takeover, _label_at, _back, label, correction)) in enumerate(
            zip(flagged_spans, PLAN, strict=True)):
        rows = data[data.episode_index == e]
        trig = rows["complementary_info.trigger"].to_numpy()
        flag = (rows["complementary_info.correction"] if correction else rows.intervention).to_numpy().astype(bool)
        frames = int(flag.sum())
        # the 30 fps grid's action times inside the span: its length x 30, give or take the one the
        # grid's phase decides
        assert abs(frames - (end - start) / 1e9 * 30) <= 1, (e, frames, (end - start) / 1e9)
        zero = int(np.count_nonzero(trig[flag] == 0))
        assert zero == 0, f"episode {e}: {zero} of {frames} frames without their label"
        assert set(trig[flag]) == {trigger_code(label)} and set(trig[~flag]) == {0}
        if correction:
            assert not rows.intervention.any()
