"""The README as code: `.ci/run` runs exactly the README's install step and test command,
taken from its tagged blocks; the generated tables (docs/reference.md, the README's demo outputs
and benchmark lines) are what the code says; the ROS 2 pip command is package.xml's pip-only list;
every link resolves; the page stays short."""
from __future__ import annotations

import ast
import importlib.util
import re
import xml.etree.ElementTree as ET
from types import ModuleType

import pytest
from support.paths import ROOT

ROOT = ROOT
README = ROOT / "README.md"


def _steps() -> ModuleType:
    spec = importlib.util.spec_from_file_location("readme_steps", ROOT / ".ci" / "readme_steps.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ci_runs_exactly_the_readmes_install_and_test_commands() -> None:
    steps = _steps()
    blocks = steps.blocks(README.read_text())
    setup, test = blocks["setup"], blocks["test"]
    # The README's first command: install, then the demo on its own DDS island.
    assert steps.step("install") == setup[0] == 'python3 -m venv .venv && .venv/bin/pip install -e ".[standalone,dev]"'
    assert steps.step("demo") == setup[1] and len(setup) == 2
    assert (
        setup[1].startswith("ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ") and "/teleop-flywheel demo --out " in setup[1]
    )
    # The tests: the CPU-bound ones on two workers, then the wall-clock ones on two workers, then those that
    # run a whole rig alone (test/support/realtime.py REALTIME, WHOLE_MACHINE).
    assert steps.step("test") == test[0] == (
        '.venv/bin/python -m pytest -q -n 2 -m "not realtime" && .venv/bin/python -m pytest -q -n 2 -m "realtime and '
        'not whole_machine" && .venv/bin/python -m pytest -q -m whole_machine')
    # .ci/run: the README's steps through the extractor, plus the mypy step, and nothing else that runs.
    script = (ROOT / ".ci" / "run").read_text()
    body = re.search(r"^readme_step\(\) \{.*?^\}", script, re.S | re.M)
    assert body and 'python3 .ci/readme_steps.py "$1"' in body.group(0) and '-c "$cmd"' in body.group(0)
    rest = script[:body.start()] + script[body.end():]
    commands = [
        line.strip()
        for line in rest.splitlines()
        if line.strip()
        and not line.strip().startswith("#")
        and not re.match(r"(set -euo pipefail|cd \"\$\(dirname \"\$0\"\)/\.\.\"|export [A-Z_]+=)", line.strip())
    ]
    # Besides them only the installs of Debian's prometheus and chromium, the real clients of the fleet's
    # rule tests and of the review page's browser tests (they skip where absent); each installs a system
    # package and never runs a test itself.
    system = [c for c in commands if any(w in c for w in ("prometheus", "promtool", "chromium")) or c == "fi"]
    assert all("pytest" not in c and "pip " not in c for c in system), system
    assert [c for c in commands if c not in system] == [
        "readme_step install", ".venv/bin/mypy --ignore-missing-imports teleop_flywheel", "readme_step test"], commands
    assert "pip install" not in rest and "pytest" not in rest  # never a copy of the README's commands


def test_tagged_blocks_are_found_and_refused_when_ambiguous() -> None:
    steps = _steps()
    text = "```bash setup\na\n\nb\n```\n\n```bash test\nc\n```\n```python\nnot tagged\n```\n"
    assert steps.blocks(text) == {"setup": ["a", "b"], "test": ["c"]}
    assert steps.step("install", text) == "a" and steps.step("demo", text) == "b"
    with pytest.raises(SystemExit):
        steps.step("test", text + "```bash test\nd\n```\n")


def test_generated_tables_are_up_to_date() -> None:
    pytest.importorskip("rclpy")
    from teleop_flywheel.ros import reference

    stale = [p for p, text in reference.outputs().items() if p.read_text() != text]
    assert not stale, f"run `python -m teleop_flywheel.ros.reference` and commit: {stale}"


def test_reference_names_every_node_topic_service_and_parameter() -> None:
    pytest.importorskip("rclpy")
    from teleop_flywheel.core import topics
    from teleop_flywheel.ros import reference

    text = (ROOT / "docs" / "reference.md").read_text()
    for name in (topics.LEADER_STATE, topics.FOLLOWER_COMMAND, topics.AUTHORITY, topics.INTERVENTION,
                 topics.PEDAL_JOY, topics.DIAGNOSTICS, topics.camera_image("<name>")):
        assert f"`{name}`" in text, name
    for info in reference.nodes():
        assert info.params is not None and f"### `{info.executable}`" in text
        for f in info.params.fields_():
            assert f"| `{f.name}` |" in text
    assert "| `recorder/start` | std_srvs/srv/Trigger | recorder |" in text
    assert "| `teleop/label/<label>` | std_srvs/srv/Trigger | teleop | one per label: wrong_object" in text


def test_readme_is_short_its_links_resolve_and_its_picture_exists() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert "docs/images/joint_ranges.png" in links
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert not missing, missing
    for doc in (
        "architecture",
        "arm_driver",
        "ros2",
        "reference",
        "foxglove",
        "data_engine",
        "validate",
        "convert",
        "ingest",
        "dataset_reports",
        "evaluation",
        "cli",
        "benchmarks",
    ):
        assert f"(docs/{doc}.md" in text, doc
    from teleop_flywheel.ros.benchmark_lines import FOLDED_LINES

    bench = sorted(p.stem for p in (ROOT / "bench" / "results").glob("*.json") if p.stem not in FOLDED_LINES)
    assert [b for b in bench if f"\n- `{b}` (" in text] == bench  # one line per benchmark (or folded into one)


def _pip_only() -> list[str]:
    comments = [c for c in re.findall(r"<!--(.*?)-->", (ROOT / "package.xml").read_text(), re.S) if "pip:" in c]
    assert len(comments) == 1
    return comments[0].split("pip:", 1)[1].split()


def test_ros2_pip_command_is_package_xmls_pip_only_list_and_covers_every_requirement() -> None:
    steps = _steps()
    ros2 = steps.blocks(README.read_text())["ros2"]
    pip = [line for line in ros2 if " pip install " in line]
    assert len(pip) == 1
    names = [w for w in pip[0].split(" pip install ", 1)[1].split() if not w.startswith("-")]
    assert names == _pip_only()
    assert any(line.startswith("rosdep install --from-paths src --ignore-src") for line in ros2)
    assert any("colcon build" in line and "source install/setup.bash" in line for line in ros2)
    assert any(line.startswith("ros2 launch teleop_flywheel ") and "namespace:=" in line and "params_file:=" in line
               for line in ros2)
    # Every base requirement of setup.py is a rosdep key in package.xml or on the pip-only list.
    tree = ast.parse((ROOT / "setup.py").read_text())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg == "install_requires")
    requires = [re.split(r"[<>=;\s\[]", ast.literal_eval(e))[0] for e in call.value.elts]  # type: ignore[attr-defined]
    depends = {e.text for e in ET.parse(ROOT / "package.xml").getroot().iter("exec_depend")}
    rosdep = {"pyyaml": "python3-yaml", "pyserial": "python3-serial", "opencv-python-headless": "python3-opencv"}
    uncovered = [r for r in requires if rosdep.get(r, f"python3-{r}") not in depends and r not in names]
    assert not uncovered, uncovered
