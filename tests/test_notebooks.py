"""Every notebook under notebooks/ executes top to bottom (nbclient, kernel python3 from
the venv's ipykernel), run from its own folder as Jupyter runs it.  A cell that raises
fails the test with the cell's error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# per cell; each notebook takes well under a minute on a quiet CPU
CELL_TIMEOUT_S = 240


def test_there_are_three_notebooks():
    assert len(NOTEBOOKS) >= 3, [p.name for p in NOTEBOOKS]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path: Path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert errors == []
    # every notebook draws something with the library's figures
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert images, f"{path.name} produced no figure"


def _outputs_text(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))


@pytest.mark.slow
@pytest.mark.parametrize("names, failing", [(["tgmm_amax_normalised", "tgmm_f32"], True),
                                            (["tgmm_f32"], False)], ids=["failing", "passing"])
def test_notebook_02_investigates_a_users_own_gate_document(tmp_path, names, failing):
    """Notebook 02's first cell is the user's: a gate document written elsewhere by
    `fp8check gate` and the bare functions it checked (here numpy tgmm kernels) are read,
    drilled into and rerun in process with the gate's verdict; a run where everything
    passed shows its case closest to the bound."""
    path = ROOT / "notebooks" / "02_investigating_a_failing_kernel.ipynb"
    kernels = ROOT / "tests" / "seeded_bugs" / "kernels.py"
    targets = [f"{kernels}:{name}" for name in names]
    doc = tmp_path / "mine.json"
    argv = [sys.executable, "-m", "fp8check", "gate", "--contract", "tgmm", "--framework",
            "numpy", "--suite", "smoke", "--no-progress", "--json", str(doc)]
    for t in targets:
        argv += ["--kernel", t]
    assert subprocess.run(argv, cwd=tmp_path, capture_output=True).returncode == int(failing)
    nb = nbformat.read(path, as_version=4)
    (params,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    params.source = (f"GATE_JSON = {str(doc)!r}\nKERNELS = {targets!r}\nCONTRACT = 'tgmm'\n"
                     f"FRAMEWORK = 'numpy'\nSUITE = 'smoke'")
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = _outputs_text(nb)
    assert "$ fp8check gate" not in text  # the user's document is read, no gate is run
    focus = text.split("repro:")[0].splitlines()
    assert any(line.startswith(f"{targets[0]} ") and ("FAILED" if failing else "PASSED") in line
               for line in focus)
    assert "(the same verdict)" in text
    # the reading of the focus case (the first one shown) counts its elements over the bound
    reading = [line for line in text.splitlines() if line.startswith("  ulp_max_vs_exact ")]
    assert len(reading) == len(targets)
    assert reading[0].endswith("elements over the bound")
    assert (": 0 of " in reading[0]) == (not failing)
