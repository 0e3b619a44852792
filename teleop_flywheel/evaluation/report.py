"""Success-rate tables with an N (`teleop-flywheel eval`, `evaluation.cli`): trials, cells, comparisons, HTML.

Why: a table with N, an interval and the conditions written down is evidence; a demo video is
not. Every trial bag carries its protocol hash, so one table never mixes two protocols; the same
recording given twice is refused; cells with fewer trials than planned are marked incomplete
(more than planned: over plan), never averaged silently. Statistics
(`evaluation.stats`): Wilson score interval, two-sided Fisher exact test, Holm's correction over
the comparisons printed together. "Overall" pools conditions only where both checkpoints
ran the same number of trials in each (otherwise it would compare two different condition mixes).
"""
from __future__ import annotations

import html
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from teleop_flywheel.core.bag_topics import AUTHORITY, FOLLOWER_STATE
from teleop_flywheel.core.so101 import JOINT_NAMES
from teleop_flywheel.evaluation.errors import EvalError
from teleop_flywheel.evaluation.protocol import Protocol
from teleop_flywheel.evaluation.stats import detectable_counts, fisher_exact, holm, wilson
from teleop_flywheel.recording.mcap import cdr
from teleop_flywheel.recording.mcap.reader import open_bag

# -- trials -------------------------------------------------------------------------------------------

@dataclass
class Trial:
    bag: str
    checkpoint: str
    condition: str
    protocol_hash: str
    outcome: str
    failure_label: str
    interventions: int
    triggers: list[str]
    human_share: float | None  # time-weighted mean of α on /teleop/authority; None: not recorded
    first_intervention_s: float | None  # 0 for a takeover already running when the trial started
    cycle_s: float
    machine_check: str = ""  # "pass: …" / "fail: …" when the protocol has a machine check
    episode_id: str = ""  # content hash: the same recording given twice is one trial


def read_trial(path: str | Path) -> Trial:
    bag = open_bag(path)
    meta = bag.episode
    if meta is None:
        raise EvalError(f"{path}: no episode metadata; not a trial bag")
    if not meta.protocol_hash:
        raise EvalError(f"{path}: no protocol_hash in its metadata; not recorded under an evaluation protocol")
    share = None
    if bag.has(AUTHORITY):
        auth = bag.authority()
        alpha = auth.position[:, auth.names.index("alpha")]
        stamps = auth.stamps_ns.astype(np.float64)
        if len(stamps) > 1:
            share = float(np.sum(alpha[:-1] * np.diff(stamps)) / (stamps[-1] - stamps[0]))
        elif len(stamps):
            share = float(alpha[0])
    starts = [i.start_ns for i in meta.interventions]
    first = max(0.0, (min(starts) - meta.started_ros_ns) / 1e9) if starts else None  # on the events' clock
    return Trial(str(path), meta.policy_checkpoint, meta.condition, meta.protocol_hash, meta.outcome,
                 meta.failure_label, len(meta.interventions), [i.trigger or "unlabelled" for i in meta.interventions],
                 share, first, (meta.stopped_mono_ns - meta.started_mono_ns) / 1e9,
                 str(meta.extra.get("machine_check", "")), bag.episode_id)


def follower_poses(path: str | Path) -> tuple[list[float] | None, list[float] | None]:
    """(first, last) follower state a bag recorded with every joint, radians in JOINT_NAMES order
    (None: no such sample). The last is what an unattended trial is judged on. A sample missing
    joints — a read in which some servo did not answer in time — is passed over, not the stream."""
    bag = open_bag(path)
    if not bag.has(FOLLOWER_STATE):
        return None, None
    data = bag.raw(FOLLOWER_STATE).data

    def complete(order: range) -> list[float] | None:
        for i in order:
            try:
                js = cdr.decode_joint_states([data[i]], f"{path}: {FOLLOWER_STATE}")
            except cdr.CdrError:
                continue
            if all(n in js.names for n in JOINT_NAMES):
                return [float(js.position[0, js.names.index(n)]) for n in JOINT_NAMES]
        return None

    return complete(range(len(data))), complete(range(len(data) - 1, -1, -1))


