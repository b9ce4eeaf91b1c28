"""Generated tables of docs/maglev.md, from docs/results/ (see scripts/results.py).

Every block reads docs/results/maglev.json (`flowplane-bench maglev`). Sizes, failure fractions
and methods are taken from the records, so a --quick run or a run with other --sizes renders too.
"""

from .common import stored, join_and, num, ratio, size, table, source  # noqa: F401

# The paper's own figures (Eisenbud et al., NSDI 2016, §5.3), as crates/bench/src/maglev.rs
# quotes them: overprovisioning (max share / average − 1, percent) for 1000 backends, and Maglev's
# population time (ms).
PAPER_OVERPROVISION = {
    ("karger", 65_537): 29.7,
    ("rendezvous", 65_537): 49.5,
    ("karger", 655_373): 10.3,
    ("rendezvous", 655_373): 12.3,
}
PAPER_POPULATE_MS = {65_537: 1.8, 655_373: 22.9}

PEERS = (("karger", "Karger"), ("rendezvous", "rendezvous"))


def _run(runs):
    return stored(runs, "maglev")


def _sizes(r, case):
    sizes = sorted({x["params"]["size"] for x in r.find(case)})
    if not sizes:
        raise KeyError(f"{r.name}: no record {case}")
    return sizes


def _peer(r, case, peer, **params):
    for x in r.find(case, **params):
        if x.get("peer") == peer:
            return x
    raise KeyError(f"{r.name}: no record {case} {params} with peer {peer}")


def _karger(r):
    """Karger's label, with its virtual nodes per backend (`--vnodes`, default 1000: the records do
    not carry it, the run's command does)."""
    words = (r.provenance or {}).get("command", "").replace("=", " ").split()
    v = words[words.index("--vnodes") + 1] if "--vnodes" in words[:-1] else "1000"
    return f"Karger ({v} vnodes)"


def _pct(x):
    return f"{num(x)} %"


def _over(share_max):
    return f"+{(share_max - 1) * 100:.1f} %"


_list = join_and


def _signed(x):
    return f"{x:+.1f}".replace("-", "−")


def _fmt_pct_param(p):
    return f"{p:g} %"


def _weights(spec, n):
    """The weights the benchmark gives its n backends for `spec` "a..=b": a, a+1, …, b cycling."""
    lo, hi = (int(s) for s in spec.split("..="))
    return [lo + i % (hi - lo + 1) for i in range(n)]


# ---------------------------------------------------------------------------------------------
# Fig 11 and weighted balance


def t_balance(runs):
    r = _run(runs)
    rows = []
    slots = []
    ratios = []
    for m in _sizes(r, "share_max"):
        mx = r.find("share_max", size=m)
        mn = r.find("share_min", size=m)
        sp = r.find("balance_spread", size=m)
        n = mx[0]["params"]["backends"]
        rows.append(["Maglev", str(m), num(mx[0]["value"], 4), num(mn[0]["value"], 4), _pct(sp[0]["value"]), _over(mx[0]["value"]), '"almost perfect"'])
        for peer, label in PEERS:
            a, b, s = (_peer(r, c, peer, size=m) for c in ("share_max", "share_min", "balance_spread"))
            if peer == "karger":
                label = _karger(r)
            paper = PAPER_OVERPROVISION.get((peer, m))
            rows.append([label, str(m), num(a["peer_value"], 4), num(b["peer_value"], 4), _pct(s["peer_value"]), _over(a["peer_value"]), f"+{paper} %" if paper else "—"])
            ratios.append((m, label.split(" ")[0], s.get("ratio")))
        avg = m / n
        k = sp[0]["value"] / 100 * avg
        if abs(k - round(k)) < 0.05 and round(k) == 1:
            slots.append(f"{avg // 1:.0f} or {avg // 1 + 1:.0f} entries per backend at M = {str(m)} (one slot is {num(100 / avg)} % of the average)")
        else:
            slots.append(f"a spread of {num(k)} slots at M = {str(m)}")
    out = table(
        ["method", "M", "max", "min", "spread", "overprovision", "paper overprovision"],
        rows,
        ["---", "---:", "---:", "---:", "---:", "---:", "---:"],
    )
    one = all("entries per backend" in s for s in slots)
    out += "\n\n" + ("Maglev's spread is exactly one slot: " if one else "Maglev: ") + _list(slots) + ". "
    by = {}
    for m, lab, x in ratios:
        if x is not None:
            by.setdefault(lab, []).append(f"{num(x)}× at M = {m}")
    out += "The baselines' spread over Maglev's (the `balance_spread` ratio): " + "; ".join(
        f"{lab} {_list(v)}" for lab, v in by.items()
    ) + "."

    # Weighted balance.
    rows = []
    for m in _sizes(r, "weighted_max_dev"):
        k = _peer(r, "weighted_max_dev", "karger", size=m)
        v = _peer(r, "weighted_max_dev", "rendezvous", size=m)
        spec = k["params"].get("weights", "1..=4")
        ws = _weights(spec, k["params"]["backends"])
        share1 = m * min(ws) / sum(ws)
        rows.append([str(m), _pct(k["value"]), _pct(k["peer_value"]), _pct(v["peer_value"]), f"{num(share1)} slots ({num(100 / share1)} %)"])
    out += (
        "\n\n**Weighted balance** (weights "
        + spec.replace("..=", " to ")
        + " cycling over the backends; worst |entries / weighted share − 1| of any backend):\n\n"
        + table(["M", "Maglev", "Karger", "rendezvous", "share of a lightest backend (one slot of it)"], rows)
    )
    return out + "\n\n" + source(r)


