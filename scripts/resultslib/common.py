"""What every generated table needs: the stored runs and the number formats."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
RESULTS = ROOT / "docs" / "results"


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
    """Every stored run, by name (the file's stem)."""
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
        f"{m.get('cpu', '?')}, {m.get('cpus', '?')} CPUs, Linux {m.get('kernel', '?')}, "
        f"THP {m.get('thp', '?')}, {m.get('hugepages_2m_reserved', 0)} huge pages reserved, heap on {m.get('heap_pages', '?')} pages)."
    )


def stored(runs, name):
    """The stored run `name`, or a KeyError naming the file that is missing."""
    if name not in runs:
        raise KeyError(f"no stored run docs/results/{name}.json")
    return runs[name]


def join_and(items):
    """"a", "a and b", "a, b and c"."""
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
