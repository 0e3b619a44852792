"""After an append the dataset's sample weights equal a full `curate` over it, value for value, while the
append reads only the appended episode's frames (however many the dataset holds); its stats.json and
validation record equal a full rebuild while only the appended episodes' stats and verdicts are read;
the card is marked behind, never silently stale, and `card` makes it the full refresh's again."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from teleop_flywheel.cli import main as cli_main
from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.convert import refresh
from teleop_flywheel.data.convert.refresh import card_behind, update_record
from teleop_flywheel.data.curation.curate import curate
from teleop_flywheel.data.curation.weights import read_weight_table, write_weights
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.lerobot.append import episode_files, existing_ids, read_episode_table
from teleop_flywheel.data.lerobot.consistency import problems
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset, read_scores
from teleop_flywheel.data.lerobot.episode_table import CURATION_COLUMNS
from teleop_flywheel.data.reports.card import passed_episode_ids, record_validation, write_card
from teleop_flywheel.data.validate import dataset_record
from teleop_flywheel.data.validate.dataset_record import (
    INDEX_PATH,
    LEGACY_PATH,
    RECORD_DIR,
    Record,
    has_record,
    read_verdicts,
)
from teleop_flywheel.data.validate.reasons import Reason
from teleop_flywheel.data.validate.validator import EpisodeReport, summary
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

SPEC = dict(width=192, height=144, duration_s=2.5)


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("refresh")
    return [write_session(root / f"ep{i}", SessionSpec(seed=80 + i, session_time_s=60.0 * i, **SPEC)).bag
            for i in range(5)]


def _frames_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows each parquet read of a data file returned (the real pyarrow reader, observed)."""
    counts: list[int] = []
    real = pq.read_table

    def observed(source, *args, **kwargs):  # type: ignore[no-untyped-def]
        table = real(source, *args, **kwargs)
        if "/data/chunk-" in str(source):
            counts.append(table.num_rows)
        return table

    monkeypatch.setattr(pq, "read_table", observed)
    return counts


