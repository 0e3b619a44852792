"""The ingest node's command line: every parameter reaches `teleop-flywheel ingest` as that verb's
own parser reads it, and the defaults the node mirrors (it starts light, without the data engine)
are the data engine's."""
from __future__ import annotations

from pathlib import Path

from teleop_flywheel.cli import command_parser
from teleop_flywheel.data.convert.ingest_loop import GRACE_S
from teleop_flywheel.data.lerobot import v3_layout
from teleop_flywheel.data.lerobot.encoder_process import ENCODE_STALL_S
from teleop_flywheel.ros.nodes import ingest as node


def test_the_mirrored_defaults_are_the_data_engines() -> None:
    assert (GRACE_S, ENCODE_STALL_S, tuple(v3_layout.CODECS)) == (node.GRACE_S, node.ENCODE_STALL_S, node.CODECS)


def test_every_parameter_reaches_the_ingest_command_as_its_parser_reads_it(tmp_path: Path) -> None:
    p = node.IngestParams(watch_dir=str(tmp_path), grace_s=2.5, poll_s=0.25, codec="h264", fps=15, repo_id="me/ds",
                          trim_dead_air=True, without_verdict=True, validate_config="v.yaml", audit=False,
                          quarantine=False, pre_encode=False, encode_timeout_s=7.5, nice=3)
    cmd = node.ingest_command(p, tmp_path, tmp_path / "dataset")
    verb = cmd.index("ingest")
    parser, _module = command_parser("ingest")
    args = parser.parse_args(cmd[verb + 1:])
    assert (args.watch, args.dataset) == ([tmp_path], tmp_path / "dataset")
    assert (args.grace, args.poll, args.codec, args.fps, args.repo_id, args.config) == (
        2.5, 0.25, "h264", 15, "me/ds", "v.yaml")
    assert (args.trim_dead_air, args.without_verdict, args.no_audit, args.no_quarantine, args.no_pre_encode) == (
        True, True, True, True, True)
    assert (args.encode_timeout, args.nice, args.workers) == (7.5, 3, 1)
    defaults = parser.parse_args(node.ingest_command(node.IngestParams(), tmp_path, tmp_path / "d")[verb + 1:])
    assert defaults.encode_timeout == ENCODE_STALL_S and defaults.grace == GRACE_S
