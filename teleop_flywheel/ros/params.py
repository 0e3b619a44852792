"""Node parameters, declared once: one dataclass per node, one helper that declares and guards it.

A node's parameters are the fields of one dataclass; each field carries its description, its
allowed range or choices and whether it may change at run time (`spec()` in the field's metadata):

    @dataclass
    class TeleopParams(NodeParams):
        rate_hz: float = spec(200.0, "tick rate when no leader sample arrives", range=(1.0, 2000.0))
        mode: str = spec("teleop", "who drives", choices=("teleop", "policy"), read_only=False)

`NodeParameters(node, TeleopParams, on_change)` declares every field on the node with a
`ParameterDescriptor` (description, `FloatingPointRange`/`IntegerRange`, `read_only`, choices in
`additional_constraints`), validates the start values through the dataclass and raises ONE
`ParameterError` naming the node, the parameter, the value and what is allowed — the node's `main`
prints that line and exits non-zero. At run time rclpy refuses read-only parameters itself; a
changeable one is checked against its field, then the node's `on_change(old, new, names)` makes it
take effect or returns the reason it refuses (the value is then not stored).

Integers are accepted for floating-point parameters (`ros2 param set /teleop blend_duration_ms
300`, `rate_hz: 100` in a YAML file): they are converted, not refused for their spelling. String
lists cannot be declared empty in rclpy; an empty list is declared as `[""]` and empty strings are
dropped from the value the node sees.
"""
from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Generic, TypeVar

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter

from teleop_flywheel.core.names import MAX_TEXT, text_problem
from teleop_flywheel.ros.errors import ParameterError


class Invalid(ValueError):
    """Raised by a `NodeParams.check()` for a rule across fields: which parameter, what is allowed."""

    def __init__(self, name: str, allowed: str) -> None:
        super().__init__(f"{name}: {allowed}")
        self.name, self.allowed = name, allowed


@dataclass(frozen=True)
class Spec:
    """What a parameter is: the metadata of one field of a node's parameter dataclass."""

    description: str
    range: tuple[float, float] | None = None  # inclusive; for lists: of every element
    choices: tuple[str, ...] = ()
    read_only: bool = True
    text: bool = False  # operator text: what the data engine reads back as text (`core.names.text_problem`)
    pattern: str = ""  # strings: must match this regex entirely (empty strings allowed unless `required`)
    required: bool = False  # strings: must not be empty
    length: int | None = None  # lists: exactly this many elements

    def allowed(self) -> str:
        parts = []
        if self.range is not None:
            lo, hi = self.range
            parts.append(f"within [{_num(lo)}, {_num(hi)}]")
        if self.choices:
            parts.append("one of: " + ", ".join(repr(c) for c in self.choices))
        if self.required:
            parts.append("not empty")
        if self.pattern:
            parts.append(f"matching {self.pattern}")
        if self.text:
            parts.append(f"at most {MAX_TEXT} characters, no control characters, no path separators or "
                         "look-alikes")
        if self.length is not None:
            parts.append(f"{self.length} values")
        return "; ".join(parts) or "any value"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def spec(default: Any, description: str, **kw: Any) -> Any:
    """A dataclass field that is a node parameter (keywords: the fields of `Spec`)."""
    meta = {"param": Spec(description, **kw)}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


_SCALARS: dict[type, Parameter.Type] = {bool: Parameter.Type.BOOL, int: Parameter.Type.INTEGER,
                                        float: Parameter.Type.DOUBLE, str: Parameter.Type.STRING}
_ARRAYS: dict[type, Parameter.Type] = {bool: Parameter.Type.BOOL_ARRAY, int: Parameter.Type.INTEGER_ARRAY,
                                       float: Parameter.Type.DOUBLE_ARRAY, str: Parameter.Type.STRING_ARRAY}


