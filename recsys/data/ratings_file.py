"""A user's ratings file: CSV, TSV or any one-character separator, with or without a header, plain or
gzip/bz2/xz/zstd-compressed, or Parquet; read with polars (chosen by measurement: docs/data.md).

The compression is told by the file's first bytes, the separator, header and columns from its first
lines (or given); then polars reads the whole file on every core, and each column moves into pandas
without a copy. A bad value is named by its line in the file.
"""

import codecs
import csv
import dataclasses
import io
import lzma
import os
import re
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

# polars' allocator (jemalloc) keeps freed pages for 10 s by default, so the chunks a column leaves
# behind as it moves into pandas would stay resident beside the finished table; returning them at
# once keeps the peak near one table (docs/data.md). Read when polars is first imported.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")
import polars as pl

from recsys.data.columns import (
    ALIASES,
    ITEM_ID_ALIASES,
    RATING_FIELDS,
    SEPARATORS,
    columns_to_read,
    find_table_columns,
    normalised,
)
from recsys.data.dataset import RatingsDataset, dataset_from_table
from recsys.data.ratings_table import Where, check_scale, data_name, row_of_frame
from recsys.errors import DataError

# The first bytes of the compressions and archives a data file arrives in: the codec that reads it
# (None for an archive, which holds files, not a table) and what it is called in a message.
PACKINGS: dict[bytes, tuple[str | None, str]] = {
    b"\x1f\x8b": ("gzip", "gzip-compressed"),
    b"BZh": ("bz2", "bzip2-compressed"),
    b"\xfd7zXZ\x00": ("xz", "xz-compressed"),
    b"\x28\xb5\x2f\xfd": ("zstd", "zstd-compressed"),
    b"PK\x03\x04": (None, "a zip archive"),
    b"PK\x05\x06": (None, "a zip archive"),  # an empty one
}
PARQUET_MAGIC = b"PAR1"
# What a separator of more than one character (MovieLens' "::"), which polars cannot split on, is
# turned into before polars reads the file: a control character text does not hold (a file that
# holds it is refused, its line named).
STAND_IN = "\x1f"
# The runs of spaces of a space-aligned table (TextLayout.aligned), and those at its lines' ends.
ALIGNING, ALIGNING_BYTES = re.compile(" +"), re.compile(b" +")
LINE_END_SPACES = re.compile(rb"(?m)^ +| +(?=\r?$)")
SNIFF_BYTES = 1 << 16
# A sample grows to at most this where its first bytes hold no whole line of the table.
MAX_SNIFF_BYTES = 1 << 26
SAMPLE_LINES = 50
# Rows polars looks at to choose a column's type; a value that does not fit later means a re-read as text.
INFER_ROWS = 10_000
# What polars reads from a path itself; other compressions (and Latin-1 text) are decoded here first.
POLARS_COMPRESSIONS = (None, "gzip", "zstd")
# Names that mark a first line as a header: any column name a table of ratings or items may have.
HEADER_WORDS = frozenset().union(*ALIASES.values(), ITEM_ID_ALIASES)
# How exports write a missing value: no column name, so a first line holding one is still a row.
MISSING_MARKERS = frozenset({"", "na", "n/a", "nan", "null", "none", "\\n"})
# A value that is a time and not a rating: a whole number of 9 digits or more (seconds since 1970 from
# 1973 on, or milliseconds), or a date written year first or last (2024-05-01, 01.05.2024 10:00).
TIME_LIKE = re.compile(r"\d{9,}|(\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{4})([ T].*)?")
# The line that starts each movie's ratings in Netflix Prize's files ("1:", then "user,rating,date" lines).
NETFLIX_MOVIE = re.compile(r"\d+:")
# Amazon's product ids (ASINs: "B000GKXY4S", or a book's ISBN-10) and its reviewer ids ("A2SUAM1J3GNN3B"):
# its headerless ratings files put the item first (item, user, rating, timestamp).
ASIN, AMAZON_REVIEWER = re.compile(r"B[0-9A-Z]{9}|\d{9}[\dX]"), re.compile(r"A[0-9A-Z]{11,27}")


@dataclass(frozen=True)
class TextLayout:
    """How a text table is laid out: its compression, encoding, separator and column names."""

    compression: str | None
    encoding: str
    sep: str
    header: bool
    names: list[str]  # from the header, else the 1-based positions "1", "2", ...
    # Blank lines and "#" comments (an export's preamble) before the first line of the table, which
    # polars is told to skip: it would take a blank first line for a one-column table.
    skip: int = 0
    # Columns with a value such as "0345391802" in the first lines: read as text, so ids keep their zeros.
    zero_led: frozenset[str] = frozenset()
    # The separator as the file spells it where it is more than one character (MovieLens' "::"): each
    # is read as `sep` (STAND_IN).
    joined: str | None = None
    # Columns every sampled value of which looks like a time (TIME_LIKE), each with its first value.
    times: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Columns every sampled value of which is a number.
    numbers: frozenset[str] = frozenset()
    # Columns lined up by runs of spaces (a printed DataFrame, `column -t`): each run is read as one
    # space, and spaces at a line's ends as none.
    aligned: bool = False
    # Columns every sampled value of which is spelled as an Amazon product id (ASIN), or reviewer id.
    asins: frozenset[str] = frozenset()
    reviewers: frozenset[str] = frozenset()
    # Columns most sampled values of which are no number, each with the first such value.
    words: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Columns empty on every sampled line.
    empty: frozenset[str] = frozenset()

    @property
    def sep_name(self) -> str:
        """The separator as a message names it: "tab", "comma", or as the file spells it."""
        return "runs of spaces" if self.aligned else SEPARATORS.get(self.sep, repr(self.joined or self.sep))


