"""Pair selection and the premise statistics on hand-computed cases."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from coalign.moat.pairs import (
    Pair,
    auc,
    held_aside,
    no_pair_advice,
    point_biserial,
    select_pair,
    select_pairs,
    unpaired_counts,
)


def test_pair_is_argmin_chosen_argmax_rejected():
    expected = Pair(chosen=1, rejected=2, chosen_score=0.5, rejected_score=3.0, gap=2.5)
    assert select_pair([2.0, 0.5, 3.0, 1.0]) == expected


def test_gap_exactly_at_threshold_is_kept_and_just_below_is_dropped():
    assert select_pair([0.5, 0.75], threshold=0.25) == Pair(0, 1, 0.5, 0.75, 0.25)
    assert select_pair([0.5, 0.74], threshold=0.25) is None


def test_gap_on_nll_and_on_ppl_differ():
    # NLL around 1: PPL = e^NLL stretches the gap above the threshold
    assert select_pair([1.0, 1.05], gap_on="nll") is None
    pair = select_pair([1.0, 1.05], gap_on="ppl")
    assert pair is not None and pair.gap == pytest.approx(math.exp(1.05) - math.e)
    assert (pair.chosen_score, pair.rejected_score) == (1.0, 1.05)
    # NLL below 0 (a sum reduction never is, a mean can be near 0): PPL shrinks it below
    assert select_pair([-1.0, -0.85], gap_on="nll").gap == pytest.approx(0.15)
    assert select_pair([-1.0, -0.85], gap_on="ppl") is None
    # past exp's range the gap is infinite, not an OverflowError; equal scores still make no pair
    assert select_pair([650.0, 720.0], gap_on="ppl").gap == math.inf
    assert select_pair([720.0, 720.0], gap_on="ppl") is None


def test_ties_choose_the_first_minimum_and_reject_the_last_maximum():
    pair = select_pair([2.0, 1.0, 3.0, 1.0, 3.0])
    assert (pair.chosen, pair.rejected) == (1, 4)


def test_more_pairs_per_task_take_the_best_and_worst_of_the_rest_until_a_gap_is_too_small():
    scores = [2.0, 1.0, 3.0, 1.0, 3.0, 1.9]
    assert select_pairs(scores, 1) == [select_pair(scores)]
    assert [(p.chosen, p.rejected, p.gap) for p in select_pairs(scores, 3, threshold=0.0)] == [
        (1, 4, 2.0),
        (3, 2, 2.0),
        (5, 0, pytest.approx(0.1)),
    ]
    assert len(select_pairs(scores, 3, threshold=0.5)) == 2  # the third gap (0.1) is under the threshold
    assert len(select_pairs(scores[:5], 3, threshold=0.0)) == 2  # five candidates make two pairs


def test_held_aside_tasks_are_a_share_drawn_from_the_seed_alone():
    ids = [f"t{i}" for i in range(40)]
    aside = held_aside(ids, 0.25, seed=3)
    assert len(aside) == 10 and aside <= set(ids)
    assert held_aside(reversed(ids + ids), 0.25, seed=3) == aside  # order and repeats (a web task's turns)
    assert held_aside(ids, 0.25, seed=4) != aside
    assert held_aside(ids, 0.0, seed=3) == frozenset() == held_aside(["t0"], 0.5, seed=3)
    assert len(held_aside(ids[:3], 0.01, seed=3)) == 1 and len(held_aside(ids[:3], 0.99, seed=3)) == 2


@pytest.mark.parametrize("scores", [[], [1.0], [2.0, 2.0, 2.0]])
def test_fewer_than_two_candidates_or_no_gap_is_no_pair(scores):
    assert select_pair(scores) is None
    assert select_pair(scores, threshold=0.0) is None


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="NaN"):
        select_pair([1.0, float("nan")])
    with pytest.raises(ValueError, match="threshold"):
        select_pair([1.0, 2.0], threshold=-1)
    with pytest.raises(ValueError, match="gap_on"):
        select_pair([1.0, 2.0], gap_on="log")


def test_point_biserial_matches_hand_computation():
    scores, success = [0.2, 0.5, 0.9], [True, False, False]
    # textbook form: (M1 - M0) / s * sqrt(p q), s the population standard deviation
    m1, m0, p = 0.2, 0.7, 1 / 3
    s = math.sqrt(sum((x - 1.6 / 3) ** 2 for x in scores) / 3)
    expected = (m1 - m0) / s * math.sqrt(p * (1 - p))
    assert expected == pytest.approx(-0.8220, abs=1e-4)
    assert point_biserial(scores, success) == pytest.approx(expected)
    assert point_biserial([1, 2, 3, 4], [True, True, False, False]) == pytest.approx(-2 / math.sqrt(5))


def test_point_biserial_matches_a_library():
    rng = random.Random(0)
    scores = [rng.gauss(0, 1) for _ in range(40)]
    success = [rng.random() < 0.4 for _ in range(40)]
    try:
        from scipy.stats import pointbiserialr
    except ImportError:
        expected = np.corrcoef(scores, np.asarray(success, dtype=float))[0, 1]
    else:
        expected = pointbiserialr(success, scores).statistic
    assert point_biserial(scores, success) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("scores", "success"),
    [([1.0, 2.0], [True, True]), ([1.0, 2.0], [False, False]), ([1.5, 1.5, 1.5], [True, False, True]), ([], [])],
)
def test_point_biserial_undefined_when_a_side_is_constant(scores, success):
    assert point_biserial(scores, success) is None


def test_auc_on_a_small_case():
    # pairs (success, failure): (1,2) 1, (1,3) 1, (2,2) tie 1/2, (2,3) 1 -> 3.5 / 4
    assert auc([1.0, 2.0, 2.0, 3.0], [True, True, False, False]) == 0.875
    assert auc([3.0, 1.0], [True, False]) == 0.0
    assert auc([1.0, 1.0], [True, False]) == 0.5


def test_auc_equals_counting_every_pair():
    rng = random.Random(1)
    scores = [round(rng.uniform(0, 2), 1) for _ in range(30)]  # rounded: many ties
    success = [rng.random() < 0.5 for _ in range(30)]
    wins = [
        1.0 if s < f else 0.5 if s == f else 0.0
        for s, ok_s in zip(scores, success)
        if ok_s
        for f, ok_f in zip(scores, success)
        if not ok_f
    ]
    assert auc(scores, success) == pytest.approx(sum(wins) / len(wins))


def test_auc_undefined_when_a_class_is_empty():
    assert auc([1.0, 2.0], [True, True]) is None
    assert auc([1.0, 2.0], [False, False]) is None
    with pytest.raises(ValueError, match="success flags"):
        auc([1.0], [True, False])


def test_unpaired_tasks_are_counted_by_reason():
    scores = [[1.0, 1.0, 1.0], [1.0, 1.05], [None, 2.0], [0.5, 3.0]]
    assert unpaired_counts(scores, pairs=1) == {"equal_scores": 1, "unscored": 1, "below_threshold": 1}


def test_no_pair_advice_names_each_cause_and_the_setting_to_change():
    advice = no_pair_advice({"equal_scores": 2, "below_threshold": 3, "unscored": 0}, 0.1, "nll")
    assert advice.startswith("no preference pair: 2 tasks scored all K candidates the same")
    assert "moat.temperature" in advice and "3 tasks had a nll gap under moat.pair_threshold=0.1" in advice
    assert "no score" not in advice
