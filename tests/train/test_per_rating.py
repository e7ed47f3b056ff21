"""Seeds of an ensemble's members (and a sampler's chains), and the torch generators drawn from them."""

import torch

from recsys.train.per_rating import member_seed, seeded_generator


def test_each_member_draws_its_own_stream_and_the_first_the_runs() -> None:
    """torch's CPU generator reads a seed's low 32 bits alone, where every member's seed is the run's:
    drawn through seeded_generator, the members' streams differ, and the first member's is what the
    run's seed gives torch directly."""
    for seed in (0, 7, 2**32 - 1):
        draws = [torch.randn(4, generator=seeded_generator(member_seed(seed, place))) for place in range(5)]
        assert torch.equal(draws[0], torch.randn(4, generator=torch.Generator().manual_seed(seed)))
        assert len({tuple(draw.tolist()) for draw in draws}) == 5, seed
