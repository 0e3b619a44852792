"""`teleop-flywheel demo --out DIR`: the main job, end to end, on simulated hardware.

A simulated SO-101 pair (two `sim-bus` processes on pseudo-terminals), a synthetic camera,
the scripted policy (which heads for a wrong waypoint on every second move), and a scripted
operator who watches it: when the policy goes wrong they press the virtual foot pedal (real
`input_event` records into the pedal node's FIFO), take over, close the gripper on the object,
label why, and hand back. Force feedback: the leader renders the follower's grasp on its trigger
(`feedback: gripper`) and the simulated leader's trigger is in the operator's finger (`sim-bus
--hand`), so in the first episode, whose operator's turn is teleoperation (the leader renders only
then, not in a takeover), the operator feels the grasp and stops; the summary says what was rendered
and how hard the follower pressed there against the dataset's other episodes. One
bag per episode, outcomes set through the recorder's parameters. The session records under the
task spec `config/task_demo.yaml`: between takes the scripted operator sends the arm home (the start
region), and the policy ends each take holding the place pose (its success predicate) — except
where it puts the brick on the wrong square (`policy_miss.yaml`): once flagged a failure, as it
is, and once flagged a success. Some of the seeds' failures are injected on purpose — a camera
stall, an intervention nobody labelled, an outcome nobody set, a success that was not one — so the
validator has something real to reject. The recorder judges the spec's predicate on each take's
final pose at stop, and this log prints it beside the operator's flag. Every episode is judged the moment
it stops (the recorder's verdict at stop): its verdict is in `/recorder/status`, in
`<bag>/verdict.json` and in this log as it comes; the scripted operator keeps every episode (the
failures are there to be rejected). The session runs with `ingest:=true`: while the next episodes
record, each kept one is validated and appended to `bags/dataset` (rejects left where they are,
for the batch steps below to quarantine), and this log says when each landed. Then: validate
(rejects go to quarantine), convert the rest to a LeRobot v3.0 dataset, audit, curate, write the
data card, check that the dataset ingest kept current holds the same episodes and frames, and
print where everything is with the key numbers — the failures injected on purpose apart from the
ones nobody injected (a loaded machine can stall a simulated arm), and any injected one the
validator missed.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from teleop_flywheel.core.episode import EpisodeMeta
from teleop_flywheel.core.errors import PartialFailure, UsageError
from teleop_flywheel.core.files import replace_atomic
from teleop_flywheel.core.resources import config_path
from teleop_flywheel.core.task_spec import ClockProbe, load_task_spec
from teleop_flywheel.hw.pedal.virtual import VirtualPedal
from teleop_flywheel.recording.mcap.metadata import read_metadata_yaml
from teleop_flywheel.recording.recorder import verdict
from teleop_flywheel.recording.recorder.spec_checks import outcome_disagrees
from teleop_flywheel.ros.commands.demo_plan import TASK_SPEC, EpisodePlan, injected, plan
from teleop_flywheel.ros.commands.demo_summary import summarise
from teleop_flywheel.ros.nodes.recorder_client import RecorderClient
from teleop_flywheel.ros.session.launch.graph import SIM_DIR, CameraSpec, SessionConfig, build_graph, with_parameters

WARMUP_S = 2.5  # after every stream is found (the arm goes home meanwhile); then episodes start on a fixed schedule
GAP_S = 2.5  # between a stop and the next start: the arm goes home (a 2 s move) after the stop's own delay
MIN_SECONDS = 7.0  # the policy reaches the place pose about 6.6 s into a take (after the takeover, 2.4-4.4 s)
READY_S = 60.0  # bound on the recorder's services and streams coming up (a loaded 2-core machine)
VERDICT_WAIT_S = 120.0  # after the last stop, for the verdicts still being computed
INGEST_WAIT_S = 300.0  # then for ingest (nice 10: slow on a loaded machine) to take every judged episode
REPO_ID = "local/teleop_flywheel_demo"
# The scripted policy's waypoints (radians): home, a grasp (every second move is offset by FAIL_OFFSET: the
# wrong grasp the operator takes over from), the place. The fourth is the place minus the offset, so its
# "wrong" move lands on the place: the arm holds the place pose until the take ends.
HOME = [0.0, -0.3, 0.4, 0.2, 0.0, 0.1]
GRASP = [0.5, 0.1, 0.1, -0.2, 0.6, 0.8]
PLACE = [-0.4, 0.2, -0.2, 0.3, -0.5, 0.2]
WRONG_PLACE = [0.5, 0.2, -0.2, 0.3, 0.4, 0.2]  # the brick on the wrong square: outside the spec's success region
FAIL_OFFSET = 0.35
LEADER_WORLD = "leader_world.json"  # in the sim dir: the leader simulator's world file (the finger's squeeze)


def policy_yaml(place: list[float], probe: ClockProbe | None = None) -> str:
    """The scripted policy's file: home, grasp, `place`, and `place` minus the offset (held, see PLACE);
    the task spec's clock probe, played at every reset, when it has one."""
    hold = [round(q - FAIL_OFFSET, 6) for q in place]
    text = (f"move_s: 2.0\nfail_every: 2\nfail_offset_rad: {FAIL_OFFSET}\n"
            f"waypoints: [{HOME}, {GRASP}, {place}, {hold}]\n")
    if probe is not None:
        text += (f"clock_probe: {{joint: {probe.joint}, amplitude_rad: {probe.amplitude_rad!r}, "
                 f"duration_s: {probe.duration_s!r}}}\n")
    return text