class SeparatorUnknown(DataError):
    """No separator splits a text file's first lines alike (a file of one column has none)."""


def load_ratings(
    path: Path | str,
    *,
    columns: Mapping[str, str] | None = None,
    sep: str | None = None,
    header: bool | None = None,
    rating_scale: tuple[float, float] | None = None,
    items: Path | str | None = None,
    name: str | None = None,
    implicit: bool | None = None,
) -> RatingsDataset:
    """Read a ratings file, and optionally an item table with titles, into a RatingsDataset.

    `columns` maps user, item, rating (and timestamp, or an event's weight) to column names, or to
    1-based positions in a file without a header; those not given are found by common names.
    `rating_scale` (low, high) is checked against every rating; by default it is read from the data.
    `implicit`: None reads a file without a rating column as interactions (views, plays, purchases),
    True reads any file so (its rating or weight column, if any, weighs each event), False requires
    ratings. Interactions sum the events of each user-item pair into one strength (see
    `RatingsDataset`).
    """
    path = Path(path)
    if sep is not None and len(sep) != 1:
        raise DataError(f"`sep` {sep!r}: the separator must be one character")
    check_scale(rating_scale, str(path))
    # Read before their paths are resolved for the run's record: a missing file, or a link that
    # leads nowhere, is then a DataError naming it.
    if _first_bytes(path, len(PARQUET_MAGIC)) == PARQUET_MAGIC:
        raw, n, where = _read_parquet(path, columns, implicit)
    else:
        raw, n, where = read_ratings_text(path, columns, sep, header, implicit=implicit)
    raw_items, items_where = read_item_file(Path(items)) if items is not None else (None, row_of_frame)
    options = {
        "columns": dict(columns) if columns else None,
        "sep": sep,
        "header": header,
        "implicit": implicit,  # None is left out: the file then decides again, as it did
    }
    origin: dict[str, Any] = {"ratings": str(path.resolve())}
    origin.update({key: value for key, value in options.items() if value is not None})
    if rating_scale is not None:
        origin["rating_scale"] = list(rating_scale)
    if items is not None:
        origin["items"] = str(Path(items).resolve())
    return dataset_from_table(
        name or data_name(path),
        raw,
        n,
        raw_items=raw_items,
        rating_scale_given=rating_scale,
        source=str(path),
        items_source=str(items),
        where=where,
        items_where=items_where,
        origin=origin,
    )


def _refuse_repeated_names(path: Path, names: Sequence[str], read: Collection[str]) -> None:
    """A column read by its name must be the only one of that name: polars would read the first."""
    twice = [name for k, name in enumerate(names) if name in read and name in names[:k]]
    if twice:
        raise DataError(f"{path}: column {twice[0]!r} appears more than once")


def read_item_file(path: Path) -> tuple[pd.DataFrame, Where]:
    """An item table file as text columns (the ids are typed later, like the ratings' ids), and how a
    row of it is named: its line in a text file."""
    if _first_bytes(path, len(PARQUET_MAGIC)) == PARQUET_MAGIC:
        frame, where = _read_parquet_columns(path, None), row_of_frame
    else:
        try:
            layout = sniff(path, None, None, None)
        except SeparatorUnknown:  # `sep` names the ratings file's alone, not this one's
            tried = ", ".join(SEPARATORS.values())
            raise SeparatorUnknown(
                f"{path}: cannot tell the separator of this table (tried {tried}); save it with tabs or "
                "commas between its fields, and fields that hold one in quotes"
            ) from None
        _refuse_repeated_names(path, layout.names, layout.names)  # every column is read, each by its name
        frame, where = _read_text(path, layout, layout.names, as_text=True), _LineFinder(path, layout)
    return pd.DataFrame(_as_pandas(frame)), where


def _first_bytes(path: Path, n: int) -> bytes:
    if not path.is_file():
        if path.is_dir():
            raise DataError(f"{path}: is a folder; name the file in it")
        if path.exists():  # polars and the sniffer each read the file from its start
            raise DataError(f"{path}: is not a regular file (a pipe or a device); save it to a file first")
        if path.is_symlink():
            raise DataError(f"{path}: a link that leads to no file (to a missing one, or round in a loop)")
        raise DataError(f"{path}: file not found")
    try:
        with path.open("rb") as file:
            return file.read(n)
    except OSError as error:
        raise DataError(f"{path}: cannot read ({error.strerror})") from None


def packing(start: bytes) -> tuple[str | None, str] | None:
    """How a file starting with `start` is packed (its codec, and its name in a message), if it is."""
    return next((packed for magic, packed in PACKINGS.items() if start.startswith(magic)), None)


