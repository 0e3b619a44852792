"""`python -m teleop_flywheel.ros.reference [--check]`: the reference tables, generated from the code.

`docs/reference.md` (topics, services, parameters of every node) is written from what the code
says, never by hand: the topics and services each node class creates (read from its source: the
`create_publisher` / `create_subscription` / `create_service` calls, names resolved through
`core/topics.py` and the module's own constants, message types from the imported classes), the
notes on each name from the comment beside it in `core/topics.py`, and every parameter from the
node's parameter dataclass (`ros/params.py`: type, default, allowed values, whether it may change
at run time, description). The README's list of the demo's outputs comes from
`ros/commands/demo_outputs.py` the same way, and its benchmark lines from `bench/results`
(`benchmark_lines`). `--check` exits 1 when a committed file differs from
what would be written (test/test_readme.py runs it), so the tables cannot drift.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import io
import re
import sys
import textwrap
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teleop_flywheel.core import topics as vocabulary
from teleop_flywheel.ros.benchmark_lines import benchmark_lines

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference.md"
README = ROOT / "README.md"
CREATORS = {"create_publisher": "pub", "create_subscription": "sub", "create_service": "srv"}


@dataclass
class Endpoint:
    kind: str  # pub | sub | srv
    name: str
    type: str
    qos: str
    node: str
    note: str = ""


@dataclass
class NodeInfo:
    executable: str
    cls: type
    params: Any
    endpoints: list[Endpoint] = field(default_factory=list)


def _type_name(obj: Any) -> str:
    """`sensor_msgs/msg/JointState` of a message or service class; the placeholder otherwise."""
    module = getattr(obj, "__module__", "")
    if not isinstance(obj, type) or "." not in module:
        return "(as recorded)"
    parts = module.split(".")
    return f"{parts[0]}/{parts[1]}/{obj.__name__}"


class _Resolver:
    """Evaluates the name argument of a create_* call against the module's globals, with
    `<placeholders>` for what is only known at run time."""

    def __init__(self, module: Any, cls_tree: ast.ClassDef, params: Any) -> None:
        self.g = vars(module)
        self.attrs: dict[str, ast.expr] = {}
        for node in ast.walk(cls_tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                t = node.targets[0]
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    self.attrs.setdefault(t.attr, node.value)
        self.choices = {f.name: f.spec.choices for f in params.fields_()} if params else {}

    def text(self, node: ast.expr, depth: int = 0) -> str:
        if depth > 8:
            return "<?>"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            value = self.g.get(node.id)
            return value if isinstance(value, str) else f"<{node.id}>"
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in self.attrs:
                return self.text(self.attrs[node.attr], depth + 1)
            return f"<{node.attr}>"
        if isinstance(node, ast.JoinedStr):
            return "".join(self.text(v.value if isinstance(v, ast.FormattedValue) else v, depth + 1)
                           for v in node.values)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and callable(self.g.get(node.func.id)):
            func = self.g[node.func.id]
            names = list(inspect.signature(func).parameters)
            args = []
            for i, arg in enumerate(node.args):  # a run-time value is named after the callee's parameter
                value = self.text(arg, depth + 1)
                if value.startswith("<") and value.endswith(">") and i < len(names):
                    value = f"<{names[i]}>"
                args.append(value)
            return str(func(*args))
        return "<?>"

    def expand(self, name: str, node: str) -> list[tuple[str, str]]:
        """A placeholder naming a parameter with choices (`<role>`) stands for each choice, in the
        endpoint's name and in its node's name (`<role>_arm`)."""
        for key, options in self.choices.items():
            if f"<{key}>" in name and options:
                return [(name.replace(f"<{key}>", o), node.replace(f"<{key}>", o)) for o in options]
        return [(name, node)]


def _loops(tree: ast.AST) -> dict[int, tuple[str, ast.expr]]:
    """For each call inside a `for X in ITER` loop: (X, ITER), by the call's id."""
    out: dict[int, tuple[str, ast.expr]] = {}
    for loop in ast.walk(tree):
        if isinstance(loop, ast.For) and isinstance(loop.target, ast.Name):
            for inner in ast.walk(loop):
                if isinstance(inner, ast.Call):
                    out[id(inner)] = (loop.target.id, loop.iter)
    return out


