"""Contract tests every rating model must pass, LinearDotProduct's algebra, and fastai compatibility."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import recsys.models
from recsys.data.dataset import RatingsDataset
from recsys.data.encoding import EncodedSplit, encode_split
from recsys.data.splits import make_split
from recsys.errors import RecsysError
from recsys.models import (
    COMPILED_DEFAULTS,
    MODELS,
    DotProduct,
    LinearDotProduct,
    RatingModel,
    SampledModel,
    build_model,
    model_entry,
    rating_model,
    sigmoid_range,
)
from recsys.models.layers import lookup, mean_squared_norm, one_hot_linear, split_pairs

N_USERS, N_ITEMS, N_FACTORS = 7, 9, 4
Y_RANGE = (0.0, 5.5)
NAMES = list(MODELS)
# Those that predict ratings, squashed into a y_range; the ranking models' scores are no ratings.
RATING_NAMES = [name for name in NAMES if not model_entry(name).ranks]


def make(name: str, y_range: tuple[float, float] | None = Y_RANGE, seed: int = 0) -> nn.Module:
    """Model `name`, told its training pairs (every user and item) as the trainer tells it."""
    model = build_model(name, N_USERS, N_ITEMS, N_FACTORS, y_range, torch.Generator().manual_seed(seed))
    model.set_training_pairs(every_id_batch())
    return model


def batch(size: int = 16, seed: int = 1) -> torch.Tensor:
    """A random (size, 2) batch of [user, item] indices."""
    g = torch.Generator().manual_seed(seed)
    users = torch.randint(0, N_USERS, (size,), generator=g)
    items = torch.randint(0, N_ITEMS, (size,), generator=g)
    return torch.stack([users, items], dim=1)


def every_id_batch() -> torch.Tensor:
    """A batch that touches every user and every item (with repeats)."""
    n = max(N_USERS, N_ITEMS) * 2
    return torch.stack([torch.arange(n) % N_USERS, (torch.arange(n) * 5 + 3) % N_ITEMS], dim=1)


def perturb_zero_parameters(model: nn.Module, seed: int = 3) -> None:
    """Give zero-initialised parameters (biases) small random values so every path carries signal."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if not parameter.abs().sum() > 0:
                parameter.copy_(torch.randn(parameter.shape, generator=g) * 0.1)


# --- the shared contract -------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("size", [1, 5, 64])
def test_output_shape_and_dtype(name: str, size: int) -> None:
    out = make(name)(batch(size))
    assert out.shape == (size,)
    assert out.dtype == torch.float32


@pytest.mark.parametrize("name", NAMES)
def test_a_state_of_another_size_is_refused_and_leaves_the_model_as_it_was(name: str) -> None:
    # Regression: bpmf, bfm and svdpp took the saved shapes of their data-sized tensors (a draw's
    # width, N(u)) before the load failed on a bias table, and were left half another model's shape.
    other = build_model(name, N_USERS * 2, N_ITEMS, N_FACTORS, Y_RANGE, torch.Generator().manual_seed(1))
    n = N_USERS * 4
    other.set_training_pairs(torch.stack([torch.arange(n) % (N_USERS * 2), torch.arange(n) % N_ITEMS], 1))
    model = make(name)
    shapes = {key: tensor.shape for key, tensor in model.state_dict().items()}
    with pytest.raises(RuntimeError, match="size mismatch"):
        model.load_state_dict(other.state_dict())
    assert {key: tensor.shape for key, tensor in model.state_dict().items()} == shapes
    assert make(name)(batch()).shape == model(batch()).shape


@pytest.mark.parametrize("name", RATING_NAMES)
def test_outputs_lie_within_y_range(name: str) -> None:
    model, plain = make(name), make(name, y_range=None)
    x = every_id_batch()
    low, high = Y_RANGE
    # Random weights as large as possible while the logits stay within +-12, where the float32
    # sigmoid has not saturated yet: the outputs must lie strictly inside the range.
    scale = 4.0
    while True:
        with torch.no_grad():
            g = torch.Generator().manual_seed(5)
            for parameter in model.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=g) * scale)
        plain.load_state_dict(model.state_dict())
        logits = plain(x)
        if logits.abs().max() < 12:
            break
        scale *= 0.9
    assert logits.abs().max() > 6
    out = model(x)
    assert torch.allclose(out, model.squash(logits), atol=1e-5)
    if type(model).squash is RatingModel.squash:  # fastai's sigmoid: strictly inside the range
        assert torch.all(out > low) and torch.all(out < high)
        assert torch.allclose(out, torch.sigmoid(logits) * (high - low) + low, atol=1e-5)
    else:  # clipped
        assert torch.all(out >= low) and torch.all(out <= high) and not torch.equal(out, logits)


