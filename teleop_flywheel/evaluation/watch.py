"""`eval watch`'s bookkeeping, without ROS: which checkpoints wait, the protocol each is judged under,
the figures that go to lineage, the flag, and the HTML index.

A candidate is a LeRobot pretrained-policy directory (`config.json`, `model.safetensors` and the
processors: `policies.lerobot_checkpoint.check_dir`) anywhere under the watched folder, or one a
lineage entry names as its `training.path` (what `train` registers). Its id is the lineage
entry's, else the id the policy node would tag it with (`lerobot:<dir>:<hash>`). It waits until
evaluations under this protocol (by hash) are in the registry for it.

Each candidate is evaluated under the watched protocol with its checkpoint list replaced by two
entries: the protocol's first checkpoint — the incumbent, the one deployed now — and the
candidate (`policy: lerobot`). Both run in the same session, trials interleaved, so the Fisher
test and Holm's correction compare like with like; the derived protocol file (and its hash, in
every trial bag) sits beside the trials. A candidate is flagged when a comparison finds it worse
than the incumbent (Holm-adjusted p < 0.05).
"""
from __future__ import annotations

import datetime as dt
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from teleop_flywheel.core.files import create_exclusive, replace_atomic
from teleop_flywheel.data.provenance.lineage import Registry
from teleop_flywheel.evaluation.errors import ProtocolError
from teleop_flywheel.evaluation.protocol import Protocol
from teleop_flywheel.evaluation.report import Report
from teleop_flywheel.policies.lerobot_checkpoint import check_dir, default_checkpoint_id

INDEX = "index.html"


@dataclass(frozen=True)
class Candidate:
    id: str
    directory: Path


def _is_checkpoint(root: Path) -> bool:
    try:
        check_dir(root)
    except ValueError:
        return False
    return True


def discover(checkpoints_dir: Path, registry: Registry, settled_before: float | None = None) -> list[Candidate]:
    """Every checkpoint directory under `checkpoints_dir` and every one a lineage entry names, oldest
    first; with `settled_before` (a time.time()), only those whose files were all last written
    before it (a checkpoint still being saved is left for the next look)."""
    registered = {Path(path).resolve(): ck for ck, e in registry.checkpoints.items()
                  if (path := (e.get("training") or {}).get("path"))}
    roots = {config.parent.resolve() for config in checkpoints_dir.rglob("config.json")} | set(registered)
    found = []
    for root in roots:
        if not _is_checkpoint(root):
            continue
        written = max(p.stat().st_mtime for p in root.iterdir() if p.is_file())
        if settled_before is not None and written >= settled_before:
            continue
        found.append((written, Candidate(registered.get(root) or default_checkpoint_id(root), root)))
    return [c for _t, c in sorted(found, key=lambda x: (x[0], str(x[1].directory)))]


def evaluated(registry: Registry, checkpoint: str, protocol: Protocol) -> bool:
    return any(e.get("protocol_hash") == protocol.hash for e in registry.evaluations.get(checkpoint, []))


def slug(checkpoint: str) -> str:
    """A folder name for a checkpoint id (`lerobot:act:3f2a…` → `lerobot_act_3f2a…`)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", checkpoint).strip("_") or "checkpoint"


def incumbent_of(protocol: Protocol) -> str:
    return protocol.checkpoints[0]


def write_candidate_protocol(protocol: Protocol, candidate: Candidate, out: Path) -> Path:
    """`out/protocol.yaml`: the protocol with checkpoints [incumbent, candidate]. An earlier walk's
    file is kept if it says the same (a resumed evaluation); one that differs is an error."""
    data = yaml.safe_load(Path(protocol.path).read_text())
    data["checkpoints"] = [data["checkpoints"][0], {"id": candidate.id, "policy": "lerobot",
                                                    "policy_args": str(candidate.directory)}]
    text = f"# {protocol.path} with checkpoints [incumbent, candidate] (teleop-flywheel eval watch)\n"
    text += yaml.safe_dump(data, sort_keys=False)
    path = out / "protocol.yaml"
    if path.exists():
        if path.read_text() != text:
            raise ProtocolError(f"{path}: an earlier evaluation of {candidate.id} used another protocol; move "
                                f"{out} aside to evaluate it afresh")
        return path
    out.mkdir(parents=True, exist_ok=True)
    return create_exclusive(path, text)


def figures(report: Report, protocol: Protocol, candidate: Candidate, report_path: Path, bags: Path) -> dict[str, Any]:
    """What lineage keeps of one evaluation: the table's numbers, the comparisons, the flag."""
    incumbent = incumbent_of(protocol)
    return {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "protocol": protocol.name, "protocol_path": str(Path(protocol.path).resolve()),
        "protocol_hash": protocol.hash, "trials_protocol_hash": report.protocol_hash,
        "incumbent": incumbent if incumbent != candidate.id else "",
        "checkpoint_dir": str(candidate.directory),
        "cells": [{"checkpoint": c.checkpoint, "condition": c.condition, "n": c.n, "planned": c.planned,
                   "successes": c.successes, "rate": c.rate, "ci95": list(c.ci95)} for c in report.cells],
        "comparisons": [{"condition": c.condition, "verdict": c.verdict, "p_value": c.p_value,
                         "p_adjusted": c.p_adjusted, "sentence": c.sentence} for c in report.comparisons],
        "flagged": flagged(report, candidate.id),
        "incomplete": report.incomplete,
        "report": str(report_path), "bags": str(bags),
    }


def flagged(report: Report, candidate: str) -> bool:
    """The candidate is significantly worse than the incumbent in some comparison (Holm-adjusted)."""
    return any(c.verdict == "worse" and c.b == candidate for c in report.comparisons)


def write_index(out: Path, registry: Registry, protocol: Protocol) -> Path:
    """`out/index.html`: every evaluation under this protocol in the registry, newest first (replaced
    atomically as evaluations are appended)."""
    rows = sorted(((e, ck) for ck, es in registry.evaluations.items() for e in es
                   if e.get("protocol_hash") == protocol.hash), key=lambda x: x[0]["when"], reverse=True)
    parts = [f"<html><body><h1>eval watch: protocol {html.escape(protocol.name)} ({protocol.hash})</h1>"]
    for e, ck in rows:
        link = Path(e["report"])
        href = link.relative_to(out) if link.is_relative_to(out) else link
        flag = " <b style='color:#b00'>FLAGGED: worse than the incumbent</b>" if e["flagged"] else ""
        parts.append(f"<h2>{html.escape(ck)}{flag}</h2><p>{html.escape(e['when'])}, incumbent "
                     f"{html.escape(e['incumbent'] or 'none')}, <a href='{html.escape(str(href))}'>report</a></p>"
                     "<table border=1><tr><th>checkpoint</th><th>condition</th><th>N</th><th>successes</th>"
                     "<th>rate [95% Wilson]</th></tr>")
        for c in e["cells"]:
            rate = "-" if c["rate"] is None else f"{c['rate']:.0%}"
            parts.append(f"<tr><td>{html.escape(c['checkpoint'])}</td><td>{html.escape(c['condition'])}</td>"
                         f"<td>{c['n']}/{c['planned']}</td><td>{c['successes']}</td>"
                         f"<td>{rate} [{c['ci95'][0]:.2f}, {c['ci95'][1]:.2f}]</td></tr>")
        parts.append("</table><ul>" + "".join(f"<li>{html.escape(c['sentence'])}</li>" for c in e["comparisons"])
                     + "</ul>")
    parts.append("</body></html>\n")
    return replace_atomic(out / INDEX, "".join(parts))
