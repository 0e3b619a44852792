"""Run the same independent jobs (one per bag, one per episode) locally or on a Ray cluster.

Conversion and validation are embarrassingly parallel: one job per bag, no shared state. On one
machine a process pool is the right tool; when a fleet outgrows one machine the same jobs go to an
existing Ray cluster instead of a home-made scheduler. Both paths return results in input order,
so a report never depends on which executor produced it. Ray is imported only when asked for.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, TypeVar

from teleop_flywheel.core.progress import progress
from teleop_flywheel.data.errors import ParallelJobError
from teleop_flywheel.data.lerobot.encoder_process import ENCODE_STALL_S, context

T = TypeVar("T")
R = TypeVar("R")

EXECUTORS = ("local", "ray")
RAY_ADDRESS_ENV = "RAY_ADDRESS"


@contextmanager
def own_errors(*kinds: type[BaseException]) -> Iterator[None]:
    """Around `parallel_map`: a job's error of one of `kinds` is raised as itself (the command's
    one-line error naming its file, or a full disk), not as the job that failed."""
    try:
        yield
    except ParallelJobError as exc:
        if isinstance(exc.__cause__, kinds):
            raise exc.__cause__ from None
        raise


def default_workers() -> int:
    return os.cpu_count() or 1


def _workers(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _seconds(text: str) -> float:
    s = float(text)
    if not s > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 s, got {text}")
    return s


def add_encode_timeout_to(parser: argparse.ArgumentParser) -> None:
    """`--encode-timeout S`, the same on every command that encodes video (`lerobot/encoder_process.py`)."""
    parser.add_argument("--encode-timeout", type=_seconds, default=ENCODE_STALL_S, metavar="S",
                        help="a video encode that makes no progress this long is killed and the command stops, "
                             f"naming the bag and camera; the dataset is left unchanged (default {ENCODE_STALL_S:g})")


def add_arguments_to(parser: argparse.ArgumentParser, workers: int | None = None) -> None:
    """`--workers N` and `--executor local|ray`, the same on every command that fans out over bags;
    `workers`: the default (None: one per CPU)."""
    parser.add_argument("--workers", type=_workers, default=workers,
                        help=f"parallel jobs (default: {'one per CPU' if workers is None else workers}; 1 runs inline)")
    parser.add_argument("--executor", choices=EXECUTORS, default="local",
                        help="local process pool (default) or Ray tasks on the cluster at $RAY_ADDRESS")


def parallel_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    workers: int | None = None,
    executor: str = "local",
    desc: str | None = None,
    unit: str = "bag",
) -> list[R]:
    """`[fn(x) for x in items]`, in order, run in parallel.

    executor="local": a process pool of `workers` processes (default `os.cpu_count()`);
    `workers=1` runs inline in this process (debuggable, no pickling). executor="ray": each item
    is a Ray task on the cluster already initialised in this process, or the one named by
    $RAY_ADDRESS; `workers` then caps the tasks in flight. `fn` and items must be picklable
    (a module-level function). A progress bar counting `unit`s is shown when `desc` is given.
    """
    jobs = list(items)
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; expected one of {', '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if not jobs:
        return []
    with progress(len(jobs), desc, unit) as bar:
        if executor == "ray":
            return _ray_map(fn, jobs, workers, bar.update)
        n = min(workers or default_workers(), len(jobs))
        if n == 1:
            return list(_inline(fn, jobs, bar.update))
        return _pool_map(fn, jobs, n, bar.update)


def _inline(fn: Callable[[T], R], jobs: Sequence[T], tick: Callable[[int], Any]) -> Iterator[R]:
    for index, item in enumerate(jobs):
        try:
            result = fn(item)
        except Exception as exc:
            raise ParallelJobError(index, item, exc) from exc
        tick(1)
        yield result


def _pool_map(fn: Callable[[T], R], jobs: Sequence[T], n: int, tick: Callable[[int], Any]) -> list[R]:
    results: list[Any] = [None] * len(jobs)
    with ProcessPoolExecutor(max_workers=n, mp_context=context()) as pool:
        futures: dict[Future[R], int] = {pool.submit(fn, item): i for i, item in enumerate(jobs)}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    index = futures[future]
                    exc = future.exception()
                    if exc is not None:
                        raise ParallelJobError(index, jobs[index], exc) from exc
                    results[index] = future.result()
                    tick(1)
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    return results


def _ray_map(
    fn: Callable[[T], R], jobs: Sequence[T], workers: int | None, tick: Callable[[int], Any]
) -> list[R]:
    ray = _import_ray()
    if not ray.is_initialized():
        address = os.environ.get(RAY_ADDRESS_ENV)
        if not address:
            raise RuntimeError(
                f"executor 'ray' runs on an existing cluster: set ${RAY_ADDRESS_ENV} "
                "(e.g. ray://head:10001 or auto) or call ray.init() before parallel_map"
            )
        ray.init(address=address)
    remote = ray.remote(_call)
    limit = workers or len(jobs)
    results: list[Any] = [None] * len(jobs)
    in_flight: dict[Any, int] = {}
    next_index = 0
    while next_index < len(jobs) or in_flight:
        while next_index < len(jobs) and len(in_flight) < limit:
            in_flight[remote.remote(fn, jobs[next_index])] = next_index
            next_index += 1
        done, _ = ray.wait(list(in_flight), num_returns=1)
        for ref in done:
            index = in_flight.pop(ref)
            try:
                results[index] = ray.get(ref)
            except Exception as exc:
                for other in in_flight:
                    ray.cancel(other)
                cause = getattr(exc, "cause", None) or exc
                raise ParallelJobError(index, jobs[index], cause) from exc
            tick(1)
    return results


def _call(fn: Callable[[T], R], item: T) -> R:
    """The Ray task body: module-level so Ray pickles `fn` by reference."""
    return fn(item)


def _import_ray() -> Any:
    try:
        import ray  # noqa: PLC0415 - optional, heavy; only when executor="ray" is asked for
    except ImportError:
        raise RuntimeError(
            "executor 'ray' needs Ray: pip install 'teleop_flywheel[ray]' (or pip install ray)"
        ) from None
    return ray
