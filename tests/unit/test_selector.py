"""gateway.selector: JMS message selectors over STOMP headers."""

from __future__ import annotations

import functools
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.selector import SelectorError, compile_selector

# (selector, headers, expected): expected is whether the selector evaluates to TRUE.
MATCHES = [
    # numeric comparisons: the header is converted to a number
    ("n = 5", {"n": "5"}, True),
    ("n = 5", {"n": "5.0"}, True),
    ("n = 5", {"n": "+5"}, True),
    ("n = 5", {"n": "6"}, False),
    ("n <> 5", {"n": "6"}, True),
    ("n <> 5", {"n": "5"}, False),
    ("n < 10", {"n": "9"}, True),
    ("n < 10", {"n": "10"}, False),
    ("n > 10", {"n": "9"}, False),
    ("n > -1", {"n": "0"}, True),
    ("n <= 5", {"n": "5"}, True),
    ("n >= 5.5", {"n": "5.5"}, True),
    ("n >= 5.5", {"n": "5.25"}, False),
    ("n > 1e3", {"n": "1001"}, True),
    ("n > 1E3", {"n": "999"}, False),
    ("n < .5", {"n": "0.25"}, True),
    ("n = 7.", {"n": "7"}, True),
    ("n = 2.5e-1", {"n": ".25"}, True),
    ("n = 10L", {"n": "10"}, True),
    ("n = 0x1F", {"n": "31"}, True),
    ("n = 010", {"n": "8"}, True),  # Java octal, as in ActiveMQ
    ("n = 1e3", {"n": "1000"}, True),
    ("n = 1000", {"n": "1e3"}, True),
    ("n = 5", {"n": "five"}, False),
    ("NOT (n = 5)", {"n": "five"}, False),  # unparseable header: UNKNOWN, not FALSE
    ("n <> 5", {"n": "five"}, False),
    ("n = 5", {"n": " 5"}, False),  # numbers in headers are strict
    ("n = 5", {"n": "nan"}, False),
    ("n > 0", {"n": "inf"}, False),
    ("n = 12345678901234567890", {"n": "12345678901234567890"}, True),
    # string comparisons
    ("s = 'abc'", {"s": "abc"}, True),
    ("s = 'ABC'", {"s": "abc"}, False),
    ("s <> 'abc'", {"s": "xyz"}, True),
    ("s <> 'abc'", {"s": "abc"}, False),
    ("s = '5'", {"s": "5.0"}, False),  # a string literal compares text, not numbers
    ("s = '5'", {"s": "5"}, True),
    ("s = 'it''s'", {"s": "it's"}, True),
    ("s = ''", {"s": ""}, True),
    ("s = 'a b'", {"s": "a b"}, True),
    ("s < 'b'", {"s": "a"}, False),  # JMS does not order strings
    ("NOT (s < 'b')", {"s": "a"}, False),
    ("'a' = 'a'", {}, True),
    ("'a' = 1", {}, False),
    ("NOT ('a' = 1)", {}, False),
    ("5 = s", {"s": "5"}, True),  # literal on the left
    ("10 > s", {"s": "9"}, True),
    # header against header
    ("a = b", {"a": "1", "b": "1.0"}, True),
    ("a = b", {"a": "x", "b": "x"}, True),
    ("a <> b", {"a": "x", "b": "y"}, True),
    ("a < b", {"a": "2", "b": "10"}, True),  # numeric; as text it would be false
    ("a < b", {"a": "a", "b": "b"}, False),
    ("NOT (a < b)", {"a": "a", "b": "b"}, False),
    ("a = b", {"a": "1"}, False),
    ("NOT (a = b)", {"a": "1"}, False),
    # arithmetic and its precedence
    ("a + b = 5", {"a": "2", "b": "3"}, True),
    ("a - b = -1", {"a": "2", "b": "3"}, True),
    ("a * 2 = 6", {"a": "3"}, True),
    ("a / 2 = 2", {"a": "5"}, True),  # integer division truncates, as in Java
    ("a / 2 = 2.5", {"a": "5.0"}, True),
    ("-7 / 2 = -3", {}, True),
    ("a / b = -3", {"a": "7", "b": "-2"}, True),
    ("a / 0 = 1", {"a": "5"}, False),
    ("NOT (a / 0 = 1)", {"a": "5"}, False),
    ("-a = -3", {"a": "3"}, True),
    ("+a = 3", {"a": "3"}, True),
    ("- -a = 3", {"a": "3"}, True),
    ("2 + 3 * 4 = 14", {}, True),
    ("(2 + 3) * 4 = 20", {}, True),
    ("10 - 2 - 3 = 5", {}, True),
    ("12 / 2 / 3 = 2", {}, True),
    ("-2 * -3 = 6", {}, True),
    ("a + 1 = 2", {"a": "x"}, False),
    ("NOT (a + 1 = 2)", {"a": "x"}, False),
    ("a + 1 > 0", {}, False),
    ("a * 1.5 = 3", {"a": "2"}, True),
    ("a + 1.5 > 0", {"a": "9" * 400}, False),  # too big for a float: UNKNOWN, no exception
    ("NOT (a + 1.5 > 0)", {"a": "9" * 400}, False),
    # booleans
    ("urgent", {"urgent": "true"}, True),
    ("urgent", {"urgent": "TRUE"}, True),
    ("urgent", {"urgent": "false"}, False),
    ("NOT urgent", {"urgent": "false"}, True),
    ("NOT urgent", {"urgent": "true"}, False),
    ("NOT urgent", {}, False),
    ("NOT urgent", {"urgent": "yes"}, False),
    ("urgent = TRUE", {"urgent": "True"}, True),
    ("urgent = FALSE", {"urgent": "false"}, True),
    ("urgent <> TRUE", {"urgent": "false"}, True),
    ("urgent = TRUE", {"urgent": "yes"}, False),
    ("NOT (urgent = TRUE)", {"urgent": "yes"}, False),
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NOT FALSE", {}, True),
    ("NOT NOT urgent", {"urgent": "true"}, True),
    ("(a = 1) = TRUE", {"a": "1"}, True),
    ("(a = 1) = FALSE", {"a": "2"}, True),
    ("(a = 1) = TRUE", {}, False),
    ("TRUE = 1", {}, False),
    ("urgent AND a = 1", {"urgent": "true", "a": "1"}, True),
    # BETWEEN
    ("n BETWEEN 1 AND 5", {"n": "1"}, True),
    ("n BETWEEN 1 AND 5", {"n": "5"}, True),
    ("n BETWEEN 1 AND 5", {"n": "3.5"}, True),
    ("n BETWEEN 1 AND 5", {"n": "0"}, False),
    ("n BETWEEN 1 AND 5", {"n": "6"}, False),
    ("n BETWEEN 1 AND 5", {}, False),
    ("n NOT BETWEEN 1 AND 5", {"n": "6"}, True),
    ("n NOT BETWEEN 1 AND 5", {"n": "3"}, False),
    ("n NOT BETWEEN 1 AND 5", {}, False),
    ("n NOT BETWEEN 1 AND 5", {"n": "x"}, False),
    ("n BETWEEN lo AND hi", {"n": "5", "lo": "1", "hi": "9"}, True),
    ("n BETWEEN lo AND hi", {"n": "5", "hi": "4"}, False),  # FALSE AND UNKNOWN
    ("n NOT BETWEEN lo AND hi", {"n": "5", "hi": "4"}, True),
    ("n NOT BETWEEN lo AND hi", {"n": "5", "hi": "9"}, False),  # TRUE AND UNKNOWN
    ("n BETWEEN 1 AND 5 AND m = 1", {"n": "3", "m": "1"}, True),
    ("n BETWEEN 1 AND 5 AND m = 1", {"n": "3", "m": "2"}, False),
    ("n BETWEEN 1 + 1 AND 2 * 3", {"n": "6"}, True),
    ("n BETWEEN 'a' AND 'z'", {"n": "m"}, False),  # strings are not ordered
    ("NOT (n BETWEEN 'a' AND 'z')", {"n": "m"}, False),
    # IN
    ("c IN ('UK', 'US')", {"c": "US"}, True),
    ("c IN ('UK', 'US')", {"c": "FR"}, False),
    ("c IN ('UK', 'US')", {}, False),
    ("c NOT IN ('UK', 'US')", {"c": "FR"}, True),
    ("c NOT IN ('UK', 'US')", {"c": "US"}, False),
    ("c NOT IN ('UK', 'US')", {}, False),
    ("c IN ('1')", {"c": "1"}, True),
    ("c IN ('it''s')", {"c": "it's"}, True),
    ("c in ('a') and d in ('b')", {"c": "a", "d": "b"}, True),
    # LIKE
    ("s LIKE 'ab%'", {"s": "abc"}, True),
    ("s LIKE 'ab%'", {"s": "ab"}, True),
    ("s LIKE 'ab%'", {"s": "xab"}, False),
    ("s LIKE 'a_c'", {"s": "abc"}, True),
    ("s LIKE 'a_c'", {"s": "abbc"}, False),
    ("s LIKE '%'", {"s": ""}, True),
    ("s LIKE '%b%'", {"s": "abc"}, True),
    ("s LIKE '%b%'", {"s": "acd"}, False),
    ("s LIKE '%ab%ab'", {"s": "abab"}, True),
    ("s LIKE '%ab%ab'", {"s": "ab"}, False),
    ("s LIKE '%ab%ab'", {"s": "xabyabzab"}, True),
    ("s LIKE 'a%b%c'", {"s": "abbc"}, True),
    ("s LIKE 'a%b%c'", {"s": "acb"}, False),
    ("s LIKE 'a.c'", {"s": "abc"}, False),  # regex characters are literal
    ("s LIKE 'a.c'", {"s": "a.c"}, True),
    ("s LIKE '(x)*'", {"s": "(x)*"}, True),
    ("s LIKE 'a%'", {"s": "a\nb"}, True),
    ("s LIKE 'a_b'", {"s": "a\nb"}, True),
    ("s LIKE 'abc'", {"s": "ABC"}, False),
    ("s NOT LIKE 'a%'", {"s": "b"}, True),
    ("s NOT LIKE 'a%'", {"s": "a"}, False),
    ("s NOT LIKE 'a%'", {}, False),
    ("s LIKE 'a\\%' ESCAPE '\\'", {"s": "a%"}, True),
    ("s LIKE 'a\\%' ESCAPE '\\'", {"s": "ab"}, False),
    ("s LIKE 'a!_b' ESCAPE '!'", {"s": "a_b"}, True),
    ("s LIKE 'a!_b' ESCAPE '!'", {"s": "axb"}, False),
    ("s LIKE '100!%%' ESCAPE '!'", {"s": "100% off"}, True),
    ("s LIKE '100!%%' ESCAPE '!'", {"s": "1000 off"}, False),
    ("s LIKE 'a!!b' ESCAPE '!'", {"s": "a!b"}, True),
    ("s LIKE 'a%%' escape '%'", {"s": "a%"}, True),  # the escape character wins over '%'
    ("s LIKE 'a%%' escape '%'", {"s": "ab"}, False),
    ("s LIKE 'a__' escape '_'", {"s": "a_"}, True),
    ("s LIKE '5%'", {"s": "55"}, True),
    # IS NULL
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": ""}, False),
    ("a IS NOT NULL", {"a": ""}, True),
    ("a IS NOT NULL", {}, False),
    ("NOT a IS NULL", {}, False),
    ("a is not null and b is null", {"a": "1"}, True),
    # AND / OR / NOT with UNKNOWN, and precedence
    ("a = 1 AND b = 2", {"a": "1", "b": "2"}, True),
    ("a = 1 AND b = 2", {"a": "1"}, False),
    ("a = 1 OR b = 2", {"a": "1"}, True),  # TRUE OR UNKNOWN
    ("a = 1 OR b = 2", {"a": "0"}, False),
    ("NOT (a = 1 AND b = 2)", {"a": "1"}, False),  # NOT (TRUE AND UNKNOWN)
    ("NOT (a = 2 AND b = 2)", {"a": "1"}, True),  # NOT (FALSE AND UNKNOWN)
    ("NOT (a = 2 OR b = 2)", {"a": "1"}, False),  # NOT (FALSE OR UNKNOWN)
    ("NOT (a = 1 OR b = 2)", {"a": "1"}, False),
    ("a = 1 OR b = 2 AND c = 3", {"a": "1"}, True),  # AND binds tighter than OR
    ("(a = 1 OR b = 2) AND c = 3", {"a": "1"}, False),
    ("NOT a = 1 AND b = 2", {"a": "2", "b": "2"}, True),  # NOT binds looser than =
    ("NOT a = 1 OR b = 2", {"a": "1", "b": "2"}, True),
    ("a = 1 AND b = 2 AND c = 3 AND d = 4", {"a": "1", "b": "2", "c": "3", "d": "4"}, True),
    ("a = 1 AND b = 2 AND c = 3 AND d = 4", {"a": "1", "b": "2", "c": "3", "d": "5"}, False),
    ("a = 1 OR b = 2 OR c = 3 OR d = 4", {"d": "4"}, True),
    ("TRUE OR x = 1", {}, True),
    ("FALSE AND x = 1", {}, False),
    ("TRUE AND x = 1", {"x": "1"}, True),
    ("FALSE OR x = 1", {}, False),
    ("NOT (FALSE OR x = 1)", {}, False),
    # keywords are case-insensitive, identifiers are not
    ("a between 1 and 5 or b is not null", {"a": "3"}, True),
    ("x Like 'a%' EsCaPe '!'", {"x": "ab"}, True),
    ("urgent = true", {"urgent": "true"}, True),
    ("not urgent", {"urgent": "false"}, True),
    ("A = 1", {"a": "1"}, False),
    ("$x = 1 AND _y1 = 2", {"$x": "1", "_y1": "2"}, True),
    ("ın = 1", {"ın": "1"}, True),  # upper-cases to IN, but is not the keyword
    ("café = 'x'", {"café": "x"}, True),
    ("JMSXGroupID = 'g'", {"JMSXGroupID": "g"}, True),  # unmapped names are plain headers
    # whitespace
    ("  a\t=\n1\r\n ", {"a": "1"}, True),
    # JMS header names map to STOMP headers
    ("JMSPriority = 4", {}, True),
    ("JMSPriority = 4", {"JMSPriority": "9"}, True),
    ("JMSPriority > 6", {"priority": "9"}, True),
    ("JMSPriority > 6", {"priority": "2"}, False),
    ("JMSMessageID = 'id-1'", {"message-id": "id-1"}, True),
    ("JMSMessageID IS NULL", {}, True),
    ("JMSTimestamp > 1000", {"timestamp": "2000"}, True),
    ("JMSCorrelationID = 'c-7'", {"correlation-id": "c-7"}, True),
    ("JMSType = 'order'", {"type": "order"}, True),
    ("JMSExpiration = 0", {}, True),
    ("JMSExpiration > 0", {"expires": "1700000000000"}, True),
    ("JMSDeliveryMode = 'PERSISTENT'", {"persistent": "true"}, True),
    ("JMSDeliveryMode = 'PERSISTENT'", {}, False),
    ("JMSDeliveryMode = 'NON_PERSISTENT'", {}, True),
    ("JMSDeliveryMode = 'NON_PERSISTENT'", {"persistent": "false"}, True),
    ("JMSDeliveryMode IS NULL", {}, False),
    ("JMSDestination = '/queue/a'", {"destination": "/queue/a"}, True),
    ("JMSReplyTo = '/temp-queue/r'", {"reply-to": "/temp-queue/r"}, True),
    ("JMSReplyTo IS NULL", {"destination": "/queue/a"}, True),
    ("jmspriority = 4", {}, False),  # identifiers are case-sensitive
    # an empty selector selects everything (JMS)
    ("", {}, True),
    ("  \t", {"a": "1"}, True),
]


