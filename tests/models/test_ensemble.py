"""Ensembles (``members` N`): the mean of models trained apart, and what they say about themselves."""

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from recsys.config import RunConfig, config_for
from recsys.data.dataset import RatingsDataset
from recsys.errors import RecsysError
from recsys.models import DotProduct, DotProductBias, Ensemble, RatingModel, build_model
from recsys.models.fold_in import fold_in
from recsys.train.checkpoints import load_checkpoint
from recsys.workflows.experiment import new_user_starts, train_and_evaluate
from recsys.workflows.recommend import explain

Y_RANGE = (0.0, 5.5)


def trained_ensemble(members: int = 2) -> Ensemble:
    """An ensemble whose members' tables and biases all differ (set apart at random)."""
    model = build_model("dotbias", 7, 5, 3, Y_RANGE, torch.Generator().manual_seed(0), members=members)
    assert isinstance(model, Ensemble)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.5, generator=generator)
    return model


def every_pair(n_users: int = 7, n_items: int = 5) -> torch.Tensor:
    return torch.cartesian_prod(torch.arange(n_users), torch.arange(n_items))


def test_members_start_apart_and_the_prediction_is_their_mean() -> None:
    model = build_model("dotbias", 7, 5, 3, Y_RANGE, torch.Generator().manual_seed(0), members=3)
    assert isinstance(model, Ensemble) and len(model.members) == 3
    first, second = (member.user_factors.weight for member in model.member_models()[:2])
    assert not torch.equal(first, second)
    # The first member starts where a one-model run from the same generator seed does.
    single = build_model("dotbias", 7, 5, 3, Y_RANGE, torch.Generator().manual_seed(0))
    assert torch.equal(first, single.user_factors.weight)
    x = every_pair()
    mean = torch.stack([member(x) for member in model.members]).mean(dim=0)
    assert torch.equal(model(x), mean)
    prediction, penalty = model.forward_with_penalty(x)
    assert torch.allclose(prediction, mean)
    assert torch.allclose(penalty, torch.stack([m.penalty(x) for m in model.member_models()]).mean())


@pytest.mark.parametrize(
    "members", [[], [DotProductBias(3, 3, 2)], [DotProductBias(3, 3, 2), DotProduct(3, 3, 2)]]
)
def test_an_ensemble_needs_two_members_of_one_class(members: list) -> None:
    with pytest.raises(ValueError, match="two or more members of one model class"):
        Ensemble(members)


@pytest.mark.parametrize(
    ("other", "described"),
    [
        (DotProductBias(5, 3, 2, (0.5, 5.5)), "member 1 has 5 users, 3 items and y_range (0.5, 5.5)"),
        (DotProductBias(3, 4, 2, (0.5, 5.5)), "member 1 has 3 users, 4 items and y_range (0.5, 5.5)"),
        (DotProductBias(3, 3, 2, (1, 10)), "member 1 has 3 users, 3 items and y_range (1.0, 10.0)"),
        (DotProductBias(3, 3, 2), "member 1 has 3 users, 3 items and y_range None"),
    ],
)
def test_members_of_other_sizes_or_ranges_are_refused(other: DotProductBias, described: str) -> None:
    """Not torch's "index out of range in self" for a user only the first member has, nor an ensemble
    whose y_range (its first member's) its mean leaves."""
    message = rf"^an ensemble's members need one size and y_range: {re.escape(described)}, member 0 3 users"
    with pytest.raises(ValueError, match=message):
        Ensemble([DotProductBias(3, 3, 2, (0.5, 5.5)), other])


def test_biases_are_the_members_mean() -> None:
    model = trained_ensemble(3)
    biases = model.learned_biases()
    assert biases is not None and biases.kind == "explicit"
    members = [member.learned_biases() for member in model.member_models()]
    np.testing.assert_allclose(biases.user, np.mean([b.user for b in members if b], axis=0))
    np.testing.assert_allclose(biases.item, np.mean([b.item for b in members if b], axis=0))
    assert not np.allclose(biases.user, members[0].user)  # type: ignore[union-attr]


def test_id_vectors_dot_products_are_the_members_mean() -> None:
    model = trained_ensemble(2)
    vectors = model.id_vectors()
    assert vectors is not None
    users, items = vectors
    assert users.shape == (7, 6) and items.shape == (5, 6)
    means = torch.stack([u @ i.T for u, i in (m.id_vectors() for m in model.member_models())]).mean(dim=0)  # type: ignore[misc]
    assert torch.allclose(users @ items.T, means, atol=1e-6)


def test_an_explanation_adds_up_and_predicts_what_forward_does() -> None:
    model = trained_ensemble(2)
    x = every_pair()
    explanation = model.explain(x[:, 0], x[:, 1])
    assert explanation is not None
    assert set(explanation.terms) == {"user_bias", "item_bias", "factors"}
    assert torch.allclose(sum(explanation.terms.values()), explanation.score, atol=1e-6)
    assert torch.equal(explanation.prediction, model(x))
    # The mean of squashed scores, not the squash of the mean score.
    assert not torch.allclose(model.squash(explanation.score), explanation.prediction)


