"""Compiled SQL92 selector nodes (RocketMQ's ``filter/expression``), evaluated against message properties.

Values follow Java's types: ``None`` (null), ``bool``, ``int`` (Integer), :class:`JavaLong` (Long), ``float``
(Double) and ``str``. Properties are always strings; a comparison converts a string to the other side's
type as RocketMQ's ``ComparisonExpression.__compare`` does (``CONVERT_STRING_EXPRESSIONS`` is always on).
A conversion that fails raises :class:`EvaluationError`, which fails the whole evaluation: the message
does not match, even under an OR, exactly as the broker's catch-all does in Java.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any


class FilterError(Exception):
    """The expression does not compile (Java's MQFilterException); the message says why."""


Properties = Mapping[str, str]


class EvaluationError(Exception):
    """A value could not be converted or compared; the message does not match."""


class JavaLong(int):
    """An integer literal outside Integer's range (Java ``Long``); plain ``int`` stands for ``Integer``."""

    __slots__ = ()


_INT_BITS = {int: 32, JavaLong: 64}
# Integer.valueOf / Long.valueOf: an optional sign and decimal digits (Java accepts Unicode digits too).
_JAVA_INTEGER = re.compile(r"[+-]?\d+")
# Double.valueOf without hex floats: surrounding control characters and spaces are trimmed.
_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)", re.ASCII)


def _to_integer(s: str, kind: type[int]) -> int:
    if not _JAVA_INTEGER.fullmatch(s):
        raise EvaluationError(f'For input string: "{s}"')
    value = int(s)
    bits = _INT_BITS[kind]
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise EvaluationError(f'For input string: "{s}"')
    return kind(value)


def _to_double(s: str) -> float:
    trimmed = s.strip("".join(map(chr, range(33))))
    if not _JAVA_DOUBLE.fullmatch(trimmed):
        raise EvaluationError(f'For input string: "{s}"')
    return float(trimmed.rstrip("fFdD").replace("Infinity", "inf"))


def _sign(a: Any, b: Any) -> int:
    if type(a) is float:
        # Double.compareTo: NaN above everything (and equal to itself), -0.0 below 0.0.
        if math.isnan(a) or math.isnan(b):
            return int(math.isnan(a)) - int(math.isnan(b))
        if a == b == 0.0:
            return int(math.copysign(1, a) > 0) - int(math.copysign(1, b) > 0)
    return (a > b) - (a < b)


def java_compare(lv: Any, rv: Any) -> int:
    """``ComparisonExpression.__compare``: convert the two values to one type, then ``compareTo``.

    Pairs Java cannot convert compare as -1; a string that does not parse raises EvaluationError.
    """
    lc, rc = type(lv), type(rv)
    if lc is not rc:
        if lc is bool:
            if rc is str:
                raise EvaluationError("class java.lang.Boolean cannot be cast to class java.lang.String")
            return -1
        if lc is int or lc is JavaLong:
            if rc is float:
                lv = float(lv)
            elif rc is str:
                rv = _to_integer(rv, lc)
            elif rc is not int and rc is not JavaLong:
                return -1
        elif lc is float:
            if rc is int or rc is JavaLong:
                rv = float(rv)
            elif rc is str:
                rv = _to_double(rv)
            else:
                return -1
        elif lc is str:
            if rc is bool:
                lv = lv.lower() == "true"
            elif rc is float:
                lv = _to_double(lv)
            elif rc is int or rc is JavaLong:
                lv = _to_integer(lv, rc)
            else:
                return -1
        else:
            return -1
    return _sign(lv, rv)


class Expression:
    """A node; ``evaluate`` returns a value or None (SQL's unknown)."""

    __slots__ = ()

    #: A literal (Java's ConstantExpression); ``value`` holds it.
    constant = False
    #: Yields a boolean (Java's BooleanExpression), so it can stand in AND, OR, NOT and at the top.
    boolean = False

    def evaluate(self, props: Properties) -> Any:
        raise NotImplementedError

    def matches(self, props: Properties) -> bool:
        """True only when the expression evaluates to TRUE; an evaluation error is no match."""
        try:
            return self.evaluate(props) is True
        except EvaluationError:
            return False


