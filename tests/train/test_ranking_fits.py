"""The ranking fits (`bpr`, `ials`) end to end: a planted ranking recovered, the same model on any
number of threads, and data they cannot learn from refused in one line."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import spearmanr

from recsys.config import config_for, model_for
from recsys.data.catalog import load_dataset
from recsys.data.dataset import RatingsDataset, ratings_frame
from recsys.data.encoding import RatingTensors
from recsys.data.synthetic import synthetic_interactions
from recsys.errors import RecsysError
from recsys.evaluation.ranking import evaluate_ranking, ranking_task
from recsys.evaluation.scorers import constant_scorer, model_scorer
from recsys.models.fold_in import fold_in
from recsys.train import bpr
from recsys.train.interactions import positives
from recsys.train.trainer import fit
from recsys.workflows.experiment import train_and_evaluate

# The planted rank; ials's penalty, tuned on ML-100K's 80,000 ratings, is far too strong for 6,000.
PLANTED = {"ials": {"n_factors": 4, "l2": 3.0}, "bpr": {"n_factors": 4}}


@pytest.mark.parametrize("model", PLANTED)
def test_a_planted_ranking_is_recovered(model: str) -> None:
    """On interactions drawn from a planted score, the lists beat the popularity chart by far and
    each user's scores follow the planted ones."""
    dataset, truth = synthetic_interactions(seed=0)
    result = train_and_evaluate(dataset, config_for(model, split="user", **PLANTED[model]), progress=False)
    data = result.data
    task = ranking_task(
        data.train, data.test, len(data.users), len(data.items), result.config.relevant, rating_unit=1.0
    )
    counts = torch.bincount(data.train.x[:, 1], minlength=len(data.items)).double()
    chart = evaluate_ranking(constant_scorer(counts), task)["ndcg@10"]
    assert result.test["ndcg@10"] > 1.3 * chart
    scores = model_scorer(result.model, len(data.items))(torch.arange(len(data.users))).numpy()
    planted = truth.scores()[data.users.raw_ids - 1][:, data.items.raw_ids - 1]
    agreement = np.mean([spearmanr(scores[u], planted[u]).statistic for u in range(len(scores))])
    assert agreement > 0.6


