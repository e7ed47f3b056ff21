"""Top-N lists judged in full ranking: precision, recall, NDCG, MAP, MRR and hit rate at k, with
catalogue coverage, the popularity of what is recommended and the Gini index of exposure.

The protocol (docs/evaluation.md says why each choice): a judged user is one with at least one
relevant test item; every item the user did not rate in training is a candidate, ranked in full
(no sampled negatives); relevant means a test rating at or above a threshold. Users are scored a
block at a time, so memory stays bounded whatever the number of users.
"""

import math
import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from recsys.data.encoding import RatingTensors, as_held, positive_strength
from recsys.evaluation.scorers import Scorer
from recsys.models.layers import check_pair_range

KS = (5, 10, 20)
RELEVANT_SHARE = 0.75  # of the way up the rating scale: 4 stars on 1-5, 8 on 2-10
BLOCK_ENTRIES = 1 << 22  # user x item scores held at once (16 MB of float32)
PER_USER_METRICS = ("precision", "recall", "ndcg", "ndcg_graded", "map", "mrr", "hit_rate")
CATALOGUE_METRICS = ("coverage", "popularity", "gini")


def relevance_threshold(rating_scale: tuple[float, float]) -> float:
    """The rating at or above which a test item is relevant: 4 on a 1-5 scale, scaled on others."""
    low, high = rating_scale
    return low + RELEVANT_SHARE * (high - low)


