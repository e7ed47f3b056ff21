"""The shared trainer, the experiment chain, the metrics and the run files (checkpoints)."""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from recsys.config import AUTOGRAD_ONLY, ENGINES, RunConfig, config_for
from recsys.data.dataset import RatingsDataset
from recsys.data.encoding import EncodedSplit, IdMap, RatingTensors, encode_split
from recsys.data.splits import make_split
from recsys.errors import RecsysError
from recsys.evaluate.metrics import evaluate, evaluate_test, mae, predict, rmse
from recsys.models.core import MODELS, build_model
from recsys.train import trainer
from recsys.train.checkpoints import (
    CHECKPOINT_FORMAT,
    load_checkpoint,
    save_checkpoint,
    write_checkpoint_payload,
)
from recsys.train.trainer import (
    EpochStats,
    TrainingDiverged,
    fit,
    make_optimizers,
    make_schedule,
    use_sparse_gradients,
)
from recsys.workflows.experiment import train_and_evaluate

Y_RANGE = (0.0, 5.5)


@pytest.fixture(scope="module")
def tiny_encoded(tiny: RatingsDataset) -> EncodedSplit:
    return encode_split(make_split(tiny, "random", seed=0))


def fit_on(data: EncodedSplit, config: RunConfig, seed: int = 0) -> tuple[nn.Module, list[EpochStats]]:
    generator = torch.Generator().manual_seed(seed)
    model = build_model(
        config.model, len(data.users), len(data.items), config.n_factors, config.y_range, generator
    )
    return model, fit(model, data.train, data.test, config, generator, progress=False)


# --- fit -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MODELS))
def test_training_loss_falls_for_every_model(name: str, tiny_encoded: EncodedSplit) -> None:
    config = config_for(name, dataset="tiny", epochs=4, y_range=Y_RANGE)
    seen: list[EpochStats] = []
    generator = torch.Generator().manual_seed(0)
    model = build_model(
        name, len(tiny_encoded.users), len(tiny_encoded.items), config.n_factors, config.y_range, generator
    )
    history = fit(
        model, tiny_encoded.train, tiny_encoded.test, config, generator, progress=False, on_epoch=seen.append
    )
    assert [stats.epoch for stats in history] == [1, 2, 3, 4]
    assert seen == history
    for stats in history:
        assert isinstance(stats, EpochStats)
        values = (stats.train_loss, stats.valid_rmse, stats.valid_mae, stats.seconds)
        assert all(math.isfinite(v) and v >= 0 for v in values)
    assert history[-1].train_loss < history[0].train_loss
    assert history[-1].valid_rmse < history[0].valid_rmse
    # The recorded validation metrics are those of the trained model on the validation ratings.
    final = evaluate(model, tiny_encoded.test)
    assert final["rmse"] == pytest.approx(history[-1].valid_rmse, rel=1e-6)
    assert final["mae"] == pytest.approx(history[-1].valid_mae, rel=1e-6)
    assert model.training  # fit leaves the model in train mode (evaluate restores it)


def test_fit_trains_in_place_and_every_parameter_moves(tiny_encoded: EncodedSplit) -> None:
    config = config_for("dotbias", dataset="tiny", epochs=1, y_range=Y_RANGE)
    generator = torch.Generator().manual_seed(0)
    model = build_model("dotbias", len(tiny_encoded.users), len(tiny_encoded.items), 8, Y_RANGE, generator)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fit(model, tiny_encoded.train, tiny_encoded.test, config, generator, progress=False)
    assert all(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_fit_without_training_ratings_is_an_error(tiny_encoded: EncodedSplit) -> None:
    empty = RatingTensors(torch.zeros((0, 2), dtype=torch.long), torch.zeros(0))
    model = build_model("dot", 3, 3, 2, Y_RANGE)
    with pytest.raises(RecsysError, match="no training ratings"):
        fit(model, empty, tiny_encoded.test, config_for("dot"), torch.Generator(), progress=False)


def test_sparse_under_torchrun_without_gloo_is_an_error(
    tiny_encoded: EncodedSplit, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nccl (GPUs) has no sparse all-reduce; the two-process gloo run is in test_distributed.py.
    monkeypatch.setattr(trainer, "distributed_rank", lambda: (0, 2))
    monkeypatch.setattr(trainer.dist, "get_backend", lambda: "nccl")
    model = build_model("dot", len(tiny_encoded.users), len(tiny_encoded.items), 2, Y_RANGE)
    config = config_for("dot", dataset="tiny", sparse=True)
    with pytest.raises(RecsysError, match="--sparse under torchrun needs the gloo backend"):
        fit(model, tiny_encoded.train, tiny_encoded.test, config, torch.Generator(), progress=False)


def test_huge_learning_rate_raises_training_diverged(tiny_encoded: EncodedSplit) -> None:
    config = config_for("dotbias", dataset="tiny", epochs=3, lr=1e6, optimizer="sgd")
    assert config.y_range is None
    with pytest.raises(TrainingDiverged, match="--lr") as info:
        fit_on(tiny_encoded, config)
    assert isinstance(info.value, RecsysError)
    assert "1000000.0" in str(info.value)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("optimizer", "adam", "--optimizer 'adam'"),
        ("schedule", "cosine", "--schedule 'cosine'"),
        ("unknown", "skip", "--unknown 'skip'"),
        ("epochs", 0, "--epochs must be at least 1"),
        ("batch_size", 0, "--bs must be at least 1"),
        ("n_factors", 0, "--n-factors must be at least 1"),
        ("lr", 0.0, "--lr must be positive"),
        ("l2", -0.1, "--l2 must be zero or positive"),
        ("wd", -1.0, "--wd must be zero or positive"),
        ("y_range", (5.0, 0.0), "--y-range needs LOW < HIGH"),
        ("device", "tpu", "--device must be cpu or cuda"),
    ],
)
def test_config_rejects_values_no_run_can_use(field: str, value: Any, message: str) -> None:
    with pytest.raises(RecsysError, match=message.replace("(", r"\(")):
        config_for("dot", **{field: value})


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


