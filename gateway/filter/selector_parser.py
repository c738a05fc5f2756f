"""The SQL92 selector grammar RocketMQ 4.9.8 accepts (``filter/parser/SelectorParser.jj``), compiled to
:mod:`gateway.filter.expression` nodes with the same build-time checks Java makes.

Accepted: ``=``, ``<>``, ``>``, ``>=``, ``<``, ``<=``, ``[NOT] BETWEEN x AND y``, ``[NOT] IN ('a', ...)``,
``IS [NOT] NULL``, ``AND``, ``OR``, ``NOT``, unary ``+``/``-``, parentheses; string literals in single
quotes (``''`` escapes a quote), integers (``L`` suffix allowed), decimals, TRUE, FALSE, NULL; ``--`` and
``/* */`` comments. Keywords are case-insensitive, property names are not.
"""

from __future__ import annotations

from functools import lru_cache

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import LarkError

from .expression import (
    And,
    BooleanCast,
    BooleanConstant,
    Constant,
    Equal,
    Expression,
    FilterError,
    JavaLong,
    Negate,
    Not,
    Or,
    Ordering,
    Property,
    java_compare,
)
from .expression import In as InExpression

GRAMMAR = r"""
?start: or_expr                                   -> selector

?or_expr: and_expr
    | or_expr OR and_expr                          -> or_
?and_expr: equality
    | and_expr AND equality                        -> and_
?equality: comparison
    | equality "=" comparison                      -> eq
    | equality "<>" comparison                     -> ne
    | equality IS NULL                             -> is_null
    | equality IS NOT NULL                         -> is_not_null
?comparison: unary
    | comparison (GT | GE | LT | LE) unary         -> ordering
    | comparison BETWEEN unary AND unary           -> between
    | comparison NOT BETWEEN unary AND unary       -> not_between
    | comparison IN "(" strings ")"                -> in_
    | comparison NOT IN "(" strings ")"            -> not_in
?unary: primary
    | "+" unary
    | "-" unary                                    -> negate
    | NOT unary                                    -> not_
?primary: literal
    | ID                                           -> prop
    | "(" or_expr ")"
strings: STRING ("," STRING)*
literal: STRING                                    -> string
    | DECIMAL                                      -> decimal
    | FLOAT                                        -> floating
    | TRUE                                         -> true
    | FALSE                                        -> false
    | NULL                                         -> null

NOT: "NOT"i
AND: "AND"i
OR: "OR"i
BETWEEN: "BETWEEN"i
IN: "IN"i
TRUE: "TRUE"i
FALSE: "FALSE"i
NULL: "NULL"i
IS: "IS"i
GT: ">"
GE: ">="
LT: "<"
LE: "<="
FLOAT.2: /[0-9]+\.[0-9]*([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+/
DECIMAL: /0|[1-9][0-9]*[lL]?/
STRING: /'([^']|'')*'/s
ID: /[a-z_$][a-z0-9_$]*/i

LINE_COMMENT.3: /--[^\n\r]*(\r\n|\n|\r)/
BLOCK_COMMENT.3: /\/\*[^*]*\*+([^*\/][^*]*\*+)*\//
%ignore LINE_COMMENT
%ignore BLOCK_COMMENT
%ignore /[ \t\n\r\f]+/
"""

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MAX = (1 << 63) - 1
_DOUBLE_MIN = 5e-324  # Double.MIN_VALUE: RocketMQ rejects smaller literals, 0.0 included


def _boolean(e: Expression) -> Expression:
    """asBooleanExpression: a bare property is cast; any other non-boolean is an error."""
    if e.boolean:
        return e
    if isinstance(e, Property):
        return BooleanCast(e)
    raise FilterError(f"Expression will not result in a boolean value: {e}")


def _check_ordering_operand(e: Expression) -> None:
    if (e.constant and not _is_number(e.value)) or (not e.constant and e.boolean):
        raise FilterError(f"Value '{e}' cannot be compared.")


def _check_equality(left: Expression, right: Expression) -> None:
    for e in (left, right):
        if e.constant and e.value is None:
            raise FilterError(f"'{e}' cannot be compared.")
    if left.constant and right.constant and left.boolean and not right.boolean:
        raise FilterError(f"'{left}' cannot be compared with '{right}'")


def _is_number(value: object) -> bool:
    return type(value) in (int, JavaLong, float)


def _ordering(op: str, left: Expression, right: Expression) -> Ordering:
    _check_ordering_operand(left)
    _check_ordering_operand(right)
    return Ordering(op, left, right)


