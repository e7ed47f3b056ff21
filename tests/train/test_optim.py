"""LazyAdam computes what torch's SparseAdam computes, only faster."""

import pytest
import torch
from conftest import python_output
from torch import nn

from recsys.train.optim import LazyAdam


def _twin_tables(
    n_rows: int, n_factors: int, generator: torch.Generator
) -> tuple[nn.Embedding, nn.Embedding]:
    ours, theirs = nn.Embedding(n_rows, n_factors, sparse=True), nn.Embedding(n_rows, n_factors, sparse=True)
    with torch.no_grad():
        ours.weight.normal_(generator=generator)
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


@pytest.mark.parametrize("n_factors", [1, 3, 50])
def test_lazy_adam_matches_sparse_adam(n_factors: int) -> None:
    generator = torch.Generator().manual_seed(0)
    ours, theirs = _twin_tables(40, n_factors, generator)
    lazy, reference = (
        LazyAdam(ours.parameters(), lr=0.05),
        torch.optim.SparseAdam(theirs.parameters(), lr=0.05),
    )
    untouched = torch.arange(30, 40)  # never in a batch: must not move
    initial = ours.weight.detach().clone()
    scale = torch.arange(1.0, n_factors + 1)
    for batch_size in (25, 60, 10, 60, 25, 3):  # with duplicates; the kernel's scratch must grow
        rows = torch.randint(0, 30, (batch_size,), generator=generator)
        for table, optimizer in ((ours, lazy), (theirs, reference)):
            optimizer.zero_grad()
            (table(rows) ** 2 * scale).sum().backward()
            optimizer.step()
    torch.testing.assert_close(ours.weight, theirs.weight, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(
        lazy.state_dict()["state"][0]["exp_avg_sq"], reference.state[theirs.weight]["exp_avg_sq"]
    )
    assert torch.equal(ours.weight[untouched], initial[untouched])
    assert not torch.equal(ours.weight[:30], initial[:30])  # it did train


def test_lazy_adam_refuses_dense_gradients() -> None:
    table = nn.Embedding(5, 2)
    optimizer = LazyAdam(table.parameters())
    table(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(ValueError, match="sparse"):
        optimizer.step()


def test_lazy_adam_refuses_tables_its_kernel_cannot_update() -> None:
    table = nn.Embedding(5, 2, sparse=True).double()
    optimizer = LazyAdam(table.parameters())
    table(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(ValueError, match="float32 CPU"):
        optimizer.step()


def test_tables_looked_up_by_the_same_ids_share_a_pass_and_match_sparse_adam() -> None:
    generator = torch.Generator().manual_seed(1)
    users, users_reference = _twin_tables(30, 4, generator)
    bias, bias_reference = _twin_tables(30, 1, generator)
    items, items_reference = _twin_tables(20, 4, generator)
    ours = [users.weight, bias.weight, items.weight]
    lazy = LazyAdam(ours, lr=0.05)
    reference = torch.optim.SparseAdam(
        [users_reference.weight, bias_reference.weight, items_reference.weight], lr=0.05
    )
    for _ in range(5):
        user_ids = torch.randint(0, 30, (40,), generator=generator)
        item_ids = torch.randint(0, 20, (40,), generator=generator)
        for (u, b, i), optimizer in (
            ((users, bias, items), lazy),
            ((users_reference, bias_reference, items_reference), reference),
        ):
            optimizer.zero_grad()
            loss = ((u(user_ids) * i(item_ids)).sum(-1) + b(user_ids).squeeze(-1) - 3).pow(2).mean()
            loss.backward()
            optimizer.step()
    assert [len(tables) for tables in lazy._tables_by_ids(lazy.param_groups[0])] == [2, 1]
    for table, twin in ((users, users_reference), (bias, bias_reference), (items, items_reference)):
        torch.testing.assert_close(table.weight, twin.weight, atol=1e-6, rtol=1e-5)


@pytest.mark.slow  # a python that imports torch, as a subprocess
def test_lazy_adam_trains_where_numba_has_nowhere_to_cache() -> None:
    # ZipCacheLocator alone finds no place for a plain file, as in a read-only install with no
    # writable home: numba then refuses cache=True, and LazyAdam must compile without a cache.
    script = (
        "import torch\n"
        "import recsys.train.compiled  # the compiled engine's kernels share the same compilation\n"
        "from recsys.train.optim import LazyAdam\n"
        "table = torch.nn.Embedding(4, 2, sparse=True)\n"
        "before = table.weight.detach().clone()\n"
        "optimizer = LazyAdam(table.parameters(), lr=0.1)\n"
        "table(torch.tensor([0, 2, 2])).sum().backward()\n"
        "optimizer.step()\n"
        "print((table.weight != before).any(dim=1).tolist())\n"
    )
    output = python_output(script, {"NUMBA_CACHE_LOCATOR_CLASSES": "ZipCacheLocator"}, timeout=120)
    assert output.strip() == "[True, False, True, False]"