def final_follower_pose(path: str | Path) -> list[float] | None:
    """The follower's final state as the bag recorded it (radians, JOINT_NAMES order)."""
    return follower_poses(path)[1]


# -- the table ----------------------------------------------------------------------------------------

@dataclass
class Cell:
    """One checkpoint × condition. None = nothing to say (no trials, or not recorded)."""

    checkpoint: str
    condition: str
    planned: int | None  # None: evaluated without the protocol file
    n: int
    successes: int
    rate: float | None
    ci95: tuple[float, float]
    complete: bool  # n >= planned
    over_plan: bool  # n > planned: trials beyond the protocol
    interventions_per_trial: float | None
    human_share: float | None  # mean over the trials that recorded /teleop/authority
    mean_first_intervention_s: float | None  # mean over the trials that had an intervention …
    trials_with_intervention: int  # … which are these many
    cycle_median_s: float | None
    cycle_p90_s: float | None
    failure_labels: dict[str, int] = field(default_factory=dict)
    trigger_labels: dict[str, int] = field(default_factory=dict)


def _cell(ck: str, cond: str, trials: list[Trial], planned: int | None) -> Cell:
    n = len(trials)
    k = sum(t.outcome == "success" for t in trials)
    firsts = [t.first_intervention_s for t in trials if t.first_intervention_s is not None]
    shares = [t.human_share for t in trials if t.human_share is not None]
    cycles = [t.cycle_s for t in trials]
    return Cell(ck, cond, planned, n, k, k / n if n else None, wilson(k, n),
                planned is None or n >= planned, planned is not None and n > planned,
                sum(t.interventions for t in trials) / n if n else None,
                float(np.mean(shares)) if shares else None,
                float(np.mean(firsts)) if firsts else None, len(firsts),
                float(np.median(cycles)) if cycles else None, float(np.percentile(cycles, 90)) if cycles else None,
                dict(Counter(t.failure_label or "unlabelled" for t in trials if t.outcome != "success")),
                dict(Counter(x for t in trials for x in t.triggers)))


@dataclass
class Comparison:
    condition: str  # "overall" for all conditions pooled
    a: str
    b: str
    a_k: int
    a_n: int
    b_k: int
    b_n: int
    difference: float | None  # rate(b) − rate(a)
    p_value: float | None  # two-sided Fisher
    p_adjusted: float | None  # Holm over the comparisons printed together
    verdict: str  # better | worse | not_enough | no_data | not_pooled
    sentence: str


def compare(a: str, b: str, cond: str, ka: int, na: int, kb: int, nb: int, alpha: float = 0.05,
            tests: int = 1, p_adjusted: float | None = None, p_value: float | None = None) -> Comparison:
    """Two-sided Fisher test on successes (`p_value` if the caller already has it); the sentence
    says what the evidence supports at this N. With `tests` > 1 comparisons printed together, the
    verdict uses the Holm-adjusted p."""
    if na == 0 or nb == 0:
        return Comparison(cond, a, b, ka, na, kb, nb, None, None, None, "no_data",
                          f"{cond}: no trials for {'both' if na == nb == 0 else (a if na == 0 else b)}.")
    diff = kb / nb - ka / na
    p = fisher_exact(kb, nb - kb, ka, na - ka) if p_value is None else p_value
    p_adj = p if p_adjusted is None else p_adjusted
    head = f"{cond}: {b} {kb}/{nb} vs {a} {ka}/{na} (difference {diff:+.0%}, Fisher p = {p:.3g}"
    head += f", Holm-adjusted over {tests} comparisons p = {p_adj:.3g})" if tests > 1 else ")"
    if p_adj < alpha:
        verdict = "better" if diff > 0 else "worse"
        return Comparison(cond, a, b, ka, na, kb, nb, diff, p, p_adj, verdict,
                          f"{head}: supports {b} {verdict} than {a}.")
    up, down = detectable_counts(ka, na, nb, alpha / tests)
    needs = " or ".join(x for x in (f"reach {up}/{nb}" if up is not None else "",
                                     f"fall to {down}/{nb}" if down is not None else "") if x)
    sizes = f"{na} vs {nb} trials" if na != nb else f"N = {na} per checkpoint"
    remark = (f"with {sizes}, {b} would have to {needs} for a difference from {a}'s {ka}/{na} to show" if needs
              else f"with {sizes} no result of {b} could differ from {a}'s {ka}/{na} significantly")
    return Comparison(cond, a, b, ka, na, kb, nb, diff, p, p_adj, "not_enough",
                      f"{head}: not enough trials to tell; {remark}.")


