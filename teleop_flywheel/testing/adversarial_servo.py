"""Servos that misbehave on purpose, on a real pseudo-terminal: the bus's adversary.

Every reply says which request it answers: the data bytes of a READ/SYNC_READ reply are the
servo's request counter (how many instructions it had received, this one included). A bus
that hands back a stale reply therefore hands back a visibly old counter, and a torn sync
read shows counters from different exchanges. `latest[servo_id]` is the counter of the newest
read each servo heard (answered or not), the only value a correct bus may return for it. A WRITE
changes `table[servo_id]` unless it is lost (SILENT), so a bus that confirms a write by an older
write's acknowledgement is caught confirming a write the servo never made.

Timing is the wire's: an instruction is acted on once its last byte has crossed the 1 Mbaud line
(`byte_s` a byte) plus the servo's return delay, and replies share one half-duplex line: each
status goes out when it is due and the line is free, takes its wire time, and reaches the bus the
moment its last byte is across (its own write to the pty). A stale status that is due while the
bus waits for an answer goes out first and pushes the real answer back, as on a real line.

Misbehaviours, chosen per status by `plan(servo_id, counter) -> Behaviour`:
ok; silent (no reply, and a lost WRITE is not made); late (the status is due `late_s` later, drawn
once per instruction so a sync read's statuses stay together; later replies do not wait for it);
duplicate (the status, then a copy due `duplicate_s` after it, drawn likewise: the copy may come
after the bus's next request); truncated (its first bytes only); overlong (a length byte too
large); wrong_id (the reply from another id); error (valid, with error bits); garbage (random
bytes, then the valid reply). `noise_on()` floods the line with random bytes.

The adversary keeps its own promises however late its thread runs on a loaded machine: a copy
that would reach the bus more than `duplicate_s[1]` after its original, or a late status more than
`late_s[1]` after its request was heard, is dropped instead of sent. A bus built on those two
bounds must then never be fooled.
"""
from __future__ import annotations

import contextlib
import enum
import heapq
import os
import random
import select
import threading
import time
import tty
from collections.abc import Callable
from dataclasses import dataclass, field

from teleop_flywheel.hw.feetech import codec as p


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
TABLE_SIZE = 128


@dataclass(order=True)
class _Packet:
    """Bytes waiting for the line, in the order they become due."""

    due: float
    seq: int
    data: bytes = field(compare=False)
    not_after: float | None = field(default=None, compare=False)  # dropped if it would arrive later
    original: _Packet | None = field(default=None, compare=False)  # a copy: bounded by when this arrived
    arrived: float | None = field(default=None, compare=False)


