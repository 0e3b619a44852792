"""parallel_map: same ordered results inline, in a process pool and as Ray tasks."""
from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import pytest
from support.ray_driver import run_driver

from teleop_flywheel.data.errors import ParallelJobError
from teleop_flywheel.data.parallel import add_arguments_to, parallel_map


def square_with_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three is bad")
    return x


ITEMS = list(range(23))
EXPECTED = [x * x for x in ITEMS]


def test_inline_runs_in_this_process() -> None:
    out = parallel_map(square_with_pid, ITEMS, workers=1)
    assert [v for v, _ in out] == EXPECTED
    assert {pid for _, pid in out} == {os.getpid()}


def test_process_pool_preserves_order_and_uses_other_processes() -> None:
    out = parallel_map(square_with_pid, ITEMS, workers=2, desc="squares")
    assert [v for v, _ in out] == EXPECTED
    assert os.getpid() not in {pid for _, pid in out}


@pytest.mark.parametrize("workers", [1, 2])
def test_failure_names_the_item(workers: int) -> None:
    with pytest.raises(ParallelJobError, match=r"job 3 \(3\) failed: ValueError: three is bad"):
        parallel_map(fail_on_three, ITEMS, workers=workers)


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown executor 'dask'"):
        parallel_map(square_with_pid, ITEMS, executor="dask")
    with pytest.raises(ValueError, match="workers must be >= 1"):
        parallel_map(square_with_pid, ITEMS, workers=0)
    assert parallel_map(square_with_pid, [], workers=2) == []


def test_ray_without_cluster_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray", reason="Ray not installed (pip install 'teleop_flywheel[ray]')")
    if ray.is_initialized():
        pytest.skip("a Ray cluster is already initialised in this process")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(RuntimeError, match="existing cluster: set \\$RAY_ADDRESS"):
        parallel_map(square_with_pid, ITEMS, executor="ray")


@pytest.mark.timeout(240)
def test_ray_gives_identical_results(tmp_path: Path) -> None:
    """Ray >= 2.5x removed `local_mode`; a single-node Ray on 127.0.0.1 is its replacement."""
    got = run_driver("""
        from teleop_flywheel.data.errors import ParallelJobError
        from teleop_flywheel.data.parallel import parallel_map
        from data.test_parallel import ITEMS, fail_on_three, square_with_pid

        local = parallel_map(square_with_pid, ITEMS, workers=2)
        remote = parallel_map(square_with_pid, ITEMS, executor="ray", workers=3, desc="ray squares")
        try:
            parallel_map(fail_on_three, ITEMS, executor="ray")
            failed = ""
        except ParallelJobError as exc:
            failed = str(exc)
        answer({"local": [v for v, _ in local], "remote": [v for v, _ in remote], "failed": failed})
    """, cwd=tmp_path)
    assert got["remote"] == got["local"] == EXPECTED
    assert re.search(r"job 3 \(3\) failed: ValueError: three is bad", got["failed"]), got["failed"]


def test_cli_arguments_feed_parallel_map() -> None:
    parser = argparse.ArgumentParser()
    add_arguments_to(parser)
    args = parser.parse_args(["--workers", "2"])
    assert (args.workers, args.executor) == (2, "local")
    out = parallel_map(square_with_pid, ITEMS, workers=args.workers, executor=args.executor)
    assert [v for v, _ in out] == EXPECTED
    with pytest.raises(SystemExit):
        parser.parse_args(["--executor", "dask"])