@dataclass
class Report:
    protocol_hash: str
    protocol_name: str
    cells: list[Cell]
    comparisons: list[Comparison]
    lineage: dict[str, str]
    incomplete: bool
    notes: list[str] = field(default_factory=list)  # trials left out, machine-check disagreements

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_report(trials: list[Trial], protocol: Protocol | None = None, registry: Path | None = None) -> Report:
    """One table per protocol: refuse any trial whose hash differs from the protocol's (or the others')."""
    if not trials:
        raise EvalError("no trial bags given")
    hashes = Counter(t.protocol_hash for t in trials)
    expected = protocol.hash if protocol else hashes.most_common(1)[0][0]
    foreign = [t for t in trials if t.protocol_hash != expected]
    if foreign:
        src = f"protocol {protocol.path} (hash {expected})" if protocol else f"the majority protocol hash {expected}"
        raise EvalError(f"{len(foreign)} trial(s) belong to another protocol than {src}, e.g. {foreign[0].bag} "
                        f"(hash {foreign[0].protocol_hash}); evaluate each protocol separately")
    seen: dict[str, Trial] = {}
    for t in trials:
        if t.episode_id and t.episode_id in seen:
            raise EvalError(f"{t.bag} and {seen[t.episode_id].bag} are the same recording (episode id "
                            f"{t.episode_id[:12]}): a trial counts once")
        seen[t.episode_id] = t
    ckpts = list(protocol.checkpoints) if protocol else sorted({t.checkpoint for t in trials})
    conds = [c.name for c in protocol.conditions] if protocol else sorted({t.condition for t in trials})
    if protocol:
        stray = [t for t in trials if t.checkpoint not in ckpts or t.condition not in conds]
        if stray:
            raise EvalError(f"{stray[0].bag}: checkpoint {stray[0].checkpoint!r} / condition {stray[0].condition!r} "
                            f"is not in protocol {protocol.path}")
    notes: list[str] = []
    if protocol is None:
        notes.append("no --protocol given: the planned number of trials is unknown, so completeness is not checked")
    unset = [t for t in trials if t.outcome not in ("success", "failure")]
    if unset:
        notes.append(f"{len(unset)} trial(s) without an outcome left out of every count: "
                     + ", ".join(Path(t.bag).name for t in unset))
        trials = [t for t in trials if t.outcome in ("success", "failure")]
    disagree = [t for t in trials if t.machine_check and t.machine_check.startswith("pass") != (t.outcome == "success")]
    if disagree:
        notes.append(f"machine check disagrees with the recorded outcome in {len(disagree)} trial(s): "
                     + "; ".join(f"{Path(t.bag).name} {t.outcome} vs {t.machine_check}" for t in disagree[:5]))
    planned = protocol.trials_per_condition if protocol else None
    cells = [_cell(ck, c, [t for t in trials if t.checkpoint == ck and t.condition == c], planned)
             for ck in ckpts for c in conds]
    over = [x for x in cells if x.over_plan]
    if over:
        notes.append("more trials than planned (the protocol's N is part of the evidence; extra trials invite "
                     "picking the good ones): " + ", ".join(f"{x.checkpoint}/{x.condition} {x.n}/{x.planned}"
                                                            for x in over))
    no_alpha = [t for t in trials if t.human_share is None]
    if no_alpha:
        notes.append(f"{len(no_alpha)} trial(s) recorded no /teleop/authority: their share of human authority is "
                     "unknown and left out of that column")
    comparisons = _comparisons(ckpts, conds, cells) if len(ckpts) >= 2 else []
    return Report(expected, protocol.name if protocol else "", cells, comparisons, _lineage(ckpts, registry),
                  any(not x.complete for x in cells), notes)


