"""recsys.evaluation.ranking: every top-N metric on small cases worked by hand, and the protocol (who is
judged, what is a candidate, what is relevant) on which they rest."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import Tensor

from recsys.data.encoding import RatingTensors
from recsys.evaluation.ranking import (
    RankingTask,
    _best,
    evaluate_ranking,
    gini,
    ranking_task,
    relevance_threshold,
    top_lists,
)
from recsys.evaluation.scorers import constant_scorer

# --- a tiny case, every list known ----------------------------------------------------------------
#
# 4 users, 6 items. The scorer ranks every user's items alike: 0 > 1 > 2 > 3 > 4 > 5.
#
#   user  trained on   test ratings (item: rating)   relevant at threshold 4 (not trained)
#   0     1            0: 5, 3: 4, 4: 2               {0: 5, 3: 4}
#   1     0, 2         3: 5, 5: 4, 1: 1               {3: 5, 5: 4}
#   2     0, 5         5: 5, 2: 3                     {}  (its 5 is on an item it trained on)
#   3     0, 1         4: 3                           {}
#
# Candidates (ranked): user 0: 0 2 3 4 5; user 1: 1 3 4 5. Judged users: 0 and 1.
# Popularity (share of the 4 training users who rated each item):
#   item 0: users 1, 2, 3 -> 3/4; item 1: users 0, 3 -> 2/4; item 2: 1/4; item 3: 0; item 4: 0; item 5: 1/4.

N_USERS, N_ITEMS = 4, 6
ITEM_SCORES = torch.tensor([6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
LOG2_3 = math.log2(3)


def tensors(triples: list[tuple[int, int, float]]) -> RatingTensors:
    """Encoded ratings from (user, item, rating) triples."""
    x = torch.tensor([[user, item] for user, item, _ in triples], dtype=torch.long).reshape(-1, 2)
    y = torch.tensor([rating for _, _, rating in triples], dtype=torch.float32)
    return RatingTensors(x, y)


TRAIN = tensors([(0, 1, 3.0), (1, 0, 4.0), (1, 2, 2.0), (2, 0, 5.0), (2, 5, 1.0), (3, 0, 4.0), (3, 1, 2.0)])
TEST = tensors(
    [
        (0, 0, 5.0),
        (0, 3, 4.0),
        (0, 4, 2.0),
        (1, 3, 5.0),
        (1, 5, 4.0),
        (1, 1, 1.0),
        (2, 5, 5.0),
        (2, 2, 3.0),
        (3, 4, 3.0),
    ]
)


def task(
    threshold: float | None = 4.0, train: RatingTensors = TRAIN, test: RatingTensors = TEST
) -> RankingTask:
    """The tiny case's task."""
    return ranking_task(train, test, N_USERS, N_ITEMS, threshold, rating_unit=1.0)


def relevant(threshold: float | None = 4.0, test: RatingTensors = TEST) -> dict[int, dict[int, float]]:
    """Each judged user's relevant items with their gains."""
    found = task(threshold, test=test)
    out = {}
    for position, user in enumerate(found.users.tolist()):
        items, gains = found.relevant_of(position)
        out[user] = dict(zip(items.tolist(), gains.tolist(), strict=True))
    return out


SCORER = constant_scorer(ITEM_SCORES)


def test_relevance_threshold_is_three_quarters_up_the_scale() -> None:
    assert relevance_threshold((1, 5)) == 4  # 1 + 0.75 * 4
    assert relevance_threshold((2, 10)) == 8  # 2 + 0.75 * 8
    assert relevance_threshold((0.5, 5.0)) == pytest.approx(3.875)  # 0.5 + 0.75 * 4.5


def test_the_task_judges_users_with_a_relevant_item_and_counts_popularity_from_training() -> None:
    found = task()
    assert found.users.tolist() == [0, 1]  # user 2's only 5 is on an item it trained on; user 3 has no 4+
    # Gains are 1 + (rating - threshold) / rating unit: on five stars (unit 1) a 4 gains 1, a 5 gains 2.
    assert relevant() == {0: {0: 2.0, 3: 1.0}, 1: {3: 2.0, 5: 1.0}}
    assert found.popularity.tolist() == [3 / 4, 2 / 4, 1 / 4, 0.0, 0.0, 1 / 4]
    assert found.n_items == N_ITEMS and found.threshold == 4.0


