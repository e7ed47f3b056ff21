"""A status line for a step that runs long without other output (splitting 25M ratings takes
seconds), written as the progress bars are: tqdm on stderr, cleared when the step ends."""

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from tqdm.auto import tqdm


@contextmanager
def status_line(first: str, shown: bool) -> Iterator[Callable[[str], None]]:
    """A line saying what is being done (`first`, "splitting 25,000,095 ratings"), which each call of
    what this yields replaces with the next step, gone at the end of the block; a warning meanwhile
    gets a line of its own. Nothing at all where not `shown` (progress off, or not the lead rank)."""
    with (
        tqdm(total=0, desc=first, bar_format="{desc}...", leave=False, disable=not shown) as line,
        warnings.catch_warnings() if shown else nullcontext(),
    ):
        if shown:
            show = warnings.showwarning

            def on_its_own_line(*args: Any, **kwargs: Any) -> None:
                with tqdm.external_write_mode():
                    show(*args, **kwargs)

            warnings.showwarning = on_its_own_line
        yield line.set_description_str
