"""Accuracy floors on fixed data: the tuned defaults must keep beating simple baselines and the
ML-100K u1 bar."""

import pytest
import torch

from recsys.config import MODEL_DEFAULTS, config_for
from recsys.data.dataset import RatingsDataset
from recsys.data.movielens import load_movielens
from recsys.evaluation.metrics import rmse
from recsys.models import model_entry
from recsys.workflows.experiment import train_and_evaluate


# Those that predict ratings (the ranking models' scores are no ratings: tests/train/test_ranking_fits.py).
@pytest.mark.parametrize("model", [name for name in MODEL_DEFAULTS if not model_entry(name).ranks])
def test_every_model_beats_the_training_mean_on_tiny(model: str, tiny: RatingsDataset) -> None:
    # The ML-100K batch sizes would leave 3,200 ratings only a few steps per epoch.
    result = train_and_evaluate(tiny, config_for(model, dataset="tiny", batch_size=128), progress=False)
    targets = result.data.test.y
    baseline = rmse(torch.full_like(targets, result.data.train_mean), targets)
    assert result.test["rmse"] < baseline - 0.05, (result.test["rmse"], baseline)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["dotbias", "svdpp", "bpmf"])  # measured: 0.9104, 0.9145, 0.9051
def test_defaults_reach_the_u1_bar(model: str, ml100k_folder) -> None:
    """The foundation issue's bar: test RMSE <= 0.925 on ML-100K u1 with the defaults."""
    dataset = load_movielens("ml-100k", ml100k_folder)
    result = train_and_evaluate(dataset, config_for(model, dataset="ml-100k", split="u1"), progress=False)
    assert result.test["rmse"] <= 0.925
    assert len(result.data.unknown_test_ratings) == 32  # u1.test ids unseen in u1.base