def test_the_lists_are_the_best_candidates_with_training_items_left_out() -> None:
    # User 0 trained on item 1, user 1 on items 0 and 2: those are skipped.
    assert top_lists(SCORER, task(), 3).tolist() == [[0, 2, 3], [1, 3, 4]]
    assert top_lists(SCORER, task(), 1).tolist() == [[0], [1]]


def test_every_per_user_metric_by_hand() -> None:
    results = evaluate_ranking(SCORER, task(), ks=(1, 3))
    assert results["users"] == 2
    # k = 1: user 0's list [0] hits (1 of its 2 relevant); user 1's list [1] misses.
    assert results["precision@1"] == pytest.approx((1 + 0) / 2)
    assert results["recall@1"] == pytest.approx((1 / 2 + 0) / 2)
    # Ideal DCG at 1 of a user with 2 relevant items is 1/log2(2): NDCG 1 for user 0.
    assert results["ndcg@1"] == pytest.approx((1 + 0) / 2)
    assert results["ndcg_graded@1"] == pytest.approx((2 / 2 + 0) / 2)  # gain 2 over the ideal's 2
    assert results["map@1"] == pytest.approx((1 / min(1, 2) + 0) / 2)  # AP = P@1 / min(k, 2)
    assert results["mrr@1"] == pytest.approx((1 + 0) / 2)
    assert results["hit_rate@1"] == pytest.approx((1 + 0) / 2)

    # k = 3: user 0's list [0, 2, 3] hits at ranks 1 and 3; user 1's [1, 3, 4] hits at rank 2.
    assert results["precision@3"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert results["recall@3"] == pytest.approx((2 / 2 + 1 / 2) / 2)
    # user 0: (1/log2(2) + 1/log2(4)) / (1/log2(2) + 1/log2(3)); user 1: (1/log2(3)) / (1 + 1/log2(3))
    ndcg_0 = (1 + 1 / 2) / (1 + 1 / LOG2_3)
    ndcg_1 = (1 / LOG2_3) / (1 + 1 / LOG2_3)
    assert results["ndcg@3"] == pytest.approx((ndcg_0 + ndcg_1) / 2)
    # Graded: gains 1 + rating - 4 (5 -> 2, 4 -> 1). user 0: (2/log2(2) + 1/log2(4)) / (2/log2(2) +
    # 1/log2(3)); user 1 (item 3 rated 5 at rank 2; ideal 5 then 4): (2/log2(3)) / (2 + 1/log2(3)).
    graded_0 = (2 + 1 / 2) / (2 + 1 / LOG2_3)
    graded_1 = (2 / LOG2_3) / (2 + 1 / LOG2_3)
    assert results["ndcg_graded@3"] == pytest.approx((graded_0 + graded_1) / 2)
    # AP: user 0 (P@1 + P@3) / min(3, 2) = (1 + 2/3) / 2; user 1 P@2 / min(3, 2) = (1/2) / 2.
    assert results["map@3"] == pytest.approx(((1 + 2 / 3) / 2 + (1 / 2) / 2) / 2)
    assert results["mrr@3"] == pytest.approx((1 / 1 + 1 / 2) / 2)
    assert results["hit_rate@3"] == pytest.approx((1 + 1) / 2)


def test_every_catalogue_metric_by_hand() -> None:
    results = evaluate_ranking(SCORER, task(), ks=(1, 3))
    # k = 1: items 0 and 1 shown once each.
    assert results["coverage@1"] == pytest.approx(2 / 6)
    assert results["popularity@1"] == pytest.approx((3 / 4 + 2 / 4) / 2)
    # counts sorted [0, 0, 0, 0, 1, 1]; Gini = sum (2r - n - 1) x_r / (n * total) = (3 + 5) / (6 * 2)
    assert results["gini@1"] == pytest.approx(8 / 12)
    # k = 3: [0, 2, 3] and [1, 3, 4]: item 3 twice, 0 1 2 4 once, 5 never.
    assert results["coverage@3"] == pytest.approx(5 / 6)
    # (3/4 + 1/4 + 0 + 2/4 + 0 + 0) / 6 slots
    assert results["popularity@3"] == pytest.approx((3 / 4 + 1 / 4 + 0 + 2 / 4 + 0 + 0) / 6)
    # counts sorted [0, 1, 1, 1, 1, 2], coefficients (2r - 7) = -5 -3 -1 1 3 5:
    # (-3 - 1 + 1 + 3 + 10) / (6 * 6)
    assert results["gini@3"] == pytest.approx(10 / 36)
    per_user = ("precision", "recall", "ndcg", "ndcg_graded", "map", "mrr", "hit_rate")
    catalogue = ("coverage", "popularity", "gini")
    assert set(results) == {"users"} | {f"{metric}@{k}" for metric in per_user + catalogue for k in (1, 3)}


def test_gini_by_hand() -> None:
    assert gini(torch.tensor([2, 2, 2, 2])) == pytest.approx(0.0)  # equal exposure
    assert gini(torch.zeros(5)) == 0.0  # nothing shown
    assert gini(torch.tensor([], dtype=torch.float64)) == 0.0
    # One item takes every slot: coefficients -3 -1 1 3 on [0, 0, 0, 4]: 12 / (4 * 4) = (n - 1) / n
    assert gini(torch.tensor([0.0, 4.0, 0.0, 0.0])) == pytest.approx(3 / 4)
    # [1, 2, 3]: (-2 * 1 + 0 * 2 + 2 * 3) / (3 * 6) = 4/18; as mean absolute difference: 8 / (2 * 9 * 2)
    assert gini(torch.tensor([3, 1, 2])) == pytest.approx(2 / 9)
    assert gini(torch.tensor([1, 2, 3])) == gini(torch.tensor([2, 3, 1]))  # order of items is no matter


def test_a_test_pair_rated_in_training_is_never_relevant() -> None:
    # User 2 rated item 5 in training and 5 stars in test: still not relevant, so user 2 is not judged,
    # even with every test item relevant, where only its item 2 counts.
    assert 2 not in relevant(4.0)
    assert relevant(None)[2] == {2: 3.0}


def test_without_a_threshold_every_test_item_is_relevant() -> None:
    assert relevant(None) == {
        0: {0: 5.0, 3: 4.0, 4: 2.0},
        1: {1: 1.0, 3: 5.0, 5: 4.0},
        2: {2: 3.0},
        3: {4: 3.0},
    }
    found = task(None)
    assert found.users.tolist() == [0, 1, 2, 3] and found.threshold is None
    results = evaluate_ranking(SCORER, found, ks=(1,))
    # Lists at 1: user 0 [0] hit, user 1 [1] hit (rated 1, relevant now), user 2 [1] miss,
    # user 3 [2] miss (it trained on 0 and 1).
    assert top_lists(SCORER, found, 1).tolist() == [[0], [1], [1], [2]]
    assert results["users"] == 4
    assert results["hit_rate@1"] == pytest.approx(2 / 4)
    assert results["recall@1"] == pytest.approx((1 / 3 + 1 / 3 + 0 + 0) / 4)


def test_a_stricter_threshold_judges_fewer_users() -> None:
    # Only 5s: user 0 {0}, user 1 {3}; user 2's 5 is on a trained item.
    assert relevant(5.0) == {0: {0: 1.0}, 1: {3: 1.0}}  # a 5 is now the least relevant rating
    # No test rating reaches 6: nobody is judged, every per-user metric is undefined.
    empty = task(6.0)
    assert len(empty.users) == 0
    assert top_lists(SCORER, empty, 3).shape == (0, 3)
    results = evaluate_ranking(SCORER, empty, ks=(3,))
    assert results["users"] == 0 and math.isnan(results["precision@3"])
    assert results["coverage@3"] == 0.0 and math.isnan(results["popularity@3"])
    assert results["gini@3"] == 0.0


def test_a_user_with_fewer_candidates_than_k_gets_minus_one_and_precision_still_divides_by_k() -> None:
    # User 0 has 5 candidates (0 2 3 4 5), user 1 four (1 3 4 5).
    lists = top_lists(SCORER, task(), 5)
    assert lists.tolist() == [[0, 2, 3, 4, 5], [1, 3, 4, 5, -1]]
    results = evaluate_ranking(SCORER, task(), ks=(5,))
    # Both users find both of their relevant items among 5 slots: 2/5 each, not 2/4 for user 1.
    assert results["precision@5"] == pytest.approx(2 / 5)
    assert results["recall@5"] == pytest.approx(1.0)
    assert results["hit_rate@5"] == pytest.approx(1.0)
    # user 0 hits at ranks 1, 3; user 1 at ranks 2, 4 (its list 1 3 4 5).
    ndcg_1 = (1 / LOG2_3 + 1 / math.log2(5)) / (1 + 1 / LOG2_3)
    assert results["ndcg@5"] == pytest.approx(((1 + 1 / 2) / (1 + 1 / LOG2_3) + ndcg_1) / 2)
    assert results["map@5"] == pytest.approx(((1 + 2 / 3) / 2 + (1 / 2 + 2 / 4) / 2) / 2)
    # The empty slot is not an exposure: 9 slots shown, every item at least once.
    assert results["coverage@5"] == pytest.approx(1.0)
    # [0 2 3 4 5] + [1 3 4 5]: (3/4 + 1/4 + 0 + 0 + 1/4) + (2/4 + 0 + 0 + 1/4) over 9 slots
    assert results["popularity@5"] == pytest.approx((5 / 4 + 3 / 4) / 9)
    # counts [1, 1, 1, 2, 2, 2]: (-5 - 3 - 1 + 2 + 6 + 10) / (6 * 9)
    assert results["gini@5"] == pytest.approx(9 / 54)


def test_a_k_past_the_catalogue_still_divides_precision_by_k() -> None:
    results = evaluate_ranking(SCORER, task(), ks=(10,))
    # Both users see both relevant items (lists as at 5): 2/10 each; AP as at 5.
    assert results["precision@10"] == pytest.approx(2 / 10)
    assert results["recall@10"] == pytest.approx(1.0)
    assert results["map@10"] == pytest.approx(((1 + 2 / 3) / 2 + (1 / 2 + 2 / 4) / 2) / 2)
    assert results["coverage@10"] == pytest.approx(1.0)
    # A list of ten million is scored on the places the catalogue fills, not held in memory: every
    # metric as at the catalogue's size, precision divided by its own k.
    huge = 10**7
    both = evaluate_ranking(SCORER, task(), ks=(N_ITEMS, huge))
    for name, value in both.items():
        if name.endswith(f"@{huge}"):
            same = both[name.replace(f"@{huge}", f"@{N_ITEMS}")]
            expected = same * N_ITEMS / huge if name.startswith("precision") else same
            assert value == pytest.approx(expected), name


def test_top_lists_has_k_columns_even_past_the_catalogue() -> None:
    lists = top_lists(SCORER, task(), 8)
    assert lists.tolist() == [[0, 2, 3, 4, 5, -1, -1, -1], [1, 3, 4, 5, -1, -1, -1, -1]]


def test_a_repeated_test_pair_counts_once_with_its_highest_rating() -> None:
    repeated = tensors(
        [
            (0, 0, 3.0),
            (0, 0, 5.0),
            (0, 3, 5.0),
            (0, 3, 2.0),
            (0, 4, 4.0),
            (0, 4, 4.5),
            (0, 4, 4.0),
            (1, 3, 2.0),
            (1, 3, 1.0),
        ]
    )
    # Item 0: 3 then 5 -> 5; item 3: 5 then 2 -> 5; item 4: 4, 4.5, 4 -> 4.5; user 1 never reaches 4.
    # Gains 1 + rating - 4.
    assert relevant(4.0, test=repeated) == {0: {0: 2.0, 3: 2.0, 4: 1.5}}
    assert relevant(None, test=repeated) == {0: {0: 5.0, 3: 5.0, 4: 4.5}, 1: {3: 2.0}}
    results = evaluate_ranking(SCORER, task(4.0, test=repeated), ks=(3,))
    # User 0's list [0, 2, 3] holds 2 of its 3 relevant items (not 2 of 7 rows).
    assert results["recall@3"] == pytest.approx(2 / 3)
    # Graded ideal from the deduplicated gains 2, 2, 1.5: (2 + 2/log2(4)) / (2 + 2/log2(3) + 1.5/log2(4))
    assert results["ndcg_graded@3"] == pytest.approx((2 + 2 / 2) / (2 + 2 / LOG2_3 + 1.5 / 2))


# --- properties on random data ----------------------------------------------------------------------


def random_case(seed: int = 0) -> tuple[RatingTensors, RatingTensors, Tensor, int, int]:
    """Random train and test ratings over 23 users and 11 items, and a score for every pair."""
    g = torch.Generator().manual_seed(seed)
    n_users, n_items = 23, 11

    def ratings(n: int) -> RatingTensors:
        x = torch.stack(
            [torch.randint(0, n_users, (n,), generator=g), torch.randint(0, n_items, (n,), generator=g)], 1
        )
        return RatingTensors(x, torch.randint(1, 6, (n,), generator=g).float())

    return ratings(90), ratings(80), torch.randn(n_users, n_items, generator=g), n_users, n_items


def test_training_items_are_never_recommended_and_lists_are_best_first() -> None:
    train, test, scores, n_users, n_items = random_case()
    found = ranking_task(train, test, n_users, n_items, 4.0, rating_unit=1.0)
    lists = top_lists(lambda users: scores[users], found, n_items)
    trained = {(int(u), int(i)) for u, i in train.x}
    assert len(found.users) > 5
    for user, row in zip(found.users.tolist(), lists, strict=True):
        shown = [int(item) for item in row if item >= 0]
        candidates = [item for item in range(n_items) if (user, item) not in trained]
        assert not any((user, item) in trained for item in shown)
        # Every candidate, in descending score order, then -1 for each trained item.
        assert shown == sorted(candidates, key=lambda item: -float(scores[user, item]))
        assert list(row[len(shown) :]) == [-1] * (n_items - len(shown))


def test_results_do_not_depend_on_the_block_size() -> None:
    train, test, scores, n_users, n_items = random_case(1)
    found = ranking_task(train, test, n_users, n_items, 4.0, rating_unit=1.0)
    blocks: list[int] = []

    def scorer(users: Tensor) -> Tensor:
        blocks.append(len(users))
        return scores[users]

    one_by_one = evaluate_ranking(scorer, found, ks=(1, 3, 5), block_entries=n_items)
    assert blocks == [1] * len(found.users)  # a block of n_items entries holds one user
    blocks.clear()
    in_threes = evaluate_ranking(scorer, found, ks=(1, 3, 5), block_entries=3 * n_items + 2)
    assert blocks[:-1] == [3] * (len(blocks) - 1) and sum(blocks) == len(found.users)
    blocks.clear()
    at_once = evaluate_ranking(scorer, found, ks=(1, 3, 5))
    assert blocks == [len(found.users)]
    assert one_by_one.keys() == at_once.keys() == in_threes.keys()
    for name in at_once:
        assert one_by_one[name] == pytest.approx(at_once[name], abs=1e-12), name
        assert in_threes[name] == pytest.approx(at_once[name], abs=1e-12), name
    np.testing.assert_array_equal(
        top_lists(scorer, found, 4, block_entries=n_items), top_lists(scorer, found, 4)
    )


def test_a_perfect_scorer_scores_one_and_per_user_metrics_stay_in_range() -> None:
    train, test, _, n_users, n_items = random_case(2)
    found = ranking_task(train, test, n_users, n_items, 4.0, rating_unit=1.0)
    # Scores are the users' gains: relevant items first, the highest rated first.
    perfect = torch.zeros(n_users, n_items)
    for position, user in enumerate(found.users.tolist()):
        items, gains = found.relevant_of(position)
        perfect[user, items] = gains.float()
    results = evaluate_ranking(lambda users: perfect[users], found, ks=(1, 5))
    for metric in ("ndcg", "ndcg_graded", "map", "mrr", "hit_rate"):
        assert results[f"{metric}@1"] == pytest.approx(1.0), metric
        assert results[f"{metric}@5"] == pytest.approx(1.0), metric
    noisy = evaluate_ranking(lambda users: torch.randn(len(users), n_items), found, ks=(1, 5))
    for name, value in noisy.items():
        if name != "users":
            assert 0.0 <= value <= 1.0, name


def test_a_length_named_twice_is_scored_once() -> None:
    """Each k's sums are keyed by name: a repeated k once added its users twice (precision doubled)."""
    once = evaluate_ranking(SCORER, task(), ks=(1, 3))
    assert evaluate_ranking(SCORER, task(), ks=(3, 1, 3, np.int64(1))) == once
    assert once["precision@3"] <= 1.0


@pytest.mark.parametrize("threshold", [float("nan"), float("inf"), float("-inf"), "4"])
def test_a_threshold_that_is_no_finite_rating_is_refused(threshold: object) -> None:
    """NaN and inf had judged nobody (every metric NaN), -inf had made graded NDCG NaN, and text had
    been a TypeError from inside torch."""
    with pytest.raises(ValueError, match="threshold must be a finite rating or None"):
        task(threshold)  # type: ignore[arg-type]
    assert len(task(np.float32(4.0)).users) == 2  # numpy's numbers are ratings as Python's are


@pytest.mark.parametrize("threshold", [4.0, None], ids=["threshold", "all"])
@pytest.mark.parametrize("factor", [200.0, 2.0, 0.2])
def test_the_same_ratings_on_another_scale_give_the_same_graded_ndcg(
    threshold: float | None, factor: float
) -> None:
    """Gains were 1 + rating - threshold in the ratings' own units: on 0-1000 a 1000 gained 201 to an
    800's 1 where five stars' 5 gains 2 to a 4's 1, so one order of preferences scored another
    graded NDCG on each scale. They are in rating units (five stars' 1, 0-1000's 200) as `ials`'
    strengths are."""
    train, test = (RatingTensors(part.x, part.y * factor) for part in (TRAIN, TEST))
    rescaled = ranking_task(
        train, test, N_USERS, N_ITEMS, None if threshold is None else threshold * factor, rating_unit=factor
    )
    stars = evaluate_ranking(SCORER, task(threshold), ks=(1, 3))
    assert evaluate_ranking(SCORER, rescaled, ks=(1, 3)) == pytest.approx(stars)
    assert stars["ndcg_graded@3"] != pytest.approx(stars["ndcg@3"])  # the grades tell the 5s apart


@pytest.mark.parametrize("unit", [0.0, -1.0, float("nan"), float("inf"), True, "1"])
def test_a_rating_unit_that_is_no_positive_number_is_refused(unit: object) -> None:
    with pytest.raises(ValueError, match="rating_unit must be a positive finite number"):
        ranking_task(TRAIN, TEST, N_USERS, N_ITEMS, 4.0, rating_unit=unit)  # type: ignore[arg-type]


def test_a_scorer_giving_nan_or_the_wrong_shape_is_named() -> None:
    """Once a RuntimeError from inside torch (a view of the wrong size) or a size mismatch."""
    n_items = task().n_items
    candidates = [item for item in range(n_items) if item not in set(TRAIN.x[TRAIN.x[:, 0] == 1, 1].tolist())]
    for nan_item in (candidates[0], candidates[-1]):  # a candidate's NaN, wherever it is in the row
        scores = torch.arange(n_items, dtype=torch.float32).repeat(N_USERS, 1)
        scores[1, nan_item] = float("nan")
        with pytest.raises(ValueError, match="the scorer gave NaN scores"):
            evaluate_ranking(lambda users, scores=scores: scores[users], task(), ks=(1,))
    with pytest.raises(ValueError, match=rf"scores of shape \(2, {n_items - 1}\) for 2 users; expected"):
        evaluate_ranking(lambda users: torch.zeros(len(users), n_items - 1), task(), ks=(1,))
    infinite = torch.zeros(2, n_items)
    infinite[:, 3] = float("inf")  # an infinite score still ranks: first
    assert evaluate_ranking(lambda users: infinite[: len(users)], task(), ks=(1,))["users"] == 2


def test_lengths_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="k must be at least 1"):
        top_lists(SCORER, task(), 0)
    with pytest.raises(ValueError, match="ks must be"):
        evaluate_ranking(SCORER, task(), ks=())
    with pytest.raises(ValueError, match="ks must be"):
        evaluate_ranking(SCORER, task(), ks=(3, 0))
    with pytest.raises(ValueError, match=r"ks must be one or more whole lengths of at least 1, got \[5.0\]"):
        evaluate_ranking(SCORER, task(), ks=[5.0])
    # numpy's integers are lengths as Python's are.
    assert evaluate_ranking(SCORER, task(), ks=np.array([1, 3])) == evaluate_ranking(
        SCORER, task(), ks=(1, 3)
    )


