"""Event attributes and content filters (core/_filters.py).

The rules of attributes, the filter language (parse, errors with a position, the
canonical text), matching, and the summary operations: ``covers`` is sound and
``merge`` never narrows (property tests over random filters and attribute maps).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarcast_ipfs.core import (
    MATCH_ALL,
    MAX_ATTRIBUTES,
    MAX_IN_VALUES,
    Between,
    Comparison,
    Filter,
    FilterSyntaxError,
    InvalidAttributes,
    OneOf,
    covers,
    matches,
    matches_any,
    merge,
    parse_filter,
    render_filter,
    validate_attributes,
)

# -- attributes -----------------------------------------------------------------------------


def test_valid_attributes_pass_as_they_are() -> None:
    attrs = {"ups": 12, "downs": 0, "score": -1.5, "user": "alice", "_x9": ""}
    assert validate_attributes(attrs) == attrs
    assert validate_attributes({}) == {}
    assert validate_attributes({"n": 2**53, "m": -(2**53), "s": "é" * 256}) is not None


@pytest.mark.parametrize(
    ("attrs", "says"),
    [
        ([("a", 1)], "must be a map"),
        ({f"a{i}": i for i in range(MAX_ATTRIBUTES + 1)}, "at most 16"),
        ({"": 1}, "1 to 32"),
        ({"a" * 33: 1}, "1 to 32"),
        ({"9a": 1}, "a letter or '_'"),
        ({"a-b": 1}, "a letter or '_'"),
        ({"AND": 1}, "keyword"),
        ({"between": 1}, "keyword"),
        ({1: 1}, "must be a string"),
        ({"a": True}, "bool is not a number"),
        ({"a": math.nan}, "not finite"),
        ({"a": math.inf}, "not finite"),
        ({"a": 2**53 + 1}, "2**53"),
        ({"a": "x" * 257}, "longer than 256"),
        ({"a": "\ud800"}, "lone surrogate"),
        ({"a": None}, "string or a finite number"),
        ({"a": [1]}, "string or a finite number"),
    ],
)
def test_bad_attributes_are_refused_saying_why(attrs: object, says: str) -> None:
    with pytest.raises(InvalidAttributes) as info:
        validate_attributes(attrs)
    assert says in str(info.value)


# -- the language ---------------------------------------------------------------------------


def test_the_issue_example_parses_and_matches() -> None:
    f = parse_filter("ups >= 10 and controversiality = 1")
    assert f == Filter(
        conditions=(
            Comparison(name="controversiality", op="=", value=1),
            Comparison(name="ups", op=">=", value=10),
        )
    )
    assert matches(f, {"ups": 12, "controversiality": 1, "user": "a"})
    assert not matches(f, {"ups": 9, "controversiality": 1})
    assert not matches(f, {"ups": 12, "controversiality": 0})
    assert not matches(f, {"ups": 12})  # missing attribute: no match


def test_every_form_of_condition() -> None:
    f = parse_filter(
        "user in ['bob', \"alice\", 'bob'] AND score Between -1.5 and 2e1 and n != 3 "
        "and name < 'm' and k <= 1 and k > -2 and z >= 0.25"
    )
    assert OneOf(name="user", values=("alice", "bob")) in f.conditions
    assert Between(name="score", low=-1.5, high=20.0) in f.conditions
    good = {"user": "bob", "score": 0, "n": 4, "name": "abc", "k": 1, "z": 0.25}
    assert matches(f, good)
    for name, bad in [("user", "carol"), ("score", 20.5), ("n", 3), ("name", "m"), ("k", -2)]:
        assert not matches(f, {**good, name: bad}), name


def test_missing_or_other_kind_never_matches_not_even_not_equal() -> None:
    f = parse_filter('user != "bob"')
    assert matches(f, {"user": "alice"})
    assert not matches(f, {"user": "bob"})
    assert not matches(f, {})  # missing
    assert not matches(f, None)  # no attributes at all
    assert not matches(f, {"user": 5})  # a number is not a string
    assert not matches(parse_filter("ups < 10"), {"ups": "5"})
    assert not matches(parse_filter("ups = 1"), {"ups": True})  # bool: never a number


def test_numbers_compare_by_value_and_strings_by_code_point() -> None:
    assert matches(parse_filter("ups = 12"), {"ups": 12.0})
    assert matches(parse_filter("ups = 12.0"), {"ups": 12})
    assert matches(parse_filter("u < 'b'"), {"u": "a\uffff"})
    assert not matches(parse_filter("u < 'B'"), {"u": "a"})


def test_match_all_is_a_star() -> None:
    assert parse_filter(" * ") is MATCH_ALL
    assert render_filter(MATCH_ALL) == "*"
    assert matches(MATCH_ALL, None) and matches(MATCH_ALL, {"x": 1})


def test_string_escapes() -> None:
    f = parse_filter(r"""s = "a\"b\\c\n\t\r\u00e9'" and t = 'it\'s' """)
    assert f.conditions[0] == Comparison(name="s", op="=", value="a\"b\\c\n\t\r\u00e9'")
    assert f.conditions[1] == Comparison(name="t", op="=", value="it's")
    assert parse_filter(render_filter(f)) == f
    assert render_filter(parse_filter(r"s = '\u0001'")) == r's = "\u0001"'


@pytest.mark.parametrize(
    ("text", "position", "expected"),
    [
        ("", 0, "an attribute name"),
        ("ups", 3, "an operator"),
        ("ups >", 5, "a value"),
        ("ups >= 10 and", 13, "an attribute name"),
        ("ups >= 10 or x = 1", 10, "'and' or the end"),
        ("ups = abc", 6, "a value"),
        ("and = 1", 0, "not the keyword 'and'"),
        ("x ~ 1", 2, "a name, an operator"),
        ('x = "abc', 8, 'a closing "'),
        (r'x = "a\q"', 6, "one of the escapes"),
        (r'x = "\u12"', 5, "4 hexadecimal digits"),
        (r'x = "\ud800"', 4, "valid Unicode"),
        ("x = 1e999", 4, "a finite number"),
        ("x = 9007199254740993", 4, "within ±2**53"),
        ("x = 12abc", 4, "a number"),
        ("x in 1", 5, "'['"),
        ("x in [1 2]", 8, "',' or ']'"),
        ("x in [1, 'a']", 9, "same kind"),
        ("x in []", 6, "a value"),
        ("x between 1 or 2", 12, "'and' between the bounds"),
        ("x between 1 and 'z'", 16, "same kind"),
        ("x between 3 and 1", 16, "an upper bound >= 3"),
        ("* and x = 1", 2, "the end of the filter after '*'"),
        ("x = 1 and *", 10, "an attribute name"),
    ],
)
def test_errors_give_the_position_and_what_was_expected(
    text: str, position: int, expected: str
) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        parse_filter(text)
    assert info.value.position == position, str(info.value)
    assert expected in info.value.expected, str(info.value)
    assert f"at position {position}: expected" in str(info.value)


def test_limits_of_a_filter() -> None:
    many = " and ".join(f"a{i} = {i}" for i in range(33))
    with pytest.raises(FilterSyntaxError, match="more than 32 conditions"):
        parse_filter(many)
    values = ", ".join(str(i) for i in range(MAX_IN_VALUES + 1))
    with pytest.raises(FilterSyntaxError, match="more than 32 values"):
        parse_filter(f"x in [{values}]")
    with pytest.raises(FilterSyntaxError, match="longer than 4096"):
        parse_filter("x = '" + "a" * 5000 + "'")
    with pytest.raises(FilterSyntaxError, match="longer than 256"):
        parse_filter("x = '" + "a" * 257 + "'")
    with pytest.raises(FilterSyntaxError, match="a filter is a string"):
        parse_filter(5)  # type: ignore[arg-type]


def test_the_canonical_form_sorts_and_deduplicates() -> None:
    a = parse_filter("b = 1 and a in [3, 1, 3] and b = 1")
    b = parse_filter("A_ = 1 and a in [1,3] and b=1.0")
    assert render_filter(a) == "a in [1, 3] and b = 1"
    assert render_filter(b) == "A_ = 1 and a in [1, 3] and b = 1.0"
    assert parse_filter(render_filter(a)) == a


# -- property tests -------------------------------------------------------------------------

NAMES = ["a", "b", "c"]
# few values, so that random attribute maps often meet random filters
NUMS = st.one_of(
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([-1.5, 0.5, 2.0, 2.5, 1e-300, -0.0]),
)
STRS = st.sampled_from(["", "a", "ab", "b", 'q"\\', "é"])
VALUES = st.one_of(NUMS, STRS)


@st.composite
def conditions(draw: st.DrawFn) -> Comparison | OneOf | Between:
    name = draw(st.sampled_from(NAMES))
    form = draw(st.sampled_from(["cmp", "in", "between"]))
    kind = draw(st.sampled_from([NUMS, STRS]))
    if form == "cmp":
        op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">="]))
        return Comparison(name=name, op=op, value=draw(kind))
    if form == "in":
        return OneOf(name=name, values=tuple(draw(st.lists(kind, min_size=1, max_size=4))))
    lo, hi = sorted([draw(kind), draw(kind)])  # type: ignore[type-var]
    return Between(name=name, low=lo, high=hi)


FILTERS = st.builds(
    lambda cs: Filter(conditions=tuple(cs)), st.lists(conditions(), min_size=0, max_size=4)
)


@settings(max_examples=300, deadline=None)
@given(FILTERS)
def test_render_then_parse_is_the_identity(f: Filter) -> None:
    assert parse_filter(render_filter(f)) == f
    assert render_filter(parse_filter(render_filter(f))) == render_filter(f)


def _literals(filters: list[Filter]) -> list[object]:
    out: list[object] = []
    for f in filters:
        for c in f.conditions:
            if isinstance(c, Comparison):
                out.append(c.value)
            elif isinstance(c, OneOf):
                out.extend(c.values)
            else:
                out.extend([c.low, c.high])
    return out


def _probe_maps(data: st.DataObject, filters: list[Filter], n: int) -> list[dict[str, object]]:
    """Attribute maps that hit the filters' boundaries: values drawn half of the time
    from the literals the filters mention, so that edge cases are met often."""
    lits = _literals(filters)
    value = st.one_of(VALUES, st.sampled_from(lits)) if lits else VALUES
    maps = st.dictionaries(st.sampled_from(NAMES), value, max_size=3)
    return data.draw(st.lists(maps, min_size=1, max_size=n))


SMALL_FILTERS = st.builds(
    lambda cs: Filter(conditions=tuple(cs)), st.lists(conditions(), min_size=0, max_size=2)
)


@settings(max_examples=300, deadline=None)
@given(SMALL_FILTERS, FILTERS, st.data())
def test_covers_is_sound(a: Filter, b: Filter, data: st.DataObject) -> None:
    assert covers(a, a)
    if covers(a, b):
        for m in _probe_maps(data, [a, b], 12):
            if matches(b, m):  # type: ignore[arg-type]
                assert matches(a, m), (render_filter(a), render_filter(b), m)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.lists(FILTERS, min_size=0, max_size=7), st.integers(min_value=1, max_value=4), st.data())
def test_merge_never_narrows(filters: list[Filter], bound: int, data: st.DataObject) -> None:
    summary = merge(filters, bound)
    assert len(summary) <= bound
    for m in _probe_maps(data, filters, 12):
        if matches_any(filters, m):  # type: ignore[arg-type]
            assert matches_any(summary, m), (  # type: ignore[arg-type]
                [render_filter(f) for f in filters],
                [render_filter(f) for f in summary],
                m,
            )
    for f in filters:  # and every input is covered by some output, as covers() sees it
        assert any(covers(s, f) for s in summary) or not summary


def _single_conditions() -> list[Filter]:
    nums: list[int | float] = [0, 1, 2]
    strs = ["a", "b"]
    out: list[Comparison | OneOf | Between] = []
    for v in [*nums, *strs]:
        out.extend(Comparison(name="a", op=op, value=v) for op in ("=", "!=", "<", "<=", ">", ">="))
    for vals in (nums, strs):
        for i, lo in enumerate(vals):
            for hi in vals[i:]:
                out.append(Between(name="a", low=lo, high=hi))
                out.append(OneOf(name="a", values=(lo, hi)))
    return [Filter(conditions=(c,)) for c in out]


def test_covers_is_sound_on_every_pair_of_single_conditions() -> None:
    """Exhaustive over one attribute: every pair of single conditions, probed at every
    literal, between them, and with the attribute missing."""
    filters = _single_conditions()
    probes: list[dict[str, object]] = [{}]
    probes += [{"a": v} for v in (-1, 0, 0.5, 1, 1.5, 2, 3, "", "a", "aa", "b", "c")]
    table = {f: [matches(f, m) for m in probes] for f in filters}  # type: ignore[arg-type]
    covered = 0
    for a in filters:
        for b in filters:
            if covers(a, b):
                covered += 1
                assert all(ma or not mb for ma, mb in zip(table[a], table[b], strict=True)), (
                    render_filter(a),
                    render_filter(b),
                )
    assert covered > len(filters)  # not vacuous: more than the reflexive pairs


def test_merge_examples() -> None:
    p = parse_filter
    # a covered filter is dropped; the bound is kept without widening when it can be
    assert merge([p("ups >= 10"), p("ups >= 20 and user = 'a'")], 4) == (p("ups >= 10"),)
    # two filters into one: the hull of the common attribute, the others dropped
    assert merge([p("a = 1 and b > 3"), p("a = 2 and c = 1")], 1) == (p("a in [1, 2]"),)
    assert merge([p("a between 1 and 2"), p("a > 5")], 1) == (p("a >= 1"),)
    assert merge([p("a = 1"), p("b = 1")], 1) == (MATCH_ALL,)
    assert merge([p("a = 1"), MATCH_ALL], 3) == (MATCH_ALL,)
    assert merge([p("a = 1 and a = 2")], 3) == ()  # matches nothing: dropped
    assert merge([], 2) == ()
    with pytest.raises(ValueError):
        merge([p("a = 1")], 0)


def test_covers_examples() -> None:
    p = parse_filter
    assert covers(p("ups >= 10"), p("ups >= 10 and controversiality = 1"))
    assert covers(p("ups > 5"), p("ups in [6, 7.5]"))
    assert covers(p("ups != 5"), p("ups between 6 and 9"))
    assert not covers(p("ups != 7"), p("ups between 6 and 9"))
    assert not covers(p("ups >= 10 and x = 1"), p("ups >= 10"))
    assert not covers(p("ups = 1"), p("ups = '1'"))
    assert covers(MATCH_ALL, p("a = 1")) and not covers(p("a = 1"), MATCH_ALL)
    assert covers(p("a = 1"), p("a = 1 and a = 2"))  # matches nothing: covered by all


# -- garbage in ------------------------------------------------------------------------------

FILTER_ALPHABET = st.sampled_from(
    [*"ab_ 019.-+eE=!<>[],*'\"\\un", "and", "in", "between", "AND", "\ud800", "é", "\x00"]
)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=60), st.lists(FILTER_ALPHABET, max_size=25).map("".join)))
def test_any_text_parses_or_raises_filter_syntax_error_only(text: str) -> None:
    """Bad input (HTTP, CLI, state file) gets a FilterSyntaxError, never anything else,
    and its position is within the text; what parses renders and parses back."""
    try:
        f = parse_filter(text)
    except FilterSyntaxError as exc:
        assert 0 <= exc.position <= len(text) and exc.expected
        return
    assert parse_filter(render_filter(f)) == f


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.one_of(st.text(max_size=40), st.integers()),
        st.one_of(
            st.text(max_size=300),
            st.integers(min_value=-(2**60), max_value=2**60),
            st.floats(allow_nan=True, allow_infinity=True),
            st.booleans(),
            st.none(),
            st.lists(st.integers(), max_size=2),
        ),
        max_size=20,
    )
)
def test_any_map_validates_or_raises_invalid_attributes_only(attrs: dict[object, object]) -> None:
    try:
        out = validate_attributes(attrs)
    except InvalidAttributes:
        return
    assert out == attrs and len(out) <= MAX_ATTRIBUTES
    f = parse_filter("*")
    assert matches(f, out)  # type: ignore[arg-type]


def test_a_value_list_and_a_range_on_one_name_are_both_kept() -> None:
    """``a in [0, 2] and a between 0 and 1`` accepts 0 only: it does not cover
    ``a = 2``, and merging the two keeps 2 (found by test_merge_never_narrows: the
    value list alone was kept, and the summary lost ``a = 2``)."""
    both = parse_filter("a in [0, 2] and a between 0 and 1")
    two = parse_filter("a = 2")
    assert not covers(both, two)
    assert covers(parse_filter("a in [0, 2]"), both)
    summary = merge([two, both], 1)
    assert matches_any(summary, {"a": 2}) and matches_any(summary, {"a": 0})