@pytest.mark.parametrize(("selector", "headers", "expected"), MATCHES, ids=[row[0] for row in MATCHES])
def test_selector_matches(selector: str, headers: dict[str, str], expected: bool) -> None:
    assert compile_selector(selector)(headers) is expected


# (selector, regex the error message must match)
INVALID = [
    ("a =", r"unexpected end of selector at column 4 \(expected a value\)"),
    ("a = 1 AND AND b = 2", r"unexpected token 'AND' at column 11"),
    ("= 1", r"unexpected token '=' at column 1"),
    ("AND", r"unexpected token 'AND' at column 1"),
    ("NOT", r"unexpected end of selector at column 4"),
    ("()", r"unexpected token '\)' at column 2"),
    ("(a = 1", r"unexpected end of selector at column 7 \(expected '\)'\)"),
    ("a = 1)", r"unexpected token '\)' at column 6"),
    ("a = 1 OR", r"unexpected end of selector at column 9"),
    ("a b", r"unexpected token 'b' at column 3"),
    ("a = 1 = 2", r"unexpected token '=' at column 7"),
    ("a == 1", r"unexpected token '=' at column 4"),
    ("a != 1", r"unexpected character '!' at column 3"),
    ('a = "x"', r"unexpected character '\"' at column 5"),
    ("a = 'abc", r"unterminated string literal at column 5"),
    ("a = 'it''s", r"unterminated string literal at column 5"),
    ("a IN (1, 2)", r"unexpected token '1' at column 7 \(expected a string literal\)"),
    ("a IN ()", r"unexpected token '\)' at column 7"),
    ("a IN ('x'", r"unexpected end of selector at column 10 \(expected ',' or '\)'\)"),
    ("a IN 'x'", r"unexpected token \"'x'\" at column 6 \(expected '\('\)"),
    ("a LIKE b", r"unexpected token 'b' at column 8 \(expected a string pattern\)"),
    ("a LIKE 'x' ESCAPE 'ab'", r"ESCAPE must be a single character at column 19"),
    ("a LIKE 'x' ESCAPE ''", r"ESCAPE must be a single character at column 19"),
    ("a LIKE 'x!' ESCAPE '!'", r"LIKE pattern ends with its escape character at column 8"),
    ("a IS 1", r"unexpected token '1' at column 6 \(expected NULL\)"),
    ("a IS NOT", r"unexpected end of selector at column 9 \(expected NULL\)"),
    ("a NOT = 1", r"unexpected token '=' at column 7 \(expected BETWEEN, IN or LIKE\)"),
    ("a BETWEEN 1 5", r"unexpected token '5' at column 13 \(expected AND\)"),
    ("a BETWEEN 1", r"unexpected end of selector at column 12 \(expected AND\)"),
    ("a = NULL", r"unexpected token 'NULL' at column 5"),
    ("NULL", r"unexpected token 'NULL' at column 1"),
    ("a=1AND b=2", r"malformed number '1A' at column 3"),
    ("a = 1e", r"malformed number '1e' at column 5"),
    ("a = 1.2.3", r"malformed number '1.2.' at column 5"),
    ("a = 0x", r"malformed number '0x' at column 5"),
    ("a = 08", r"invalid number '08' at column 5"),
    ("a = 1.5L", r"malformed number '1.5L' at column 5"),
    ("'abc'", r"expected a condition but found a string at column 1"),
    ("5", r"expected a condition but found a number at column 1"),
    ("a + 1", r"expected a condition but found a number at column 3"),
    ("a = 1 AND 2", r"expected a condition but found a number at column 11"),
    ("NOT 'x'", r"expected a condition but found a string at column 5"),
    ("'a' + 1 = 2", r"expected a number but found a string at column 1"),
    ("TRUE + 1 = 2", r"expected a number but found a condition at column 1"),
    ("-'x' = 1", r"expected a number but found a string at column 2"),
    ("a = 1 + (b = 2)", r"expected a number but found a condition at column 12"),
    ("(" * 40 + "a" + ")" * 40, r"nested too deeply at column 33"),
    ("NOT " * 40 + "a", r"nested too deeply at column 129"),
    ("-" * 40 + "1 = a", r"nested too deeply at column 33"),
    (" + ".join(["a"] * 200) + " = 1", r"too deeply nested at column \d+"),
    ("a = " + "9" * 5000, r"invalid number '9+' at column 5"),
    ("a = 1 # comment", r"unexpected character '#' at column 7"),
    ("a\u00a0= 1", r"unexpected character '\\xa0' at column 2"),
]