def _finite(value: object) -> bool:
    """Whether `value` is a finite real number (not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _csr(rows: Tensor, columns: Tensor, n_rows: int) -> tuple[Tensor, Tensor]:
    """Row starts and the columns of each row, for pairs sorted by row."""
    order = torch.argsort(rows, stable=True)
    starts = torch.zeros(n_rows + 1, dtype=torch.long)
    starts[1:] = torch.cumsum(torch.bincount(rows, minlength=n_rows), 0)
    return starts, columns[order]


@dataclass(frozen=True)
class RankingTask:
    """Who is judged, what each may be recommended, and what is relevant to them."""

    n_items: int
    users: Tensor  # inner indices of the judged users, ascending
    rated_starts: Tensor  # (n_users + 1,): user u rated rated_items[rated_starts[u]:rated_starts[u + 1]]
    rated_items: Tensor
    relevant_starts: Tensor  # (len(users) + 1,): the judged users' relevant items, in `users` order
    relevant_items: Tensor
    relevant_gains: Tensor  # the graded NDCG's gain: 1 + (rating - threshold) / rating unit, so at least 1
    popularity: Tensor  # (n_items,): share of training users who rated each item
    threshold: float | None  # None: every test item is relevant

    def relevant_of(self, position: int) -> tuple[Tensor, Tensor]:
        """The relevant items and their gains of the judged user at `position` in `users`."""
        start, end = int(self.relevant_starts[position]), int(self.relevant_starts[position + 1])
        return self.relevant_items[start:end], self.relevant_gains[start:end]


def ranking_task(
    train: RatingTensors,
    test: RatingTensors,
    n_users: int,
    n_items: int,
    threshold: float | None,
    *,
    rating_unit: float,
) -> RankingTask:
    """The task for encoded training and test ratings: relevant is a test rating >= `threshold`
    (None: any test rating) of an item the user did not rate in training; a pair rated twice in
    test counts once, with its highest rating. Its gain in the graded NDCG is 1 + (rating -
    threshold) / `rating_unit` (None: the lowest test rating), as the ranking models weigh a positive:
    one more per five-star unit above the threshold, so the same ratings on another scale score alike."""
    if threshold is not None and not _finite(threshold):
        # NaN or inf judges nobody (every metric NaN); -inf makes every graded gain infinite
        raise ValueError(f"threshold must be a finite rating or None, got {threshold!r}")
    if not (_finite(rating_unit) and rating_unit > 0):
        raise ValueError(f"rating_unit must be a positive finite number, got {rating_unit!r}")
    for part, name in ((train, "training"), (test, "test")):  # keys user * n_items + item alias otherwise
        check_pair_range(part.x.cpu(), n_users, n_items, f"{name} ")
    train_users, train_items = train.x[:, 0].cpu(), train.x[:, 1].cpu()
    rated_keys = torch.unique(train_users * n_items + train_items)
    rated_starts, rated_items = _csr(rated_keys // n_items, rated_keys % n_items, n_users)
    test_users, test_items, ratings = test.x[:, 0].cpu(), test.x[:, 1].cpu(), test.y.cpu().double()
    # The threshold as the ratings are held (float32): a rating of 7.7 is at or above 7.7.
    held = None if threshold is None else as_held(threshold)
    keep = torch.ones(len(ratings), dtype=torch.bool) if held is None else ratings >= held
    keys = test_users[keep] * n_items + test_items[keep]
    # Gains from 1 up whatever the scale (ratings of 0 or below included): the least relevant
    # rating gains 1, each five-star unit above it one more.
    floor = held if held is not None else (float(ratings.min()) if len(ratings) else 0.0)
    gains = positive_strength(ratings[keep], floor, rating_unit)
    keep = ~torch.isin(keys, rated_keys)
    keys, gains = keys[keep], gains[keep]
    # A pair rated twice keeps its highest gain; unique's keys are sorted: by user, then item.
    keys, inverse = torch.unique(keys, return_inverse=True)
    gains = gains.new_zeros(len(keys)).scatter_reduce(0, inverse, gains, "amax", include_self=False)
    users, counts = torch.unique(keys // n_items, return_counts=True)
    relevant_starts = torch.zeros(len(users) + 1, dtype=torch.long)
    relevant_starts[1:] = torch.cumsum(counts, 0)
    popularity = torch.bincount(rated_keys % n_items, minlength=n_items).double() / max(n_users, 1)
    return RankingTask(
        n_items,
        users,
        rated_starts,
        rated_items,
        relevant_starts,
        keys % n_items,
        gains,
        popularity,
        threshold,
    )


@dataclass(frozen=True)
class _Block:
    """One block of judged users' lists: `top` (b, k) items, -1 past a user's last candidate."""

    positions: slice  # the block's users as positions in task.users
    top: Tensor
    gain_at: Tensor  # (b, k): the gain of each listed item, 0 where not relevant (or no item)
    ideal_gains: Tensor  # (b, k): each user's k largest gains, highest first, then 0s
    n_relevant: Tensor  # (b,): each user's relevant items


def _blocks(scorer: Scorer, task: RankingTask, k: int, block_entries: int) -> Iterator[_Block]:
    """The judged users' top-`k` lists among their candidates, a block of users at a time."""
    n_items = task.n_items
    size = _block_users(task, block_entries)
    for first in range(0, len(task.users), size):
        positions = slice(first, min(first + size, len(task.users)))
        users = task.users[positions]
        b = len(users)
        scores = scorer(users).cpu()  # a model on a GPU scores there; the lists are made here
        if scores.dtype != torch.float64:  # float64 kept: in float32 close scores could tie
            scores = scores.float()
        if tuple(scores.shape) != (b, n_items):
            raise ValueError(
                f"the scorer gave scores of shape {tuple(scores.shape)} for {b} users; expected ({b}, "
                f"{n_items}): a score per item of the task"
            )
        # A candidate scored -inf still ranks, last, ahead of the items excluded (-inf here). A copy:
        # a scorer's scores may be its own (an expanded vector, a cached table).
        lowest = torch.finfo(scores.dtype).min
        scores = torch.nan_to_num(scores, nan=torch.nan, posinf=torch.inf, neginf=lowest)
        scores[_rows_of(task.rated_starts, task.rated_items, users)] = -torch.inf
        values, top = _best(scores, min(k, n_items))
        top = top.masked_fill(values == -torch.inf, -1)
        if k > n_items:  # a list longer than the catalogue ends in -1s, as one past the candidates does
            top = torch.cat([top, top.new_full((b, k - n_items), -1)], dim=1)
        yield _Block(positions, top, *_gains(task, positions, top))


