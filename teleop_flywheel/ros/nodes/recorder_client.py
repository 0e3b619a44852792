"""An in-process client of the recorder: its Trigger services, episode labels and parameters.

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

from teleop_flywheel.core.topics import RECORDER_LABEL, RECORDER_NODE
from teleop_flywheel.ros.errors import RecorderCallError


class RecorderClient:
    def __init__(self, context: Any, name: str = "recorder_client", recorder: str = RECORDER_NODE) -> None:
        self.recorder = recorder
        self.node = rclpy.create_node(name, context=context)
        self._trigger: dict[str, Client] = {a: self.node.create_client(Trigger, f"{recorder}/{a}")
                                            for a in ("start", "stop", "discard", "keep")}
        self._params: Client = self.node.create_client(SetParameters, f"{recorder}/set_parameters")
        self._labels: Client = self.node.create_client(SetParameters, f"{recorder}/{RECORDER_LABEL}")

    def _wait(self, future: Any, what: str, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while not future.done():
            if time.monotonic() > deadline:
                raise RecorderCallError(f"no reply from {what} within {timeout:.0f} s")
            time.sleep(0.02)
        return future.result()

    def ready(self, timeout: float) -> bool:
        return all(c.wait_for_service(timeout_sec=timeout)
                   for c in [*self._trigger.values(), self._params, self._labels])

    def call(self, action: str) -> str:
        """`start`, `stop`, `discard` or `keep`; returns the recorder's message (the bag name for stop)."""
        what = f"{self.recorder}/{action}"
        res = self._wait(self._trigger[action].call_async(Trigger.Request()), what)
        if not res.success:
            raise RecorderCallError(f"{what} failed: {res.message}")
        return str(res.message)

    def set(self, **values: Any) -> None:
        """Set the recorder's parameters (task, condition, protocol_hash, ...)."""
        self._set(self._params, "set_parameters", values)

    def label(self, **labels: Any) -> None:
        """Say what the episode being recorded was: outcome, attempts, failure_label, machine_check."""
        self._set(self._labels, RECORDER_LABEL, labels)

    def _set(self, client: Client, service: str, values: dict[str, Any]) -> None:
        res = self._wait(client.call_async(named_values(**values)), f"{self.recorder}/{service}")
        bad = refusals(res)
        if bad:
            raise RecorderCallError(f"{self.recorder}/{service} refused {values}: {bad}")


def named_values(**values: Any) -> SetParameters.Request:
    """A SetParameters request: for `set_parameters` and for the recorder's `label_episode`."""
    return SetParameters.Request(parameters=[Parameter(k, value=v).to_parameter_msg() for k, v in values.items()])


def refusals(response: SetParameters.Response) -> list[str]:
    """The reasons of every refused value of a SetParameters reply (empty: all accepted)."""
    return [r.reason or "refused" for r in response.results if not r.successful]
