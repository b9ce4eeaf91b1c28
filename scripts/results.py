#!/usr/bin/env python3
"""The README's benchmark tables, generated from the stored results in docs/results/.

Every published run is a file docs/results/NAME.json written by `flowplane-bench ... --json`
(scripts/bench-results.sh runs them): one JSON object per line, the first carrying the run's
provenance (commit, command, date, machine), the others its records. This script

  * rewrites each generated block of README.md, delimited by
        <!-- results:NAME -->  ...  <!-- /results:NAME -->
    with the table NAME builds from the stored records (TABLES below), and
  * rewrites docs/results/README.md, the index of stored runs with their provenance.

    python3 scripts/results.py           # regenerate
    python3 scripts/results.py --check   # fail if a generated block is stale, a stored run lacks
                                         # provenance, or a number in the README's benchmark
                                         # section appears in no stored result

The check is part of scripts/test.sh: a figure in the README comes from a stored run of the
code, or the suite fails.
"""

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
README = ROOT / "README.md"


# ---------------------------------------------------------------------------------------------
# Loading


class Run:
    """One stored run: its provenance and its records."""

    def __init__(self, name, path):
        self.name = name
        self.path = path
        self.provenance = None
        self.records = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            if "provenance" in obj:
                if self.provenance is None:
                    self.provenance = obj["provenance"]
            elif "case" in obj:
                self.records.append(obj)
            else:
                raise SystemExit(f"{path}:{n}: neither provenance nor a record")

    def find(self, case, **params):
        """Records of `case` whose params include `params`."""
        out = []
        for r in self.records:
            if r["case"] != case:
                continue
            p = r.get("params", {})
            if all(p.get(k) == v for k, v in params.items()):
                out.append(r)
        return out

    def one(self, case, **params):
        rs = self.find(case, **params)
        if not rs:
            raise KeyError(f"{self.name}: no record {case} {params}")
        return rs[0]


def load_runs():
    runs = {}
    for p in sorted(RESULTS.glob("*.json")):
        runs[p.stem] = Run(p.stem, p)
    return runs


# ---------------------------------------------------------------------------------------------
# Formatting


def num(x, digits=3):
    """A number as the tables print it: `digits` significant digits, no exponent."""
    if x is None:
        return ""
    if isinstance(x, str):
        return x
    if x == 0:
        return "0"
    if abs(x) >= 10 ** digits:
        return f"{round(x):,}".replace(",", " ")
    from math import floor, log10

    decimals = max(0, digits - 1 - floor(log10(abs(x))))
    return f"{x:.{decimals}f}"


def ratio(x):
    return "" if x is None else f"{x:.2f}"


def size(n):
    """A count as the benchmarks' options write it: powers of two as 1M = 2^20, decimal millions
    as 1M = 10^6 where the count is one (the load balancer's connection counts)."""
    for unit, v in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= v and n % v == 0:
            return f"{n // v}{unit}"
    for unit, v in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= v and n % v == 0:
            return f"{n // v}{unit}"
    return str(n)


def table(header, rows, align=None):
    align = align or ["---:"] * len(header)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def source(run):
    """The line under a table that says where its figures come from."""
    p = run.provenance or {}
    m = p.get("machine", {})
    command = p.get("command", "?").replace(".json.tmp", ".json")
    return (
        f"`{command}` — docs/results/{run.path.name} ({p.get('date', '?')[:16].replace('T', ' ')} UTC; "
        f"{m.get('cpus', '?')} CPUs, Linux {m.get('kernel', '?')}, THP {m.get('thp', '?')}, "
        f"{m.get('hugepages_2m_reserved', 0)} huge pages reserved, heap on {m.get('heap_pages', '?')} pages)."
    )


# ---------------------------------------------------------------------------------------------
# The tables


