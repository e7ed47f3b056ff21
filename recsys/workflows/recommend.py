"""Using a trained run: top items for a user, a cold start for a new one, a new user's top items from
a few ratings (fold-in), similar items, and why.

Every function takes raw ids and titles and returns raw ids and titles; the run's RecommendData
(its run folder's, or of the dataset) supplies the titles and what each user already rated, which a
checkpoint does not hold.
"""

import difflib
import math
import numbers
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from recsys.data.dataset import span_text
from recsys.data.encoding import IdMap
from recsys.errors import RecsysError, plain_value
from recsys.evaluation.biases import learned_biases
from recsys.evaluation.factors import cosine_neighbours, item_vectors
from recsys.evaluation.metrics import predict
from recsys.models import RatingModel, rating_model
from recsys.models.fold_in import fold_in
from recsys.train.checkpoints import Checkpoint
from recsys.workflows.experiment import described_users, new_user_starts, placed_users
from recsys.workflows.recommend_data import RecommendData


def _check_top(top: int) -> None:
    """Reject a list length no table can have."""
    if isinstance(top, bool) or not isinstance(top, numbers.Integral) or top < 1:
        raise RecsysError(f"`top` must be a whole number of at least 1, got {top!r}")


def _titled(
    checkpoint: Checkpoint, data: RecommendData, inner: np.ndarray, column: str, values: np.ndarray
) -> pd.DataFrame:
    """A table of the model's items `inner` by raw id, their titles and `values`."""
    titles = data.titles_of(checkpoint.items, inner)
    return pd.DataFrame({"item": checkpoint.items.decode(inner), "title": titles, column: values})


def _plain_id(raw: object, kind: str) -> int | str:
    """One id as given in Python: text as it is, a whole number (9, numpy's 9, 9.0) as an int; a
    bool, a fraction or anything that is not one value is an error naming it."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool | np.bool_):
        raise RecsysError(f"{kind} id {raw!r}: an id is an integer or text, not true or false")
    if isinstance(raw, numbers.Integral):
        return int(raw)
    if isinstance(raw, numbers.Real):
        value = float(raw)
        if math.isfinite(value) and value.is_integer():
            return int(value)
        raise RecsysError(f"{kind} id {raw!r}: not a whole number")
    raise RecsysError(f"a {kind} id is one integer or text, got {type(raw).__name__}")


def _as_id(id_map: IdMap, raw: int | str, kind: str) -> int | str:
    """`raw` as `id_map`'s ids are: "9" is user 9 where the ids are integers, 9 is "9" where they are
    text (a typed id and a stored one of the other type would never match)."""
    raw = _plain_id(raw, kind)
    if isinstance(raw, str):
        return id_map.parse(raw, kind)
    return raw if id_map.integer_ids else str(raw)


def knows_user(checkpoint: Checkpoint, user: int | str) -> bool:
    """Whether raw user id `user` was in the model's training data (else only a cold start can serve
    them); a text id that cannot be one of a model's integer ids is simply not known."""
    try:
        raw = _as_id(checkpoint.users, user, "user")
    except RecsysError:
        return False
    return bool(checkpoint.users.known(np.array([raw]))[0])


def user_index(
    checkpoint: Checkpoint, user: int | str, new_user: str = "use `cold_start` to recommend to a new user"
) -> int:
    """The inner index of raw user id `user`; an unknown user is an error saying what is known, then
    `new_user` (what serves a new user instead)."""
    users = checkpoint.users
    user = _as_id(users, user, "user")
    if not users.known(np.array([user]))[0]:
        known = (
            f"ids {users.raw_ids.min()}..{users.raw_ids.max()}"
            if users.integer_ids
            else f"ids such as {', '.join(repr(str(raw)) for raw in users.raw_ids[:3])}"
        )
        raise RecsysError(
            f"user {user!r} is not in this model's training data ({len(users)} users, {known}); {new_user}"
        )
    return int(users.encode(np.array([user]), "user")[0])


def item_index(checkpoint: Checkpoint, item: int | str) -> int:
    """The inner index of raw item id `item`; an unknown item is an error naming it."""
    return int(checkpoint.items.encode(np.array([_as_id(checkpoint.items, item, "item")]), "item")[0])


