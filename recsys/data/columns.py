"""Which column of a user's table holds what: found by common names, or named by the user."""

from collections.abc import Mapping, Sequence

from recsys.errors import DataError

RATING_FIELDS = ("user", "item", "rating", "timestamp")
ITEM_FIELDS = ("item", "title", "genres")


# Common names, compared lower-cased without "_", "-", "." or spaces: MovieLens, Book-Crossing,
# goodreads, Amazon reviews, Jester and the names people give their own exports.
def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


ALIASES: dict[str, frozenset[str]] = {
    "user": _words(
        "user userid users uid username reader readerid customer customerid client clientid member "
        "memberid student studentid learner learnerid reviewer reviewerid rater raterid viewer"
    ),
    "item": _words(
        "item itemid items iid movie movieid film filmid book bookid goodreadsbookid isbn asin "
        "product productid sku course courseid track trackid song songid artist artistid joke jokeid "
        "game gameid anime animeid recipe recipeid"
    ),
    "rating": _words("rating ratings score stars star grade bookrating overall userrating"),
    "timestamp": _words(
        "timestamp time date datetime ts unixtime unixreviewtime ratedat createdat created when"
    ),
    "title": _words("title name movietitle booktitle itemname productname"),
    "genres": _words("genres genre tags tag categories category"),
}
# The id column of an item table may also be called just "id".
ITEM_ID_ALIASES = ALIASES["item"] | {"id"}


def normalised(name: str) -> str:
    """`name` as the aliases are spelled: lower case, without separators."""
    return "".join(ch for ch in name.lower() if ch not in "_-. ")


def find_columns(
    names: Sequence[str],
    fields: Sequence[str],
    given: Mapping[str, str] | None,
    source: str,
    *,
    aliases: Mapping[str, frozenset[str]] = ALIASES,
) -> dict[str, str]:
    """The column of `names` holding each of `fields` that can be found: the `given` ones by name,
    the others by their common names (each column used once, the first match wins)."""
    given = dict(given or {})
    for field, column in given.items():
        if field not in fields:  # a misspelt key would otherwise be ignored, and its column guessed
            raise DataError(
                f"{source}: no field {field!r} to name a column for (fields: {', '.join(fields)})"
            )
        if column not in names:
            # In any case, as the common names are matched, where that names one column only.
            same = [name for name in names if name.casefold() == column.casefold()]
            if len(same) != 1:
                plural = field if field.endswith("s") else f"{field}s"  # the genres
                raise DataError(f"{source}: no column {column!r} for the {plural} (columns: {shown(names)})")
            given[field] = same[0]
    for column in set(given.values()):
        named_for = [field for field, named in given.items() if named == column]
        if len(named_for) > 1:
            both = " and the ".join(named_for)
            raise DataError(f"{source}: column {column!r} is named for both the {both}")
    found = dict(given)
    for field in fields:
        if field in found:
            continue
        taken = set(found.values())
        match = next((n for n in names if n not in taken and normalised(n) in aliases[field]), None)
        if match is not None:
            found[field] = match
    return found


def shown(names: Sequence[str], limit: int = 8) -> str:
    """Column names for a message: quoted, at most `limit` of them."""
    listed = ", ".join(repr(str(name)) for name in names[:limit])
    return listed + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def require_rating_columns(
    found: Mapping[str, str],
    names: Sequence[str],
    source: str,
    how_to_name: str = "name them with `columns` user=...,item=...,rating=...",
) -> None:
    """Refuse a table without user, item or rating columns; one without ratings is implicit feedback."""
    for field in ("user", "item"):
        if field not in found:
            raise DataError(
                f"{source}: cannot tell which column holds the {field} ids (columns: {shown(names)}); "
                f"{how_to_name}"
            )
    if "rating" not in found:
        raise DataError(
            f"{source}: no rating column (columns: {shown(names)}); recsys learns explicit ratings, "
            "and interactions without a rating (clicks, plays, purchases) are implicit feedback it does "
            f"not model; if a column does hold ratings, {how_to_name}"
        )