def t_lb(runs):
    r = runs["lb"]
    rows = []
    for conns in sorted({x["params"]["conns"] for x in r.find("syn_ns_per_packet")}):
        for case, label in (("syn", "SYN (insert)"), ("non_syn", "established"), ("constant", "constant 5-tuple")):
            ns = r.one(f"{case}_ns_per_packet", conns=conns)
            mpps = r.one(case, conns=conns)
            rows.append([label, size(conns), num(ns["value"]), num(mpps["value"]), num(ns["peer_value"]), ratio(ns.get("ratio"))])
    return table(
        ["traffic", "tracked conns", "ns/packet", "Mpps", "baseline ns", "ratio"], rows, ["---", "---:", "---:", "---:", "---:", "---:"]
    ) + "\n\n" + source(r)


def t_live(runs):
    r = runs["live"]
    kf = r.one("kernel_forward")
    kcpu = r.one("kernel_forward_forwarding_cpu_per_frame")
    rows = [["kernel forwarding", num(kf["value"]), "1", f"{num(kcpu['value'])} ns", "1", "—"]]
    for case, label in (("af_packet", "AF_PACKET"), ("af_xdp", "AF_XDP (copy mode)")):
        d = r.one(case)
        c = r.one(f"{case}_forwarding_cpu_per_frame")
        b = r.one(f"{case}_balancer_process_cpu_per_frame")
        rows.append(
            [
                label,
                num(d["value"]),
                ratio(d.get("ratio")),
                f"{num(c['value'])} ns",
                ratio(c.get("ratio")),
                f"{num(b['params']['user_ns'])} + {num(b['params']['system_ns'])} ns",
            ]
        )
    return table(
        ["case", "delivered kpps", "ratio", "forwarding CPU/frame (machine − sender)", "ratio", "balancer thread: user + system"],
        rows,
        ["---", "---:", "---:", "---:", "---:", "---:"],
    ) + "\n\n" + source(r)


def t_switch_memory(runs):
    r = runs["switch-memory"]
    rows = []
    for f in r.find("forward"):
        n = f["params"]["entries"]
        steps = [x for x in r.find("factor", entries=n)]
        steps.sort(key=lambda x: x["params"]["step"])
        chain = " → ".join(num(x["value"]) for x in steps)
        rows.append([size(n), num(f["value"]), chain, num(f["peer_value"]), ratio(f.get("ratio"))])
    t1 = table(
        ["FIB entries", "forward Mpps", "plain → batching → prefetch (4K pages) → huge pages (Mpps)", "raw-I/O baseline Mpps", "ratio"],
        rows,
        ["---:", "---:", "---", "---:", "---:"],
    )
    rows = []
    for u in r.find("forward_under_updates"):
        p = u["params"]
        rows.append([f"{num(p['target_updates_per_s'])}", f"{num(p['achieved_updates_per_s'])}", num(u["value"]), ratio(u.get("ratio"))])
    t2 = table(["target updates/s", "achieved", "forward Mpps", "of the no-update rate"], rows)
    return t1 + "\n\nFIB updates at 2M entries, same run:\n\n" + t2 + "\n\n" + source(r)