@dataclass(frozen=True, slots=True)
class Constant(Expression):
    """A string or numeric literal."""

    value: Any
    constant = True

    def evaluate(self, props: Properties) -> Any:
        return self.value

    def __str__(self) -> str:
        if type(self.value) is str:
            return "'" + self.value.replace("'", "''") + "'"
        return str(self.value)


@dataclass(frozen=True, slots=True)
class BooleanConstant(Expression):
    """TRUE, FALSE or NULL (Java's BooleanConstantExpression: a literal that is also boolean)."""

    value: bool | None
    constant = True
    boolean = True

    def evaluate(self, props: Properties) -> Any:
        return self.value

    def __str__(self) -> str:
        return "NULL" if self.value is None else str(self.value).upper()


@dataclass(frozen=True, slots=True)
class Property(Expression):
    """A message property by name (user properties and system ones such as TAGS and KEYS)."""

    name: str

    def evaluate(self, props: Properties) -> Any:
        return props.get(self.name)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Negate(Expression):
    """Unary minus: numbers only; anything else is NULL."""

    operand: Expression

    def evaluate(self, props: Properties) -> Any:
        value = self.operand.evaluate(props)
        if type(value) in (int, JavaLong, float):
            return type(value)(-value)
        return None


@dataclass(frozen=True, slots=True)
class BooleanCast(Expression):
    """A bare property where a boolean is expected: TRUE only for a boolean TRUE value (never a string)."""

    operand: Expression
    boolean = True

    def evaluate(self, props: Properties) -> Any:
        value = self.operand.evaluate(props)
        if value is None:
            return None
        return value if type(value) is bool else False


@dataclass(frozen=True, slots=True)
class Not(Expression):
    operand: Expression
    boolean = True

    def evaluate(self, props: Properties) -> Any:
        value = self.operand.evaluate(props)
        return None if value is None else not value


@dataclass(frozen=True, slots=True)
class And(Expression):
    left: Expression
    right: Expression
    boolean = True

    def evaluate(self, props: Properties) -> Any:
        lv = self.left.evaluate(props)
        if lv is False:
            return False
        rv = self.right.evaluate(props)
        if rv is False:
            return False
        return None if lv is None or rv is None else True


@dataclass(frozen=True, slots=True)
class Or(Expression):
    left: Expression
    right: Expression
    boolean = True

    def evaluate(self, props: Properties) -> Any:
        lv = self.left.evaluate(props)
        if lv is True:
            return True
        rv = self.right.evaluate(props)
        if rv is True:
            return True
        return None if lv is None or rv is None else False


@dataclass(frozen=True, slots=True)
class Equal(Expression):
    """``=`` and IS NULL: NULL against a value is unknown, a value against NULL is FALSE."""

    left: Expression
    right: Expression
    boolean = True

    def evaluate(self, props: Properties) -> Any:
        lv = self.left.evaluate(props)
        rv = self.right.evaluate(props)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is rv or (type(lv) is type(rv) and lv == rv):
            return True
        return java_compare(lv, rv) == 0


# Outcome of a compareTo sign for each ordering operator.
ORDERINGS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


@dataclass(frozen=True, slots=True)
class Ordering(Expression):
    """``>``, ``>=``, ``<``, ``<=``; two strings compare as numbers (Double) or fail."""

    op: str
    left: Expression
    right: Expression
    boolean = True

    def evaluate(self, props: Properties) -> Any:
        lv = self.left.evaluate(props)
        if lv is None:
            return None
        rv = self.right.evaluate(props)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            lv, rv = _to_double(lv), _to_double(rv)
        return ORDERINGS[self.op](java_compare(lv, rv))


@dataclass(frozen=True, slots=True)
class In(Expression):
    """``prop [NOT] IN ('a', 'b')``: string values only."""

    operand: Property
    values: Collection[str]
    negated: bool
    boolean = True

    def evaluate(self, props: Properties) -> Any:
        value = self.operand.evaluate(props)
        if type(value) is not str:
            return None
        return (value in self.values) != self.negated
