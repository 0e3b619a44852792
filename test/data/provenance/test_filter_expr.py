"""Filter expressions: precedence, between, in, quoting, the simple filters of before, errors with a position."""
from __future__ import annotations

import math

import pytest

from teleop_flywheel.data.errors import FilterError
from teleop_flywheel.data.provenance.filter_expr import BoolOp, Compare, Filter, Not, evaluate, parse


def test_the_issue_example_parses_and_evaluates() -> None:
    text = "jerk_z < 2 and duration_ratio between 0.67 and 1.5 and outcome == success"
    node = parse(text)
    assert isinstance(node, BoolOp) and node.op == "and" and len(node.children) == 3
    assert str(node) == text
    good = {"jerk_z": 1.9, "duration_ratio": 0.67, "outcome": "success"}
    assert evaluate(node, good)
    assert evaluate(node, good | {"duration_ratio": 1.5})  # between includes both ends
    assert not evaluate(node, good | {"duration_ratio": 1.5001})
    assert not evaluate(node, good | {"jerk_z": 2.0})
    assert not evaluate(node, good | {"outcome": "failure"})


def test_precedence_not_over_and_over_or() -> None:
    node = parse("a = 1 or b = 2 and not c = 3")
    assert isinstance(node, BoolOp) and node.op == "or"
    right = node.children[1]
    assert isinstance(right, BoolOp) and right.op == "and" and isinstance(right.children[1], Not)
    # a=1 alone makes it true; without a, b=2 and c!=3 are both needed
    assert evaluate(node, {"a": 1, "b": 0, "c": 3})
    assert not evaluate(node, {"a": 0, "b": 2, "c": 3})
    assert evaluate(node, {"a": 0, "b": 2, "c": 4})
    bracketed = parse("(a = 1 or b = 2) and not c = 3")
    assert not evaluate(bracketed, {"a": 1, "b": 0, "c": 3})
    assert str(bracketed) == "(a == 1 or b == 2) and not c == 3"
    assert str(parse("not (a = 1 and b = 2)")) == "not (a == 1 and b == 2)"
    assert str(parse("A = 1 AND b = 2 Or c = 3")) == "A == 1 and b == 2 or c == 3"  # keywords in any case


def test_in_not_in_and_quoting() -> None:
    node = parse("operator in (ana, 'van der berg', \"o'neil\", 7)")
    assert isinstance(node, Compare) and [v.text for v in node.values] == ["ana", "van der berg", "o'neil", "7"]
    for who, kept in (("ana", True), ("van der berg", True), ("o'neil", True), ("7", True), ("ben", False)):
        assert evaluate(node, {"operator": who}) is kept
    assert evaluate(parse("operator not in (ana, ben)"), {"operator": "cy"})
    assert not evaluate(parse("operator not in (ana, ben)"), {"operator": "ben"})
    assert evaluate(parse(r"task == 'it\'s and or'"), {"task": "it's and or"})  # keywords inside quotes are text
    assert evaluate(parse("task == 'pick and place'"), {"task": "pick and place"})
    assert evaluate(parse("source_bag == ep-3.mcap"), {"source_bag": "ep-3.mcap"})  # a bare word with - and .


def test_values_numbers_missing_lists_and_booleans() -> None:
    assert evaluate(parse("length >= 25"), {"length": 25})
    assert evaluate(parse("length >= '25'"), {"length": 30})  # a quoted number still compares as a number
    assert not evaluate(parse("length > 1e2"), {"length": 99})
    assert evaluate(parse("x == -0.5"), {"x": -0.5})
    for op, kept in (("<", False), ("==", False), ("!=", True), (">=", False)):
        assert evaluate(parse(f"jerk_z {op} 2"), {"jerk_z": math.nan}) is kept  # unknown fails all but !=
        assert evaluate(parse(f"jerk_z {op} 2"), {"jerk_z": None}) is kept
    assert not evaluate(parse("jerk_z between 0 and 1"), {"jerk_z": None})
    assert evaluate(parse("warnings has TRACKING_LAG"), {"warnings": ["CAMERA_LAG_UNKNOWN", "TRACKING_LAG"]})
    assert not evaluate(parse("warnings has TRACKING_LAG"), {"warnings": []})
    assert evaluate(parse("warnings == ''"), {"warnings": []})
    assert evaluate(parse("intervention == true"), {"intervention": True})
    assert not evaluate(parse("intervention == true"), {"intervention": False})
    assert evaluate(parse("operator == 7"), {"operator": "7"})  # a text column compares as text