def _in(left: Expression, values: list[str], negated: bool) -> InExpression:
    if not isinstance(left, Property):
        raise FilterError(f"Expected a property for In expression, got: {left}")
    # Java uses a HashSet from five values on; membership is the same either way.
    return InExpression(left, frozenset(values), negated)


@v_args(inline=True)
class _Builder(Transformer[Token, Expression]):
    """Builds nodes bottom-up while the LALR parser reduces (no parse tree is kept)."""

    def selector(self, e: Expression) -> Expression:
        return _boolean(e)

    def or_(self, left: Expression, _op: Token, right: Expression) -> Expression:
        return Or(_boolean(left), _boolean(right))

    def and_(self, left: Expression, _op: Token, right: Expression) -> Expression:
        return And(_boolean(left), _boolean(right))

    def eq(self, left: Expression, right: Expression) -> Expression:
        _check_equality(left, right)
        return Equal(left, right)

    def ne(self, left: Expression, right: Expression) -> Expression:
        _check_equality(left, right)
        return Not(Equal(left, right))

    def is_null(self, left: Expression, _is: Token, _null: Token) -> Expression:
        return Equal(left, BooleanConstant(None))

    def is_not_null(self, left: Expression, _is: Token, _not: Token, _null: Token) -> Expression:
        return Not(Equal(left, BooleanConstant(None)))

    def ordering(self, left: Expression, op: Token, right: Expression) -> Expression:
        return _ordering(str(op), left, right)

    def between(self, value: Expression, _kw: Token, low: Expression, _and: Token, high: Expression) -> Expression:
        if low.constant and high.constant:
            if low.value is None or high.value is None:
                raise FilterError("Illegal values of between, values can not be null!")
            try:
                order = java_compare(high.value, low.value)
            except Exception as e:
                raise FilterError(str(e)) from e
            if order < 0:
                raise FilterError(
                    f"Illegal values of between, left value({low.value}) must less than or equal to "
                    f"right value({high.value})"
                )
        return And(_ordering(">=", value, low), _ordering("<=", value, high))

    def not_between(
        self, value: Expression, _not: Token, _kw: Token, low: Expression, _and: Token, high: Expression
    ) -> Expression:
        return Or(_ordering("<", value, low), _ordering(">", value, high))

    def in_(self, left: Expression, _kw: Token, values: list[str]) -> Expression:
        return _in(left, values, False)

    def not_in(self, left: Expression, _not: Token, _kw: Token, values: list[str]) -> Expression:
        return _in(left, values, True)

    def negate(self, e: Expression) -> Expression:
        return Negate(e)

    def not_(self, _kw: Token, e: Expression) -> Expression:
        return Not(_boolean(e))

    def prop(self, name: Token) -> Expression:
        return Property(str(name))

    @v_args(inline=False)
    def strings(self, tokens: list[Token]) -> list[str]:
        return [_unquote(t) for t in tokens]

    def string(self, t: Token) -> Expression:
        return Constant(_unquote(t))

    def decimal(self, t: Token) -> Expression:
        value = int(t.rstrip("lL"))
        if value > _LONG_MAX:
            raise FilterError(f'For input string: "{t}"')
        return Constant(value if _INT_MIN <= value <= _INT_MAX else JavaLong(value))

    def floating(self, t: Token) -> Expression:
        value = float(t)
        if value == float("inf") or value < _DOUBLE_MIN:
            raise FilterError(f"{t} is out of Double's range")
        return Constant(value)

    def true(self, _t: Token) -> Expression:
        return BooleanConstant(True)

    def false(self, _t: Token) -> Expression:
        return BooleanConstant(False)

    def null(self, _t: Token) -> Expression:
        return BooleanConstant(None)


def _unquote(t: Token) -> str:
    return t[1:-1].replace("''", "'")


# The basic lexer takes the longest match over all terminals, as JavaCC does: "andx" is a name, not AND + x.
_PARSER = Lark(GRAMMAR, parser="lalr", lexer="basic", transformer=_Builder(), maybe_placeholders=False)


@lru_cache(maxsize=256)
def _parse(sql: str) -> Expression | FilterError:
    # Failures are cached too (as Java's PARSE_CACHE does), so a bad expression sent with every pull
    # costs one dictionary lookup.
    try:
        return _PARSER.parse(sql)
    except FilterError as e:
        return e
    except LarkError as e:
        # Lark's messages go on with a picture of the input; the first line says it.
        return FilterError(f"Invalid MessageSelector. {str(e).splitlines()[0]}")


def parse(sql: str) -> Expression:
    """Compile ``sql``; raises FilterError. Results are cached by text."""
    result = _parse(sql)
    if isinstance(result, FilterError):
        raise result
    return result
