"""Pictures a person reads: the audit's PNGs and HTML page, and the helpers every plot shares.

Rules every plot here keeps: no empty panel (a panel with nothing to draw says so in words),
integer ticks wherever the axis counts episodes, titles that say only what is drawn, no axis
offset notation (`+1.15e1`), and a one-sentence explanation of each plot on the HTML page.
matplotlib is imported only when a plot is written (Agg backend, no display needed).
"""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np

BLUE, ORANGE, RED, GREY, LIGHT = "#3b75af", "#e6862a", "#c0392b", "#888888", "#dddddd"

# name -> (heading, the sentence that explains the plot on the HTML page)
AUDIT_PLOTS: dict[str, tuple[str, str]] = {
    "joint_ranges": (
        "Joint range visited vs available",
        "For each joint, the grey bar is the range the arm can reach (its limits), the blue bar the range the "
        "episodes actually visited, and the orange tick the spread of the start states: a short blue bar means "
        "the policy will never see that part of the workspace, a thin orange tick that every episode started "
        "from the same pose."),
    "start_states": (
        "Start states",
        "Left: each episode's start pose per joint, relative to the mean start pose, one dot per episode. Right: "
        "each episode's distance from the mean start pose; bars above the dashed outlier fence (Q3 + 1.5 IQR) "
        "are red: episodes that started somewhere unusual, worth a look before training."),
    "episode_lengths": (
        "Episode lengths and leading dead air",
        "Left: how long the episodes are (a second hump, or a long tail, is a different way of doing the task "
        "or an operator who waited). Right: per episode, the seconds at its start during which the command "
        "did not change at all (dead air a policy would learn to imitate)."),
}
# Plots drawn only when the dataset has what they show.
OPTIONAL_AUDIT_PLOTS: dict[str, tuple[str, str]] = {
    "effort_ranges": (
        "Effort per joint",
        "For each joint, the load the follower's servo reported (a signed fraction of its maximum torque): the "
        "light bar spans every frame, the dark bar the 1st to 99th percentile; a gripper that squeezed an object "
        "reaches far from zero."),
}


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (imported only here, only when a plot is written)."""
    import matplotlib  # noqa: PLC0415 - only for plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def integer_ticks(ax: Any, axis: str = "x") -> None:
    """Tick labels at whole numbers only (episode indices, counts)."""
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))


def plain_numbers(ax: Any) -> None:
    """No offset or scientific notation on the axes: `11.5078`, never `0.0078 + 1.15e1`."""
    for axis in (ax.xaxis, ax.yaxis):
        formatter = axis.get_major_formatter()
        if hasattr(formatter, "set_useOffset"):
            formatter.set_useOffset(False)
        if hasattr(formatter, "set_scientific"):
            formatter.set_scientific(False)


def say(ax: Any, text: str) -> None:
    """A panel with nothing to draw says why, in words, instead of showing empty axes."""
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=10, color="#444444",
            transform=ax.transAxes)


def save(fig: Any, path: Path, dpi: int = 90, tight: bool = True) -> Path:
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def write_audit_plots(r: Any, folder: Path) -> dict[str, Path]:
    """The audit's PNGs (joint ranges, start states, episode lengths; effort ranges when the dataset has
    observation.effort) in `folder`."""
    plt = pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    out = {"joint_ranges": save(_joint_ranges(plt, r), folder / "joint_ranges.png"),
           "start_states": save(_start_states(plt, r), folder / "start_states.png"),
           "episode_lengths": save(_episode_lengths(plt, r), folder / "episode_lengths.png")}
    effort = getattr(getattr(r, "content", None), "effort", None)
    if effort:
        out["effort_ranges"] = save(_effort_ranges(plt, effort), folder / "effort_ranges.png")
    return out


def _joint_ranges(plt: Any, r: Any) -> Any:
    """Per joint: the range available, the range visited, and where episodes start."""
    names = [j.joint for j in r.joint_ranges]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(names) + 1.5))
    for i, j in enumerate(r.joint_ranges):
        if j.available is not None:
            ax.barh(i, j.available, left=j.available_min, color=LIGHT, height=0.7,
                    label="available" if i == 0 else None)
        ax.barh(i, j.visited, left=j.visited_min, color=BLUE, height=0.45, label="visited" if i == 0 else None)
        s = r.start_spread[i]
        ax.barh(i, max(s.span, 1e-9), left=s.min, color=ORANGE, height=0.2,
                label="start states" if i == 0 else None)
    ax.set_yticks(np.arange(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("dataset units (degrees; gripper 0-100)")
    ax.set_title(AUDIT_PLOTS["joint_ranges"][0])
    ax.legend(loc="lower right", fontsize=8)
    return fig


def _start_states(plt: Any, r: Any) -> Any:
    """Each episode's start pose against the mean start, and its distance from it (outliers red)."""
    names = [j.joint for j in r.joint_ranges]
    starts = np.asarray(r.start_states, dtype=float).reshape(len(r.episode_index), len(names))
    episodes = np.asarray(r.episode_index)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    centred = starts - starts.mean(axis=0)
    for k in range(len(names)):
        a1.scatter(np.full(len(starts), k), centred[:, k], s=12, alpha=0.6, color=BLUE)
    a1.axhline(0.0, color=GREY, lw=0.8)
    a1.set_xticks(np.arange(len(names)), names, rotation=30, ha="right")
    a1.set_ylabel("start − mean start (dataset units)")
    a1.set_title("Start pose per joint, one dot per episode")
    outliers = set(r.outliers)
    a2.bar(episodes, r.start_distance, color=[RED if e in outliers else BLUE for e in episodes])
    a2.axhline(r.outlier_fence, color=RED, ls="--", lw=1, label="outlier fence")
    a2.set_xlabel("episode")
    a2.set_ylabel("distance from the mean start")
    a2.set_title("Distance from the mean start state" + (f" ({len(outliers)} outliers, red)" if outliers else ""))
    integer_ticks(a2)
    a2.legend(fontsize=8)
    return fig