@pytest.mark.parametrize(("column", "value", "kind"), [(1, N_ITEMS, "item"), (0, -1, "user")])
def test_a_test_pair_past_the_tables_is_refused_not_aliased(column: int, value: int, kind: str) -> None:
    """Keys user * n_items + item would read an item past the end as the next user's first item."""
    x = TEST.x.clone()
    x[0, column] = value
    with pytest.raises(IndexError, match=rf"test {kind} index {value} \(row 0\) is outside"):
        task(test=RatingTensors(x, TEST.y))


def test_a_rating_of_zero_or_below_is_still_relevant() -> None:
    # Every test item relevant on a scale that reaches 0 and below: gains 1 + rating - (-1).
    train = tensors([(0, 1, 1.0), (1, 1, 1.0)])
    test = tensors([(0, 0, 0.0), (1, 2, -1.0)])
    found = ranking_task(train, test, 2, 3, None, rating_unit=1.0)
    results = evaluate_ranking(constant_scorer(torch.tensor([3.0, 2.0, 1.0])), found, ks=(1, 2))
    # User 0's list [0, 2] hits at 1; user 1's [0, 2] hits at 2.
    assert results["precision@1"] == pytest.approx(0.5)
    assert results["recall@2"] == pytest.approx(1.0)
    assert results["ndcg@2"] == pytest.approx((1 + 1 / LOG2_3) / 2)
    assert results["map@2"] == pytest.approx((1 + 1 / 2) / 2)
    assert results["ndcg_graded@2"] == pytest.approx((1 + 1 / LOG2_3) / 2)  # one relevant item each


