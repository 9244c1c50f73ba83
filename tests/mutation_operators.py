"""mutmut with the mutations its own operators miss (issue #34), then mutmut's command line.

mutmut changes operators, constants, strings and arguments; the mistakes that slipped past the
suite in the second round were of other shapes. Each operator below makes one of them:

- an aggregate swapped: `max` ↔ `min`, `max` ↔ `sum` (a scaled server's engines summed or not),
  `any` ↔ `all`;
- a slice bound off by one either way, or dropped (`xs[:n]` → `xs[:n - 1]`, `xs[:n + 1]`, `xs[:]`);
- a queryset's filter dropped (`.filter(…)`, `.exclude(…)`, `.distinct()`, `.order_by(…)` →
  what it was called on): a selector that forgets its class or its learner;
- a call's only keyword argument dropped (mutmut drops an argument only where there are two).

    .venv/bin/python -m tests.mutation_operators run|results|show …   # as `mutmut …`
"""
from collections.abc import Iterable

import libcst as cst
import libcst.matchers as m

AGGREGATE_SWAPS = {"max": ("min", "sum"), "min": ("max",), "sum": ("max",), "any": ("all",), "all": ("any",)}
QUERY_STEPS = ("filter", "exclude", "distinct", "order_by")


def swap_aggregate(node: cst.Call) -> Iterable[cst.Call]:
    if not m.matches(node.func, m.Name()) or node.func.value not in AGGREGATE_SWAPS:
        return
    one_iterable = len(node.args) == 1 and node.args[0].keyword is None and not node.args[0].star
    for name in AGGREGATE_SWAPS[node.func.value]:
        # sum(a, b) means something else entirely (b is a start): swap to or from sum only over one iterable
        if "sum" in (name, node.func.value) and not one_iterable:
            continue
        yield node.with_changes(func=node.func.with_changes(value=name))


def _shifted(bound: cst.BaseExpression, by: int) -> cst.BaseExpression:
    if isinstance(bound, cst.Integer):
        return cst.Integer(str(bound.evaluated_value + by))
    wrapped = bound.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) if not bound.lpar else bound
    return cst.BinaryOperation(left=wrapped, operator=cst.Add() if by > 0 else cst.Subtract(), right=cst.Integer(str(abs(by))))


def shift_slice_bound(node: cst.Slice) -> Iterable[cst.Slice]:
    for field in ("lower", "upper"):
        bound = getattr(node, field)
        if bound is None:
            continue
        yield node.with_changes(**{field: None})
        # mutmut already adds one to a literal; a literal takes one off here, anything else both ways
        shifts = (-1,) if isinstance(bound, cst.Integer) else (1, -1)
        for by in shifts:
            if isinstance(bound, cst.Integer) and bound.evaluated_value + by < 0:
                continue
            yield node.with_changes(**{field: _shifted(bound, by)})


def drop_query_step(node: cst.Call) -> Iterable[cst.BaseExpression]:
    if m.matches(node.func, m.Attribute(attr=m.OneOf(*(m.Name(step) for step in QUERY_STEPS)))):
        yield node.func.value


def drop_only_keyword(node: cst.Call) -> Iterable[cst.Call]:
    if len(node.args) == 1 and node.args[0].keyword is not None:
        yield node.with_changes(args=[])


EXTRA_OPERATORS = [
    (cst.Call, swap_aggregate),
    (cst.Slice, shift_slice_bound),
    (cst.Call, drop_query_step),
    (cst.Call, drop_only_keyword),
]


def register() -> None:
    """Add the operators to the list mutmut's visitor reads (mutants are made in processes
    forked from this one, so they see it)."""
    from mutmut.mutation import mutators

    for entry in EXTRA_OPERATORS:
        if entry not in mutators.mutation_operators:
            mutators.mutation_operators.append(entry)


if __name__ == "__main__":
    register()
    from mutmut.__main__ import cli

    cli()
