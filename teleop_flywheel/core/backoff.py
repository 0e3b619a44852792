"""Retry pacing for a device that went away (an arm's port, a camera): wait 0.1 s, then twice as
long each time up to 2 s, and start again at 0.1 s once it answers. Quick to notice a replug,
without a missing device costing a busy loop."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Backoff:
    first_s: float = 0.1
    cap_s: float = 2.0
    _next_s: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.first_s <= self.cap_s:
            raise ValueError(f"backoff needs 0 < first_s <= cap_s, got {self.first_s}, {self.cap_s}")
        self._next_s = self.first_s

    def next_s(self) -> float:
        """How long to wait before this retry (each call doubles the next, up to the cap)."""
        wait = self._next_s
        self._next_s = min(wait * 2, self.cap_s)
        return wait

    def reset(self) -> None:
        """The device answered: the next failure retries quickly again."""
        self._next_s = self.first_s
