"""YAML -> frozen dataclasses, strictly: unknown keys, wrong types and bad values are one-line errors
``FILE: section.key: problem; fix``. Nothing is coerced except an int where a float is expected."""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from hpcdgnn.config.schema import READING_RESOLVED, RENAMED_KEYS, JobConfig, ModelConfig, StrategyConfig, TaskConfig
from hpcdgnn.errors import ConfigError, cannot_create, not_a_directory, short_repr

__all__ = ["load_job", "apply_overrides", "blame_override", "job_to_dict", "override_of", "validate_job"]


_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _did_you_mean(key: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(key, choices, n=1)
    return f"did you mean '{close[0]}'?" if close else f"choose from {', '.join(sorted(choices))}"


def _describe(tp: Any) -> str:
    """A schema type in words for an error line: ``float | Literal['auto']`` -> ``a number or auto``."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " or ".join(map(str, typing.get_args(tp)))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    words = {int: "an integer", float: "a number", str: "a string", bool: "true or false", type(None): "null"}
    if origin is tuple:  # a fixed length says how many: "a list or null, got list [...]" left it out
        args = typing.get_args(tp)
        return "a list" if len(args) == 2 and args[1] is Ellipsis else f"a list of {len(args)} values"
    return words.get(tp, str(tp))


def _check_value(value: Any, tp: Any, where: str) -> Any:
    """Return ``value`` if it matches type ``tp`` exactly, else raise ``ValueError``."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        # YAML 1.1 reads a bare off/on/no/yes as a boolean: give it back the word the schema offers
        if isinstance(value, bool) and ("off" in choices or "on" in choices):
            value = "on" if value else "off"
        if value not in choices or type(value) is not type(choices[0]):
            raise ValueError(f"{short_repr(value)} is not allowed; choose from {', '.join(map(str, choices))}")
        return value
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:  # tuple[X, ...]: a list of any length
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"expected a list, got {type(value).__name__} {short_repr(value)}")
            return tuple(_check_value(v, args[0], where) for v in value)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ValueError(f"expected a list of {len(args)} values, got {short_repr(value)}")
        return tuple(_check_value(v, a, where) for v, a in zip(value, args, strict=True))
    if origin is dict:  # dict[str, dict]: names to raw option mappings, checked by the code that reads them
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, dict | None)
                                                  for k, v in value.items()):
            raise ValueError(f"expected a mapping of names to mappings, got {short_repr(value)}")
        return {k: dict(v or {}) for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):
        for a in typing.get_args(tp):
            try:
                return _check_value(value, a, where)
            except ValueError:
                pass
        raise ValueError(f"expected {_describe(tp)}, got {type(value).__name__} {short_repr(value)}")
    if tp is type(None):
        if value is not None:
            raise ValueError(f"expected null, got {short_repr(value)}")
        return None
    if tp is bool:
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {type(value).__name__} {short_repr(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {type(value).__name__} {short_repr(value)}")
        if not -(2**63) <= value < 2**63:  # what torch, numpy and MPI take
            raise ValueError(f"{value} is out of range (a 64-bit integer)")
        return value
    if tp is float:
        if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
            value = float(value)  # YAML 1.1 reads 1e8 and 1e-3 (no dot) as strings; users write them
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a number, got {type(value).__name__} {short_repr(value)}")
        if not math.isfinite(value):  # .nan passes every `< 0` check, .inf every `> 0` one
            raise ValueError(f"expected a finite number, got {short_repr(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {type(value).__name__} {short_repr(value)}")
        return value
    raise TypeError(f"{where}: unsupported config type {tp}")  # a bug in schema.py, not user error


#: the sections whose options class is chosen by their ``name`` (the regimes name the classes)
_NAMED = {ModelConfig: "model", TaskConfig: "task", StrategyConfig: "strategy"}


#: model names a PyTorch Geometric Temporal user or a paper's reader gives that are hpcdgnn's under another
#: name, by :func:`_spelled` form: PyG Temporal's ``TGCN`` is Zhao et al.'s cell (hpcdgnn's ``tgcn`` runs the
#: convolutions before the GRU), Seo et al.'s GCRN the M1 form
_MODEL_ALIASES = {"tgcn": ("tgcn_cell", "PyG Temporal's TGCN, Zhao et al.'s cell; 'tgcn' runs the GCN before the "
                           "GRU"),
                  "gcrn": ("gcrn_m1", "Seo et al.'s GCRN-M1; 'gconv_lstm' is GCRN-M2, PyG Temporal's GConvLSTM")}


def _spelled(name: str) -> str:
    """``name`` without case, ``-`` and ``_``: ``EvolveGCNH``, ``evolvegcn-h`` and ``evolvegcn_h`` alike."""
    return re.sub(r"[^0-9a-z]", "", name.lower())


def _model_named(name: Any, known: list[str]) -> str:
    """The advice after an unknown ``model.name``: the registered name it spells otherwise (PyG Temporal's class
    name, a paper's), else the choices."""
    choices = f"choose from {', '.join(known)}"
    if not isinstance(name, str):
        return choices
    alias = _MODEL_ALIASES.get(_spelled(name))
    if alias is not None and alias[0] in known:
        return f"did you mean '{alias[0]}' ({alias[1]})? {choices}"
    same = [n for n in known if _spelled(n) == _spelled(name)]
    return f"did you mean '{same[0]}'? {choices}" if same else choices


def _options(base: type, raw: Any, file: str) -> type:
    """The options class for the ``model:``/``task:``/``strategy:`` section's ``name`` (``base.name`` when absent)."""
    from hpcdgnn.regimes import names, options_class  # the regimes import the models, which import this package

    section = _NAMED[base]
    name = raw.get("name", base.name) if isinstance(raw, dict) else base.name
    if not isinstance(name, str) or name not in names(section):  # a list or mapping is not hashable
        advice = _model_named(name, names(section)) if section == "model" else \
            f"choose from {', '.join(names(section))}"
        raise ConfigError(f"{file}: {section}.name: unknown {short_repr(name)}; {advice}")
    return options_class(section, name)


#: option names of PyTorch Geometric's TGN example and TGL's configurations that hpcdgnn spells otherwise (too far
#: apart for a close-name match: ``embedding_dim`` is nearer ``memory_dim`` than ``hidden``): the key and whose
#: name it is
_OPTION_ALIASES = {"embedding_dim": ("hidden", "PyG's TGN"), "att_head": ("heads", "TGL's"),
                   "dim_time": ("time_dim", "TGL's"), "batch_size": ("batch_events", "PyG's and TGL's")}


def _not_an_option(file: str, section: str, key: str, name: str, fields: list[str], path: str | None = None) -> str:
    """The error for ``section.KEY`` (at ``path``, default ``section``) that ``name`` lacks: which models/strategies
    take it, or the key another library's name (:data:`_OPTION_ALIASES`) or a close name stands for."""
    from hpcdgnn.regimes import names, options_class

    where = path or section
    accept = sorted(n for n in names(section)  # type: ignore[arg-type]
                    if key in {f.name for f in dataclasses.fields(options_class(section, n))})  # type: ignore[arg-type]
    if accept:
        return (f"{file}: {where}.{key}: not an option of {section} {short_repr(name)} (it would be ignored); "
                f"{section} {', '.join(accept)} {'accepts' if len(accept) == 1 else 'accept'} it")
    alias, whose = _OPTION_ALIASES.get(key, ("", ""))
    advice = f"did you mean '{alias}' ({whose} {key})?" if alias in fields else _did_you_mean(key, fields)
    return f"{file}: {where}.{key}: unknown option of {section} {short_repr(name)}; {advice}"


def build_options(section: str, name: str, raw: Any, path: str, file: str) -> Any:
    """``section`` ``name``'s typed options from the mapping ``raw`` found at ``path`` (strict, as in a job file).

    Raises:
        ConfigError: an unknown name or key, or a wrong value (one line naming ``file`` and the key).
    """
    from hpcdgnn.regimes import names, options_class

    if name not in names(section):  # type: ignore[arg-type]
        raise ConfigError(f"{file}: {path}: unknown {section} {short_repr(name)}; choose from "
                          f"{', '.join(names(section))}")  # type: ignore[arg-type]
    return _build(options_class(section, name), {**(raw or {}), "name": name}, path, file)  # type: ignore[arg-type]


def _build(cls: type, raw: Any, path: str, file: str) -> Any:
    """Instantiate dataclass ``cls`` from mapping ``raw`` (``path`` is its dotted prefix)."""
    name = path or "top level"
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: {name}: expected a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            dotted = f"{path}.{key}" if path else str(key)
            if dotted in RENAMED_KEYS:
                raise ConfigError(f"{file}: {dotted}: renamed to {RENAMED_KEYS[dotted]} (hpcdgnn 0.2); move it there")
            section = next((s for base, s in _NAMED.items() if issubclass(cls, base)), None)
            if section is not None:
                raise ConfigError(_not_an_option(file, section, str(key), raw.get("name", cls.name), list(fields),
                                                 path or None))
            raise ConfigError(f"{file}: {dotted}: unknown key; {_did_you_mean(str(key), list(fields))}")
    kwargs = {}
    for key, value in raw.items():
        dotted = f"{path}.{key}" if path else key
        tp = hints[key]
        if tp in _NAMED:
            tp = _options(tp, value, file)
        if dataclasses.is_dataclass(tp):
            kwargs[key] = _build(tp, value, dotted, file)
            continue
        try:
            kwargs[key] = _check_value(value, tp, dotted)
        except ValueError as e:
            raise ConfigError(f"{file}: {dotted}: {e}") from None
    try:
        return cls(**kwargs)
    except ValueError as e:
        raise ConfigError(f"{file}: {path}.{e}" if path else f"{file}: {e}") from None


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error (PyYAML keeps the last silently)."""


def _no_duplicate_keys(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *anchor``: its keys may be overridden here
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            again = key in seen
        except TypeError:  # unhashable: construct_mapping says so in its own words
            continue
        if again:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} given twice (lines {seen[key] + 1} and {key_node.start_mark.line + 1})",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


def _given_once(overrides: list[str]) -> None:
    """Refuse a key that two ``--set`` items give, or a section given whole after a key in it: applied in order, the
    later would silently win, and a job script that sets a key twice (a default line, then the user's) usually
    means the other value; a section after its key may mean to replace the key or to keep it. A section given whole
    and then a key in it (``strategy={name: hybrid} strategy.groups=2``) is one reading only, the key on top of the
    section, and is taken.

    Args:
        overrides: the ``KEY=VALUE`` items, in the order given.
    """
    seen: list[tuple[str, str]] = []
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:  # apply_overrides says what a KEY=VALUE item is
            continue
        given = f"{key}={text.strip()}"
        for before, was in seen:
            if before == key or before.startswith(key + "."):
                raise ConfigError(f"--set {before}: given twice ({was[:60]}, then {given[:60]}); give each key once"
                                  + ("" if before == key else " (a section given whole first, then keys in it, "
                                     "takes those keys on top of it)"))
            if key.startswith(before + "."):
                _on_top_of(before, was, key, given)
        seen.append((key, given))


def _on_top_of(section: str, was: str, key: str, given: str) -> None:
    """Refuse ``key`` after its ``section`` given whole where that gave no mapping (the key then has nowhere to go;
    not the job file's fault) or gave the key itself (given twice)."""
    try:
        node = yaml.safe_load(was.partition("=")[2])
    except yaml.YAMLError:
        return  # apply_overrides names the section's bad YAML
    if not isinstance(node, dict):
        raise ConfigError(f"--set {section}: expected a mapping (a section, as {key} after it reads), got "
                          f"{type(node).__name__}")
    for part in key[len(section) + 1:].split("."):
        if not isinstance(node, dict) or part not in node:
            return
        node = node[part]
    raise ConfigError(f"--set {key}: given twice ({was[:60]}, then {given[:60]}); give each key once")


def apply_overrides(raw: dict, overrides: list[str], file: str) -> dict:
    """Apply ``--set a.b=value`` overrides (value parsed as YAML) to the raw mapping, in order; a key given twice is
    refused (:func:`_given_once`)."""
    _given_once(overrides)
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()  # "train.epochs = 2" (a script's string): the key is train.epochs, not "train.epochs "
        if not sep or not key:
            raise ConfigError(f"--set {item}: expected KEY=VALUE, e.g. train.epochs=2")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"--set {key}: value {short_repr(text)} is not valid YAML: {' '.join(str(e).split())}"
                              ) from None
        parts = key.split(".")
        node = raw
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {key}: '{p}' is not a section (in {file})")
            node = nxt
        node[parts[-1]] = value
    return raw


def validate_job(job: JobConfig, file: str, path_from_file: bool = True) -> None:
    """Checks that need the outside world: the dataset directory exists (data-dependent rules: the plan).

    A missing one is named with the working directory a relative path is read from, and, where ``data.path`` is
    the file's own, the file's header when it shows how to prepare the dataset (:func:`_prepares`).

    Args:
        job: the loaded job.
        file: the job file's path, as messages name it.
        path_from_file: False where ``--set`` gave ``data.path`` (the header prepares the file's dataset).
    """
    if not job.data.path:
        raise ConfigError(f"{file}: data.path: missing; set it to a directory written by 'hpcdgnn prepare'")
    if not Path(job.data.path).is_dir():
        where = "" if Path(job.data.path).is_absolute() else f" (relative to the working directory {os.getcwd()})"
        prepare = "" if Path(job.data.path).exists() or not path_from_file or not _prepares(file) else \
            f"; prepare it first: see the header of {file}"
        raise ConfigError(f"{file}: data.path: dataset directory '{job.data.path}' {not_a_directory(job.data.path)}"
                          f"{where}{prepare}")
    check_tensorboard(job, file)


def _prepares(file: str) -> bool:
    """Whether the job file's header comment (its leading ``#`` lines, as in ``jobs/examples/``) shows the
    ``prepare`` (or ``generate``) command that writes its dataset: a missing dataset then points there.

    Args:
        file: the job file's path (a Python API job's name, no file, has no header).
    """
    try:
        with open(file, encoding="utf-8") as f:
            for line in f:
                if not line.lstrip().startswith("#"):
                    return False
                if re.search(r"\bhpcdgnn (prepare|generate)\b", line):
                    return True
    except (OSError, UnicodeDecodeError):
        pass
    return False


def check_tensorboard(job: JobConfig, file: str, own: str = "") -> None:
    """``output.tensorboard``: the package there, the directory makeable and without another run's event files
    (a resume checks it too, before it rewrites the run's files; ``own``: the directory the resumed run wrote,
    whose curves it continues)."""
    if job.output.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(f"{file}: output.tensorboard: needs the tensorboard package (pip install tensorboard, or "
                          "hpcdgnn[tensorboard]); or leave the key out and export later (python -m hpcdgnn export)")
    why = job.output.tensorboard and cannot_create(job.output.tensorboard)
    if why:
        raise ConfigError(f"{file}: output.tensorboard: {job.output.tensorboard}: {why}; give a directory for the "
                          "event files")
    logdir = Path(job.output.tensorboard)
    if not job.output.tensorboard or not logdir.is_dir() or own and Path(own).resolve() == logdir.resolve():
        return
    from hpcdgnn.metrics.export import files_with_curves

    held = files_with_curves(logdir)
    if held:  # TensorBoard would draw both runs' scalars at the same steps as one curve
        raise ConfigError(f"{file}: output.tensorboard: {job.output.tensorboard} holds another run's curves "
                          f"({held[0].name}{' …' if len(held) > 1 else ''}); give each run its own directory, or move "
                          "those event files away (a resumed run adds to its own)")


def _older_resolved(raw: dict) -> dict:
    """An older ``config.resolved.yaml`` listed every model's keys at their defaults: drop those its model lacks;
    and it may hold keys that were ignored where they sit and are refused there now (``stale.theta`` with
    ``stale.mode: off``, ``fusion_memory_mb`` with ``fusion: off``, a task's ``fixed_by_data`` options at the
    snapshot tasks' defaults: an event stream's ``split``): drop them too, so that the run resumes."""
    from hpcdgnn.regimes import names, options_class

    model = raw.get("model")
    if isinstance(model, dict) and model.get("name") in names("model"):
        fields = {f.name for f in dataclasses.fields(options_class("model", model["name"]))}
        raw["model"] = {k: v for k, v in model.items() if k in fields}
    task = raw.get("task")
    if isinstance(task, dict) and task.get("name") in names("task"):
        fixed = options_class("task", task["name"]).fixed_by_data
        written = {k: _yaml_value(getattr(TaskConfig(), k)) for k in fixed}
        raw["task"] = {k: v for k, v in task.items() if k not in written or v != written[k]}
    strategy = raw.get("strategy")
    if isinstance(strategy, dict):
        stale = strategy.get("stale")
        if isinstance(stale, dict) and stale.get("mode", "off") == "off":
            stale.pop("theta", None)
        if strategy.get("fusion") == "off":
            strategy.pop("fusion_memory_mb", None)
    return raw


def _yaml_value(value: Any) -> Any:
    """A default as YAML reads it back (a tuple as a list)."""
    return [_yaml_value(v) for v in value] if isinstance(value, tuple) else value


def load_job(path: str | Path, overrides: list[str] | None = None, check_paths: bool = True,
             resolved: bool = False) -> JobConfig:
    """Read a job YAML, apply overrides, and return the validated :class:`JobConfig`; ``check_paths``: also
    the dataset directory; ``resolved``: the file is a run's ``config.resolved.yaml``, maybe from an older hpcdgnn."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{file}: cannot read job file: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{file}: not UTF-8 text (byte {e.start}); a job file is YAML in UTF-8") from None
    try:
        raw = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as e:
        raise ConfigError(f"{file}: not valid YAML: {' '.join(str(e).split())}") from None
    return load_job_dict(raw, file, overrides, check_paths, resolved)


def _regime_defaults(raw: dict) -> dict:
    """``task.name`` and ``strategy.name`` left out of a job whose model's regime does not have their defaults
    (``link_prediction``, ``snapshot``) are that regime's first (``model: {name: tgn}``: ``temporal_link_prediction``
    and ``memory``), as a model of one regime trains in no other; a name the job gives is kept (and refused by
    :func:`~hpcdgnn.regimes.job_regime` if it is another regime's)."""
    from hpcdgnn.regimes import names, regime_of

    model = raw.get("model")
    name = model.get("name", ModelConfig.name) if isinstance(model, dict) else ModelConfig.name if model is None \
        else None
    if not isinstance(name, str) or name not in names("model"):
        return raw
    regime = regime_of("model", name)
    out = dict(raw)
    for section, base in (("task", TaskConfig), ("strategy", StrategyConfig)):
        given = raw.get(section)
        if base.name in regime.names(section) or not (given is None or isinstance(given, dict)):
            continue
        if given is None or "name" not in given:
            out[section] = {**(given or {}), "name": regime.names(section)[0]}
    return out


def load_job_dict(raw: Any, file: str, overrides: list[str] | None = None, check_paths: bool = True,
                  resolved: bool = False) -> JobConfig:
    """:func:`load_job` of a job already read (``file`` names it in messages)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: top level: expected a mapping of sections (data, model, task, ...)")
    if resolved:
        raw = _older_resolved(raw)
    raw = _regime_defaults(apply_overrides(raw, overrides or [], file))
    reading = READING_RESOLVED.set(resolved)
    try:
        job = _build(JobConfig, raw, "", file)
        if check_paths:
            validate_job(job, file, override_of("data.path", overrides or []) is None)
    except ConfigError as e:  # a key --set gave (data.path included) is the override's fault, not the file's
        raise ConfigError(blame_override(str(e), file, overrides or [])) from None
    finally:
        READING_RESOLVED.reset(reading)
    return job


def override_of(key: str, overrides: list[str]) -> str | None:
    """The ``--set`` name that set ``key`` (itself, its section or a key under it), or None when the file did; of a
    section and then the key in it, the key, applied last."""
    for item in reversed(overrides):
        name = item.partition("=")[0].strip()
        if key == name or key.startswith(name + ".") or name.startswith(key + "."):
            return name
    return None


def blame_override(message: str, file: str, overrides: list[str]) -> str:
    """``FILE: key: problem`` becomes ``--set key: problem`` when ``--set`` gave the key (or, for ``FILE:
    section.a, b: problem``, any of them), and ``FILE: key (not in the file: its default): problem`` when neither
    did (a check over several keys may fault one nobody set); either way ``(with --set section.other=V)`` follows
    when a ``--set`` of the same section gave a key the problem names."""
    head = f"{file}: "
    if not message.startswith(head):
        return message
    rest = message[len(head):]
    key, sep, problem = rest.partition(":")
    # "section.a, b": a rule over keys of one section names them all
    first, *others = (k.strip() for k in key.split(","))
    section = first.rpartition(".")[0]
    if any(override_of(k, overrides) for k in [first, *(f"{section}.{k}" for k in others if "." not in k)]):
        return f"--set {rest}"
    # a rule over several keys of a section blames one; say when --set gave another the problem names
    given = []
    for item in overrides:
        where, _, name = item.partition("=")[0].strip().rpartition(".")
        if section and where == section and re.search(rf"\b{re.escape(name)}\b", problem):
            given.append(item.strip())
    if sep and _unset_in(file, key):
        message = f"{head}{key} (not in the file: its default):{problem}"
    return f"{message} (with --set {', '.join(given)})" if given else message


def _unset_in(file: str, key: str) -> bool:
    """Whether the job ``file`` leaves the dotted ``key`` (``section.option``) out; False for anything else or an
    unreadable file."""
    if not re.fullmatch(r"[a-z_]+(\.[a-z_]+)+", key):
        return False
    try:
        node = yaml.safe_load(Path(file).read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return False
    for part in key.split("."):
        if not isinstance(node, dict):
            return False
        if part not in node:
            return True
        node = node[part]
    return False


def job_to_dict(job: JobConfig) -> dict:
    """The resolved config (defaults filled) as plain YAML-ready data; a task's options that its data fixes
    (``TaskConfig.fixed_by_data``: an event stream's split) are left out while not given (None). An
    ``os.PathLike`` a field holds (a ``dataclasses.replace`` of a run's job) is its path string, also where it is
    a dataclass too (the manifest an adapter returns, which ``dataclasses.asdict`` took apart)."""

    def plain(v: Any) -> Any:
        if isinstance(v, os.PathLike):
            return os.fspath(v)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, tuple | list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    out = plain(job)
    task_class = type(job.task)
    for key in task_class.fixed_by_data:
        if getattr(job.task, key) == getattr(task_class(), key):  # a value given (any): kept, to be refused
            out["task"].pop(key, None)
    return out
