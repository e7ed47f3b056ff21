"""Every model's bilinear form agrees with its forward pass (what full ranking scores from), and fold-in
(recsys.models.fold_in) places a new user among the trained items by ridge regression."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from recsys.errors import RecsysError
from recsys.evaluation.metrics import predict
from recsys.evaluation.scorers import model_scorer
from recsys.models import BayesianMF, RatingModel, YRange, build_model, model_names
from recsys.models.ensemble import Ensemble
from recsys.models.fold_in import RANKING_ALPHA, REGULARIZATION, FoldedUsers, _ridge, fold_in
from recsys.models.ranking import als_penalty
from recsys.train.als import gram, row_strengths, solve_side
from recsys.train.interactions import ByRow

N_USERS, N_ITEMS, N_FACTORS = 6, 9, 3
Y_RANGE = (1.0, 5.0)
BUILT_IN = model_names()  # at import: the built-in models (a test may register more for a while)


def randomise(model: nn.Module, seed: int, std: float = 0.5) -> None:
    """Every parameter drawn afresh, so biases, offsets and projections all carry signal (a freshly
    built model's biases are zero and its projections the identity)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=g) * std)


def training_pairs() -> Tensor:
    """Some users' training pairs (users 0 and 5 rate nothing), for SVD++'s implicit part."""
    return torch.tensor([[1, 0], [1, 4], [2, 2], [3, 1], [3, 2], [3, 8], [4, 7], [1, 4]])


def make(name: str, y_range: YRange | None, seed: int = 0) -> RatingModel:
    """Model `name` with random parameters and, for bpmf, two kept draws (factor_scale 1/2)."""
    model = build_model(name, N_USERS, N_ITEMS, N_FACTORS, y_range, torch.Generator().manual_seed(seed))
    model.set_training_pairs(training_pairs())
    randomise(model, seed + 1)
    if isinstance(model, BayesianMF):
        g = torch.Generator().manual_seed(seed + 2)
        for slot in range(2):
            user_draw = torch.randn(N_USERS, N_FACTORS + 1, generator=g) * 0.7
            item_draw = torch.randn(N_ITEMS, N_FACTORS + 1, generator=g) * 0.7
            model.set_draw(slot, 2, user_draw, item_draw, mean=3.0)
        assert float(model.factor_scale) == 0.5
    return model


def every_pair() -> Tensor:
    users, items = torch.meshgrid(torch.arange(N_USERS), torch.arange(N_ITEMS), indexing="ij")
    return torch.stack([users.reshape(-1), items.reshape(-1)], dim=1)


def assert_scorer_matches_forward(model: RatingModel) -> None:
    # Every member has a form: the scorer takes the matrix product, not its pairwise fallback.
    assert all(member.bilinear_form() is not None for member in model.member_models())
    scores = model_scorer(model, N_ITEMS)(torch.arange(N_USERS))
    assert scores.shape == (N_USERS, N_ITEMS)
    expected = predict(model, every_pair()).reshape(N_USERS, N_ITEMS)
    assert expected.std() > 0.05  # the models' parameters make a difference between pairs
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=1e-5)
    # A block of users in any order, one user repeated.
    users = torch.tensor([4, 0, 4])
    torch.testing.assert_close(model_scorer(model, N_ITEMS)(users), expected[users], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("y_range", [Y_RANGE, None], ids=["squashed", "raw"])
@pytest.mark.parametrize("name", BUILT_IN)
def test_every_models_bilinear_form_is_its_forward(name: str, y_range: YRange | None) -> None:
    assert_scorer_matches_forward(make(name, y_range))


def test_every_models_pair_scores_are_its_forward() -> None:
    pairs = torch.tensor([[0, 3], [5, 8], [2, 0], [2, 0], [3, 2]])
    for name in BUILT_IN:
        model = make(name, Y_RANGE)
        form = model.bilinear_form()
        assert form is not None, name
        expected = predict(model, pairs)
        pair_scores = form.pair_scores(pairs[:, 0], pairs[:, 1])
        torch.testing.assert_close(model.squash(pair_scores), expected, atol=1e-5, rtol=1e-5)
        # The pair scores are the full scores' entries.
        torch.testing.assert_close(
            pair_scores, form.scores(pairs[:, 0])[torch.arange(len(pairs)), pairs[:, 1]]
        )


def test_an_ensembles_scorer_is_the_mean_of_its_members() -> None:
    members = [make("dotbias", Y_RANGE, seed) for seed in (0, 10)]
    ensemble = Ensemble(members)
    assert ensemble.bilinear_form() is None  # its own form is none: the scorer asks its members
    assert_scorer_matches_forward(ensemble)
    singles = [model_scorer(member, N_ITEMS)(torch.arange(N_USERS)) for member in members]
    assert not torch.allclose(singles[0], singles[1])
    torch.testing.assert_close(
        model_scorer(ensemble, N_ITEMS)(torch.arange(N_USERS)), (singles[0] + singles[1]) / 2
    )


def test_a_squash_and_its_unsquash_are_inverse() -> None:
    model = make("dotbias", Y_RANGE)
    scores = torch.tensor([-3.0, -0.5, 0.0, 1.25, 3.0], dtype=torch.float64)
    torch.testing.assert_close(model.unsquash(model.squash(scores)), scores)
    bpmf = make("bpmf", Y_RANGE)
    ratings = torch.tensor([1.5, 3.0, 4.75])
    torch.testing.assert_close(bpmf.unsquash(ratings), ratings)  # clipping: the rating is the score


def test_a_rating_at_or_past_the_ranges_ends_is_read_four_hundredths_of_it_inside() -> None:
    """A 5 on y_range (1, 5) is read as 4.84: a millionth inside, its score of 13.8 had outweighed
    every other rating of the new user."""
    model = make("dotbias", Y_RANGE)
    ratings = torch.tensor([0.5, 1.0, 1.1, 3.0, 4.9, 5.0, 6.0], dtype=torch.float64)
    read = torch.tensor([1.16, 1.16, 1.16, 3.0, 4.84, 4.84, 4.84], dtype=torch.float64)
    torch.testing.assert_close(model.unsquash(ratings), torch.logit((read - 1.0) / 4.0))


# --- fold-in ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dotbias", "dot", "bpmf", "svdpp"])
def test_fold_in_recovers_a_planted_user(name: str) -> None:
    n_items = 40
    model = build_model(name, 1, n_items, 4, Y_RANGE, torch.Generator().manual_seed(0))
    randomise(model, 1, std=0.5)
    if isinstance(model, BayesianMF):
        with torch.no_grad():
            model.global_bias.fill_(3.0)  # the middle of the range: no rating clipped
    form = model.bilinear_form()
    assert form is not None
    g = torch.Generator().manual_seed(2)
    planted = torch.randn(4, generator=g, dtype=torch.float64) * 0.5
    planted_bias = 0.3
    score = form.item_vectors.double() @ planted + form.item_bias.double()
    if form.user_bias is not None:
        score = score + planted_bias
    ratings = model.squash(score)  # no noise
    assert ((ratings > Y_RANGE[0] + 0.05) & (ratings < Y_RANGE[1] - 0.05)).all()  # none at the ends
    items = torch.randperm(n_items, generator=g)  # in any order
    folded = fold_in(model, [(items, ratings[items])], regularization=1e-6)
    assert isinstance(folded, FoldedUsers) and len(folded) == 1
    (new,) = folded.forms
    torch.testing.assert_close(new.user_vectors[0].double(), planted, atol=1e-3, rtol=0)
    if form.user_bias is None:
        assert new.user_bias is None
    else:
        assert new.user_bias is not None
        assert float(new.user_bias[0]) == pytest.approx(planted_bias, abs=1e-3)
    # The item side is the model's, untouched.
    assert new.item_vectors is form.item_vectors or torch.equal(new.item_vectors, form.item_vectors)
    torch.testing.assert_close(new.item_bias, form.item_bias)
    # And the new user's predictions are its ratings.
    torch.testing.assert_close(
        folded.predict(torch.zeros(n_items, dtype=torch.long), torch.arange(n_items)).double(),
        ratings,
        atol=1e-4,
        rtol=0,
    )
    torch.testing.assert_close(folded.scores(torch.tensor([0]))[0].double(), ratings, atol=1e-4, rtol=0)


def test_a_strong_regularization_shrinks_the_user_towards_zero() -> None:
    model = make("dotbias", Y_RANGE)
    items, ratings = torch.tensor([0, 3, 5, 7]), torch.tensor([4.5, 3.5, 1.5, 2.0])
    norms = [
        float(fold_in(model, [(items, ratings)], regularization).forms[0].user_vectors[0].norm())
        for regularization in (1e-3, REGULARIZATION, 1e3)
    ]
    assert norms[0] > norms[1] > norms[2] > 0 and norms[2] < norms[0] / 100


def test_a_user_with_no_ratings_gets_the_bias_only_cold_start() -> None:
    model = make("dotbias", Y_RANGE)
    form = model.bilinear_form()
    assert form is not None and form.user_bias is not None
    empty = (torch.zeros(0, dtype=torch.long), torch.zeros(0))
    # Beside a user with ratings, whose row is unaffected by the empty one.
    rated = (torch.tensor([1, 2, 6]), torch.tensor([4.0, 2.0, 5.0]))
    folded = fold_in(model, [rated, empty])
    alone = fold_in(model, [rated])
    assert len(folded) == 2
    (new,) = folded.forms
    assert new.user_bias is not None
    assert torch.equal(new.user_vectors[1], torch.zeros(N_FACTORS)) and float(new.user_bias[1]) == 0.0
    torch.testing.assert_close(folded.scores(torch.tensor([1]))[0], model.squash(form.item_bias))
    torch.testing.assert_close(folded.scores(torch.tensor([0])), alone.scores(torch.tensor([0])))
    assert new.user_vectors[0].abs().sum() > 0
    # No users at all: an empty fold-in, with rows of the right width.
    nobody = fold_in(model, [])
    assert len(nobody) == 0 and nobody.forms[0].user_vectors.shape == (0, N_FACTORS)


def test_a_user_with_no_ratings_and_no_user_bias_predicts_the_middle_of_the_range() -> None:
    folded = fold_in(make("dot", Y_RANGE), [(torch.zeros(0, dtype=torch.long), torch.zeros(0))])
    assert folded.forms[0].user_bias is None
    torch.testing.assert_close(folded.scores(torch.tensor([0])), torch.full((1, N_ITEMS), 3.0))


def test_an_ensemble_folds_into_each_member_and_predicts_their_mean() -> None:
    members = [make("dotbias", Y_RANGE, seed) for seed in (0, 10)]
    ensemble = Ensemble(members)
    users = [
        (torch.tensor([0, 2, 4, 8]), torch.tensor([5.0, 3.5, 1.0, 4.0])),
        (torch.tensor([3, 7]), torch.tensor([2.0, 4.5])),
    ]
    folded = fold_in(ensemble, users)
    assert folded.members == members and len(folded.forms) == 2 and len(folded) == 2
    apart = [fold_in(member, users) for member in members]
    for together, alone in zip(folded.forms, apart, strict=True):
        torch.testing.assert_close(together.user_vectors, alone.forms[0].user_vectors)
        torch.testing.assert_close(together.user_bias, alone.forms[0].user_bias)
    assert not torch.allclose(apart[0].scores(torch.arange(2)), apart[1].scores(torch.arange(2)))
    every = torch.arange(2)
    mean = (apart[0].scores(every) + apart[1].scores(every)) / 2
    torch.testing.assert_close(folded.scores(every), mean)
    pair_users, pair_items = torch.tensor([1, 0, 1]), torch.tensor([5, 5, 0])
    torch.testing.assert_close(folded.predict(pair_users, pair_items), mean[pair_users, pair_items])


# --- the ridge regression ---------------------------------------------------------------------------


def least_squares(features: Tensor, targets: Tensor, regularization: float) -> Tensor:
    """The ridge solution as a dense least-squares problem: [X; sqrt(lam) I] w = [y; 0]."""
    k = features.shape[1]
    augmented = torch.cat([features, regularization**0.5 * torch.eye(k, dtype=features.dtype)])
    padded = torch.cat([targets, torch.zeros(k, dtype=targets.dtype)])
    return torch.linalg.lstsq(augmented, padded.unsqueeze(1)).solution[:, 0]


@pytest.mark.parametrize(
    "n, k", [(3, 7), (1, 4), (12, 5), (5, 5)], ids=["dual", "dual-one", "primal", "square"]
)
def test_ridge_solves_the_regularised_least_squares(n: int, k: int) -> None:
    g = torch.Generator().manual_seed(n * 10 + k)
    features = torch.randn(n, k, generator=g, dtype=torch.float64)
    targets = torch.randn(n, generator=g, dtype=torch.float64)
    for regularization in (0.3, 2.0):
        solved = _ridge(features, targets, regularization)
        assert solved.shape == (k,)
        torch.testing.assert_close(
            solved, least_squares(features, targets, regularization), atol=1e-10, rtol=1e-8
        )


def test_ridge_of_no_rows_is_zero() -> None:
    solved = _ridge(torch.zeros(0, 4, dtype=torch.float64), torch.zeros(0, dtype=torch.float64), 1.0)
    assert torch.equal(solved, torch.zeros(4, dtype=torch.float64))


@pytest.mark.parametrize("regularization", [0.0, -1.0, float("nan")])
def test_a_regularization_that_is_not_positive_is_refused(regularization: float) -> None:
    with pytest.raises(ValueError, match="regularization must be positive"):
        fold_in(make("dotbias", Y_RANGE), [(torch.tensor([0]), torch.tensor([4.0]))], regularization)


@pytest.mark.parametrize(
    ("items", "ratings", "message"),
    [
        (torch.tensor([0, 1]), torch.tensor([5.0, float("nan")]), "its ratings must be finite numbers"),
        (torch.tensor([-1]), torch.tensor([5.0]), "item index -1 is outside the model's items"),
        (torch.tensor([N_ITEMS]), torch.tensor([5.0]), f"item index {N_ITEMS} is outside the model's items"),
        (torch.tensor([0.7, 1.9]), torch.tensor([5.0, 1.0]), "item indices must be whole numbers"),
        (torch.tensor([0, 1]), torch.tensor([5.0]), "expected as many item indices as ratings"),
        (torch.tensor([[0, 1]]), torch.tensor([[5.0, 1.0]]), "each a 1-D tensor"),
    ],
    ids=["nan-rating", "negative-index", "index-past-the-end", "float-index", "lengths", "2-d"],
)
def test_a_new_users_bad_items_or_ratings_are_refused_by_name(
    items: Tensor, ratings: Tensor, message: str
) -> None:
    """Unchecked, a NaN made every score NaN, -1 meant the last item and 0.7 item 0."""
    with pytest.raises(ValueError, match=rf"new user 1: .*{re.escape(message)}"):
        fold_in(make("dotbias", Y_RANGE), [(torch.tensor([0]), torch.tensor([4.0])), (items, ratings)])


def test_unsigned_item_indices_are_indices() -> None:
    """numpy's uint64 indices (torch has no min or max for them) fold in as int64 ones do, and one
    past int64 is named as outside."""
    model = make("dotbias", Y_RANGE)
    ratings = np.array([5.0, 1.0])
    unsigned = fold_in(model, [(np.array([0, 2], np.uint64), ratings)])
    signed = fold_in(model, [(np.array([0, 2]), ratings)])
    assert torch.equal(unsigned.scores(torch.tensor([0])), signed.scores(torch.tensor([0])))
    with pytest.raises(ValueError, match="item index 9223372036854775807 is outside"):
        fold_in(model, [(np.array([0, 2**64 - 1], np.uint64), ratings)])


# --- models without a form --------------------------------------------------------------------------


class Formless(RatingModel):
    """A rating model whose score is not a bilinear form: bilinear_form() stays None."""

    def __init__(self, n_items: int = N_ITEMS) -> None:
        super().__init__(N_USERS, n_items, Y_RANGE)
        self.item_bias = nn.Parameter(torch.linspace(-1.0, 1.0, n_items))

    def forward(self, x: Tensor) -> Tensor:
        return self.squash(self.item_bias[x[:, 1]] * (1 + x[:, 0]))

    def forward_with_penalty(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self(x), torch.zeros(())


def test_a_model_without_a_bilinear_form_cannot_fold_in() -> None:
    one_user = [(torch.tensor([0]), torch.tensor([4.0]))]
    with pytest.raises(RecsysError, match="Formless has no user vectors"):
        fold_in(Formless(), one_user)
    with pytest.raises(RecsysError, match="Ensemble has no user vectors"):
        fold_in(Ensemble([Formless(), Formless()]), one_user)
    with pytest.raises(TypeError, match=r"expected a recsys\.models\.RatingModel"):
        fold_in(nn.Linear(2, 1), one_user)  # type: ignore[arg-type]


def test_a_model_without_a_form_is_scored_pair_by_pair() -> None:
    model = Formless()
    scores = model_scorer(model, N_ITEMS)(torch.tensor([2, 0]))
    expected = predict(model, every_pair()).reshape(N_USERS, N_ITEMS)[[2, 0]]
    assert not torch.allclose(scores[0], scores[1])  # the user matters in this model
    torch.testing.assert_close(scores, expected)


@pytest.mark.parametrize("name", ["ials", "bpr"])
def test_a_ranking_models_new_user_is_one_row_of_implicit_als_solved_as_its_training_solves_rows(
    name: str,
) -> None:
    """Its ratings at or above `relevant` are positives of strength 1 + rating - relevant. For ials it
    is the row its training solves: one below the threshold a 1 at confidence 1 (a choice), at the
    run's alpha and l2 (per cell of the row's weight); bpr's stands in with the rest zeros (as every
    unrated item), RANKING_ALPHA and `regularization`. Each is implicit ALS's exact solve."""
    model = make(name, None)
    form = model.bilinear_form()
    assert form is not None
    items, ratings = torch.tensor([0, 3, 5, 7, 8]), torch.tensor([5.0, 4.0, 2.0, 4.5, 1.0])
    folded = fold_in(model, [(items, ratings)], regularization=0.7, relevant=4.0, alpha=2.5, l2=0.4)
    rows = np.zeros((1, N_FACTORS), np.float32)
    if name == "ials":
        kept, strengths, alpha = [0, 3, 5, 7, 8], [2.0, 1.0, 0.0, 1.5, 0.0], 2.5
    else:
        kept, strengths, alpha = [0, 3, 7], [2.0, 1.0, 1.5], RANKING_ALPHA
    positives = ByRow(np.array([0, len(kept)]), np.array(kept, np.int32), np.array(strengths, np.float32))
    penalty = (
        als_penalty(0.4, alpha, row_strengths(positives), N_ITEMS) if name == "ials" else np.array([0.7])
    )
    vectors = form.item_vectors.numpy()
    solve_side(rows, vectors, gram(vectors), tuple(positives), alpha, penalty, 0)
    torch.testing.assert_close(
        folded.forms[0].user_vectors[0], torch.from_numpy(rows[0]), atol=1e-5, rtol=1e-5
    )
    # Its scores are the form's: no squash (a ranking score is no rating).
    expected = form.item_vectors @ folded.forms[0].user_vectors[0] + form.item_bias
    torch.testing.assert_close(folded.scores(torch.tensor([0]))[0], expected, atol=1e-5, rtol=1e-5)


def test_a_ranking_models_new_user_reaches_a_threshold_float32_cannot_hold() -> None:
    """A test rating of 7.7 comes as float32 (7.6999998): it is a positive at `relevant` 7.7, as a
    typed 7.7 is, so the fold-in curve's users keep it."""
    model = make("ials", None)
    items = torch.tensor([0, 3])
    held = fold_in(model, [(items, torch.tensor([7.7, 1.0], dtype=torch.float32))], relevant=7.7)
    typed = fold_in(model, [(items, torch.tensor([7.7, 1.0], dtype=torch.float64))], relevant=7.7)
    assert held.forms[0].user_vectors.abs().sum() > 0  # not the zero row of a user with no positive
    torch.testing.assert_close(held.forms[0].user_vectors, typed.forms[0].user_vectors)


def test_a_bayesian_model_of_identical_draws_folds_a_user_in_as_one_draw_does() -> None:
    """The kept draws lie side by side, each scaled by 1/S: fold-in penalises their mean, so S copies
    of one draw place a new user exactly where that one draw alone does."""
    g = torch.Generator().manual_seed(3)
    draw = torch.randn(N_ITEMS, N_FACTORS + 1, generator=g, dtype=torch.float64)
    users = torch.randn(N_USERS, N_FACTORS + 1, generator=g, dtype=torch.float64)
    one, many = (BayesianMF(N_USERS, N_ITEMS, N_FACTORS, Y_RANGE) for _ in range(2))
    one.set_draw(0, 1, users, draw, 3.0)
    for slot in range(4):
        many.set_draw(slot, 4, users, draw, 3.0)
    assert many.draws_side_by_side() == 4 and one.draws_side_by_side() == 1
    rated = [(torch.tensor([0, 2, 5]), torch.tensor([4.0, 2.0, 5.0], dtype=torch.float64))]
    alone, side_by_side = (
        fold_in(one, rated).scores(torch.tensor([0])),
        fold_in(many, rated).scores(torch.tensor([0])),
    )
    torch.testing.assert_close(side_by_side, alone, rtol=1e-5, atol=1e-5)


def test_starts_are_refused_where_they_cannot_place_the_users() -> None:
    rated = [(torch.tensor([0, 2]), torch.tensor([4.0, 2.0]))]
    starts = [(torch.zeros(1, N_FACTORS), torch.zeros(1))]
    ensemble = Ensemble([make("dotbias", Y_RANGE, seed) for seed in (0, 10)])
    with pytest.raises(ValueError, match=r"starts for 1 member\(s\), and the model has 2"):
        fold_in(ensemble, rated, starts=starts)
    with pytest.raises(ValueError, match="a rating model with a user bias"):
        fold_in(make("dot", Y_RANGE), rated, starts=starts)
    with pytest.raises(ValueError, match=r"starts must be \(1, 3\) vectors and 1 biases, got \(1, 5\)"):
        fold_in(make("dotbias", Y_RANGE), rated, starts=[(torch.zeros(1, 5), torch.zeros(1))])
    nothing = [(torch.zeros(0, dtype=torch.long), torch.zeros(0))]
    placed = fold_in(
        make("dotbias", Y_RANGE), nothing, starts=[(torch.ones(1, N_FACTORS), torch.full((1,), 0.5))]
    )
    assert torch.equal(placed.forms[0].user_vectors[0], torch.ones(N_FACTORS))
    # An ensemble's members each start from their own.
    apart = fold_in(
        ensemble,
        nothing,
        starts=[(torch.full((1, N_FACTORS), float(place)), torch.zeros(1)) for place in (1, 2)],
    )
    assert [float(form.user_vectors[0, 0]) for form in apart.forms] == [1.0, 2.0]
