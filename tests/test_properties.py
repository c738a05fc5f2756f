"""Property test: every properties file we write reads back as exactly what was written.

A value (or key) holding a newline, ``=``, ``:``, ``\\``, ``#``, ``!``, blanks at either end or any
Unicode character, astral ones included, must never become another key: the CVE-2023-37582 class.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import format_properties, parse_properties

# Characters the properties syntax gives a meaning to, mixed with arbitrary Unicode (surrogates excluded:
# they cannot be encoded; the parser refuses unpaired ones).
_HOSTILE = st.sampled_from([*" \t\f\r\n\v=:\\#!u\x00\x7f\x85\u2028\u00e9\U0001f600", "\\u0041", "\r\n"])
_TEXT = st.lists(st.one_of(_HOSTILE, st.characters(exclude_categories=("Cs",))), max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TEXT, _TEXT, max_size=8))
def test_written_properties_read_back_unchanged(props: dict[str, str]) -> None:
    text = format_properties(props)
    assert parse_properties(text) == props
    # One line per key, all printable ASCII: nothing a value holds can start a line of its own.
    assert text.count("\n") == len(props)
    assert all(" " <= c <= "~" for c in text.replace("\n", ""))


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(_TEXT, _TEXT, max_size=4), _TEXT, _TEXT)
def test_a_hostile_value_never_adds_a_key(props: dict[str, str], key: str, value: str) -> None:
    injected = {**props, key: value + "\nkvConfigPath=../p/kv.json\ntls.server.mode=disabled"}
    assert parse_properties(format_properties(injected)).keys() == injected.keys()
