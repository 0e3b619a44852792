"""Filter expressions over the episodes table: which episodes `manifest create --filter` freezes and
`curate --drop-plan` would drop (docs/dataset_reports.md, "Filter expressions").

A safe parser (no `eval`): tokens, then recursive descent over

    expr       := term ("or" term)*
    term       := factor ("and" factor)*
    factor     := "not" factor | "(" expr ")" | comparison
    comparison := COLUMN OP value | COLUMN "between" value "and" value
                | COLUMN ["not"] "in" "(" value ("," value)* ")" | COLUMN "has" value
    OP         := "==" | "=" | "!=" | "<" | "<=" | ">" | ">="
    value      := NUMBER | 'quoted' | "quoted" | bare-word

so `not` binds tighter than `and`, `and` tighter than `or`; keywords are case-insensitive and a value
that is a keyword must be quoted. A bare word is a string (`outcome == success`).

Values: a number column compares as numbers with a number (or a quoted text that reads as one),
anything else compares as text; a boolean column with true/false; a list column (`warnings`,
`triggers`) as its items joined by commas, and `has X` is true when X is one of its items. A missing
value (null, NaN: an unknown score) makes every comparison false except `!=` (and `not in`).
`between` includes both ends.

The simple filters of manifests before expressions (`task=pick the brick`: the shell removes the
quotes) keep their meaning: a whole filter `COLUMN OP TEXT` whose TEXT holds no operator, bracket,
comma or keyword compares with TEXT as one value. A syntax error or an unknown column is a
`FilterError` naming the expression and the position (1-based character) where it went wrong.

The columns are the episodes table's own plus the typed fields of `episode_table.EpisodeRecord`
(`task`, `checkpoint`, `triggers`, the scores, ...); `outcome_check` reads as `passed`/`failed`.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pandas as pd

from teleop_flywheel.data.errors import FilterError
from teleop_flywheel.data.lerobot.dataset import LeRobotDataset
from teleop_flywheel.data.lerobot.episode_table import (
    CURATION_COLUMNS,
    OUTCOME_CHECK,
    REVIEW,
    TASK_SPEC_ID,
    WARNINGS,
    EpisodeRecord,
    episode_records,
)

KEYWORDS = ("and", "or", "not", "between", "in", "has")
OPS = ("==", "!=", "<=", ">=", "=", "<", ">")
_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<op>==|!=|<=|>=|=|<|>)
  | (?P<punct>[(),])
  | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.:/-]))
  | (?P<word>[A-Za-z_][\w.:/-]*)
""", re.VERBOSE)
_LEGACY = re.compile(r"^\s*([A-Za-z_][\w.:/-]*)\s*(==|!=|<=|>=|=|<|>)\s*(.*?)\s*$", re.DOTALL)
# Fields of EpisodeRecord a filter may name besides the table's columns (an alias where the name differs).
_RECORD_ONLY = ("task", "checkpoint", "triggers", "num_interventions")
# Record fields only there when the table has the column (else naming one is an unknown column).
_TABLE_ONLY = (*CURATION_COLUMNS, WARNINGS, REVIEW, TASK_SPEC_ID, OUTCOME_CHECK)


@dataclass(frozen=True)
class Token:
    kind: str  # op, punct, string, number, word, end
    text: str
    pos: int  # 0-based offset in the expression

    @property
    def keyword(self) -> str | None:
        return self.text.lower() if self.kind == "word" and self.text.lower() in KEYWORDS else None


@dataclass(frozen=True)
class Literal:
    text: str
    number: float | None
    quoted: bool

    def __str__(self) -> str:
        bare = not self.quoted and (self.number is not None or (
            re.fullmatch(r"[A-Za-z_][\w.:/-]*", self.text) is not None and self.text.lower() not in KEYWORDS))
        return self.text if bare else "'" + self.text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class Compare:
    column: str
    op: str  # one of OPS (with "=" as "=="), "between", "in", "not in", "has"
    values: tuple[Literal, ...]
    pos: int

    def __str__(self) -> str:
        if self.op == "between":
            return f"{self.column} between {self.values[0]} and {self.values[1]}"
        if self.op in ("in", "not in"):
            return f"{self.column} {self.op} ({', '.join(map(str, self.values))})"
        return f"{self.column} {self.op} {self.values[0]}"


