"""Clients of the graph nodes' ROS interfaces, for session logic in the supervisor's process.

The session's nodes run in their own processes; what the demo and the evaluation walk need from
them goes over their ROS interfaces, as it would from any other machine on the graph:

- policy: `/policy/reset` (std_srvs/Trigger: start the policy's episode over from the current
  state) and its `policy`, `policy_args`, `checkpoint_id` parameters, set together through
  `/policy/set_parameters_atomically` (the node loads the new policy or refuses with a reason,
  the running one unchanged);
- recorder: `/recorder/status` (std_msgs/String JSON, latched) for `last_saved` and the topics it
  has found; its Trigger services and episode parameters through `nodes.recorder_client`;
- any node's parameters (`/camera_front/set_parameters` … `stall_now_s`).

Every call waits for its reply with a deadline and raises `InterfaceError` naming the service
and, for a refusal, the node's reason.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from rcl_interfaces.srv import GetParameters, SetParameters, SetParametersAtomically
from rclpy.client import Client
from rclpy.node import Node
from rclpy.parameter import Parameter, parameter_value_to_python
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String
from std_srvs.srv import Trigger

from teleop_flywheel.core.topics import RECORDER_NODE, RECORDER_STATUS
from teleop_flywheel.ros.errors import InterfaceError

POLICY_NODE = "/policy"
POLICY_RESET = "reset"
CALL_TIMEOUT_S = 20.0
# A swap loads the policy before it answers: LeRobot and torch imported in the node's process for the
# first checkpoint take tens of seconds on a loaded 2-core machine.
LOAD_TIMEOUT_S = 180.0
STATUS_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.TRANSIENT_LOCAL)


def call(client: Any, request: Any, timeout_s: float = CALL_TIMEOUT_S) -> Any:
    """The reply of one service call (the client's node must be spinning elsewhere)."""
    deadline = time.monotonic() + timeout_s
    if not client.wait_for_service(timeout_sec=timeout_s):
        raise InterfaceError(f"{client.srv_name}: service not available after {timeout_s:.0f} s")
    future = client.call_async(request)
    while not future.done():
        if time.monotonic() > deadline:
            client.remove_pending_request(future)
            raise InterfaceError(f"{client.srv_name}: no reply within {timeout_s:.0f} s")
        time.sleep(0.01)
    result = future.result()
    if result is None:
        raise InterfaceError(f"{client.srv_name}: the call failed ({future.exception()})")
    return result


def trigger(client: Any, timeout_s: float = CALL_TIMEOUT_S) -> str:
    """Call a std_srvs/Trigger service; its message, or InterfaceError with the node's reason."""
    res = call(client, Trigger.Request(), timeout_s)
    if not res.success:
        raise InterfaceError(f"{client.srv_name} failed: {res.message}")
    return str(res.message)


class ParameterClient:
    """Get and set one node's parameters over its standard parameter services."""

    def __init__(self, node: Node, target: str) -> None:
        self.target = target
        self._get: Client = node.create_client(GetParameters, f"{target}/get_parameters")
        self._set: Client = node.create_client(SetParameters, f"{target}/set_parameters")
        self._set_atomic: Client = node.create_client(SetParametersAtomically, f"{target}/set_parameters_atomically")

    def get(self, *names: str) -> dict[str, Any]:
        res = call(self._get, GetParameters.Request(names=list(names)))
        return {n: parameter_value_to_python(v) for n, v in zip(names, res.values, strict=True)}

    def set(self, atomically: bool = False, timeout_s: float = CALL_TIMEOUT_S, **values: Any) -> None:
        """Set `values`; all together (one callback, all or nothing) with `atomically`. A refusal
        raises InterfaceError with the node's reasons."""
        params = [Parameter(k, value=v).to_parameter_msg() for k, v in values.items()]
        if atomically:
            res = call(self._set_atomic, SetParametersAtomically.Request(parameters=params), timeout_s)
            reasons = [] if res.result.successful else [res.result.reason or "refused"]
        else:
            res = call(self._set, SetParameters.Request(parameters=params), timeout_s)
            reasons = [r.reason or "refused" for r in res.results if not r.successful]
        if reasons:
            raise InterfaceError("; ".join(reasons))


class PolicyClient:
    """The policy node: restart its episode, swap what it runs."""

    def __init__(self, node: Node, policy: str = POLICY_NODE) -> None:
        self.params = ParameterClient(node, policy)
        self._reset: Client = node.create_client(Trigger, f"{policy}/{POLICY_RESET}")

    def reset(self) -> None:
        trigger(self._reset)

    def current(self) -> dict[str, Any]:
        return self.params.get("policy", "policy_args", "checkpoint_id")

    def swap(self, **values: str) -> None:
        """Run another policy/checkpoint (any of policy, policy_args, checkpoint_id), all at once;
        InterfaceError with the node's reason if it cannot load (the running policy stays)."""
        self.params.set(atomically=True, timeout_s=LOAD_TIMEOUT_S, **values)


class RecorderStatus:
    """The recorder's latched status (JSON), as it last published it."""

    def __init__(self, node: Node, recorder: str = RECORDER_NODE) -> None:
        self.topic = f"{recorder}/{RECORDER_STATUS}"
        self._latest: dict[str, Any] | None = None
        self._changed = threading.Condition()
        node.create_subscription(String, self.topic, self._on_status, STATUS_QOS)

    def _on_status(self, msg: String) -> None:
        with self._changed:
            self._latest = json.loads(msg.data)
            self._changed.notify_all()

    @property
    def latest(self) -> dict[str, Any] | None:
        return self._latest

    def wait(self, ok: Callable[[dict[str, Any]], bool], timeout_s: float, what: str) -> dict[str, Any]:
        """The first status (the current one included) for which `ok` holds, else InterfaceError."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._latest is None or not ok(self._latest):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise InterfaceError(f"{self.topic}: {what} not seen within {timeout_s:.0f} s")
                self._changed.wait(left)
            return self._latest

    def last_saved(self) -> str:
        return str((self._latest or {}).get("last_saved", ""))

    def saved_after(self, before: str, timeout_s: float = CALL_TIMEOUT_S) -> str:
        """The bag the recorder saved after `before` was its last one (bags are never reused)."""
        status = self.wait(lambda s: bool(s.get("last_saved")) and s["last_saved"] != before, timeout_s,
                           "a newly saved bag in last_saved")
        return str(status["last_saved"])

    def wait_all_topics(self, timeout_s: float) -> dict[str, Any]:
        """Until the recorder has found every topic it is to record (its `missing_topics` is empty)."""
        return self.wait(lambda s: not s.get("missing_topics"), timeout_s, "every recorded topic found")