def _append_reads(bag: Path, ds: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(frames of data files the whole append read, frames the appended episode has)."""
    before = len(LeRobotDataset.open(ds).episodes)
    with monkeypatch.context() as m:
        counts = _frames_read(m)
        res = conv.convert([bag], ds, codec="h264", workers=1, progress=False)
    assert res.converted, res.errors
    eps = LeRobotDataset.open(ds).episodes
    assert len(eps) == before + 1
    return sum(counts), int(eps["length"].iloc[-1])


def test_appends_read_only_the_new_episode_and_weigh_as_curate(bags: list[Path], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    ds = tmp_path / "ds"
    conv.convert(bags[:1], ds, codec="h264", workers=1, progress=False)
    records: list[int] = []
    real_records = refresh.table_records
    monkeypatch.setattr(refresh, "table_records", lambda t, *a: records.append(len(t)) or real_records(t, *a))
    reads = [_append_reads(b, ds, monkeypatch) for b in bags[1:]]
    assert records == []  # the weights from the columns they need, no record per episode
    # the frames read do not grow with the episodes already there: each append reads its own episode once
    assert [r for r, _ in reads] == [n for _, n in reads], reads
    table, rule = read_weight_table(ds)
    report = curate(LeRobotDataset.open(ds))
    full = tmp_path / "full.parquet"
    write_weights(LeRobotDataset.open(ds), report.episodes, report.rule, full)
    assert table.equals(pq.read_table(full)), "incremental weights differ from a full curate"
    assert rule["intervention_weight"] == report.rule.intervention_weight
    ages = table.column("age_days").to_pylist()
    assert ages[0] > ages[-1] == 0.0  # recency applied across the appends: the first is minutes older


def test_appends_merge_stats_and_verdicts_equal_to_a_full_rebuild(bags: list[Path], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    ds = tmp_path / "ds"
    conv.convert(bags[:1], ds, codec="h264", workers=1, progress=False)
    real = v3_layout.stats_from_episode_row
    calls: list[int] = []
    rows_read: list[int] = []
    monkeypatch.setattr(v3_layout, "stats_from_episode_row", lambda *a: calls.append(1) or real(*a))  # counted
    for bag in bags[1:4]:
        calls.clear()
        conv.convert([bag], ds, codec="h264", workers=1, progress=False)
        rows_read.append(len(calls))
    monkeypatch.undo()
    assert rows_read == [1, 1, 1]  # the appended episode's stats only, not every row's

    info = json.loads((ds / v3_layout.INFO_PATH).read_text())
    rows = pq.read_table(ds / v3_layout.EPISODES_PATH.format(chunk_index=0, file_index=0)).to_pylist()
    full = v3_layout.aggregate_stats([real(r, list(info["features"])) for r in rows])
    merged = json.loads((ds / v3_layout.STATS_PATH).read_text())
    assert sorted(merged) == sorted(full)
    for feature, stats in full.items():
        assert sorted(merged[feature]) == sorted(stats), feature
        for name, value in stats.items():
            got = np.asarray(merged[feature][name])
            if name in ("count", "min", "max"):
                assert np.array_equal(got, value), (feature, name)
            else:  # sums in another order: equal to rounding
                assert np.allclose(got, value, rtol=1e-12, atol=1e-15), (feature, name)

    batch = tmp_path / "batch" / "ds"  # the same four episodes in one convert
    conv.convert(bags[:4], batch, codec="h264", workers=1, progress=False)
    record, whole = Record.read(ds), Record.read(batch)
    assert record.verdicts() == whole.verdicts() and record.summary == whole.summary
    assert _record_files(ds) == _record_files(batch)  # byte for byte
    reports = [EpisodeReport(e["path"], e["name"], e["episode_id"], [Reason(x["code"], "") for x in e["reasons"]],
                             error=e.get("error"), warnings=[Reason(x["code"], "") for x in e["warnings"]])
               for e in record.verdicts()]
    assert record.summary == summary(reports) and record.summary["warned"] == 4


def _record_files(ds: Path) -> dict[str, bytes]:
    """The validation record's files (its index and pieces), by name."""
    return {p.name: p.read_bytes() for p in sorted((ds / RECORD_DIR).iterdir())}


def test_the_card_is_marked_behind_and_card_regenerates_the_full_one(bags: list[Path], tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    conv.convert(bags[:2], ds, codec="h264", workers=1, progress=False)
    assert not card_behind(ds)  # a new dataset's card is written whole
    conv.convert(bags[2:3], ds, codec="h264", workers=1, progress=False)
    text = (ds / "README.md").read_text()
    assert card_behind(ds) and "now holds 3 episodes" in text
    conv.convert(bags[3:4], ds, codec="h264", workers=1, progress=False)
    text = (ds / "README.md").read_text()
    assert text.count("This card is behind its dataset") == 1 and "now holds 4 episodes" in text
    write_card(ds)
    regenerated = (ds / "README.md").read_text()
    assert not card_behind(ds)
    fresh = tmp_path / "batch" / "ds"  # the same four episodes in one convert: one full refresh
    conv.convert(bags[:4], fresh, codec="h264", workers=1, progress=False)
    assert regenerated == (fresh / "README.md").read_text()  # byte for byte


def test_a_verdict_merged_into_the_record_is_all_that_is_parsed_or_encoded(bags: list[Path], tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Merging verdicts parses and encodes only them (and the index's keys and summary), whatever the
    record holds, and writes only the index and the piece a verdict is replaced in: the closed pieces keep
    their inode, the verdicts kept are written as the lines they were; the record is byte for byte the one
    written from every verdict at once. One replaced verdict (same episode id) counts out of the summary."""
    monkeypatch.setattr(dataset_record, "PIECE_LINES", 8)
    ds = tmp_path / "ds"
    conv.convert(bags[:3], ds, codec="h264", workers=1, progress=False)
    extra = [EpisodeReport(f"bags/x{i}", f"x{i}", f"{i:064x}", [Reason("FRAME_GAP", "")]) for i in range(40)]
    update_record(ds, extra)  # rejected bags' verdicts: a record larger than the lines merged into it
    kept = read_verdicts(ds)[:3]
    assert len(Record.read(ds).pieces) == 5
    inodes = {p.name: p.stat().st_ino for p in (ds / RECORD_DIR).iterdir()}
    new = EpisodeReport("bags/new", "new", "f" * 64, [Reason("FRAME_GAP", "a gap")])
    again = EpisodeReport(kept[1]["path"], kept[1]["name"], kept[1]["episode_id"], [Reason("DEAD_AIR", "")])
    parsed: list[str] = []
    encoded: list[int] = []
    loads, dumps = json.loads, json.dumps
    with monkeypatch.context() as m:
        m.setattr(json, "loads", lambda text, *a, **k: parsed.append(text) or loads(text, *a, **k))
        m.setattr(json, "dumps", lambda obj, *a, **k: encoded.append(1) or dumps(obj, *a, **k))
        update_record(ds, [new, again])
    verdicts = [t for t in parsed if t.startswith('{"path"')]
    assert verdicts == [dumps(kept[1])] and len(encoded) == 4  # the replaced one; the two, the index, the summary
    now = {p.name: p.stat().st_ino for p in (ds / RECORD_DIR).iterdir()}
    written = {n for n in now if inodes.get(n) != now[n]}
    assert written == {INDEX_PATH.rsplit("/", 1)[1], Record.read(ds).pieces[0].file}  # the index, the first piece
    whole = tmp_path / "whole"
    update_record(whole, [kept[0], again.to_dict(), kept[2], *extra, new])
    assert _record_files(ds) == _record_files(whole)
    record = Record.read(ds)
    assert record.summary is not None and record.summary["rejected"] == 42
    assert record.summary["reasons"] == {"FRAME_GAP": 41, "DEAD_AIR": 1}
    verdicts_now = record.verdicts()
    for layout in ("pretty", "compact"):  # one file, as datasets converted before the pieces hold it
        old = tmp_path / layout
        (old / "meta").mkdir(parents=True)
        doc = {"format": "teleop_flywheel.validation/1", "episodes": verdicts_now, "summary": record.summary}
        (old / LEGACY_PATH).write_text(json.dumps(doc, indent=2) if layout == "pretty" else  # edited by hand
                                       '{"format": "teleop_flywheel.validation/1", "episodes": [\n'
                                       + ",\n".join(dumps(v) for v in verdicts_now)
                                       + f'\n],\n"summary": {dumps(record.summary, indent=1)}}}\n')
        assert Record.read(old).verdicts() == verdicts_now and Record.read(old).summary == record.summary
        update_record(old, [])  # written in pieces, the one file gone
        assert _record_files(old) == _record_files(whole) and not (old / LEGACY_PATH).exists()


def test_the_first_append_to_a_dataset_with_a_one_file_record_lays_it_out_in_pieces(
        bags: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dataset whose record is one `meta/validation.json` (converted before the pieces) is read by every
    reader of the record (card, curate, robomimic's validated ids, lineage's reviews) and its first append
    lays the record out in pieces, equal to a convert of the same bags at once."""
    monkeypatch.setattr(dataset_record, "PIECE_LINES", 2)
    ds = tmp_path / "ds"
    conv.convert(bags[:3], ds, codec="h264", workers=1, progress=False)
    record = Record.read(ds)
    verdicts = record.verdicts()
    version = ds.resolve()
    shutil.rmtree(version / RECORD_DIR)  # one version: no other holds these files
    (version / LEGACY_PATH).write_text(json.dumps({"format": "teleop_flywheel.validation/1", "episodes": verdicts,
                                                   "summary": record.summary}))
    assert has_record(ds) and read_verdicts(ds) == verdicts
    assert passed_episode_ids(ds) == {v["episode_id"] for v in verdicts}
    assert record_validation(ds).recorded == 3 and curate(LeRobotDataset.open(ds)).reviews is not None
    conv.convert(bags[3:4], ds, codec="h264", workers=1, progress=False)
    assert not (ds / LEGACY_PATH).exists() and len(Record.read(ds).pieces) == 2
    batch = tmp_path / "batch" / "ds"
    conv.convert(bags[:4], batch, codec="h264", workers=1, progress=False)
    assert _record_files(ds) == _record_files(batch)


def _scores(ds: Path) -> pa.Table:
    """The scores file but its copy of where each episode's data is (an append writes a data file of its
    own, a convert of every bag one for all)."""
    table = read_scores(ds)
    assert table is not None
    return table.drop_columns(["input/data/chunk_index", "input/data/file_index"])


def test_an_append_writes_the_last_episodes_file_only_and_scores_equal_a_full_rebuild(
        bags: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Episodes appended one at a time: the full episodes files are never written again (the same inode
    in every later version), new files start at EPISODES_PER_FILE rows in one schema, the rows hold no
    curation column, and the scores file equals a convert of the same bags at once, value for value."""
    monkeypatch.setattr(v3_layout, "EPISODES_PER_FILE", 2)
    ds = tmp_path / "ds"
    conv.convert(bags[:1], ds, codec="h264", workers=1, progress=False)
    full: dict[str, int] = {}  # a full file's inode when first seen full
    opened: list[str] = []
    for bag in bags[1:5]:
        opened.clear()
        with monkeypatch.context() as m:  # every episodes file the append opens (the real pyarrow calls)
            for name in ("read_table", "read_schema", "read_metadata"):
                real = getattr(pq, name)
                m.setattr(pq, name, lambda src, *a, _real=real, **k: opened.append(str(src)) or _real(src, *a, **k))
            conv.convert([bag], ds, codec="h264", workers=1, progress=False)
        for f in episode_files(ds):
            if pq.read_metadata(f).num_rows == 2:
                assert full.setdefault(f.name, f.stat().st_ino) == f.stat().st_ino, f"{f.name} written again"
    files = episode_files(ds)
    assert [pq.read_metadata(f).num_rows for f in files] == [2, 2, 1]
    # the last append opened the last file before it (full: its schema) and, after its commit, the one it
    # wrote (its schema), no other: the ids, the scores and the weights' times come from the scores file
    assert {Path(p).name for p in opened if "/meta/episodes/" in p} == {"file-001.parquet", "file-002.parquet"}
    assert sorted(full) == ["file-000.parquet", "file-001.parquet"]
    schemas = [pq.read_schema(f) for f in files]
    assert all(s.equals(schemas[0]) for s in schemas)  # LeRobot reads them as one table
    assert not set(CURATION_COLUMNS) & set(schemas[0].names)
    eps = pq.read_table(files[2]).to_pylist()
    assert [(r["meta/episodes/chunk_index"], r["meta/episodes/file_index"]) for r in eps] == [(0, 2)]

    batch = tmp_path / "batch" / "ds"
    conv.convert(bags[:5], batch, codec="h264", workers=1, progress=False)
    assert _scores(ds).equals(_scores(batch))
    mine, whole = (LeRobotDataset.open(d).episodes for d in (ds, batch))
    for col in ("jerk_z", "duration_ratio", "coverage_gain", "graded_success", "jerk"):
        assert np.array_equal(mine[col].to_numpy(float), whole[col].to_numpy(float), equal_nan=True), col
    assert existing_ids(ds) == existing_ids(batch) and len(existing_ids(ds)) == 10  # v2 and v1 ids
    again = conv.convert(bags[:1], ds, codec="h264", workers=1, progress=False)
    assert again.duplicates and not again.converted  # the ids of every file are known
    manifest = tmp_path / "m.json"
    assert problems(ds) == []  # doctor's full check over the three files (the synthetic data's frame contract
    # is another matter, which doctor also reports)
    for argv in (["audit", str(ds)], ["stats", str(ds)], ["card", str(ds)],
                 ["curate", str(ds), "--no-weights"],
                 ["manifest", "create", str(ds), "--out", str(manifest), "--filter", "jerk_z < 5"],
                 ["manifest", "verify", str(ds), str(manifest)]):
        assert cli_main(argv) == 0, argv  # the verbs read the three files and the scores file
    assert len(json.loads(manifest.read_text())["episodes"]) == 5


def test_lerobot_reads_the_episodes_files_of_appends(bags: list[Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """LeRobot's own loader reads a dataset whose episodes table is in several files (one schema)."""
    lerobot_dataset = pytest.importorskip("lerobot.datasets.lerobot_dataset",
                                          reason="LeRobot not installed (too heavy for CI)")
    monkeypatch.setattr(v3_layout, "EPISODES_PER_FILE", 2)
    ds = tmp_path / "ds"
    for bag in bags[:3]:
        conv.convert([bag], ds, codec="h264", workers=1, progress=False)
    assert len(episode_files(ds)) == 2
    loaded = lerobot_dataset.LeRobotDataset("local/ds", root=ds, video_backend="pyav")
    assert len(loaded) == int(LeRobotDataset.open(ds).episodes["length"].sum()) and loaded.meta.total_episodes == 3
    assert loaded[len(loaded) - 1]["observation.images.wrist"].shape[0] == 3


def test_a_dataset_whose_rows_hold_the_scores_is_appended_to(bags: list[Path], tmp_path: Path) -> None:
    """A dataset converted before the scores file (the curation columns in its one episodes file) is read
    as before and appended to: its rows move their scores to the scores file, equal to a full rebuild's."""
    ds = tmp_path / "ds"
    conv.convert(bags[:2], ds, codec="h264", workers=1, progress=False)
    version = ds.resolve()
    rows = read_episode_table(ds)
    assert rows is not None
    side = _scores(ds).to_pandas().set_index("episode_index")
    for col in CURATION_COLUMNS:
        values = side[col].reindex(rows.column("episode_index").to_numpy()).tolist()
        rows = rows.append_column(col, pa.array(values, pa.list_(pa.float64()) if col == "start_state" else None))
    path = version / v3_layout.EPISODES_PATH.format(chunk_index=0, file_index=0)
    path.unlink()  # one version: no other holds these files
    pq.write_table(rows, path)
    (version / v3_layout.SCORES_PATH).unlink()
    old = LeRobotDataset.open(ds).episodes
    assert np.isfinite(old["jerk_z"].to_numpy(float)).all()  # read from the rows

    conv.convert(bags[2:3], ds, codec="h264", workers=1, progress=False)
    assert not set(CURATION_COLUMNS) & set(pq.read_schema(episode_files(ds)[0]).names)
    batch = tmp_path / "batch" / "ds"
    conv.convert(bags[:3], batch, codec="h264", workers=1, progress=False)
    assert _scores(ds).equals(_scores(batch))