@dataclass(frozen=True)
class Not:
    child: Node

    def __str__(self) -> str:
        return f"not {_wrap(self.child)}"


@dataclass(frozen=True)
class BoolOp:
    op: str  # "and" or "or"
    children: tuple[Node, ...]

    def __str__(self) -> str:
        return f" {self.op} ".join(_wrap(c, self.op) for c in self.children)


Node = Compare | Not | BoolOp


def _wrap(node: Node, parent: str = "not") -> str:
    """A child's text, bracketed where the parent binds tighter than it."""
    if isinstance(node, BoolOp) and (parent == "not" or (parent == "and" and node.op == "or")):
        return f"({node})"
    return str(node)


# --------------------------------------------------------------------------- parsing
def _error(text: str, pos: int, what: str, after: str = "") -> FilterError:
    return FilterError(f"bad filter {text!r}: {what} at position {pos + 1}{after}")


def tokenize(text: str) -> list[Token]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            bad = text[pos]
            what = "unterminated quote" if bad in "'\"" else f"unexpected character {bad!r}"
            raise _error(text, pos, what)
        if m.lastgroup != "space":
            out.append(Token(str(m.lastgroup), m.group(), pos))
        pos = m.end()
    out.append(Token("end", "", len(text)))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def fail(self, expected: str) -> FilterError:
        got = "the end" if self.tok.kind == "end" else repr(self.tok.text)
        return _error(self.text, self.tok.pos, f"expected {expected}, got {got}")

    def take_keyword(self, word: str) -> bool:
        if self.tok.keyword == word:
            self.i += 1
            return True
        return False

    def take_punct(self, char: str) -> bool:
        if self.tok.kind == "punct" and self.tok.text == char:
            self.i += 1
            return True
        return False

    def parse(self) -> Node:
        node = self.expr()
        if self.tok.kind != "end":
            raise self.fail("'and', 'or' or the end")
        return node

    def expr(self) -> Node:
        children = [self.term()]
        while self.take_keyword("or"):
            children.append(self.term())
        return children[0] if len(children) == 1 else BoolOp("or", tuple(children))

    def term(self) -> Node:
        children = [self.factor()]
        while self.take_keyword("and"):
            children.append(self.factor())
        return children[0] if len(children) == 1 else BoolOp("and", tuple(children))

    def factor(self) -> Node:
        if self.take_keyword("not"):
            return Not(self.factor())
        if self.take_punct("("):
            node = self.expr()
            if not self.take_punct(")"):
                raise self.fail("')'")
            return node
        return self.comparison()

    def comparison(self) -> Node:
        tok = self.tok
        if tok.kind != "word" or tok.keyword:
            raise self.fail("a column name")
        self.i += 1
        if self.tok.kind == "op":
            op = "==" if self.tok.text == "=" else self.tok.text
            self.i += 1
            return Compare(tok.text, op, (self.value(),), tok.pos)
        if self.take_keyword("between"):
            low = self.value()
            if not self.take_keyword("and"):
                raise self.fail("'and' of 'between'")
            return Compare(tok.text, "between", (low, self.value()), tok.pos)
        if self.take_keyword("has"):
            return Compare(tok.text, "has", (self.value(),), tok.pos)
        negated = self.take_keyword("not")
        if self.take_keyword("in"):
            if not self.take_punct("("):
                raise self.fail("'(' after 'in'")
            values = [self.value()]
            while self.take_punct(","):
                values.append(self.value())
            if not self.take_punct(")"):
                raise self.fail("',' or ')'")
            return Compare(tok.text, "not in" if negated else "in", tuple(values), tok.pos)
        raise self.fail("an operator (== != < <= > >= between in has)" + (" ('in' after 'not')" if negated else ""))

    def value(self) -> Literal:
        tok = self.tok
        if tok.kind == "number":
            self.i += 1
            return Literal(tok.text, float(tok.text), False)
        if tok.kind == "string":
            self.i += 1
            return Literal(re.sub(r"\\(.)", r"\1", tok.text[1:-1]), None, True)
        if tok.kind == "word" and not tok.keyword:
            self.i += 1
            return Literal(tok.text, None, False)
        raise self.fail("a value (a number, a word or a quoted text)")


