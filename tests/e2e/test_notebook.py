"""The notebook bridge on the real node (issue 21): examples/notebook/distributed.ipynb executed
by nbclient in a real Jupyter kernel — it trains the JAX example through the client with a
progress bar, then runs `%%trainer` cells on the three ranks of an interactive Trainer and gets
each rank's output back under its name, the ranks' variables kept between cells."""

from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from tests.harness import REPO, Cluster

NOTEBOOK = REPO / "examples" / "notebook" / "distributed.ipynb"


def text_of(cell: Any) -> str:
    """What a cell printed (stdout and stderr)."""
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def test_a_notebook_trains_and_runs_cells_on_every_rank(
    cluster: Cluster, real_namespace: str, jax_image: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TRAINER_NAMESPACE", real_namespace)
    monkeypatch.setenv("TRAINER_IMAGE", jax_image)
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    notebook = nbformat.read(NOTEBOOK, as_version=4)  # type: ignore[no-untyped-call]
    NotebookClient(
        notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    code = [c for c in notebook.cells if c.cell_type == "code"]
    train, ranks, hello, times_ten = code[1], code[2], code[3], code[4]

    assert "nb-spirals Succeeded 100" in text_of(train), text_of(train)
    widgets = [o for o in train.outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widgets, train.outputs  # the progress bar, drawn as a Jupyter widget
    models = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"].values()
    # tqdm's widget shows spaces as figure spaces (U+2007)
    texts = [m["state"].get("value", "").replace("\u2007", " ") for m in models if m["model_name"] == "HTMLModel"]
    assert any("nb-spirals" in t for t in texts), texts
    assert any("Succeeded · epoch 3/3" in t for t in texts), texts  # the bar's last look: every epoch done

    assert "nb-ranks Running" in text_of(ranks), text_of(ranks)
    for rank in range(3):
        assert f"[worker-{rank}] hello from process {rank} of 3" in text_of(hello), text_of(hello)
        assert f"[worker-{rank}] {rank * 10}" in text_of(times_ten), text_of(times_ten)  # `rank` was kept