def test_bpr_cut_into_a_grid_still_ranks_the_whole_catalogue(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each positive's negative comes from its own item group: each group must be a cross-section of
    the catalogue, or BPR never compares the popular items with the rest. On interactions drawn by
    popularity alone (Zipf), whose best list is the popularity chart, groups cut as runs of
    popularity at a 4 x 4 grid scored NDCG@10 0.03 against the chart's 0.51."""
    monkeypatch.setattr(bpr, "bpr_grid", lambda n_positives, n_items: 4)
    rng = np.random.default_rng(0)
    n_users, n_items, per_user = 300, 200, 20
    popularity = -1.2 * np.log(np.arange(1, n_items + 1))
    drawn = popularity + rng.gumbel(size=(n_users, n_items))  # Gumbel top-k: draws without replacement
    picked = np.argpartition(-drawn, per_user - 1, axis=1)[:, :per_user].ravel()
    users = np.repeat(np.arange(n_users), per_user)
    frame = ratings_frame(users + 1, picked + 1, np.ones(users.size), np.arange(users.size))
    items = pd.DataFrame({"item": np.arange(1, n_items + 1), "title": [f"item {k}" for k in range(n_items)]})
    dataset = RatingsDataset("zipf", frame, items, (1.0, 1.0), implicit=True)
    result = train_and_evaluate(dataset, config_for("bpr", split="user", n_factors=4), progress=False)
    data = result.data
    task = ranking_task(
        data.train, data.test, len(data.users), len(data.items), result.config.relevant, rating_unit=1.0
    )
    counts = torch.bincount(data.train.x[:, 1], minlength=len(data.items)).double()
    assert result.test["ndcg@10"] > 0.8 * evaluate_ranking(constant_scorer(counts), task)["ndcg@10"]


def test_item_groups_are_dealt_by_popularity() -> None:
    """The items dealt from the most positives down, each to the group with the fewest so far: the
    `grid` most popular land in different groups, and every group gets about as many positives."""
    rng = np.random.default_rng(1)
    weights = 1 / np.arange(1, 401)  # Zipf: the top item has a ninth of the positives
    items = rng.permutation(400)[rng.choice(400, 50_000, p=weights / weights.sum())]
    groups = bpr._dealt_groups(items, 400, 4)
    by_count = np.argsort(-np.bincount(items, minlength=400), kind="stable")
    assert sorted(groups[by_count[:4]]) == [0, 1, 2, 3]
    assert np.bincount(groups, minlength=4).min() > 50  # each a cross-section, not a few items
    positives = np.bincount(groups[items], minlength=4)
    assert positives.max() < 1.01 * positives.min()


@pytest.mark.parametrize("model", PLANTED)
def test_the_same_model_on_any_number_of_threads(model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """BPR's strata cut into a 3 x 3 grid (small data is one block otherwise), ALS's rows split among
    threads: one thread or two give the same tables, bit for bit."""
    monkeypatch.setattr(bpr, "bpr_grid", lambda n_positives, n_items: 3)
    dataset, _ = synthetic_interactions(n_users=120, n_items=90, per_user=15, seed=1)
    frame = dataset.ratings
    users, items = (torch.from_numpy(frame[column].to_numpy() - 1) for column in ("user", "item"))
    train = RatingTensors(torch.stack([users, items], 1), torch.tensor(frame["rating"].to_numpy()))
    config = config_for(model, epochs=3, relevant=1.0)
    tables = []
    for threads in (1, 2):
        generator = torch.Generator().manual_seed(0)
        trained = model_for(config, 120, 90, generator)
        fit(trained, train, RatingTensors(train.x[:0], train.y[:0]), config, generator, threads=threads,
            progress=False)  # fmt: skip
        tables.append(trained.state_dict())
    for name, tensor in tables[0].items():
        assert torch.equal(tensor, tables[1][name]), name


def _pairs(rows: list[tuple[int, int, float]]) -> RatingTensors:
    x = torch.tensor([[user, item] for user, item, _ in rows])
    return RatingTensors(x, torch.tensor([value for _, _, value in rows], dtype=torch.float32))


@pytest.mark.parametrize(
    ("rows", "relevant", "message"),
    [
        ([(0, 0, 2.0), (1, 1, 3.0)], 4.0, "no training rating reaches 4, the relevance threshold"),
        ([(0, 0, 5.0), (0, 1, 4.0), (1, 1, 1.0)], 4.0, "every positive training pair is one user's"),
        ([(0, 0, 1.0), (0, 1, 1.0), (1, 0, 1.0), (1, 1, 1.0)], 1.0, "every user interacted with every item"),
    ],
)
def test_what_a_ranking_model_cannot_learn_from_is_one_line(
    rows: list[tuple[int, int, float]], relevant: float, message: str
) -> None:
    with pytest.raises(RecsysError, match=message):
        positives(_pairs(rows), relevant, 2, 2)


def test_a_positive_is_a_pair_reaching_the_threshold_with_its_graded_strength() -> None:
    found = positives(_pairs([(0, 1, 5.0), (0, 0, 3.0), (1, 0, 4.0), (1, 0, 4.5), (1, 2, 4.0)]), 4.0, 2, 3)
    assert found.by_user.starts.tolist() == [0, 1, 3]
    assert found.by_user.others.tolist() == [1, 0, 2]  # a user's items ascending; the 3 is no positive
    assert found.by_user.strengths.tolist() == [2.0, 1.5, 1.0]  # 1 + value - 4; a repeat keeps its best
    assert found.by_item.starts.tolist() == [0, 1, 2, 3] and found.by_item.others.tolist() == [1, 0, 1]


@pytest.mark.parametrize("model", ["ials", "bpr"])
def test_a_ranking_model_trains_alike_on_any_rating_scale(model: str) -> None:
    """Strengths are in rating units: ratings twice as large (2-10, threshold 8) once weighed ials'
    positives 1 + 10 - 8 = 3 where five stars weigh 2, so `alpha` meant another thing on each scale.
    A folded-in new user is weighed as training weighs the known ones."""
    stars = load_dataset("tiny")
    doubled = dataclasses.replace(
        stars, ratings=stars.ratings.assign(rating=stars.ratings["rating"] * 2), rating_scale=(2.0, 10.0)
    )
    runs = [
        train_and_evaluate(data, config_for(model, dataset="tiny", epochs=3), progress=False)
        for data in (stars, doubled)
    ]
    assert runs[1].config.rating_unit == 2.0 and runs[1].config.relevant == 8.0
    for ours, theirs in zip(runs[0].model.parameters(), runs[1].model.parameters(), strict=True):
        assert torch.equal(ours, theirs)
    # The lists, and every metric: the graded NDCG's gains too, in rating units as the strengths are.
    assert runs[0].test == runs[1].test
    items = torch.tensor([3, 7, 11])
    folded = [
        fold_in(
            run.model,
            [(items, torch.tensor([5.0, 4.0, 2.0]) * scale)],
            relevant=run.config.relevant,
            rating_unit=run.config.rating_unit,
        )
        for run, scale in zip(runs, (1, 2), strict=True)
    ]
    assert torch.equal(folded[0].scores(torch.tensor([0])), folded[1].scores(torch.tensor([0])))


def test_a_value_equal_to_a_threshold_float32_cannot_hold_is_a_positive() -> None:
    """7.7 is held as 7.6999998: compared in float64 with 7.7 it did not reach it."""
    found = positives(_pairs([(0, 0, 7.7), (1, 1, 9.0), (1, 0, 5.0)]), 7.7, 2, 2)
    assert found.by_user.others.tolist() == [0, 1]
    assert found.by_user.strengths.tolist()[0] == 1.0


def test_a_repeat_is_one_users_pair_given_twice_never_two_users_with_the_same_item() -> None:
    """User 0's last item is user 1's first: two positives, not one repeat; user 1's item given
    twice is one, at its best; user 2 has none."""
    found = positives(_pairs([(0, 2, 5.0), (1, 2, 4.0), (1, 2, 5.0), (0, 0, 4.0)]), 4.0, 3, 3)
    assert found.by_user.starts.tolist() == [0, 2, 3, 3]
    assert found.by_user.others.tolist() == [0, 2, 2]
    assert found.by_user.strengths.tolist() == [1.0, 2.0, 2.0]
    assert found.by_item.starts.tolist() == [0, 1, 1, 3] and found.by_item.others.tolist() == [0, 0, 1]


def test_choices_keep_the_pairs_below_the_threshold_at_strength_zero() -> None:
    rows = [(0, 1, 5.0), (0, 0, 3.5), (1, 0, 4.0), (1, 2, 1.0)]  # a half star below the threshold too
    found = positives(_pairs(rows), 4.0, 2, 3, choices=True)
    assert found.by_user.others.tolist() == [0, 1, 0, 2]
    assert found.by_user.strengths.tolist() == [0.0, 2.0, 1.0, 0.0]
    # A second user's low ratings are choices to learn from: one user's positives are then enough.
    assert positives(_pairs([(0, 0, 5.0), (1, 1, 1.0)]), 4.0, 2, 2, choices=True).n_positives == 2
    with pytest.raises(RecsysError, match="every positive training pair is one user's"):
        positives(_pairs([(0, 0, 5.0), (1, 1, 1.0)]), 4.0, 2, 2)


def test_at_most_twenty_epochs_are_watched_the_last_always() -> None:
    dataset, _ = synthetic_interactions(n_users=60, n_items=40, per_user=8, seed=2)
    result = train_and_evaluate(dataset, config_for("bpr", split="user", epochs=45), progress=False)
    watched = [stats.epoch for stats in result.history if not np.isnan(stats.valid_ndcg)]
    assert watched == list(range(3, 46, 3))  # every third of 45, so 15 of them, the 45th among them
    assert result.history[-1].valid_ndcg == pytest.approx(result.test["ndcg@10"])  # the same users


@pytest.mark.parametrize("model", PLANTED)
def test_a_ranking_fit_under_torchrun_is_refused_in_one_line(
    model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("recsys.train.distributed.distributed_rank", lambda: (0, 2))
    dataset, _ = synthetic_interactions(n_users=30, n_items=20, per_user=5, seed=3)
    with pytest.raises(RecsysError, match="trains in one process; a ranking model trains on it alone"):
        train_and_evaluate(dataset, config_for(model, split="user", epochs=1), progress=False)


def test_bprs_grid_leaves_each_item_group_enough_items_to_draw_from() -> None:
    assert bpr.bpr_grid(10_000_000, 26_744) == 14  # the rating engine's grid, at the ML-20M shape
    assert bpr.bpr_grid(10_000_000, 3 * bpr.MIN_GROUP_ITEMS) == 3
    assert bpr.bpr_grid(10_000_000, 2) == 1


def test_bpr_with_no_negative_for_any_positive_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two items, each user with one or both: cut into two item groups (of one item each), no positive
    has another item of its group to rank below it, and nothing would be learnt (the loss read 0 while
    nothing trained); in one group, the users with one item have the other to draw."""
    rows = [(user, item, 1.0) for user in range(40) for item in ((0, 1) if user % 3 == 0 else (user % 2,))]
    train, config = _pairs(rows), config_for("bpr", epochs=2, relevant=1.0)
    monkeypatch.setattr(bpr, "bpr_grid", lambda n_positives, n_items: 2)
    with pytest.raises(RecsysError, match="bpr found no item to rank below any positive"):
        fit(
            model_for(config, 40, 2, torch.Generator()),
            train,
            train,
            config,
            torch.Generator(),
            progress=False,
        )
    monkeypatch.undo()
    history = fit(model_for(config, 40, 2, torch.Generator()), train, train, config, torch.Generator(),
                  progress=False)  # fmt: skip
    assert 0 < history[-1].ratings < len(rows)  # the users with both items drew no negative
