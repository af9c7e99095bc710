"""A PyG TGN user's names and reading: ``model.hidden`` listed under TGN's options in the reference (its
embedding width, whose default 16 is not TGN's 100), and PyG's/TGL's option names answered with hpcdgnn's."""

from __future__ import annotations

import pytest

from hpcdgnn.config import reference
from hpcdgnn.config.load import load_job_dict
from hpcdgnn.errors import ConfigError


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


@pytest.mark.parametrize("section, key, advice", [
    ("model", "embedding_dim", "did you mean 'hidden' (PyG's TGN embedding_dim)?"),
    ("model", "att_head", "did you mean 'heads' (TGL's att_head)?"),
    ("task", "batch_size", "did you mean 'batch_events' (PyG's and TGL's batch_size)?"),
])
def test_other_libraries_option_names_are_answered_with_ours(section, key, advice):
    """``model.embedding_dim`` (PyG's TGN) was refused with the whole list of TGN's options: difflib finds no
    name close to it."""
    job = {"data": {"path": "x"}, "model": {"name": "tgn"}, "task": {"name": "temporal_link_prediction"}}
    job[section][key] = 100
    with pytest.raises(ConfigError) as e:
        load_job_dict(job, "job", check_paths=False)
    assert str(e.value).endswith(f"{section}.{key}: unknown option of {section} "
                                 f"'{job[section]['name']}'; {advice}"), e.value
