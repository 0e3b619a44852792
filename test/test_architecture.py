"""The import contract of the floors (README, "Architecture"), enforced, not by convention.

- rclpy, launch and ROS message packages are imported only under `teleop_flywheel/ros/`;
  `cli/` reaches `ros/` commands lazily (inside the verb's function, by module name).
- Each floor imports only floors below it: core < hw < recording < data < fleet < policies < training <
  testing < evaluation < ros < cli. So the data engine never pulls in a device, and nothing below `ros`
  can need DDS.
- Every module outside `ros/` imports in a fresh interpreter in which ROS packages cannot be
  imported at all (catches an import hidden behind another module); the cli's verb doors too,
  since a verb that needs ROS imports its body only when it runs.
- The fleet's operations (Prometheus) are served by ros/ alone: no data or learning floor imports
  `fleet/` (import-linter's `fleet` contract, proven able to fail over a planted package).
- Only the doors (`cli/`, `ros/commands/`) take an argparse `Namespace`; library functions take
  typed arguments.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

from support import architecture_doc, realtime
from support.paths import PACKAGE, ROOT

FLOORS = ("core", "hw", "recording", "data", "fleet", "policies", "training", "testing", "evaluation", "ros", "cli")
ROS_PACKAGES = frozenset({
    "rclpy", "rcl_interfaces", "launch", "launch_ros", "ament_index_python", "builtin_interfaces",
    "std_msgs", "std_srvs", "sensor_msgs", "diagnostic_msgs", "geometry_msgs", "tf2_msgs", "rosidl_runtime_py",
    "foxglove_msgs", "visualization_msgs",
})

def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _floor(path: Path, root: Path = PACKAGE) -> str:
    rel = path.relative_to(root).parts
    return rel[0].removesuffix(".py") if len(rel) > 1 else rel[0].removesuffix(".py")


def _imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, imported module, at module level) for every import statement in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module, id(node) in top_level))
            if node.module == "teleop_flywheel":
                found += [(node.lineno, f"teleop_flywheel.{a.name}", id(node) in top_level) for a in node.names]
    return found


def violations(paths: list[Path], root: Path = PACKAGE) -> list[str]:
    bad = []
    for path in paths:
        floor = _floor(path, root)
        rank = FLOORS.index(floor) if floor in FLOORS else -1
        for line, module, _top in _imports(path):
            where = f"{path.relative_to(root.parent)}:{line}"
            if module.split(".")[0] in ROS_PACKAGES and floor != "ros":
                bad.append(f"{where}: imports {module} outside teleop_flywheel/ros/")
            parts = module.split(".")
            if parts[0] == "teleop_flywheel" and len(parts) > 1 and parts[1] in FLOORS:
                target = FLOORS.index(parts[1])
                if rank >= 0 and target > rank:
                    bad.append(f"{where}: floor {floor} imports {module} (a floor above it)")
    return bad


def test_every_module_is_on_a_floor() -> None:
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert loose == [], f"modules outside the floors: {loose}"


def test_import_contract_holds() -> None:
    assert violations(_modules()) == []


def test_the_contract_check_fails_on_a_violation(tmp_path: Path) -> None:
    """A check that cannot fire proves nothing: plant two violating modules and see both named."""
    root = tmp_path / "teleop_flywheel"
    planted = root / "core" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("import rclpy\n\ndef f():\n    from teleop_flywheel.data import validate\n", encoding="utf-8")
    found = violations([planted], root)
    assert any("planted.py:1: imports rclpy outside" in v for v in found), found
    assert any("planted.py:4: floor core imports teleop_flywheel.data" in v for v in found), found


def test_import_linter_keeps_every_contract() -> None:
    """The same floors, the ROS boundary, the independence of hw/'s devices and of cli/'s verb doors
    (none imports ROS or another door) and the order of the rooms inside data/ (and of a commit's
    modules), recording/ and ros/, checked by import-linter (`.importlinter`) over the imported graph,
    indirect imports included."""
    tool = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert tool, "import-linter is a dev requirement (pip install -e '.[dev]')"
    res = subprocess.run([tool, "--no-cache"], cwd=PACKAGE.parent, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-1000:]
    assert "Contracts: 11 kept, 0 broken." in res.stdout, res.stdout[-2000:]


def test_the_fleet_contract_fails_on_a_learning_floor_importing_fleet(tmp_path: Path) -> None:
    """`.importlinter`'s fleet contract, as written, over a planted package: each data or learning
    floor imports the fleet (broken, each named), while ros/, which serves it, may."""
    tool = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert tool, "import-linter is a dev requirement (pip install -e '.[dev]')"
    root = tmp_path / "teleop_flywheel"
    learning = ("data", "policies", "training", "testing", "evaluation")
    for floor in ("fleet", "ros", *learning):
        (root / floor).mkdir(parents=True)
        (root / floor / "__init__.py").write_text("", encoding="utf-8")
        if floor != "fleet":
            (root / floor / "planted.py").write_text("from teleop_flywheel.fleet import metrics\n", encoding="utf-8")
    (root / "__init__.py").write_text("", encoding="utf-8")
    (root / "fleet" / "metrics.py").write_text("", encoding="utf-8")
    res = subprocess.run([tool, "--no-cache", "--contract", "fleet", str(ROOT / ".importlinter")], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "Contracts: 0 kept, 1 broken." in res.stdout, res.stdout[-3000:] + res.stderr
    named = {floor for floor in (*learning, "ros") if f"teleop_flywheel.{floor}.planted -> teleop_flywheel.fleet" in
             res.stdout}
    assert named == set(learning), res.stdout[-3000:]


def namespace_takers(paths: list[Path], root: Path = PACKAGE) -> list[str]:
    """Every function outside the doors (`cli/`, `ros/commands/`) with a parameter annotated as an
    argparse `Namespace`: the library takes plain typed arguments, a verb's door builds them."""
    found = []
    for path in paths:
        rel = path.relative_to(root).parts
        if rel[0] == "cli" or rel[:2] == ("ros", "commands"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]:
                    if arg.annotation is not None and "Namespace" in ast.unparse(arg.annotation) \
                            and "SimpleNamespace" not in ast.unparse(arg.annotation):
                        found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {node.name}({arg.arg})")
    return found


