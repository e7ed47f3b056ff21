"""Adding a model touches only its own code and the registry: a model defined here, registered and
nothing else, goes through train, checkpoint, resume, compare, report and recommend on the tiny sample.

A model that leaves out a part of the interface (its penalty above all) is refused when registered
and cannot be built.
"""

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import cut_short
from torch import Tensor, nn

from recsys.config import COMPILED_DEFAULTS, MODEL_DEFAULTS, RunConfig, config_for
from recsys.data.dataset import RatingsDataset
from recsys.errors import RecsysError
from recsys.evaluation.biases import learned_biases
from recsys.evaluation.factors import item_vectors
from recsys.evaluation.metrics import predict
from recsys.models import (
    MODELS,
    BayesianMF,
    Explanation,
    RatingModel,
    YRange,
    build_model,
    model_names,
    register,
    registered,
    sigmoid_range,
)
from recsys.names import CHECKPOINT_FILE, RECOMMEND_FILE
from recsys.train.checkpoints import load_checkpoint
from recsys.train.trainer import fit
from recsys.workflows.compare import compare_models, models_with_biases
from recsys.workflows.experiment import prepare, train_and_evaluate
from recsys.workflows.recommend import cold_start, explain, recommend, similar_items
from recsys.workflows.recommend_data import RecommendData
from recsys.workflows.report import write_report

NAME = "offset-dot"
EPOCHS = 4