def node_info(executable: str, target: str, node_names: dict[str, str]) -> NodeInfo:
    from teleop_flywheel.ros.params import NodeParams

    module_name, cls_name = target.split(":")
    module = importlib.import_module(module_name)
    cls = getattr(module, cls_name)
    params = next((v for v in vars(module).values() if isinstance(v, type) and issubclass(v, NodeParams)
                   and v is not NodeParams and v.__module__ == module.__name__), None)
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    resolve = _Resolver(module, tree.body[0], params)  # type: ignore[arg-type]
    loops = _loops(tree)
    info = NodeInfo(executable, cls, params)
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in CREATORS
                and len(call.args) >= 2):
            continue
        kind = CREATORS[call.func.attr]
        msg = call.args[0]
        type_name = _type_name(vars(module).get(msg.id)) if isinstance(msg, ast.Name) else "(as recorded)"
        name = resolve.text(call.args[1])
        note = ""
        if id(call) in loops:
            var, iterable = loops[id(call)]
            values = vars(module).get(iterable.id) if isinstance(iterable, ast.Name) else None
            if isinstance(values, (tuple, list)) and all(isinstance(v, str) for v in values):
                note = f"one per {var}: {', '.join(values)}"
        if name == "<topic>" and kind == "sub":
            name, note = "(each topic it records)", "its `topics` parameter and the cameras; raw CDR, as offered"
        qos_arg = (
            call.args[3] if kind == "sub" and len(call.args) > 3 else (call.args[2] if len(call.args) > 2 else None)
        )
        qos = qos_arg.id.removesuffix("_QOS").lower() if isinstance(qos_arg, ast.Name) else ""
        if isinstance(qos_arg, ast.Constant):
            qos = f"depth {qos_arg.value!s}"
        if kind == "srv":
            qos = ""
        for expanded, node_name in resolve.expand(name, node_names.get(executable, executable)):
            if expanded.startswith("~/"):
                expanded = f"{node_name}/{expanded[2:]}"
            info.endpoints.append(Endpoint(kind, expanded, type_name, qos, node_name, note))
    return info