def _legacy(text: str) -> Node | None:
    """A simple filter `COLUMN OP TEXT` of before expressions, TEXT being one value (spaces and all)."""
    m = _LEGACY.match(text)
    if m is None or not m.group(3) or m.group(1).lower() in KEYWORDS:
        return None
    rest = m.group(3)
    if len(rest) >= 2 and rest[0] == rest[-1] and rest[0] in "'\"":
        rest = rest[1:-1]
    elif re.search(r"[()<>=!,'\"]", rest) or any(w.lower() in KEYWORDS for w in re.findall(r"[A-Za-z_]+", rest)):
        return None
    op = "==" if m.group(2) == "=" else m.group(2)
    if op not in ("==", "!=") and literal(rest).number is None:
        return None  # an order needs a number: `x < 2x` is a typo, not a text comparison
    return Compare(m.group(1), op, (literal(rest),), m.start(1))


def literal(text: str) -> Literal:
    """A value as written, unquoted (a number when it reads as one)."""
    try:
        number = float(text)
    except ValueError:
        number = None
    return Literal(text, number if number is not None and math.isfinite(number) else None, False)


def parse(text: str) -> Node:
    """The expression's tree; FilterError (naming the expression and the position) if it is not one."""
    try:
        return _Parser(text).parse()
    except FilterError:
        legacy = _legacy(text)
        if legacy is None:
            raise
        return legacy


def compares(node: Node) -> list[Compare]:
    if isinstance(node, Compare):
        return [node]
    if isinstance(node, Not):
        return compares(node.child)
    return [c for child in node.children for c in compares(child)]


def columns(node: Node) -> list[str]:
    """The columns an expression reads, in order of first use."""
    return list(dict.fromkeys(c.column for c in compares(node)))


def check_columns(text: str, node: Node, known: Iterable[str]) -> None:
    have = set(known)
    for c in compares(node):
        if c.column not in have:
            hint = "; the scores are columns once `teleop-flywheel curate --store` (or convert) wrote them" \
                if c.column in CURATION_COLUMNS else ""
            raise _error(text, c.pos, f"unknown column {c.column!r}", hint)


# --------------------------------------------------------------------------- evaluation
def missing(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float | np.floating) and math.isnan(value)


def _items(value: Any) -> list[str] | None:
    if isinstance(value, list | tuple | np.ndarray):
        return ["" if missing(v) else str(v) for v in value]
    return None


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def _compare(value: Any, op: str, lit: Literal) -> bool:
    if missing(value):
        return op == "!="
    if isinstance(value, np.generic):
        value = value.item()
    items = _items(value)
    if items is not None:
        return _COMPARE[op](",".join(items), lit.text)
    if isinstance(value, bool):
        wanted = lit.text.lower()
        if wanted in ("true", "false", "1", "0"):
            return _COMPARE[op](value, wanted in ("true", "1"))
        return _COMPARE[op](str(value), lit.text)
    if isinstance(value, int | float):
        number = lit.number if lit.number is not None else literal(lit.text).number
        if number is not None:
            return _COMPARE[op](float(value), number)
    return _COMPARE[op](str(value), lit.text)