def test_simple_filters_of_before_keep_their_meaning() -> None:
    for text, expect in (("outcome=success", "outcome == success"), ("operator!=ben", "operator != ben"),
                         ("length>=200", "length >= 200"), ("task='pick the brick'", "task == 'pick the brick'"),
                         ("task=pick the brick", "task == 'pick the brick'"),  # the shell took the quotes
                         ("episode_index<=3", "episode_index <= 3")):
        assert str(parse(text)) == expect, text
    assert evaluate(parse("task=pick the brick"), {"task": "pick the brick"})


@pytest.mark.parametrize(("text", "message"), [
    ("nonsense", "expected an operator (== != < <= > >= between in has), got the end at position 9"),
    ("a <", "expected a value (a number, a word or a quoted text), got the end at position 4"),
    ("a < < 2", "got '<' at position 5"),
    ("(a = 1", "expected ')', got the end at position 7"),
    ("a between 1 2", "expected 'and' of 'between', got '2' at position 13"),
    ("a = 'x", "unterminated quote at position 5"),
    ("a in (1,", "got the end at position 9"),
    ("a in 1", "expected '(' after 'in', got '1' at position 6"),
    ("and = 1", "expected a column name, got 'and' at position 1"),
    ("a = 1 and", "expected a column name, got the end at position 10"),
    ("a = 1 b = 2", "expected 'and', 'or' or the end, got 'b' at position 7"),
    ("jerk_z < 2x", "at position 10"),  # an order needs a number: not read as the text '2x'
    ("a = 1 ; b = 2", "unexpected character ';' at position 7"),
])
def test_syntax_errors_name_the_expression_and_position(text: str, message: str) -> None:
    with pytest.raises(FilterError) as err:
        parse(text)
    assert str(err.value).startswith(f"bad filter {text!r}: ")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_column_is_named_with_its_position() -> None:
    with pytest.raises(FilterError, match=r"bad filter 'outcome == success and colour = red': unknown column "
                                          r"'colour' at position 24"):
        Filter.compile(["outcome == success and colour = red"], {"outcome"})
    with pytest.raises(FilterError, match="unknown column 'jerk_z' at position 1; .*curate --store"):
        Filter.compile(["jerk_z < 2"], {"outcome"})


def test_reasons_name_the_failing_terms_and_values() -> None:
    flt = Filter.compile(["jerk_z < 2 and duration_ratio between 0.67 and 1.5 and outcome == success"],
                         {"jerk_z", "duration_ratio", "outcome"})
    values = {"jerk_z": 2.5, "duration_ratio": 1.62, "outcome": "success"}
    assert not flt.keeps(values)
    assert flt.reasons(values) == ["jerk_z = 2.5 (not jerk_z < 2)",
                                   "duration_ratio = 1.62 (not duration_ratio between 0.67 and 1.5)"]
    assert flt.reasons({"jerk_z": None, "duration_ratio": 1.0, "outcome": "success"}) == [
        "jerk_z = null (not jerk_z < 2)"]
    neg = Filter.compile(["not (operator = ana or operator = ben)"], {"operator"})
    assert neg.reasons({"operator": "ana"}) == ["operator = ana (operator == ana)"]
    assert flt.columns == ["jerk_z", "duration_ratio", "outcome"]
