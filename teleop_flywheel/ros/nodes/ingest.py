"""`ingest` node: a session's flywheel — `teleop-flywheel ingest` on the session's own episodes.

Started with the session when it runs with `ingest:=true` (graph.py puts it in the one graph
description, so `teleop-flywheel run` and `ros2 launch` both start it, and stop it with the other
nodes): every episode the recorder closes in `watch_dir` (the session's `output_dir`) is taken
once it has its verdict and the operator's keep (or `grace_s` passed without a discard), validated,
then appended to the dataset or rejected — moved to `<watch_dir>/quarantine/<CODE>/`
(`quarantine: false` leaves it where it is) — and the dataset's validation record, card, sample
weights and audit page are refreshed (`data/convert/ingest_loop.py`).

The work runs in a process of its own: `teleop-flywheel ingest` started by this node in a session
of its own (`detach`: it dies with the node) at low priority from its first instruction (`nice`,
SCHED_BATCH and its niced autogroup: `core/priority.py`) — so the recorder's and the arms'
sessions keep their CPU share while it imports and converts. This
node stays at normal priority and cheap: a stop is prompt even on a machine busy enough to starve
the conversions — the process is ended with SIGTERM, what was committed stays, and an append it
was in was never published: the next ingest of the dataset does it again (the data engine is
crash-safe by design). If that process exits on its own (its one-line error is on stderr: a dataset it cannot
append to, unreadable thresholds, a full disk), this node reports it as a node's failure (exit
code 1), so the supervisor — or `ros2 launch` — ends the session, as for any node.

Where data goes is decided at start and read-only (any participant of the graph can call
set_parameters): the dataset lies inside `watch_dir` — relative to it (default `dataset`) or an
absolute path inside it, checked again here with symlinks resolved; the state file
`<dataset>.ingest.json`, the locks, the audit page and any schema sibling lie beside it, so inside
too. Status: `~/status` (std_msgs/String JSON, latched: dataset, episodes and frames in it, bags
taken by outcome, the last ones) after every change of the state file, and `/diagnostics`.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from teleop_flywheel.core.topics import DIAGNOSTICS
from teleop_flywheel.recording.recorder.output_layout import SESSION_DATASET, SESSION_QUARANTINE, dataset_in
from teleop_flywheel.ros.errors import ParameterError
from teleop_flywheel.ros.nodes.common import diag_array, diag_status, spin_node
from teleop_flywheel.ros.params import Invalid, NodeParameters, NodeParams, spec

STATUS_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.TRANSIENT_LOCAL)
CODECS = ("libsvtav1", "h264")  # data/lerobot/v3_layout.py CODECS (not imported: this node starts light)
GRACE_S = 30.0  # data/convert/ingest_loop.py GRACE_S
ENCODE_STALL_S = 60.0  # data/lerobot/encoder_process.py ENCODE_STALL_S
LAST = 10  # bags a status lists
STOP_WAIT_S = 3.0  # after SIGTERM, before SIGKILL


@dataclass
class IngestParams(NodeParams):
    watch_dir: str = spec("bags", "the recorder's output_dir: closed, judged and kept episodes are taken from it",
                          required=True)
    dataset: str = spec(SESSION_DATASET, "the dataset kept current: a path inside watch_dir, relative to it (or "
                        "absolute inside it)", required=True)
    quarantine: bool = spec(True, f"move rejected bags to <watch_dir>/{SESSION_QUARANTINE}/<CODE>/ (false: leave "
                            "them where they are; the state file says they were rejected)")
    grace_s: float = spec(GRACE_S, "take a bag this long after its verdict when the operator neither kept nor "
                          "discarded it (s)", range=(0.0, 86_400.0))
    without_verdict: bool = spec(False, "also take closed bags without a verdict.json, once grace_s has passed")
    poll_s: float = spec(1.0, "seconds between looks at watch_dir", range=(0.05, 3600.0))
    codec: str = spec("libsvtav1", "video codec of the dataset (an existing dataset's must match: refused at start)",
                      choices=CODECS)
    fps: int = spec(30, "frames per second of the dataset (an existing dataset's must match)", range=(1, 1000))
    repo_id: str = spec("", "info.json repo_id of a new dataset; empty = the converter's default")
    trim_dead_air: bool = spec(False, "trim leading/trailing dead air instead of rejecting it")
    validate_config: str = spec("", "validator thresholds YAML; empty = the shipped config/validate.yaml")
    audit: bool = spec(True, "rewrite the audit page <dataset>_audit.html after every append")
    pre_encode: bool = spec(True, "encode camera video while episodes are recorded, so a kept episode converts "
                            "in seconds (false: all of it after the keep)")
    encode_timeout_s: float = spec(ENCODE_STALL_S, "a video encode that makes no progress this long is killed and "
                                   "the ingest process stops with one line naming the bag and camera (a node's "
                                   "failure); the dataset is left unchanged (s)", range=(0.1, 86_400.0))
    nice: int = spec(10, "niceness of the ingest process (with SCHED_BATCH and its autogroup niced; 0: none of "
                     "them)", range=(0, 19))

    def check(self) -> None:
        try:
            dataset_in(self.watch_dir, self.dataset)
        except ValueError as exc:
            raise Invalid("dataset", str(exc)) from None


def ingest_command(p: IngestParams, watch: Path, dataset: Path, python: str = sys.executable) -> list[str]:
    """The `teleop-flywheel ingest` command line this node runs, in a session of its own (`detach`)."""
    cmd = [python, "-m", "teleop_flywheel.ros.session.launch.detach", "--nice", str(p.nice), python, "-m",
           "teleop_flywheel.cli", "ingest",
           str(watch), "--dataset", str(dataset), "--grace", f"{p.grace_s:g}", "--poll", f"{p.poll_s:g}",
           "--codec", p.codec, "--fps", str(p.fps), "--workers", "1", "--nice", str(p.nice),
           "--encode-timeout", f"{p.encode_timeout_s:g}"]
    cmd += ["--quarantine", str(watch / SESSION_QUARANTINE)] if p.quarantine else ["--no-quarantine"]
    cmd += [] if p.audit else ["--no-audit"]
    cmd += ["--config", p.validate_config] if p.validate_config else []
    cmd += ["--repo-id", p.repo_id] if p.repo_id else []
    cmd += ["--trim-dead-air"] if p.trim_dead_air else []
    cmd += ["--without-verdict"] if p.without_verdict else []
    cmd += [] if p.pre_encode else ["--no-pre-encode"]
    return cmd


def _exit_text(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


class IngestNode(Node):
    def __init__(self, node_name: str = "ingest", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        p = self.params = NodeParameters(self, IngestParams).values
        self.watch = Path(os.path.abspath(os.path.expanduser(p.watch_dir)))
        try:
            self.watch.mkdir(parents=True, exist_ok=True)  # the recorder makes it too; either may come first
            self.dataset = dataset_in(self.watch, p.dataset, real=True)  # a symlink inside may lead outside
        except (ValueError, OSError) as exc:
            raise ParameterError(self.get_fully_qualified_name(), "watch_dir" if isinstance(exc, OSError)
                                 else "dataset", p.watch_dir if isinstance(exc, OSError) else p.dataset,
                                 str(exc)) from None
        self.state_file = self.dataset.with_name(self.dataset.name + ".ingest.json")
        self.failure = ""
        self._seen: tuple[int, int] | None = None
        self._status_pub = self.create_publisher(String, "~/status", STATUS_QOS)
        self._diag_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS, 10)
        # Started from this (the main) thread: the parent-death signal follows the thread that forked.
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            ingest_command(p, self.watch, self.dataset), stdin=subprocess.DEVNULL)
        self.get_logger().info(f"ingest process {self.proc.pid}: {self.watch} -> {self.dataset} (quarantine "
                               f"{'on' if p.quarantine else 'off'}, grace {p.grace_s:g} s, nice {p.nice})")
        self._publish_status()
        self.create_timer(min(p.poll_s, 0.5), self._check)
        self.create_timer(1.0, self._publish_diagnostics)

    def _check(self) -> None:
        """The ingest process still runs (else: this node's failure), and a changed state file is published."""
        if self.proc is not None and (code := self.proc.poll()) is not None and not self.failure:
            self.failure = f"the ingest process (pid {self.proc.pid}) exited: {_exit_text(code)} (its error is above)"
        try:
            st = self.state_file.stat()
            seen: tuple[int, int] | None = (st.st_mtime_ns, st.st_ino)
        except OSError:
            seen = None
        if seen != self._seen:
            self._seen = seen
            self._publish_status()

    def status(self) -> dict[str, Any]:
        try:
            bags = list(json.loads(self.state_file.read_text())["bags"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            bags = []  # none yet (or being replaced: the next look reads it)
        try:
            info = json.loads((self.dataset / "meta" / "info.json").read_text())
        except (OSError, ValueError):
            info = {}
        last = sorted(bags, key=lambda b: int(b.get("at_wall_ns") or 0))[-LAST:]
        return {"watch_dir": str(self.watch), "dataset": str(self.dataset), "state_file": str(self.state_file),
                "pid": self.proc.pid if self.proc else None, "episodes": int(info.get("total_episodes", 0)),
                "frames": int(info.get("total_frames", 0)), "taken": dict(Counter(str(b.get("outcome")) for b in bags)),
                "last": [{k: b.get(k) for k in ("name", "outcome", "codes", "quarantined_to", "at_wall_ns")}
                         for b in last], "error": self.failure}

    def _publish_status(self) -> None:
        self._status_pub.publish(String(data=json.dumps(self.status())))

    def _publish_diagnostics(self) -> None:
        self._diag_pub.publish(diag_array([diag_status(
            "ingest", "ERROR" if self.failure else "OK", self.failure or f"watching {self.watch}",
            {"dataset": self.dataset, "pid": self.proc.pid if self.proc else ""})]))

    def close(self) -> None:
        """End the ingest process (SIGTERM, then SIGKILL): a conversion it was in is finished by the next ingest."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    return spin_node(IngestNode, name="ingest")


if __name__ == "__main__":
    sys.exit(main())