def test_ties_are_broken_by_item_so_a_list_does_not_depend_on_the_longest_k() -> None:
    # Every item scores alike: lists run in item order, whatever the longest k asked for.
    train = tensors([(0, 0, 3.0)])
    test = tensors([(0, 1, 5.0)])
    found = ranking_task(train, test, 1, 40, 4.0, rating_unit=1.0)
    flat = constant_scorer(torch.zeros(40))
    assert top_lists(flat, found, 3).tolist() == [[1, 2, 3]]
    assert top_lists(flat, found, 40)[0, :3].tolist() == [1, 2, 3]
    short, long = evaluate_ranking(flat, found, ks=(2,)), evaluate_ranking(flat, found, ks=(2, 40))
    assert short["precision@2"] == long["precision@2"] == pytest.approx(1 / 2)


@pytest.mark.parametrize("k", [1, 3, 7, 30])
def test_each_list_is_its_rows_best_by_score_then_item_whatever_ties_topk_meets(k: int) -> None:
    """Scores of few values tie within the list, at its k-th place (more of them than places, or as
    many) and below it; some rows have fewer candidates than k. Each list must be the row's items
    sorted by score, highest first, then by item."""
    generator = torch.Generator().manual_seed(k)
    scores = torch.randint(0, 4, (50, 30), generator=generator).double()
    scores[torch.rand(50, 30, generator=generator) < 0.2] = -torch.inf  # items left out
    scores[:5, 2:] = -torch.inf  # two candidates at most
    values, columns = _best(scores, k)
    for row in range(len(scores)):
        expected = sorted(range(30), key=lambda item: (-scores[row, item].item(), item))[:k]
        assert columns[row].tolist() == expected
        assert torch.equal(values[row], scores[row, expected])


