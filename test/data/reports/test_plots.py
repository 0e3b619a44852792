"""Pictures a person reads: no empty panel (a panel with nothing to draw says so), integer
ticks on episode axes, titles that match what is drawn, and one HTML page explaining each plot."""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from teleop_flywheel.data.curation.curate import curate, write_plot
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.reports import plots
from teleop_flywheel.data.reports.audit import audit, write_html
from teleop_flywheel.testing.synthetic_dataset import SyntheticSpec, write


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every figure the plots save, by file name, inspected before it is closed."""
    seen: dict[str, Any] = {}
    real = plots.save

    def keep(fig: Any, path: Path, dpi: int = 90, tight: bool = True) -> Path:
        fig.canvas.draw()
        seen[Path(path).name] = {
            "suptitle": fig._suptitle.get_text() if fig._suptitle else "",
            "axes": [{"title": ax.get_title(), "texts": [t.get_text() for t in ax.texts],
                      "artists": len(ax.patches) + len(ax.collections) + len(ax.lines),
                      "xlabel": ax.get_xlabel(), "visible": ax.axison,
                      "xticks": [t.get_text() for t in ax.get_xticklabels()],
                      "colors": [tuple(np.round(c, 3)) for coll in ax.collections
                                 for c in coll.get_facecolors()]} for ax in fig.axes],
        }
        return real(fig, path, dpi, tight)

    monkeypatch.setattr(plots, "save", keep)
    return seen


def _no_empty_panel(fig: dict[str, Any]) -> None:
    for ax in fig["axes"]:
        if ax["visible"]:
            assert ax["artists"] or ax["texts"], ax  # something drawn, or words saying why not


def _episode_ticks_are_integers(fig: dict[str, Any]) -> None:
    for ax in fig["axes"]:
        if ax["xlabel"] == "episode":
            labels = [t.replace("−", "-") for t in ax["xticks"] if t]
            assert labels and all(float(t).is_integer() for t in labels), ax["xticks"]


def test_audit_plots_when_nothing_starts_with_dead_air(tmp_path: Path, figures: dict[str, Any]) -> None:
    ds = LeRobotDataset.open(write(tmp_path / "ds", SyntheticSpec(episodes=3, min_length=30, max_length=40,
                                                                   seed=4, max_lead_dead=0)).root)
    report = audit(ds)
    report.leading_dead = [0] * len(report.leading_dead)  # every value zero: the right panel says so
    page = write_html(report, tmp_path / "out" / "audit.html").read_text()
    lengths = figures["episode_lengths.png"]
    _no_empty_panel(lengths)
    assert any("No leading dead air" in t for ax in lengths["axes"] for t in ax["texts"])
    for name in ("joint_ranges.png", "start_states.png"):
        _no_empty_panel(figures[name])
        _episode_ticks_are_integers(figures[name])
    # One page, one sentence per plot, every PNG beside it.
    for heading, sentence in plots.AUDIT_PLOTS.values():
        assert f"<h2>{html.escape(heading)}</h2>" in page and html.escape(sentence)[:40] in page
    assert page.count("<img ") == 3 and all((tmp_path / "out" / "audit_files" / n).is_file() for n in figures)


def test_audit_plots_with_dead_air_and_many_episodes(tmp_path: Path, figures: dict[str, Any]) -> None:
    ds = LeRobotDataset.open(write(tmp_path / "ds", SyntheticSpec(episodes=23, min_length=30, max_length=90,
                                                                   seed=5)).root)
    report = audit(ds)
    assert any(report.leading_dead)
    write_html(report, tmp_path / "audit.html")
    for fig in figures.values():
        _no_empty_panel(fig)
        _episode_ticks_are_integers(fig)


def test_curation_titles_match_what_is_drawn(tmp_path: Path, figures: dict[str, Any]) -> None:
    ds = LeRobotDataset.open(write(tmp_path / "ds", SyntheticSpec(episodes=30, min_length=30, max_length=200,
                                                                   seed=3)).root)
    report = curate(ds)
    write_plot(report, tmp_path / "curation.png")
    scores, starts = figures["curation.png"], figures["curation_starts.png"]
    red = tuple(np.round(np.array([0xC0, 0x39, 0x2B, 0xFF]) / 255, 3))
    drawn_red = sum(c == red for ax in scores["axes"] for c in ax["colors"])
    flagged = sum(s.jerky or bool(s.duration_flag) for s in report.episodes)
    if flagged:
        assert f"red: {flagged} flagged" in scores["suptitle"] and drawn_red > 0
    else:
        assert "no episode flagged" in scores["suptitle"] and drawn_red == 0
    assert f"({len(report.targets)} poses, red x)" in starts["suptitle"]
    for fig in (scores, starts):
        _no_empty_panel(fig)
        for ax in fig["axes"]:
            assert "e1" not in " ".join(ax["xticks"])  # no offset notation

    # Nothing flagged: the title says so and no red point is drawn.
    figures.clear()
    for s in report.episodes:
        s.jerky, s.duration_flag = False, ""
    write_plot(report, tmp_path / "calm.png")
    calm = figures["calm.png"]
    assert "no episode flagged" in calm["suptitle"]
    assert not any(c == red for ax in calm["axes"] for c in ax["colors"])