def t_fib(runs):
    r = runs["fib"]
    rows = []
    for n in sorted({x["params"]["entries"] for x in r.find("lookup_batched", threads=1)}):
        hb = r.find("lookup_batched", entries=n, threads=1)
        hbr = [x for x in hb if x.get("peer") == "hashbrown"]
        dmr = [x for x in hb if x.get("peer") == "dashmap"]
        row = [size(n)]
        for rec in (hbr, dmr):
            if rec:
                x = rec[0]
                row += [num(x["value"]), num(x["peer_value"]), ratio(x.get("ratio"))]
            else:
                row += ["", "—", ""]
        pages = (hbr or dmr or hb)[0]["params"]
        row.append(f"{pages.get('pages', '?')} / {pages.get('peer_pages', '—')}")
        rows.append(row)
    lookups = table(
        ["entries", "flowplane Mops", "hashbrown Mops", "ratio", "flowplane Mops (dashmap round)", "dashmap Mops", "ratio", "pages: ours / peers'"],
        rows,
        ["---:", "---:", "---:", "---:", "---:", "---:", "---:", "---"],
    )
    rows = []
    for b in r.find("cacheline_bound"):
        n = b["params"]["entries"]
        fr = {x["params"].get("bound_method", ""): x["value"] for x in r.find("fraction_of_bound", entries=n)}
        rows.append(
            [
                size(n),
                num(b["params"]["random_lines_M_per_s"]),
                num(b["params"]["chased_lines_M_per_s"]),
                num(b["value"]),
                num(fr.get("prefetched random lines / 1.5")) + " %",
                num(fr.get("16 pointer chases / 1.5")) + " %",
            ]
        )
    bound = table(
        ["entries", "prefetched random lines M/s", "16 pointer chases M/s", "bound Mops (lines / 1.5)", "lookup: fraction of bound", "by the chase bound"],
        rows,
    )
    rows = []
    for m in r.find("bytes_per_entry"):
        p = m["params"]
        fill = "half empty (2n buckets)" if p.get("peer_fill", "").startswith("n entries") else "its sweet spot (7/8 full)"
        rows.append([p["layout"], size(p["entries"]) if p["entries"] % (1 << 20) == 0 else num(p["entries"]), num(m["value"]), m.get("peer", ""), num(m.get("peer_value")), fill, ratio(m.get("ratio"))])
    memory = table(["layout", "entries", "flowplane B/entry", "peer", "peer B/entry", "peer's fill", "ratio"], rows, ["---", "---:", "---:", "---", "---:", "---", "---:"])
    return (
        "Batched (32) successful lookups, one thread, alternating rounds (best of each):\n\n"
        + lookups
        + "\n\nThe memory's bound over a written array of the table's size (at most 4 GiB), two independent methods in the same run:\n\n"
        + bound
        + "\n\nBytes per entry (compact: 6-byte key, 2-byte value; general: 13-byte key, 8-byte value):\n\n"
        + memory
        + "\n\n"
        + source(r)
    )


def t_switch_live_fib(runs):
    r = runs["switch-live-fib"]
    rows = []
    for x in r.find("live_fib_forward_per_core"):
        p = x["params"]
        c = r.find("live_fib_cpu_per_frame", entries=p["entries"], via=p["via"])
        cpu = f"{num(c[0]['value'])} / {num(c[0]['peer_value'])} ns, {ratio(c[0].get('ratio'))}" if c else ""
        rows.append([size(p["entries"]), p["via"], num(x["value"]), num(x["peer_value"]), ratio(x.get("ratio")), cpu, p.get("pages", "")])
    return table(
        ["FIB entries", "driver", "switch kpps per core", "no-lookup kpps per core", "ratio", "CPU/frame at a fixed rate (switch / no-lookup), ratio", "FIB pages"],
        rows,
        ["---:", "---", "---:", "---:", "---:", "---:", "---"],
    ) + "\n\n" + source(r)


def t_flowstate(runs):
    r = runs["flowstate"]
    rows = []
    for x in r.find("insert_rate", threads=1):
        p = x["params"]
        mpps = r.find("flowlet_mpps", workload=p["workload"], table=p["table"], threads=1)
        rows.append(
            [
                p["workload"],
                p["table"],
                num(x["value"]),
                num(x["peer_value"]),
                ratio(x.get("ratio")),
                num(mpps[0]["value"]) if mpps else "",
                ratio(mpps[0].get("ratio")) if mpps else "",
            ]
        )
    return table(
        ["workload", "table", "insertions M/s", "hashbrown M/s", "ratio", "packets Mpps", "ratio"],
        rows,
        ["---", "---", "---:", "---:", "---:", "---:", "---:"],
    ) + "\n\n" + source(r)


