"""A bag cannot write outside its dataset: every name it carries is data, never a path (issue 39).

Adversarial bags are rewrites of a good synthetic session through the project's own writer
(`testing/mutations.rewrite`): a camera topic, a stream, or one name field of the episode metadata
replaced by a hostile name (path separators, `..`, absolute paths, NUL, control characters, a very
long name, Unicode look-alikes). Each is rejected by the validator with `UNSAFE_NAME` naming the
field, and one `convert --include-failed` of all of them, into a dataset deep inside a scratch
tree, converts none and writes nothing anywhere but the dataset's own files.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.core.bag_topics import POLICY_COMMAND, camera_image
from teleop_flywheel.data.convert.ingest_loop import IngestConfig, ingest_once
from teleop_flywheel.data.validate.checks import inspect_bag
from teleop_flywheel.data.validate.reasons import UNSAFE_NAME, ValidateConfig
from teleop_flywheel.recording.mcap.reader import open_bag
from teleop_flywheel.recording.recorder.verdict import KEEP, mark_decision, verdict_doc, write_verdict
from teleop_flywheel.testing.mutations import rewrite
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

ISSUE_CASE = "../../../../tmp/x/ESCAPED"  # the camera name of the issue: validated WARN, convert wrote outside
HOSTILE = {
    "issue": ISSUE_CASE,
    "separator": "wrist/../../up",
    "parent": "..",
    "absolute": "/tmp/x/abs",
    "backslash": "..\\..\\win",
    "nul": "wrist\x00.mp4",
    "control": "wrist\x1b[2J\n",
    "long": "w" * 5000,
    "fullwidth_solidus": "..\uff0f..\uff0fup",
    "one_dot_leader": "\u2024\u2024",
}
# Episode-metadata fields that name something, and the field the rejection must name.
META_FIELDS = {"task": "task", "operator": "operator", "rig_id": "rig_id", "policy_checkpoint": "policy_checkpoint",
               "episode_name": "episode_name", "robot_type": "robot_type", "session_kind": "session_kind",
               "condition": "condition", "failure_label": "failure_label", "namespace": "namespace",
               "cameras": "camera", "topics": "stream", "drops": "stream"}
WRIST = camera_image("wrist")


def _set(key: str, value: str) -> Callable[[dict[str, str]], dict[str, str]]:
    def change(record: dict[str, str]) -> dict[str, str]:
        if key == "cameras":
            record[key] = json.dumps([value])
        elif key == "topics":
            record[key] = json.dumps(json.loads(record[key]) + [value])
        elif key == "drops":
            record[key] = json.dumps({value: 1})
        else:
            record[key] = value
        return record
    return change


def _cases() -> list[tuple[str, str, Callable[[Path, Path], Path]]]:
    """(case id, field the rejection names, how to make the bag)."""
    out: list[tuple[str, str, Callable[[Path, Path], Path]]] = []
    for kind, name in HOSTILE.items():
        # A camera topic: its camera name is what reached `tmp / f"{cam}.mp4"` and the video folder.
        out.append((f"camera_topic-{kind}", "camera", rewrite(topics={WRIST: f"/cameras/{name}/image/compressed"},
                                                              meta=_set("cameras", name))))
        out.append((f"stream-{kind}", "stream", rewrite(topics={POLICY_COMMAND: f"/policy/{name}"})))
        for key, field in META_FIELDS.items():
            if kind == "absolute" and key in ("namespace", "topics", "drops"):
                continue  # `/tmp/x/abs` is a ROS name: streams and namespaces are, and never make paths
            out.append((f"meta_{key}-{kind}", field, rewrite(meta=_set(key, name))))
    return out


CASES = _cases()


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bag = tmp_path_factory.mktemp("src") / "good"
    write_session(bag, SessionSpec(duration_s=2.5, width=256, height=192, seed=39))
    return bag


@pytest.fixture(scope="module")
def hostile(source: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("hostile")
    return {case: (field, make(source, folder / case)) for case, field, make in CASES}


def test_the_good_source_passes(source: Path) -> None:
    """The rewrites change one name only: the bag they start from passes."""
    assert inspect_bag(open_bag(source), ValidateConfig.load(), images=False).reasons == []


@pytest.mark.parametrize("case", [c for c, _f, _m in CASES])
def test_a_hostile_name_is_rejected_naming_its_field(case: str, hostile: dict[str, tuple[str, Path]]) -> None:
    field, bag = hostile[case]
    reasons = inspect_bag(open_bag(bag), ValidateConfig.load(), images=False).reasons
    unsafe = [r for r in reasons if r.code == UNSAFE_NAME]
    assert unsafe, (case, [str(r) for r in reasons])
    assert field in {r.numbers["field"] for r in unsafe}, (case, [str(r) for r in unsafe])
    assert all(f"{r.numbers['field']} " in r.detail for r in unsafe)


def _files(root: Path) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), root) for d, dirs, names in os.walk(root) for n in names + dirs}


def test_convert_refuses_every_hostile_bag_and_writes_only_its_dataset(
        hostile: dict[str, tuple[str, Path]], source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's run: before the fix the camera `../../../../tmp/x/ESCAPED` validated WARN and
    `convert` wrote `ESCAPED.mp4` and `ESCAPED/chunk-000/file-000.mp4` outside the dataset. The
    dataset sits six folders deep, so every escape the names could make lands inside `tmp_path`."""
    ds = tmp_path / "a" / "b" / "c" / "d" / "e" / "ds"
    ds.parent.mkdir(parents=True)
    before = _files(tmp_path)
    outside_before = _files(Path("/tmp/x")) if Path("/tmp/x").is_dir() else set()
    bags = [str(bag) for _f, bag in hostile.values()]
    code = cli_main(["convert", *bags, "--dataset", str(ds), "--include-failed"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "converted: 0;" in out.out and f"rejected UNSAFE_NAME: {len(bags)}" in out.out, out.out
    own = (ds.name, ds.name + ".versions", ds.name + ".lock")
    new = {p for p in _files(tmp_path) - before if Path(p).parts[:6] not in {("a", "b", "c", "d", "e", o) for o in own}}
    assert new == set(), sorted(new)[:10]
    assert (_files(Path("/tmp/x")) if Path("/tmp/x").is_dir() else set()) == outside_before
    # and the good bag still converts beside them: the refusal is per bag, by name
    assert cli_main(["convert", str(source), bags[0], "--dataset", str(ds)]) == 0
    assert "converted: 1;" in capsys.readouterr().out


def test_the_issues_camera_is_rejected_and_convert_writes_nothing_outside(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's bag as the rig's writer makes it (camera topic and metadata both named
    `../../../../tmp/x/ESCAPED`). Before the fix: `validate` said WARN (0/1 rejected) and
    `convert` exited 0 having written `ESCAPED.mp4` and `ESCAPED/chunk-000/file-000.mp4` four
    folders above its work directory."""
    bag = tmp_path / "bags" / "ep"
    write_session(bag, SessionSpec(duration_s=2.5, width=256, height=192, seed=40, cameras=(ISSUE_CASE,)))
    ds = tmp_path / "a" / "b" / "c" / "d" / "e" / "ds"
    ds.parent.mkdir(parents=True)
    before = _files(tmp_path)
    assert cli_main(["validate", str(bag)]) == 0
    out = capsys.readouterr()
    assert "1/1 rejected" in out.out and "UNSAFE_NAME(" in out.out and f"camera {ISSUE_CASE!r}" in out.out, out.out
    assert cli_main(["info", str(bag)]) == 0  # a report on the bag still reports, and says why it is refused
    assert "episode metadata refused: camera" in capsys.readouterr().out
    assert cli_main(["convert", str(bag), "--dataset", str(ds)]) == 0
    out = capsys.readouterr()
    assert "converted: 0;" in out.out and "rejected UNSAFE_NAME: 1" in out.out, out.out
    new = _files(tmp_path) - before
    assert not [p for p in new if "ESCAPED" in p], sorted(new)
    assert all(Path(p).parts[:6][-1] in ("ds", "ds.versions", "ds.lock") for p in new), sorted(new)


def test_ingest_quarantines_the_issues_bag_and_writes_nothing_outside(tmp_path: Path) -> None:
    """A session's background ingest takes the bag the operator kept: rejected UNSAFE_NAME, moved to
    quarantine, nothing written outside the dataset and the quarantine."""
    watch = tmp_path / "a" / "b" / "c" / "d" / "bags"
    bag = write_session(watch / "ep", SessionSpec(duration_s=2.5, width=256, height=192, seed=41,
                                                  cameras=(ISSUE_CASE,))).bag
    write_verdict(bag, verdict_doc(bag.name, {"report": {"episode_id": "x", "reasons": []}, "seconds": 1.0}))
    mark_decision(bag, KEEP)
    before = _files(tmp_path)
    ds, quarantine = watch.parent / "ds", watch.parent / "quarantine"
    out = ingest_once(IngestConfig([watch], ds, quarantine, grace_s=30.0, codec="h264"), lambda _line: None)
    assert {Path(k).name: v for k, v in out.items()} == {"ep": "rejected"}
    assert (quarantine / UNSAFE_NAME / "ep").is_dir()
    new = _files(tmp_path) - before
    assert not [p for p in new if "ESCAPED" in p], sorted(new)
    top = {Path(p).parts[4] for p in new if len(Path(p).parts) > 4}
    own = {"ds", "ds.versions", "ds.lock", "ds.ingest.json", "ds.ingest.lock", "quarantine", "bags"}
    assert top <= own, sorted(new)