@contextmanager
def _opened(path: Path, compression: str | None) -> Iterator[IO[bytes]]:
    """The file's bytes, decompressed."""
    if compression == "xz":  # pyarrow has no xz codec
        with lzma.open(path) as file:
            yield file  # type: ignore[misc]
    else:
        with pa.input_stream(str(path), compression=compression) as stream:
            yield stream  # type: ignore[misc]


def sniff(path: Path, sep: str | None, header: bool | None, columns: Mapping[str, str] | None) -> TextLayout:
    """The layout of a text table, from its first lines; `sep` and `header` where given (`sep` of more
    than one character only from this package's own readers, such as MovieLens' "::")."""
    codec, packed = packing(_first_bytes(path, 8)) or (None, None)
    if packed is not None and codec is None:
        raise DataError(f"{path}: is {packed}; unpack it first")
    compression = codec
    size = SNIFF_BYTES
    sample = _sample(path, compression, size, sep)
    while not (sample.lines or sample.whole or size >= MAX_SNIFF_BYTES):  # a wide header or preamble
        size *= 4
        sample = _sample(path, compression, size, sep)
    encoding, skip, joined, sep, lines = sample.encoding, sample.skip, sample.joined, sample.sep, sample.lines
    if not lines:
        commented = any(line.startswith("#") for line in sample.physical)
        problem = "no table in it, only # comment lines" if commented else "file is empty"
        if not sample.whole:
            problem = f"no whole line of a table in its first {MAX_SNIFF_BYTES >> 20} MB"
        raise DataError(f"{path}: {problem}")
    if lines[0].lstrip().startswith(("{", "[")):  # Yelp's and Amazon's reviews: an object per line
        parquet = f"{path.name.split('.')[0]}.parquet"
        raise DataError(
            f'{path}: is JSON, which is not read; convert it to Parquet first, e.g. with python -c "import '
            f"polars as pl; pl.scan_ndjson('{path.name}').sink_parquet('{parquet}')\" (one object per line; "
            f"pl.read_json for one array), and give {parquet}"
        )
    if NETFLIX_MOVIE.fullmatch(lines[0].strip()):
        raise DataError(
            f"{path}: is in Netflix Prize's layout (a line such as {lines[0].strip()!r} before each movie's "
            "user,rating,date lines), which is not read; write one user,movie,rating,date line per rating "
            'first, e.g. with awk -F, \'/:\\r?$/ {m = $1 + 0; next} {print $1 "," m "," $2 "," $3}\' '
            f"{path.name} > ratings.csv"
        )
    if sep is not None and len(_fields(lines[0], sep)) == 1:
        first_line = lines[0] if joined is None else lines[0].replace(sep, joined)
        shown = joined or sep
        raise DataError(f"{path}: `sep` {shown!r} does not split its first line ({first_line[:60]!r})")
    sep = sep or _consistent_separator(lines)
    aligned = sep is None and _is_aligned(lines)
    if aligned:
        sep, lines = " ", [_unaligned(line) for line in lines]
    sep = sep or _separator(lines, path)
    first = [_unquoted(field) for field in _fields(lines[0], sep)]
    if header is None:
        header = _has_header(first, [_fields(line, sep) for line in lines[1:]], columns)
    names = first if header else [str(position) for position in range(1, len(first) + 1)]
    rows = [_fields(line, sep) for line in lines[1 if header else 0 :]]
    zero_led = frozenset(
        name for j, name in enumerate(names) if any(_zero_led(row[j]) for row in rows if j < len(row))
    )
    times = {
        name: _unquoted(rows[0][names.index(name)]) for name in _all_like(names, rows, TIME_LIKE.fullmatch)
    }
    return TextLayout(
        compression,
        encoding,
        sep,
        header,
        names,
        skip,
        zero_led,
        joined,
        times,
        _all_like(names, rows, _is_number),
        aligned,
        _all_like(names, rows, ASIN.fullmatch),
        _all_like(names, rows, AMAZON_REVIEWER.fullmatch),
        _words(names, rows),
        _all_like(names, rows, lambda value: not value),
    )


def _words(names: list[str], rows: list[list[str]]) -> dict[str, str]:
    """The columns most sampled values of which are no number (names, not one bad rating), each with
    the first such value."""
    words = {}
    for j, name in enumerate(names):
        text = [_unquoted(row[j]) for row in rows if j < len(row) and not _is_number(row[j])]
        if 2 * len(text) > len(rows):
            words[name] = text[0]
    return words


def _all_like(names: list[str], rows: list[list[str]], test: Callable[[str], object]) -> frozenset[str]:
    """The columns every sampled value of which (unquoted) passes `test`."""
    return frozenset(
        name
        for j, name in enumerate(names)
        if rows and all(j < len(row) and test(_unquoted(row[j])) for row in rows)
    )


class _Sample(NamedTuple):
    """The first bytes of a text table, decoded."""

    encoding: str
    skip: int  # the # and blank lines before its table
    whole: bool  # whether the bytes are the whole file
    joined: str | None  # the multi-character separator stood in for, else None
    sep: str | None
    physical: list[str]  # its lines as they are
    lines: list[str]  # its first records past the skipped lines, a last one cut short left out