@pytest.mark.parametrize("name", RATING_NAMES)
@pytest.mark.parametrize(("user_value", "item_value"), [(10.0, 10.0), (10.0, -10.0), (-10.0, -10.0)])
def test_outputs_stay_bounded_for_huge_weights(name: str, user_value: float, item_value: float) -> None:
    model = make(name)
    with torch.no_grad():
        for parameter_name, parameter in model.named_parameters():
            parameter.fill_(item_value if parameter_name.startswith("item") else user_value)
    out = model(every_id_batch())
    # The float32 sigmoid saturates to exactly 0 or 1 for logits this large, so the bounds are
    # reached but never crossed.
    assert torch.isfinite(out).all()
    assert torch.all(out >= Y_RANGE[0]) and torch.all(out <= Y_RANGE[1])


@pytest.mark.parametrize("name", NAMES)
def test_without_y_range_outputs_are_unbounded(name: str) -> None:
    model = make(name, y_range=None)
    x = every_id_batch()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(10.0)
    assert torch.all(model(x) > 5.5)
    with torch.no_grad():
        for parameter_name, parameter in model.named_parameters():
            # Negative item vectors (EmbeddingProjection's projection keeps positive weights, so it
            # carries the sign through).
            if parameter_name.startswith("item") and not parameter_name.startswith("item_projection"):
                parameter.fill_(-10.0)
    assert torch.all(model(x) < 0.0)


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_gets_a_gradient(name: str) -> None:
    model = make(name)
    perturb_zero_parameters(model)
    x = every_id_batch()
    y = torch.rand(len(x), generator=torch.Generator().manual_seed(2)) * 4 + 1
    loss = torch.mean((model(x) - y) ** 2)
    loss.backward()
    parameters = dict(model.named_parameters())
    assert parameters
    for parameter_name, parameter in parameters.items():
        assert parameter.grad is not None, parameter_name
        assert not parameter.grad.is_sparse, parameter_name
        assert torch.isfinite(parameter.grad).all(), parameter_name
        assert parameter.grad.abs().sum() > 0, parameter_name


@pytest.mark.parametrize("name", NAMES)
def test_a_step_under_autocast_reaches_every_parameter(name: str) -> None:
    """Mixed precision (a fastai Learner's `to_fp16`): linear's sparse one-hot product had failed in
    backward ("expected scalar type Float but found BFloat16")."""
    model = make(name)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        predictions, penalty = model.forward_with_penalty(every_id_batch())
    (predictions.float().sum() + penalty.float()).backward()
    assert all(parameter.grad is not None for parameter in model.parameters())


# torch.func.vmap batches neither linear's sparse one-hot product nor svdpp's torch.unique.
@pytest.mark.parametrize("name", [name for name in NAMES if name not in ("linear", "svdpp")])
def test_per_sample_gradients_by_vmap_sum_to_the_batchs(name: str) -> None:
    """Per-sample gradients (torch.func.vmap over grad, as DP-SGD and influence studies take them):
    the index check had read a vmapped batch's values, which have none to read."""
    from torch.func import functional_call, grad, vmap

    model, x = make(name), batch(8)
    perturb_zero_parameters(model)
    y = torch.linspace(1.0, 5.0, len(x))
    params = {key: value.detach() for key, value in model.named_parameters()}

    def loss(weights: dict[str, torch.Tensor], pair: torch.Tensor, rating: torch.Tensor) -> torch.Tensor:
        return ((functional_call(model, weights, (pair.unsqueeze(0),)) - rating) ** 2).sum()

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    ((model(x) - y) ** 2).sum().backward()
    for key, parameter in model.named_parameters():
        assert per_sample[key].shape == (len(x), *parameter.shape)
        torch.testing.assert_close(per_sample[key].sum(0), parameter.grad, rtol=1e-4, atol=1e-6)
    outside = x.clone()
    outside[3, 1] = N_ITEMS  # still refused, by torch's lookup
    with pytest.raises((IndexError, RuntimeError), match=r"out of (range|bounds)"):
        vmap(grad(loss), in_dims=(None, 0, 0))(params, outside, y)


