"""Every ``perf/*.py`` still starts and prints its ``--help``, and every option docs/performance.md shows for a script
is one its ``--help`` lists: the benchmarks are scripts no other test imports, so a renamed function or a dropped
option would otherwise surface only when a user runs the documented command.

One child process runs every script's ``--help`` in turn (``runpy``; torch is imported once, ~3 s in all): a
script's start-up is its imports plus its argument parser, which is what rots."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.conftest import REPO

#: scripts whose --help shows a sub-command's options rather than the top level's
_SUBCOMMANDS = {"scaling": ["run", "plot"]}

_CHILD = r"""
import contextlib, io, json, runpy, sys
out = {}
for path, argv in json.loads(sys.argv[1]):
    sys.argv = [path, *argv]
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            runpy.run_path(path, run_name="__main__")
        out[" ".join([path, *argv])] = ["returned without printing usage", buf.getvalue()]
    except SystemExit as e:
        ok = not e.code and "usage:" in buf.getvalue()
        out[" ".join([path, *argv])] = ["ok" if ok else f"exit {e.code!r}", buf.getvalue()]
    except BaseException as e:  # an import or a parser that fails: the script's own error, named
        out[" ".join([path, *argv])] = [f"{type(e).__name__}: {e}", ""]
print(json.dumps(out))
"""


def _helps() -> dict[str, tuple[str, str]]:
    calls = []
    for path in sorted((REPO / "perf").glob("*.py")):
        calls.append([str(path), ["--help"]])
        calls += [[str(path), [sub, "--help"]] for sub in _SUBCOMMANDS.get(path.stem, [])]
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(calls)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {key.removeprefix(str(REPO / "perf") + "/"): tuple(v)
            for key, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def test_every_perf_script_prints_help_and_every_documented_option_is_listed():
    helps = _helps()
    broken = {k: v[0] for k, v in helps.items() if v[0] != "ok"}
    assert not broken, broken
    doc = (REPO / "docs" / "performance.md").read_text()
    missing = []
    for m in re.finditer(r"python perf/(\w+)\.py( (\w+))?([^`\n]*)", doc):
        script, sub, rest = m.group(1), m.group(3), m.group(4)
        assert (REPO / "perf" / f"{script}.py").exists(), f"docs/performance.md names perf/{script}.py"
        key = f"{script}.py {sub} --help" if sub in _SUBCOMMANDS.get(script, []) else f"{script}.py --help"
        text = helps[key][1]
        missing += [f"{script} {flag}" for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest)
                    if flag not in text]
    assert not missing, f"options docs/performance.md shows that the scripts' --help does not list: {missing}"