def test_config_for_applies_overrides_and_rejects_unknown_models() -> None:
    config = config_for("linear", lr=0.1, wd=None)
    assert (config.model, config.lr, config.wd) == ("linear", 0.1, RunConfig().wd)
    with pytest.raises(RecsysError, match="unknown model 'nope'"):
        config_for("nope")


def test_run_config_round_trips_and_rejects_unknown_keys() -> None:
    config = config_for("dot", y_range=(0.5, 5.0), epochs=3)
    values = config.to_dict()
    values["y_range"] = list(values["y_range"])  # as read back from JSON
    assert RunConfig.from_dict(values) == config
    with pytest.raises(RecsysError, match="bogus"):
        RunConfig.from_dict({**config.to_dict(), "bogus": 1})


# --- determinism and hyperparameters -------------------------------------------------------------

BASES = {engine: config_for("dotbias", engine=engine, dataset="tiny", epochs=3) for engine in ENGINES}
BASE = BASES["autograd"]


@pytest.fixture(scope="module")
def base_runs(tiny: RatingsDataset) -> dict[str, Any]:
    return {engine: train_and_evaluate(tiny, config, progress=False) for engine, config in BASES.items()}


@pytest.fixture(params=ENGINES)
def base_run(request: pytest.FixtureRequest, base_runs: dict[str, Any]) -> Any:
    return base_runs[request.param]


def test_same_seed_is_bit_identical(tiny: RatingsDataset, base_run: Any) -> None:
    again = train_and_evaluate(tiny, base_run.config, progress=False)
    assert again.test["rmse"] == base_run.test["rmse"]
    assert again.test["mae"] == base_run.test["mae"]
    assert [s.train_loss for s in again.history] == [s.train_loss for s in base_run.history]
    first, second = base_run.model.state_dict(), again.model.state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_run_result_resolves_y_range_and_summarises(base_run: Any) -> None:
    assert BASES[base_run.config.engine].y_range is None
    assert base_run.config.y_range == Y_RANGE
    assert base_run.model.y_range == Y_RANGE
    metrics = base_run.metrics()
    assert metrics["test_rmse"] == base_run.test["rmse"]
    assert metrics["n_train"] + metrics["n_test"] + metrics["n_test_unknown"] == 4000
    assert metrics["n_train"] == 3200
    assert len(metrics["history"]) == 3
    assert 0.5 < base_run.test["rmse"] < 2.0


# Each changed value must change the test RMSE of the base run (Surprise's "every parameter matters").
CHANGES = [
    ("lr", 5e-3),
    ("batch_size", 32),  # below the cap that gives a run 100 steps (96 here)
    ("l2", 0.0),
    ("wd", 0.1),
    ("n_factors", 10),
    ("epochs", 4),
    ("optimizer", "sgd"),
    ("schedule", "constant"),
    ("seed", 1),
    ("y_range", (1.0, 5.0)),
    ("test_frac", 0.3),
    ("split", "user"),
    ("sparse", True),
]
ENGINE_CHANGES = [
    (engine, field, value)
    for engine in ENGINES
    for field, value in CHANGES
    if engine == "autograd" or field not in AUTOGRAD_ONLY.values()
]


