"""docs/configuration.md is generated from the schema (hpcdgnn/config/reference.py) and cannot go stale.

Two checks, each shown to fail on a schema the file does not describe: a job class whose ``data:`` section
has one more key (the key is missing from the file; the file differs from ``render()``), and a schema module
with a ``*_OPTIONS`` dict naming a strategy that does not exist (its keys are listed under ``strategy``).
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass, field

from hpcdgnn.config import reference, schema
from hpcdgnn.config.schema import DataConfig, JobConfig, StrategyConfig
from tests.conftest import REPO

DOC = REPO / "docs" / "configuration.md"
REGENERATE = f"run `{reference.COMMAND}`"


@dataclass(frozen=True, kw_only=True)
class _DataWithExtra(DataConfig):
    extra_key: int = 3
    """A key the reference does not describe yet."""


@dataclass(frozen=True, kw_only=True)
class _JobWithExtra(JobConfig):
    data: _DataWithExtra = field(default_factory=_DataWithExtra)


@dataclass(frozen=True, kw_only=True)
class _HybridOptions(StrategyConfig):
    """``strategy: {name: hybrid}``: a strategy the schema does not have."""

    name: str = "hybrid"
    group_size: int = 4
    """Vertices per load group."""


def _schema_with(**attrs) -> types.SimpleNamespace:
    """The schema module's names, some replaced or added."""
    return types.SimpleNamespace(**{**vars(schema), **attrs})


def _every_key(module) -> list[str]:
    """Every dotted key the loader accepts, found without the generator's tables: each section's fields, the
    fields of every options class of a named section, nested dataclasses expanded."""

    def walk(prefix: str, cls: type) -> list[str]:
        out = []
        for f in dataclasses.fields(cls):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            out += walk(f"{prefix}.{f.name}", type(default)) if dataclasses.is_dataclass(default) else \
                [f"{prefix}.{f.name}"]
        return out

    options = reference.option_sets(module)
    hints = __import__("typing").get_type_hints(module.JobConfig)
    keys = []
    for f in dataclasses.fields(module.JobConfig):
        keys += walk(f.name, hints[f.name])
        for cls in options.get(f.name, {}).values():
            keys += walk(f.name, cls)
    return sorted(set(keys))


def _missing(text: str, module) -> list[str]:
    return [k for k in _every_key(module) if f"`{k}`" not in text]


def test_every_key_of_the_schema_is_in_the_reference():
    """(a) Each dotted key — sections, every strategy's and model's options, ``strategy.stale.*`` — is named."""
    text = DOC.read_text()
    assert _missing(text, schema) == [], f"docs/configuration.md lacks them: {REGENERATE}"
    keys = _every_key(schema)
    for key in ("data.path", "model.hidden", "strategy.blocks", "strategy.stale.theta", "strategy.fanouts",
                "strategy.minibatch", "comm.grad_buckets", "debug.profile_epoch"):
        assert key in keys
    assert set(keys) <= set(reference.keys())


def test_a_key_missing_from_the_reference_is_caught():
    """(a) fails when the schema gains a key the file does not have."""
    assert _missing(DOC.read_text(), _schema_with(JobConfig=_JobWithExtra)) == ["data.extra_key"]


def test_the_reference_is_what_the_generator_writes():
    """(b) The file equals ``render()``: an edited docstring, default or type shows up as a difference."""
    assert DOC.read_text() == reference.render(), f"docs/configuration.md is stale: {REGENERATE}"


def test_a_stale_reference_is_caught():
    """(b) fails when the schema changes: the rendering of a schema with one more key differs, and has it."""
    changed = reference.render(_schema_with(JobConfig=_JobWithExtra))
    assert changed != DOC.read_text()
    assert "| `data.extra_key` | int | `3` | A key the reference does not describe yet. |" in changed


def test_options_dicts_are_found_by_name_and_listed_under_their_section():
    """A module-level ``*_OPTIONS`` dict of dataclasses joins the section its prefix names."""
    module = _schema_with(STRATEGY_OPTIONS={"hybrid": _HybridOptions})
    assert reference.option_sets(module)["strategy"] == {"hybrid": _HybridOptions}
    text = reference.render(module)
    assert "### `strategy` options of `hybrid`" in text
    assert "| `strategy.group_size` | int | `4` | Vertices per load group. |" in text
    assert "`strategy.name` | one of `hybrid` |" in text
    assert "strategy.group_size" in reference.keys(module)


def test_docstrings_types_and_defaults():
    """Attribute docstrings come from the source (a subclass's over its base's); types read as a user's."""
    from hpcdgnn.config.schema import ChunkOptions, SnapshotOptions

    assert reference.field_docs(SnapshotOptions)["blocks"].startswith("Gradient-checkpoint blocks nb")
    assert reference.field_docs(ChunkOptions)["name"].startswith("Registered strategy")  # from the base class
    assert reference.type_text('Literal["on", "off"]') == "one of `on`, `off`"
    assert reference.type_text('float | Literal["auto"]') == "float or `auto`"
    assert reference.type_text("str | None") == "string or null"
    assert reference.type_text("tuple[int, ...]") == "list of int"
    assert reference.type_text("tuple[float, float, float]") == "list of 3 float"
    assert reference.default_text(()) == "`[]`" and reference.default_text(None) == "`null`"
    assert reference.default_text(True) == "`true`" and reference.default_text("") == '`""`'


def test_main_prints_the_reference(capsys):
    """``python -m hpcdgnn.config.reference > docs/configuration.md`` writes exactly the file."""
    reference.main()
    out = capsys.readouterr().out
    assert out == DOC.read_text()
    assert reference.COMMAND in out.splitlines()[2]
