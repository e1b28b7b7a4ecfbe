"""JMS message selectors (the SQL-92 subset of JMS 1.1, as ActiveMQ applies it to STOMP
headers), compiled once into a predicate over a message's headers.

    matches = compile_selector("JMSPriority > 6 AND region IN ('eu', 'us')")
    matches({"priority": "9", "region": "eu"})  # True

The selector becomes a tree of closures, so matching a message does no parsing. STOMP
header values are always strings, so a header takes its type from what it meets: a number
(compared numerically, UNKNOWN if it does not parse), a string literal (compared as text)
or TRUE/FALSE ('true'/'false', any case). Evaluation uses SQL three-valued logic, with None
standing for UNKNOWN; the predicate is true only when the selector is TRUE.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, NamedTuple

__all__ = ["SelectorError", "compile_selector"]

Headers = Mapping[str, str]
_Eval = Callable[[Headers], Any]

# Parsing recurses about eight frames per parenthesis, and evaluation one frame per tree
# level, so both are capped well inside Python's recursion limit.
_MAX_NESTING = 32
_MAX_DEPTH = 100

_KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "LIKE", "ESCAPE", "IS", "NULL", "TRUE", "FALSE"})
_WHITESPACE = frozenset(" \t\n\r\f")
_DIGITS = frozenset("0123456789")
_STRING_RE = re.compile(r"'([^']*+(?:''[^']*+)*+)'")  # '' inside a literal is one quote
# Java literal syntax, as JMS specifies: L suffixes, 0x hex, and a leading zero means octal.
_NUMBER_RE = re.compile(
    r"(?P<hex>0[xX][0-9a-fA-F]+)[lL]?"
    r"|(?P<float>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)"
    r"|(?P<int>[0-9]+)[lL]?"
)
_KIND_NAMES = {"num": "a number", "str": "a string", "bool": "a condition", "hdr": "a header"}

# JMS header names as STOMP carries them: (STOMP header, value when the header is absent).
_JMS_HEADERS = {
    "JMSPriority": ("priority", "4"),
    "JMSMessageID": ("message-id", None),
    "JMSTimestamp": ("timestamp", None),
    "JMSCorrelationID": ("correlation-id", None),
    "JMSType": ("type", None),
    "JMSExpiration": ("expires", "0"),
    "JMSDestination": ("destination", None),
    "JMSReplyTo": ("reply-to", None),
}


class SelectorError(ValueError):
    """The text is not a valid JMS message selector; the message gives the column."""


def _error(message: str, column: int, expected: str | None = None) -> SelectorError:
    hint = f" (expected {expected})" if expected else ""
    return SelectorError(f"selector: {message} at column {column}{hint}")


# --- tokenizer ------------------------------------------------------------------------


class _Token(NamedTuple):
    kind: str  # 'num', 'str', 'ident', 'kw', 'op' or 'eof'
    value: Any  # the number, the unquoted string, the name, or the upper-cased keyword
    text: str
    col: int


def _is_ident_part(ch: str) -> bool:
    return ch.isalpha() or ch.isdecimal() or ch in "_$"


def _tokenize(text: str) -> list[_Token]:
    tokens = []
    i, n = 0, len(text)
    value: str | int | float
    while i < n:
        ch, start = text[i], i
        if ch in _WHITESPACE:
            i += 1
            continue
        if ch == "'":
            i, value = _scan_string(text, i)
            kind = "str"
        elif ch in _DIGITS or (ch == "." and text[i + 1 : i + 2] in _DIGITS):
            i, value = _scan_number(text, i)
            kind = "num"
        elif ch.isalpha() or ch in "_$":
            while i < n and _is_ident_part(text[i]):
                i += 1
            value = text[start:i]
            # isascii() stops 'ın' or 'ſ' from upper-casing into a keyword.
            kind = "kw" if value.isascii() and value.upper() in _KEYWORDS else "ident"
            if kind == "kw":
                value = value.upper()
        elif text.startswith(("<>", "<=", ">="), i):
            i, value, kind = i + 2, text[i : i + 2], "op"
        elif ch in "=<>+-*/(),":
            i, value, kind = i + 1, ch, "op"
        else:
            raise _error(f"unexpected character {ch!r}", start + 1)
        tokens.append(_Token(kind, value, text[start:i], start + 1))
    tokens.append(_Token("eof", None, "", n + 1))
    return tokens


def _scan_string(text: str, start: int) -> tuple[int, str]:
    match = _STRING_RE.match(text, start)
    if match is None:
        raise _error("unterminated string literal", start + 1)
    return match.end(), match[1].replace("''", "'")


def _scan_number(text: str, start: int) -> tuple[int, int | float]:
    match = _NUMBER_RE.match(text, start)
    assert match is not None, "the caller saw a digit or '.digit'"
    end = match.end()
    if end < len(text) and (_is_ident_part(text[end]) or text[end] == "."):
        raise _error(f"malformed number {text[start : end + 1]!r}", start + 1)
    try:
        if match["hex"]:
            return end, int(match["hex"], 16)
        if match["float"]:
            return end, float(match["float"])
        digits = match["int"]
        return end, int(digits, 8 if len(digits) > 1 and digits[0] == "0" else 10)
    except ValueError:  # 8 or 9 in an octal literal, or more digits than CPython converts
        raise _error(f"invalid number {text[start:end]!r}", start + 1) from None


# --- runtime helpers ------------------------------------------------------------------

_NUMERIC_RE = re.compile(r"[+-]?(?:(?P<int>[0-9]+)|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\Z")
_BOOLS = {"true": True, "false": False}


def _to_number(value: str | None) -> int | float | None:
    # Strict on purpose: Python's int()/float() would also take ' 5', '1_0', 'nan', 'inf'.
    if value is None:
        return None
    try:
        if value.isdigit() and value.isascii():
            return int(value)  # the common case, without a regex
        if match := _NUMERIC_RE.match(value):
            return int(value) if match["int"] else float(value)
    except ValueError:  # more digits than CPython will convert
        pass
    return None


def _divide(a: float, b: float) -> float | None:
    if b == 0:
        return None  # Java would throw; a selector must not, so the result is UNKNOWN
    if isinstance(a, int) and isinstance(b, int):
        q = a // b
        return q + 1 if q < 0 and q * b != a else q  # Java truncates toward zero
    return a / b


_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": _divide}
_COMPARE = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
    "<=": operator.le,
    ">=": operator.ge,
}
_MIRROR = {"=": "=", "<>": "<>", "<": ">", ">": "<", "<=": ">=", ">=": "<="}


@lru_cache(maxsize=1024)
def _like_regex(pattern: str, escape: str | None) -> re.Pattern[str] | None:
    """None if the pattern ends with a dangling escape character."""
    segments, current = [], []
    chars = iter(pattern)
    for ch in chars:
        if ch == escape:
            escaped = next(chars, None)
            if escaped is None:
                return None
            current.append(re.escape(escaped))
        elif ch == "%":
            segments.append("".join(current))
            current = []
        else:
            current.append("." if ch == "_" else re.escape(ch))
    segments.append("".join(current))
    # Between '%'s every segment has a fixed length, so placing each at its leftmost match
    # is always safe; atomic groups then forbid backtracking, which keeps hostile patterns
    # such as '%a%a%a%a%b' linear instead of polynomial in the header length.
    middle = "".join(f"(?>.*?{segment})" for segment in segments[1:-1])
    tail = f".*{segments[-1]}" if len(segments) > 1 else ""
    return re.compile(segments[0] + middle + tail, re.DOTALL)


# --- compiled nodes ---------------------------------------------------------------------


class _Node(NamedTuple):
    kind: str  # 'num', 'str', 'bool', or 'hdr': a header string whose type its use decides
    fn: _Eval
    col: int
    depth: int = 1
    const: bool = False
    value: Any = None  # the value, when const


def _const(kind: str, value: Any, col: int) -> _Node:
    return _Node(kind, lambda _headers: value, col, 1, True, value)


def _make(kind: str, fn: _Eval, col: int, *children: _Node) -> _Node:
    if all(child.const for child in children):
        return _const(kind, fn({}), col)  # fold: constants never read the headers
    depth = 1 + max(child.depth for child in children)
    if depth > _MAX_DEPTH:
        raise _error("expression too deeply nested", col)
    return _Node(kind, fn, col, depth)


def _delivery_mode(h: Headers) -> str:
    return "PERSISTENT" if h.get("persistent") == "true" else "NON_PERSISTENT"


def _identifier(name: str, col: int) -> _Node:
    if name == "JMSDeliveryMode":
        return _Node("hdr", _delivery_mode, col)
    key, default = _JMS_HEADERS.get(name, (name, None))
    return _Node("hdr", lambda h: h.get(key, default), col)


def _as_bool(node: _Node) -> _Node:
    if node.kind == "bool":
        return node
    if node.kind != "hdr":
        raise _error(f"expected a condition but found {_KIND_NAMES[node.kind]}", node.col)
    get = node.fn

    def fn(h: Headers) -> bool | None:
        v = get(h)
        return None if v is None else _BOOLS.get(v.lower())

    return _make("bool", fn, node.col, node)


def _as_number(node: _Node) -> _Node:
    if node.kind == "num":
        return node
    if node.kind != "hdr":
        raise _error(f"expected a number but found {_KIND_NAMES[node.kind]}", node.col)
    get = node.fn
    return _make("num", lambda h: _to_number(get(h)), node.col, node)


def _negate(node: _Node, col: int) -> _Node:
    node = _as_number(node)
    get = node.fn
    return _make("num", lambda h: None if (v := get(h)) is None else -v, col, node)


def _not(node: _Node, col: int) -> _Node:
    node = _as_bool(node)
    get = node.fn
    return _make("bool", lambda h: None if (v := get(h)) is None else not v, col, node)


def _arithmetic(op: str, left: _Node, right: _Node, col: int) -> _Node:
    left, right = _as_number(left), _as_number(right)
    apply, lf, rf = _ARITHMETIC[op], left.fn, right.fn

    def fn(h: Headers) -> int | float | None:
        a, b = lf(h), rf(h)
        if a is None or b is None:
            return None
        try:
            return apply(a, b)
        except OverflowError:  # an int too large to combine with a float
            return None

    return _make("num", fn, col, left, right)


def _comparison(op: str, left: _Node, right: _Node, col: int) -> _Node:
    if left.const and not right.const:
        left, right, op = right, left, _MIRROR[op]  # so only a constant right side is special
    kinds = {left.kind, right.kind}
    if "bool" in kinds:
        domain = "bool" if kinds <= {"bool", "hdr"} else None
    elif "num" in kinds:
        domain = "num" if kinds <= {"num", "hdr"} else None
    else:
        domain = "str" if "str" in kinds else "hdr"
    ordering = op not in ("=", "<>")
    if domain is None or (ordering and domain in ("bool", "str")):
        return _const("bool", None, col)  # JMS compares only like types, and orders numbers
    if domain == "num":
        left, right = _as_number(left), _as_number(right)
    elif domain == "bool":
        left, right = _as_bool(left), _as_bool(right)
    compare, lf, rf = _COMPARE[op], left.fn, right.fn
    if domain == "hdr":

        def fn(h: Headers) -> bool | None:
            a, b = lf(h), rf(h)
            if a is None or b is None:
                return None
            x, y = _to_number(a), _to_number(b)
            if x is not None and y is not None:
                return compare(x, y)
            return None if ordering else compare(a, b)
    elif right.const:
        b = right.value
        if b is None:
            return _const("bool", None, col)

        def fn(h: Headers) -> bool | None:
            a = lf(h)
            return None if a is None else compare(a, b)
    else:

        def fn(h: Headers) -> bool | None:
            a, b = lf(h), rf(h)
            return None if a is None or b is None else compare(a, b)

    return _make("bool", fn, col, left, right)


def _between(value: _Node, low: _Node, high: _Node, col: int) -> _Node:
    # low <= value AND value <= high, converting value once. Only numbers are ordered, so a
    # string or boolean operand makes its comparison UNKNOWN.
    value, low, high = (
        _as_number(n) if n.kind in ("num", "hdr") else _const("num", None, n.col) for n in (value, low, high)
    )
    vf, lf, hf = value.fn, low.fn, high.fn

    def fn(h: Headers) -> bool | None:
        v = vf(h)
        if v is None:
            return None
        lo, hi = lf(h), hf(h)
        above = None if lo is None else lo <= v
        below = None if hi is None else v <= hi
        if above is False or below is False:
            return False
        return None if above is None or below is None else True

    return _make("bool", fn, col, value, low, high)


def _logic(is_and: bool, nodes: list[_Node], col: int) -> _Node:
    decisive = not is_and  # the operand value that settles the result: FALSE for AND
    nodes = [_as_bool(node) for node in nodes]
    if any(node.const and node.value is decisive for node in nodes):
        return _const("bool", decisive, col)
    live = [node for node in nodes if not (node.const and node.value is is_and)]
    if len(live) == 1:
        return live[0]
    fns = tuple(node.fn for node in live)

    def fn(h: Headers) -> bool | None:
        result: bool | None = is_and
        for f in fns:
            v = f(h)
            if v is decisive:
                return decisive
            if v is None:
                result = None
        return result

    return _make("bool", fn, col, *live)


def _string_test(value: _Node, test: Callable[[str], bool], col: int) -> _Node:
    if value.kind not in ("hdr", "str"):
        return _const("bool", None, col)  # LIKE and IN compare strings only
    get = value.fn
    return _make("bool", lambda h: None if (v := get(h)) is None else test(v), col, value)


# --- parser -----------------------------------------------------------------------------


class _Parser:
    """Recursive descent, loosest binding first: OR, AND, NOT, comparison-like predicates,
    + -, * /, unary + -, then literals, identifiers and parentheses."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.pos = 0
        self.nesting = 0

    def peek(self) -> _Token:
        return self.tokens[self.pos]

    def accept(self, kind: str, *values: str) -> _Token | None:
        token = self.tokens[self.pos]
        if token.kind != kind or (values and token.value not in values):
            return None
        self.pos += 1
        return token

    def expect(self, kind: str, value: str | None, description: str) -> _Token:
        token = self.accept(kind, value) if value else self.accept(kind)
        if token is None:
            raise self.unexpected(self.peek(), description)
        return token

    @staticmethod
    def unexpected(token: _Token, expected: str | None = None) -> SelectorError:
        found = "end of selector" if token.kind == "eof" else f"token {token.text!r}"
        return _error(f"unexpected {found}", token.col, expected)

    def enter(self, token: _Token) -> None:
        self.nesting += 1
        if self.nesting > _MAX_NESTING:
            raise _error("selector nested too deeply", token.col)

    def parse(self) -> _Node | None:
        if self.peek().kind == "eof":
            return None
        node = self.or_expr()
        if self.peek().kind != "eof":
            raise self.unexpected(self.peek())
        return _as_bool(node)

    def or_expr(self) -> _Node:
        return self.chain("OR", self.and_expr)

    def and_expr(self) -> _Node:
        return self.chain("AND", self.not_expr)

    def chain(self, keyword: str, operand: Callable[[], _Node]) -> _Node:
        # Gathering a whole AND/OR run into one node keeps long chains shallow and fast.
        nodes = [operand()]
        while self.accept("kw", keyword):
            nodes.append(operand())
        return nodes[0] if len(nodes) == 1 else _logic(keyword == "AND", nodes, nodes[0].col)

    def not_expr(self) -> _Node:
        token = self.accept("kw", "NOT")
        if token is None:
            return self.predicate()
        self.enter(token)
        node = _not(self.not_expr(), token.col)
        self.nesting -= 1
        return node

    def predicate(self) -> _Node:
        left = self.additive()
        token = self.accept("op", *_COMPARE)
        if token:
            return _comparison(token.value, left, self.additive(), token.col)
        if token := self.accept("kw", "IS"):
            negated = self.accept("kw", "NOT") is not None
            self.expect("kw", "NULL", "NULL")
            get = left.fn
            return _make("bool", lambda h: (get(h) is None) != negated, token.col, left)
        negated = self.accept("kw", "NOT") is not None
        if token := self.accept("kw", "BETWEEN"):
            low = self.additive()
            self.expect("kw", "AND", "AND")
            high = self.additive()
            node = _between(left, low, high, token.col)
        elif token := self.accept("kw", "IN"):
            self.expect("op", "(", "'('")
            items = {self.expect("str", None, "a string literal").value}
            while self.accept("op", ","):
                items.add(self.expect("str", None, "a string literal").value)
            self.expect("op", ")", "',' or ')'")
            node = _string_test(left, frozenset(items).__contains__, token.col)
        elif token := self.accept("kw", "LIKE"):
            node = _string_test(left, self.like_pattern(), token.col)
        elif negated:
            raise self.unexpected(self.peek(), "BETWEEN, IN or LIKE")
        else:
            return left
        return _not(node, token.col) if negated else node

    def like_pattern(self) -> Callable[[str], bool]:
        pattern = self.expect("str", None, "a string pattern")
        escape = None
        if self.accept("kw", "ESCAPE"):
            token = self.expect("str", None, "a one-character string")
            if len(token.value) != 1:
                raise _error("ESCAPE must be a single character", token.col)
            escape = token.value
        regex = _like_regex(pattern.value, escape)
        if regex is None:
            raise _error("LIKE pattern ends with its escape character", pattern.col)
        fullmatch = regex.fullmatch
        return lambda value: fullmatch(value) is not None

    def additive(self) -> _Node:
        return self.arithmetic(("+", "-"), self.multiplicative)

    def multiplicative(self) -> _Node:
        return self.arithmetic(("*", "/"), self.unary)

    def arithmetic(self, operators: tuple[str, str], operand: Callable[[], _Node]) -> _Node:
        node = operand()
        while token := self.accept("op", *operators):
            node = _arithmetic(token.value, node, operand(), token.col)
        return node

    def unary(self) -> _Node:
        token = self.accept("op", "+", "-")
        if token is None:
            return self.primary()
        self.enter(token)
        operand = self.unary()
        self.nesting -= 1
        return _as_number(operand) if token.value == "+" else _negate(operand, token.col)

    def primary(self) -> _Node:
        token = self.peek()
        self.pos += token.kind != "eof"
        if token.kind in ("num", "str"):
            return _const(token.kind, token.value, token.col)
        if token.kind == "ident":
            return _identifier(token.value, token.col)
        if token.kind == "kw" and token.value in ("TRUE", "FALSE"):
            return _const("bool", token.value == "TRUE", token.col)
        if token.kind == "op" and token.value == "(":
            self.enter(token)
            node = self.or_expr()
            self.expect("op", ")", "')'")
            self.nesting -= 1
            return node
        raise self.unexpected(token, "a value")


@lru_cache(maxsize=512)
def _compile(text: str) -> Callable[[Headers], bool]:
    root = _Parser(text).parse()
    # JMS: an empty selector is the same as no selector.
    fn = root.fn if root else _const("bool", True, 1).fn

    def predicate(headers: Headers) -> bool:
        return fn(headers) is True

    return predicate


def compile_selector(text: str) -> Callable[[Mapping[str, str]], bool]:
    """Compile a JMS selector into a predicate over string headers, True only when the
    selector evaluates to TRUE. Raises SelectorError, and nothing else, for bad input."""
    if not isinstance(text, str):
        raise SelectorError(f"selector: expected a string, not {type(text).__name__}")
    return _compile(text)
