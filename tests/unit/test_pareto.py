"""platform.sweep.pareto.pareto_front on hand-made points."""
import math

import pytest

from platform.sweep.pareto import dominates, pareto_front


def names(rows):
    return [r["name"] for r in rows]


def test_max_and_min_objectives():
    rows = [
        {"name": "a", "acc": 0.90, "eps": 8.0},   # most accurate
        {"name": "b", "acc": 0.80, "eps": 1.0},   # trade-off
        {"name": "c", "acc": 0.70, "eps": 0.5},   # most private
        {"name": "d", "acc": 0.75, "eps": 1.0},   # dominated by b (less accurate, same eps)
        {"name": "e", "acc": 0.60, "eps": 9.0},   # dominated by everything
    ]
    assert names(pareto_front(rows, [("acc", "max"), ("eps", "min")])) == ["a", "b", "c"]


def test_direction_matters():
    rows = [{"name": "lo", "x": 1.0, "y": 1.0}, {"name": "hi", "x": 2.0, "y": 2.0}, {"name": "mix", "x": 1.0, "y": 2.0}]
    assert names(pareto_front(rows, [("x", "max"), ("y", "max")])) == ["hi"]
    assert names(pareto_front(rows, [("x", "min"), ("y", "min")])) == ["lo"]
    assert names(pareto_front(rows, [("x", "min"), ("y", "max")])) == ["mix"]
    assert names(pareto_front(rows, [("x", "max"), ("y", "min")])) == ["lo", "hi"]  # neither beats the other


def test_duplicates_are_all_kept():
    rows = [{"name": "a", "x": 1.0, "y": 0.0}, {"name": "b", "x": 1.0, "y": 0.0}, {"name": "c", "x": 0.5, "y": 0.0},
            {"name": "d", "x": 0.0, "y": 1.0}]
    assert names(pareto_front(rows, [("x", "max"), ("y", "max")])) == ["a", "b", "d"]
    # a point equal on one objective and better on the other dominates
    assert names(pareto_front(rows, [("x", "max"), ("y", "min")])) == ["a", "b"]


def test_one_objective_is_the_plain_best_with_ties():
    rows = [{"name": "a", "loss": 0.3}, {"name": "b", "loss": 0.1}, {"name": "c", "loss": 0.1},
            {"name": "d", "loss": 2}]
    assert names(pareto_front(rows, [("loss", "min")])) == ["b", "c"]
    assert names(pareto_front(rows, [("loss", "max")])) == ["d"]


def test_missing_values_are_excluded():
    rows = [
        {"name": "none", "x": None, "y": 100.0},
        {"name": "absent", "y": 100.0},
        {"name": "nan", "x": math.nan, "y": 100.0},
        {"name": "text", "x": "high", "y": 100.0},
        {"name": "bool", "x": True, "y": 100.0},
        {"name": "ok", "x": 1.0, "y": 1.0},
        {"name": "int", "x": 0, "y": 2},
    ]
    assert names(pareto_front(rows, [("x", "max"), ("y", "max")])) == ["ok", "int"]
    assert pareto_front([{"x": None}], [("x", "max")]) == [] and pareto_front([], [("x", "max")]) == []


def test_infinity_is_a_value():
    rows = [{"name": "public", "acc": 0.9, "eps": math.inf}, {"name": "private", "acc": 0.7, "eps": 1.0},
            {"name": "worse", "acc": 0.6, "eps": math.inf}]
    assert names(pareto_front(rows, [("acc", "max"), ("eps", "min")])) == ["public", "private"]


def test_three_objectives_and_order_kept():
    rows = [{"name": n, "a": a, "b": b, "c": c} for n, a, b, c in
            [("p", 1, 0, 0), ("q", 0, 1, 0), ("r", 0, 0, 1), ("s", 0, 0, 0), ("t", 1, 1, 0)]]
    assert names(pareto_front(rows, [("a", "max"), ("b", "max"), ("c", "max")])) == ["r", "t"]
    assert names(pareto_front(rows, [("a", "min"), ("b", "min"), ("c", "min")])) == ["s"]


def test_dominates_and_bad_objectives():
    assert dominates([1, 1], [1, 0], ["max", "max"]) and not dominates([1, 1], [1, 1], ["max", "max"])
    assert dominates([0, 1], [1, 1], ["min", "max"]) and not dominates([1, 1], [0, 1], ["min", "max"])
    with pytest.raises(ValueError):
        pareto_front([{"x": 1}], [])
    with pytest.raises(ValueError):
        pareto_front([{"x": 1}], [("x", "up")])


def test_pareto_order_is_layers_each_in_the_one_rank_order():
    from platform.sweep.pareto import pareto_order

    rows = [
        {"name": "b", "number": 2, "acc": 0.80, "eps": 1.0},
        {"name": "a", "number": 1, "acc": 0.90, "eps": 8.0},
        {"name": "d", "number": 4, "acc": 0.75, "eps": 1.0},   # dominated by b only: second layer
        {"name": "e", "number": 5, "acc": 0.60, "eps": 9.0},   # dominated by d too: third layer
        {"name": "c", "number": 3, "acc": 0.70, "eps": 0.5},
        {"name": "c2", "number": 6, "acc": 0.70, "eps": 0.5, "acc_std": 0.01},  # c's point, a larger std: after c
        {"name": "z", "number": 7, "acc": None, "eps": 0.1},  # missing an objective: unranked
    ]
    layers = pareto_order(rows, [("acc", "max"), ("eps", "min")])
    assert [names(layer) for layer in layers] == [["a", "b", "c", "c2"], ["d"], ["e"]]
    # within a layer: the first objective's mean, then the smaller std, then the earlier trial
    tied = [{"name": "late", "number": 9, "acc": 0.5, "eps": 1.0}, {"name": "early", "number": 2, "acc": 0.5,
                                                                     "eps": 1.0}]
    assert names(pareto_order(tied, [("acc", "max"), ("eps", "min")])[0]) == ["early", "late"]
    assert pareto_order([], [("acc", "max")]) == []