class VerdictLog:
    """Prints each episode's verdict at stop as it appears on `/recorder/status` (read from the bag's
    verdict.json), with what the demo injected into it."""

    def __init__(self, status: Any, plans: list[EpisodePlan]) -> None:
        self.status, self.plans = status, plans
        self.names: dict[int, str] = {}
        self.docs: dict[str, dict[str, Any]] = {}
        self.seconds: dict[str, float] = {}
        self.checks: dict[int, dict[str, Any]] = {}  # episode index -> the spec's check at stop, with the flag

    def at_stop(self, index: int, bag: Path) -> None:
        """Prints the task spec's success predicate the recorder judged on the take's final pose, beside
        the operator's flag: a disagreement is OUTCOME_MISMATCH, caught at the rig."""
        meta = EpisodeMeta.from_strings(read_metadata_yaml(bag)["custom_data"])
        check = dict(meta.outcome_check)
        if not check:
            print(f"demo: episode {index}: no success check at stop (recorded without a task spec)", flush=True)
            return
        check.update(outcome=meta.outcome, disagrees=outcome_disagrees(meta.outcome, check["passed"]))
        self.checks[index] = check
        verdict_of_flag = ("OUTCOME_MISMATCH, caught at the rig" if check["disagrees"]
                           else "nothing to compare" if meta.outcome == "unset" else "agrees")
        print(f"demo: at stop — episode {index}: the spec's success check {'met' if check['passed'] else 'NOT met'} "
              f"({check['detail']}), flagged {meta.outcome}: {verdict_of_flag}", flush=True)

    def poll(self) -> None:
        by_name = {n: i for i, n in self.names.items()}
        for v in (self.status.latest or {}).get("verdicts", []):
            name = v.get("episode")
            if name not in by_name or name in self.docs or v.get("verdict") == verdict.PENDING:
                continue
            doc = verdict.read_verdict(v["bag"]) or {"verdict": v.get("verdict"), "codes": v.get("codes")}
            self.docs[name] = doc
            if v.get("seconds") is not None:
                self.seconds[name] = float(v["seconds"])
            what = ", ".join(w for _c, _n, w in injected(self.plans[by_name[name]])) or "nothing"
            after = f" {v['seconds']:.1f} s after stop" if v.get("seconds") is not None else ""
            print(f"demo: verdict{after} — episode {by_name[name]} {name}: {verdict.line(doc)} "
                  f"[injected: {what}]", flush=True)

    def wait_all(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.docs) < len(self.names) and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.1)
        for i, name in sorted(self.names.items()):
            if name not in self.docs:
                print(f"demo: no verdict for episode {i} {name} within {timeout_s:.0f} s of the last stop", flush=True)


