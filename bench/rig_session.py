"""CPU per node in the `sim` session the demo runs (`rig_cpu.py --part session`), one process
per node, one episode recorded per window."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from cpu_accounting import TreeCPU, spread, thread_cpu
from rig_floor import ros_env


def measure_session(seconds: float, repeats: int) -> dict[str, Any]:
    from teleop_flywheel.ros.nodes.recorder_client import RecorderClient
    from teleop_flywheel.ros.session.clients import RecorderStatus
    from teleop_flywheel.ros.session.launch.graph import CameraSpec, SessionConfig, build_graph, with_parameters
    from teleop_flywheel.ros.session.launch.supervisor import Session

    os.environ.update(ros_env())
    tmp = Path(tempfile.mkdtemp(prefix="bench_rig_cpu_"))
    policy_file = tmp / "policy.yaml"
    policy_file.write_text("move_s: 2.0\nfail_every: 2\nfail_offset_rad: 0.35\n")  # the demo's
    cfg = SessionConfig(cameras=(CameraSpec("front", source="synthetic", device="synthetic", fps=30.0,
                                            width=320, height=240),),
                        output_dir=str(tmp / "bags"), task="bench", operator="bench", checkpoint_id="scripted-v0",
                        policy_args=str(policy_file), ingest=True)
    graph = with_parameters(build_graph("sim", cfg), {"ingest": {"quarantine": False, "audit": False,
                                                                 "repo_id": "local/rig_cpu"}})
    windows: list[dict[str, dict[str, float]]] = []  # per window, per node: % of one core
    loads = []
    try:
        with Session(graph) as session:
            operator = RecorderClient(session.context, "rig_cpu_operator")
            status = RecorderStatus(operator.node)
            session.add_node(operator.node)
            if not operator.ready(60.0):
                raise RuntimeError("the recorder's services did not come up")
            status.wait_all_topics(60.0)
            roots = {name: proc.pid for name, proc in session.processes.items()}
            roots["supervisor (this process)"] = os.getpid()
            for _ in range(repeats):
                operator.call("start")
                time.sleep(1.0)  # the episode's streams settle
                loads.append(os.getloadavg()[0])
                threads0 = {name: thread_cpu(pid) for name, pid in roots.items()}
                with TreeCPU(roots) as cpu:
                    time.sleep(seconds)
                threads1 = {name: thread_cpu(pid) for name, pid in roots.items()}
                operator.call("stop")
                operator.call("keep")
                windows.append({name: {"cpu_pct": (parts["own_s"] + parts["started_s"]) / cpu.wall_s * 100,
                                       "started_pct": parts["started_s"] / cpu.wall_s * 100,
                                       **{f"{kind} pct": (threads1[name][kind] - t0) / cpu.wall_s * 100
                                          for kind, t0 in threads0[name].items()}}
                                for name, parts in cpu.seconds().items()})
                time.sleep(3.0)  # as between the demo's episodes: the verdict and ingest run here
            session.remove_node(operator.node)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    per_node = {name: {key: spread([w[name][key] for w in windows]) for key in windows[0][name]}
                for name in windows[0]}
    totals = [sum(w[n]["cpu_pct"] for n in w) for w in windows]
    return {"what": "one episode recorded per window; % of one core; started = processes a node started (ingest's "
                    "worker, the recorder's validator); by thread of the node's own process: main (its executor), "
                    "other python threads (an arm driver's bus loop), dds threads",
            "window_s": seconds, "repeats": repeats, "load_average_at_windows": loads,
            "per_node": dict(sorted(per_node.items(), key=lambda kv: -kv[1]["cpu_pct"]["median"])),
            "total_pct": spread(totals)}