def recommend(checkpoint: Checkpoint, data: RecommendData, user: int | str, top: int = 10) -> pd.DataFrame:
    """The `top` items `user` has not rated, by predicted rating: columns item, title, predicted."""
    _check_top(top)
    user = _as_id(checkpoint.users, user, "user")  # as the ratings hold it, to find what they rated
    index = user_index(checkpoint, user)
    n_items = len(checkpoint.items)
    pairs = torch.stack([torch.full((n_items,), index), torch.arange(n_items)], dim=1)
    predicted = predict(checkpoint.model, pairs).cpu().numpy()
    candidates = _unrated(checkpoint, data, user)
    best = candidates[np.argsort(-predicted[candidates], kind="stable")[:top]]
    return _titled(checkpoint, data, best, _score_column(checkpoint), predicted[best])


def _unrated(checkpoint: Checkpoint, data: RecommendData, user: int | str | None) -> np.ndarray:
    """The inner indices of the model's items that raw user `user` (None: nobody) has not rated."""
    every = np.arange(len(checkpoint.items))
    return every if user is None else np.setdiff1d(every, data.rated_by(checkpoint.users, user))


def described_by_features(
    checkpoint: Checkpoint, user_features: pd.DataFrame | None, user: int | str
) -> bool:
    """Whether raw user `user`, new to the model, has a row in the user feature table `user_features`
    that the model reads (experiment.described_users)."""
    try:
        user = _as_id(checkpoint.users, user, "user")
    except RecsysError:  # text that no integer id can be
        return False
    model = rating_model(checkpoint.model)
    return bool(described_users(model, checkpoint.config, user_features, np.array([user]))[0])