def _warn_if_partly_utf8(path: Path, head: bytes, not_utf8: int) -> None:
    """Warn where a file read as Latin-1 for the byte at `not_utf8` holds UTF-8 letters elsewhere in
    `head`: one line saved in another encoding, whose neighbours' letters Latin-1 then misspells
    ("josé" as "josÃ©"), so that their ids no longer match what the user types."""
    if any(ord(letter) > 127 and letter != "\ufffd" for letter in head.decode("utf-8", "replace")):
        line = head.count(b"\n", 0, not_utf8) + 1
        warnings.warn(
            f"{path}: read as Latin-1, since line {line} is not UTF-8, but other lines hold UTF-8 letters, "
            "which Latin-1 misspells (é as Ã©); save the whole file as UTF-8",
            stacklevel=2,
        )


def _sample(path: Path, compression: str | None, size: int, sep: str | None) -> _Sample:
    """The first `size` bytes of a text table."""
    try:
        with _opened(path, compression) as file:
            head = file.read(size)
            whole = len(head) < size or not file.read(1)
    except (OSError, EOFError, lzma.LZMAError, pa.ArrowException) as error:
        raise DataError(f"{path}: cannot decompress it as {compression} ({error})") from None
    encoding = "utf-8"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):  # Excel's "Unicode text"
        encoding = "utf-16"
        text = codecs.getincrementaldecoder(encoding)().decode(head)
    elif b"\0" in head:
        raise DataError(f"{path}: is not a text file (it holds NUL bytes)")
    else:
        try:
            text = codecs.getincrementaldecoder(encoding)().decode(head)
        except UnicodeDecodeError as error:  # Latin-1 files (Book-Crossing) are common; any byte decodes
            encoding, text = "latin-1", head.decode("latin-1")
            _warn_if_partly_utf8(path, head, error.start)
    text = text.removeprefix("\ufeff")  # a byte-order mark (Excel's "CSV UTF-8"); polars drops it too
    if "\r" in text and "\n" not in text:
        raise DataError(
            f"{path}: its lines end in a lone carriage return (classic Mac OS); save it with \\n or "
            "\\r\\n line ends"
        )
    joined = None
    if sep is not None and len(sep) > 1:
        joined, sep = sep, STAND_IN
        if STAND_IN in text:
            _refuse_stand_in(path, text.count("\n", 0, text.index(STAND_IN)) + 1)
        text = text.replace(joined, sep)
    physical = text.split("\n")  # polars, like the line numbers, ends lines at "\n" only
    skip = 0
    for line in physical:
        if line.strip() and not line.startswith("#"):
            break
        skip += 1
    lines = "\n".join(physical[skip:]).splitlines()
    if not whole:
        lines = lines[:-1]  # the last one may be cut short
    lines = [record for _, record in _records(enumerate(lines)) if record.strip()][:SAMPLE_LINES]
    return _Sample(encoding, skip, whole, joined, sep, physical, lines)


def _refuse_stand_in(path: Path, line: int) -> None:
    """Refuse a file whose fields are joined by a separator of more than one character and that holds
    STAND_IN itself (first on `line`), which would be read as a separator."""
    raise DataError(f"{path}: line {line} holds the control character {STAND_IN!r}; remove it")


