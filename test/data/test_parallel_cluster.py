"""docs/fleet.md's "Beyond one machine", run as written: its tagged blocks start a two-node Ray
cluster (two `ray start` processes), run `validate` and `convert` on it and stop it.

The commands run inside a network and PID namespace of the test's own (`unshare`): the network one
has only the loopback interface, so Ray (which trades a loopback node address for the machine's
own) listens on 127.0.0.1 alone; the PID one confines `ray stop` to this cluster's processes and
ends every one of them when the namespace's shell exits, whatever failed.

- spread: Ray's task events (what `ray list tasks` shows) name both nodes among the jobs' nodes;
- the same output as `--workers 1` on one process: the validation report and every dataset file,
  the videos included, byte for byte;
- a node killed mid-run: the second node's raylet is SIGKILLed while a conversion task runs on it;
  the run either equals the undisturbed one (the task retried on the head) or fails cleanly with no
  dataset published and no staging folder left.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from support.paths import ROOT

from teleop_flywheel.data.lerobot import consistency
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

pytest.importorskip("ray", reason="Ray not installed (pip install 'teleop_flywheel[ray]')")

BAGS = 4
TIMEOUT_S = 600  # a hung cluster, not a slow one: two Ray starts take ~60 s beside other jobs on 2 cores
DOC = ROOT / "docs" / "fleet.md"

# Run inside the namespace once the cluster is up: which node each finished job ran on, then (with
# `kill`) a second conversion during which the second node's raylet is killed as soon as one of its
# jobs is seen running there.
PROBE = r'''
import json, os, signal, subprocess, sys, time
import ray
from ray._private import state
from ray.core.generated import common_pb2, gcs_pb2

RUNNING, FINISHED = common_pb2.TaskStatus.Value("RUNNING"), common_pb2.TaskStatus.Value("FINISHED")
ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
heads = [n["NodeID"] for n in ray.nodes() if n["Alive"] and "node:__internal_head__" in n["Resources"]]
others = [n["NodeID"] for n in ray.nodes() if n["Alive"] and "station_b" in n["Resources"]]


def jobs():
    """{task id: (node id, states seen)} of the verbs' jobs (`data.parallel._call`), from the GCS."""
    out = {}
    for raw in state.state._connect_and_get_accessor().get_task_events():
        ev = gcs_pb2.TaskEvents.FromString(raw)
        tid = ev.task_id.hex()
        node, states = out.get(tid, ("", set()))
        if ev.HasField("task_info") and ev.task_info.func_or_class_name.split(".")[-1] != "_call":
            continue
        if ev.HasField("state_updates"):
            node = ev.state_updates.node_id.hex() or node
            states = states | set(ev.state_updates.state_ts_ns)
        out[tid] = (node, states)
    return out


if sys.argv[1] == "spread":
    time.sleep(1.5)  # the workers' task events reach the GCS once a second
    done = [node for node, states in jobs().values() if FINISHED in states]
    open(sys.argv[2], "w").write(json.dumps({"head": heads, "other": others, "finished_on": done}))
else:
    run = subprocess.Popen(sys.argv[3:], stdout=open("killed.out", "w"), stderr=subprocess.STDOUT)
    killed = None
    while run.poll() is None and killed is None:
        running = [t for t, (node, states) in jobs().items() if node in others and RUNNING in states
                   and FINISHED not in states]
        if running:
            raylet = next(int(p) for p in os.listdir("/proc") if p.isdigit() and
                          f"--node_id={others[0]}".encode() in open(f"/proc/{p}/cmdline", "rb").read())
            os.kill(raylet, signal.SIGKILL)
            killed = running
        time.sleep(0.1)
    open(sys.argv[2], "w").write(json.dumps({"killed_while_running": killed, "rc": run.wait()}))
