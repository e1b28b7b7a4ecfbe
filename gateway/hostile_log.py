"""Log lines about a peer's bad input, bounded in size and rate-limited per peer.

Whatever a client sends wrong, the node says so in its log, but a client sending
it in a loop must not fill the disk: a line quotes at most ``QUOTE_LIMIT``
characters of what the client chose (``quote``) and is cut at ``LINE_LIMIT``; a
peer address gets at most ``per_minute`` lines a minute, the last of them saying
that more are held back, and the count of those held back is logged when that peer
is next heard of. An exception our own code did not expect (a bug) is one line,
with its traceback (the innermost frames) only the first time that place raised
that exception in this process.

Sans-I/O: time comes from the ``clock`` given (a reactor's ``seconds``). Protocols
keep one ``PeerLog`` per listener (factory), so that one peer's connections share
its budget."""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable

from model.names import QUOTE_LIMIT, quoted

quote = quoted  # a client's value in a line: its repr, cut to QUOTE_LIMIT characters
__all__ = ["QUOTE_LIMIT", "PeerLog", "quote"]

LINE_LIMIT = 400  # characters of one line (a first traceback comes on top, itself cut at TRACEBACK_LIMIT)
PER_MINUTE = 10  # lines per peer address per minute
WINDOW_S = 60.0
TRACEBACK_FRAMES = 10  # the innermost frames of a first traceback
TRACEBACK_LIMIT = 4000  # characters of a first traceback
MAX_PEERS = 4096  # peers tracked at once; past it, every other peer shares one budget
OTHERS = "other peers"
_MAX_SITES = 1024
_sites: set[tuple[str, str, int]] = set()  # (exception type, file, line) whose traceback was logged, process-wide


def _cut(line: str) -> str:
    return line if len(line) <= LINE_LIMIT else line[:LINE_LIMIT] + "... (cut)"


class _Budget:
    __slots__ = ("peer", "start", "logged", "held")

    def __init__(self, peer: str, start: float) -> None:
        self.peer = peer  # whom it is for: a peer, or OTHERS
        self.start = start
        self.logged = 0
        self.held = 0  # lines held back in this window


class PeerLog:
    """``log(level, peer, message, *args)``: one line about ``peer`` (an address,
    without the port: reconnecting does not reset a budget), if its budget allows."""

    def __init__(self, logger: logging.Logger, clock: Callable[[], float] = time.monotonic,
                 per_minute: int = PER_MINUTE, max_peers: int = MAX_PEERS) -> None:
        self.logger = logger
        self.clock = clock
        self.per_minute = per_minute
        self.max_peers = max_peers
        self._budgets: dict[str, _Budget] = {}
        self._swept = float("-inf")  # when finished minutes were last looked for (at most once a second)

    def log(self, level: int, peer: str, message: str, *args: object) -> None:
        if not self.logger.isEnabledFor(level):
            return
        budget = self._budget(peer)
        if budget.logged >= self.per_minute:
            budget.held += 1
            return
        budget.logged += 1
        line = _cut(message % args if args else message)
        if budget.logged == self.per_minute:
            line += f" (more about {budget.peer} held back for a minute)"
        self.logger.log(level, "%s", line)

    def info(self, peer: str, message: str, *args: object) -> None:
        self.log(logging.INFO, peer, message, *args)

    def warning(self, peer: str, message: str, *args: object) -> None:
        self.log(logging.WARNING, peer, message, *args)

    def internal_error(self, peer: str, what: str, error: BaseException) -> None:
        """Our code raised ``error`` while handling what ``peer`` sent; ``what`` says what
        comes of it ("amqp: closing 1.2.3.4:5"). The line names the exception's type and
        where it was raised, never its text (which may quote the client at any length)."""
        site = _site(error)
        line = f"{what}: internal error ({site[0]} at {site[1]}:{site[2]})"
        if site not in _sites and len(_sites) < _MAX_SITES:
            _sites.add(site)
            self._budget(peer).logged += 1
            self.logger.error("%s (first time here; later ones without the traceback)\n%s", _cut(line),
                              _traceback(error))
        else:
            self.log(logging.ERROR, peer, "%s", line)

    def _budget(self, peer: str) -> _Budget:
        now = self.clock()
        budgets = self._budgets
        budget = budgets.get(peer)
        if budget is None:
            if len(budgets) >= self.max_peers:
                if now - self._swept >= 1.0:
                    self._swept = now
                    self._forget_quiet(now)
                if len(budgets) >= self.max_peers:
                    peer = OTHERS
                    budget = budgets.get(peer)
            if budget is None:
                budget = budgets[peer] = _Budget(peer, now)
        if now - budget.start >= WINDOW_S:
            if budget.held:
                self.logger.warning("%s: %d more lines about it were held back in the minute before", budget.peer,
                                    budget.held)
            budget.start, budget.logged, budget.held = now, 0, 0
        return budget

    def _forget_quiet(self, now: float) -> None:
        """Drop the budgets whose minute is over; what they held back is summed in one line."""
        over = [peer for peer, budget in self._budgets.items() if now - budget.start >= WINDOW_S]
        held = sum(self._budgets.pop(peer).held for peer in over)
        if held:
            self.logger.warning("%d more lines about %d peers were held back", held, len(over))


def _site(error: BaseException) -> tuple[str, str, int]:
    """The exception's type and the file and line of the innermost frame it went through."""
    tb = error.__traceback__
    if tb is None:
        return type(error).__name__, "?", 0
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return type(error).__name__, code.co_filename.rsplit("/", 1)[-1], tb.tb_lineno


def _traceback(error: BaseException) -> str:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__, limit=-TRACEBACK_FRAMES,
                                              chain=False))
    return text if len(text) <= TRACEBACK_LIMIT else text[:TRACEBACK_LIMIT] + "... (cut)"