@pytest.mark.parametrize(
    ("engine", "field", "value"), ENGINE_CHANGES, ids=[f"{e}-{f}" for e, f, _ in ENGINE_CHANGES]
)
def test_every_hyperparameter_changes_the_result(
    engine: str, field: str, value: Any, tiny: RatingsDataset, base_runs: dict[str, Any]
) -> None:
    base, base_run = BASES[engine], base_runs[engine]
    assert getattr(base, field) != value
    changed = dataclasses.replace(base, **{field: value})
    result = train_and_evaluate(tiny, changed, progress=False)
    assert math.isfinite(result.test["rmse"])
    assert result.test["rmse"] != base_run.test["rmse"]


def test_run_dir_gets_config_metrics_and_checkpoint(tiny: RatingsDataset, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = train_and_evaluate(tiny, dataclasses.replace(BASE, epochs=1), run_dir=run_dir, progress=False)
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "checkpoint.pt",
        "config.json",
        "data.json",
        "metrics.json",
    ]
    checkpoint = load_checkpoint(run_dir / "checkpoint.pt")
    assert checkpoint.config == result.config
    assert checkpoint.metrics["test_rmse"] == result.test["rmse"]
    assert evaluate_test(checkpoint.model, result.data, "drop")["rmse"] == result.test["rmse"]


# --- metrics -------------------------------------------------------------------------------------


def test_rmse_and_mae_by_hand() -> None:
    predictions = torch.tensor([1.0, 2.0, 3.0, 4.0])
    targets = torch.tensor([1.0, 4.0, 2.0, 4.0])
    assert rmse(predictions, targets) == pytest.approx(math.sqrt((0 + 4 + 1 + 0) / 4))
    assert mae(predictions, targets) == pytest.approx((0 + 2 + 1 + 0) / 4)
    assert rmse(targets, targets) == 0.0 and mae(targets, targets) == 0.0
    assert isinstance(rmse(predictions, targets), float)


class Constant(nn.Module):
    """Predicts the same rating for every pair."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.full((len(x),), self.value)


class Encode(nn.Module):
    """Predicts 10 * user + item, so every row's prediction is distinct and checkable."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert not torch.is_grad_enabled()
        return (x[:, 0] * 10 + x[:, 1]).float()


def hand_split() -> EncodedSplit:
    return EncodedSplit(
        users=IdMap(np.array([10, 20])),
        items=IdMap(np.array([1, 2, 3])),
        train=RatingTensors(torch.tensor([[0, 0], [1, 1]]), torch.tensor([3.0, 4.0])),
        test=RatingTensors(torch.tensor([[0, 1], [1, 2], [0, 2]]), torch.tensor([4.0, 2.0, 3.0])),
        unknown_test_ratings=np.array([5.0, 1.0], dtype=np.float32),
        train_mean=3.5,
    )


def test_evaluate_test_drop_scores_only_known_ids() -> None:
    result = evaluate_test(Constant(3.0), hand_split(), "drop")
    # errors 1, -1, 0
    assert result["rmse"] == pytest.approx(math.sqrt(2 / 3))
    assert result["mae"] == pytest.approx(2 / 3)


def test_evaluate_test_mean_predicts_the_train_mean_for_unknown_ids() -> None:
    result = evaluate_test(Constant(3.0), hand_split(), "mean")
    # known: 3 vs 4, 2, 3 -> errors 1, 1, 0; unknown: 3.5 vs 5, 1 -> errors 1.5, 2.5
    assert result["rmse"] == pytest.approx(math.sqrt((1 + 1 + 0 + 2.25 + 6.25) / 5))
    assert result["mae"] == pytest.approx((1 + 1 + 0 + 1.5 + 2.5) / 5)


def test_evaluate_test_mean_without_unknown_ids_equals_drop() -> None:
    data = dataclasses.replace(hand_split(), unknown_test_ratings=np.zeros(0, dtype=np.float32))
    assert evaluate_test(Constant(3.0), data, "mean") == evaluate_test(Constant(3.0), data, "drop")


def test_evaluate_test_rejects_unknown_policy() -> None:
    with pytest.raises(ValueError, match="policy"):
        evaluate_test(Constant(3.0), hand_split(), "zero")


def test_predict_covers_every_row_in_order_and_restores_train_mode() -> None:
    model = Encode()
    x = torch.tensor([[u, i] for u in range(3) for i in range(5)])
    model.train()
    out = predict(model, x, batch_size=4)
    assert torch.equal(out, (x[:, 0] * 10 + x[:, 1]).float())
    assert model.training
    model.eval()
    predict(model, x, batch_size=4)
    assert not model.training