class AdversarialServos:
    """Servos `ids` behind a pty (`.port`); use as a context manager.

    late_s, duplicate_s: (shortest, longest) delay of a late status and of a duplicate's copy;
    return_delay_s: how long after an instruction's last byte a servo starts its answer (an
    STS3215 waits Return_Delay_Time × 2 µs: 0.5 ms as delivered, 0 once configured).
    """

    def __init__(self, ids: tuple[int, ...] = (1, 2, 3, 4, 5, 6), plan: Plan | None = None,
                 late_s: tuple[float, float] = (0.03, 0.03), duplicate_s: tuple[float, float] = (0.0, 0.0),
                 return_delay_s: float = 0.0, seed: int = 0, byte_s: float = 10e-6) -> None:
        self.ids = ids
        self.plan: Plan = plan or (lambda _sid, _n: Behaviour.OK)
        self.late_s = late_s
        self.duplicate_s = duplicate_s
        self.return_delay_s = return_delay_s
        self.byte_s = byte_s
        self.counters = {sid: 0 for sid in ids}
        self.latest = {sid: 0 for sid in ids}
        self.table = {sid: bytearray(TABLE_SIZE) for sid in ids}
        self._rng = random.Random(seed)
        self._pending: list[_Packet] = []
        self._line: list[_Packet] = []  # on the wire, in order: each reaches the bus when `arrived`
        self._line_free = 0.0
        self._seq = 0
        self._noise = threading.Event()
        self._stop = threading.Event()
        self._master, slave = os.openpty()
        tty.setraw(slave)
        os.set_blocking(self._master, False)  # a bus that stops reading must not block the servos
        self.port = os.ttyname(slave)
        self._slave = slave
        self._thread = threading.Thread(target=self._serve, name="adversarial-servos", daemon=True)

    def __enter__(self) -> AdversarialServos:
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

    # -- answering ------------------------------------------------------------------------
    def _queue(self, data: bytes, due: float, not_after: float | None = None,
               original: _Packet | None = None) -> _Packet:
        self._seq += 1
        packet = _Packet(due, self._seq, data, not_after, original)
        heapq.heappush(self._pending, packet)
        return packet

    def _answer(self, sid: int, behaviour: Behaviour, reply: bytes, heard: float, late: float,
                copy_after: float) -> None:
        due = heard + self.return_delay_s
        if behaviour is Behaviour.SILENT:
            return
        if behaviour is Behaviour.LATE:
            on_time = due + len(reply) * self.byte_s
            self._queue(reply, due + late, not_after=on_time + self.late_s[1])
        elif behaviour is Behaviour.DUPLICATE:
            original = self._queue(reply, due)
            self._queue(reply, due + copy_after, original=original)
        elif behaviour is Behaviour.TRUNCATED:
            self._queue(reply[: self._rng.randrange(1, len(reply))], due)
        elif behaviour is Behaviour.OVERLONG:
            self._queue(reply[:3] + bytes((min(250, reply[3] + self._rng.randrange(1, 40)),)) + reply[4:], due)
        elif behaviour is Behaviour.WRONG_ID:
            other = self.ids[(self.ids.index(sid) + 1) % len(self.ids)]
            body = bytes((other,)) + reply[3:-1]
            self._queue(p.HEADER + body + bytes((p.checksum(body),)), due)
        elif behaviour is Behaviour.ERROR:
            self._queue(p.status(sid, 0x20, reply[5:-1]), due)
        elif behaviour is Behaviour.GARBAGE:
            self._queue(self._rng.randbytes(self._rng.randrange(1, 20)) + reply, due)
        else:
            self._queue(reply, due)

    def _handle(self, pkt: p.Instruction, heard: float) -> None:
        write: bytes | None = None
        if pkt.inst == p.SYNC_READ and len(pkt.params) >= 2:
            size, targets = pkt.params[1], [s for s in pkt.params[2:] if s in self.ids]
        elif pkt.inst == p.READ and len(pkt.params) == 2 and pkt.servo_id in self.ids:
            size, targets = pkt.params[1], [pkt.servo_id]
        elif pkt.inst in (p.PING, p.WRITE) and pkt.servo_id in self.ids:
            size, targets = -1, [pkt.servo_id]
            write = pkt.params if pkt.inst == p.WRITE and pkt.params else None
        else:
            return
        # One draw per instruction: a late or duplicated sync-read answer moves as one block.
        late = self._rng.uniform(*self.late_s)
        copy_after = self._rng.uniform(*self.duplicate_s)
        for sid in targets:
            self.counters[sid] += 1
            n = self.counters[sid]
            behaviour = self.plan(sid, n)
            if size >= 0:
                self.latest[sid] = n
                reply = p.status(sid, 0, (n % (1 << (8 * size))).to_bytes(size, "little"))
            else:
                reply = p.status(sid)
                if write is not None and behaviour is not Behaviour.SILENT:
                    self.table[sid][write[0]:write[0] + len(write) - 1] = write[1:]
            self._answer(sid, behaviour, reply, heard, late, copy_after)

    # -- the line -------------------------------------------------------------------------
    def _start_due(self, now: float) -> None:
        """Put every status whose turn has come on the line: the earliest due first, each once
        the one before it is across."""
        while self._pending and max(self._pending[0].due, self._line_free) <= now:
            packet = heapq.heappop(self._pending)
            packet.arrived = max(packet.due, self._line_free) + len(packet.data) * self.byte_s
            self._line_free = packet.arrived
            self._line.append(packet)

    def _deliver(self, now: float) -> None:
        due = []
        while self._line and self._line[0].arrived is not None and self._line[0].arrived <= now:
            packet = self._line.pop(0)
            bound = packet.not_after
            if packet.original is not None and packet.original.arrived is not None:
                bound = packet.original.arrived + self.duplicate_s[1]
            if bound is None or now <= bound:  # else it would break the bounds promised: never sent
                due.append(packet.data)
        if due:  # statuses this thread woke too late for leave together: the bus may read them at once
            self._send(b"".join(due))

    def _next_event(self, now: float) -> float:
        wait = 0.002
        if self._line and self._line[0].arrived is not None:
            wait = min(wait, self._line[0].arrived - now)
        if self._pending:
            wait = min(wait, max(self._pending[0].due, self._line_free) - now)
        return max(0.0, wait)

    def _serve(self) -> None:
        parser = p.InstructionParser()
        heard = 0.0  # when the last instruction's last byte was across: the host's line is serial too
        next_noise = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            ready, _, _ = select.select([self._master], [], [], self._next_event(now))
            if ready:
                read_at = time.monotonic()
                with contextlib.suppress(BlockingIOError):
                    parser.feed(os.read(self._master, 4096))
                while (pkt := parser.next()) is not None:
                    heard = max(read_at, heard) + (len(pkt.params) + 6) * self.byte_s
                    self._handle(pkt, heard)
            now = time.monotonic()
            self._start_due(now)
            self._deliver(now)
            if self._noise.is_set() and now >= next_noise:
                self._send(self._rng.randbytes(64))
                next_noise = now + 0.001

    def _send(self, data: bytes) -> None:
        with contextlib.suppress(BlockingIOError):  # the line is full: bytes lost, as on a real bus
            os.write(self._master, data)