def _records(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Numbered lines joined where a quoted field holds a line break (a title, a review): each
    record with the number of the line it starts on. A quote still open at the end (a sample cut
    short) drops its record."""
    start, pending = 0, None
    for number, line in lines:
        if pending is None:
            start, pending = number, line
        else:
            pending = f"{pending}\n{line}"
        if pending.count('"') % 2 == 0:  # a doubled "" inside quotes changes nothing
            yield start, pending
            pending = None


def _fields(line: str, sep: str) -> list[str]:
    """A line's fields, a separator inside double quotes not splitting one ("Dune, Part 1")."""
    if '"' not in line:  # the common case, and far quicker than the csv module
        return line.split(sep)
    try:
        return next(csv.reader([line], delimiter=sep), [])
    except csv.Error:  # a field over the csv module's size limit: count it the plain way
        return line.split(sep)


def _zero_led(field: str) -> bool:
    """Whether a field is digits with a leading zero ("007", "0345391802"), or a minus before a zero
    ("-0", which a number reads as 0): an id, not a number."""
    digits = _unquoted(field)
    return (len(digits) > 1 and digits[0] == "0" and digits.isdigit()) or (
        digits.startswith("-0") and digits[1:].isdigit()
    )


def _consistent_separator(lines: list[str]) -> str | None:
    """The first separator that splits every sample line into the same number (2 or more) of fields."""
    for sep in SEPARATORS:
        counts = {len(_fields(line, sep)) for line in lines}
        if len(counts) == 1 and counts.pop() >= 2:
            return sep
    return None


def _unaligned(line: str) -> str:
    """A line of a space-aligned table as it is read: each run of spaces one, none at its ends."""
    return ALIGNING.sub(" ", line.strip(" "))


def _width_of_all_but_one(widths: list[int]) -> int:
    """The number of fields of every sample line, or of all but one of three or more (the reader then
    names that line); 0 where none is that common."""
    usual = max(set(widths), key=widths.count)
    return usual if widths.count(usual) >= len(widths) - (1 if len(widths) >= 3 else 0) else 0


def _is_aligned(lines: list[str]) -> bool:
    """Whether sample lines that no one separator splits alike are columns lined up by runs of
    spaces: runs of spaces split them (into 2 or more fields), and no quote or tab makes a space data."""
    if any('"' in line or "\t" in line for line in lines):
        return False
    return _width_of_all_but_one([len(_unaligned(line).split(" ")) for line in lines]) >= 2


def _separator(lines: list[str], path: Path) -> str:
    """The separator of sample lines that no one separator splits alike: the first that splits the
    first line into 3 or more fields, else (two columns, a line short) the first that splits all lines
    but one into two; the reader then names the odd line."""
    for sep in SEPARATORS:
        if len(_fields(lines[0], sep)) >= 3:
            return sep
    for sep in SEPARATORS:
        widths = [len(_fields(line, sep)) for line in lines]
        if widths[0] == 2 and _width_of_all_but_one(widths) == 2:
            return sep
    if "::" in lines[0]:
        raise DataError(
            f"{path}: fields are separated by '::' (MovieLens .dat); use `dataset` ml-1m or ml-10m, "
            "or convert it to one-character separators"
        )
    tried = ", ".join(SEPARATORS.values())
    raise SeparatorUnknown(f"{path}: cannot tell the separator (tried {tried}); name it with `sep`")


def _unquoted(field: str) -> str:
    field = field.strip()
    return field[1:-1] if len(field) >= 2 and field[0] == field[-1] and field[0] in "\"'" else field


def _is_number(text: str) -> bool:
    try:
        float(_unquoted(text))
    except ValueError:
        return False
    return True


def _has_header(first: list[str], rest: list[list[str]], columns: Mapping[str, str] | None) -> bool:
    """Whether the first line names the columns: it holds a common column name or a name given in
    `columns` (not a position such as "1": a first line of ids and ratings holds those), or a field
    that is text where every later line has a number (the rating column). A missing value (NULL, NA,
    an empty field) names nothing: that line is a row, and the missing value is then refused by line."""
    if any(normalised(field) in HEADER_WORDS for field in first):
        return True
    if columns and any(column in first and not column.isdigit() for column in columns.values()):
        return True
    return any(
        not _is_number(field)
        and _unquoted(field).strip().lower() not in MISSING_MARKERS
        and bool(rest)
        and all(j < len(row) and _is_number(row[j]) for row in rest)
        for j, field in enumerate(first)
    )


def _text_columns(
    layout: TextLayout, columns: Mapping[str, str] | None, source: str, implicit: bool | None
) -> dict[str, str]:
    """Which column holds each field: given, found by name, or by position in a file without header;
    settled for ratings or interactions by `columns_to_read`."""
    if layout.header or columns:
        found = find_table_columns(layout.names, columns, source, implicit=implicit)
        numbers = [name for name in layout.names if name in layout.numbers and name not in layout.times]
        _warn_unread_numbers(found, numbers, source, stacklevel=4)
        return found
    # Beyond four columns, those empty on every sampled line are no data: Jester's jester_ratings.dat
    # puts two tabs between its fields (user, item, rating), so every other column is empty.
    filled = layout.names
    if len(filled) > 4:
        filled = [name for name in layout.names if name not in layout.empty]
    if len(filled) in (3, 4):
        found = dict(zip(RATING_FIELDS, filled, strict=False))
        if filled[0] in layout.asins and filled[1] in layout.reviewers - layout.asins:
            by_position = ",".join(f"{field}={column}" for field, column in found.items())
            found["user"], found["item"] = filled[1], filled[0]
            warnings.warn(
                f"{source}: no header, and its first column holds Amazon's product ids (ASINs), its second "
                f"its reviewer ids: read as {', '.join(sorted(found, key=found.__getitem__))}, as Amazon's "
                f"ratings files are; if not, name them with `columns` {by_position}",
                stacklevel=4,
            )
        _refuse_times_as_ratings(layout, found["rating"], source, implicit)
    elif len(layout.names) == 2:
        found = {"user": "1", "item": "2"}  # interactions, unless `implicit` is False
    else:
        raise DataError(
            f"{source}: {len(layout.names)} columns and no header; say which is which by position, "
            "e.g. `columns` user=1,item=2,rating=3[,timestamp=4]"
        )
    return columns_to_read(found, layout.names, source, implicit=implicit)


def _warn_unread_numbers(found: Mapping[str, str], numbers: list[str], source: str, stacklevel: int) -> None:
    """Warn where a table read as interactions counts its events while a column of numbers that it
    reads for nothing may be what each event weighs (a column called "value" or "amount"); `numbers`
    are its columns of numbers other than times. Ids ("session_id") are passed over."""
    if "rating" in found or "weight" in found:
        return
    unread = [name for name in numbers if name not in found.values() and not normalised(name).endswith("id")]
    if unread:
        warnings.warn(
            f"{source}: read as interactions, each row one event; its column {unread[0]!r} holds numbers "
            f"but is not read: if it is each event's weight, name it with `columns` weight={unread[0]} (or "
            f"rating={unread[0]} if it holds ratings)",
            stacklevel=stacklevel + 1,
        )


def _refuse_times_as_ratings(layout: TextLayout, column: str, source: str, implicit: bool | None) -> None:
    """Refuse a headerless file whose column taken by position for the ratings holds times: an export
    of events (user, item, time) would otherwise train on its times as ratings, or weights; or text
    (Last.fm's user, artist id, artist name, plays), which the reader would refuse without saying
    where the numbers are."""
    what = "event weights" if implicit else "ratings"
    if column in layout.words and layout.names[-1] in layout.numbers:
        last = layout.names[-1]
        raise DataError(
            f"{source}: no header, so its third column would be read as {what}, but it holds text "
            f"({layout.words[column]!r}) and column {last} numbers; say which column is which, e.g. "
            f"`columns` user=1,item=2,rating={last} (or weight={last}, for counts such as plays)"
        )
    if column not in layout.times:
        return
    # With a fourth column, the ratings are likelier there: naming the third the ratings would read
    # the times as ratings again.
    named = (
        "user=1,item=2,timestamp=3,rating=4"
        if len(layout.names) == 4
        else "user=1,item=2,timestamp=3 (interactions) or user=1,item=2,rating=3"
    )
    raise DataError(
        f"{source}: no header, so its third column would be read as {what}, but it holds times "
        f"({layout.times[column]!r} on line {layout.skip + 1}); say which column is which, e.g. `columns` "
        f"{named}"
    )


def read_ratings_text(
    path: Path,
    columns: Mapping[str, str] | None,
    sep: str | None,
    header: bool | None,
    *,
    fields: int | None = None,
    integer_ids: bool = False,
    implicit: bool | None = False,
) -> tuple[dict[str, pd.Series | None], int, Where]:
    """The rating fields' columns of a text file (`columns`, `sep` and `header` where given, else
    found), the row count, and how a row is named: its line in the file. `fields`: the number of
    fields every line must have (a fixed layout's, such as ml-100k's u.data), else any.
    `integer_ids`: the ids and timestamps are integers (MovieLens'), read as such without inferring
    the columns' types from the first rows (a value that is not one means a re-read as text).
    `implicit` as for `load_ratings`, but ratings by default: MovieLens' files hold ratings."""
    layout = sniff(path, sep, header, columns)
    if fields is not None and len(layout.names) != fields:  # later lines are checked as they are read
        raise DataError(
            f"{path}: line {layout.skip + 1} has {len(layout.names)} fields; expected {fields}, "
            f"separated by {layout.sep_name}"
        )
    found = _text_columns(layout, columns, str(path), implicit)
    _refuse_repeated_names(path, layout.names, found.values())
    wanted = list(dict.fromkeys(found.values()))
    integers = [found[field] for field in ("user", "item", "timestamp") if integer_ids and field in found]
    values = found.get("rating", found.get("weight"))  # the ratings, or the events' weights
    try:  # ratings straight into float32: the table's type, and half the memory of float64
        frame = _read_text(path, layout, wanted, as_text=False, float32=values, int64=integers)
    except _ConversionError:  # a column's type changes past the rows polars inferred it from
        frame = _read_text(path, layout, wanted, as_text=True)
    else:
        if any(frame[found[field]].dtype.is_float() for field in ("user", "item") if field in found):
            # Ids polars took for numbers with decimals ("3.10", "5.0", "1e3"): read as spelled, or
            # "3.10" and "3.1" would be one id.
            frame = _read_text(path, layout, wanted, as_text=True)
    return _raw_columns(frame, found, _LineFinder(path, layout))


def _raw_columns(
    frame: pl.DataFrame, found: Mapping[str, str], where: Where
) -> tuple[dict[str, pd.Series | None], int, Where]:
    """The rating fields' columns as pandas Series, the row count, and how a row is named."""
    n = frame.height
    series = _as_pandas(frame, codes={found[field] for field in ("user", "item") if field in found})
    raw: dict[str, pd.Series | None] = {field: series[column] for field, column in found.items()}
    raw.setdefault("timestamp", None)
    return raw, n, where


def _as_pandas(frame: pl.DataFrame, codes: Collection[str] = ()) -> dict[str, pd.Series]:
    """Each column as a pandas Series, moved one at a time: a numeric column without gaps is made
    contiguous and shared with numpy, not copied, and text stays in Arrow's buffers, so the table is
    never held twice. Text columns named in `codes` (ids) become codes into their distinct values."""
    series = {}
    for name in list(frame.columns):
        column = frame.drop_in_place(name)
        if column.dtype in (pl.Int128, pl.UInt128):  # 20-digit integers, past numpy's int64: ids as text
            column = column.cast(pl.String)
        if column.dtype.is_nested():  # a Parquet list or struct column: numpy would make it 2-D
            series[name] = pd.Series(column.to_list(), dtype=object)
        elif column.dtype == pl.String and name in codes:
            series[name] = _dictionary_encoded(column)
        elif column.dtype == pl.String:  # through Arrow: numpy would make a Python string of every value
            series[name] = pd.Series(pd.array(column.to_arrow(), dtype="str"))
        else:
            series[name] = pd.Series(column.rechunk().to_numpy(), copy=False)
    return series


def _dictionary_encoded(column: pl.Series) -> pd.Series:
    """A text column as a Categorical, its distinct values in order of first appearance (a gap coded
    -1), encoded by Arrow from polars' own buffers: ids are held once each, never once per row
    (recsys.data.id_columns)."""
    encoded = pc.dictionary_encode(column.rechunk().to_arrow(compat_level=pl.CompatLevel.newest()))
    distinct = pd.Index(pd.array(encoded.dictionary, dtype="str"))
    codes = encoded.indices.fill_null(-1).to_numpy()
    return pd.Series(pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(distinct)))