def test_no_library_function_takes_a_namespace() -> None:
    assert namespace_takers(_modules()) == []


def test_the_namespace_check_fails_on_a_taker(tmp_path: Path) -> None:
    root = tmp_path / "teleop_flywheel"
    (root / "data").mkdir(parents=True)
    (root / "cli").mkdir()
    (root / "data" / "planted.py").write_text(
        "import argparse\nfrom argparse import Namespace\n\n"
        "def run(args: argparse.Namespace) -> int: ...\n\n"
        "class C:\n    def go(self, *, opts: 'Namespace | None' = None) -> None: ...\n", encoding="utf-8")
    (root / "cli" / "door.py").write_text("import argparse\n\ndef run(args: argparse.Namespace) -> int: ...\n",
                                          encoding="utf-8")
    found = namespace_takers(sorted(root.rglob("*.py")), root)
    assert found == ["teleop_flywheel/data/planted.py:4: run(args)", "teleop_flywheel/data/planted.py:7: go(opts)"]


def test_no_two_modules_share_a_name() -> None:
    """A name says what a module is, once. Nodes and verbs are the exception: `ros/nodes/` modules
    carry the executable's name a user types (`ros2 run teleop_flywheel ingest`), `cli/verbs/` doors
    and their ROS bodies in `ros/commands/` the command's (`teleop-flywheel validate`), over the
    library they drive; and each floor has its one `errors.py` (`hw/errors.py`), like an `__init__`."""
    seen: dict[str, list[str]] = {}
    for path in _modules():
        floor_errors = path.name == "errors.py" and path.parent.parent == PACKAGE
        if path.name != "__init__.py" and path.parent.name not in ("nodes", "verbs", "commands") and not floor_errors:
            seen.setdefault(path.stem, []).append(str(path.relative_to(PACKAGE)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_tests_mirror_the_package() -> None:
    """A module's tests are found where the module is: every folder of test/ is a package folder
    (test/data/validate/ tests teleop_flywheel/data/validate/), helpers live in test/support/."""
    tests = ROOT / "test"
    folders = {p.relative_to(tests) for p in tests.rglob("*") if p.is_dir()
               and not {"support", "__pycache__"} & set(p.relative_to(tests).parts)}
    assert sorted(str(f) for f in folders if not (PACKAGE / f / "__init__.py").is_file()) == []
    loose = sorted(p.name for p in tests.glob("*.py") if p.name not in ("conftest.py",) and p.stem not in (
        "test_architecture", "test_style", "test_readme", "test_colcon_build"))
    assert loose == [], f"tests outside a package folder: {loose}"


def test_tests_against_the_wall_clock_are_marked_realtime() -> None:
    """A module that starts a simulated arm, a session, a node spinning or a pty runs apart from the
    CPU-bound tests, and one that starts a whole session one at a time (support/realtime.py): beside
    them its streams stall. Every listed path exists, and a whole-machine one is realtime too."""
    assert realtime.unlisted_wall_clock_modules() == {}, "add these to REALTIME in test/support/realtime.py"
    assert realtime.unlisted_session_modules() == [], "add these to WHOLE_MACHINE in test/support/realtime.py"
    assert [p for p in realtime.REALTIME if not (realtime.TEST_DIR / p).exists()] == []
    assert [p for p in realtime.WHOLE_MACHINE if not (realtime.TEST_DIR / p).is_file()
            or not realtime.realtime(realtime.TEST_DIR / p)] == []


def test_architecture_page_shows_the_enforced_tree() -> None:
    """docs/architecture.md's floors, rooms and contracts are generated from what CI enforces."""
    assert architecture_doc.current_block() == architecture_doc.generated(), (
        "docs/architecture.md is stale: run `python test/support/architecture_doc.py`")


def test_ros_free_floors_import_without_ros() -> None:
    names = [
        ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for p in _modules() if _floor(p) != "ros" and p.name != "__main__.py"
    ]
    blocker = (
        "import importlib.abc, sys\n"
        f"BLOCKED = {sorted(ROS_PACKAGES)!r}\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ImportError(f'ROS package {name} imported from a ROS-free floor')\n"
        "        return None\n"
        "sys.meta_path.insert(0, Block())\n"
        f"for name in {names!r}:\n"
        "    __import__(name)\n"
    )
    res = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]