def _comparisons(ckpts: list[str], conds: list[str], cells: list[Cell]) -> list[Comparison]:
    """The first two checkpoints, per condition and overall, Holm-corrected together. Overall pools
    the conditions only if both checkpoints ran equally many trials in each: otherwise the pooled
    rates would weight the conditions differently and could even reverse every per-condition
    result (Simpson's paradox)."""
    a, b = ckpts[0], ckpts[1]
    by = {(x.checkpoint, x.condition): x for x in cells}
    pairs = [(c, by[a, c].successes, by[a, c].n, by[b, c].successes, by[b, c].n) for c in conds]
    balanced = all(na == nb for _c, _ka, na, _kb, nb in pairs)
    if len(conds) > 1 and balanced:
        pairs.append(("overall", sum(x[1] for x in pairs), sum(x[2] for x in pairs), sum(x[3] for x in pairs),
                      sum(x[4] for x in pairs)))
    testable = [i for i, (_c, _ka, na, _kb, nb) in enumerate(pairs) if na and nb]
    raw = {i: fisher_exact(pairs[i][3], pairs[i][4] - pairs[i][3], pairs[i][1], pairs[i][2] - pairs[i][1])
           for i in testable}
    adjusted = dict(zip(testable, holm([raw[i] for i in testable]), strict=True))
    out = [compare(a, b, *pairs[i], tests=len(testable), p_adjusted=adjusted.get(i), p_value=raw.get(i))
           for i in range(len(pairs))]
    if len(conds) > 1 and not balanced:
        mix = "; ".join(f"{ck}: " + ", ".join(f"{c} {by[ck, c].n}" for c in conds) for ck in (a, b))
        out.append(Comparison("overall", a, b, sum(x[1] for x in pairs), sum(x[2] for x in pairs),
                              sum(x[3] for x in pairs), sum(x[4] for x in pairs), None, None, None, "not_pooled",
                              f"overall: not pooled: the checkpoints ran different numbers of trials per condition "
                              f"({mix}), so pooled rates would compare different condition mixes; read the "
                              "per-condition lines."))
    return out


