"""recsys.train.trainer: fit, its optimizers and schedules, sparse gradients, and divergence."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
import torch
from torch import nn

from recsys.config import RunConfig, config_for, model_for
from recsys.data.dataset import RatingsDataset
from recsys.data.encoding import EncodedSplit, RatingTensors, encode_split
from recsys.data.splits import make_split
from recsys.errors import RecsysError
from recsys.evaluation.metrics import evaluate
from recsys.evaluation.ranking import evaluate_ranking, ranking_task
from recsys.evaluation.scorers import model_scorer
from recsys.models import MODELS, build_model, model_entry, rating_model
from recsys.train import trainer
from recsys.train.trainer import (
    EpochStats,
    TrainingDiverged,
    fit,
    make_optimizers,
    make_schedule,
    use_sparse_gradients,
)

Y_RANGE = (0.0, 5.5)


@pytest.fixture(scope="module")
def tiny_encoded(tiny: RatingsDataset) -> EncodedSplit:
    return encode_split(make_split(tiny, "random", seed=0))


def fit_on(data: EncodedSplit, config: RunConfig, seed: int = 0) -> tuple[nn.Module, list[EpochStats]]:
    generator = torch.Generator().manual_seed(seed)
    model = model_for(config, len(data.users), len(data.items), generator)
    return model, fit(model, data.train, data.test, config, generator, progress=False)


# --- fit -----------------------------------------------------------------------------------------


def model_size(model: torch.nn.Module) -> tuple[int, int]:
    """A model's numbers of users and items, from its id vectors."""
    vectors = rating_model(model).id_vectors()
    assert vectors is not None
    return len(vectors[0]), len(vectors[1])


@pytest.mark.parametrize("name", list(MODELS))
def test_training_loss_falls_for_every_model(name: str, tiny_encoded: EncodedSplit) -> None:
    y_range = None if model_entry(name).ranks else Y_RANGE  # a ranking score is no rating
    config = config_for(name, dataset="tiny", epochs=4, y_range=y_range)
    seen: list[EpochStats] = []
    generator = torch.Generator().manual_seed(0)
    model = model_for(config, len(tiny_encoded.users), len(tiny_encoded.items), generator)
    history = fit(
        model, tiny_encoded.train, tiny_encoded.test, config, generator, progress=False, on_epoch=seen.append
    )
    assert [stats.epoch for stats in history] == [1, 2, 3, 4]
    assert seen == history
    assert history[-1].train_loss < history[0].train_loss
    if model_entry(name).ranks:  # watched by its lists, which it has no ratings to be scored on
        for stats in history:
            assert math.isnan(stats.valid_rmse) and 0 <= stats.valid_ndcg <= 1
        task = ranking_task(tiny_encoded.train, tiny_encoded.test, *model_size(model), 1.0, rating_unit=1.0)
        final_ndcg = evaluate_ranking(model_scorer(model, model_size(model)[1]), task, ks=(10,))["ndcg@10"]
        assert final_ndcg == pytest.approx(history[-1].valid_ndcg, rel=1e-6)
        return
    for stats in history:
        assert isinstance(stats, EpochStats)
        values = (stats.train_loss, stats.valid_rmse, stats.valid_mae, stats.seconds)
        assert all(math.isfinite(v) and v >= 0 for v in values)
        assert math.isnan(stats.valid_ndcg)
    assert history[-1].valid_rmse < history[0].valid_rmse
    # The recorded validation metrics are those of the trained model on the validation ratings.
    final = evaluate(model, tiny_encoded.test)
    assert final["rmse"] == pytest.approx(history[-1].valid_rmse, rel=1e-6)
    assert final["mae"] == pytest.approx(history[-1].valid_mae, rel=1e-6)
    assert model.training  # fit leaves the model in train mode (evaluate restores it)


