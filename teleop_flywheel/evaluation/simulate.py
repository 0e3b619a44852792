"""`teleop-flywheel eval --simulate OUT`: synthetic trial bags for a protocol.

`simulate_protocol` writes one bag per trial of the protocol (the statistics in seconds, without a
session graph; `run sim --unattended` is the real walk on the simulated arms); `eval` then reads
them like any trial bags (`evaluation.report`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from teleop_flywheel.evaluation.errors import ProtocolError
from teleop_flywheel.evaluation.protocol import RESERVED_FAILURES, Protocol, ProtocolWalker
from teleop_flywheel.testing.synthetic_session import SessionSpec, write_session


def simulate_protocol(protocol: Protocol, out_dir: str | Path, seed: int = 0, duration_s: float = 1.0,
                      max_trials: int | None = None) -> list[Path]:
    """Synthetic trial bags for the protocol, without a session graph: each trial fails with the
    condition's `sim_failure_rate` × the checkpoint's `sim_failure_scale`, one bag per trial via
    `write_session` (for trying the statistics in seconds; `run sim --unattended` is the real walk)."""
    rng = np.random.default_rng(seed)
    walker = ProtocolWalker(protocol)
    out_dir = Path(out_dir)
    bags: list[Path] = []
    labels = [x for x in protocol.failure_labels if x not in RESERVED_FAILURES] or ["timeout"]
    while (slot := walker.next_slot()) is not None and (max_trials is None or len(bags) < max_trials):
        cond = protocol.condition(slot.condition)
        if cond.sim_failure_rate is None:
            raise ProtocolError(f"{protocol.path}: condition {cond.name!r} has no sim_failure_rate for the simulator")
        p_fail = min(1.0, cond.sim_failure_rate * protocol.checkpoint(slot.checkpoint).sim_failure_scale)
        fail = bool(rng.random() < p_fail)
        label = str(rng.choice(labels)) if fail else ""
        interventions: tuple[tuple[float, float, str | None], ...] = ()
        if fail and protocol.interventions_allowed and rng.random() < 0.5:
            start = float(rng.uniform(0.2, 0.5)) * duration_s
            interventions = ((start, start + 0.3 * duration_s, "wrong_grasp"),)
        name = f"{slot.checkpoint}__{slot.condition}__{slot.index:03d}"
        write_session(out_dir / name, SessionSpec(
            duration_s=duration_s * float(rng.uniform(0.8, 1.2)), joint_hz=50.0, cameras=(), session_kind="evaluation",
            outcome="failure" if fail else "success", interventions=interventions, task=protocol.task,
            policy_checkpoint=slot.checkpoint, protocol_hash=protocol.hash, condition=slot.condition,
            failure_label=label, seed=int(rng.integers(1 << 31))))
        walker.record(slot, "failure" if fail else "success", label, len(interventions))
        bags.append(out_dir / name)
    return bags