class IngestLog:
    """Prints each episode as the session's ingest takes it (its state file beside `bags/dataset`): what
    became of it, the dataset's size then, and how long after the episode's stop."""

    def __init__(self, bags: Path, verdicts: VerdictLog) -> None:
        self.dataset, self.state = bags / "dataset", bags / "dataset.ingest.json"
        self.verdicts = verdicts
        self.entries: dict[str, dict[str, Any]] = {}
        self.seconds: list[float] = []
        self.while_recording = 0  # taken before the last episode stopped

    def poll(self, recording: bool = True) -> None:
        try:
            bags = list(json.loads(self.state.read_text())["bags"].values())
        except (OSError, ValueError, KeyError):
            return  # nothing taken yet
        try:
            info = json.loads((self.dataset / "meta" / "info.json").read_text())
        except (OSError, ValueError):
            info = {}  # no episode converted yet
        index = {n: i for i, n in self.verdicts.names.items()}
        for e in bags:
            name = e.get("name")
            if name not in index or name in self.entries:
                continue
            self.entries[name] = e
            self.while_recording += recording
            stopped = (self.verdicts.docs.get(name) or {}).get("stopped_wall_ns")
            after = ""
            if stopped and e.get("at_wall_ns"):
                self.seconds.append((e["at_wall_ns"] - stopped) / 1e9)
                after = f", {self.seconds[-1]:.1f} s after its stop"
            ahead = f" ({e['pre_encoded_frames']} camera frames encoded while it recorded)" \
                if e.get("pre_encoded_frames") else ""
            print(f"demo: ingest — episode {index[name]} {name}: {' '.join([e['outcome'], *(e.get('codes') or [])])}"
                  f"{after}{ahead}; bags/dataset now {info.get('total_episodes', 0)} episodes, "
                  f"{info.get('total_frames', 0)} frames", flush=True)

    def wait_all(self, timeout_s: float, failed: Any) -> None:
        """Until every episode with a verdict is taken (one without a verdict never is)."""
        deadline = time.monotonic() + timeout_s
        while set(self.verdicts.docs) - set(self.entries) and time.monotonic() < deadline and not failed.is_set():
            self.poll(recording=False)
            time.sleep(0.2)
        left = sorted(set(self.verdicts.names.values()) - set(self.entries))
        if left:
            print(f"demo: ingest had not taken {', '.join(left)} when the demo stopped waiting (nice 10 on a "
                  "loaded machine, or no verdict); the next ingest of bags/dataset takes them", flush=True)

    def agreement(self, batch: Path) -> tuple[bool, str]:
        """(agrees, the summary line): the episodes ingest converted are those the batch convert made of
        the same bags, frame for frame."""
        from teleop_flywheel.data.errors import DatasetError
        from teleop_flywheel.data.lerobot.dataset import LeRobotDataset

        def episodes(root: Path) -> dict[str, int]:
            try:
                table = LeRobotDataset.open(root).episodes
            except DatasetError:
                return {}
            return {str(i): int(n) for i, n in zip(table["episode_id"], table["length"], strict=True)}

        ids = {e.get("episode_id") for e in self.entries.values()}
        mine, theirs = episodes(self.dataset), {k: v for k, v in episodes(batch).items() if k in ids}
        counts = {o: sum(e["outcome"] == o for e in self.entries.values()) for o in ("converted", "rejected")}
        times = sorted(self.seconds)
        text = (f"bags/dataset kept current while the session recorded: {len(self.entries)}/"
                f"{len(self.verdicts.names)} episodes taken ({self.while_recording} before the last one stopped), "
                f"{counts['converted']} converted, {counts['rejected']} rejected (left for the batch quarantine)"
                + (f"; stop -> in the dataset median {times[len(times) // 2]:.1f} s, max {times[-1]:.1f} s"
                   if times else ""))
        if mine == theirs:
            return True, f"{text}; the same {len(mine)} episodes and {sum(mine.values())} frames as the batch convert"
        return False, (f"{text}; DISAGREES with the batch convert of the same bags: {len(mine)} episodes and "
                       f"{sum(mine.values())} frames against {len(theirs)} and {sum(theirs.values())}")


def command(args: tuple[str, ...]) -> list[str]:
    """The command line of `teleop-flywheel *args` in this interpreter."""
    return [sys.executable, "-m", "teleop_flywheel.cli", *args]


def echo(args: tuple[str, ...]) -> None:
    """Show the user the command a step runs, as they would type it."""
    print(f"\n$ teleop-flywheel {' '.join(args)}", flush=True)


