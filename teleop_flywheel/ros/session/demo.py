"""`teleop-flywheel demo --out DIR`: the main job, end to end, on simulated hardware.

A simulated SO-101 pair (two `sim-bus` processes on pseudo-terminals), a synthetic camera,
the scripted policy (which heads for a wrong waypoint on every second move), and a scripted
operator who watches it: when the policy goes wrong they press the virtual foot pedal (real
`input_event` records into the pedal node's FIFO), take over, label why, and hand back. One
bag per episode, outcomes set through the recorder's parameters. Some of the seeds' failures
are injected on purpose — a camera stall, an intervention nobody labelled, an outcome
nobody set — so the validator has something real to reject. Then: validate (rejects go to
quarantine), convert the rest to a LeRobot v3.0 dataset, audit, curate, write the data card,
and print where everything is with the key numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from teleop_flywheel.core.errors import PartialFailure, UsageError
from teleop_flywheel.hw.pedal.virtual import VirtualPedal
from teleop_flywheel.ros.nodes.recorder_client import RecorderClient
from teleop_flywheel.ros.session.graph import CameraSpec, SessionConfig, build_graph

WARMUP_S = 2.0  # after every stream is found; then episodes start on a fixed schedule
GAP_S = 2.0
READY_S = 60.0  # bound on the recorder's services and streams coming up (a loaded 2-core machine)


@dataclass(frozen=True)
class EpisodePlan:
    index: int
    outcome: str  # success | failure | "" (nobody sets it: injected failure)
    label: str | None  # trigger label the operator gives; None = forgets (injected failure)
    camera_stall: bool = False


def plan(episodes: int) -> list[EpisodePlan]:
    """Mostly clean episodes; one each of the seeds' camera stall, unlabelled takeover, unset outcome."""
    plans = []
    for i in range(episodes):
        kind = i % 6
        plans.append(EpisodePlan(
            i,
            outcome="" if kind == 3 else ("failure" if kind == 4 else "success"),
            label=None if kind == 2 else ("about_to_collide" if kind == 5 else "wrong_grasp"),
            camera_stall=kind == 1,
        ))
    return plans


def cli(*args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "teleop_flywheel.cli", *args]
    print(f"\n$ teleop-flywheel {' '.join(args)}", flush=True)
    return subprocess.run(cmd, text=True, capture_output=capture, check=False)