def _block_users(task: RankingTask, block_entries: int) -> int:
    """Users a block ranks: `block_entries` scores, a row of the catalogue each."""
    return max(1, block_entries // max(task.n_items, 1))


def _gains(task: RankingTask, positions: slice, top: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """For the judged users at `positions` and their lists `top` (b, k): each listed item's gain, each
    user's k largest gains, and how many items are relevant to each, from the task's relevant
    entries alone (a (b, n_items) table of gains cost a sixth of a large catalogue's ranking)."""
    b, k = top.shape
    starts = task.relevant_starts
    n_relevant = starts[positions.start + 1 : positions.stop + 1] - starts[positions.start : positions.stop]
    gain_at, ideal_gains = torch.zeros(b, k, dtype=torch.float64), torch.zeros(b, k, dtype=torch.float64)
    rows, items = _rows_of(starts, task.relevant_items, torch.arange(positions.start, positions.stop))
    if not len(rows):
        return gain_at, ideal_gains, n_relevant
    gains = task.relevant_gains[starts[positions.start] : starts[positions.stop]].double()
    keys, order = torch.sort(rows * task.n_items + items)
    wanted = torch.arange(b).unsqueeze(1) * task.n_items + top.clamp(min=0)
    found = torch.searchsorted(keys, wanted).clamp(max=len(keys) - 1)
    listed = (top >= 0) & (keys[found] == wanted)
    gain_at[listed] = gains[order][found][listed]
    # Each user's gains highest first: by gain, then (stably) by user; each one's place in its row.
    by_gain = torch.argsort(gains, descending=True, stable=True)
    by_row = by_gain[torch.argsort(rows[by_gain], stable=True)]
    place = torch.arange(len(rows)) - (torch.cumsum(n_relevant, 0) - n_relevant)[rows[by_row]]
    kept = place < k
    ideal_gains[rows[by_row][kept], place[kept]] = gains[by_row][kept]
    return gain_at, ideal_gains, n_relevant


def _best(scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Each row's k highest scores and their columns, best first, equal scores in column order: so
    a list's first k' items are the same whatever k >= k' is asked for (topk's choice among ties
    is not)."""
    best, columns = torch.topk(scores, k, dim=1)
    # topk ranks NaN above every number, so a row holding one has it first: checked on k columns,
    # not on every score (a NaN is neither above nor tied with the k-th, and would leave no list).
    if bool(torch.isnan(best[:, 0]).any()):
        raise ValueError("the scorer gave NaN scores; a model whose weights hold NaN cannot rank")
    kth = best[:, -1:]
    room = k - (best > kth).sum(1, keepdim=True)  # the places left to the scores tied with the k-th
    # Where more scores tie with the k-th than there are places, topk chose among them as it liked:
    # those rows take the tied columns lowest first.
    crowded = ((scores == kth).sum(1, keepdim=True) > room).squeeze(1).nonzero().squeeze(1)
    if len(crowded):
        some, some_kth = scores[crowded], kth[crowded]
        tied = some == some_kth
        chosen = (some > some_kth) | (tied & (torch.cumsum(tied, 1) <= room[crowded]))
        columns[crowded] = chosen.nonzero()[:, 1].view(len(crowded), k)
    columns = columns.sort(dim=1).values
    values = scores.gather(1, columns)
    order = torch.argsort(values, dim=1, descending=True, stable=True)
    return values.gather(1, order), columns.gather(1, order)


def _rows_of(starts: Tensor, columns: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    """The CSR entries of `rows`, as (position in `rows`, column) pairs."""
    sizes = starts[rows + 1] - starts[rows]
    block_rows = torch.repeat_interleave(torch.arange(len(rows)), sizes)
    offsets = torch.arange(int(sizes.sum())) - torch.repeat_interleave(torch.cumsum(sizes, 0) - sizes, sizes)
    return block_rows, columns[starts[rows][block_rows] + offsets]


def top_lists(scorer: Scorer, task: RankingTask, k: int, block_entries: int = BLOCK_ENTRIES) -> np.ndarray:
    """Each judged user's top-`k` candidates, best first: (len(task.users), k) inner item indices,
    -1 where a user has fewer than k candidates."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    lists = [block.top for block in _blocks(scorer, task, k, block_entries)]
    return torch.cat(lists).numpy() if lists else np.zeros((0, k), dtype=np.int64)


def gini(counts: Tensor) -> float:
    """Gini index of exposure counts over the catalogue: 0 when every item is shown equally often,
    near 1 when one item takes every slot."""
    ordered = torch.sort(counts.double()).values
    total = float(ordered.sum())
    n = len(ordered)
    if total == 0 or n == 0:
        return 0.0
    ranks = torch.arange(1, n + 1, dtype=torch.float64)
    return float(((2 * ranks - n - 1) * ordered).sum() / (n * total))


def evaluate_ranking(
    scorer: Scorer,
    task: RankingTask,
    ks: Sequence[int] = KS,
    block_entries: int = BLOCK_ENTRIES,
    progress: bool = False,
) -> dict[str, float]:
    """Every metric at every k in `ks`, as "precision@10" and so on: per-user metrics averaged over
    the judged users, catalogue metrics over all of their lists. "users" counts the judged users.
    `progress`: a bar over the blocks of users (every user of a large catalogue takes minutes)."""
    ks = [int(k) if isinstance(k, numbers.Integral) and not isinstance(k, bool) else k for k in ks]
    if not ks or not all(isinstance(k, int) and k >= 1 for k in ks):
        raise ValueError(f"ks must be one or more whole lengths of at least 1, got {list(ks)}")
    ks = list(dict.fromkeys(ks))  # a length named twice is one metric, summed once
    # A list longer than the catalogue ends in nothing: its first n_items places are scored, and
    # precision still divides by k (a 10**7 long list once took its length in memory per user).
    width = min(max(ks), task.n_items)
    discount = 1.0 / torch.log2(torch.arange(2, width + 2, dtype=torch.float64))
    ideal_binary = torch.cumsum(discount, 0)
    sums = {f"{metric}@{k}": 0.0 for metric in PER_USER_METRICS for k in ks}
    exposure = {k: torch.zeros(task.n_items, dtype=torch.float64) for k in ks}
    shown_popularity = dict.fromkeys(ks, 0.0)
    n_blocks = -(-len(task.users) // _block_users(task, block_entries))
    blocks = _blocks(scorer, task, width, block_entries)
    desc = f"ranking {len(task.users):,} users' lists"
    for block in tqdm(blocks, desc=desc, total=n_blocks, leave=False, disable=not progress):
        valid = block.top >= 0
        gain_at, ideal_gains = block.gain_at, block.ideal_gains
        hits = (gain_at > 0).double()
        n_relevant = block.n_relevant.double()
        ranks = torch.arange(1, hits.shape[1] + 1, dtype=torch.float64)
        for k in ks:
            shown_k = min(k, task.n_items)  # the places a list of k can fill
            hit_k = hits[:, :shown_k]
            n_hits = hit_k.sum(1)
            capped = torch.clamp(n_relevant, max=k)
            sums[f"precision@{k}"] += float((n_hits / k).sum())
            sums[f"recall@{k}"] += float((n_hits / n_relevant).sum())
            sums[f"hit_rate@{k}"] += float((n_hits > 0).sum())
            dcg = (hit_k * discount[:shown_k]).sum(1)
            sums[f"ndcg@{k}"] += float((dcg / ideal_binary[capped.long() - 1]).sum())
            graded = (gain_at[:, :shown_k] * discount[:shown_k]).sum(1)
            ideal = (ideal_gains[:, :shown_k] * discount[:shown_k]).sum(1)
            sums[f"ndcg_graded@{k}"] += float((graded / ideal).sum())
            precision_at = torch.cumsum(hit_k, 1) / ranks[:shown_k]
            sums[f"map@{k}"] += float(((precision_at * hit_k).sum(1) / capped).sum())
            sums[f"mrr@{k}"] += float((hit_k / ranks[:shown_k]).max(1).values.sum())
            shown = block.top[:, :shown_k][valid[:, :shown_k]]
            exposure[k] += torch.bincount(shown, minlength=task.n_items).double()
            shown_popularity[k] += float(task.popularity[shown].sum())
    n_users = len(task.users)
    results: dict[str, float] = {"users": float(n_users)}
    for metric in PER_USER_METRICS:
        for k in ks:
            results[f"{metric}@{k}"] = sums[f"{metric}@{k}"] / n_users if n_users else float("nan")
    for k in ks:
        slots = float(exposure[k].sum())
        results[f"coverage@{k}"] = float((exposure[k] > 0).sum()) / task.n_items if task.n_items else 0.0
        results[f"popularity@{k}"] = shown_popularity[k] / slots if slots else float("nan")
        results[f"gini@{k}"] = gini(exposure[k])
    return results