def cold_start(
    checkpoint: Checkpoint,
    data: RecommendData,
    top: int = 10,
    user: int | str | None = None,
    user_features: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The `top` items for a user the model has never seen; where `user` (a raw id) has ratings in
    the data all the same (they came after the training part), the items they rated are left out.

    A user the feature table `user_features` describes (`described_by_features`) is placed where its
    features and those items put it, and ranked by predicted rating. Otherwise, with no factors to go
    on, by learned item bias when the model has biases (the score column is `item_bias` or
    `implied_item_bias`; bpr's, which is what it scores for a user of no factors), else by popularity
    in the data (`n_ratings`).
    """
    _check_top(top)
    if user is not None:
        try:
            user = _as_id(checkpoint.users, user, "user")
        except RecsysError:  # text that no integer id can be: nobody the ratings hold
            user = None
    candidates = _unrated(checkpoint, data, user)
    if user is not None and described_by_features(checkpoint, user_features, user):
        model, n_items = rating_model(checkpoint.model), len(checkpoint.items)
        rated = np.setdiff1d(np.arange(n_items), candidates)
        placed = placed_users(model, checkpoint.config, user_features, np.array([user]), [rated], n_items)
        column, scores = _score_column(checkpoint), placed.scores(torch.tensor([0]))[0].numpy()
    else:
        biases = learned_biases(checkpoint.model)
        ranking_bias = _ranking_item_bias(rating_model(checkpoint.model))
        if biases is not None:
            column = "item_bias" if biases.kind == "explicit" else "implied_item_bias"
            scores = biases.item
        elif ranking_bias is not None:  # bpr: a user of no factors scores each item its bias
            column, scores = "item_bias", ranking_bias
        else:
            column, scores = "n_ratings", data.popularity(len(checkpoint.items))
    best = candidates[np.argsort(-scores[candidates], kind="stable")[:top]]
    return _titled(checkpoint, data, best, column, scores[best])


def _ranking_item_bias(model: RatingModel) -> np.ndarray | None:
    """A ranking model's item biases (bpr's; ials has none): what it scores for a user of no factors.
    A rating model's biases are `learned_biases`, compared across models as ratings' offsets."""
    tables = model.factorisation() if model.ranks else None
    if tables is None or tables.item_bias is None:
        return None
    return tables.item_bias.detach().double().reshape(-1).numpy()


def close_titles(title: str, titles: list[str], n: int = 5) -> list[str]:
    """Up to `n` of `titles` most like `title`, any case (difflib's ratio, at least 0.6).

    Ties keep the order of `titles`: `difflib.get_close_matches` breaks them reverse-alphabetically,
    which ranks "Item 91" above "Item 10" as a match for "Item 1O".
    """
    folded = title.casefold()
    ratios = [difflib.SequenceMatcher(None, folded, name.casefold()).ratio() for name in titles]
    order = sorted(range(len(titles)), key=lambda i: -ratios[i])
    return [titles[i] for i in order[:n] if ratios[i] >= 0.6]


def find_item(checkpoint: Checkpoint, data: RecommendData, name: int | str, *, id_first: bool = False) -> int:
    """The inner index of the item titled `name` (case-insensitive; the lowest id among duplicates),
    else of the item whose id is `name` (data without titles is queried by id); `id_first`: the id
    is looked for first (`name` came from a column of ids, and a title may spell another item's id).

    Neither is an error suggesting up to five close titles.
    """
    name = str(_plain_id(name, "item")).strip()  # as a ratings file's ids and `recommend`'s user are read
    if id_first and (index := _item_with_id(checkpoint, name)) is not None:
        return index
    shown = pd.Series(data.titles, dtype=str)  # the item table's order: close matches tie in it
    matches = checkpoint.items.decode(data.titled_items[(shown.str.casefold() == name.casefold()).to_numpy()])
    if len(matches) > 1:  # catalogues repeat titles: say which item answers, and how to ask for another
        listed = ", ".join(str(item) for item in sorted(matches)[:5]) + (", ..." if len(matches) > 5 else "")
        warnings.warn(
            f"{len(matches)} items are titled {name!r} (ids {listed}); using {matches.min()}, the lowest id; "
            "give an id to ask for another",
            stacklevel=2,
        )
    if len(matches) > 0:
        return item_index(checkpoint, matches.min())
    if (index := _item_with_id(checkpoint, name)) is not None:
        return index
    close = close_titles(name, shown.tolist())
    hint = f"; did you mean: {'; '.join(close)}" if close else ""
    raise RecsysError(f"no item titled {name!r}, nor with that id, in this model's training data{hint}")


def _item_with_id(checkpoint: Checkpoint, name: str) -> int | None:
    """The inner index of the item whose id `name` is, read as `item_index` reads one ("0009" is item
    9 where the ids are integers), else None."""
    try:
        raw = checkpoint.items.parse(name, "item")
    except RecsysError:  # text that is no integer: no id of an integer-id model
        return None
    return item_index(checkpoint, raw) if checkpoint.items.known(np.array([raw]))[0] else None


def similar_items(
    checkpoint: Checkpoint, data: RecommendData, item: int | str, top: int = 10
) -> pd.DataFrame:
    """The `top` items nearest to `item` (a title, or an id: see `find_item`) by cosine similarity of
    item factors: item, title, cosine."""
    _check_top(top)
    vectors = item_vectors(checkpoint.model)
    if vectors is None:
        raise RecsysError(f"model {checkpoint.config.model!r} has no item factors to compare")
    neighbours, similarity = cosine_neighbours(vectors, find_item(checkpoint, data, item), top)
    return _titled(checkpoint, data, neighbours, "cosine", similarity)


def explain(checkpoint: Checkpoint, user: int | str, item: int | str) -> dict[str, float]:
    """A prediction in the parts the model names, then their sum and the prediction: for dotbias
    user_bias + item_bias + factors = score, squashed to prediction (for an ensemble, the members'
    mean parts and score, and the mean of their predictions; for bpr, item_bias + factors = score,
    its ranking score). A model whose prediction has no parts (`RatingModel.explain` is None) is an
    error."""
    model = rating_model(checkpoint.model)
    # A cold start lists a new user's items but has no prediction of theirs to take apart.
    users = torch.tensor([user_index(checkpoint, user, "`explain` needs a user the model knows")])
    items = torch.tensor([item_index(checkpoint, item)])
    explanation = model.explain(users, items)
    if explanation is None:
        raise RecsysError(
            f"model {checkpoint.config.model!r} has no bias terms to explain; train a model that has "
            "them (`model` dotbias)"
        )
    prediction = predict(model, torch.stack([users, items], dim=1))
    assert torch.equal(explanation.prediction, prediction), "parts disagree"
    parts = {
        **{name: float(term) for name, term in explanation.terms.items()},
        "score": float(explanation.score),
    }
    # A ranking model's score is its prediction, no rating: it is not shown twice.
    return parts if model.ranks else {**parts, "prediction": float(explanation.prediction)}


def recommend_from_ratings(
    checkpoint: Checkpoint,
    data: RecommendData,
    rated: Sequence[tuple[int | str, float]] | Mapping[int | str, float],
    top: int = 10,
    places: Sequence[str] | None = None,
    *,
    ids: bool = False,
) -> pd.DataFrame:
    """The `top` items for a new user who gave `rated` (title or item id, rating) pairs (or a dict of
    them), by predicted rating: the user is folded into the trained model (recsys.models.fold_in),
    with no retraining. `ids`: the pairs name items by id first, by title only where no id is the
    name (they came from a column of ids).
    An item named twice, a rating off the data's scale (on interactions: a count or weight of 0 or
    less), or a model without user vectors is an error, led by the pair's place in `places` (such as
    "FILE, line N") where given."""
    _check_top(top)
    rated = list(rated.items()) if isinstance(rated, Mapping) else list(rated)
    if not rated:
        raise RecsysError("a new user needs at least one rating to fold in")
    if places is not None and len(places) != len(rated):
        raise ValueError(f"`places` names {len(places)} places for {len(rated)} ratings")
    for pair in rated:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise RecsysError(f"a new user's ratings are (item, rating) pairs, got {pair!r}")
        rating = pair[1]
        if isinstance(rating, bool) or not isinstance(rating, numbers.Real) or not math.isfinite(rating):
            raise RecsysError(
                f"rating {plain_value(rating)!r} for {plain_value(pair[0])!r} is not a finite number"
            )
    low, high = data.rating_scale
    items: dict[int, int | str] = {}
    ratings = []
    for number, (name, rating) in enumerate(rated):
        try:
            if data.implicit and not rating > 0:
                raise RecsysError(
                    f"{rating:g} for {plain_value(name)!r}: an interaction's count or weight is above 0"
                )
            if not data.implicit and not low <= rating <= high:
                raise RecsysError(
                    f"rating {rating:g} for {plain_value(name)!r} is off the scale {span_text(low, high)}"
                )
            index = find_item(checkpoint, data, name, id_first=ids)
            if index in items:
                raise RecsysError(
                    f"{plain_value(name)!r} and {plain_value(items[index])!r} name the same item: "
                    "rate each item once"
                )
        except RecsysError as error:
            if places is None:
                raise
            raise RecsysError(f"{places[number]}: {error}") from None
        items[index] = name
        ratings.append(rating)
    known = torch.tensor(list(items))
    rated_as = [(known, torch.tensor(ratings, dtype=torch.float64))]
    model = rating_model(checkpoint.model)
    # A model that uses features starts the new user from what it rated (it has no side features:
    # no id of its own, which a row of the feature table could name).
    placed = new_user_starts(model, checkpoint.config, None, None, [known.numpy()], len(checkpoint.items))
    config = checkpoint.config
    folded = fold_in(
        model,
        rated_as,
        relevant=config.relevant,
        starts=placed,
        rating_unit=config.rating_unit,
        alpha=config.alpha,
        l2=config.l2,
    )
    predicted = folded.scores(torch.tensor([0]))[0].numpy()
    candidates = np.setdiff1d(np.arange(len(checkpoint.items)), known.numpy())
    best = candidates[np.argsort(-predicted[candidates], kind="stable")[:top]]
    return _titled(checkpoint, data, best, _score_column(checkpoint), predicted[best])


def _score_column(checkpoint: Checkpoint) -> str:
    """What a list's scores are: predicted ratings, or a ranking model's scores (no ratings)."""
    return "score" if rating_model(checkpoint.model).ranks else "predicted"
