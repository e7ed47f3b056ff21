"""Which column of a user's table holds what: found by common names, or named by the user."""

from collections.abc import Mapping, Sequence

from recsys.errors import DataError

# The one-character separators a text table is tried with, in order, by name.
SEPARATORS = {"\t": "tab", ",": "comma", ";": "semicolon", "|": "pipe", " ": "space"}
# A number written with a decimal comma, as spreadsheets in many locales export it ("3,5").
DECIMAL_COMMA = r"[-+]?\d+,\d+"

RATING_FIELDS = ("user", "item", "rating", "timestamp")
# A table of ratings or of interactions: "weight" is each event's weight (a play count), found where
# the table is read as interactions and has no rating column.
TABLE_FIELDS = (*RATING_FIELDS, "weight")
ITEM_FIELDS = ("item", "title", "genres")


# Common names, compared lower-cased without "_", "-", "." or spaces: MovieLens, Book-Crossing,
# goodreads, Amazon reviews, Jester, Yelp, Steam and the names people give their own exports.
def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


ALIASES: dict[str, frozenset[str]] = {
    "user": _words(
        "user userid users uid username reader readerid customer customerid client clientid member "
        "memberid student studentid learner learnerid reviewer reviewerid rater raterid viewer "
        "viewerid listener listenerid buyer buyerid shopper shopperid visitor visitorid"
    ),
    "item": _words(
        "item itemid items iid movie movieid film filmid book bookid goodreadsbookid isbn asin "
        "product productid parentasin sku course courseid track trackid song songid artist artistid "
        "joke jokeid game gameid app appid anime animeid recipe recipeid business businessid restaurant "
        "restaurantid hotel hotelid place placeid venue venueid video videoid article articleid newsid"
    ),
    "rating": _words("rating ratings score stars star grade bookrating overall userrating"),
    "timestamp": _words(
        "timestamp time date datetime ts unixtime unixreviewtime ratedat createdat created when "
        "eventtime playedat viewedat clickedat boughtat purchasedat"
    ),
    "weight": _words(
        "weight weights count counts plays playcount listens listencount clicks views quantity qty"
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


HOW_TO_NAME = "name them with `columns` user=...,item=...,rating=..."


def columns_to_read(
    found: Mapping[str, str],
    names: Sequence[str],
    source: str,
    *,
    implicit: bool | None,
    how_to_name: str = HOW_TO_NAME,
) -> dict[str, str]:
    """The found columns to read, refusing a table without user or item columns, or without a rating
    column where `implicit` is False.

    A table is read as interactions (user-item events) where `implicit` says, else where it has no
    rating column: its columns then hold no "rating" but the events' weight, if any, as "weight" (a
    weight column, else the rating column); a table of ratings keeps no "weight". So whether the
    columns hold a "rating" tells the two apart from here on.
    """
    for field in ("user", "item"):
        if field not in found:
            raise DataError(
                f"{source}: cannot tell which column holds the {field} ids (columns: {shown(names)}); "
                f"{how_to_name}"
            )
    columns = dict(found)
    if implicit is False and "rating" not in columns:
        raise DataError(
            f"{source}: no rating column (columns: {shown(names)}), and `implicit` is off; interactions "
            "without ratings (views, plays, purchases) train the ranking models bpr and ials, read with "
            f"`implicit` unset or on; if a column does hold ratings, {how_to_name}"
        )
    if implicit is False or (implicit is None and "rating" in columns):
        columns.pop("weight", None)
    elif "rating" in columns:
        rating = columns.pop("rating")
        columns.setdefault("weight", rating)
    return columns


def find_table_columns(
    names: Sequence[str],
    given: Mapping[str, str] | None,
    source: str,
    *,
    implicit: bool | None,
    how_to_name: str = HOW_TO_NAME,
) -> dict[str, str]:
    """The columns of a table of ratings or interactions, `given` or found by common names, as
    `columns_to_read` settles them."""
    found = find_columns(names, TABLE_FIELDS, given, source)
    if implicit is None and "rating" not in found and "weight" not in (given or {}):
        # A rating column named for another field: reading the table as interactions would surprise.
        taken = next(
            (f for f, column in (given or {}).items() if normalised(column) in ALIASES["rating"]), None
        )
        if taken is not None:
            raise DataError(
                f"{source}: column {found[taken]!r} is named for the {taken}s, so no column holds ratings; "
                "name the ratings' column too, or set `implicit` to read the table as interactions"
            )
    return columns_to_read(found, names, source, implicit=implicit, how_to_name=how_to_name)