@dataclass(frozen=True)
class Field:
    """One declared parameter: name, default, Python type (`int`, `list[float]`, `int | str`, …) and spec."""

    name: str
    default: Any
    kind: Any
    spec: Spec

    @property
    def element(self) -> type | None:
        """The element type of a list parameter, else None."""
        return typing.get_args(self.kind)[0] if typing.get_origin(self.kind) is list else None

    @property
    def dynamic(self) -> bool:
        """A union type (e.g. `int | str`): declared with dynamic typing, checked here."""
        return isinstance(self.kind, types.UnionType)

    def ros_type(self) -> Parameter.Type | None:
        if self.dynamic:
            return None
        return _ARRAYS[self.element] if self.element is not None else _SCALARS[self.kind]

    def coerce(self, value: Any) -> Any:
        """A value as rclpy or a YAML file spells it → this field's Python type, if it converts
        without loss of meaning (int → float, int list → float list, tuple → list); else as given."""
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if self.element is not None and isinstance(value, (list, tuple)):
            items = list(value)
            if self.element is float:
                items = [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in items]
            if self.element is str:
                items = [v for v in items if v != ""]
            return items
        return value

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` (already coerced), or None."""
        s = self.spec
        if self.dynamic:
            if not isinstance(value, typing.get_args(self.kind)) or isinstance(value, bool):
                return "of type " + " or ".join(t.__name__ for t in typing.get_args(self.kind))
            values: Sequence[Any] = [value]
        elif self.element is not None:
            if not isinstance(value, list) or not all(_is(v, self.element) for v in value):
                return f"a list of {self.element.__name__}"
            if s.length is not None and len(value) != s.length:
                return f"{s.length} values"
            values = value
        else:
            if not _is(value, self.kind):
                return f"of type {self.kind.__name__}"
            values = [value]
        for v in values:
            if isinstance(v, float) and not math.isfinite(v):
                return "a finite number" + (f" {s.allowed()}" if s.range else "")
            if s.range is not None and isinstance(v, (int, float)) and not s.range[0] <= v <= s.range[1]:
                return s.allowed()
            if isinstance(v, str):
                bad = ((s.choices and v not in s.choices) or (s.required and not v)
                       or (s.pattern and v and not re.fullmatch(s.pattern, v))
                       or (s.text and text_problem(v) is not None))
                if bad:
                    return s.allowed()
        return None

    def descriptor(self) -> ParameterDescriptor:
        s = self.spec
        d = ParameterDescriptor(description=s.description, read_only=s.read_only, dynamic_typing=self.dynamic)
        ros_type = self.ros_type()
        if ros_type is not None:
            d.type = ros_type.value
        base = self.element or self.kind
        if s.range is not None and base is float:
            d.floating_point_range = [FloatingPointRange(from_value=float(s.range[0]), to_value=float(s.range[1]))]
        elif s.range is not None and base is int:
            d.integer_range = [IntegerRange(from_value=int(s.range[0]), to_value=int(s.range[1]))]
        constraints = [c for c in (s.allowed(),) if c != "any value"]
        d.additional_constraints = "; ".join(constraints)
        return d

    def ros_value(self, value: Any) -> Any:
        """What rclpy stores: an empty string list is declared as [""] (rclpy cannot type [])."""
        if self.element is str and not value:
            return [""]
        return value


def _is(value: Any, kind: type) -> bool:
    if kind is not bool and isinstance(value, bool):
        return False
    return isinstance(value, kind)


P = TypeVar("P", bound="NodeParams")


@dataclass
class NodeParams:
    """Base of every node's parameter dataclass. Override `check()` for rules across fields."""

    @classmethod
    def fields_(cls) -> list[Field]:
        hints = typing.get_type_hints(cls)
        out = []
        for f in fields(cls):
            if "param" not in f.metadata:
                continue
            default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc,operator]
            out.append(Field(f.name, default, hints[f.name], f.metadata["param"]))
        return out

    @classmethod
    def from_values(cls: type[P], values: dict[str, Any], node: str) -> P:
        """Validate `values` (missing ones take their defaults) through the dataclass; ParameterError if any is bad."""
        known = {f.name: f for f in cls.fields_()}
        coerced = {}
        for name, f in known.items():
            value = f.coerce(values[name]) if name in values else f.default
            why = f.problem(value)
            if why is not None:
                raise ParameterError(node, name, values.get(name, value), why)
            coerced[name] = value
        params = cls(**coerced)
        try:
            params.check()
        except Invalid as exc:
            raise ParameterError(node, exc.name, getattr(params, exc.name), exc.allowed) from None
        return params

    def check(self) -> None:
        """Rules across fields; raise `Invalid(name, allowed)`."""

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in self.fields_()}


OnChange = Callable[[P, P, set[str]], "str | None"]


def _given(node: Node, names: typing.Iterable[str]) -> dict[str, Any]:
    """The values the launch file, `-p` or a YAML file gave for `names`, whatever their type.

    rclpy checks an override only against the declared type and range, raising its own exception;
    we want `rate_hz: 100` (an int) converted and a bad value reported as one error naming the
    node. So each name is first declared dynamically typed and without a range (which accepts any
    override), read and undeclared, all through rclpy's public API; the typed declaration follows.
    """
    given = {}
    for name in names:
        param = node.declare_parameter(name, None, ParameterDescriptor(dynamic_typing=True))
        if param.type_ != Parameter.Type.NOT_SET:
            given[name] = param.value
        node.undeclare_parameter(name)
    return given


class NodeParameters(Generic[P]):
    """Declares `cls`'s fields on `node`; `.values` is the current, validated dataclass.

    `on_change(old, new, names)` is called for every accepted run-time set of changeable
    parameters (`names`: those set, even to their current value — setting `stall_now_s` twice
    stalls twice), before the values are stored: it applies them and returns None, or returns the
    reason it refuses (rclpy then keeps the old values and the caller gets the reason).
    """

    def __init__(self, node: Node, cls: type[P], on_change: OnChange[P] | None = None) -> None:
        self._node = node
        self._cls = cls
        self._fields = {f.name: f for f in cls.fields_()}
        self._on_change = on_change
        self.values: P = cls.from_values(_given(node, self._fields), node.get_fully_qualified_name())
        for name, f in self._fields.items():
            node.declare_parameter(name, f.ros_value(getattr(self.values, name)), f.descriptor(),
                                   ignore_override=True)
        node.add_pre_set_parameters_callback(self._coerce)
        node.add_on_set_parameters_callback(self._on_set)

    def _coerce(self, params: list[Parameter[Any]]) -> list[Parameter[Any]]:
        out = []
        for p in params:
            f = self._fields.get(p.name)
            if f is not None and not f.dynamic and p.type_ != Parameter.Type.NOT_SET:
                p = Parameter(p.name, value=f.ros_value(f.coerce(p.value)))
            out.append(p)
        return out

    def _on_set(self, params: list[Parameter[Any]]) -> SetParametersResult:
        changes = {}
        for p in params:
            f = self._fields.get(p.name)
            if f is None:
                continue
            value = f.coerce(p.value)
            why = f.problem(value)
            if why is not None:
                return SetParametersResult(successful=False, reason=f"{p.name} = {p.value!r} is not allowed: {why}")
            changes[p.name] = value
        if not changes:
            return SetParametersResult(successful=True)
        old = self.values
        new = replace(old, **changes)
        try:
            new.check()
        except Invalid as exc:
            return SetParametersResult(successful=False, reason=f"{exc.name} = {getattr(new, exc.name)!r} is "
                                                                f"not allowed: {exc.allowed}")
        if self._on_change is not None:
            reason = self._on_change(old, new, set(changes))
            if reason:
                return SetParametersResult(successful=False, reason=reason)
        self.values = new
        return SetParametersResult(successful=True)
