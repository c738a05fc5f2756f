"""Filtering by expression (RocketMQ's ``filter`` module): SQL92 selectors evaluated over message properties.

``compile_expression(type, text)`` is FilterFactory + FilterSpi.compile: SQL92 is the one type a broker
knows besides TAG, which the broker matches by tag hash and never compiles.
"""

from .expression import Expression, FilterError

TAG = "TAG"
SQL92 = "SQL92"

__all__ = ["SQL92", "TAG", "Expression", "FilterError", "compile_expression", "is_tag_type"]


def is_tag_type(expression_type: str | None) -> bool:
    """ExpressionType.isTagType: no type, empty, or TAG."""
    return not expression_type or expression_type == TAG


def compile_expression(expression_type: str, expression: str | None) -> Expression:
    """The compiled filter; FilterError when the type is unknown or the text does not compile."""
    if expression_type != SQL92:
        raise FilterError(f"unknown expression type {expression_type}")
    if expression is None:
        raise FilterError("Invalid MessageSelector. the expression is null")
    from .selector_parser import parse  # the grammar (lark) is loaded by the first SQL92 subscription

    return parse(expression)
