"""An in-process client of the recorder: its Trigger services and episode parameters.

What a human's console does over DDS, for the programs that drive a session themselves (the
demo's scripted operator, evaluation protocol runs). Every call waits for its reply with a
deadline and raises `RecorderCallError` naming the service and the recorder's reason.
"""
from __future__ import annotations

import time
from typing import Any

import rclpy
from rcl_interfaces.srv import SetParameters
from rclpy.client import Client
from rclpy.parameter import Parameter
from std_srvs.srv import Trigger

from teleop_flywheel.core.errors import FlywheelError
from teleop_flywheel.core.topics import RECORDER_NODE


class RecorderCallError(FlywheelError, RuntimeError):
    pass


class RecorderClient:
    def __init__(self, context: Any, name: str = "recorder_client", recorder: str = RECORDER_NODE) -> None:
        self.recorder = recorder
        self.node = rclpy.create_node(name, context=context)
        self._trigger: dict[str, Client] = {a: self.node.create_client(Trigger, f"{recorder}/{a}")
                                            for a in ("start", "stop", "discard", "keep")}
        self._params: Client = self.node.create_client(SetParameters, f"{recorder}/set_parameters")

    def _wait(self, future: Any, what: str, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while not future.done():
            if time.monotonic() > deadline:
                raise RecorderCallError(f"no reply from {what} within {timeout:.0f} s")
            time.sleep(0.02)
        return future.result()

    def ready(self, timeout: float) -> bool:
        return all(c.wait_for_service(timeout_sec=timeout) for c in [*self._trigger.values(), self._params])

    def call(self, action: str) -> str:
        """`start`, `stop`, `discard` or `keep`; returns the recorder's message (the bag name for stop)."""
        what = f"{self.recorder}/{action}"
        res = self._wait(self._trigger[action].call_async(Trigger.Request()), what)
        if not res.success:
            raise RecorderCallError(f"{what} failed: {res.message}")
        return str(res.message)

    def set(self, **values: Any) -> None:
        """Set episode parameters (outcome, failure_label, condition, ...)."""
        req = SetParameters.Request(parameters=[Parameter(k, value=v).to_parameter_msg() for k, v in values.items()])
        res = self._wait(self._params.call_async(req), f"{self.recorder}/set_parameters")
        bad = [r.reason for r in res.results if not r.successful]
        if bad:
            raise RecorderCallError(f"{self.recorder} refused {values}: {bad}")