@pytest.mark.parametrize(("selector", "message"), INVALID, ids=[row[0][:40] for row in INVALID])
def test_invalid_selector_raises(selector: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        compile_selector(selector)
    assert str(caught.value).startswith("selector: ")
    assert re.search(message, str(caught.value)), str(caught.value)


@pytest.mark.parametrize("selector", [None, 5, b"a = 1", ["a = 1"]])
def test_non_string_selector_raises_selector_error(selector: object) -> None:
    with pytest.raises(SelectorError, match="expected a string"):
        compile_selector(selector)  # type: ignore[arg-type]


def test_selector_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="column 5"):
        compile_selector("a = ")


def test_long_or_chain_is_not_too_deep() -> None:
    # AND/OR runs are gathered into one node, so long lists stay within the depth limit.
    selector = " OR ".join(f"a = {i}" for i in range(500))
    matches = compile_selector(selector)
    assert matches({"a": "499"}) is True
    assert matches({"a": "500"}) is False


def test_like_has_no_catastrophic_backtracking() -> None:
    matches = compile_selector("s LIKE '%a%a%a%a%a%a%a%b%'")
    started = time.perf_counter()
    assert matches({"s": "a" * 20_000}) is False
    assert matches({"s": "a" * 20_000 + "b"}) is True
    assert time.perf_counter() - started < 2


