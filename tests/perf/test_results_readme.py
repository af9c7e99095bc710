"""perf/results/README.md keeps its historical entries as written: a script it quotes that perf/ no longer has is
marked where it is quoted, ``[gone in COMMIT → what replaced it]``, with a commit that deleted it (where this is a
git checkout) and a replacement that perf/ has."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import REPO

README = REPO / "perf" / "results" / "README.md"
#: a perf/ script quoted anywhere (not tests/perf/..., not a path inside perf/results/)
QUOTE = re.compile(r"(?<![\w/.-])perf/(?!results/)[\w/.-]+\.(?:py|sh)\b")
MARK = re.compile(r"\[gone in ([0-9a-f]{7,40}) → ([^\]]+)\]")


def test_every_quoted_script_exists_or_is_marked_gone_with_its_replacement():
    text = README.read_text()
    note = text.find("The entries are kept as they were written")  # the note that explains the markers
    note_end = text.find("\n\n", note) if note >= 0 else -1
    git = (REPO / ".git").exists()
    gone = set()
    for m in QUOTE.finditer(text):
        path = m.group(0)
        if (REPO / path).exists() or note <= m.start() < note_end:
            continue
        gone.add(path)
        mark = MARK.search(text, m.end(), m.end() + 240)
        assert mark is not None, f"perf/results/README.md quotes {path} (gone) without a [gone in ...] marker: " \
                                 f"{text[m.start():m.end() + 80]!r}"
        for replacement in QUOTE.findall(mark.group(2)):
            assert (REPO / replacement).exists(), replacement
        if git:
            deleted = subprocess.run(["git", "log", "--diff-filter=D", "--format=%H", "--", path], cwd=REPO,
                                     capture_output=True, text=True).stdout.split()
            assert any(h.startswith(mark.group(1)) for h in deleted), (path, mark.group(1), deleted)
    assert gone  # the historical entries do quote deleted scripts: the check above ran
