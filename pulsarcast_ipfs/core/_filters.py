"""Event attributes and content filters (ScoutSubs' predicates on our trees).

Theory of operation
-------------------
An event may carry **attributes**: a small map from names to a string or a finite
number (:func:`validate_attributes`). A subscription may carry a **filter**: a
conjunction of conditions over those attributes (:func:`parse_filter`), and the
application receives exactly the events the filter :func:`matches`.

Attributes (the rules every node checks; docs/protocol-notes.md "Attributes")
    * at most :data:`MAX_ATTRIBUTES` (16) names;
    * a name matches ``[A-Za-z_][A-Za-z0-9_]*``, 1 to :data:`MAX_NAME_LENGTH` (32)
      characters, and is none of the filter keywords ``and``, ``in``, ``between``
      (in any case), so that every attribute can be named in a filter;
    * a value is a ``str`` of at most :data:`MAX_STRING_LENGTH` (256) characters of
      valid Unicode (no lone surrogates; dag-cbor text is UTF-8), or a number: an
      ``int`` with ``|n| <= 2**53`` (exact in JSON and JavaScript) or a finite
      ``float`` (no NaN, no infinity). A ``bool`` is *not* a number.

Filter grammar (docs/http-api.md "Filters")::

    filter     = "*" | condition { "and" condition }
    condition  = name op value
               | name "in" "[" value { "," value } "]"
               | name "between" value "and" value
    op         = "=" | "!=" | "<" | "<=" | ">" | ">="
    value      = string | number
    string     = '"' { char | escape } '"'  |  "'" { char | escape } "'"
    escape     = "\\" ( '"' | "'" | "\\" | "n" | "t" | "r" | "u" 4*hexdigit )
    number     = [ "-" ] digits [ "." digits ] [ ( "e" | "E" ) [ "+" | "-" ] digits ]

Keywords are case-insensitive; names are case-sensitive; whitespace separates
tokens freely. ``*`` is the filter that matches every event (what a subscription
without a filter receives). A filter has at most :data:`MAX_CONDITIONS` conditions,
an ``in`` list at most :data:`MAX_IN_VALUES` values of one kind (all strings or all
numbers), ``between``'s bounds are of one kind with ``low <= high`` (both
inclusive), and a filter's text is at most :data:`MAX_FILTER_LENGTH` characters.
A number written with ``.`` or an exponent is a float, else an int.

Matching: a condition matches only when the attribute is **present** and of the
same kind as the condition's value(s) (a string or a number). A missing attribute,
or one of the other kind, never matches — not even ``!=``: ``user != "bob"``
selects the events *with* a ``user`` that is not ``"bob"``. Numbers compare by
value (``12 = 12.0``); strings compare by Unicode code points.

Canonical form: :func:`parse_filter` sorts the conditions (by name, operator,
values), removes duplicates, and sorts and deduplicates ``in`` lists;
:func:`render_filter` writes the canonical text (double quotes, lowercase
keywords, single spaces), so ``parse_filter(render_filter(f)) == f``.

Summaries: a relay keeps, per neighbour, a bounded disjunction
of filters. :func:`covers` says whether every event one filter matches is matched
by another (sound: ``True`` is always right; it may say ``False`` in rare corner
cases where covering holds). :func:`merge` reduces any number of filters to at most
``bound`` filters that match every event any input matches — it may **widen** (a
false positive: an event sent where nobody wants it), it never **narrows** (a
false negative). Widening drops conditions on attributes two merged filters do not
both constrain and replaces two constraints on an attribute by their hull (union
of value sets, or the smallest interval holding both).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from ._errors import FilterSyntaxError, InvalidAttributes

__all__ = [
    "MATCH_ALL",
    "MAX_ATTRIBUTES",
    "MAX_CONDITIONS",
    "MAX_FILTER_LENGTH",
    "MAX_IN_VALUES",
    "MAX_NAME_LENGTH",
    "MAX_STRING_LENGTH",
    "AttributeValue",
    "Between",
    "Comparison",
    "Condition",
    "Filter",
    "OneOf",
    "covers",
    "matches",
    "matches_any",
    "merge",
    "parse_filter",
    "parse_summary",
    "render_filter",
    "validate_attributes",
]

MAX_ATTRIBUTES: Final = 16
MAX_NAME_LENGTH: Final = 32
MAX_STRING_LENGTH: Final = 256
MAX_INT: Final = 2**53
MAX_CONDITIONS: Final = 32
MAX_IN_VALUES: Final = 32
MAX_FILTER_LENGTH: Final = 4096

AttributeValue = str | int | float
"""A value of an attribute: a string or a finite number (never a bool)."""

Op = Literal["=", "!=", "<", "<=", ">", ">="]
_OPS: Final[tuple[Op, ...]] = ("=", "!=", "<", "<=", ">", ">=")
_KEYWORDS: Final = frozenset({"and", "in", "between"})
_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


# -- attributes -----------------------------------------------------------------------------


def _value_problem(value: object) -> str | None:
    """Why ``value`` is no valid attribute (or filter) value, or None."""
    if isinstance(value, bool):
        return "a bool is not a number (use 0/1 or a string)"
    if isinstance(value, int):
        if abs(value) > MAX_INT:
            return f"the integer is beyond ±2**53 ({MAX_INT})"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "the number is not finite (NaN or infinity)"
    if isinstance(value, str):
        if len(value) > MAX_STRING_LENGTH:
            return f"the string is longer than {MAX_STRING_LENGTH} characters"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "the string is not valid Unicode (a lone surrogate)"
        return None
    return f"a value must be a string or a finite number, not {type(value).__name__}"


def _name_problem(name: object) -> str | None:
    if not isinstance(name, str):
        return f"a name must be a string, not {type(name).__name__}"
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        return f"a name has 1 to {MAX_NAME_LENGTH} characters"
    if not _NAME_RE.match(name):
        return "a name is a letter or '_' followed by letters, digits or '_'"
    if name.lower() in _KEYWORDS:
        return "a name may not be a filter keyword (and, in, between)"
    return None


def validate_attributes(attributes: object) -> dict[str, AttributeValue]:
    """Check an attribute map against the rules above; the map, as a plain ``dict``.

    Raises :class:`InvalidAttributes` saying which name or value is wrong (the
    descriptor decoder turns it into a :class:`DescriptorError` for network input).
    """
    if not isinstance(attributes, Mapping):
        raise InvalidAttributes(f"attributes must be a map, not {type(attributes).__name__}")
    if len(attributes) > MAX_ATTRIBUTES:
        raise InvalidAttributes(f"at most {MAX_ATTRIBUTES} attributes, got {len(attributes)}")
    out: dict[str, AttributeValue] = {}
    for name, value in attributes.items():
        if (problem := _name_problem(name)) is not None:
            raise InvalidAttributes(f"attribute name {name!r}: {problem}")
        if (problem := _value_problem(value)) is not None:
            raise InvalidAttributes(f"attribute {name!r}: {problem}")
        out[name] = value
    return out


# -- filters: the data ----------------------------------------------------------------------


def _kind(value: AttributeValue) -> str:
    return "s" if isinstance(value, str) else "n"


def _value_key(value: AttributeValue) -> tuple[str, AttributeValue]:
    return (_kind(value), value)


def _check_filter_name(name: object) -> None:
    if (problem := _name_problem(name)) is not None:
        raise InvalidAttributes(f"filter name {name!r}: {problem}")


def _check_filter_value(value: object, where: str) -> None:
    if (problem := _value_problem(value)) is not None:
        raise InvalidAttributes(f"{where}: {problem}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """``name OP value``."""

    name: str
    op: Op
    value: AttributeValue

    def __post_init__(self) -> None:
        _check_filter_name(self.name)
        if self.op not in _OPS:
            raise InvalidAttributes(f"unknown operator {self.op!r}")
        _check_filter_value(self.value, f"value of {self.name!r}")

    def sort_key(self) -> tuple[object, ...]:
        return (self.name, _OPS.index(self.op), 0, _value_key(self.value))


@dataclass(frozen=True, slots=True, kw_only=True)
class OneOf:
    """``name in [v1, v2, ...]``: values sorted, distinct, all of one kind."""

    name: str
    values: tuple[AttributeValue, ...]

    def __post_init__(self) -> None:
        _check_filter_name(self.name)
        if not 1 <= len(self.values) <= MAX_IN_VALUES:
            raise InvalidAttributes(f"an 'in' list has 1 to {MAX_IN_VALUES} values")
        for v in self.values:
            _check_filter_value(v, f"value of {self.name!r}")
        if len({_kind(v) for v in self.values}) != 1:
            raise InvalidAttributes("an 'in' list's values are all strings or all numbers")
        canonical = tuple(sorted(set(self.values), key=_value_key))
        if canonical != self.values or len(canonical) != len(self.values):
            object.__setattr__(self, "values", canonical)

    def sort_key(self) -> tuple[object, ...]:
        return (self.name, len(_OPS), 0, tuple(_value_key(v) for v in self.values))


@dataclass(frozen=True, slots=True, kw_only=True)
class Between:
    """``name between low and high`` (both inclusive; ``low <= high``, one kind)."""

    name: str
    low: AttributeValue
    high: AttributeValue

    def __post_init__(self) -> None:
        _check_filter_name(self.name)
        _check_filter_value(self.low, f"lower bound of {self.name!r}")
        _check_filter_value(self.high, f"upper bound of {self.name!r}")
        if _kind(self.low) != _kind(self.high):
            raise InvalidAttributes("'between' bounds are both strings or both numbers")
        if self.low > self.high:  # type: ignore[operator]
            raise InvalidAttributes("'between' needs low <= high")

    def sort_key(self) -> tuple[object, ...]:
        return (self.name, len(_OPS) + 1, 0, (_value_key(self.low), _value_key(self.high)))


Condition = Comparison | OneOf | Between


@dataclass(frozen=True, slots=True, kw_only=True)
class Filter:
    """A conjunction of conditions, in canonical order; no conditions = :data:`MATCH_ALL`."""

    conditions: tuple[Condition, ...] = field(default=())

    def __post_init__(self) -> None:
        if len(self.conditions) > MAX_CONDITIONS:
            raise InvalidAttributes(f"a filter has at most {MAX_CONDITIONS} conditions")
        seen: dict[tuple[object, ...], Condition] = {}
        for c in self.conditions:
            if not isinstance(c, Comparison | OneOf | Between):
                raise InvalidAttributes(f"not a filter condition: {c!r}")
            seen.setdefault(c.sort_key(), c)
        canonical = tuple(seen[k] for k in sorted(seen))
        if canonical != self.conditions:
            object.__setattr__(self, "conditions", canonical)

    @property
    def names(self) -> frozenset[str]:
        """The attributes this filter constrains."""
        return frozenset(c.name for c in self.conditions)

    def __str__(self) -> str:
        return render_filter(self)


MATCH_ALL: Final = Filter()
"""The filter ``*``: matches every event, with or without attributes."""


# -- matching -------------------------------------------------------------------------------


def _compare(op: Op, a: AttributeValue, b: AttributeValue) -> bool:
    if op == "=":
        return a == b
    if op == "!=":
        return a != b
    if op == "<":
        return a < b  # type: ignore[operator]
    if op == "<=":
        return a <= b  # type: ignore[operator]
    if op == ">":
        return a > b  # type: ignore[operator]
    return a >= b  # type: ignore[operator]


def _condition_matches(c: Condition, attributes: Mapping[str, AttributeValue]) -> bool:
    if c.name not in attributes:
        return False  # a missing attribute never matches (not even !=)
    got = attributes[c.name]
    if isinstance(got, bool):
        return False
    if isinstance(c, Comparison):
        return _kind(got) == _kind(c.value) and _compare(c.op, got, c.value)
    if isinstance(c, OneOf):
        return _kind(got) == _kind(c.values[0]) and got in c.values
    return _kind(got) == _kind(c.low) and c.low <= got <= c.high  # type: ignore[operator]


def matches(filter: Filter, attributes: Mapping[str, AttributeValue] | None) -> bool:
    """Whether an event with these ``attributes`` (None = none) passes ``filter``.

    Every condition must match; a condition on an attribute the event does not
    carry, or carries with a value of the other kind, does not match.
    """
    attrs = attributes or {}
    return all(_condition_matches(c, attrs) for c in filter.conditions)


def matches_any(filters: Iterable[Filter], attributes: Mapping[str, AttributeValue] | None) -> bool:
    """Whether any of ``filters`` (a summary: a disjunction) matches."""
    return any(matches(f, attributes) for f in filters)


# -- parsing --------------------------------------------------------------------------------

_TOKEN_RE: Final = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<number>-?(?:\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>!=|<=|>=|=|<|>)
  | (?P<punct>[\[\],*])
  | (?P<quote>["'])
    """,
    re.VERBOSE,
)
_ESCAPES: Final = {'"': '"', "'": "'", "\\": "\\", "n": "\n", "t": "\t", "r": "\r"}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "number", "name", "keyword", "op", "punct", "string", "end"
    text: str
    value: AttributeValue | None
    pos: int