'''


def _blocks() -> dict[str, list[str]]:
    spec = importlib.util.spec_from_file_location("readme_steps", ROOT / ".ci" / "readme_steps.py")
    assert spec and spec.loader
    steps: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(steps)
    return steps.blocks(DOC.read_text())


def _namespace() -> list[str]:
    """A network namespace with only loopback and a PID namespace whose end kills every process in
    it (`--kill-child`: also when this test gives up on it); unprivileged through a user namespace."""
    if not shutil.which("unshare"):
        pytest.fail("util-linux's unshare is needed to keep the cluster on loopback")
    return ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc",
            *([] if os.geteuid() == 0 else ["--map-root-user"])]


def _files(root: Path) -> dict[str, bytes]:
    """{relative path: bytes} of every file under the dataset (through its version link), but the
    consistency seal: it records this machine's inodes and mtimes of the files, so no two converts
    share it. Each dataset's own seal must hold for its files."""
    base = root.resolve()
    assert consistency.sealed(base), f"{base}: its seal does not match its files"
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*"))
            if p.is_file() and p.relative_to(base).as_posix() != consistency.SEAL_PATH}


def _same_dataset(a: Path, b: Path) -> None:
    fa, fb = _files(a), _files(b)
    assert sorted(fa) == sorted(fb)
    assert [name for name in fa if fa[name] != fb[name]] == []


def test_the_documented_two_node_cluster_spreads_matches_one_process_and_survives_a_killed_node(
        tmp_path: Path) -> None:
    blocks = _blocks()
    start, run, stop = blocks["cluster-start"], blocks["cluster-run"], blocks["cluster-stop"]
    assert all("127.0.0.1" in line for line in start) and "--head" in start[0] and "--address" in start[1]
    assert any("--include-dashboard false" in line for line in start)  # nothing served over HTTP
    convert = next(line for line in run if " convert " in line)
    for i in range(BAGS):
        write_session(tmp_path / "bags" / f"ep{i}", SessionSpec(
            duration_s=2.5, width=192, height=144, seed=i, session_time_s=60.0 * i))
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "RAY_task_events_report_interval_ms": "100"}
    env.pop("RAY_ADDRESS", None)

    # The reference: the same verbs in this process's way, one bag after the other.
    single = [line.replace("--executor ray --workers 2", "--workers 1") for line in run]
    subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(single)], cwd=tmp_path, env=env, check=True,
                   capture_output=True, timeout=TIMEOUT_S)
    (tmp_path / "single").mkdir()
    for name in ("validate.json", "dataset", "dataset.versions"):
        (tmp_path / name).rename(tmp_path / "single" / name)

    (tmp_path / "probe.py").write_text(PROBE)
    kill_run = convert.replace("--dataset dataset", "--dataset killed/dataset")  # the same name: the card says it
    (tmp_path / "killed").mkdir()
    script = "\n".join([
        "set -euo pipefail",
        "ip link set lo up",
        f"trap '{'; '.join(stop)} >/dev/null 2>&1' EXIT",
        *start,
        "ss -Hltn | awk '{print $4}' > listening.txt",
        *run,
        "python probe.py spread spread.json >/dev/null 2>&1",  # Ray's driver prints its own lines
        f"python probe.py kill kill.json {kill_run} >/dev/null 2>&1",
    ])
    done = subprocess.run([*_namespace(), "bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

    listening = (tmp_path / "listening.txt").read_text().split()
    assert listening and all(a.rsplit(":", 1)[0] in ("127.0.0.1", "[::ffff:127.0.0.1]") for a in listening), listening

    spread = json.loads((tmp_path / "spread.json").read_text())
    assert len(spread["head"]) == 1 and len(spread["other"]) == 1
    assert len(spread["finished_on"]) >= 2 * BAGS  # validate's and convert's jobs
    assert set(spread["finished_on"]) == {spread["head"][0], spread["other"][0]}, spread

    assert (tmp_path / "validate.json").read_bytes() == (tmp_path / "single" / "validate.json").read_bytes()
    _same_dataset(tmp_path / "dataset", tmp_path / "single" / "dataset")

    kill = json.loads((tmp_path / "kill.json").read_text())
    assert kill["killed_while_running"], "no job was seen running on the second node"
    out = (tmp_path / "killed.out").read_text()
    if kill["rc"] == 0:
        _same_dataset(tmp_path / "killed" / "dataset", tmp_path / "single" / "dataset")
    else:  # a clean failure: one line, nothing published, nothing half-written left
        assert "teleop-flywheel convert: error" in out, out[-2000:]
        assert not list((tmp_path / "killed").iterdir()), out[-2000:]