class _ConversionError(Exception):
    """polars met a value that does not fit the type it inferred from the first rows."""


def _polars_source(path: Path, layout: TextLayout) -> str | io.BytesIO:
    """The path where polars can read the file itself, else its text decompressed, as UTF-8, and a
    separator of more than one character turned into one."""
    if (
        layout.compression in POLARS_COMPRESSIONS
        and layout.encoding == "utf-8"
        and layout.joined is None
        and not layout.aligned
    ):
        return str(path)
    with _opened(path, layout.compression) as file:
        data = file.read()
    if layout.encoding != "utf-8":
        data = data.decode(layout.encoding).encode("utf-8")
    if layout.joined is not None:
        stand_in = layout.sep.encode()
        if (index := data.find(stand_in)) >= 0:
            _refuse_stand_in(path, data.count(b"\n", 0, index) + 1)
        data = data.replace(layout.joined.encode(), stand_in)
    if layout.aligned:
        data = ALIGNING_BYTES.sub(b" ", LINE_END_SPACES.sub(b"", data))
    return io.BytesIO(data)


def _read_text(
    path: Path,
    layout: TextLayout,
    wanted: list[str],
    *,
    as_text: bool,
    float32: str | None = None,
    int64: Iterable[str] = (),
) -> pl.DataFrame:
    """polars' CSV reader over the `wanted` columns (all as text where `as_text`; column `float32` as
    float32, those of `int64` as int64), lines of nothing but separators dropped; every failure one
    line naming the file (and the line)."""
    positions = sorted(layout.names.index(name) for name in wanted)
    polars_names = layout.names if layout.header else _headerless_names(len(layout.names))
    types: dict[str, Any] = {}
    if not as_text:
        types = {polars_names[layout.names.index(name)]: pl.String for name in layout.zero_led & set(wanted)}
        if float32 is not None and float32 not in layout.zero_led:
            types[polars_names[layout.names.index(float32)]] = pl.Float32
        for name in set(int64) - layout.zero_led:
            types[polars_names[layout.names.index(name)]] = pl.Int64
    try:
        frame = pl.read_csv(
            _polars_source(path, layout),
            has_header=layout.header,
            columns=positions,
            separator=layout.sep,
            skip_lines=layout.skip,
            # Where every wanted column has its type, inferring them (10,000 rows) would cost more
            # than reading a small file such as ml-100k's.
            infer_schema=not as_text and len(types) < len(wanted),
            infer_schema_length=INFER_ROWS,
            schema_overrides=types or None,
            raise_if_empty=False,
        )
    except pl.exceptions.ComputeError as error:
        message = str(error).strip().splitlines()[0]
        if "could not parse" in message and not as_text:
            raise _ConversionError from None
        if "invalid utf-8" in message and (number := _LineFinder(path, layout).first_not_utf8()) is not None:
            raise DataError(
                f"{path}: line {number} is not UTF-8 text, though the file's first "
                f"{SNIFF_BYTES // 1024} KB are; save the whole file as UTF-8"
            ) from None
        if "more fields" in message:
            line = _LineFinder(path, layout).first_with_more_fields(len(layout.names))
            if line is not None:
                raise DataError(
                    f"{path}: line {line[0]} has {line[1]} fields; expected {len(layout.names)}, "
                    f"separated by {layout.sep_name}"
                ) from None
        _refuse_unclosed_quote(path, layout)
        if ("malformed" in message.lower() or "could not parse" in message) and (
            stray := _LineFinder(path, layout).first_stray_quote()
        ):
            raise DataError(
                f'{path}: line {stray[0]} has a quote (") {stray[1]}; quote the whole field, doubling each '
                'quote inside ("12"" vinyl", """Weird Al"" Yankovic"), or remove it'
            ) from None
        raise DataError(f"{path}: cannot parse ({_printable(message[:200])})") from None
    except (OSError, EOFError, lzma.LZMAError, pa.ArrowException, pl.exceptions.PolarsError) as error:
        raise DataError(f"{path}: cannot read it ({_first_line(error)})") from None
    except BaseException as error:
        # polars' Rust code can panic on a malformed table (a lone unclosed quote after the header):
        # pyo3 raises that as a PanicException, a BaseException no `except Exception` catches.
        if type(error).__name__ != "PanicException":
            raise
        _refuse_unclosed_quote(path, layout)
        raise DataError(
            f"{path}: cannot parse it (the CSV reader failed: {_first_line(error)[:120]}); look "
            "for an unclosed quote"
        ) from None
    frame.columns = [layout.names[position] for position in positions]
    blank = frame.select(pl.all_horizontal(pl.all().is_null())).to_series()
    if blank.any():  # a blank line: polars makes it a row of gaps
        frame = frame.filter(~blank)
    return frame


