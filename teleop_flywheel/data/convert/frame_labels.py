"""Per-frame DAgger labels of a converted episode: which frames a human held (intervention) or
marked (teleop-mode correction), and why (the trigger label) — the final label on every frame.

`/teleop/authority` says, tick by tick, which intervention is running and the label it has *so
far*: a takeover labelled half a second in reads 0 for its first half second, and one labelled
after the hand-back reads 0 throughout. The label a trainer weights on is the one the operator
finally gave, which the episode's intervention record holds (`EpisodeMeta.interventions`, latest
event per id). So:

- `intervention[k]`: the authority's intervention id at the frame's action time is ≠ 0 (as before);
- `complementary_info.trigger[k]`: the final label of the intervention running at that frame
  (`labels.trigger_code`: 1.. in TRIGGER_LABELS order) — from the record; for an id the record
  does not know (a foreign bag), the last label the authority stream showed for it; 0 when there
  is none. On a correction frame outside any intervention, the correction's final label;
- `complementary_info.correction[k]`: the frame's action time lies in a teleop-mode correction span
  (`EpisodeMeta.corrections`, from `/teleop/intervention` events with `kind: correction`; a span
  still open at the stop runs to the end). Authority never changes during a correction, so only
  the record can say it.

The authority stream keeps recording when each label arrived; nothing here changes the bag.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from teleop_flywheel.core.episode import Intervention
from teleop_flywheel.core.labels import trigger_code


def final_triggers(ids: np.ndarray, shown: np.ndarray, record: Sequence[Intervention]) -> np.ndarray:
    """Per frame, the final trigger code of the intervention `ids[k]` (0: none or unlabelled).
    `shown` is the authority's trigger code at the same frames."""
    ids = np.asarray(ids, np.int64)
    shown = np.asarray(shown, np.int64)
    out = np.zeros(len(ids), np.int64)
    labels = {iv.id: trigger_code(iv.trigger) for iv in record}
    for iid in np.unique(ids[ids > 0]):
        frames = ids == iid
        code = labels.get(int(iid), 0)
        if not code:  # not in the record (or unlabelled there): the last label the stream showed
            seen = shown[frames][shown[frames] > 0]
            code = int(seen[-1]) if len(seen) else 0
        out[frames] = code
    return out


def span_frames(times_ns: np.ndarray, spans: Sequence[Intervention]) -> tuple[np.ndarray, np.ndarray]:
    """(inside any span, the final trigger code of the span each frame is in) for frame times."""
    t = np.asarray(times_ns, np.int64)
    inside = np.zeros(len(t), bool)
    code = np.zeros(len(t), np.int64)
    for span in spans:
        end = np.iinfo(np.int64).max if span.end_ns is None else span.end_ns
        here = (t >= span.start_ns) & (t <= end)
        inside |= here
        code[here] = trigger_code(span.trigger)
    return inside, code


def label_columns(ids: np.ndarray, shown: np.ndarray, action_times_ns: np.ndarray,
                  interventions: Sequence[Intervention], corrections: Sequence[Intervention]
                  ) -> dict[str, np.ndarray]:
    """`intervention`, `complementary_info.trigger`, `complementary_info.correction` per frame."""
    ids = np.nan_to_num(np.asarray(ids, np.float64)).astype(np.int64)
    shown = np.nan_to_num(np.asarray(shown, np.float64)).astype(np.int64)
    trigger = final_triggers(ids, shown, interventions)
    correction, correction_code = span_frames(action_times_ns, corrections)
    trigger = np.where((ids == 0) & correction, correction_code, trigger)
    return {"intervention": ids != 0, "complementary_info.trigger": trigger,
            "complementary_info.correction": correction}
