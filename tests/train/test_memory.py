"""recsys.train.memory: a model too large for this machine is refused before any table is allocated."""

import dataclasses

import pytest

from recsys.config import config_for
from recsys.errors import RecsysError
from recsys.models import MODELS, build_model
from recsys.models.base import MAX_KEPT_DRAWS
from recsys.train import memory
from recsys.train.memory import (
    COPIES_PER_PARAMETER,
    available_memory,
    bound_bytes,
    check_fits,
    table_width,
    training_bytes,
)


def test_training_bytes_counts_every_parameter_without_allocating_it() -> None:
    config = config_for("dotbias", n_factors=16, members=1)
    # Factors and one bias per user and item, float32, times the copies training holds.
    assert training_bytes(config, 3, 5) == COPIES_PER_PARAMETER * 4 * (3 + 5) * (16 + 1)
    assert training_bytes(dataclasses.replace(config, members=3), 3, 5) == 3 * training_bytes(config, 3, 5)
    huge = config_for("embproj", n_factors=10**7)
    assert training_bytes(huge, 10, 10) > 10**14  # the factor-by-factor projection counts too


@pytest.mark.parametrize(
    ("model", "n_factors", "copied"),
    [
        ("dotbias", 10, (3 + 5) * 16),  # user and item rows of 10 factors padded to 16
        ("dotbias", 50, (3 + 5) * 64),
        ("dotbias", 64, 0),  # whole cache lines already: trained in place
        ("svdpp", 20, (3 + 5 + 5) * 32),  # and the implicit factors
        ("bpr", 32, 5 * 32),  # its item table is copied in the order of its groups, whatever its width
        ("bpr", 10, (3 + 5) * 16),
        ("ials", 10, 0),  # solved in place
    ],
)
def test_the_compiled_engines_padded_working_copies_are_counted(
    model: str, n_factors: int, copied: int
) -> None:
    """A table whose rows are not whole 64-byte cache lines trains in a padded copy beside it: with 1
    factor, 16 floats a row beside the 4 copies of 2 that the parameters count."""
    config = config_for(model, n_factors=n_factors, members=1)
    parameters = sum(p.numel() for p in build_model(model, 3, 5, n_factors, config.y_range).parameters())
    counted = training_bytes(config, 3, 5) - memory.solver_bytes(config)
    assert counted == 4 * (COPIES_PER_PARAMETER * parameters + copied)


def test_a_model_that_fits_only_without_its_working_copies_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = config_for("dotbias", n_factors=1, members=2)
    # Two members' rows of a factor and a bias, in the copies training holds; and each member's
    # working copies of the user and item rows, the factor padded to 16 floats.
    parameters = 2 * COPIES_PER_PARAMETER * 4 * (1000 + 2000) * (1 + 1)
    copies = 2 * 4 * (1000 + 2000) * 16
    monkeypatch.setattr(memory, "available_memory", lambda: parameters + copies // 2)
    with pytest.raises(RecsysError, match=r"`n_factors` 1: dotbias with 1,000 users and 2,000 items"):
        check_fits(config, 1000, 2000)
    monkeypatch.setattr(memory, "available_memory", lambda: parameters + copies)
    check_fits(config, 1000, 2000)


def test_available_memory_is_a_positive_figure() -> None:
    assert 0 < available_memory() < 2**60


def test_an_absurd_size_is_refused_with_the_figures() -> None:
    with pytest.raises(RecsysError, match=r"`n_factors` 1000000000000: .* GiB .* available") as error:
        check_fits(config_for("dotbias", n_factors=10**12), 100, 200)
    assert "\n" not in str(error.value)
    check_fits(config_for("dotbias"), 100, 200)


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize(("n_users", "n_items", "n_factors"), [(3, 5, 1), (943, 1682, 50), (10, 2, 300)])
def test_the_arithmetic_bound_is_never_below_the_exact_count(
    model: str, n_users: int, n_items: int, n_factors: int
) -> None:
    config = config_for(model, n_factors=n_factors)
    assert bound_bytes(config, n_users, n_items) >= training_bytes(config, n_users, n_items)


def test_an_ordinary_size_skips_the_exact_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact count builds the model on the meta device, whose first use imports torch's compiler."""

    def exact(*args: object) -> int:
        raise AssertionError("counted on the meta device")

    monkeypatch.setattr(memory, "training_bytes", exact)
    check_fits(config_for("dotbias"), 943, 1682)
    with pytest.raises(AssertionError, match="meta device"):
        check_fits(config_for("dotbias", n_factors=10**12), 100, 200)


def test_a_sampled_models_tables_are_counted_one_block_per_kept_draw() -> None:
    config = config_for("bpmf", dataset="ml-100k", epochs=100, n_factors=10, members=1)
    assert table_width(config) == 10 * 80  # a fifth of the sweeps burnt in
    assert table_width(config_for("bpmf", engine="autograd", n_factors=10)) == 10
    assert bound_bytes(config, 1000, 1000) >= training_bytes(config, 1000, 1000)
    # However many sweeps, at most MAX_KEPT_DRAWS are kept.
    assert table_width(dataclasses.replace(config, epochs=100_000)) == 10 * MAX_KEPT_DRAWS
    with pytest.raises(RecsysError, match="choose fewer factors"):
        check_fits(config, 10_000_000, 10_000_000)


@pytest.mark.parametrize("model", ["ials", "bpmf"])
def test_a_solvers_rank_squared_matrices_are_counted(model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """ials sums k x k Gram matrices over 64 chunks and bpmf's sampler holds (k + 1)-square ones:
    on few users and items they, not the tables, decide whether a large rank fits."""
    config = config_for(model, n_factors=8000, epochs=5, members=1)
    assert memory.solver_bytes(config) >= 16 * 8 * 8000**2
    assert training_bytes(config, 120, 200) >= memory.solver_bytes(config)
    assert bound_bytes(config, 120, 200) >= training_bytes(config, 120, 200)
    monkeypatch.setattr(memory, "available_memory", lambda: 4 * 2**30)
    with pytest.raises(RecsysError, match=r"`n_factors` 8000: .* GiB .* choose fewer factors"):
        check_fits(config, 120, 200)
    assert memory.solver_bytes(config_for("bpmf", n_factors=8000, engine="autograd")) == 0
    check_fits(config_for(model, n_factors=64, epochs=5), 120, 200)


def test_a_samplers_chains_are_counted_as_draws_pooled_in_one_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """bfm's members are chains whose draws one model pools: its tables count once, each chain's
    current draw beside them (counted as sixteen models, ML-10M's shape needed 27.7 GiB)."""
    config = config_for("bfm", members=16, epochs=32)
    monkeypatch.setattr(memory, "available_memory", lambda: 8 * 2**30)
    check_fits(config, 69_878, 10_677)
    assert bound_bytes(config, 69_878, 10_677) >= training_bytes(config, 69_878, 10_677)
    twice = dataclasses.replace(config, members=32)
    assert memory.chain_bytes(twice, 100, 200) == 2 * memory.chain_bytes(config, 100, 200) > 0
    assert memory.chain_bytes(config_for("dotbias", members=4), 100, 200) == 0
    with pytest.raises(RecsysError, match=r"`members` 16, `n_factors` 400: .* choose fewer members"):
        check_fits(dataclasses.replace(config, n_factors=400), 69_878, 10_677)
