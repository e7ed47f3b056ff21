"""docs/library.md's examples on the committed tiny data run as written (their training shortened)."""

import re
from pathlib import Path
from typing import Any

import pytest

import recsys

LIBRARY = Path(__file__).resolve().parents[1] / "docs" / "library.md"
EXAMPLES = [
    block
    for block in re.findall(r"```python\n(.*?)```", LIBRARY.read_text(), re.S)
    if 'load_dataset("tiny")' in block
]


def test_the_tiny_examples_are_found() -> None:
    assert len(EXAMPLES) == 2 and "rows_for_new" in EXAMPLES[1]


@pytest.mark.parametrize("example", EXAMPLES, ids=["ials", "bfm"])
def test_an_example_runs_as_written(example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bfm's example passes the codings training kept to rows_for_new (it passed the feature table,
    which rows_for_new stopped taking when the model began keeping its codings)."""
    config_for = recsys.config_for

    def short(model: str, **settings: Any) -> recsys.RunConfig:
        return config_for(model, **{**settings, "epochs": 2, "members": 1})

    monkeypatch.setattr(recsys, "config_for", short, raising=False)
    monkeypatch.chdir(tmp_path)  # the bfm example writes users.csv
    exec(compile(example, str(LIBRARY), "exec"), {})