@pytest.mark.parametrize("name", NAMES)
def test_gradient_reaches_only_the_rows_a_batch_uses(name: str) -> None:
    model = make(name)
    x = torch.tensor([[0, 1], [2, 1]])
    torch.mean((model(x) - 3.0) ** 2).backward()
    tables = {
        "dot": ("user_factors.weight", 0),
        "dotbias": ("user_factors.weight", 0),
        "embproj": ("user_factors.weight", 0),
        "linear": ("user_linear.weight", 1),
        "svdpp": ("user_factors.weight", 0),
        "bpmf": ("user_factors.weight", 0),
        "bfm": ("user_factors.weight", 0),
        "bpr": ("user_factors.weight", 0),
        "ials": ("user_factors.weight", 0),
    }
    parameter_name, id_dim = tables[name]
    grad = dict(model.named_parameters())[parameter_name].grad
    assert grad is not None
    per_user = grad.abs().sum(dim=1 - id_dim)
    assert per_user[0] > 0 and per_user[2] > 0
    assert torch.all(per_user[[1, 3, 4, 5, 6]] == 0)


@pytest.mark.parametrize("name", NAMES)
def test_penalty_is_a_differentiable_nonnegative_scalar(name: str) -> None:
    model = make(name)
    x = batch(12)
    penalty = model.penalty(x)
    assert penalty.shape == ()
    assert penalty.item() > 0  # random factors are not all zero
    assert penalty.requires_grad
    penalty.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("name", NAMES)
def test_penalty_is_the_batch_mean_of_squared_row_norms_with_its_true_gradient(name: str) -> None:
    model = make(name).double()
    x = batch(12)
    _, rows = model.terms(*split_pairs(x))
    expected = sum(row.pow(2).sum() for row in rows) / len(x)
    torch.testing.assert_close(model.penalty(x), expected)
    assert torch.autograd.gradcheck(
        lambda *r: mean_squared_norm(*r), [r.detach().requires_grad_() for r in rows]
    )


@pytest.mark.parametrize("name", NAMES)
def test_penalty_grows_when_weights_are_scaled_up(name: str) -> None:
    model = make(name)
    perturb_zero_parameters(model)
    x = batch(12)
    before = model.penalty(x).item()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(3.0)
    after = model.penalty(x).item()
    assert after > before * 2


@pytest.mark.parametrize("name", NAMES)
def test_penalty_depends_only_on_the_batch_rows(name: str) -> None:
    model = make(name)
    x = torch.tensor([[0, 0], [1, 2]])
    before = model.penalty(x).item()
    with torch.no_grad():
        for parameter_name, parameter in model.named_parameters():
            if parameter_name == "user_linear.weight":
                parameter[:, 5].fill_(100.0)  # LinearDotProduct: a user's weight column
            elif parameter_name.startswith("user_") and parameter.dim() == 2 and len(parameter) == N_USERS:
                parameter[5].fill_(100.0)  # an embedding row of a user not in the batch
    assert model.penalty(x).item() == pytest.approx(before, rel=1e-6)
    assert model.penalty(torch.tensor([[5, 0]])).item() > 100.0


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_weights_different_seed_different_weights(name: str) -> None:
    first, second, other = (
        make(name, seed=4).state_dict(),
        make(name, seed=4).state_dict(),
        make(name, seed=5),
    )
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    other_state = other.state_dict()
    assert any(not torch.equal(first[k], other_state[k]) for k in first)


@pytest.mark.parametrize("name", NAMES)
def test_initialisation_uses_the_generator_not_the_global_rng(name: str) -> None:
    torch.manual_seed(0)
    first = make(name, seed=4).state_dict()
    torch.manual_seed(12345)
    second = make(name, seed=4).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.parametrize("name", NAMES)
def test_building_a_model_leaves_the_global_rng_where_the_caller_seeded_it(name: str) -> None:
    """torch's layers draw a default initialisation from the global RNG before the model overwrites it
    from its generator: a caller's seeded stream moved on by every model built."""
    torch.manual_seed(0)
    before = torch.get_rng_state()
    make(name, seed=4)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    ("x", "message"),
    [
        ([[0, 1]], "expected a torch tensor of \\[user, item\\] indices, got list"),
        (torch.tensor([[0.0, 1.0]]), "as int64 or int32, got torch.float32"),
        (torch.tensor([[True, False]]), "as int64 or int32, got torch.bool"),
        (torch.tensor([[0, 1]], dtype=torch.uint8), "as int64 or int32, got torch.uint8"),
    ],
    ids=["list", "float", "bool", "uint8"],
)
def test_indices_that_are_no_integer_tensor_raise_a_type_error(name: str, x: object, message: str) -> None:
    """Not torch's inner errors (index_select's dtype, an AttributeError on a list, a bool mask read
    as a selection), but one naming what the model takes."""
    with pytest.raises(TypeError, match=message):
        make(name)(x)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(5,), (5, 3), (5, 1), (2, 2, 2)])