def _lineage(ckpts: list[str], registry: Path | None) -> dict[str, str]:
    """checkpoint → which manifest trained it; a checkpoint nobody registered (or an unreadable
    registry) says so in the table instead of silently having no line."""
    # Here, not at the top: the registry's module imports the data stack (pandas, the LeRobot dataset),
    # 1-4 s of CPU, and an unattended walk reads its trials (`read_trial`, `final_follower_pose`) between
    # trials, beside the running rig, where only the table at the end needs the registry.
    from teleop_flywheel.data.errors import LineageError
    from teleop_flywheel.data.provenance.lineage import Registry, source_summary

    try:
        reg = Registry.load(registry)
    except LineageError as exc:
        return {ck: f"UNKNOWN: {exc}" for ck in ckpts}
    out: dict[str, str] = {}
    for ck in ckpts:
        e = reg.checkpoints.get(ck)
        out[ck] = (source_summary(e, reg) if e else
                   f"NOT REGISTERED in {reg.path}: which data trained it is unknown "
                   f"(teleop-flywheel lineage register {ck} MANIFEST)")
    return out


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_table(report: Report) -> str:
    lines = [f"protocol {report.protocol_name or '?'} (hash {report.protocol_hash})"]
    head = (f"{'checkpoint':<14} {'condition':<12} {'N':>7} {'succ':>4} {'rate':>5} {'95% CI':>13} "
            f"{'int/trial':>9} {'human':>6} {'t1st_s (n)':>10} {'cyc_med':>7} {'cyc_p90':>7}  failures / triggers")
    lines.append(head)
    for c in report.cells:
        n = f"{c.n}/{c.planned}" if c.planned else str(c.n)
        mark = " OVER PLAN" if c.over_plan else ("" if c.complete else " INCOMPLETE")
        first = f"{_num(c.mean_first_intervention_s, '.2f')} ({c.trials_with_intervention})"
        lines.append(f"{c.checkpoint:<14} {c.condition:<12} {n:>7} {c.successes:>4} {_num(c.rate, '.0%'):>5} "
                     f"[{c.ci95[0]:.2f}, {c.ci95[1]:.2f}] {_num(c.interventions_per_trial, '.2f'):>9} "
                     f"{_num(c.human_share, '.1%'):>6} {first:>10} {_num(c.cycle_median_s, '.2f'):>7} "
                     f"{_num(c.cycle_p90_s, '.2f'):>7}  "
                     f"{dict(sorted(c.failure_labels.items()))} / {dict(sorted(c.trigger_labels.items()))}{mark}")
    lines.append("t1st_s (n): mean time to the first intervention over the n trials that had one; human: time-weighted "
                 "share of human authority (α).")
    if report.incomplete:
        lines.append("INCOMPLETE protocol: cells marked above have fewer trials than planned; rates are per cell, "
                     "not averaged.")
    for ck, text in report.lineage.items():
        lines.append(f"lineage {ck}: {text}")
    lines += [f"NOTE: {n}" for n in report.notes]
    lines += [c.sentence for c in report.comparisons]
    return "\n".join(lines)


def write_html(report: Report, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_suffix(".png")
    fig, ax = plt.subplots(figsize=(max(4, len(report.cells) * 0.8), 3.5))
    x = np.arange(len(report.cells))
    rates = [c.rate or 0.0 for c in report.cells]
    err = [
        [r - c.ci95[0] for r, c in zip(rates, report.cells, strict=True)],
        [c.ci95[1] - r for r, c in zip(rates, report.cells, strict=True)],
    ]
    ax.bar(x, rates, yerr=err, capsize=4, color=["#4c72b0" if c.complete else "#bbbbbb" for c in report.cells])
    ax.set_xticks(x, [f"{c.checkpoint}\n{c.condition}" for c in report.cells], fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_ylabel("success rate (Wilson 95 %)")
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    rows = "".join(
        f"<tr><td>{html.escape(c.checkpoint)}</td><td>{html.escape(c.condition)}</td>"
        f"<td>{c.n}{'/' + str(c.planned) if c.planned else ''}"
        f"{' <b>over plan</b>' if c.over_plan else ('' if c.complete else ' <b>incomplete</b>')}</td>"
        f"<td>{c.successes}</td><td>{_num(c.rate, '.0%')} [{c.ci95[0]:.2f}, {c.ci95[1]:.2f}]</td>"
        f"<td>{_num(c.interventions_per_trial, '.2f')}</td><td>{_num(c.human_share, '.1%')}</td>"
        f"<td>{html.escape(str(c.failure_labels))}</td><td>{html.escape(str(c.trigger_labels))}</td></tr>"
        for c in report.cells)
    sentences = "".join(f"<li>{html.escape(c.sentence)}</li>" for c in report.comparisons)
    sentences += "".join(f"<li>lineage {html.escape(ck)}: {html.escape(t)}</li>" for ck, t in report.lineage.items())
    sentences += "".join(f"<li><b>note</b>: {html.escape(n)}</li>" for n in report.notes)
    out.write_text(f"<html><body><h1>Evaluation {html.escape(report.protocol_name)} ({report.protocol_hash})</h1>"
                   "<table border=1><tr><th>checkpoint</th><th>condition</th><th>N</th><th>successes</th>"
                   "<th>rate [95% CI]</th><th>interventions/trial</th><th>human share</th><th>failures</th>"
                   f"<th>triggers</th></tr>{rows}</table><img src='{png.name}'><ul>{sentences}</ul></body></html>\n")
