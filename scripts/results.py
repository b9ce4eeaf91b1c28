#!/usr/bin/env python3
"""The benchmark tables of the README and of docs/*.md, generated from the stored results in
docs/results/.

Every published run is a file docs/results/NAME.json written by `flowplane-bench ... --json`
(scripts/bench-results.sh runs them): one JSON object per line, the first carrying the run's
provenance (commit, command, date, machine), the others its records. This script

  * rewrites each generated block of README.md and of every page in docs/, delimited by
        <!-- results:ID -->  ...  <!-- /results:ID -->
    with the table ID builds from the stored records (the TABLES of the modules in
    scripts/resultslib/: readme.py for the README, one module per benchmark page), and
  * rewrites docs/results/README.md, the index of stored runs with their provenance.

    python3 scripts/results.py                  # regenerate every page
    python3 scripts/results.py --only FILE...   # regenerate these pages only
    python3 scripts/results.py --check          # fail if a generated block is stale, a stored run
                                                # lacks provenance, or a number in the README's
                                                # benchmark section or in a page's results section
                                                # appears in no stored result

The check is part of scripts/test.sh: a published figure comes from a stored run of the code, or
the suite fails.
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from resultslib import flowcache, flowstate, maglev, readme, setsep, switch  # noqa: E402
from resultslib.common import RESULTS, ROOT, load_runs, num, ratio, table  # noqa: E402

README = ROOT / "README.md"
DOCS = ROOT / "docs"

TABLES = {}
for _module in (readme, flowcache, flowstate, maglev, setsep, switch):
    for _id, _fn in _module.TABLES.items():
        if _id in TABLES:
            raise SystemExit(f"results.py: table {_id!r} defined twice")
        TABLES[_id] = _fn


def pages():
    """Every page that may hold generated blocks."""
    return [README] + sorted(p for p in DOCS.glob("*.md"))


# ---------------------------------------------------------------------------------------------
# The README and the index


BLOCK = re.compile(r"(<!-- results:([a-z0-9-]+) -->\n)(.*?)(<!-- /results:\2 -->)", re.S)


def render(page, text, runs):
    """The page with every generated block rebuilt from the stored runs."""
    rel = page.relative_to(ROOT)

    def sub(m):
        name = m.group(2)
        if name not in TABLES:
            raise SystemExit(f"{rel}: unknown generated block {name!r} (known: {', '.join(sorted(TABLES))})")
        try:
            body = TABLES[name](runs)
        except KeyError as e:
            raise SystemExit(f"{rel}: block {name!r}: {e.args[0]} (is docs/results/ missing a run?)")
        return m.group(1) + body + "\n" + m.group(4)

    return BLOCK.sub(sub, text)


def render_index(runs):
    rows = []
    for name, r in sorted(runs.items()):
        p = r.provenance or {}
        m = p.get("machine", {})
        rows.append(
            [
                f"{name}.json",
                f"`{p.get('command', '?').replace('.json.tmp', '.json')}`",
                p.get("date", "?"),
                f"{p.get('commit', '?')[:12]}" + ("" if p.get("tree") == "clean" else f" ({p.get('tree', '?')})"),
                f"{m.get('cpu', '?')}, {m.get('cpus', '?')} CPUs, {m.get('memory_gib', '?')} GiB, Linux {m.get('kernel', '?')}, THP {m.get('thp', '?')}, "
                f"{m.get('hugepages_2m_reserved', '?')} huge pages reserved, heap {m.get('heap_pages', '?')}",
            ]
        )
    return (
        "# Stored benchmark results\n\n"
        "Each file is one run of `flowplane-bench ... --json FILE` (scripts/bench-results.sh runs the\n"
        "published ones): a provenance line, then one record per measurement (the format is described in\n"
        "docs/architecture.md, \"How to add\"). The benchmark tables of the README and of the pages in\n"
        "docs/ are generated from these files by scripts/results.py, and the test suite checks that\n"
        "every figure there comes from one of them. This index is generated too.\n\n"
        + table(["file", "command", "date (UTC)", "code (commit)", "machine"], rows, ["---", "---", "---", "---", "---"])
        + "\n"
    )


def bench_section(text):
    start = text.find("\n## Benchmarks")
    if start < 0:
        return ""
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def known_numbers(runs):
    """Every number a stored run holds, in the forms a table or a sentence may print it."""
    out = set()

    def add(v):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return
        for d in (1, 2, 3, 4):
            out.add(num(v, d))
        out.add(ratio(v))
        for p in (0, 1, 2):
            out.add(f"{v:.{p}f}")
            out.add(f"{v * 100:.{p}f}")  # fractions shown as percentages

    def walk(x):
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        else:
            add(x)

    for r in runs.values():
        for rec in r.records:
            walk(rec)
        walk(r.provenance or {})
    return out


RESULT_HEADING = re.compile(r"(?i)\b(results?|measured|measurements?|benchmarks?)\b")


def result_sections(text):
    """The parts of a docs page under a heading that announces results (Results, Measurements,
    Benchmark ...), each up to the next heading of the same or a higher level."""
    lines = text.splitlines()
    out, level = [], None
    fence = False
    for line in lines:
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"(#+) (.*)", line)
        if m:
            lv = len(m.group(1))
            if level is not None and lv <= level:
                level = None
            if level is None and RESULT_HEADING.search(m.group(2)):
                level = lv
            continue
        if level is not None:
            out.append(line)
    return "\n".join(out)


def unknown_figures(rel, section, known):
    """Decimal figures of a section that are in no stored result. Generated blocks, commands,
    inline code and lines that quote the paper (they name it) are not checked."""
    errors = []
    section = BLOCK.sub("", section)
    section = re.sub(r"```.*?```", "", section, flags=re.S)
    section = re.sub(r"`[^`]*`", "", section)
    lines = section.splitlines()
    for n, line in enumerate(lines):
        if re.search(r"(?i)paper|§", line):
            continue
        for m in re.finditer(r"(?<![\w.§])(\d+\.\d+)(?![\w.])", line):
            if m.group(1) not in known:
                errors.append(f"{rel}: {m.group(1)} is in no stored result: {line.strip()[:120]}")
    return errors


def check(runs):
    errors = []
    for name, r in runs.items():
        p = r.provenance
        if not p or not p.get("commit") or not p.get("date") or not p.get("machine"):
            errors.append(f"docs/results/{name}.json: no provenance line (commit, date, machine)")
    known = known_numbers(runs)
    for page in pages():
        rel = page.relative_to(ROOT)
        text = page.read_text()
        if render(page, text, runs) != text:
            errors.append(f"{rel}: generated benchmark tables are stale (run python3 scripts/results.py)")
        section = bench_section(text) if page == README else result_sections(text)
        errors += unknown_figures(rel, section, known)
    if (RESULTS / "README.md").read_text() != render_index(runs):
        errors.append("docs/results/README.md is stale (run python3 scripts/results.py)")
    return errors


def main():
    runs = load_runs()
    args = sys.argv[1:]
    if "--check" in args:
        errors = check(runs)
        for e in errors:
            print(f"results.py: {e}", file=sys.stderr)
        if errors:
            sys.exit(1)
        print(f"results.py: ok ({len(runs)} stored runs)")
        return
    if args and args[0] == "--only":
        targets = [Path(a).resolve() for a in args[1:]]
    else:
        targets = pages()
    for page in targets:
        text = page.read_text()
        new = render(page, text, runs)
        if new != text:
            page.write_text(new)
    if not args:
        (RESULTS / "README.md").write_text(render_index(runs))
    print(f"results.py: {len(targets)} pages regenerated from {len(runs)} stored runs")


if __name__ == "__main__":
    main()
