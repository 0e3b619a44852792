"""A verb's own options are accepted on either side of its sub-verb (issue 37): users type
`lineage which ID --registry FILE` as readily as `lineage --registry FILE which ID`."""
from __future__ import annotations

from pathlib import Path

import pytest

from teleop_flywheel.cli import Parser, command_parser, main, share_options


@pytest.mark.parametrize("after", [False, True])
def test_lineage_registry_before_or_after_the_sub_verb(tmp_path: Path, after: bool,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Both orders read the registry given, not the default one (before the fix, the second order
    was a usage error: "unrecognized arguments: --registry")."""
    registry = tmp_path / "lineage.json"
    argv = ["lineage", "which", "ckpt_a", "--registry", str(registry)] if after else \
        ["lineage", "--registry", str(registry), "which", "ckpt_a"]
    assert main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"checkpoint 'ckpt_a' is not in {registry}" in last, last


def test_an_option_given_on_both_sides_takes_the_later_and_one_before_is_kept() -> None:
    parser, _module = command_parser("lineage")
    args = parser.parse_args(["--registry", "before.json", "which", "x", "--registry", "after.json", "--debug"])
    assert (args.registry, args.debug) == (Path("after.json"), True)
    args = parser.parse_args(["--registry", "before.json", "--debug", "which", "x"])
    assert (args.registry, args.debug) == (Path("before.json"), True)
    args = parser.parse_args(["which", "x"])
    assert (args.registry, args.debug) == (None, False)


def test_a_sub_verbs_own_option_of_the_same_name_stays_its_own() -> None:
    parser = Parser(prog="verb")
    parser.add_argument("--limit", type=int, default=1)
    sub = parser.add_subparsers(dest="action", required=True)
    own = sub.add_parser("own")
    own.add_argument("--limit", type=float, default=0.5)
    sub.add_parser("plain")
    share_options(parser)
    assert parser.parse_args(["own", "--limit", "2.5"]).limit == 2.5
    assert parser.parse_args(["own"]).limit == 0.5
    assert parser.parse_args(["plain", "--limit", "3"]).limit == 3
    assert parser.parse_args(["plain"]).limit == 1
    with pytest.raises(SystemExit):
        parser.parse_args(["plain", "--limit", "x"])  # the copy keeps the option's type: a usage error