def test_a_rating_equal_to_a_threshold_float32_cannot_hold_is_relevant() -> None:
    """Ratings are held as float32, where 7.7 is 7.6999998: compared in float64 with the threshold
    7.7, a rating of 7.7 was not "at or above 7.7", and its user went unjudged."""
    found = ranking_task(
        tensors([(0, 0, 9.0)]), tensors([(0, 1, 7.7), (0, 2, 8.3)]), 1, 3, 7.7, rating_unit=1.0
    )
    items, gains = found.relevant_of(0)
    assert items.tolist() == [1, 2]
    assert gains.tolist()[0] == 1.0  # the threshold's own rating gains exactly 1
    assert found.threshold == 7.7  # the task keeps the threshold as given


def test_a_candidate_scored_minus_infinity_still_ranks_last_and_float64_scores_are_kept() -> None:
    train, test = tensors([(0, 0, 3.0)]), tensors([(0, 3, 5.0)])
    found = ranking_task(train, test, 1, 4, 4.0, rating_unit=1.0)
    # Item 0 is excluded (rated in training); item 3, relevant, is a candidate the scorer put at -inf.
    assert top_lists(constant_scorer(torch.tensor([9.0, 2.0, 1.0, -math.inf])), found, 3).tolist() == [
        [1, 2, 3]
    ]
    # float64 scores 1e-9 apart are not made a tie (float32 would rank item 1 first, by index).
    close = constant_scorer(torch.tensor([0.0, 1.0, 0.0, 1.0 + 1e-9], dtype=torch.float64))
    assert top_lists(close, found, 1).tolist() == [[3]]