def record(out: Path, plans: list[EpisodePlan], seconds: float) -> Path:
    from teleop_flywheel.ros.session.clients import ParameterClient, PolicyClient, RecorderStatus
    from teleop_flywheel.ros.session.supervisor import Session

    bags = out / "bags"
    episode_span = seconds + GAP_S
    policy_file = out / "policy.yaml"  # the scripted policy: every second move heads for a wrong waypoint
    policy_file.write_text("move_s: 2.0\nfail_every: 2\nfail_offset_rad: 0.35\n")
    cfg = SessionConfig(cameras=(CameraSpec("front", source="synthetic", device="synthetic", fps=30.0,
                                            width=320, height=240),),
                        output_dir=str(bags), task="move the brick to the green square", operator="sim-operator",
                        checkpoint_id="scripted-v0", policy_args=str(policy_file))
    graph = build_graph("sim", cfg)
    print(f"demo: starting the simulated rig: {len(graph.sim_arms)} simulated arms (sim-bus) and {len(graph.nodes)} "
          f"nodes, one process each (up to {READY_S:.0f} s on a loaded machine)...", flush=True)
    with Session(graph) as session:  # returns once every node is on the graph
        operator = RecorderClient(session.context, "demo_operator")
        policy = PolicyClient(operator.node)
        camera = ParameterClient(operator.node, "/camera_front")
        status = RecorderStatus(operator.node)
        session.add_node(operator.node)
        if not operator.ready(READY_S):
            raise RuntimeError("the recorder's services did not come up")
        status.wait_all_topics(READY_S)  # the recorder has found every stream it records
        t_start = time.monotonic()
        pedal = VirtualPedal(session.graph.pedal_fifo)
        try:
            print(f"demo: session up ({', '.join(session.node_names)}: one process each); "
                  f"recording {len(plans)} episodes of {seconds:.0f} s", flush=True)
            for p in plans:
                t_episode = t_start + WARMUP_S + p.index * episode_span
                while time.monotonic() < t_episode:
                    if session.failed.wait(0.05):
                        raise RuntimeError(f"the session failed: {session.failure}")
                policy.reset()
                operator.call("start")
                t0 = time.monotonic()

                def at(t: float) -> None:
                    while time.monotonic() < t0 + t:
                        time.sleep(0.01)

                # The policy's second move (2-4 s) heads for a wrong waypoint: the operator steps in.
                at(2.4)
                pedal.takeover(True)
                at(2.9)
                if p.label:
                    pedal.label(p.label)
                if p.camera_stall:  # the seeds' 4-second camera dropout, mid-episode
                    at(seconds * 0.4)
                    camera.set(stall_now_s=4.0)
                at(min(4.4, seconds - 1.0))
                pedal.takeover(False)
                at(seconds - 0.3)
                if p.outcome:
                    operator.set(outcome=p.outcome, attempts=1 if p.outcome == "success" else 0,
                                 failure_label="dropped the brick" if p.outcome == "failure" else "")
                at(seconds)
                before = status.last_saved()
                operator.call("stop")
                name = Path(status.saved_after(before)).name
                print(f"demo: episode {p.index}: {name} (outcome {p.outcome or 'NOT SET'}, "
                      f"label {p.label or 'NONE'}{', camera stall' if p.camera_stall else ''})", flush=True)
        finally:
            pedal.close()
        session.remove_node(operator.node)
        if session.failed.is_set():
            raise RuntimeError(f"the session failed: {session.failure}")
    return bags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="output folder (must not exist, or be empty)")
    parser.add_argument("--episodes", type=int, default=6, help="episodes to record (default 6)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds per episode (default 8, at least 6)")
    parser.add_argument("--codec", default="libsvtav1", choices=("libsvtav1", "h264"), help="dataset video codec")


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError("exists and is not an empty folder", where=str(out),
                         fix="choose a new --out: nothing is ever overwritten")
    if args.seconds < 6 or args.episodes < 1:
        raise UsageError("need --episodes >= 1 and --seconds >= 6", where="the command line",
                         fix="the scripted takeover happens at 2.4-4.4 s into each episode")
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    # Its own graph: a random domain per run, so no other session's nodes join this one.
    domain = os.environ["ROS_DOMAIN_ID"] = str(random.SystemRandom().randint(1, 101))
    print(f"demo: ROS domain {domain}, discovery {os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE']} "
          f"(watch it: ROS_DOMAIN_ID={domain} teleop-flywheel console)", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    plans = plan(args.episodes)
    try:
        bags = record(out, plans, args.seconds)
    except RuntimeError as exc:  # RecorderCallError included: one line, exit 1 (cli.py)
        raise PartialFailure(f"recording stopped: {exc}", where=str(out),
                             fix="the lines above say which node; a loaded machine can starve one: run it again") from exc
    print(f"\ndemo: {len(plans)} episodes recorded in {bags}; now validate, convert, audit, curate and write the "
          "data card", flush=True)
    dataset, quarantine = out / "dataset", out / "quarantine"
    report = out / "validation.json"
    validated = cli("validate", str(bags), "--json", capture=True)
    if validated.returncode != 0:
        print(validated.stderr, end="", file=sys.stderr)
        raise PartialFailure("validation could not read the recorded bags", where=str(bags),
                             fix="the line above says why")
    report.write_text(validated.stdout)
    cli("validate", str(bags))
    failed = [] if cli("convert", str(bags), "--out", str(dataset), "--codec", args.codec,
                       "--repo-id", "local/teleop_flywheel_demo").returncode == 0 else ["convert"]
    if (dataset / "meta" / "info.json").exists():
        steps = [
            ("audit", str(dataset), "--html", str(out / "audit.html")),
            ("curate", str(dataset), "--plot", str(out / "curation.png")),
            ("card", str(dataset), "--validation", str(report)),
        ]
        failed += [s[0] for s in steps if cli(*s).returncode != 0]
    else:
        print("\ndemo: NO EPISODE PASSED VALIDATION, so no dataset was written. Read the reasons above: on a "
              "loaded machine the simulated arms' streams can stall (FRAME_GAP) — that is the validator working.")
    # Quarantine after conversion so the converter saw (and skipped) the rejects itself.
    cli("validate", str(bags), "--quarantine", str(quarantine), capture=True)
    summary = json.loads(report.read_text())["summary"]
    print("\n=== demo summary ===")
    print(f"bags:        {bags}  (rejected ones moved to {quarantine}/<reason>/ with a JSON record)")
    print(f"dataset:     {dataset}  (LeRobot v3.0; data card {dataset / 'README.md'})")
    print(f"reports:     {report}, {out / 'audit.html'}, {out / 'curation.png'}")
    rate = 100 * summary["rejection_rate"]
    reasons = ", ".join(f"{c} {n}" for c, n in summary["reasons"].items()) or "none"
    print(f"rejected:    {summary['rejected']}/{summary['episodes']} episodes ({rate:.0f} %): {reasons}")
    print(f"ROS graph:   domain {domain}, discovery {os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE']}")
    print(f"interventions: {len(plans)} takeovers in {len(plans)} episodes (1 per episode), "
          f"{sum(p.label is None for p in plans)} left unlabelled on purpose")
    if failed:
        raise PartialFailure(f"these steps failed: {', '.join(failed)}", where=str(out), fix="see their output above")
    return 0
