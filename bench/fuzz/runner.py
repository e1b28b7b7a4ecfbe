"""The fuzzing loop shared by every port: cases (one connection each: a handshake,
valid or broken, then valid and mutated frames cut into random writes), the log
scanned after each case, a control round trip between batches, RSS sampled,
failing cases written to files, and their replay.

A case is a pure function of (seed, port, case number), so a run is repeatable;
what it sent is also saved byte for byte when it fails."""

from __future__ import annotations

import json
import random
import socket
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.fuzz.mutate import Mutator, split_writes
from bench.fuzz.node import HOST, UNHANDLED, FuzzNode

CONTROL_TIMEOUT = 10.0  # a control round trip slower than this is a hang
CASE_TIMEOUT = 10.0  # the node must close a case's connection this soon after the fuzzer's FIN
BATCH_SECONDS = 2.0  # between control round trips
MAX_FAILURE_FILES = 20  # a run that fails everywhere writes this many files, then counts
RECENT = 400  # cases kept for the failure file of a hang (those since the last good control, at most)


class ControlFailed(Exception):
    """The control client did not get its round trip through."""


@dataclass
class Live:
    """A step computed when the case runs, from what the node said (the mesh's AUTH
    proof is made on the node's nonce); ``arg`` says what for (the peer id), ``seed``
    drives its mutation, if any."""
    kind: str
    arg: str
    seed: int
    mutate: bool


Step = bytes | Live


@dataclass
class Case:
    index: int
    steps: list[Step] = field(default_factory=list)
    inputs: int = 0
    mutated: int = 0

    def to_json(self) -> dict:
        steps = [{"write": s.hex()} if isinstance(s, bytes) else {"live": s.kind, "arg": s.arg, "seed": s.seed,
                                                                   "mutate": s.mutate}
                 for s in self.steps]
        return {"case": self.index, "inputs": self.inputs, "steps": steps}

    @classmethod
    def from_json(cls, data: dict, node_id_from: str = "", node_id_to: str = "") -> Case:
        steps: list[Step] = []
        for step in data["steps"]:
            if "write" in step:
                raw = bytes.fromhex(step["write"])
                if node_id_from and node_id_to:  # the recorded node's id, where the new node's belongs
                    raw = raw.replace(node_id_from.encode(), node_id_to.encode())
                steps.append(raw)
            else:
                steps.append(Live(step["live"], step["arg"], step["seed"], step["mutate"]))
        return cls(data["case"], steps, data.get("inputs", 0))


class CaseBuilder:
    """Collects a case's frames: each frame is one input, mutated with probability
    ``p``. At the end (``case``) the bytes are cut into writes: the whole stream at
    random places, or each frame on its own."""

    def __init__(self, rng: random.Random, mutator: Mutator, corpus: Sequence[bytes], index: int) -> None:
        self.rng = rng
        self.mutator = mutator
        self.corpus = corpus
        self._case = Case(index)
        self._pending: list[bytes] = []

    def mutated(self, frame: bytes, p: float) -> bytes:
        """``frame``, mutated with probability ``p`` (counted, but not as an input)."""
        if self.rng.random() < p:
            self._case.mutated += 1
            return self.mutator.mutate(frame, self.corpus)
        return frame

    def frames(self, frames: Sequence[bytes], p: float) -> None:
        for frame in frames:
            self._pending.append(self.mutated(frame, p))
            self._case.inputs += 1

    def live(self, kind: str, arg: str = "", p: float = 0.0, counts: bool = True) -> None:
        """A step made when the case runs; ``counts``: it writes an input (a wait does not)."""
        self._flush()
        mutate = self.rng.random() < p
        self._case.steps.append(Live(kind, arg, self.rng.getrandbits(32), mutate))
        self._case.inputs += counts
        self._case.mutated += mutate

    @property
    def case(self) -> Case:
        self._flush()
        return self._case

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if self.rng.random() < 0.5:
            self._case.steps.extend(split_writes(self.rng, b"".join(pending)))
        else:
            for frame in pending:
                self._case.steps.extend(split_writes(self.rng, frame))


