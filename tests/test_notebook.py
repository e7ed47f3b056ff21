"""The exploration notebook runs top to bottom (on the tiny dataset) and is committed without outputs."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code_cells
    assert all(not cell.outputs and cell.execution_count is None for cell in code_cells)


@pytest.mark.slow  # a Jupyter kernel that trains
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RECSYS_NOTEBOOK_DATASET", "tiny")
    monkeypatch.setenv("RECSYS_NOTEBOOK_EPOCHS", "3")
    notebook = nbformat.read(path, as_version=4)
    # A failing cell raises CellExecutionError naming the cell and its traceback.
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.get("output_type") == "error"]
    assert any("test RMSE" in output.get("text", "") for output in outputs)