def _refuse_unclosed_quote(path: Path, layout: TextLayout) -> None:
    """Where the reader failed on a quote opened and never closed (it swallows the rest of the file),
    the line that opens it."""
    if (line := _LineFinder(path, layout).first_unclosed_quote()) is not None:
        raise DataError(f'{path}: line {line} opens a quote (") that is never closed')


def _first_line(error: BaseException) -> str:
    """A library's error message cut to one short line."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    return _printable(lines[0][:200])


def _printable(text: str) -> str:
    """`text` with each unprintable character (a tab, a control code from the file) escaped, so a
    library's message that quotes the file stays one printable line."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _headerless_names(count: int) -> list[str]:
    """The names polars gives the columns of a file without a header (its scheme changed between
    versions: column_1... in 1.x, column_0... in 2.x), read off a one-line table."""
    return pl.read_csv(io.BytesIO(b"," * (count - 1) + b"\n"), has_header=False).columns


class _LineFinder:
    """A data row's line number in the file (blank lines and the header counted), found by reading
    the file again: done only for an error message."""

    def __init__(self, path: Path, layout: TextLayout) -> None:
        self.path, self.layout = path, layout

    def _lines(self) -> Iterator[tuple[int, str]]:
        with _opened(self.path, self.layout.compression) as file:
            text = codecs.iterdecode(iter(lambda: file.read(1 << 20), b""), self.layout.encoding, "replace")
            number, pending = 0, ""
            for chunk in text:
                *complete, pending = (pending + chunk).split("\n")
                for line in complete:
                    number += 1
                    yield number, self._split_as_read(line.rstrip("\r"))
            if pending:
                yield number + 1, self._split_as_read(pending.rstrip("\r"))

    def _split_as_read(self, line: str) -> str:
        """The line as polars reads it: a separator of more than one character turned into one."""
        if self.layout.aligned:
            return _unaligned(line)
        return line if self.layout.joined is None else line.replace(self.layout.joined, self.layout.sep)

    def __call__(self, row: int) -> str:
        # polars makes a record of every line after the header (a quoted field may hold line breaks);
        # those of nothing but separators (blank lines) are dropped from the table, so not counted.
        data_rows = (
            number
            for number, record in _records(self._lines())
            if number > self.layout.skip and record.strip(self.layout.sep)
        )
        skip = row + (1 if self.layout.header else 0)
        for index, number in enumerate(data_rows):
            if index == skip:
                return f"line {number}"
        return row_of_frame(row)

    def first_not_utf8(self) -> int | None:
        """The number of the first line that is not UTF-8: read as the file's UTF-8, its bad bytes
        come out as the replacement character."""
        return next((number for number, line in self._lines() if "\ufffd" in line), None)

    def first_unclosed_quote(self) -> int | None:
        """The line of a quote still open at the end of the file, as `_records` pairs them."""
        start, quoted = None, False
        for number, line in self._lines():
            if line.count('"') % 2:
                start, quoted = (number, True) if not quoted else (start, False)
        return start if quoted else None

    def first_stray_quote(self) -> tuple[int, str] | None:
        """The first line with a quote inside a field that does not start with one (12" vinyl), or
        one that closes a quoted field before its end ("Weird Al" Yankovic, in Last.fm's tab-separated
        files): a CSV reader takes the one to open a quoted field, the other to end the field; and
        which it was."""
        sep = re.escape(self.layout.sep)
        # A quoted field ("" inside it a quote) whose closing quote is followed by more than spaces.
        closed_early = re.compile(rf'(?:^|{sep})\s*"(?:[^"]|"")*+"(?!\s*(?:{sep}|$))')
        for number, line in self._lines():
            if any(
                '"' in field.lstrip()[1:]
                for field in line.split(self.layout.sep)
                if field.lstrip()[:1] != '"'
            ):
                return number, "inside a field that does not start with one"
            if closed_early.search(line):
                return number, "closing a quoted field before its end"
        return None

    def first_with_more_fields(self, expected: int) -> tuple[int, int] | None:
        """The first line with more than `expected` fields, and their count."""
        for number, line in self._lines():
            if (count := len(_fields(line, self.layout.sep))) > expected:
                return number, count
        return None


def _read_parquet_columns(path: Path, wanted: list[str] | None) -> pl.DataFrame:
    try:
        return pl.read_parquet(path, columns=wanted)
    except (OSError, pl.exceptions.PolarsError) as error:
        raise DataError(f"{path}: cannot read it as Parquet ({_first_line(error)})") from None


def _read_parquet(
    path: Path, columns: Mapping[str, str] | None, implicit: bool | None
) -> tuple[dict[str, pd.Series | None], int, Where]:
    try:
        schema = pl.read_parquet_schema(path)
    except (OSError, pl.exceptions.PolarsError) as error:
        raise DataError(f"{path}: cannot read it as Parquet ({_first_line(error)})") from None
    names = list(schema)
    found = find_table_columns(names, columns, str(path), implicit=implicit)
    _warn_unread_numbers(
        found, [name for name in names if schema[name].is_numeric()], str(path), stacklevel=3
    )
    for field, column in found.items():
        if schema[column].is_nested():  # a list or struct per row: no id, rating or time
            raise DataError(
                f"{path}: the {field} column {column!r} holds {schema[column]} values, not single values"
            )
    return _raw_columns(_read_parquet_columns(path, list(dict.fromkeys(found.values()))), found, row_of_frame)