def test_wrong_input_shape_raises_value_error(name: str, shape: tuple[int, ...]) -> None:
    model = make(name)
    x = torch.zeros(shape, dtype=torch.long)
    with pytest.raises(ValueError, match=r"\(batch, 2\)") as raised:
        model(x)
    if name == "bfm":  # what else it reads: times, once trained with them (tests/train/test_fm_gibbs.py)
        timed = "(batch, 3) one of [user, item, time]"
        assert ("read by bfm with its time group" if shape == (5, 3) else timed) in str(raised.value)
    with pytest.raises(ValueError):
        model.penalty(x)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("members", [1, 2])
@pytest.mark.parametrize("grad", [True, False], ids=["autograd", "no_grad"])
@pytest.mark.parametrize(
    ("column", "index", "kind", "n"),
    [
        (0, N_USERS, "user", N_USERS),
        (1, N_ITEMS, "item", N_ITEMS),
        (0, -1, "user", N_USERS),
        (1, -3, "item", N_ITEMS),
    ],
)
def test_an_index_outside_the_tables_is_named_with_its_column_and_range(
    name: str, members: int, grad: bool, column: int, index: int, kind: str, n: int
) -> None:
    """Not torch's "index out of range in self" (nor a negative index read from the end), but the
    column, the index and the range, as a fastai Learner or a direct call meets it."""
    model = build_model(name, N_USERS, N_ITEMS, N_FACTORS, Y_RANGE, torch.Generator().manual_seed(0), members)
    x = batch(size=5)
    x[2, column] = index
    message = rf"{kind} index {index} \(row 2\) is outside the model's {kind}s 0\.\.{n - 1}$"
    with torch.set_grad_enabled(grad):
        with pytest.raises(IndexError, match=message):
            model(x)
        with pytest.raises(IndexError, match=message):
            model.penalty(x)
        model(x[:2])  # the rows inside still predict


def test_a_model_with_no_items_says_so_for_any_index() -> None:
    model = build_model("dot", N_USERS, 0, N_FACTORS, Y_RANGE, torch.Generator().manual_seed(0))
    with pytest.raises(
        IndexError, match=r"item index 0 \(row 0\) is outside the model's items: it has none$"
    ):
        model(torch.tensor([[0, 0]]))


# torch has no meta kernels for linear's sparse one-hot product or SVD++'s torch.unique of a batch's users.
META_NAMES = [name for name in NAMES if name not in ("linear", "svdpp")]


@pytest.mark.parametrize("name", META_NAMES)
@pytest.mark.parametrize("members", [1, 2])
def test_a_model_on_the_meta_device_predicts_the_shapes_of_a_meta_batch(name: str, members: int) -> None:
    """A meta batch has no indices to check against the tables: the check had read its values back."""
    with torch.device("meta"):
        model = build_model(name, N_USERS, N_ITEMS, N_FACTORS, Y_RANGE, None, members)
    x = batch(size=5).to("meta")
    prediction, penalty = model(x), model.forward_with_penalty(x)[1]
    assert (prediction.device.type, prediction.shape, penalty.shape) == ("meta", (5,), ())


@pytest.mark.parametrize("name", NAMES)
def test_a_meta_batch_for_a_model_elsewhere_is_one_clear_error(name: str) -> None:
    """Not torch's 'Cannot copy out of meta tensor' from the range check, nor, past it, the garbage rows
    torch's CPU lookups return for meta indices."""
    model = make(name)
    message = r"^the batch is on the meta device but the model's tables are on cpu: move both to one device$"
    with pytest.raises(RuntimeError, match=message):
        model(batch(size=5).to("meta"))


@pytest.mark.parametrize("name", [name for name in NAMES if name != "svdpp"])  # torch.unique: no export
def test_torch_export_traces_a_model_that_predicts_as_it_does(name: str) -> None:
    """The index check had stopped the trace where it read the batch's range back."""
    model = make(name)
    exported = torch.export.export(model, (batch(size=5),)).module()
    x = batch(size=5, seed=2)
    torch.testing.assert_close(exported(x), model(x))