def test_an_ensemble_of_models_without_biases_has_none() -> None:
    model = build_model("dot", 4, 3, 2, Y_RANGE, torch.Generator().manual_seed(0), members=2)
    assert model.learned_biases() is None and model.explain(torch.tensor([0]), torch.tensor([1])) is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"members": 0}, "`members` must be at least 1"),
        ({"members": 1.5}, "`members` must be a whole number"),
        (
            {"members": 2, "engine": "autograd"},
            "`members` 2: an ensemble trains on `engine` compiled or device only",
        ),
        (
            {"members": 2, "model": "bpmf", "engine": "autograd"},
            "bpmf's members are its sampler's chains, on `engine` compiled",
        ),
        (
            {"members": 2, "model": "linear"},
            "ensembles train on the compiled or device engine, neither of which linear has",
        ),
        ({"members": 101, "engine": "compiled"}, "`members` 101: at most 100"),
        ({"members": True, "engine": "compiled"}, "`members` must be a whole number"),
    ],
)
def test_members_no_run_can_use_are_refused(settings: dict, message: str) -> None:
    with pytest.raises(RecsysError, match=message):
        RunConfig(**settings)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"batch_size": 256}, "`batch_size` rules out; leave it"),
        ({"batch_size": 256, "wd": 0.01}, "`batch_size` and `wd` rule out; leave them or `members` out"),
        # On a GPU the ensemble trains on the device engine: only the autograd-only flag is named.
        ({"batch_size": 256, "device": "cuda"}, "`batch_size` rules out; leave it"),
    ],
)
def test_an_ensemble_with_a_flag_that_picks_the_autograd_engine_names_that_flag(
    settings: dict, named: str
) -> None:
    with pytest.raises(
        RecsysError, match=f"`members` 2: an ensemble trains on the compiled or device engine, which {named}"
    ):
        config_for("dotbias", members=2, **settings)
    assert config_for("dotbias", **settings).members == 1  # the autograd engine's default: one model
    # A sampler's chains (its members) are the compiled engine's as well.
    with pytest.raises(RecsysError, match=r"`members` 2: an ensemble trains on .* which `batch_size`"):
        config_for("bpmf", members=2, **settings)
    # What RunConfig refuses whatever the engine is named by RunConfig, not put down to the flag.
    with pytest.raises(RecsysError, match="`members` 101: at most 100"):
        config_for("dotbias", members=101, **settings)


def test_memory_is_counted_per_member_and_a_refusal_names_members() -> None:
    from recsys.train.memory import check_fits, training_bytes

    one = config_for("dotbias", n_factors=8, members=1)
    assert training_bytes(dataclasses.replace(one, members=100), 50, 40) == 100 * training_bytes(one, 50, 40)
    huge = dataclasses.replace(one, members=100, n_factors=2_000_000)
    with pytest.raises(
        RecsysError, match=r"`members` 100, `n_factors` 2000000: .* fewer members or fewer factors"
    ):
        check_fits(huge, 10**5, 10**5)


def test_each_member_trains_as_a_model_of_its_own(tiny: RatingsDataset) -> None:
    """The first member ends where the one-model run does (same start, same seed); the others train
    from other starts and orders, to other tables."""
    config = config_for("dotbias", dataset="tiny", epochs=3, members=1)
    single = train_and_evaluate(tiny, config, progress=False).model
    ensemble = train_and_evaluate(tiny, dataclasses.replace(config, members=2), progress=False).model
    assert isinstance(ensemble, Ensemble)
    first, second = ensemble.member_models()
    for name, tensor in single.state_dict().items():
        assert torch.equal(tensor, first.state_dict()[name]), name
    assert not torch.allclose(first.item_factors.weight, second.item_factors.weight)


def test_the_trainers_validation_scores_the_ensemble(tiny: RatingsDataset) -> None:
    result = train_and_evaluate(
        tiny, config_for("dotbias", dataset="tiny", epochs=3, members=2), progress=False
    )
    assert result.history[-1].valid_rmse == pytest.approx(result.test["rmse"], abs=1e-5)


def test_an_ensembles_checkpoint_loads_and_explains(tiny: RatingsDataset, tmp_path: Path) -> None:
    config = config_for("dotbias", dataset="tiny", epochs=2, members=2)
    result = train_and_evaluate(tiny, config, run_dir=tmp_path, progress=False)
    checkpoint = load_checkpoint(tmp_path / "checkpoint.pt")
    assert checkpoint.config.members == 2 and isinstance(checkpoint.model, Ensemble)
    x = result.data.test.x
    assert torch.equal(checkpoint.model(x), result.model(x))
    user, item = checkpoint.users.decode(np.array([0]))[0], checkpoint.items.decode(np.array([0]))[0]
    parts = explain(checkpoint, user, item)
    assert parts["user_bias"] + parts["item_bias"] + parts["factors"] == pytest.approx(
        parts["score"], abs=1e-6
    )


def test_an_svdpp_ensemble_folds_a_new_user_into_each_member_as_that_member_alone(
    tiny: RatingsDataset,
) -> None:
    """Each member starts a new user from its own vectors of the items they rated, as an svdpp model
    alone does. No one start fits every member, so the ensemble's started nowhere, and from five
    ratings its folded-in users scored worse than either member's (ML-100K: RMSE 1.076 against 1.043)."""
    config = config_for("svdpp", dataset="tiny", epochs=2, members=2)
    result = train_and_evaluate(tiny, config, progress=False)
    rated = [(torch.tensor([0, 3, 7]), torch.tensor([5.0, 1.0, 4.0], dtype=torch.float64))]
    n_items = len(result.data.items)

    def folded(model: RatingModel) -> torch.Tensor:
        starts = new_user_starts(model, result.config, None, None, [rated[0][0].numpy()], n_items)
        return fold_in(model, rated, starts=starts).scores(torch.tensor([0]))

    alone = torch.stack([folded(member) for member in result.model.member_models()]).mean(dim=0)
    torch.testing.assert_close(folded(result.model), alone)
