"""Each step of a follower tick alone (`rig_cpu.py --part steps`): the driver's function for it
and the floor's way of doing the same, called once per period, less an empty period's CPU."""
from __future__ import annotations

import os
import select
import signal
import sys
import time
from typing import Any

from cpu_accounting import spread
from rig_floor import GOAL_ADDR, GOAL_SIZE, IDS, NAMES, READ_ADDR, READ_SIZE, ros_env, start_sim


def _paced_cpu_us(step: Any, period_s: float, n: int) -> float:
    """CPU microseconds (this thread's clock) of `step` called once per period, as a bus loop calls
    it — so with caches as cold as there — less those of an empty period (the sleep's own cost)."""
    def run(fn: Any) -> float:
        fn()
        t0 = time.thread_time_ns()
        for _ in range(n):
            fn()
            time.sleep(period_s)
        return (time.thread_time_ns() - t0) / n / 1e3

    return run(step) - run(lambda: None)


def measure_steps(rate_hz: float, repeats: int, n: int = 200) -> dict[str, Any]:
    """The follower driver's steps (the project's functions it calls) beside the floor's way of
    doing the same, each alone (see `_paced_cpu_us`)."""
    import array

    import rclpy
    import serial
    from sensor_msgs.msg import JointState

    from teleop_flywheel.core.calibration import RAD_PER_STEP as CAL_RAD_PER_STEP
    from teleop_flywheel.core.calibration import load_calibration, sim_calibration_file
    from teleop_flywheel.hw.feetech import codec
    from teleop_flywheel.hw.feetech.bus import FeetechBus
    from teleop_flywheel.ros.nodes.common import STREAM_QOS, joint_state

    cal = load_calibration(sim_calibration_file("follower"))
    joints = cal.joints
    raw = [2048 + 100 * i for i in range(6)]
    rad = [float(j.raw_to_rad(r)) for j, r in zip(joints, raw, strict=True)]
    words = [r | (r << 16) | (r << 32) for r in raw]  # position, velocity, load of one servo, as read
    env = ros_env()
    os.environ.update(env)
    rclpy.init()
    node = rclpy.create_node("rig_cpu_steps")
    pub = node.create_publisher(JointState, "/rig_cpu_steps/joint_states", STREAM_QOS)
    reused = JointState()
    reused.name = list(NAMES)
    sims = [start_sim("follower", env) for _ in range(2)]  # the driver's way on one, the floor's on the other
    bus = FeetechBus(sims[0][1])
    bus.open()
    line = serial.Serial(sims[1][1], 1_000_000, timeout=0)
    fd = line.fileno()
    read_packet = codec.sync_read(READ_ADDR, READ_SIZE, IDS)
    goal = dict.fromkeys(IDS, 2048)

    def bare_read() -> None:
        os.write(fd, read_packet)
        reply = b""
        deadline = time.monotonic() + 0.02
        while len(reply) < 72 and (wait := deadline - time.monotonic()) > 0:
            if select.select([fd], [], [], wait)[0]:
                reply += os.read(fd, 4096)
        for k, sid in enumerate(IDS):
            status = reply[k * 12:(k + 1) * 12]
            if status[:3] != bytes((0xFF, 0xFF, sid)) or status[11] != codec.checksum(status[2:11]):
                break

    def bare_message() -> None:
        reused.header.stamp.sec, reused.header.stamp.nanosec = divmod(time.time_ns(), 1_000_000_000)
        reused.position, reused.velocity, reused.effort = (array.array("d", rad), array.array("d", rad),
                                                           array.array("d", rad))

    steps = {  # step: (the driver's way, the floor's way)
        "sync read 56/6 of ids 1-6 (FeetechBus.sync_read | write, select, read, header and checksum checks)":
            (lambda: bus.sync_read(READ_ADDR, READ_SIZE, IDS), bare_read),
        "decode position, velocity, load x6 (codec.from_sign_magnitude x18 | inline bit operations)":
            (lambda: [codec.from_sign_magnitude((w >> s) & 0xFFFF, 15) for w in words for s in (0, 16, 32)],
             lambda: [((w >> s) & 0x7FFF) * (-1 if (w >> s) & 0x8000 else 1) for w in words for s in (0, 16, 32)]),
        "steps to radians x6 (JointCalibration.raw_to_rad, numpy | float arithmetic)":
            (lambda: [float(j.raw_to_rad(r)) for j, r in zip(joints, raw, strict=True)],
             lambda: [j.sign * (r - j.mid) * CAL_RAD_PER_STEP for j, r in zip(joints, raw, strict=True)]),
        "JointState for the sample (common.joint_state: a new message, stamp via clock | one message reused, "
        "array('d') fields)": (lambda: joint_state(NAMES, rad, time.monotonic_ns(), rad, rad, frame_id="follower"),
                               bare_message),
        "goal to steps x6 (ArmCalibration.rad_to_raw, numpy | float arithmetic, clamped)":
            (lambda: cal.rad_to_raw(rad),
             lambda: [min(j.range_max, max(j.range_min, round(j.sign * r / CAL_RAD_PER_STEP + j.mid)))
                      for j, r in zip(joints, rad, strict=True)]),
        "sync write Goal_Position (FeetechBus.sync_write_register | codec.sync_write, os.write)":
            (lambda: bus.sync_write_register("Goal_Position", goal),
             lambda: os.write(fd, codec.sync_write(GOAL_ADDR, GOAL_SIZE, goal))),
        "publish (the same call in both)": (lambda: pub.publish(reused), lambda: pub.publish(reused)),
    }
    period = 1.0 / rate_hz
    out: dict[str, Any] = {}
    try:
        time.sleep(2.0)  # DDS discovery of this new participant settles first
        for name, (driver_way, floor_way) in steps.items():
            driver_us, floor_us = [], []
            for _ in range(repeats):  # interleaved: a disturbance hits both ways alike
                driver_us.append(_paced_cpu_us(driver_way, period, n))
                floor_us.append(_paced_cpu_us(floor_way, period, n))
            out[name] = {"driver_us": spread(driver_us), "floor_us": spread(floor_us)}
            print(name, out[name], file=sys.stderr, flush=True)
    finally:
        bus.close()
        line.close()
        for sim, _port in sims:
            sim.send_signal(signal.SIGINT)
            sim.wait(10)
        node.destroy_node()
        rclpy.shutdown()
    return {"what": f"CPU us of each step of a follower tick called alone once per {period * 1e3:g} ms period "
                    f"({n} periods, less an empty period's cost), the driver's way | the floor's way, {repeats} "
                    "interleaved runs each; publish, the same call both ways, shows the noise", "steps": out}
