"""No damaged bag passes, no bad input stops a batch, and the mutation fuzz.

Each named case passed `validate` before, most were converted, several with wrong data; the
crashes raised a traceback that stopped the batch (or hung). The fuzz draws a few hundred
mutations of two clean bags (a new one with data CRCs, an old one without) with a fixed seed:
validate every case, convert a sample; no damaged bag may pass with changed content, no call may
raise, hang or modify its input.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcap.opcode import Opcode

from teleop_flywheel.data.convert import converter as conv
from teleop_flywheel.data.validate import validator as val
from teleop_flywheel.recording.mcap.reader import open_bag
from teleop_flywheel.recording.mcap.scan import record_spans
from teleop_flywheel.testing import mutations as mut
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session

SMALL = dict(duration_s=2.5, joint_hz=50.0, camera_fps=20.0, width=256, height=192, chunk_size=16 * 1024)
CFG = val.ValidateConfig.load()


def _no_data_crc(bag: Path) -> Path:
    """An old bag: written before data CRCs (the DataEnd CRC field 0 = not computed)."""
    mcap = mut.mcap_of(bag)
    pos, _ = record_spans(mcap, Opcode.DATA_END)[0]
    with open(mcap, "r+b") as f:
        f.seek(pos + 9)
        f.write(b"\0\0\0\0")
    return bag


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    new = write_session(root / "new", SessionSpec(stamp_clock="ros", seed=51, **SMALL)).bag
    old = _no_data_crc(write_session(root / "old", SessionSpec(seed=52, **SMALL)).bag)
    for b in (new, old):
        assert val.validate_bag((str(b), CFG, None)).passed
    return {"new": new, "old": old}


def fingerprint(bag: Path) -> tuple[str, tuple[tuple[str, str], ...]]:
    b = open_bag(bag)
    return b.episode_id, tuple(sorted(b.topics.items()))


def digest_tree(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            out[str(p)] = "fifo" if not p.is_file() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def codes(bag: Path) -> list[str]:
    r = val.validate_bag((str(bag), CFG, None))
    return r.codes if r.error is None else ["ERROR"]


# -- the damage named in the issue ----------------------------------------------------------------

@pytest.mark.parametrize("base", ["new", "old"])
@pytest.mark.parametrize("after_last", [False, True], ids=["next-to-itself", "after-the-last"])
def test_a_duplicated_chunk_is_corrupt(bases: dict[str, Path], base: str, after_last: bool, tmp_path: Path) -> None:
    bag = mut.duplicate_chunk(2, after_last)(bases[base], tmp_path / "dup")
    r = val.validate_bag((str(bag), CFG, None))
    assert "CORRUPT" in r.codes and any("identical" in x.detail or "copy" in x.detail for x in r.reasons), r.line()


@pytest.mark.parametrize("base", ["new", "old"])
def test_a_zero_filled_chunk_body_is_corrupt(bases: dict[str, Path], base: str, tmp_path: Path) -> None:
    assert "CORRUPT" in codes(mut.zero_chunk_body(1)(bases[base], tmp_path / "zero"))


def test_a_zero_filled_tail_is_found_fast(bases: dict[str, Path], tmp_path: Path) -> None:
    bag = mut.zero_tail(3, 0)(bases["new"], tmp_path / "tail")
    with open(mut.mcap_of(bag), "r+b") as f:  # 1 GiB of zeros (sparse): walked 9 bytes at a time, minutes
        f.truncate(1 << 30)
    t = time.monotonic()
    found = codes(bag)
    assert "TRUNCATED" in found and "CORRUPT" not in found
    assert time.monotonic() - t < 20


@pytest.mark.parametrize("base", ["new", "old"])
def test_a_flipped_digit_in_the_episode_record_is_corrupt(bases: dict[str, Path], base: str, tmp_path: Path) -> None:
    """range_max 3285 -> 2285 in the calibration (every gripper value of the dataset wrong): the data CRC
    catches it in new bags, the metadata.yaml comparison in old ones; the content id changes either way."""
    bag = mut.copy_bag(bases[base], tmp_path / "meta")
    mcap = mut.mcap_of(bag)
    data = bytearray(mcap.read_bytes())
    pos, length = [s for s in record_spans(mcap, Opcode.METADATA)][-2]  # the final episode record
    m = re.search(rb"range_max\\?\"?: (\d)", bytes(data[pos:pos + length]))
    assert m is not None
    data[pos + m.start(1)] = ord("1") if data[pos + m.start(1)] != ord("1") else ord("2")
    mcap.write_bytes(bytes(data))
    r = val.validate_bag((str(bag), CFG, None))
    assert "CORRUPT" in r.codes, r.line()
    assert r.episode_id != open_bag(bases[base]).episode_id


@pytest.mark.parametrize("name", sorted(mut.TARGETED))
def test_payloads_are_decoded_and_checked_against_their_types(
    bases: dict[str, Path], name: str, tmp_path: Path
) -> None:
    make, expected = mut.TARGETED[name]
    bag = make(bases["new"], tmp_path / "bag")
    r = val.validate_bag((str(bag), CFG, None))
    assert expected & set(r.codes), r.line()
    res = conv.convert([bag], tmp_path / "ds", codec="h264", workers=1, progress=False)
    assert res.converted == {}  # convert decodes the same way: rejected, never a crash


def test_a_shortened_record_length_is_a_verdict(bases: dict[str, Path], tmp_path: Path) -> None:
    spans = record_spans(mut.mcap_of(bases["new"]), Opcode.CHUNK)
    i = [p for p, _ in record_spans(mut.mcap_of(bases["new"]))].index(spans[1][0])
    for delta in (-1, -30):
        bag = mut.record_length(i, delta)(bases["new"], tmp_path / f"short{-delta}")
        assert set(codes(bag)) & {"CORRUPT", "TRUNCATED"}


# -- inputs that can crash or hang a batch that is not careful ------------------------------------

def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "teleop_flywheel.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_a_batch_of_bad_inputs_runs_to_the_end(bases: dict[str, Path], tmp_path: Path) -> None:
    batch = tmp_path / "batch"
    batch.mkdir()
    mut.copy_bag(bases["new"], batch / "good")
    mut.odd_name(bases["new"], batch / "name")  # not UTF-8
    mut.fifo_mcap(bases["new"], batch / "fifo")
    mut.record_length(5, -3)(bases["new"], batch / "cut_record")
    mut.nested_bag(bases["old"], batch / "nested")
    strict = {"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8:strict"}
    run = _cli("validate", str(batch), "--workers", "2", env=strict, timeout=60)
    assert "Traceback" not in run.stderr and run.returncode == 1, run.stderr
    assert "good" in run.stdout and "name_caf\\xe9" in run.stdout and "nested" in run.stdout
    assert re.search(r"fifo_0\.mcap \(a FIFO\)", run.stderr) and "bag directory inside bag directory" in run.stderr
    assert "cut_record" in run.stdout and " FAIL cut_record " in run.stdout


def test_quarantine_inside_the_folder_and_inside_the_bag(bases: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "B"
    folder.mkdir()
    mut.copy_bag(bases["new"], folder / "good")
    mut.zero_chunk_body(0)(bases["new"], folder / "bad")
    run = _cli("validate", str(folder), "--quarantine", str(folder / "q"), "--workers", "1")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert (folder / "q" / "CORRUPT" / "bad").is_dir() and (folder / "q" / "CORRUPT" / "bad.json").is_file()
    again = _cli("validate", str(folder), "--quarantine", str(folder / "q"), "--workers", "1")
    assert again.returncode == 0 and "0/1 rejected" in again.stdout  # the quarantine is not re-read
    bag = folder / "good"
    mut.zero_chunk_body(0)(bases["new"], tmp_path / "single")
    inside = _cli("validate", str(tmp_path / "single"), "--quarantine", str(tmp_path / "single" / "q"))
    assert inside.returncode == 1 and "Traceback" not in inside.stderr
    assert "inside the bag" in inside.stderr and (tmp_path / "single").is_dir() and bag.is_dir()


# -- the mutation fuzz --------------------------------------------------------------------------

@pytest.mark.timeout(240)
def test_mutation_fuzz(bases: dict[str, Path], tmp_path: Path) -> None:
    chunks = min(len(record_spans(mut.mcap_of(b), Opcode.CHUNK)) for b in bases.values())
    originals = {k: fingerprint(b) for k, b in bases.items()}
    base_digests = {k: digest_tree(b) for k, b in bases.items()}
    cases = mut.fuzz_cases(seed=16, n=300, chunks=chunks)
    passed_same, rejected, errors, sample = 0, 0, 0, []
    t_start = time.monotonic()
    for i, case in enumerate(cases):
        base = "new" if i % 2 == 0 else "old"
        bag = case.make(bases[base], tmp_path / f"c{i:03d}")
        before = digest_tree(bag.parent if not bag.is_dir() else bag)
        t = time.monotonic()
        report = val.validate_bag((str(bag), CFG, None))  # never raises: that is part of the oracle
        assert time.monotonic() - t < 20, f"case {i} ({case.name}) took too long"
        assert digest_tree(bag.parent if not bag.is_dir() else bag) == before, f"case {i} ({case.name}) modified"
        if report.error is not None:
            errors += 1
        elif report.passed:
            assert fingerprint(bag) == originals[base], f"case {i} ({case.name}) passed with changed content"
            passed_same += 1
        else:
            rejected += 1
        if i % 50 == 7:
            sample.append((bag, report.passed))
    for k, b in bases.items():
        assert digest_tree(b) == base_digests[k]
    for j, (bag, passed) in enumerate(sample):  # convert a sample: never a crash, only what validate passes
        res = conv.convert([bag], tmp_path / f"ds{j}", codec="h264", workers=1, progress=False)
        assert bool(res.converted) == passed, (bag, res)
    tally = (passed_same, rejected, errors)
    assert rejected > 150 and sum(tally) == len(cases), tally
    assert time.monotonic() - t_start < 180