@pytest.mark.parametrize("name", NAMES)
def test_init_scale_multiplies_every_initial_weight(name: str) -> None:
    plain, scaled = (
        build_model(name, 6, 5, 3, Y_RANGE, torch.Generator().manual_seed(2), init_scale=scale)
        for scale in (1.0, 4.0)
    )
    pairs = list(zip(plain.parameters(), scaled.parameters(), strict=True))
    assert all(torch.allclose(b, 4.0 * a) for a, b in pairs)
    assert any(a.abs().sum() > 0 for a, _ in pairs)  # some weights start away from zero
    assert all(torch.equal(a, b) for a, b in zip(plain.buffers(), scaled.buffers(), strict=True))


def test_unknown_model_name_lists_the_valid_ones() -> None:
    with pytest.raises(RecsysError) as info:
        build_model("nope", 3, 3, 2, None)
    message = str(info.value)
    assert "'nope'" in message
    assert all(name in message for name in MODELS)


@pytest.mark.parametrize("name", RATING_NAMES)
def test_y_range_is_stored_and_applied(name: str) -> None:
    x = every_id_batch()
    plain = make(name, y_range=None)
    ranged = make(name, y_range=(1.0, 3.0))
    assert ranged.y_range == (1.0, 3.0)
    plain.load_state_dict(ranged.state_dict())  # the same weights, without the range
    assert torch.allclose(ranged(x), ranged.squash(plain(x)), atol=1e-6)
    if type(ranged).squash is RatingModel.squash:
        assert torch.allclose(ranged(x), torch.sigmoid(plain(x)) * 2.0 + 1.0, atol=1e-6)


@pytest.mark.parametrize("name", RATING_NAMES)
@pytest.mark.parametrize(
    "y_range", [(5.5, 0.0), (1.0, 1.0), (0.0, math.inf), (math.nan, 5.0), "05", (True, 5.0), (0.0, "5")]
)
def test_a_y_range_no_rating_fits_in_is_refused(name: str, y_range: tuple[float, float]) -> None:
    with pytest.raises(ValueError, match="y_range must be finite"):
        make(name, y_range=y_range)


# --- the interface: what each model says it has --------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_model_is_a_rating_model(name: str) -> None:
    model = make(name)
    assert isinstance(model, RatingModel) and type(model) is MODELS[name]
    assert rating_model(model) is model
    assert model.y_range == (None if model_entry(name).ranks else Y_RANGE)


@pytest.mark.parametrize("name", sorted(set(NAMES) - set(RATING_NAMES)))
def test_a_ranking_models_score_is_never_squashed(name: str) -> None:
    """Its score ranks and is no rating: a y_range given is not applied, however large the score."""
    model = make(name, y_range=(1.0, 3.0))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(10.0)
    x = every_id_batch()
    assert model.y_range is None
    assert torch.all(model(x) > 3.0)


def test_a_plain_module_is_not_a_rating_model() -> None:
    with pytest.raises(TypeError, match=r"expected a recsys\.models\.RatingModel, got Linear"):
        rating_model(nn.Linear(2, 1))


@pytest.mark.parametrize("name", NAMES)
def test_forward_with_penalty_predicts_what_forward_does(name: str) -> None:
    model = make(name)
    perturb_zero_parameters(model)
    x = every_id_batch()
    prediction, penalty = model.forward_with_penalty(x)
    assert torch.equal(prediction, model(x))
    assert torch.equal(penalty, model.penalty(x))


@pytest.mark.parametrize("name", NAMES)
def test_compiled_defaults_only_for_models_with_factorisation_tables(name: str) -> None:
    model = make(name)
    assert (name in COMPILED_DEFAULTS) == (
        model.factorisation() is not None or isinstance(model, SampledModel)
    )


@pytest.mark.parametrize("name", NAMES)
def test_id_vectors_are_one_detached_row_per_id(name: str) -> None:
    model = make(name)
    vectors = model.id_vectors()
    if vectors is None:
        return
    user_vectors, item_vectors = vectors
    assert user_vectors.shape == (N_USERS, N_FACTORS) and item_vectors.shape == (N_ITEMS, N_FACTORS)
    assert not user_vectors.requires_grad and not item_vectors.requires_grad


@pytest.mark.parametrize("name", NAMES)
def test_learned_biases_have_one_value_per_id(name: str) -> None:
    model = make(name)
    perturb_zero_parameters(model)
    biases = model.learned_biases()
    if biases is None:
        return
    assert biases.kind in ("explicit", "implied")
    assert biases.user.shape == (N_USERS,) and biases.item.shape == (N_ITEMS,)
    assert biases.user.dtype == biases.item.dtype == np.float64