def t_records(name, cases, keys=None):
    """A plain table of the named cases of a run: case, params, value, peer, ratio."""

    def build(runs):
        r = runs[name]
        rows = []
        for c in cases:
            for x in r.find(c):
                p = x.get("params", {})
                ps = ", ".join(f"{k}={v}" for k, v in p.items() if keys is None or k in keys)
                rows.append([c, ps, f"{num(x['value'])} {x['unit']}", x.get("peer", ""), num(x.get("peer_value")), ratio(x.get("ratio"))])
        return table(["case", "params", "value", "peer", "peer value", "ratio"], rows, ["---", "---", "---:", "---", "---:", "---:"]) + "\n\n" + source(r)

    return build


TABLES = {
    "lb": t_lb,
    "live": t_live,
    "switch-memory": t_switch_memory,
    "switch-live-fib": t_switch_live_fib,
    "fib": t_fib,
    "flowstate": t_flowstate,
    "maglev": t_records("maglev", ["balance_spread", "disruption", "populate"], keys={"backends", "size", "failed_pct", "m", "trials"}),
    "setsep": t_records("setsep", ["bits_per_key", "lookup"], keys={"setting", "value_bits", "keys", "batch", "threads", "pages", "peer_pages"}),
}


# ---------------------------------------------------------------------------------------------
# The README and the index


BLOCK = re.compile(r"(<!-- results:([a-z0-9-]+) -->\n)(.*?)(<!-- /results:\2 -->)", re.S)


def render_readme(text, runs):
    def sub(m):
        name = m.group(2)
        if name not in TABLES:
            raise SystemExit(f"README.md: unknown generated block {name!r} (known: {', '.join(TABLES)})")
        if name not in runs:
            raise SystemExit(f"README.md: block {name!r} needs docs/results/{name}.json")
        return m.group(1) + TABLES[name](runs) + "\n" + m.group(4)

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
        "docs/architecture.md, \"How to add a benchmark\"). The README's benchmark tables are generated\n"
        "from these files by scripts/results.py, and the test suite checks that every figure there\n"
        "comes from one of them. This index is generated too.\n\n"
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


def check(runs):
    errors = []
    for name, r in runs.items():
        p = r.provenance
        if not p or not p.get("commit") or not p.get("date") or not p.get("machine"):
            errors.append(f"docs/results/{name}.json: no provenance line (commit, date, machine)")
    text = README.read_text()
    if render_readme(text, runs) != text:
        errors.append("README.md: generated benchmark tables are stale (run python3 scripts/results.py)")
    if (RESULTS / "README.md").read_text() != render_index(runs):
        errors.append("docs/results/README.md is stale (run python3 scripts/results.py)")
    # Outside generated blocks, a decimal figure in the benchmark section must be a stored one.
    section = BLOCK.sub("", bench_section(text))
    section = re.sub(r"```.*?```", "", section, flags=re.S)  # commands
    section = re.sub(r"`[^`]*`", "", section)  # inline code: options, sizes
    known = known_numbers(runs)
    for m in re.finditer(r"(?<![\w.§])(\d+\.\d+)(?![\w.])", section):
        if m.group(1) not in known:
            line = section[: m.start()].count("\n")
            ctx = section.splitlines()[line].strip()
            errors.append(f"README.md benchmark section: {m.group(1)} is in no stored result: {ctx[:120]}")
    return errors


def main():
    runs = load_runs()
    if "--check" in sys.argv[1:]:
        errors = check(runs)
        for e in errors:
            print(f"results.py: {e}", file=sys.stderr)
        if errors:
            sys.exit(1)
        print(f"results.py: ok ({len(runs)} stored runs)")
        return
    README.write_text(render_readme(README.read_text(), runs))
    (RESULTS / "README.md").write_text(render_index(runs))
    print(f"results.py: README.md and docs/results/README.md regenerated from {len(runs)} stored runs")


if __name__ == "__main__":
    main()