class Target:
    """One port's fuzzer; subclasses give the corpus, the cases and the control."""

    name = ""
    scheme = ""  # the node's port it hits (FuzzNode.ports)

    def __init__(self, node: FuzzNode) -> None:
        self.node = node

    @property
    def port(self) -> int:
        return self.node.ports[self.scheme]

    def make_case(self, rng: random.Random, index: int) -> Case:
        raise NotImplementedError

    def opened(self, sock: socket.socket) -> object:
        """Called on connect, before any write; what ``live`` steps need."""
        return None

    def live(self, step: Live, context: object) -> list[bytes]:
        raise NotImplementedError(step.kind)

    def control(self, timeout: float) -> None:
        """A real round trip through the port, or ControlFailed."""
        raise NotImplementedError


@dataclass
class Result:
    port: str
    seed: int
    seconds: float = 0.0
    cases: int = 0
    inputs: int = 0
    mutated: int = 0
    unhandled: int = 0
    hangs: int = 0
    stuck: int = 0
    controls: int = 0
    node_died: bool = False
    rss_start: int = 0
    rss_warm: int = 0
    rss_end: int = 0
    log_bytes: int = 0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0

    @property
    def ok(self) -> bool:
        return not (self.unhandled or self.hangs or self.stuck or self.node_died) and self.controls > 0

    def summary(self) -> str:
        mib = 1024 * 1024
        return "\n".join((
            f"port {self.port} (seed {self.seed}): {self.inputs} inputs ({self.mutated} mutated) in {self.cases} "
            f"connections, {self.seconds:.1f} s, {self.rate:.0f} inputs/s",
            f"  unhandled exceptions {self.unhandled}, hangs {self.hangs}, stuck connections {self.stuck}, "
            f"node died {'yes' if self.node_died else 'no'}, control round trips ok {self.controls}",
            f"  node RSS start {self.rss_start / mib:.1f} MiB, after warm-up {self.rss_warm / mib:.1f} MiB, "
            f"end {self.rss_end / mib:.1f} MiB (growth after warm-up {(self.rss_end - self.rss_warm) / mib:+.1f} MiB)",
            f"  node log +{self.log_bytes} bytes ({self.log_bytes * 1000 / max(self.inputs, 1):.0f} bytes per 1000 "
            "inputs)",
            *(f"  failing input written to {path}" for path in self.failures if path),
            *(f"  {note}" for note in self.notes),
        ))


def execute(target: Target, case: Case, timeout: float = CASE_TIMEOUT) -> str:
    """Send a case on a fresh connection, then FIN, then read until the node closes.
    What went wrong ("" if the node closed the connection in time)."""
    try:
        sock = socket.create_connection((HOST, target.port), timeout=timeout)
    except OSError as error:
        return f"the node did not take the connection: {error}"
    received = bytearray()
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        deadline = time.monotonic() + timeout
        try:
            context = target.opened(sock)
            for step in case.steps:
                for data in ([step] if isinstance(step, bytes) else target.live(step, context)):
                    sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except ControlFailed as error:
            return f"the node's greeting did not come: {error}"
        except TimeoutError:
            return f"the node did not read the case's bytes within {timeout} s"
        except OSError:
            return ""  # the node closed it first (reset, broken pipe): an answer too
        while True:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                data = sock.recv(262144)
            except TimeoutError:
                return (f"the node did not close the connection within {timeout} s of the fuzzer's FIN; it sent "
                        f"{len(received)} bytes, ending {bytes(received[-300:])!r}")
            except OSError:
                return ""
            if not data:
                return ""
            received += data
            del received[:-4096]
    finally:
        sock.close()