@pytest.mark.parametrize("name", NAMES)
def test_explanations_add_up_to_the_prediction(name: str) -> None:
    model = make(name)
    perturb_zero_parameters(model)
    x = every_id_batch()
    explanation = model.explain(x[:, 0], x[:, 1])
    if explanation is None:
        return
    assert torch.allclose(sum(explanation.terms.values()), explanation.score, atol=1e-6)
    assert torch.equal(explanation.prediction, model(x))
    assert not any(t.requires_grad for t in [*explanation.terms.values(), explanation.prediction])


@pytest.mark.parametrize("name", recsys.models.__all__)
def test_every_public_name_of_recsys_models_resolves(name: str) -> None:
    assert getattr(recsys.models, name) is not None
    assert name in dir(recsys.models)


def test_the_registry_and_config_import_without_torch() -> None:
    code = (
        "import sys, recsys.models.registry, recsys.config; "
        "print(sorted(recsys.models.registry.MODEL_DEFAULTS), 'torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == f"{sorted(NAMES)} False"


# --- sigmoid_range -------------------------------------------------------------------------------


def test_sigmoid_range_matches_fastai_formula() -> None:
    x = torch.linspace(-8, 8, 33)
    for low, high in [(0.0, 5.5), (1.0, 5.0), (-2.0, 0.5)]:
        assert torch.allclose(sigmoid_range(x, (low, high)), torch.sigmoid(x) * (high - low) + low)
    assert sigmoid_range(torch.tensor(0.0), (1.0, 5.0)).item() == pytest.approx(3.0)


def test_sigmoid_range_none_is_identity() -> None:
    x = torch.tensor([-100.0, 0.0, 3.25, 1e6])
    assert torch.equal(sigmoid_range(x, None), x)


# --- LinearDotProduct ----------------------------------------------------------------------------


def dot_and_linear(y_range: tuple[float, float] | None, sparse: bool) -> tuple[DotProduct, LinearDotProduct]:
    dot = DotProduct(N_USERS, N_ITEMS, N_FACTORS, y_range, torch.Generator().manual_seed(0))
    linear = LinearDotProduct(
        N_USERS, N_ITEMS, N_FACTORS, y_range, torch.Generator().manual_seed(1), bias=False, sparse=sparse
    )
    with torch.no_grad():
        # Scale up so the dot products are far from zero and a mismatch would show.
        dot.user_factors.weight.mul_(50.0)
        dot.item_factors.weight.mul_(50.0)
        linear.user_linear.weight.copy_(dot.user_factors.weight.T)
        linear.item_linear.weight.copy_(dot.item_factors.weight.T)
    return dot, linear


@pytest.mark.parametrize("y_range", [None, Y_RANGE])
@pytest.mark.parametrize("sparse", [True, False])
def test_linear_without_bias_equals_dot_product(y_range: tuple[float, float] | None, sparse: bool) -> None:
    dot, linear = dot_and_linear(y_range, sparse)
    assert linear.user_linear.bias is None and linear.item_linear.bias is None
    x = torch.cat([every_id_batch(), batch(40)])
    expected = dot(x)
    assert expected.abs().max() > 0.1
    assert torch.allclose(linear(x), expected, atol=1e-6, rtol=0)
    assert linear.penalty(x).item() == pytest.approx(dot.penalty(x).item(), rel=1e-6)


def test_linear_sparse_and_dense_agree_on_outputs_and_gradients() -> None:
    models = {}
    for sparse in (True, False):
        model = LinearDotProduct(
            N_USERS, N_ITEMS, N_FACTORS, Y_RANGE, torch.Generator().manual_seed(0), sparse=sparse
        )
        perturb_zero_parameters(model)
        models[sparse] = model
    sparse_model, dense_model = models[True], models[False]
    assert all(
        torch.equal(a, b) for a, b in zip(sparse_model.parameters(), dense_model.parameters(), strict=True)
    )
    x = torch.cat([every_id_batch(), torch.tensor([[0, 0], [0, 0], [3, 8]])])  # repeated ids too
    y = torch.linspace(1, 5, len(x))
    outputs = {}
    for sparse, model in models.items():
        out = model(x)
        outputs[sparse] = out.detach()
        (torch.mean((out - y) ** 2) + 0.1 * model.penalty(x)).backward()
    assert torch.allclose(outputs[True], outputs[False], atol=1e-6)
    for (name, a), b in zip(sparse_model.named_parameters(), dense_model.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None, name
        assert a.grad.layout == torch.strided, name
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name


@pytest.mark.parametrize("sparse", [True, False])
def test_one_hot_linear_is_the_linear_layer_on_one_hot_rows(sparse: bool) -> None:
    layer = nn.Linear(5, 3)
    with torch.no_grad():
        layer.bias.copy_(torch.tensor([0.5, -1.0, 2.0]))
    indices = torch.tensor([4, 0, 4, 2])
    expected = layer.weight.T[indices] + layer.bias
    assert torch.allclose(one_hot_linear(indices, layer, sparse), expected, atol=1e-6)


@pytest.mark.parametrize("sparse", [True, False])
def test_linear_bias_is_one_shared_vector_per_side(sparse: bool) -> None:
    model = LinearDotProduct(
        N_USERS, N_ITEMS, N_FACTORS, None, torch.Generator().manual_seed(0), sparse=sparse
    )
    assert model.user_linear.bias is not None and model.item_linear.bias is not None
    assert model.user_linear.bias.shape == (N_FACTORS,)
    assert model.item_linear.bias.shape == (N_FACTORS,)
    shared = torch.tensor([0.3, -0.7, 1.1, 0.2])
    with torch.no_grad():
        model.user_linear.bias.copy_(shared)
        bias_before = model.user_linear.bias.clone()
        model.user_linear.weight[:, 2].fill_(4.0)  # change one user's weight column
    assert torch.equal(model.user_linear.bias, bias_before)
    with torch.no_grad():
        model.user_linear.weight[:, 1].zero_()
        model.user_linear.weight[:, 5].zero_()
    users = torch.tensor([1, 5, 2])
    vectors = one_hot_linear(users, model.user_linear, sparse)
    assert torch.allclose(vectors[0], shared) and torch.allclose(vectors[1], shared)
    assert torch.allclose(vectors[2], torch.full((N_FACTORS,), 4.0) + shared)
    # The same item rated by two zero-column users gets the same prediction: bias . item vector.
    out = model(torch.tensor([[1, 3], [5, 3]]))
    item_vector = model.item_linear.weight[:, 3] + model.item_linear.bias
    assert torch.allclose(out, (shared * item_vector).sum().expand(2), atol=1e-6)


# --- fastai --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_encoded(tiny: RatingsDataset) -> EncodedSplit:
    return encode_split(make_split(tiny, "random", seed=0))


@pytest.mark.filterwarnings("ignore:The 'mode.chained_assignment' option:Warning")  # fastai vs pandas 3
@pytest.mark.parametrize("name", NAMES)
def test_fastai_learner_trains_every_model(name: str, tiny_encoded: EncodedSplit) -> None:
    pytest.importorskip("fastai.learner")
    from fastai.callback.schedule import fit_one_cycle  # noqa: F401  (patches Learner.fit_one_cycle)
    from fastai.data.core import DataLoaders
    from fastai.learner import Learner
    from fastai.losses import MSELossFlat
    from torch.utils.data import TensorDataset

    data = tiny_encoded
    dls = DataLoaders.from_dsets(
        TensorDataset(data.train.x, data.train.y),
        TensorDataset(data.test.x, data.test.y),
        bs=256,
        device="cpu",
    )
    x, y = dls.one_batch()
    assert x.shape == (256, 2) and y.shape == (256,)
    if model_entry(name).ranks:  # fitted to 1 where rated 4 or more, else 0, as implicit feedback
        dls = DataLoaders.from_dsets(
            TensorDataset(data.train.x, (data.train.y >= 4).float()),
            TensorDataset(data.test.x, (data.test.y >= 4).float()),
            bs=256,
            device="cpu",
        )
    model = build_model(name, len(data.users), len(data.items), 20, Y_RANGE, torch.Generator().manual_seed(0))
    model.set_training_pairs(data.train.x)
    before = {k: v.clone() for k, v in model.named_parameters()}
    learn = Learner(dls, model, loss_func=MSELossFlat())
    with learn.no_bar(), learn.no_logging():
        learn.fit_one_cycle(1, 5e-3)
    after = dict(model.named_parameters())
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed == list(before), f"unchanged parameters: {set(before) - set(changed)}"
    train_loss, valid_loss = learn.recorder.values[-1][:2]
    assert math.isfinite(train_loss) and math.isfinite(valid_loss)
    assert 0 < train_loss < 10
    assert len(learn.recorder.losses) == len(dls.train)
    assert all(math.isfinite(float(loss)) for loss in learn.recorder.losses)


@pytest.mark.slow  # about 15 s for the models together: the fast suite's test above trains each in a Learner
@pytest.mark.filterwarnings("ignore:The 'mode.chained_assignment' option:Warning")  # fastai vs pandas 3
@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable:UserWarning")  # fastai's tensors
@pytest.mark.parametrize("name", NAMES)
def test_fastai_collab_learner_exports_every_model_predicting_as_recsys_does(
    name: str, tiny: RatingsDataset, tmp_path: Path
) -> None:
    """docs/library.md's fastai story: data loaders from CollabDataLoaders.from_df (fastai's own id
    codes, #na# first), lr_find, save/load and export/load_learner; the Learner's predictions are
    recsys.predict's for the same weights, before and after the round trips."""
    pytest.importorskip("fastai.learner")
    from fastai.callback.schedule import lr_find  # noqa: F401  (patches Learner.lr_find)
    from fastai.collab import CollabDataLoaders
    from fastai.learner import Learner, load_learner
    from fastai.losses import MSELossFlat

    from recsys.evaluation.metrics import predict

    dls = CollabDataLoaders.from_df(tiny.ratings[["user", "item", "rating"]], bs=256, seed=0)
    n_users, n_items = len(dls.classes["user"]), len(dls.classes["item"])
    model = build_model(name, n_users, n_items, 8, Y_RANGE, torch.Generator().manual_seed(0))
    learn = Learner(dls, model, loss_func=MSELossFlat(), path=tmp_path)
    with learn.no_bar(), learn.no_logging():
        learn.lr_find(num_it=5, show_plot=False)
        learn.fit(1, 1e-3)
        predictions = learn.get_preds()[0]
        learn.save("weights")
        learn.export(tmp_path / "learner.pkl")
        fresh = build_model(name, n_users, n_items, 8, Y_RANGE, torch.Generator().manual_seed(1))
        reloaded = Learner(dls, fresh, loss_func=MSELossFlat(), path=tmp_path).load("weights")
        exported = load_learner(tmp_path / "learner.pkl")
        pairs = torch.from_numpy(dls.valid_ds.items[["user", "item"]].to_numpy().astype(np.int64))
        assert torch.allclose(predict(learn.model, pairs), predictions, atol=1e-6)
        assert torch.equal(reloaded.get_preds()[0], predictions)
        assert torch.equal(exported.get_preds(dl=dls.valid)[0], predictions)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_lookup_gives_the_embeddings_rows_and_gradient(sparse: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    ours, theirs = nn.Embedding(7, 3, sparse=sparse), nn.Embedding(7, 3, sparse=sparse)
    theirs.load_state_dict(ours.state_dict())
    ids = torch.tensor([4, 0, 4, 6, 4])  # repeats: their gradients must add up
    upstream = torch.randn(5, 3, generator=generator)
    rows = lookup(ours, ids)
    assert torch.equal(rows, theirs(ids))
    rows.backward(upstream)
    theirs(ids).backward(upstream)
    assert ours.weight.grad is not None and theirs.weight.grad is not None
    assert ours.weight.grad.is_sparse == sparse
    torch.testing.assert_close(ours.weight.grad.to_dense(), theirs.weight.grad.to_dense())


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"n_factors": 0}, r"`n_factors` must be a whole number of at least 1, got 0"),
        ({"n_factors": -1}, r"`n_factors` must be a whole number of at least 1, got -1"),
        ({"n_factors": "8"}, r"`n_factors` must be a whole number of at least 1, got '8'"),
        ({"n_users": 2.0}, r"`n_users` must be a whole number of at least 0, got 2.0"),
        ({"members": 0}, r"`members` must be a whole number of at least 1, got 0"),
        ({"init_scale": 0.0}, r"`init_scale` must be positive and finite, got 0.0"),
    ],
)
def test_build_model_names_an_argument_no_model_can_have(arguments: dict, message: str) -> None:
    """Once torch's errors from inside a table (a negative dimension, a str where a size goes) or an
    IndexError for an ensemble of no members, and 0 factors built a model that could not learn."""
    given = {"n_users": N_USERS, "n_items": N_ITEMS, "n_factors": N_FACTORS, **arguments}
    init_scale, members = given.pop("init_scale", 1.0), given.pop("members", 1)
    with pytest.raises(ValueError, match=message):
        build_model("dotbias", **given, y_range=Y_RANGE, init_scale=init_scale, members=members)
    assert build_model("dotbias", N_USERS, N_ITEMS, np.int64(2), Y_RANGE, members=np.int64(2)) is not None