def cli(*args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
    echo(args)
    return subprocess.run(command(args), text=True, capture_output=capture, check=False)


def together(*steps: tuple[str, ...], data: int | None = None) -> list[subprocess.CompletedProcess[str]]:
    """Independent commands at once, one process each, then each one's command line and output in
    order: a batch step is mostly an interpreter starting and importing, which a second core halves.
    Step number `data` writes a document on stdout: returned, not printed (its stderr is)."""
    procs = [subprocess.Popen(command(args), text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE if i == data else subprocess.STDOUT)
             for i, args in enumerate(steps)]
    done = []
    for i, (args, proc) in enumerate(zip(steps, procs, strict=True)):
        out, err = proc.communicate()
        echo(args)
        print(err if i == data else out, end="", flush=True)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


class ScriptedOperator:
    """The demo's operator at the rig, over the nodes' ROS interfaces: resets the scene for each take
    (the policy it runs, the arm sent home), steps in when the policy goes wrong (pedal down, the
    trigger label, pedal up — or forgets the label, as planned), stalls the camera where planned,
    sets the outcome (or forgets it), stops and keeps every episode (the failures are there to be
    rejected). Verdicts and ingest are logged as they come."""

    def __init__(self, session: Any, plans: list[EpisodePlan], policy_file: Path, miss_file: Path,
                 bags: Path) -> None:
        from teleop_flywheel.ros.session.clients import ParameterClient, PolicyClient, RecorderStatus

        self.session, self.plans = session, plans
        self.policy_file, self.miss_file = policy_file, miss_file
        self.recorder = RecorderClient(session.context, "demo_operator")
        self.policy = PolicyClient(self.recorder.node)
        self.camera = ParameterClient(self.recorder.node, "/camera_front")
        self.teleop = ParameterClient(self.recorder.node, "/teleop")
        # The leader simulator's world file: its "squeeze" shuts the trigger the operator's finger holds.
        self.hand = Path(next(a.world for a in session.graph.sim_arms if a.role == "leader"))
        self.status = RecorderStatus(self.recorder.node)
        session.add_node(self.recorder.node)
        if not self.recorder.ready(READY_S):
            raise RuntimeError("the recorder's services did not come up")
        self.status.wait_all_topics(READY_S)  # the recorder has found every stream it records
        self.verdicts = VerdictLog(self.status, plans)
        self.ingested = IngestLog(bags, self.verdicts)
        self._running = policy_file
        self._pedal: VirtualPedal | None = None

    def home(self, p: EpisodePlan) -> None:
        """Reset the scene for take `p`: the policy it runs, the arm sent home."""
        wanted = self.miss_file if p.misses else self.policy_file
        if wanted != self._running:
            self.policy.swap(policy_args=str(wanted))
            self._running = wanted
        self.policy.reset()

    def wait_until(self, t: float) -> None:
        """Until monotonic time `t`, logging verdicts and ingest as they come; RuntimeError if the session fails."""
        while time.monotonic() < t:
            self.verdicts.poll()  # the last episode's verdict, as soon as the recorder has it
            self.ingested.poll()  # and the episodes ingest has taken since
            if self.session.failed.wait(0.05):
                raise RuntimeError(f"the session failed: {self.session.failure}")

    def take(self, p: EpisodePlan, seconds: float) -> Path:
        """Record take `p` as planned; returns its bag."""
        pedal = self.pedal()
        self.policy.reset()
        self.recorder.call("start")
        t0 = time.monotonic()

        def at(t: float) -> None:
            while time.monotonic() < t0 + t:
                time.sleep(0.01)

        # The policy's second move (2-4 s) heads for a wrong waypoint: the operator steps in (in the
        # feedback take, by switching to teleop mode) and closes the gripper on the object.
        at(2.4)
        self.step_in(p, True)
        at(2.9)
        if p.label:
            pedal.label(p.label)
        if p.camera_stall:  # the seeds' 4-second camera dropout, mid-episode
            at(seconds * 0.4)
            self.camera.set(stall_now_s=4.0)
        at(min(4.3, seconds - 1.1))
        self.squeeze(False)  # lets go of the trigger before handing back
        at(min(4.4, seconds - 1.0))
        self.step_in(p, False)
        at(seconds - 0.3)
        if p.outcome:
            self.recorder.label(outcome=p.outcome, attempts=1 if p.outcome == "success" else 0,
                                failure_label="dropped the brick" if p.outcome == "failure" else "")
        at(seconds)
        before = self.status.last_saved()
        self.recorder.call("stop")
        saved = Path(self.status.saved_after(before))
        self.verdicts.names[p.index] = saved.name
        self.recorder.call("keep")  # the scripted operator keeps them all: the failures are there to be rejected
        return saved

    def step_in(self, p: EpisodePlan, down: bool) -> None:
        """The operator's turn begins (`down`) or ends: the pedal, or in the feedback take the teleop
        node's mode; it squeezes the trigger from the start of its turn."""
        if p.feedback:
            self.teleop.set(mode="teleop" if down else "policy")
        else:
            self.pedal().takeover(down)
        if down:
            self.squeeze(True)

    def squeeze(self, shut: bool) -> None:
        """The scripted operator's finger shuts the leader's trigger, or lets it go (sim-bus --hand)."""
        replace_atomic(self.hand, json.dumps({"squeeze": shut}) + "\n")

    def pedal(self) -> VirtualPedal:
        """The simulated pedal's FIFO, opened once."""
        if self._pedal is None:
            self._pedal = VirtualPedal(self.session.graph.pedal_fifo)
        return self._pedal

    def close(self) -> None:
        if self._pedal is not None:
            self._pedal.close()


def write_policies(out: Path) -> tuple[Path, Path]:
    """The scripted policy's files: every second move heads for a wrong waypoint; it ends holding the
    place pose, or (policy_miss.yaml, the episodes that miss) the wrong square."""
    policy_file, miss_file = out / "policy.yaml", out / "policy_miss.yaml"
    probe = load_task_spec(config_path(TASK_SPEC)).clock_probe
    policy_file.write_text(policy_yaml(PLACE, probe))
    miss_file.write_text(policy_yaml(WRONG_PLACE, probe))
    return policy_file, miss_file


def demo_graph(bags: Path, policy_file: Path, codec: str) -> Any:
    """The simulated rig: the sim session with a synthetic front camera, the demo's task spec and
    policy, and ingest into `bags/dataset`; the leader's trigger in the operator's finger (`sim-bus
    --hand`, squeezed through the leader's world file) and rendering the follower's grasp (`feedback:
    gripper`, mapped through the follower's calibration)."""
    cfg = SessionConfig(cameras=(CameraSpec("front", source="synthetic", device="synthetic", fps=30.0,
                                            width=320, height=240),),
                        output_dir=str(bags), task_spec=str(config_path(TASK_SPEC)), operator="sim-operator",
                        checkpoint_id="scripted-v0", policy_args=str(policy_file), ingest=True)
    # Ingest leaves rejects in place (the batch validation below reports and quarantines them) and draws no
    # audit page (the demo draws one at the end).
    graph = build_graph("sim", cfg)
    graph = replace(graph, sim_arms=tuple(replace(a, hand=True, world=f"{SIM_DIR}/{LEADER_WORLD}")
                                          if a.role == "leader" else a for a in graph.sim_arms))
    follower_calibration = graph.node("follower_arm").parameters["calibration_file"]
    return with_parameters(graph, {"ingest": {"quarantine": False, "audit": False, "codec": codec, "repo_id": REPO_ID},
                                   "leader_arm": {"feedback": "gripper",
                                                  "follower_calibration_file": follower_calibration}})


def record(out: Path, plans: list[EpisodePlan], seconds: float, codec: str) -> tuple[Path, VerdictLog, IngestLog]:
    from teleop_flywheel.ros.session.launch.supervisor import Session

    bags = out / "bags"
    policy_file, miss_file = write_policies(out)
    graph = demo_graph(bags, policy_file, codec)
    print(f"demo: starting the simulated rig: {len(graph.sim_arms)} simulated arms (sim-bus) and {len(graph.nodes)} "
          f"nodes, one process each (up to {READY_S:.0f} s on a loaded machine)...", flush=True)
    with Session(graph) as session:  # returns once every node is on the graph
        operator = ScriptedOperator(session, plans, policy_file, miss_file, bags)
        operator.home(plans[0])
        t_start = time.monotonic()
        try:
            operator.pedal()
            print(f"demo: session up ({', '.join(session.node_names)}: one process each); "
                  f"recording {len(plans)} episodes of {seconds:.0f} s", flush=True)
            for p in plans:  # on a fixed schedule
                operator.wait_until(t_start + WARMUP_S + p.index * (seconds + GAP_S))
                saved = operator.take(p, seconds)
                if p.index + 1 < len(plans):
                    operator.home(plans[p.index + 1])
                print(f"demo: episode {p.index}: {saved.name} (outcome {p.outcome or 'NOT SET'}, "
                      f"label {p.label or 'NONE'}{', camera stall' if p.camera_stall else ''}"
                      f"{', brick on the wrong square' if p.misses else ''}); validating...", flush=True)
                operator.verdicts.at_stop(p.index, saved)
            operator.verdicts.wait_all(VERDICT_WAIT_S)
            operator.ingested.poll(recording=False)
            operator.ingested.wait_all(INGEST_WAIT_S, session.failed)
        finally:
            operator.close()
        session.remove_node(operator.recorder.node)
        if session.failed.is_set():
            raise RuntimeError(f"the session failed: {session.failure}")
    return bags, operator.verdicts, operator.ingested


def run(args: argparse.Namespace) -> int:
    return run_demo(args.out, args.episodes, args.seconds, args.codec)


def run_demo(out: Path, episodes: int, seconds: float, codec: str) -> int:
    """The whole demo into `out`: record on the simulated rig, the batch steps, the summary."""
    domain = prepare(out, episodes, seconds)
    plans = plan(episodes)
    try:
        bags, verdicts, ingested = record(out, plans, seconds, codec)
    except RuntimeError as exc:  # RecorderCallError included: one line, exit 1 (cli/)
        raise PartialFailure(
            f"recording stopped: {exc}",
            where=str(out),
            fix="the lines above say which node; a loaded machine can starve one: run it again",
        ) from exc
    print(f"\ndemo: {len(plans)} episodes recorded in {bags}; now validate, convert, audit, curate and write the "
          "data card", flush=True)
    report, failed = batch_steps(out, bags, codec)
    failed += summarise(out, bags, report, plans, verdicts, ingested, domain)
    if failed:
        raise PartialFailure(f"these steps failed: {', '.join(failed)}", where=str(out), fix="see their output above")
    return 0


def prepare(out: Path, episodes: int, seconds: float) -> str:
    """Refuse an `out` that holds anything and a take too short for the script; put the demo on a
    ROS domain of its own (returned), localhost discovery."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError("exists and is not an empty folder", where=str(out),
                         fix="choose a new --out: nothing is ever overwritten")
    if seconds < MIN_SECONDS or episodes < 1:
        raise UsageError(f"need --episodes >= 1 and --seconds >= {MIN_SECONDS:g}", where="the command line",
                         fix="the scripted takeover happens at 2.4-4.4 s into each episode, the place at about 6.6 s")
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    # Its own graph: a random domain per run, so no other session's nodes join this one.
    domain = os.environ["ROS_DOMAIN_ID"] = str(random.SystemRandom().randint(1, 101))
    print(f"demo: ROS domain {domain}, discovery {os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE']} "
          f"(watch it: ROS_DOMAIN_ID={domain} teleop-flywheel console)", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    return domain


def batch_steps(out: Path, bags: Path, codec: str) -> tuple[Path, list[str]]:
    """validate, convert, audit, curate, card, then quarantine the rejects, each the user's own
    command: (validation.json, the steps that failed)."""
    dataset, quarantine = out / "dataset", out / "quarantine"
    report = out / "validation.json"
    validated, _shown = together(("validate", str(bags), "--json"), ("validate", str(bags)), data=0)
    if validated.returncode != 0:
        raise PartialFailure("validation could not read the recorded bags", where=str(bags),
                             fix="the output of `validate --json` above says why")
    report.write_text(validated.stdout)
    failed = [] if cli("convert", str(bags), "--dataset", str(dataset), "--codec", codec,
                       "--repo-id", REPO_ID).returncode == 0 else ["convert"]
    if (dataset / "meta" / "info.json").exists():
        steps = [
            ("audit", str(dataset), "--html", str(out / "audit.html")),
            ("curate", str(dataset), "--plot", str(out / "curation.png")),
            ("card", str(dataset), "--validation", str(report)),
        ]
        failed += [s[0] for s, done in zip(steps, together(*steps), strict=True) if done.returncode != 0]
    else:
        print("\ndemo: NO EPISODE PASSED VALIDATION, so no dataset was written. Read the reasons above: on a "
              "loaded machine the simulated arms' streams can stall (FRAME_GAP) — that is the validator working.")
    # Quarantine after conversion so the converter saw (and skipped) the rejects itself; that run's report is
    # validation.json: the same verdicts, and where each rejected bag went (quarantined_to).
    moved = cli("validate", str(bags), "--quarantine", str(quarantine), "--json", capture=True)
    if moved.returncode == 0 and moved.stdout.strip():
        report.write_text(moved.stdout)
    return report, failed
