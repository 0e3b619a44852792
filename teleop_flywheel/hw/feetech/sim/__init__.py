"""The simulated SO-101 on a pseudo-terminal (product: newcomers run it, the tests drive the real
serial code through it): `arm` (six servos answering the real protocol, the injectable faults,
the world file), `servo` (one STS3215's control table, shaft, motor and protection; the arm's
travel and gravity; the scripted human and the operator's `Hand`) and `adapter` (when bytes
cross the USB-serial adapter); the `sim-bus` verb that serves it is `cli/verbs/sim_bus.py`."""
from teleop_flywheel.hw.feetech.sim.arm import FAULT_FORMS, WORLD_POLL_S, Faults, SimulatedArm, parse_fault
from teleop_flywheel.hw.feetech.sim.servo import Hand

__all__ = ["FAULT_FORMS", "WORLD_POLL_S", "Faults", "Hand", "SimulatedArm", "parse_fault"]