def test_compiled_selectors_are_cached_and_reusable() -> None:
    assert compile_selector("a = 1") is compile_selector("a = 1")
    matches = compile_selector("a = 1")
    assert [matches({"a": value}) for value in ("1", "2", "1")] == [True, False, True]


# --- properties --------------------------------------------------------------------------


def like_reference(pattern: str, value: str, escape: str | None = None) -> bool:
    """A slow but obviously correct LIKE matcher to check the regex translation against."""
    items: list[tuple[str, str]] = []  # ('lit', ch), ('one', ''), ('any', '')
    chars = iter(pattern)
    for ch in chars:
        if ch == escape:
            items.append(("lit", next(chars)))
        else:
            items.append({"%": ("any", ""), "_": ("one", "")}.get(ch, ("lit", ch)))

    @functools.cache
    def match(i: int, j: int) -> bool:
        if i == len(items):
            return j == len(value)
        kind, ch = items[i]
        if kind == "any":
            return match(i + 1, j) or (j < len(value) and match(i, j + 1))
        return j < len(value) and (kind == "one" or value[j] == ch) and match(i + 1, j + 1)

    return match(0, 0)


@given(st.text("ab%_!", max_size=8), st.text("ab%_!", max_size=10), st.sampled_from([None, "!"]))
def test_like_agrees_with_reference(pattern: str, value: str, escape: str | None) -> None:
    quoted = pattern.replace("'", "''")
    selector = f"s LIKE '{quoted}'" + (f" ESCAPE '{escape}'" if escape else "")
    if escape and (len(pattern) - len(pattern.rstrip(escape))) % 2:
        with pytest.raises(SelectorError, match="ends with its escape character"):
            compile_selector(selector)
        return
    assert compile_selector(selector)({"s": value}) is like_reference(pattern, value, escape)


