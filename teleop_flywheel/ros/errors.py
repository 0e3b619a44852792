"""Every error the ROS floor raises on purpose: a node's parameters or parameter file, a policy that
cannot load, a service that does not answer, a session that cannot start. Callers catch them by
name without importing the module that raised them. Each is a `FlywheelError` whose message names
the node, service or file and why, with a `fix` where one is known.

`params.Invalid` stays in `ros/params.py`: a node's `check()` raises it and the parameter machinery
there catches it and raises `ParameterError` with the node's name; no user ever sees it.
"""
from __future__ import annotations

from teleop_flywheel.core.errors import FlywheelError


class ParameterError(FlywheelError, ValueError):
    """A parameter value a node cannot run with; names the node, the parameter, the value and what is allowed."""

    def __init__(self, node: str, name: str, value: object, allowed: str) -> None:
        super().__init__(f"{node}: parameter {name} = {value!r} is not allowed: {allowed}")
        self.node, self.name, self.value, self.allowed = node, name, value, allowed


class ParamFileError(FlywheelError, ValueError):
    """A ROS 2 parameter file the session cannot use; names the file."""

    fix = "a parameter file maps node: {ros__parameters: {...}}; config/params.yaml lists every parameter"


class PolicyLoadError(FlywheelError, ValueError):
    """The policy named by the parameters cannot be loaded; says which and why."""


class RecorderCallError(FlywheelError, RuntimeError):
    """The recorder did not answer a call in time, or refused it; names the service and the
    recorder's reason."""


class InterfaceError(FlywheelError, RuntimeError):
    """A node's service did not answer, or refused; the message names the service and why."""


class SessionError(FlywheelError, RuntimeError):
    """A session could not start; the message says which part and why."""
