"""The user documentation (README.md, docs/, CITATION.cff, LICENSE): short README, every technique with its
paper section, YAML and example job, links and paths that exist, example commands whose jobs load, no
development history. No MPI: a second or two."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from hpcdgnn.config import load_job
from tests.conftest import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
USER_DOCS = [README, *DOCS]

#: the techniques of the papers and their example jobs
EXAMPLES = {
    "S1": ["s1-pss-ts.yaml"], "S2": ["s2-checkpoint-blocks.yaml"], "S3": ["s3-graph-difference.yaml"],
    "S4": ["s4-precompute.yaml"], "S5": ["s5-smoothing.yaml"], "S6": ["s6-vertex-halo.yaml", "s6-pss.yaml"],
    "D1": ["d1-graph-chunks.yaml"], "D2": ["d2-chunk-fusion.yaml"], "D3": ["d3-stale-aggregation.yaml"],
    "R1": ["r1-placement.yaml"], "R2": ["r2-incremental.yaml"], "R3": ["r3-reuse.yaml"],
    "R4": ["r4-seq-first-sampling.yaml"], "H1": ["h1-h2-hybrid-batches.yaml"], "H2": ["h1-h2-hybrid-batches.yaml"],
    "H3": ["h3-h5-dynahb.yaml"], "H4": ["h3-h5-dynahb.yaml"], "H5": ["h3-h5-dynahb.yaml"],
    "M1": ["m1-tgn.yaml"], "M2": ["m2-memory-parallelism.yaml"],
}


def _rel(path) -> str:
    return str(path.relative_to(REPO))


def test_readme_is_short_and_starts_with_the_two_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 250, "README.md: keep it under 250 lines; reference material goes to docs/"
    for command in ("bash jobs/quickstart.sh", "bash tests/run.sh", "bash tests/run.sh --quick"):
        assert command in text, command
    assert text.index("bash jobs/quickstart.sh") < text.index("## Techniques")


def test_every_technique_has_its_paper_section_yaml_and_example():
    """One table row per technique (S6 has two), each with a § reference, a YAML key and its example job."""
    rows = [ln for ln in README.read_text().splitlines() if re.match(r"\| [SDRHM]\d \|", ln)]
    by_id: dict[str, list[str]] = {}
    for row in rows:
        by_id.setdefault(row.split("|")[1].strip(), []).append(row)
    assert sorted(by_id) == sorted(EXAMPLES)
    for tid, files in EXAMPLES.items():
        linked = [name for row in by_id[tid] for name in re.findall(r"\]\(jobs/examples/([\w.-]+)\)", row)]
        assert sorted(linked) == sorted(files), tid
        for row in by_id[tid]:
            cells = [c.strip() for c in row.split("|")[1:-1]]
            assert "§" in cells[2] and "`" in cells[3], (tid, cells)  # the paper section; the YAML


@pytest.mark.parametrize("doc", USER_DOCS, ids=_rel)
def test_no_development_history_or_private_paths(doc):
    """User docs name no ../shared paths, issues, sessions, releases or the project's SPEC file."""
    text = doc.read_text()
    for pattern in (r"\.\./shared", r"\bissues? \d", r"\bsessions?\b", r"\brelease 0\.\d", r"\bSPEC\b"):
        assert not re.search(pattern, text, flags=re.I), f"{_rel(doc)}: {pattern}"


@pytest.mark.parametrize("doc", USER_DOCS, ids=_rel)
def test_links_and_paths_exist(doc):
    """Every relative link, and every repository path in code spans, names a file or directory there is."""
    text = doc.read_text()
    for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text):
        if not re.match(r"[a-z]+://", target):
            assert (doc.parent / target).exists(), f"{_rel(doc)}: link to {target}"
    for path in set(re.findall(r"\b((?:hpcdgnn|perf|jobs|tests)/[\w./*-]+)", text)):
        path = path.rstrip(".")
        assert list(REPO.glob(path)), f"{_rel(doc)}: {path}"


def test_the_readme_links_every_doc_and_performance_names_every_script():
    text = README.read_text()
    for doc in DOCS:
        assert f"](docs/{doc.name})" in text, doc.name
    perf = (REPO / "docs" / "performance.md").read_text()
    for script in sorted((REPO / "perf").glob("*.py")):
        assert f"perf/{script.name}" in perf, f"docs/performance.md does not say what perf/{script.name} does"


def _run_commands(text: str) -> list[list[str]]:
    """The ``python -m hpcdgnn run`` commands of ```bash blocks, continuation lines joined, split into words."""
    blocks = re.findall(r"^```bash\n(.*?)^```$", text, flags=re.S | re.M)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    words = [shlex.split(ln, comments=True) for ln in lines if "python -m hpcdgnn run " in ln]
    return [w[w.index("run") + 1:] for w in words]


def test_the_readme_s_run_commands_load():
    """Each worked example's job file with its --set overrides is a valid job (the data need not exist)."""
    commands = _run_commands(README.read_text())
    assert len(commands) >= 3  # one per regime
    strategies = set()
    for args in commands:
        job, overrides, i = args[0], [], 1
        while i < len(args):
            if args[i] == "--set":
                while i + 1 < len(args) and not args[i + 1].startswith("--"):
                    overrides.append(args[i + 1])
                    i += 1
            i += 1
        strategies.add(load_job(REPO / job, overrides, check_paths=False).strategy.name)
    assert {"snapshot", "sequences", "memory"} <= strategies


def test_citation_and_license():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["license"] == "MIT"
    assert cff["title"] and cff["authors"] and cff["message"]
    titles = [r["title"] for r in cff["references"]]
    for word in ("Efficient Scaling of Dynamic Graph Neural Networks", "DGC:", "ReInc:", "DynaHB:", "DistTGL:"):
        assert sum(word in t for t in titles) == 1, word
    for ref in cff["references"]:
        assert ref["type"] and ref["authors"] and all("family-names" in a for a in ref["authors"])
    license_text = (REPO / "LICENSE").read_text()
    assert license_text.startswith("MIT License") and "Copyright (c) 2026 the hpcdgnn developers" in license_text