def topic_notes() -> dict[str, str]:
    """The comment beside each name in core/topics.py: `NAME = "value"  # note` -> {value: note}."""
    source = Path(vocabulary.__file__).read_text()
    comments = {tok.start[0]: tok.string.lstrip("# ").strip()
                for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    out: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            note = comments.get(node.lineno, "")
            if note:
                out[node.value.value] = note
    return out


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _default(value: Any) -> str:
    if isinstance(value, str):
        return f"`{value!r}`" if value else "`''`"
    return f"`{value!r}`"


def _kind(kind: Any) -> str:
    return kind.__name__ if isinstance(kind, type) else str(kind)


def nodes() -> list[NodeInfo]:
    from teleop_flywheel.ros.session.launch.graph import EXECUTABLES, build_graph

    names: dict[str, list[str]] = {}
    for kind in ("sim", "rollout"):
        for spec in build_graph(kind).nodes:
            names.setdefault(spec.executable, [])
            if spec.name not in names[spec.executable]:
                names[spec.executable].append(spec.name)
    node_names = {exe: n[0] for exe, n in names.items()}
    node_names.update(arm_driver="<role>_arm", camera="camera_<name>")  # as graph.py names them
    return [node_info(exe, target, node_names) for exe, target in EXECUTABLES.items()]


def render_reference() -> str:
    infos = nodes()
    notes = topic_notes()
    lines = [
        "# Topics, services and parameters",
        "",
        "<!-- generated by `python -m teleop_flywheel.ros.reference` from the node classes, core/topics.py and the "
        "parameter dataclasses; do not edit: test/test_readme.py fails when this file drifts -->",
        "",
        "Generated from the code: the topics and services each node class creates (`ros/nodes/*.py`), the notes "
        "beside each name in `core/topics.py`, and each node's parameter dataclass (`ros/params.py`). Names "
        "without a leading `/` are relative: with `namespace:=rig_a` they resolve under `/rig_a/` (`/diagnostics` "
        "stays global). Every `header.stamp` is ROS time taken at the source (`docs/CONTRACTS.md`). Every node "
        "also has ROS 2's parameter services (`<node>/set_parameters`, ...): `ros2 param set` changes the "
        "parameters marked *run time* below; the rest are read-only.",
        "",
        "## Topics",
        "",
        "| topic | type | published by | subscribed by | QoS | note |",
        "|---|---|---|---|---|---|",
    ]
    topics: dict[str, dict[str, Any]] = {}
    for info in infos:
        for e in info.endpoints:
            if e.kind == "srv":
                continue
            row = topics.setdefault(e.name, {"type": e.type, "pub": [], "sub": [], "qos": [], "note": e.note})
            if e.type != "(as recorded)":
                row["type"] = e.type
            row[e.kind].append(e.node)
            if e.qos and e.kind == "pub":
                row["qos"].append(e.qos)
    order = sorted(topics, key=lambda t: (t.startswith("("), t.startswith("/"), t))
    for name in order:
        row = topics[name]
        note = notes.get(name.lstrip("/"), notes.get(name, "")) or row["note"] or next(
            (n for prefix, n in notes.items() if prefix.endswith("/") and name.startswith(prefix)), "")
        shown = name if name.startswith("(") else f"`{name}`"
        lines.append(f"| {shown} | {row['type']} | {', '.join(dict.fromkeys(row['pub'])) or '—'} | "
                     f"{', '.join(dict.fromkeys(row['sub'])) or '—'} | {', '.join(dict.fromkeys(row['qos']))} | "
                     f"{_cell(note)} |")
    lines += ["", "QoS: `stream` keeps a history for recording, `control` only the newest sample, `latched` is "
              "transient-local (a late subscriber gets the last message), `image` a short reliable queue.", "",
              "## Services", "", "| service | type | node | note |", "|---|---|---|---|"]
    for info in infos:
        for e in info.endpoints:
            if e.kind == "srv":
                lines.append(f"| `{e.name}` | {e.type} | {e.node} | {_cell(e.note)} |")
    lines += ["", "## Parameters", "",
              "Every parameter with its type, default and allowed values; *run time* ones can be changed with "
              "`ros2 param set` while the node runs. `config/params.yaml` lists them as a parameter file. A bad "
              "value stops the node with one line naming it."]
    for info in infos:
        if info.params is None:
            continue
        lines += ["", f"### `{info.executable}` ({info.cls.__name__}, `{info.params.__name__}`)", "",
                  "| parameter | type | default | allowed | run time | description |", "|---|---|---|---|---|---|"]
        for f in info.params.fields_():
            allowed = f.spec.allowed()
            lines.append(f"| `{f.name}` | {_cell(_kind(f.kind))} | {_cell(_default(f.default))} | "
                         f"{_cell(allowed if allowed != 'any value' else '')} | {'' if f.spec.read_only else 'yes'} | "
                         f"{_cell(f.spec.description)} |")
    return "\n".join(lines) + "\n"


def _block(text: str, tag: str, body: str) -> str:
    begin = f"<!-- {tag}: generated by python -m teleop_flywheel.ros.reference; do not edit -->"
    end = f"<!-- {tag}: end -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{README}: no {begin} ... {end} block")
    return pattern.sub(lambda _m: f"{begin}\n{body}\n{end}", text)


def render_readme(text: str) -> str:
    """The README with its generated blocks: the demo's outputs (`demo_outputs.OUTPUTS`) and one
    line per benchmark (`bench/results/*.json`)."""
    from teleop_flywheel.ros.commands.demo_outputs import markdown

    return _block(_block(text, "demo-outputs", markdown()), "benchmarks", benchmark_lines())


def outputs() -> dict[Path, str]:
    return {REFERENCE: render_reference(), README: render_readme(README.read_text())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m teleop_flywheel.ros.reference", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file differs; write nothing")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if args.check and stale:
        print("out of date (run python -m teleop_flywheel.ros.reference): "
              + ", ".join(str(p.relative_to(ROOT)) for p in stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