# ---------------------------------------------------------------------------------------------
# Population time and lookups


def t_populate(runs):
    r = _run(runs)
    rows = []
    spec = ""
    for m in _sizes(r, "populate"):
        k = _peer(r, "populate", "karger", size=m)
        v = _peer(r, "populate", "rendezvous", size=m)
        w = r.find("populate_weighted", size=m)
        if w:
            spec = w[0]["params"].get("weights", "")
        rows.append(
            [
                str(m),
                f"{num(k['value'])} ({num(k['params']['min_ms'])})",
                num(w[0]["value"]) if w else "—",
                num(k["peer_value"]),
                num(w[0]["peer_value"]) if w and w[0].get("peer") == "karger" else "—",
                num(v["peer_value"]),
            ]
        )
    reps = _peer(r, "populate", "karger", size=_sizes(r, "populate")[0])["params"].get("reps")
    out = (
        f"**Population time** (ms, median of {reps} Maglev builds; min in parentheses):\n\n"
        + table(["M", "Maglev", f"Maglev, weights {spec}", "Karger", f"Karger, weights {spec}", "rendezvous"], rows)
    )
    looks = [x for x in r.find("lookup")]
    if not looks:
        raise KeyError(f"{r.name}: no record lookup")
    looks.sort(key=lambda x: x["params"]["size"])
    out += (
        "\n\n**Lookup** (random hashes, one thread): the Maglev table does "
        + _list(f"{num(x['value'])} Mops at M = {str(x['params']['size'])}" for x in looks)
        + ", binary search on Karger's ring (a ring used without a table) "
        + _list(f"{num(x['peer_value'])} Mops" for x in looks)
        + " — "
        + _list(f"{num(x['ratio'])}×" for x in looks)
        + " faster. With a table, Karger's lookup would cost the same as Maglev's."
    )
    return out + "\n\n" + source(r)


# ---------------------------------------------------------------------------------------------
# Fig 12


def t_fig12(runs):
    r = _run(runs)
    sizes = _sizes(r, "disruption")
    pcts = sorted({x["params"]["failed_pct"] for x in r.find("disruption")})
    header = ["failing"]
    for m in sizes:
        header += [f"Maglev M={str(m)}", "collateral"]
    header += ["Karger", "rendezvous"]
    rows = []
    base_dev = 0.0
    worst = None  # (max − mean, pct, m, max, mean)
    trials = set()
    for p in pcts:
        any_rec = r.find("disruption", failed_pct=p)[0]
        n, k = any_rec["params"]["backends"], any_rec["params"]["failed"]
        row = [f"{_fmt_pct_param(p)} ({k})"]
        peers = {"karger": [], "rendezvous": []}
        for m in sizes:
            d = r.find("disruption", failed_pct=p, size=m)
            c = r.find("disruption_collateral", failed_pct=p, size=m)
            if not d:
                row += ["—", "—"]
                continue
            row += [_pct(d[0]["value"]), _pct(c[0]["value"]) if c else "—"]
            trials.add(d[0]["params"].get("trials"))
            gap = d[0]["params"]["max"] - d[0]["value"]
            if worst is None or gap > worst[0]:
                worst = (gap, p, m, d[0]["params"]["max"], d[0]["value"])
            for x in d:
                if x.get("peer") in peers:
                    peers[x["peer"]].append(x["peer_value"])
                    base_dev = max(base_dev, abs(x["peer_value"] - 100 * k / n))
        for peer in ("karger", "rendezvous"):
            vs = peers[peer]
            if not vs:
                row.append("—")
            elif f"{min(vs):.2f}" == f"{max(vs):.2f}":
                row.append(f"{vs[0]:.2f} %")
            else:
                row.append(f"{min(vs):.2f}–{max(vs):.2f} %")
        rows.append(row)
    out = table(header, rows)
    t = "/".join(str(x) for x in sorted(trials))
    out += (
        f"\n\nMean share of the table that changed over {t} random failure sets (the number of failed backends in "
        "parentheses); \"collateral\" is the part of Maglev's change that belonged to surviving backends; the "
        "Karger and rendezvous columns give the range over the table sizes. "
        f"Karger and rendezvous change the failed share of the table to within {num(base_dev, 2)} points at every point "
        "(their ideal: only the dead backends' slots move). "
        f"Maglev's worst trial is at most {num(worst[0], 2)} points above its mean "
        f"({num(worst[3])} % against {num(worst[4])} % at {_fmt_pct_param(worst[1])} failing, M = {str(worst[2])})."
    )
    return out + "\n\n" + source(r)


