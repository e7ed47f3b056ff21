"""LazyAdam computes what torch's SparseAdam computes, only faster."""

import pytest
import torch
from torch import nn

from recsys.optim import LazyAdam


def test_lazy_adam_matches_sparse_adam() -> None:
    generator = torch.Generator().manual_seed(0)
    ours, theirs = nn.Embedding(40, 3, sparse=True), nn.Embedding(40, 3, sparse=True)
    theirs.load_state_dict(ours.state_dict())
    lazy, reference = (
        LazyAdam(ours.parameters(), lr=0.05),
        torch.optim.SparseAdam(theirs.parameters(), lr=0.05),
    )
    untouched = torch.arange(30, 40)  # never in a batch: must not move
    initial = ours.weight.detach().clone()
    for _ in range(6):
        rows = torch.randint(0, 30, (25,), generator=generator)  # with duplicates
        for table, optimizer in ((ours, lazy), (theirs, reference)):
            optimizer.zero_grad()
            (table(rows) ** 2 * torch.arange(1.0, 4.0)).sum().backward()
            optimizer.step()
    assert torch.allclose(ours.weight, theirs.weight, atol=1e-6)
    assert torch.equal(ours.weight[untouched], initial[untouched])
    assert not torch.equal(ours.weight[:30], initial[:30])  # it did train


def test_lazy_adam_refuses_dense_gradients() -> None:
    table = nn.Embedding(5, 2)
    optimizer = LazyAdam(table.parameters())
    table(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(ValueError, match="sparse"):
        optimizer.step()
