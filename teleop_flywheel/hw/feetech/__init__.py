"""Feetech STS3215 servos: the pure protocol codec, the control table as data, the pyserial bus
and the simulated arm on a pseudo-terminal (product: newcomers run it)."""