def _episode_lengths(plt: Any, r: Any) -> Any:
    """The episode lengths' histogram, and each episode's leading dead air."""
    episodes = np.asarray(r.episode_index)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    sec = np.asarray(r.episode_lengths, dtype=float) / r.fps
    lo, hi = float(sec.min()), float(sec.max())
    if hi - lo < 1.0 / r.fps:  # one length (to the frame): a bar, not a histogram of rounding
        a1.bar([lo], [len(sec)], width=max(0.05 * lo, 0.1), color=BLUE)
        a1.set_xlim(lo - max(0.5, 0.2 * lo), lo + max(0.5, 0.2 * lo))
    else:
        a1.hist(sec, bins=min(30, max(5, len(sec) // 2)), color=BLUE)
    integer_ticks(a1, "y")
    plain_numbers(a1)
    a1.set_xlabel("episode length (s)")
    a1.set_ylabel("episodes")
    a1.set_title(f"Episode lengths ({len(sec)} episodes)")
    dead = np.asarray(r.leading_dead, dtype=float) / r.fps
    a2.set_title("Leading dead air per episode")
    if not dead.any():
        say(a2, f"No leading dead air: in all {len(dead)} episodes\nthe command changes from the first frame on.")
    else:
        a2.bar(episodes, dead, color=ORANGE)
        a2.set_xlabel("episode")
        a2.set_ylabel("leading dead air (s)")
        integer_ticks(a2)
    return fig


def _effort_ranges(plt: Any, effort: Any) -> Any:
    """Per joint: the load over all frames and its 1st-99th percentile."""
    fig, ax = plt.subplots(figsize=(9.5, 0.5 * len(effort) + 1.5))
    for i, e in enumerate(effort):
        ax.barh(i, e.max - e.min, left=e.min, color=LIGHT, height=0.7, label="all frames" if i == 0 else None)
        ax.barh(
            i, e.q99 - e.q01, left=e.q01, color=BLUE, height=0.4, label="1st-99th percentile" if i == 0 else None
        )
    ax.axvline(0.0, color=GREY, lw=0.8)
    ax.set_yticks(np.arange(len(effort)), [e.joint for e in effort])
    ax.invert_yaxis()
    ax.set_xlim(-1.05, 1.05)
    ax.set_xlabel("load (fraction of max torque)")
    ax.set_title(OPTIONAL_AUDIT_PLOTS["effort_ranges"][0])
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return fig


def write_audit_html(r: Any, text: str, out: Path) -> Path:
    """One page beside its PNGs (`<stem>_files/`): the text report, and each plot with the sentence
    that says how to read it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plots = write_audit_plots(r, out.parent / f"{out.stem}_files")
    sections = []
    for key, path in plots.items():
        heading, sentence = {**AUDIT_PLOTS, **OPTIONAL_AUDIT_PLOTS}[key]
        sections.append(f"<h2>{html.escape(heading)}</h2>\n<p>{html.escape(sentence)}</p>\n"
                        f'<img src="{html.escape(path.parent.name)}/{html.escape(path.name)}" '
                        f'alt="{html.escape(heading)}">')
    out.write_text(
        "<!doctype html><meta charset='utf-8'>"
        f"<title>Audit of {html.escape(r.dataset)}</title>\n"
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}p{max-width:60em}"
        "img{max-width:100%}</style>\n"
        f"<h1>Audit of {html.escape(r.dataset)}</h1>\n"
        "<p>What the dataset actually contains, computed from its numeric columns (video is never decoded). "
        "The numbers first, then the plots, each with one sentence on how to read it.</p>\n"
        f"<pre>{html.escape(text)}</pre>\n" + "\n".join(sections) + "\n")
    return out


# --------------------------------------------------------------------------- curation
def _edge_labels(ax: Any, bottom: bool, left: bool, xlabel: str, ylabel: str, size: int) -> None:
    """Labels and tick numbers only on the outer axes of a matrix (text is most of the draw time)."""
    ax.locator_params(nbins=3)
    ax.tick_params(labelsize=size - 2, labelbottom=bottom, labelleft=left)
    plain_numbers(ax)
    if bottom:
        ax.set_xlabel(xlabel, fontsize=size)
    if left:
        ax.set_ylabel(ylabel, fontsize=size)


def _diagonal(ax: Any, values: np.ndarray, size: int, span: np.ndarray | None = None) -> None:
    """A histogram on the matrix's diagonal over the same x range as its column (`span`: every value
    the column's panels show): its own count scale, so no y numbers that would read as the row's
    score; 'unknown' when there is nothing to count."""
    finite = values[np.isfinite(values)]
    if not len(finite):
        say(ax, "unknown\n(not recorded)")
        return
    shown = finite if span is None else np.concatenate([finite, span[np.isfinite(span)]])
    lo, hi = float(shown.min()), float(shown.max())
    ax.hist(finite, bins=15, range=(lo, hi) if hi > lo else None, color=GREY)
    ax.set_yticks([])
    ax.set_title("histogram", fontsize=size - 1, color="#555555", pad=2)


def write_curation_plots(r: Any, out: Path) -> list[Path]:
    """`out`: scatter matrix of the scores (the four axes and, with efforts, how hard the operator
    pressed), one point per episode (flagged ones red, when there
    are any); `<out>_starts.png`: the recorded start states and where to send operators next."""
    plt = pyplot()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    axes = {
        "graded success": [np.nan if s.success is None else s.success for s in r.episodes],
        "log10 jerk": [np.nan if s.jerk is None else np.log10(s.jerk + 1.0) for s in r.episodes],
        "duration / task median": [s.duration_ratio for s in r.episodes],
        "coverage gap": [np.nan if s.coverage_gap is None else s.coverage_gap for s in r.episodes],
    }
    if any(s.mashing is not None for s in r.episodes):  # how hard the operator pressed (reports/mashing.py)
        axes["excess load·s"] = [np.nan if s.mashing is None else s.mashing.excess_integral for s in r.episodes]
    flagged = np.array([s.jerky or bool(s.duration_flag) or s.pressed for s in r.episodes], dtype=bool)
    colors = np.where(flagged, RED, BLUE)
    names = list(axes)
    fig, grid = plt.subplots(len(names), len(names), figsize=(10, 10))
    for i, yi in enumerate(names):
        for j, xj in enumerate(names):
            ax = grid[i, j]
            x, y = np.asarray(axes[xj], float), np.asarray(axes[yi], float)
            if i == j:
                _diagonal(ax, x, 8)
            else:
                ax.scatter(x, y, s=12, c=colors)
            _edge_labels(ax, i == len(names) - 1, j == 0, xj, yi, 8)
    n = int(flagged.sum())
    key = (f"red: {n} flagged (jerky, duration tail or pressed hard), blue: the others" if n else
           "no episode flagged as jerky, in a duration tail or pressed hard (all blue)")
    fig.suptitle(f"Episode scores, one point per episode ({len(r.episodes)}): {key}")
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.07, top=0.94, wspace=0.3, hspace=0.3)
    save(fig, out, dpi=80, tight=False)

    starts_png = out.with_name(f"{out.stem}_starts.png")
    starts = np.asarray(r.start_states, dtype=float)
    targets = np.asarray(r.targets, dtype=float).reshape(-1, len(r.joints))
    d = len(r.joints)
    fig, grid = plt.subplots(d, d, figsize=(2 * d, 2 * d), squeeze=False)
    for i in range(d):
        for j in range(d):
            ax = grid[i, j]
            if j > i:  # the upper triangle mirrors the lower one
                ax.set_axis_off()
                continue
            if i == j:
                _diagonal(ax, starts[:, i], 7, targets[:, i] if len(targets) else None)
            else:
                ax.scatter(starts[:, j], starts[:, i], s=8, c=BLUE)
                if len(targets):
                    ax.scatter(targets[:, j], targets[:, i], s=30, marker="x", c=RED)
            _edge_labels(ax, i == d - 1, j == 0, r.joints[j], r.joints[i], 7)
    what = f"where to send operators next ({len(targets)} poses, red x)" if len(targets) else "no target poses"
    fig.suptitle(f"Start states of the {len(starts)} episodes (blue) and {what}")
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.07, top=0.95, wspace=0.35, hspace=0.35)
    save(fig, starts_png, dpi=70, tight=False)
    return [out, starts_png]