# ---------------------------------------------------------------------------------------------
# The stored run next to the tests' bounds


def t_bounds(runs):
    r = _run(runs)
    parts = []
    for m in _sizes(r, "disruption_collateral"):
        pts = [x for x in r.find("disruption_collateral", size=m) if x["params"]["failed_pct"] in (1.0, 10.0)]
        pts.sort(key=lambda x: x["params"]["failed_pct"])
        if pts:
            parts.append(
                _list(f"{_pct(x['value'])} at {_fmt_pct_param(x['params']['failed_pct'])} failing" for x in pts) + f" (M = {str(m)})"
            )
    if not parts:
        raise KeyError(f"{r.name}: no record disruption_collateral at 1 % or 10 % failing")
    return "For comparison, the stored run's mean collateral over its trials: " + "; ".join(parts) + ".\n\n" + source(r)


# ---------------------------------------------------------------------------------------------
# Against the paper


def t_paper(runs):
    r = _run(runs)
    rows = []
    pop = []
    for m in _sizes(r, "populate"):
        paper = PAPER_POPULATE_MS.get(m)
        if paper is None:
            continue
        v = r.find("populate", size=m)[0]["value"]
        pop.append((m, v, paper, v / paper))
        rows.append(["Maglev population time (median)", str(m), f"{num(v)} ms", f"{paper} ms", ratio(v / paper)])
    over = []
    for (peer, m), paper in sorted(PAPER_OVERPROVISION.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        try:
            x = _peer(r, "share_max", peer, size=m)
        except KeyError:
            continue
        ours = (x["peer_value"] - 1) * 100
        over.append((peer, m, ours, paper))
        label = _karger(r) if peer == "karger" else "rendezvous"
        rows.append([f"{label} overprovision", str(m), f"+{ours:.1f} %", f"+{paper} %", ratio(ours / paper)])
    if not rows:
        return "This run has none of the paper's table sizes (65537, 655373).\n\n" + source(r)
    out = table(["quantity", "M", "flowplane", "paper", "flowplane / paper"], rows, ["---", "---:", "---:", "---:", "---:"])
    sentences = []
    if pop:
        if all(x[3] < 1 for x in pop):
            verdict = "faster than the paper's figure at every size"
        elif all(x[3] > 1 for x in pop):
            verdict = "slower than the paper's figure at every size"
        else:
            verdict = "faster than the paper's figure at some sizes and slower at others"
        sentences.append(
            "Population: the median build is " + verdict + " (" + _list(f"{ratio(x[3])}× at M = {str(x[0])}" for x in pop) + ")."
        )
    for peer, label in PEERS:
        pts = [x for x in over if x[0] == peer]
        if not pts:
            continue
        gaps = [x[2] - x[3] for x in pts]
        s = f"{label.capitalize() if peer == 'rendezvous' else label} overprovision differs from the paper's by " + _list(
            f"{_signed(gap)} points at M = {str(x[1])}" for gap, x in zip(gaps, pts)
        )
        if len(pts) > 1:
            s += "; the gap is " + ("smaller" if abs(gaps[-1]) < abs(gaps[0]) else "not smaller") + " at the larger table"
        sentences.append(s + ".")
    # Fig 12's shape: grows with failures at every size, smaller at the larger table at every fraction.
    sizes = _sizes(r, "disruption")
    curves = {m: sorted((x["params"]["failed_pct"], x["value"]) for x in r.find("disruption", size=m) if x.get("peer") == "karger") for m in sizes}
    grows = all(all(b[1] > a[1] for a, b in zip(c, c[1:])) for c in curves.values())
    pcts = sorted({p for c in curves.values() for p, _ in c})
    shrinks = all(
        all(dict(curves[b])[p] < dict(curves[a])[p] for p in pcts if p in dict(curves[a]) and p in dict(curves[b]))
        for a, b in zip(sizes, sizes[1:])
    )
    shape = (
        "Fig 12: Maglev's changed share "
        + ("grows" if grows else "does not grow monotonically")
        + " with the failed fraction at every size"
        + (
            (" and is " + ("smaller" if shrinks else "not always smaller") + " for the larger table at every failed fraction")
            if len(sizes) > 1
            else ""
        )
        + ("; that is the shape of the paper's Fig 12." if grows and shrinks and len(sizes) > 1 else ".")
    )
    sentences.append(shape)
    return out + "\n\n" + " ".join(sentences) + "\n\n" + source(r)


TABLES = {
    "maglev-balance": t_balance,
    "maglev-populate": t_populate,
    "maglev-fig12": t_fig12,
    "maglev-bounds": t_bounds,
    "maglev-paper": t_paper,
}