class OffsetDotProduct(RatingModel):
    """rating = sigmoid_range(offset + user_factors[u] . item_factors[i]): a dot product with one
    global offset, shared by every pair (so no per-id bias, explicit or implied)."""

    def __init__(
        self,
        n_users: int,
        n_items: int,
        n_factors: int,
        y_range: YRange | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(n_users, n_items, y_range)
        self.user_factors = nn.Embedding(n_users, n_factors)
        self.item_factors = nn.Embedding(n_items, n_factors)
        with torch.no_grad():
            for table in (self.user_factors, self.item_factors):
                table.weight.normal_(0.0, 0.01, generator=generator)
        self.offset = nn.Parameter(torch.zeros(()))

    def _parts(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The factors' dot product and the user and item rows it used."""
        if x.dim() != 2 or x.shape[1] != 2:
            raise ValueError(f"expected a (batch, 2) tensor, got {tuple(x.shape)}")
        user_rows, item_rows = self.user_factors(x[:, 0]), self.item_factors(x[:, 1])
        return (user_rows * item_rows).sum(dim=-1), user_rows, item_rows

    def forward(self, x: Tensor) -> Tensor:
        return sigmoid_range(self.offset + self._parts(x)[0], self.y_range)

    def forward_with_penalty(self, x: Tensor) -> tuple[Tensor, Tensor]:
        factors, user_rows, item_rows = self._parts(x)
        penalty = (user_rows.pow(2).sum(dim=-1) + item_rows.pow(2).sum(dim=-1)).mean()
        return sigmoid_range(self.offset + factors, self.y_range), penalty

    def id_vectors(self) -> tuple[Tensor, Tensor] | None:
        return self.user_factors.weight.detach(), self.item_factors.weight.detach()

    def explain(self, users: Tensor, items: Tensor) -> Explanation | None:
        with torch.no_grad():
            factors = self._parts(torch.stack([users, items], dim=1))[0]
            score = self.offset + factors
            terms = {"offset": self.offset.detach().expand_as(factors), "factors": factors}
            return Explanation(terms, score, sigmoid_range(score, self.y_range))


class WithoutPenalty(RatingModel):
    """A model that forgot `forward_with_penalty`."""

    def __init__(
        self,
        n_users: int,
        n_items: int,
        n_factors: int,
        y_range: YRange | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(n_users, n_items, y_range)
        self.user_factors = nn.Embedding(n_users, n_factors)
        self.item_factors = nn.Embedding(n_items, n_factors)

    def forward(self, x: Tensor) -> Tensor:
        return (self.user_factors(x[:, 0]) * self.item_factors(x[:, 1])).sum(dim=-1)


@pytest.fixture(scope="module")
def offset_model() -> Iterator[str]:
    """OffsetDotProduct in the registry for this module's tests, and out of it afterwards."""
    with registered(NAME, OffsetDotProduct, defaults={"epochs": EPOCHS, "lr": 1e-2, "batch_size": 128}):
        yield NAME


def config(**overrides: object) -> RunConfig:
    return config_for(NAME, dataset="tiny", **overrides)


@pytest.fixture(scope="module")
def run_dir(offset_model: str, tiny: RatingsDataset, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of the registered model on tiny."""
    folder = tmp_path_factory.mktemp("offset-run")
    train_and_evaluate(tiny, config(), run_dir=folder, progress=False)
    return folder


# --- the registry --------------------------------------------------------------------------------


def test_a_registered_model_is_listed_with_its_defaults(offset_model: str) -> None:
    assert offset_model in model_names() and MODELS[offset_model] is OffsetDotProduct
    assert MODEL_DEFAULTS[offset_model] == {"epochs": EPOCHS, "lr": 1e-2, "batch_size": 128}
    assert offset_model not in COMPILED_DEFAULTS  # no compiled path: the engine chosen is autograd
    chosen = config()
    assert (chosen.engine, chosen.epochs, chosen.lr, chosen.batch_size) == ("autograd", EPOCHS, 1e-2, 128)
    with pytest.raises(
        RecsysError,
        match="`engine` compiled trains dot, dotbias, svdpp, bpmf, bfm, bpr, ials, not offset-dot",
    ):
        config(engine="compiled")
    assert type(build_model(offset_model, 3, 4, 2, None)) is OffsetDotProduct


def test_registered_lasts_for_its_block_only() -> None:
    with registered("for-a-moment", OffsetDotProduct):
        assert "for-a-moment" in MODELS
        with pytest.raises(ValueError, match="already registered"):
            register("for-a-moment", OffsetDotProduct)
    assert "for-a-moment" not in MODELS and "for-a-moment" not in MODEL_DEFAULTS
    with pytest.raises(RecsysError, match="unknown model 'for-a-moment'; choose one of: dot, dotbias"):
        build_model("for-a-moment", 3, 4, 2, None)


def test_a_model_without_its_penalty_cannot_be_registered_or_built() -> None:
    with pytest.raises(TypeError, match="WithoutPenalty does not implement forward_with_penalty"):
        register("no-penalty", WithoutPenalty)
    assert "no-penalty" not in MODELS
    with pytest.raises(TypeError, match=r"abstract method.*forward_with_penalty"):
        WithoutPenalty(3, 4, 2)


@pytest.mark.parametrize(
    ("model", "options", "message"),
    [
        (nn.Linear, {}, "must subclass recsys.models.RatingModel"),
        (type("NoGenerator", (OffsetDotProduct,), {"__init__": lambda self, n_users: None}), {},
         "must take \\(n_users, n_items, n_factors, y_range=None, generator=None\\)"),
        (OffsetDotProduct, {"compiled_defaults": {"lr": 0.1}}, "no factorisation\\(\\) tables"),
        (OffsetDotProduct, {"fit": "gibbs"}, "not a SampledModel but is registered with a sampling fit"),
        (BayesianMF, {"compiled_defaults": {"epochs": 3}},
         "a SampledModel but is registered with a fit other than gibbs"),
    ],
)  # fmt: skip
def test_a_class_the_registry_cannot_build_is_refused(
    model: type, options: dict[str, object], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        register("refused", model, **options)
    assert "refused" not in MODELS


# --- the chain, on the registered model ----------------------------------------------------------


def test_its_penalty_reaches_the_trainer(offset_model: str, tiny: RatingsDataset) -> None:
    """With l2 the trainer fits forward_with_penalty: strong l2 shrinks the factors toward zero."""
    norms = {}
    for l2 in (0.0, 1.0):
        data, run = prepare(tiny, config(l2=l2, epochs=2))
        model = build_model(offset_model, len(data.users), len(data.items), run.n_factors, run.y_range,
                            torch.Generator().manual_seed(0))  # fmt: skip
        fit(model, data.train, data.test, run, torch.Generator().manual_seed(0), progress=False)
        vectors = model.id_vectors()
        assert vectors is not None
        norms[l2] = float(vectors[0].norm())
    assert norms[1.0] < 0.5 * norms[0.0]


def test_train_writes_a_checkpoint_that_rebuilds_the_model(
    offset_model: str, run_dir: Path, tiny: RatingsDataset
) -> None:
    checkpoint = load_checkpoint(run_dir / CHECKPOINT_FILE)
    assert type(checkpoint.model) is OffsetDotProduct
    assert checkpoint.config.model == offset_model and checkpoint.config.engine == "autograd"
    assert len(checkpoint.metrics["history"]) == EPOCHS
    assert float(checkpoint.model.offset.detach()) != 0.0  # trained, not just built
    data, _ = prepare(tiny, checkpoint.config)
    rmse = float(torch.sqrt(torch.mean((predict(checkpoint.model, data.test.x) - data.test.y) ** 2)))
    assert rmse == pytest.approx(checkpoint.metrics["test_rmse"])


def test_an_interrupted_run_resumes_to_the_same_model(
    offset_model: str, run_dir: Path, tiny: RatingsDataset, tmp_path: Path
) -> None:
    checkpoint = cut_short(tiny, config(), tmp_path, 2)
    assert checkpoint.metrics == {"epoch": 2}
    resumed = train_and_evaluate(tiny, config(), run_dir=tmp_path, progress=False, resume=checkpoint)
    whole = load_checkpoint(run_dir / CHECKPOINT_FILE)
    assert [h["train_loss"] for h in whole.metrics["history"]] == [h.train_loss for h in resumed.history]
    for name, tensor in whole.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name


def test_compare_and_report(offset_model: str, tiny: RatingsDataset, tmp_path: Path) -> None:
    comparison = compare_models(tiny, "random", models=[offset_model], epochs=2)
    assert comparison.score_table()["model"].tolist() == ["global-mean", "damped-bias", offset_model]
    assert models_with_biases(comparison) == []  # a global offset is not a per-id bias
    report = write_report(comparison, tmp_path).read_text()
    assert f"`{offset_model}` has no per-user or per-item bias" in report
    assert f"| {offset_model} |" in report
    assert (tmp_path / "results.json").is_file() and (tmp_path / "rmse.png").stat().st_size > 1000


def test_recommend_similar_cold_start_and_explain(
    offset_model: str, run_dir: Path, tiny: RatingsDataset
) -> None:
    checkpoint = load_checkpoint(run_dir / CHECKPOINT_FILE)
    data = RecommendData.load(run_dir / RECOMMEND_FILE, checkpoint.users, checkpoint.items)
    user, item = int(checkpoint.users.raw_ids[3]), int(checkpoint.items.raw_ids[7])

    top = recommend(checkpoint, data, user, top=5)
    assert len(top) == 5 and top["predicted"].is_monotonic_decreasing
    rated = set(tiny.ratings.loc[tiny.ratings["user"] == user, "item"])
    assert not rated & set(top["item"])

    title = str(tiny.titles(np.array([item]))[0])
    similar = similar_items(checkpoint, data, title, top=4)
    assert len(similar) == 4 and item not in set(similar["item"])
    vectors = item_vectors(checkpoint.model)
    assert vectors is not None and vectors.shape == (len(checkpoint.items), checkpoint.config.n_factors)

    assert learned_biases(checkpoint.model) is None
    assert cold_start(checkpoint, data, top=3).columns.tolist() == ["item", "title", "n_ratings"]

    parts = explain(checkpoint, user, item)
    assert list(parts) == ["offset", "factors", "score", "prediction"]
    assert parts["offset"] + parts["factors"] == pytest.approx(parts["score"])
    assert parts["offset"] == pytest.approx(float(checkpoint.model.offset.detach()))
    pair = torch.tensor([[checkpoint.users.encode(np.array([user]), "user")[0],
                          checkpoint.items.encode(np.array([item]), "item")[0]]])  # fmt: skip
    assert parts["prediction"] == float(predict(checkpoint.model, pair)[0])
