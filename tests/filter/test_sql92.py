"""The SQL92 selector language as RocketMQ 4.9.8 compiles and evaluates it (cases checked against
SelectorParser.jj and filter/expression/*.java)."""

from __future__ import annotations

import pytest

from gateway.filter import FilterError, compile_expression, is_tag_type
from gateway.filter.expression import JavaLong, java_compare
from gateway.filter.selector_parser import parse

PROPS = {
    "a": "5",
    "s": "abc",
    "f": "2.5",
    "big": "9999999999",
    "t": "TRUE",
    "quote": "it's",
    "TAGS": "TagA",
    "KEYS": "k1 k2",
    "neg": "-3",
    "ws": " 7 ",
}


@pytest.mark.parametrize(
    ("sql", "matches"),
    [
        ("a = 5", True),
        ("a = 5.0", True),  # Integer-looking string against a Double: converted
        ("a <> 5", False),
        ("a <> 6", True),
        ("a > 3 AND a < 10", True),
        ("a >= 5 and a <= 5", True),
        ("a BETWEEN 1 AND 10", True),
        ("a BETWEEN 6 AND 10", False),
        ("a NOT BETWEEN 6 AND 10", True),
        ("s IN ('x', 'abc')", True),
        ("s NOT IN ('x', 'abc')", False),
        ("s in ('a', 'b', 'c', 'd', 'e', 'abc')", True),
        ("missing IS NULL", True),
        ("missing IS NOT NULL", False),
        ("a IS NOT NULL", True),
        ("TAGS = 'TagA'", True),
        ("TAGS IN ('TagB', 'TagC')", False),
        ("KEYS = 'k1 k2'", True),
        ("quote = 'it''s'", True),
        ("s = 'abc' OR missing = 1", True),
        ("missing = 1 OR s = 'abc'", True),
        ("missing = 1", False),  # NULL compared: unknown, not a match
        ("NOT (missing = 1)", False),  # NOT unknown is unknown
        ("missing > 1 OR TRUE", True),
        ("missing > 1 AND FALSE", False),
        ("f > 2", False),  # "2.5" cannot become an Integer: the comparison fails, no match
        ("f > 2.4", True),
        ("big > 5000000000", True),  # a Long literal parses the property as a Long
        ("big = 5", False),  # Integer.valueOf("9999999999") fails
        ("neg < -2", True),
        ("neg = -3", True),
        ("ws = 7", False),  # Integer.valueOf does not trim
        ("ws > 6.5", True),  # Double.valueOf does
        ("a > '4'", None),  # string constants cannot be ordered: compile error, see below
        ("t = TRUE", True),  # Boolean.valueOf ignores case
        ("a = TRUE", False),
        ("TRUE", True),
        ("FALSE", False),
        ("NULL", False),
        ("a", False),  # a property as a boolean: strings are never TRUE
        ("NOT a", True),
        ("s = 'abc' AND a = 'x5'", False),
        ("s = 5 OR a = 5", False),  # "abc" as an Integer throws: the whole expression fails
        ("a = 5 OR s = 5", True),  # ... unless OR already decided
        ("-a = -5", False),  # negating a string property is NULL
        ("(a = 5)", True),
        ("a = 5 -- trailing comment\n", True),
        ("a = /* inline */ 5", True),
        ("A = 5", False),  # property names are case-sensitive
        ("a = 5 and s = 'abc'", True),  # keywords are not
        ("a = 5L", True),
    ],
)
def test_evaluation(sql: str, matches: bool | None) -> None:
    if matches is None:
        with pytest.raises(FilterError):
            parse(sql)
        return
    assert parse(sql).matches(PROPS) is matches


@pytest.mark.parametrize(
    "sql",
    [
        "",
        "a =",
        "a = 5 OR",
        "a != 5",  # not SQL92
        "a == 5",
        "a = 05",
        "a = 5.5.5",
        "a > 0.0",  # below Double.MIN_VALUE: RocketMQ rejects it
        "a > 1e400",
        "a = 9223372036854775808",
        "a = NULL",
        "TRUE = 1",
        "a > 'x'",
        "a > TRUE",
        "(a = 1) > 2",
        "a BETWEEN 5 AND 1",
        "a BETWEEN NULL AND 1",
        "a IN (1, 2)",
        "5 IN ('5')",
        "5",
        "'x'",
        "a + 1 = 2",
        "a LIKE 'x%'",
        "andx = 1 or",
        "a = 5 -- a comment needs its newline",
        "a = 'unterminated",
    ],
)
def test_rejected(sql: str) -> None:
    with pytest.raises(FilterError):
        parse(sql)


def test_keywords_are_whole_words() -> None:
    # JavaCC takes the longest match: "andx" and "ornament" are names, not AND / OR.
    assert parse("andx = 1 OR ornament = 2").matches({"ornament": "2"})
    with pytest.raises(FilterError):
        parse("a = 1 andx = 2")


def test_literal_types() -> None:
    assert type(parse("a = 2147483647").right.value) is int  # type: ignore[attr-defined]
    assert type(parse("a = 2147483648").right.value) is JavaLong  # type: ignore[attr-defined]
    assert type(parse("a = 5L").right.value) is int  # type: ignore[attr-defined]  # Integer again when it fits
    assert parse("a = .5e1").matches({"a": "5"})


def test_java_compare_edge_cases() -> None:
    assert java_compare(1, 1.0) == 0
    assert java_compare(float("nan"), 1.0) == 1
    assert java_compare(-0.0, 0.0) == -1
    assert java_compare(True, 1) == -1  # Boolean against a number: incomparable, -1
    assert java_compare("TRUE", True) == 0


def test_compile_expression_types() -> None:
    assert is_tag_type(None) and is_tag_type("") and is_tag_type("TAG") and not is_tag_type("SQL92")
    assert compile_expression("SQL92", "a = 1").matches({"a": "1"})
    with pytest.raises(FilterError):
        compile_expression("GROOVY", "a = 1")
    with pytest.raises(FilterError):
        compile_expression("SQL92", None)


def test_compiled_once() -> None:
    assert parse("x = 'cached'") is parse("x = 'cached'")
    with pytest.raises(FilterError) as first:
        parse("x = ")
    with pytest.raises(FilterError) as second:
        parse("x = ")
    assert first.value is second.value
