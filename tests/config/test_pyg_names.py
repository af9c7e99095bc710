"""A PyG TGN user's reading: ``model.hidden`` listed under TGN's options in the reference (its embedding width,
whose default 16 is not TGN's 100)."""

from __future__ import annotations

from hpcdgnn.config import reference


def _block(markdown: str, heading: str) -> str:
    """The text of ``markdown``'s section under ``heading`` up to the next heading."""
    return markdown.split(heading, 1)[1].split("\n#", 1)[0]


def test_tgn_s_reference_lists_its_embedding_width():
    """configuration.md's TGN table listed memory_dim and time_dim (default 100) but not model.hidden, the
    embedding width it also takes, from the common section (default 16): a reader took TGN's widths to be 100."""
    tgn = _block(reference.render(), "### `model` options of `tgn`")
    row = next(line for line in tgn.splitlines() if line.startswith("| `model.hidden` "))
    assert "| `16` |" in row and "embedding_dim" in row and "100" in row, row
    tlp = _block(reference.render(), "### `task` options of `temporal_link_prediction`")
    assert "split=" in next(line for line in tlp.splitlines() if line.startswith("| `task.split` "))
    cdgcn = _block(reference.render(), "### `model` options of `cdgcn`")
    assert "`model.hidden`" not in cdgcn  # a class that does not declare it again: the section's row says it
