"""What a leader renders to the operator's hand, per bus tick (`Rendered`, published as
`/leader/feedback`, docs/teleop.md "Force feedback").

The STS3215 has no torque control: what reaches the hand is a spring toward the goal written,
capped by the live Torque_Limit. So what was rendered is, per joint, that goal minus where the
shaft is and that cap, and nothing where the servo has no torque."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rendered:
    """One leader tick's feedback, joint order: `offsets` the goal minus the present position (rad;
    0.0 where the servo has no torque), `ceilings` the live Torque_Limit as a fraction of the
    servo's maximum torque (0.0 where it has no torque), `stamp_ns` (`now_ns` clock) taken right
    after the tick's last goal or torque write."""

    stamp_ns: int
    offsets: tuple[float, ...]
    ceilings: tuple[float, ...]
