"""`teleop-flywheel sim-bus`: serve a simulated SO-101 arm on a pseudo-terminal.

Prints the pty device path as the first line of standard output (so scripts can read it),
optionally points `--link` at it, and serves until SIGINT/SIGTERM. It asks for the arm drivers'
scheduling (`--priority`, SCHED_FIFO 50 and locked memory where permitted: `core.priority`) for
all its threads: it stands for servos, which answer on time however busy the host is, so a
loaded machine must delay the driver under test, never the hardware it talks to.
"""
from __future__ import annotations

import argparse
import sys
import threading

from teleop_flywheel.core.calibration import load_calibration
from teleop_flywheel.core.errors import UsageError
from teleop_flywheel.core.priority import RT_PRIORITY, request_realtime
from teleop_flywheel.core.signals import SignalStop
from teleop_flywheel.core.so101 import BAUD_RATE
from teleop_flywheel.hw.feetech.sim.adapter import ADAPTERS
from teleop_flywheel.hw.feetech.sim.arm import FAULT_FORMS, HUMAN_MOTIONS, Faults, SimulatedArm, parse_fault
from teleop_flywheel.hw.feetech.sim.servo import YIELDING_FINGER


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arm", choices=("leader", "follower"), required=True, help="which arm to simulate")
    parser.add_argument("--baud", type=int, default=BAUD_RATE, help="baud rate for wire-time emulation")
    parser.add_argument("--link", default=None, help="make this path a symlink to the pty (stable port name)")
    parser.add_argument("--fault", action="append", default=[], metavar="SPEC",
                        help=f"inject a fault (repeatable; T = seconds after start): {FAULT_FORMS}")
    parser.add_argument("--adapter", choices=tuple(ADAPTERS), default="pty",
                        help="USB-serial adapter timing to emulate: "
                             + "; ".join(f"{name}: {a.description}" for name, a in ADAPTERS.items()))
    parser.add_argument("--return-delay", type=int, default=0, help="Return_Delay_Time register (2 us units)")
    parser.add_argument("--no-wire-time", action="store_true", help="answer instantly (no wire-time emulation)")
    parser.add_argument("--seed", type=int, default=0, help="random seed for probabilistic faults")
    parser.add_argument("--calibration", metavar="FILE",
                        help="boot with the EEPROM this calibration implies (homing offsets, position limits); "
                             "default: the shipped simulator calibration of --arm")
    parser.add_argument("--uncalibrated", action="store_true",
                        help="boot as delivered: homing offsets 0, limits 0..4095 (for calibrate)")
    parser.add_argument("--human", action="store_true",
                        help="the scripted human moves this arm while its torque is off, sweeping every joint "
                             "through most of its travel as calibrate asks (default: a leader only, moved as at "
                             "work: see --human-motion)")
    parser.add_argument("--human-motion", choices=HUMAN_MOTIONS, default=None,
                        help="how the scripted human moves: reach (an operator at work: moves of 0.5-1 s with "
                             "pauses, the gripper closing and opening; a leader's default) or sinusoid (every joint "
                             "slowly through most of its travel, never still: calibrate's sweep, the default with "
                             "--human, and the hard case for timing a camera from its images)")
    parser.add_argument("--hand", action="store_true",
                        help="leader: the scripted human's finger holds the trigger as the modelled hand, so force "
                             "feedback reaches it; it yields to a rendered grasp (0.1 of the servo's maximum torque, "
                             "against the 0.15 feedback ceiling); the --world file's \"squeeze\": true shuts it")
    parser.add_argument("--grip-object", type=float, metavar="STEPS",
                        help="an object between the jaws: the gripper stalls when it closes to this shaft position")
    parser.add_argument("--world", metavar="FILE",
                        help="JSON re-read whenever it changes: joint_noise_rad = encoder noise (std, rad) on "
                             "every position reading; squeeze = true: the scripted human shuts a leader's trigger")
    parser.add_argument("--factory-new", action="store_true",
                        help="one servo straight from the box (id 1, factory baud), for setup-motors")
    parser.add_argument("--priority", type=int, default=RT_PRIORITY, choices=range(0, 100), metavar="0-99",
                        help=f"SCHED_FIFO priority of every thread, with memory locked, where permitted (default "
                             f"{RT_PRIORITY}, as the arm drivers; 0: the normal policy)")


def run(args: argparse.Namespace) -> int:
    if args.hand and args.arm != "leader":
        raise UsageError("--hand holds a leader's trigger", where=f"--arm {args.arm}",
                         fix="give --hand with --arm leader")
    faults = Faults()
    try:
        for spec in args.fault:
            parse_fault(spec, faults)
    except ValueError as exc:
        raise UsageError(str(exc), where="--fault", fix="see the --fault forms in --help") from exc
    stop = threading.Event()
    with SignalStop(stop):
        return _serve(args, faults, stop)


def _serve(args: argparse.Namespace, faults: Faults, stop: threading.Event) -> int:
    calibration = load_calibration(args.calibration) if args.calibration else None  # CalibrationError: exit 2
    arm = SimulatedArm(args.arm, args.baud, not args.no_wire_time, args.return_delay, faults, args.link, args.seed,
                       calibration=calibration, human=True if args.human else None, factory_new=args.factory_new,
                       uncalibrated=args.uncalibrated, grip_object=args.grip_object,
                       finger=YIELDING_FINGER if args.hand else None,
                       adapter_name=args.adapter, world=args.world, human_motion=args.human_motion)
    # Before the serving threads start: they inherit it.
    request_realtime(args.priority, whole_process=True,
                     say=lambda message: print(f"sim-bus: {message}", file=sys.stderr, flush=True))
    try:
        arm.start()
    except OSError as exc:
        raise UsageError(
            f"cannot create the pseudo-terminal or its link ({exc.strerror or exc})",
            where=str(args.link or "/dev/ptmx"),
            fix="choose a --link path in a folder you can write",
        ) from exc
    print(arm.port, flush=True)
    servos = "1 factory-new STS3215 (id 1)" if args.factory_new else "6 x STS3215, ids 1-6"
    print(f"sim-bus: {args.arm} arm ({servos}) on {arm.port}"
          + (f" -> {args.link}" if args.link else "") + f" behind {arm.adapter.description}; Ctrl-C to stop",
          file=sys.stderr, flush=True)
    while not stop.is_set():
        stop.wait(0.2)
    arm.stop()
    return 0