def _describe(tok: _Token) -> str:
    if tok.kind == "end":
        return "end of the filter"
    if tok.kind == "string":
        return f"the string {tok.text}"
    return repr(tok.text)


def _read_string(text: str, start: int) -> tuple[str, int]:
    quote = text[start]
    i = start + 1
    out: list[str] = []
    while i < len(text):
        ch = text[i]
        if ch == quote:
            s = "".join(out)
            if len(s) > MAX_STRING_LENGTH:
                raise FilterSyntaxError(
                    f"the string is longer than {MAX_STRING_LENGTH} characters",
                    position=start,
                    expected=f"a string of at most {MAX_STRING_LENGTH} characters",
                )
            try:
                s.encode("utf-8")
            except UnicodeEncodeError:
                raise FilterSyntaxError(
                    "the string is not valid Unicode (a lone surrogate escape)",
                    position=start,
                    expected="a string of valid Unicode",
                ) from None
            return s, i + 1
        if ch == "\\":
            if i + 1 >= len(text):
                break
            esc = text[i + 1]
            if esc in _ESCAPES:
                out.append(_ESCAPES[esc])
                i += 2
                continue
            if esc == "u":
                hexdigits = text[i + 2 : i + 6]
                if len(hexdigits) == 4 and all(h in "0123456789abcdefABCDEF" for h in hexdigits):
                    out.append(chr(int(hexdigits, 16)))
                    i += 6
                    continue
                raise FilterSyntaxError(
                    "bad \\u escape",
                    position=i,
                    expected="4 hexadecimal digits after \\u",
                )
            raise FilterSyntaxError(
                f"unknown escape \\{esc}",
                position=i,
                expected="one of the escapes \\\" \\' \\\\ \\n \\t \\r \\uXXXX",
            )
        out.append(ch)
        i += 1
    raise FilterSyntaxError(
        "unterminated string", position=len(text), expected=f"a closing {quote}"
    )


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            raise FilterSyntaxError(
                f"unexpected character {text[pos]!r}",
                position=pos,
                expected="a name, an operator, a quoted string or a number",
            )
        kind = m.lastgroup
        assert kind is not None
        if kind == "ws":
            pos = m.end()
            continue
        if kind == "quote":
            s, end = _read_string(text, pos)
            tokens.append(_Token("string", text[pos:end], s, pos))
            pos = end
            continue
        raw = m.group()
        if kind == "number":
            if m.end() < len(text) and (text[m.end()].isalpha() or text[m.end()] == "_"):
                raise FilterSyntaxError(
                    f"bad number {text[pos : m.end() + 1]!r}",
                    position=pos,
                    expected="a number (digits, optional fraction and exponent)",
                )
            value: AttributeValue
            if any(ch in raw for ch in ".eE"):
                value = float(raw)
                if not math.isfinite(value):
                    raise FilterSyntaxError(
                        f"the number {raw} is not finite",
                        position=pos,
                        expected="a finite number",
                    )
            else:
                value = int(raw)
                if abs(value) > MAX_INT:
                    raise FilterSyntaxError(
                        f"the integer {raw} is beyond ±2**53",
                        position=pos,
                        expected="an integer within ±2**53 (or write it as a float)",
                    )
            tokens.append(_Token("number", raw, value, pos))
        elif kind == "name" and raw.lower() in _KEYWORDS:
            tokens.append(_Token("keyword", raw.lower(), None, pos))
        else:
            tokens.append(_Token(kind, raw, None, pos))
        pos = m.end()
    tokens.append(_Token("end", "", None, len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.i = 0

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def fail(self, tok: _Token, expected: str) -> FilterSyntaxError:
        return FilterSyntaxError(
            f"unexpected {_describe(tok)}", position=tok.pos, expected=expected
        )

    def value(self, what: str = "a value (a quoted string or a number)") -> _Token:
        tok = self.take()
        if tok.kind not in ("string", "number"):
            raise self.fail(tok, what)
        return tok

    def condition(self) -> Condition:
        name = self.take()
        if name.kind != "name":
            expected = "an attribute name"
            if name.kind == "keyword":
                expected += f" (not the keyword {name.text!r})"
            raise self.fail(name, expected)
        if (problem := _name_problem(name.text)) is not None:
            raise FilterSyntaxError(
                f"bad attribute name {name.text!r}: {problem}",
                position=name.pos,
                expected="an attribute name",
            )
        tok = self.take()
        if tok.kind == "op":
            v = self.value()
            assert v.value is not None
            return Comparison(name=name.text, op=tok.text, value=v.value)  # type: ignore[arg-type]
        if tok.kind == "keyword" and tok.text == "in":
            return self.one_of(name.text, tok)
        if tok.kind == "keyword" and tok.text == "between":
            low = self.value("a lower bound (a quoted string or a number)")
            and_ = self.take()
            if and_.kind != "keyword" or and_.text != "and":
                raise self.fail(and_, "'and' between the bounds")
            high = self.value("an upper bound (a quoted string or a number)")
            assert low.value is not None and high.value is not None
            if _kind(low.value) != _kind(high.value):
                raise FilterSyntaxError(
                    "'between' bounds of two kinds",
                    position=high.pos,
                    expected="an upper bound of the same kind as the lower bound",
                )
            if low.value > high.value:  # type: ignore[operator]
                raise FilterSyntaxError(
                    "an empty range",
                    position=high.pos,
                    expected=f"an upper bound >= {low.text}",
                )
            return Between(name=name.text, low=low.value, high=high.value)
        raise self.fail(tok, "an operator (= != < <= > >=), 'in' or 'between'")

    def one_of(self, name: str, in_tok: _Token) -> OneOf:
        tok = self.take()
        if tok.kind != "punct" or tok.text != "[":
            raise self.fail(tok, "'[' to open the list")
        values: list[AttributeValue] = []
        while True:
            v = self.value()
            assert v.value is not None
            if values and _kind(v.value) != _kind(values[0]):
                raise FilterSyntaxError(
                    "an 'in' list of two kinds",
                    position=v.pos,
                    expected="a value of the same kind as the list's first",
                )
            values.append(v.value)
            if len(values) > MAX_IN_VALUES:
                raise FilterSyntaxError(
                    f"an 'in' list of more than {MAX_IN_VALUES} values",
                    position=v.pos,
                    expected="']' to close the list",
                )
            sep = self.take()
            if sep.kind == "punct" and sep.text == "]":
                return OneOf(name=name, values=tuple(values))
            if sep.kind != "punct" or sep.text != ",":
                raise self.fail(sep, "',' or ']'")

    def parse(self) -> Filter:
        first = self.peek()
        if first.kind == "punct" and first.text == "*":
            self.take()
            end = self.take()
            if end.kind != "end":
                raise self.fail(end, "the end of the filter after '*'")
            return MATCH_ALL
        conditions = [self.condition()]
        while True:
            tok = self.take()
            if tok.kind == "end":
                break
            if tok.kind != "keyword" or tok.text != "and":
                raise self.fail(tok, "'and' or the end of the filter")
            conditions.append(self.condition())
            if len(conditions) > MAX_CONDITIONS:
                raise FilterSyntaxError(
                    f"more than {MAX_CONDITIONS} conditions",
                    position=tok.pos,
                    expected="the end of the filter",
                )
        return Filter(conditions=tuple(conditions))


def parse_filter(text: str) -> Filter:
    """Parse a filter's text (grammar in the module docstring) into its canonical form.

    Raises :class:`FilterSyntaxError` with ``position`` (0-based character offset)
    and ``expected`` (what would have been valid there).
    """
    if not isinstance(text, str):
        raise FilterSyntaxError(
            f"a filter is a string, not {type(text).__name__}", position=0, expected="a string"
        )
    if len(text) > MAX_FILTER_LENGTH:
        raise FilterSyntaxError(
            f"the filter is longer than {MAX_FILTER_LENGTH} characters",
            position=MAX_FILTER_LENGTH,
            expected="a shorter filter",
        )
    return _Parser(text).parse()


_SUMMARY_MEMO_SIZE: Final = 4096
"""How many parsed summaries :func:`parse_summary` keeps (then it is emptied)."""
_summaries: dict[tuple[str, ...], tuple[Filter, ...]] = {}


def parse_summary(texts: tuple[str, ...]) -> tuple[Filter, ...]:
    """``tuple(parse_filter(t) for t in texts)``, memoised by the texts (bounded).

    A summary's filters are a function of its texts alone and are immutable, so one
    tuple serves every holder: every member of a root's MEMBERS list, at every node
    below that root, holds the same few summaries (in a simulation, one process runs
    all those nodes; the members' summaries, a tuple of fresh filters per member per
    node, were ~120 B per node per publish call of a 100-node run). Texts that do not
    parse raise every time."""
    parsed = _summaries.get(texts)
    if parsed is None:
        parsed = tuple(parse_filter(t) for t in texts)
        if len(_summaries) >= _SUMMARY_MEMO_SIZE:
            _summaries.clear()  # full: built afresh (equal, no longer shared)
        _summaries[texts] = parsed
    return parsed


# -- rendering ------------------------------------------------------------------------------


def _render_value(value: AttributeValue) -> str:
    if isinstance(value, str):
        out = ['"']
        for ch in value:
            if ch == '"':
                out.append('\\"')
            elif ch == "\\":
                out.append("\\\\")
            elif ch == "\n":
                out.append("\\n")
            elif ch == "\t":
                out.append("\\t")
            elif ch == "\r":
                out.append("\\r")
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)
    if isinstance(value, int):
        return str(value)
    text = repr(value)  # shortest text that reads back as the same float
    return text if any(ch in text for ch in ".eE") else text + ".0"


def _render_condition(c: Condition) -> str:
    if isinstance(c, Comparison):
        return f"{c.name} {c.op} {_render_value(c.value)}"
    if isinstance(c, OneOf):
        return f"{c.name} in [{', '.join(_render_value(v) for v in c.values)}]"
    return f"{c.name} between {_render_value(c.low)} and {_render_value(c.high)}"


def render_filter(filter: Filter) -> str:
    """The canonical text of ``filter`` (``*`` for :data:`MATCH_ALL`)."""
    if not filter.conditions:
        return "*"
    return " and ".join(_render_condition(c) for c in filter.conditions)


# -- summaries: covers and merge ------------------------------------------------------------


_Bound = tuple[AttributeValue | None, bool]
"""An interval's end: the value (None = unbounded) and whether it is included."""


@dataclass(frozen=True, slots=True)
class _Constraint:
    """All the conditions of one filter on one name, as one exact set of values.

    The set is: values of ``kind``; in ``values`` if that is not None, else within the
    interval (``None`` = unbounded); and not in ``excluded``. ``kind`` None = empty.
    """

    kind: str | None
    values: frozenset[AttributeValue] | None = None
    lo: AttributeValue | None = None
    lo_incl: bool = True
    hi: AttributeValue | None = None
    hi_incl: bool = True
    excluded: frozenset[AttributeValue] = frozenset()

    def contains(self, v: AttributeValue) -> bool:
        if self.kind is None or isinstance(v, bool) or _kind(v) != self.kind:
            return False
        if v in self.excluded:
            return False
        if self.values is not None:
            return v in self.values
        if self.lo is not None and (v < self.lo or (v == self.lo and not self.lo_incl)):  # type: ignore[operator]
            return False
        return not (
            self.hi is not None and (v > self.hi or (v == self.hi and not self.hi_incl))  # type: ignore[operator]
        )


_EMPTY: Final = _Constraint(kind=None)


def _tighter_lo(
    a: tuple[AttributeValue | None, bool], b: tuple[AttributeValue | None, bool]
) -> tuple[AttributeValue | None, bool]:
    if a[0] is None:
        return b
    if b[0] is None:
        return a
    if a[0] == b[0]:
        return (a[0], a[1] and b[1])
    return a if a[0] > b[0] else b  # type: ignore[operator]


def _tighter_hi(
    a: tuple[AttributeValue | None, bool], b: tuple[AttributeValue | None, bool]
) -> tuple[AttributeValue | None, bool]:
    if a[0] is None:
        return b
    if b[0] is None:
        return a
    if a[0] == b[0]:
        return (a[0], a[1] and b[1])
    return a if a[0] < b[0] else b  # type: ignore[operator]


def _normalize(c: _Constraint) -> _Constraint:
    """Fold the interval and exclusions into the value set; detect emptiness."""
    if c.kind is None:
        return _EMPTY
    if c.values is not None:
        # The interval and exclusions too (``contains`` of a constraint with values
        # looks at the values only): "in [0, 2] and between 0 and 1" is {0}.
        rest = _Constraint(c.kind, None, c.lo, c.lo_incl, c.hi, c.hi_incl, c.excluded)
        vals = frozenset(v for v in c.values if rest.contains(v))
        return _Constraint(kind=c.kind, values=vals) if vals else _EMPTY
    if c.lo is not None and c.hi is not None:
        if c.lo > c.hi or (c.lo == c.hi and not (c.lo_incl and c.hi_incl)):  # type: ignore[operator]
            return _EMPTY
        if c.lo == c.hi:
            single = _Constraint(kind=c.kind, values=frozenset({c.lo}))
            return single if c.contains(c.lo) else _EMPTY
    excluded = frozenset(
        v
        for v in c.excluded
        if _Constraint(c.kind, None, c.lo, c.lo_incl, c.hi, c.hi_incl).contains(v)
    )
    return _Constraint(c.kind, None, c.lo, c.lo_incl, c.hi, c.hi_incl, excluded)


def _condition_constraint(c: Condition) -> _Constraint:
    if isinstance(c, OneOf):
        return _Constraint(kind=_kind(c.values[0]), values=frozenset(c.values))
    if isinstance(c, Between):
        return _Constraint(kind=_kind(c.low), lo=c.low, hi=c.high)
    k, v = _kind(c.value), c.value
    if c.op == "=":
        return _Constraint(kind=k, values=frozenset({v}))
    if c.op == "!=":
        return _Constraint(kind=k, excluded=frozenset({v}))
    if c.op in ("<", "<="):
        return _Constraint(kind=k, hi=v, hi_incl=c.op == "<=")
    return _Constraint(kind=k, lo=v, lo_incl=c.op == ">=")


def _intersect(a: _Constraint, b: _Constraint) -> _Constraint:
    if a.kind is None or b.kind is None or a.kind != b.kind:
        return _EMPTY
    lo, lo_incl = _tighter_lo((a.lo, a.lo_incl), (b.lo, b.lo_incl))
    hi, hi_incl = _tighter_hi((a.hi, a.hi_incl), (b.hi, b.hi_incl))
    if a.values is not None and b.values is not None:
        values: frozenset[AttributeValue] | None = a.values & b.values
    else:
        values = a.values if a.values is not None else b.values
    return _normalize(
        _Constraint(a.kind, values, lo, lo_incl, hi, hi_incl, a.excluded | b.excluded)
    )


def _constraints(f: Filter) -> dict[str, _Constraint] | None:
    """Per name, the exact set of values ``f`` accepts; None if ``f`` matches nothing."""
    out: dict[str, _Constraint] = {}
    for c in f.conditions:
        cc = _normalize(_condition_constraint(c))
        out[c.name] = _intersect(out[c.name], cc) if c.name in out else cc
        if out[c.name].kind is None:
            return None
    return out


def _contained(b: _Constraint, a: _Constraint) -> bool:
    """Sound test of ``b ⊆ a`` for normalized, non-empty constraints."""
    if a.kind != b.kind:
        return False
    if b.values is not None:
        return all(a.contains(v) for v in b.values)
    if a.values is not None:
        return False  # b is an interval (with lo < hi): never within a finite set here
    if a.lo is not None:
        if b.lo is None or b.lo < a.lo or (b.lo == a.lo and b.lo_incl and not a.lo_incl):  # type: ignore[operator]
            return False
    if a.hi is not None:
        if b.hi is None or b.hi > a.hi or (b.hi == a.hi and b.hi_incl and not a.hi_incl):  # type: ignore[operator]
            return False
    return all(v in b.excluded or not b.contains(v) for v in a.excluded)


def covers(a: Filter, b: Filter) -> bool:
    """Whether every attribute map ``b`` matches is matched by ``a`` (sound, see above)."""
    cb = _constraints(b)
    if cb is None:
        return True  # b matches nothing
    ca = _constraints(a)
    if ca is None:
        return False
    return all(name in cb and _contained(cb[name], c) for name, c in ca.items())


def _hull(a: _Constraint, b: _Constraint) -> _Constraint | None:
    """A constraint holding both (wider); None = no condition (anything)."""
    if a.kind != b.kind or a.kind is None:
        return None
    if a.values is not None and b.values is not None:
        union = a.values | b.values
        if len(union) <= MAX_IN_VALUES:
            return _Constraint(kind=a.kind, values=union)

    def bounds(c: _Constraint) -> tuple[_Bound, _Bound]:
        if c.values is not None:
            return (min(c.values), True), (max(c.values), True)
        return (c.lo, c.lo_incl), (c.hi, c.hi_incl)

    (alo, ahi), (blo, bhi) = bounds(a), bounds(b)
    if alo[0] is None or blo[0] is None:
        lo: tuple[AttributeValue | None, bool] = (None, True)
    elif alo[0] == blo[0]:
        lo = (alo[0], alo[1] or blo[1])
    else:
        lo = alo if alo[0] < blo[0] else blo  # type: ignore[operator]
    if ahi[0] is None or bhi[0] is None:
        hi: tuple[AttributeValue | None, bool] = (None, True)
    elif ahi[0] == bhi[0]:
        hi = (ahi[0], ahi[1] or bhi[1])
    else:
        hi = ahi if ahi[0] > bhi[0] else bhi  # type: ignore[operator]
    if lo[0] is None and hi[0] is None:
        return None  # "any value of this kind": not expressible, drop the name (wider)
    return _Constraint(kind=a.kind, lo=lo[0], lo_incl=lo[1], hi=hi[0], hi_incl=hi[1])


def _constraint_conditions(name: str, c: _Constraint) -> list[Condition]:
    if c.values is not None:
        vals = sorted(c.values, key=_value_key)
        if len(vals) == 1:
            return [Comparison(name=name, op="=", value=vals[0])]
        return [OneOf(name=name, values=tuple(vals))]
    if c.lo is not None and c.hi is not None and c.lo_incl and c.hi_incl:
        out: list[Condition] = [Between(name=name, low=c.lo, high=c.hi)]
    else:
        out = []
        if c.lo is not None:
            out.append(Comparison(name=name, op=">=" if c.lo_incl else ">", value=c.lo))
        if c.hi is not None:
            out.append(Comparison(name=name, op="<=" if c.hi_incl else "<", value=c.hi))
    out.extend(Comparison(name=name, op="!=", value=v) for v in sorted(c.excluded, key=_value_key))
    return out


def _filter_hull(a: Filter, b: Filter) -> Filter:
    """One filter matching everything ``a`` or ``b`` matches (both satisfiable)."""
    ca, cb = _constraints(a), _constraints(b)
    assert ca is not None and cb is not None
    conditions: list[Condition] = []
    for name in sorted(ca.keys() & cb.keys()):
        h = _hull(ca[name], cb[name])
        if h is not None:
            conditions.extend(_constraint_conditions(name, h))
    return Filter(conditions=tuple(conditions[:MAX_CONDITIONS]))


def _reduce(filters: list[Filter]) -> list[Filter]:
    """Drop filters covered by another (keeping the first of equals)."""
    kept: list[Filter] = []
    for i, f in enumerate(filters):
        if any(
            covers(g, f) and (not covers(f, g) or j < i) for j, g in enumerate(filters) if j != i
        ):
            continue
        kept.append(f)
    return kept


def merge(filters: Sequence[Filter], bound: int) -> tuple[Filter, ...]:
    """At most ``bound`` filters matching every event any of ``filters`` matches.

    Filters that match nothing are dropped, filters covered by another are dropped,
    and while more than ``bound`` remain, the two whose hull keeps the most
    conditions are replaced by their hull. The result is canonical for a given
    input order. An empty input gives an empty summary (matches nothing).
    """
    if bound < 1:
        raise ValueError("a summary holds at least one filter")
    live = [f for f in filters if _constraints(f) is not None]
    if any(not f.conditions for f in live):
        return (MATCH_ALL,)
    current = _reduce(live)
    while len(current) > bound:
        best: tuple[int, int, Filter] | None = None
        best_score = -1
        for i in range(len(current)):
            for j in range(i + 1, len(current)):
                h = _filter_hull(current[i], current[j])
                score = len(h.conditions)
                if score > best_score:
                    best, best_score = (i, j, h), score
        assert best is not None
        i, j, h = best
        current = [f for k, f in enumerate(current) if k not in (i, j)] + [h]
        if not h.conditions:
            return (MATCH_ALL,)
        current = _reduce(current)
    return tuple(current)