class Runner:
    def __init__(self, target: Target, seed: int, out_dir: Path, verbose: bool = False) -> None:
        self.target = target
        self.node = target.node
        self.seed = seed
        self.out_dir = Path(out_dir)
        self.verbose = verbose
        self.result = Result(target.name, seed)
        self.recent: deque[Case] = deque(maxlen=RECENT)

    def case(self, index: int) -> Case:
        return self.target.make_case(random.Random(f"{self.seed}:{self.target.name}:{index}"), index)

    def run(self, seconds: float, max_inputs: int = 0) -> Result:
        result, node = self.result, self.node
        result.rss_start = node.rss()
        start = time.monotonic()
        deadline = start + seconds
        warm_at = start + min(seconds * 0.1, 30.0)
        next_control = start + BATCH_SECONDS
        next_progress = start + 10.0
        log_start = node.log_size()
        index = 0
        try:
            while time.monotonic() < deadline and not (max_inputs and result.inputs >= max_inputs):
                index += 1
                case = self.case(index)
                self.recent.append(case)
                problem = execute(self.target, case)
                if problem:
                    result.stuck += 1
                    self.save(list(self.recent), problem)
                result.cases += 1
                result.inputs += case.inputs
                result.mutated += case.mutated
                self.scan_log([case])
                if not node.running:
                    result.node_died = True
                    self.save(list(self.recent), f"the node exited (status {node.proc.returncode})")
                    break
                now = time.monotonic()
                if not result.rss_warm and now >= warm_at:
                    result.rss_warm = node.rss()
                if now >= next_control:
                    if not self.control():
                        break
                    next_control = time.monotonic() + BATCH_SECONDS
                if self.verbose and now >= next_progress:
                    next_progress = now + 10.0
                    print(f"  {self.target.name}: {result.inputs} inputs, {result.inputs / (now - start):.0f}/s, "
                          f"RSS {node.rss() / 1048576:.1f} MiB", flush=True)
            else:
                self.control()
        finally:
            result.seconds = time.monotonic() - start
            result.rss_warm = result.rss_warm or result.rss_start
            result.rss_end = node.rss()
            result.log_bytes = node.log_size() - log_start if node.log_path.exists() else 0
        return result

    def control(self) -> bool:
        try:
            self.target.control(CONTROL_TIMEOUT)
        except (ControlFailed, OSError) as error:
            if not self.node.running:
                self.result.node_died = True
            else:
                self.result.hangs += 1
            self.save(list(self.recent), f"control round trip failed: {error}")
            return False
        self.result.controls += 1
        self.recent.clear()
        return True

    def scan_log(self, cases: list[Case]) -> None:
        new = self.node.new_log()
        found = len(UNHANDLED.findall(new))
        if found:
            self.result.unhandled += found
            self.save(cases, "the node logged an unhandled exception", new[-8000:].decode("utf-8", "replace"))

    def save(self, cases: list[Case], reason: str, log: str = "") -> None:
        if len(self.result.failures) >= MAX_FAILURE_FILES:
            if len(self.result.failures) == MAX_FAILURE_FILES:
                self.result.notes.append(f"only the first {MAX_FAILURE_FILES} failing inputs were written")
                self.result.failures.append("")  # counted once
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / f"fuzz-{self.target.name}-seed{self.seed}-case{cases[-1].index if cases else 0}.json"
        record = {"port": self.target.name, "seed": self.seed, "node_id": self.node.node_id, "reason": reason,
                  "log": log or self.node.log_tail(), "cases": [c.to_json() for c in cases]}
        path.write_text(json.dumps(record, indent=1))
        self.result.failures.append(str(path))


def replay(target: Target, path: Path) -> Result:
    """Send a failure file's cases again, in order, to the target's (fresh) node,
    then check its log and a control round trip."""
    record = json.loads(Path(path).read_text())
    runner = Runner(target, record["seed"], Path(path).parent / "replayed")
    result = runner.result
    result.rss_start = target.node.rss()
    start = time.monotonic()
    for data in record["cases"]:
        case = Case.from_json(data, record.get("node_id", ""), target.node.node_id)
        problem = execute(target, case)
        if problem:
            result.stuck += 1
            result.notes.append(f"case {case.index}: {problem}")
        result.cases += 1
        result.inputs += case.inputs
        runner.scan_log([case])
        if not target.node.running:
            result.node_died = True
            break
    else:
        runner.control()
    result.seconds = time.monotonic() - start
    result.rss_warm = result.rss_start
    result.rss_end = target.node.rss()
    return result