def test_fit_trains_in_place_and_every_parameter_moves(tiny_encoded: EncodedSplit) -> None:
    config = config_for("dotbias", dataset="tiny", epochs=1, y_range=Y_RANGE, members=1)
    generator = torch.Generator().manual_seed(0)
    model = build_model("dotbias", len(tiny_encoded.users), len(tiny_encoded.items), 8, Y_RANGE, generator)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fit(model, tiny_encoded.train, tiny_encoded.test, config, generator, progress=False)
    assert all(not torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize(("every", "expected"), [(0.0, [1, 2, 3, 4]), (math.inf, [4])])
def test_checkpoints_come_after_the_last_epoch_and_when_due(
    every: float, expected: list[int], tiny_encoded: EncodedSplit
) -> None:
    """Every epoch with no interval; with one too long to pass, only the last; each before on_epoch."""
    config = config_for("dotbias", dataset="tiny", epochs=4, y_range=Y_RANGE, members=1)
    generator = torch.Generator().manual_seed(0)
    model = build_model("dotbias", len(tiny_encoded.users), len(tiny_encoded.items), 8, Y_RANGE, generator)
    events: list[tuple[str, int]] = []
    fit(
        model, tiny_encoded.train, tiny_encoded.test, config, generator, progress=False,
        on_epoch=lambda stats: events.append(("epoch", stats.epoch)),
        on_checkpoint=lambda stats, state: events.append(("checkpoint", len(state["history"]))),
        checkpoint_every=every,
    )  # fmt: skip
    assert [epoch for kind, epoch in events if kind == "checkpoint"] == expected
    for epoch in expected:
        assert events.index(("checkpoint", epoch)) == events.index(("epoch", epoch)) - 1


@pytest.mark.parametrize(("built", "configured"), [(1, 2), (2, 1), (3, 2)])
def test_a_model_and_a_config_that_disagree_on_members_are_refused(
    built: int, configured: int, tiny_encoded: EncodedSplit
) -> None:
    config = config_for("dotbias", dataset="tiny", epochs=1, members=configured)
    model = build_model(
        "dotbias", len(tiny_encoded.users), len(tiny_encoded.items), 4, Y_RANGE, members=built
    )
    with pytest.raises(RecsysError, match=f"the model has {built} member.* and the config {configured}"):
        fit(model, tiny_encoded.train, tiny_encoded.test, config, torch.Generator(), progress=False)


def test_fit_without_training_ratings_is_an_error(tiny_encoded: EncodedSplit) -> None:
    empty = RatingTensors(torch.zeros((0, 2), dtype=torch.long), torch.zeros(0))
    model = build_model("dot", 3, 3, 2, Y_RANGE)
    with pytest.raises(RecsysError, match="no training ratings"):
        fit(model, empty, tiny_encoded.test, config_for("dot"), torch.Generator(), progress=False)


@pytest.mark.parametrize(
    ("model", "engine"), [("dotbias", "compiled"), ("bpmf", "compiled"), ("dot", "autograd")]
)
@pytest.mark.parametrize(("part", "column", "index"), [("training", 0, 10**6), ("validation", 1, -1)])
def test_every_engine_refuses_pairs_past_the_tables(
    model: str, engine: str, part: str, column: int, index: int, tiny_encoded: EncodedSplit
) -> None:
    # The compiled kernels read rows unchecked: such a pair had crashed the process (SIGSEGV); the
    # autograd engine's steps go without the model's own check.
    train, valid = tiny_encoded.train, tiny_encoded.test
    bad = (train if part == "training" else valid).x.clone()
    bad[3, column] = index
    train, valid = (
        (RatingTensors(bad, train.y), valid) if part == "training" else (train, RatingTensors(bad, valid.y))
    )
    kind = "user" if column == 0 else "item"
    config = config_for(model, dataset="tiny", engine=engine, epochs=1)
    built = model_for(config, len(tiny_encoded.users), len(tiny_encoded.items))
    with pytest.raises(IndexError, match=rf"^{part} {kind} index {index} \(row 3\) is outside"):
        fit(built, train, valid, config, torch.Generator(), progress=False)


def test_sparse_under_torchrun_without_gloo_is_an_error(
    tiny_encoded: EncodedSplit, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nccl (GPUs) has no sparse all-reduce; the two-process gloo run is in test_distributed.py.
    monkeypatch.setattr(trainer, "distributed_rank", lambda: (0, 2))
    monkeypatch.setattr(trainer.dist, "get_backend", lambda: "nccl")
    model = build_model("dot", len(tiny_encoded.users), len(tiny_encoded.items), 2, Y_RANGE)
    config = config_for("dot", dataset="tiny", sparse=True)
    with pytest.raises(RecsysError, match="`sparse` under torchrun needs the gloo backend"):
        fit(model, tiny_encoded.train, tiny_encoded.test, config, torch.Generator(), progress=False)


def test_huge_learning_rate_raises_training_diverged(tiny_encoded: EncodedSplit) -> None:
    config = config_for("dotbias", dataset="tiny", epochs=3, lr=1e6, optimizer="sgd")
    assert config.y_range is None
    with pytest.raises(TrainingDiverged, match="lower `lr`") as info:
        fit_on(tiny_encoded, config)
    assert isinstance(info.value, RecsysError)
    assert "1000000.0" in str(info.value)


@pytest.mark.parametrize(
    ("settings", "advice"),
    [
        ({"l2": 1e30}, r"lower `l2` \(now 1e\+30\) or `lr` \(now 0.035\): .* lr x l2 = 3.5e\+28"),
        ({"init_scale": 1e30}, r"lower `init_scale` \(now 1e\+30\): the initial factors start far too large"),
    ],
)
def test_a_diverged_loss_names_a_vast_penalty_or_initial_scale_before_the_step_size(
    tiny_encoded: EncodedSplit, settings: dict[str, float], advice: str
) -> None:
    """Once "lower `lr`" whatever had made the loss diverge."""
    config = config_for("dotbias", dataset="tiny", epochs=2, members=1, **settings)
    assert config.engine == "compiled" and config.lr == pytest.approx(0.035)
    with pytest.raises(TrainingDiverged, match=advice):
        fit_on(tiny_encoded, config)


@pytest.mark.parametrize(
    ("settings", "advice"),
    [
        ({"model": "dot", "engine": "autograd", "wd": 1e6}, r"lower `wd` \(now 1e\+06\): .* lr x wd = 2100"),
        (
            {"model": "ials", "l2": 1e30},
            r"lower `l2` \(now 1e\+30\): the sums it weighs leave float32's range",
        ),
    ],
)
def test_a_diverged_loss_names_weight_decay_or_the_solved_penalty_not_the_data(
    tiny_encoded: EncodedSplit, settings: dict[str, Any], advice: str
) -> None:
    """Once "lower `lr`" for a vast `wd`, and "look for extreme values in the data" for ials' `l2`."""
    config = config_for(dataset="tiny", epochs=1, **settings)
    assert config.engine == ("autograd" if "wd" in settings else "compiled")
    with pytest.raises(TrainingDiverged, match=advice):
        fit_on(tiny_encoded, config)


def test_a_rating_far_out_of_line_is_named_as_the_cause_of_a_diverged_loss(
    tiny_encoded: EncodedSplit,
) -> None:
    """One garbage rating (1e30 among stars) overflows the loss at any step size: the advice names it,
    not the learning rate."""
    y = tiny_encoded.train.y.clone()
    y[7] = 1e30
    data = dataclasses.replace(tiny_encoded, train=RatingTensors(tiny_encoded.train.x, y))
    config = config_for("dotbias", dataset="tiny", epochs=2, optimizer="sgd")
    with pytest.raises(
        TrainingDiverged, match=r"extreme values in the data: its largest training rating is 1e\+30"
    ):
        fit_on(data, config)


def test_optimizers_are_configured_from_the_config() -> None:
    model = build_model("dot", 3, 3, 2, None)
    adamw = make_optimizers(model, config_for("dot", lr=0.02, wd=0.3))[0]
    assert isinstance(adamw, torch.optim.AdamW)
    assert adamw.param_groups[0]["weight_decay"] == 0.3
    sgd = make_optimizers(model, config_for("dot", optimizer="sgd", lr=0.02, wd=0.3))[0]
    assert isinstance(sgd, torch.optim.SGD)
    assert sgd.param_groups[0]["lr"] == 0.02 and sgd.param_groups[0]["weight_decay"] == 0.3


def test_one_cycle_peaks_at_lr_and_constant_stays_there() -> None:
    model = build_model("dot", 3, 3, 2, None)
    rates: dict[str, list[float]] = {}
    for schedule in ("one-cycle", "constant"):
        config = config_for("dot", lr=0.01, schedule=schedule)
        optimizer = make_optimizers(model, config)[0]
        scheduler = make_schedule(optimizer, config, 20)
        rates[schedule] = []
        for _ in range(20):
            rates[schedule].append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
    assert rates["constant"] == [0.01] * 20
    one_cycle = rates["one-cycle"]
    assert max(one_cycle) == pytest.approx(0.01)
    assert one_cycle[0] < 0.001 and one_cycle[-1] < 0.001


@pytest.mark.parametrize("total_steps", [1, 2, 3, 4, 5, 40])
def test_one_cycle_survives_short_runs(total_steps: int) -> None:
    model = build_model("dot", 3, 3, 2, None)
    config = config_for("dot", lr=0.02)
    optimizer = make_optimizers(model, config)[0]
    schedule = make_schedule(optimizer, config, total_steps)
    rates = []
    for _ in range(total_steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert all(0 < rate <= 0.02 + 1e-12 for rate in rates)
    if total_steps >= 3:  # warms up to the peak, then anneals
        assert max(rates) == pytest.approx(0.02) and rates[0] < 0.02 and rates[-1] < 0.02


@pytest.mark.parametrize("name", ["dotbias", "embproj"])
def test_sparse_gradients_train_with_lazy_adam(name: str, tiny_encoded: EncodedSplit) -> None:
    config = config_for(name, dataset="tiny", epochs=4, batch_size=256, sparse=True, y_range=Y_RANGE)
    model = build_model(name, len(tiny_encoded.users), len(tiny_encoded.items), 8, Y_RANGE)
    use_sparse_gradients(model, True)
    kinds = sorted(type(optimizer).__name__ for optimizer in make_optimizers(model, config))
    # embproj's projections are not embeddings: they keep AdamW beside the LazyAdam of its tables.
    assert kinds == (["AdamW", "LazyAdam"] if name == "embproj" else ["LazyAdam"])
    use_sparse_gradients(model, False)
    model, history = fit_on(tiny_encoded, config)
    assert history[-1].train_loss < history[0].train_loss
    assert not any(m.sparse for m in model.modules() if isinstance(m, nn.Embedding))  # left dense


def test_sparse_gradients_for_a_model_without_them_are_refused(tiny_encoded: EncodedSplit) -> None:
    # svdpp's implicit table is summed and penalised through its whole weight: a dense gradient,
    # which LazyAdam met as a traceback.
    with pytest.raises(RecsysError, match="`sparse`: svdpp takes dense gradients only"):
        fit_on(tiny_encoded, config_for("svdpp", dataset="tiny", epochs=1, sparse=True))


def test_sparse_tables_off_the_cpu_get_torchs_sparse_adam() -> None:
    # LazyAdam's compiled kernel reads CPU memory; on a GPU the same update is SparseAdam's.
    model = build_model("dotbias", 5, 4, 3, Y_RANGE).to("meta")
    use_sparse_gradients(model, True)
    optimizers = make_optimizers(model, config_for("dotbias", sparse=True))
    assert [type(optimizer).__name__ for optimizer in optimizers] == ["SparseAdam"]


def test_sparse_gradients_are_switched_off_again_when_training_diverges(tiny_encoded: EncodedSplit) -> None:
    config = config_for("dotbias", dataset="tiny", epochs=3, lr=1e9, sparse=True)
    model = build_model("dotbias", len(tiny_encoded.users), len(tiny_encoded.items), 4, None)
    with pytest.raises(TrainingDiverged):
        fit(
            model,
            tiny_encoded.train,
            tiny_encoded.test,
            config,
            torch.Generator().manual_seed(0),
            progress=False,
        )
    assert not any(module.sparse for module in model.modules() if isinstance(module, nn.Embedding))


def test_the_autograd_engine_on_the_cpu_takes_one_torch_thread_unless_asked() -> None:
    from recsys.train.trainer import AUTOGRAD_CPU_THREADS, COMPILED_TORCH_THREADS, torch_threads_for

    autograd = config_for("dotbias", engine="autograd")
    assert AUTOGRAD_CPU_THREADS == 1
    assert torch_threads_for(autograd, None) == AUTOGRAD_CPU_THREADS
    assert torch_threads_for(autograd, 2) == 2
    assert torch_threads_for(config_for("dotbias", engine="compiled"), 2) == COMPILED_TORCH_THREADS == 1
    assert torch_threads_for(dataclasses.replace(autograd, device="cuda"), None) is None
    device = config_for("dotbias", engine="device")  # on the CPU one thread, as a torchrun rank
    assert torch_threads_for(device, None) == AUTOGRAD_CPU_THREADS
    assert torch_threads_for(device, 1) == 1


def test_a_model_that_diverged_in_an_epochs_last_steps_stops_training(tiny_encoded: EncodedSplit) -> None:
    """The device engine takes tiny's epoch in one step, its loss read before it: the rows that step
    made NaN show in the validation RMSE alone (the run ended with a NaN model)."""
    config = config_for("dotbias", engine="device", dataset="tiny", epochs=1, members=1, lr=1e30)
    with pytest.raises(TrainingDiverged, match=r"validation RMSE became nan in epoch 1; lower `lr`"):
        fit_on(tiny_encoded, config)


def test_an_empty_validation_part_is_no_divergence(tiny_encoded: EncodedSplit) -> None:
    none = RatingTensors(tiny_encoded.test.x[:0], tiny_encoded.test.y[:0])
    data = dataclasses.replace(tiny_encoded, test=none)
    _, history = fit_on(data, config_for("dotbias", engine="device", dataset="tiny", epochs=1, members=1))
    assert math.isnan(history[0].valid_rmse) and math.isfinite(history[0].train_loss)
