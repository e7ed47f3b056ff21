"""A ratings table's id columns: integers, or text held as a pandas Categorical, each distinct id once
and a small code per rating, so that 25M ratings of UUIDs are never 25M Python strings; and the views
of them the splits and id maps take.
"""

from typing import TypeAlias

import numpy as np
import pandas as pd

# Raw ids as `IdMap` takes them: an array, or a table's text ids as codes into their distinct values.
RawIds: TypeAlias = np.ndarray | pd.Categorical


def distinct_text(column: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """Each value's code into the distinct values of `column` as text, spaces around them dropped
    (ids in order of first appearance): every value is spelled once, not once per row."""
    if isinstance(column.dtype, pd.CategoricalDtype):  # by its codes: each category is spelled once
        codes, occurring = pd.factorize(column.cat.codes)
        spelled = column.cat.categories.take(occurring)
    else:  # spelled first, since str() is what tells 1 from 1.0 among Python objects
        codes, spelled = pd.factorize(column.astype(str))
    merged, distinct = pd.factorize(spelled.astype(str).str.strip())  # " a" and "a" are one id
    if len(distinct) < len(spelled):
        codes = merged[codes]
    return codes, distinct


def id_values(column: pd.Series) -> RawIds:
    """A table's id column as `IdMap` takes it: text ids as their codes, not a string per row."""
    return column.array if isinstance(column.dtype, pd.CategoricalDtype) else column.to_numpy()


def id_codes(column: pd.Series) -> np.ndarray:
    """int64 values equal only for equal ids, to group rows by: the ids themselves where they are
    integers, else their codes."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(np.int64)
    return column.to_numpy()


def distinct_ids(column: pd.Series) -> np.ndarray:
    """The distinct ids of a table's id column, in order of first appearance."""
    return np.asarray(column.unique())


def id_dtype(column: pd.Series) -> np.dtype | pd.api.extensions.ExtensionDtype:
    """The type of a table's ids themselves: their text's where they are held as codes."""
    dtype = column.dtype
    return dtype.categories.dtype if isinstance(dtype, pd.CategoricalDtype) else dtype