@settings(max_examples=500)
@given(st.text())
def test_arbitrary_text_compiles_or_raises_selector_error(text: str) -> None:
    try:
        matches = compile_selector(text)
    except SelectorError as exc:
        assert re.match(r"selector: .+", str(exc))
    else:
        assert matches({}) in (True, False)


TOKENS = [
    "a", "b", "JMSPriority", "JMSDeliveryMode", "JMSExpiration", "1", "0", "2.5", "1e400", "0x10", "-",
    "'x'", "'1'", "'a%_'", "TRUE", "FALSE", "NULL", "NOT", "AND", "OR", "BETWEEN", "IN", "LIKE", "ESCAPE",
    "IS", "=", "<>", "<", ">", "<=", ">=", "+", "*", "/", "(", ")", ",", "'!'",
]  # fmt: skip
VALUES = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["1", "-3", "2.5", "0", "1e400", "-1e400", "true", "FALSE", "nan", "", "x", "9" * 5000]),
)
HEADERS = st.dictionaries(st.sampled_from(["a", "b", "priority", "persistent", "expires"]) | st.text(), VALUES)


@settings(max_examples=1000)
@given(st.lists(st.sampled_from(TOKENS), max_size=14).map(" ".join), HEADERS)
def test_token_soup_compiles_or_raises_and_never_raises_at_match_time(text: str, headers: dict) -> None:
    try:
        matches = compile_selector(text)
    except SelectorError as exc:
        assert str(exc).startswith("selector: ")
        return
    result = matches(headers)
    assert result in (True, False)
    if text.strip():  # a selector and its negation are never both TRUE (both may be UNKNOWN)
        assert not (result and compile_selector(f"NOT ({text})")(headers))


@settings(max_examples=300)
@given(st.sampled_from([row[0] for row in MATCHES]), st.dictionaries(st.text(), st.text()) | HEADERS)
def test_compiled_selector_never_raises_for_any_headers(selector: str, headers: dict[str, str]) -> None:
    assert compile_selector(selector)(headers) in (True, False)