# --- checkpoints ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MODELS))
def test_checkpoint_round_trip(name: str, tmp_path: Path) -> None:
    users, items = IdMap(np.array([3, 17, 40, 99])), IdMap(np.array([5, 6, 700]))
    config = config_for(name, n_factors=6, y_range=(0.5, 5.0), dataset="tiny")
    model = build_model(name, len(users), len(items), 6, config.y_range, torch.Generator().manual_seed(9))
    with torch.no_grad():  # make every parameter (zero-initialised biases too) distinctive
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)) * 0.3)
    metrics = {"test_rmse": 0.9, "history": [{"epoch": 1}]}
    path = tmp_path / "sub" / "checkpoint.pt"
    save_checkpoint(path, model, config, users, items, metrics)
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.pt"]  # no temporary file left
    loaded = load_checkpoint(path)
    assert type(loaded.model) is type(model)
    assert loaded.config == config
    assert np.array_equal(loaded.users.raw_ids, users.raw_ids)
    assert np.array_equal(loaded.items.raw_ids, items.raw_ids)
    assert loaded.metrics == metrics
    x = torch.tensor([[u, i] for u in range(4) for i in range(3)])
    assert torch.equal(predict(loaded.model, x), predict(model, x))


class Payload:
    """An arbitrary class: a checkpoint must never need it to load."""

    def __init__(self) -> None:
        self.value = 1


class RunsCommand:
    """Unpickling this calls os.system (the classic malicious-pickle payload)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


def valid_payload() -> dict[str, Any]:
    return {
        "format": CHECKPOINT_FORMAT,
        "config": config_for("dot", n_factors=2).to_dict(),
        "state_dict": {"user_factors.weight": torch.zeros(3, 2), "item_factors.weight": torch.zeros(4, 2)},
        "user_ids": torch.arange(3),
        "item_ids": torch.arange(4),
        "metrics": "{}",
    }


def test_checkpoint_with_an_arbitrary_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save({**valid_payload(), "extra": Payload()}, path)
    with pytest.raises(RecsysError, match="unsafe to load"):
        load_checkpoint(path)


@pytest.mark.parametrize("writer", ["torch", "pickle"])
def test_malicious_checkpoint_does_not_run_code(writer: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "checkpoint.pt"
    payload = {**valid_payload(), "metrics": RunsCommand(marker)}
    if writer == "torch":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=2))
    with pytest.raises(RecsysError):
        load_checkpoint(path)
    assert not marker.exists()
    # The file really is dangerous: an unsafe load runs the command.
    if writer == "torch":
        torch.load(path, weights_only=False)
    else:
        pickle.loads(path.read_bytes())
    assert marker.exists()


def test_missing_checkpoint_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RecsysError, match="not found"):
        load_checkpoint(tmp_path / "nope.pt")
    with pytest.raises(RecsysError, match="not found"):
        load_checkpoint(tmp_path)  # a folder is not a checkpoint


@pytest.mark.parametrize(
    "change",
    [
        {"format": CHECKPOINT_FORMAT - 1},  # an older recsys wrote it
        {"state_dict": {"user_factors.weight": torch.zeros(3, 5), "item_factors.weight": torch.zeros(4, 5)}},
        {"user_ids": torch.arange(7)},
        {"config": {**config_for("dot", n_factors=2).to_dict(), "bogus": 1}},
        {"config": {**config_for("dot", n_factors=2).to_dict(), "model": "nope"}},
    ],
    ids=["format", "shape", "id-count", "config-key", "model"],
)
def test_inconsistent_checkpoint_is_an_error(change: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    write_checkpoint_payload(path, valid_payload())
    assert type(load_checkpoint(path).model).__name__ == "DotProduct"  # the base payload is valid
    write_checkpoint_payload(path, {**valid_payload(), **change})
    with pytest.raises(RecsysError):
        load_checkpoint(path)


def test_garbage_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(RecsysError, match="not a recsys checkpoint"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "payload",
    [{"format": CHECKPOINT_FORMAT}, {**valid_payload(), "metrics": "not json"}],
    ids=["missing-keys", "bad-metrics"],
)
def test_malformed_checkpoint_payload_is_a_recsys_error(payload: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save(payload, path)
    with pytest.raises(RecsysError):
        load_checkpoint(path)


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


def test_sparse_tables_off_the_cpu_get_torchs_sparse_adam() -> None:
    # LazyAdam's compiled kernel reads CPU memory; on a GPU the same update is SparseAdam's.
    model = build_model("dotbias", 5, 4, 3, Y_RANGE).to("meta")
    use_sparse_gradients(model, True)
    optimizers = make_optimizers(model, config_for("dotbias", sparse=True))
    assert [type(optimizer).__name__ for optimizer in optimizers] == ["SparseAdam"]


@pytest.mark.parametrize("change", [{"optimizer": "sgd"}, {"wd": 0.1}])
def test_sparse_needs_adamw_without_weight_decay(change: dict[str, Any]) -> None:
    with pytest.raises(RecsysError, match="--sparse"):
        config_for("dotbias", sparse=True, **change)