def holds(c: Compare, value: Any) -> bool:
    if c.op == "between":
        return _compare(value, ">=", c.values[0]) and _compare(value, "<=", c.values[1])
    if c.op in ("in", "not in"):
        found = any(_compare(value, "==", v) for v in c.values)
        return not found if c.op == "not in" else found
    if c.op == "has":
        items = _items(value)
        if items is None and isinstance(value, str):
            items = value.split(",")
        return items is not None and c.values[0].text in items
    return _compare(value, c.op, c.values[0])


def evaluate(node: Node, values: Mapping[str, Any]) -> bool:
    if isinstance(node, Compare):
        return holds(node, values.get(node.column))
    if isinstance(node, Not):
        return not evaluate(node.child, values)
    results = (evaluate(c, values) for c in node.children)
    return all(results) if node.op == "and" else any(results)


def why_not(node: Node, values: Mapping[str, Any], want: bool = True) -> list[tuple[Compare, bool]]:
    """The comparisons that make `node` evaluate to `not want` (with what each gave): the reasons an
    episode fails a filter."""
    if evaluate(node, values) == want:
        return []
    if isinstance(node, Compare):
        return [(node, not want)]
    if isinstance(node, Not):
        return why_not(node.child, values, not want)
    # "and" fails (or "or" holds) through each child that does; otherwise through every child.
    deciding = (node.op == "and") == want
    out = []
    for child in node.children:
        if evaluate(child, values) != want or not deciding:
            out += why_not(child, values, want)
    return out


# --------------------------------------------------------------------------- over a dataset
@dataclass
class Filter:
    """Filter expressions that must all hold, parsed and checked against a dataset's columns."""

    texts: list[str]
    nodes: list[Node]

    @classmethod
    def compile(cls, texts: Iterable[str], known: Iterable[str]) -> Filter:
        texts = list(texts)
        known = set(known)
        nodes = [parse(t) for t in texts]
        for text, node in zip(texts, nodes, strict=True):
            check_columns(text, node, known)
        return cls(texts, nodes)

    @property
    def columns(self) -> list[str]:
        return list(dict.fromkeys(c for node in self.nodes for c in columns(node)))

    def keeps(self, values: Mapping[str, Any]) -> bool:
        return all(evaluate(node, values) for node in self.nodes)

    def reasons(self, values: Mapping[str, Any]) -> list[str]:
        """`column = value (the term that failed)`, one per failing comparison."""
        out = []
        for node in self.nodes:
            for c, gave in why_not(node, values):
                shown = "null" if missing(values.get(c.column)) else _show(values.get(c.column))
                out.append(f"{c.column} = {shown} ({'' if gave else 'not '}{c})")
        return out


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    items = _items(value)
    return "[" + ", ".join(items) + "]" if items is not None else str(value)


def record_values(rec: EpisodeRecord, row: Mapping[str, Any], table_columns: set[str]) -> dict[str, Any]:
    """What a filter sees of one episode: its table row, overlaid with the record's typed fields
    (a field whose column the table lacks is left out, so naming it is an unknown column)."""
    out = dict(row)
    for f in fields(rec):
        if f.name == "extra" or (f.name in _TABLE_ONLY and f.name not in table_columns):
            continue
        out[f.name] = getattr(rec, f.name)
    out["task"] = rec.task
    out["num_interventions"] = rec.num_interventions
    if OUTCOME_CHECK in out:
        out[OUTCOME_CHECK] = None if rec.check_passed is None else ("passed" if rec.check_passed else "failed")
    return out


def episode_values(ds: LeRobotDataset) -> tuple[set[str], dict[int, dict[str, Any]]]:
    """(the columns a filter may name, {episode_index: what a filter sees of it})."""
    table = ds.episodes
    cols = set(table.columns)
    rows = {int(r["episode_index"]): r for r in table.to_dict("records")}
    values = {r.episode_index: record_values(r, rows[r.episode_index], cols) for r in episode_records(ds)}
    known = set(cols) | set(_RECORD_ONLY) | {f.name for f in fields(EpisodeRecord) if f.name != "extra"}
    known -= {c for c in _TABLE_ONLY if c not in cols}
    return known, values
