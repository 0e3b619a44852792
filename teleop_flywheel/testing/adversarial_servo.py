"""Servos that misbehave on purpose, on a real pseudo-terminal: the bus's adversary.

Every reply says which request it answers: the data bytes of a READ/SYNC_READ reply are the
servo's request counter (how many instructions it had received, this one included). A bus
that hands back a stale reply therefore hands back a visibly old counter, and a torn sync
read shows counters from different exchanges. `latest[servo_id]` is the counter of the newest
regular (non-fence) read each servo answered or ignored, the only value a correct bus may
return for it.

Misbehaviours, chosen per request by `plan(servo_id, counter) -> Behaviour`:
ok, silent (no reply), late (reply after `late_s`, keeping the servo's replies in order, as a
busy servo does), duplicate (the reply twice, back to back in one write: a wire delivers the copy
right behind the original, whereas two writes from this thread could be a GIL switch — ms on a
loaded machine — apart, a late reply rather than a duplicate), truncated (its first bytes only), overlong (a
length byte too large), wrong_id (the reply from another id), error (valid, with error bits),
garbage (random bytes, then the valid reply). `noise_on()` floods the line with random bytes.
Replies leave at the emulated 1 Mbaud wire rate, like the simulator's.
"""
from __future__ import annotations

import enum
import heapq
import os
import random
import select
import threading
import time
import tty
from collections.abc import Callable

from teleop_flywheel.hw.feetech import codec as p
from teleop_flywheel.hw.feetech.bus import FENCE_SIZES


class Behaviour(enum.Enum):
    OK = "ok"
    SILENT = "silent"
    LATE = "late"
    DUPLICATE = "duplicate"
    TRUNCATED = "truncated"
    OVERLONG = "overlong"
    WRONG_ID = "wrong_id"
    ERROR = "error"
    GARBAGE = "garbage"


Plan = Callable[[int, int], Behaviour]


class AdversarialServos:
    """Servos `ids` behind a pty (`.port`); use as a context manager."""

    def __init__(self, ids: tuple[int, ...] = (1, 2, 3, 4, 5, 6), plan: Plan | None = None, late_s: float = 0.03,
                 seed: int = 0, byte_s: float = 10e-6) -> None:
        self.ids = ids
        self.plan: Plan = plan or (lambda _sid, _n: Behaviour.OK)
        self.late_s = late_s
        self.byte_s = byte_s
        self.counters = {sid: 0 for sid in ids}
        self.latest = {sid: 0 for sid in ids}
        self._rng = random.Random(seed)
        self._queue: list[tuple[float, int, bytes]] = []
        self._order = 0
        self._last_out = {sid: 0.0 for sid in ids}
        self._line_free = 0.0
        self._heard = 0.0  # when the instruction being answered finished crossing the wire
        self._noise = threading.Event()
        self._stop = threading.Event()
        self._master, slave = os.openpty()
        tty.setraw(slave)
        os.set_blocking(self._master, False)  # a bus that stops reading must not block the servos
        self.port = os.ttyname(slave)
        self._slave = slave
        self._thread = threading.Thread(target=self._serve, name="adversarial-servos", daemon=True)

    def __enter__(self) -> "AdversarialServos":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        os.close(self._master)
        os.close(self._slave)

    def noise_on(self) -> None:
        self._noise.set()

    def noise_off(self) -> None:
        self._noise.clear()

    def _reply(self, sid: int, size: int) -> bytes:
        n = self.counters[sid]
        return p.status(sid, 0, (n % (1 << (8 * size))).to_bytes(size, "little") if size else b"")

    def _schedule(self, sid: int, packet: bytes, delay: float) -> None:
        """Queue `packet`; a pty delivers instantly, so the wire time of the instruction (which
        a real servo waits out before it can answer) and of the reply are emulated here."""
        # A servo answers in order: a late reply delays everything it sends after it. Replies on
        # time share the half-duplex line one after another, as on the real bus.
        at = max(self._heard + delay, self._last_out[sid], 0.0 if delay else self._line_free)
        at += len(packet) * self.byte_s
        self._last_out[sid] = at
        if not delay:
            self._line_free = at
        self._order += 1
        heapq.heappush(self._queue, (at, self._order, packet))

    def _answer(self, sid: int, size: int) -> None:
        reply = self._reply(sid, size)
        behaviour = self.plan(sid, self.counters[sid])
        if behaviour is Behaviour.SILENT:
            return
        if behaviour is Behaviour.LATE:
            self._schedule(sid, reply, self.late_s)
        elif behaviour is Behaviour.DUPLICATE:  # back to back, as a wire carries them: one write
            self._schedule(sid, reply + reply, 0.0)
        elif behaviour is Behaviour.TRUNCATED:
            self._schedule(sid, reply[: self._rng.randrange(1, len(reply))], 0.0)
        elif behaviour is Behaviour.OVERLONG:
            self._schedule(sid, reply[:3] + bytes((min(250, reply[3] + self._rng.randrange(1, 40)),)) + reply[4:], 0.0)
        elif behaviour is Behaviour.WRONG_ID:
            other = self.ids[(self.ids.index(sid) + 1) % len(self.ids)]
            body = bytes((other,)) + reply[3:-1]
            self._schedule(sid, p.HEADER + body + bytes((p.checksum(body),)), 0.0)
        elif behaviour is Behaviour.ERROR:
            self._schedule(sid, p.status(sid, 0x20, reply[5:-1]), 0.0)
        elif behaviour is Behaviour.GARBAGE:
            self._schedule(sid, self._rng.randbytes(self._rng.randrange(1, 20)) + reply, 0.0)
        else:
            self._schedule(sid, reply, 0.0)

    def _handle(self, pkt: p.Instruction) -> None:
        if pkt.inst == p.SYNC_READ and len(pkt.params) >= 2:
            address, size, targets = pkt.params[0], pkt.params[1], [s for s in pkt.params[2:] if s in self.ids]
        elif pkt.inst == p.READ and len(pkt.params) == 2 and pkt.servo_id in self.ids:
            address, size, targets = pkt.params[0], pkt.params[1], [pkt.servo_id]
        elif pkt.inst in (p.PING, p.WRITE) and pkt.servo_id in self.ids:
            address, size, targets = -1, 0, [pkt.servo_id]
        else:
            return
        for sid in targets:
            self.counters[sid] += 1
            if size not in FENCE_SIZES and address >= 0:
                self.latest[sid] = self.counters[sid]
            self._answer(sid, size)

    def _serve(self) -> None:
        parser = p.InstructionParser()
        while not self._stop.is_set():
            wait = 0.002
            if self._queue:
                wait = max(0.0, min(wait, self._queue[0][0] - time.monotonic()))
            ready, _, _ = select.select([self._master], [], [], wait)
            if ready:
                try:
                    parser.feed(os.read(self._master, 4096))
                except BlockingIOError:
                    pass
                while (pkt := parser.next()) is not None:
                    self._heard = time.monotonic() + (len(pkt.params) + 6) * self.byte_s
                    self._handle(pkt)
            due = []
            while self._queue and self._queue[0][0] <= time.monotonic():
                due.append(heapq.heappop(self._queue)[2])
            if due:  # bytes due together leave together: between two writes the bus's thread may run
                self._send(b"".join(due))
            if self._noise.is_set():
                self._send(self._rng.randbytes(64))

    def _send(self, data: bytes) -> None:
        try:
            os.write(self._master, data)
        except BlockingIOError:
            pass  # the line is full: bytes lost, as on a real bus
