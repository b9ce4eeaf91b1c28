"""Generated tables of docs/flowstate.md, from docs/results/ (see scripts/results.py).

Every block reads the stored run docs/results/flowstate.json (`flowplane-bench flowstate`). The
tables iterate over what the records contain (workloads, table sizings, offered loads, sweep points),
so a `--quick` run or one with other sizes still renders; an essential case that is missing raises
a KeyError naming it. Sentences that cite figures or draw a conclusion (met / not met, agree /
disagree, faster / slower) are computed here from the same records.
"""

from .common import stored, num, ratio, size, table, source  # noqa: F401

RUN = "flowstate"

# The benchmark's traces: 1000-byte packets at 100 Gbit/s, i.e. 12.5 M packets/s.
PPS_100G = 12.5e6
# The target of the design: 1-pkt insertions per second per core.
TARGET = 10.0
# Bytes of the table: 32-byte slots in two arrays, one 16-byte cell per index holding the transient
# and ordering counters (the benchmark sizes both arrays alike).
SLOT_BYTES, CELL_BYTES = 32, 16
# `Config::default()`'s bound on the passes of a data packet.
MAX_PASSES = 32


# ---------------------------------------------------------------------------------------------
# Helpers


def _run(runs):
    return stored(runs, RUN)


def _need(r, case, **params):
    rs = r.find(case, **params)
    if not rs:
        raise KeyError(f"{r.name}: no record {case} {params}")
    return rs


def _uniq(xs):
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


def _g(x, digits=4):
    """`digits` significant digits without trailing zeros (0 prints as 0)."""
    if x is None:
        return ""
    s = num(x, digits)
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def _n(x):
    """4 significant digits, as the harness rounds them (trailing zeros kept: 1.000, 100.0)."""
    return num(x, 4)


def _cnt(n):
    n = int(round(n))
    return f"{n:,}".replace(",", " ")


def _pct(x):
    return "0" if x == 0 else f"{_g(x)} %"


def _drop(x):
    return "0" if x == 0 else f"{x:.1f}"


def _rng(vals, f=_g):
    vals = list(vals)
    lo, hi = min(vals), max(vals)
    return f(lo) if f(lo) == f(hi) else f"{f(lo)}-{f(hi)}"


def _expiry(us):
    if us >= 1000:
        return f"{_g(us / 1000)} ms"
    return f"{_g(us)} us"


def _mem(n):
    if n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n % (1 << 10) == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def _sizing(p):
    """`paper (32K slots per array, 3 MiB)` from a throughput record's params."""
    slots, cells = p.get("slots_per_array"), p.get("cells")
    if slots is None or cells is None:
        return p.get("table", "?")
    return f"{p.get('table', '?')} ({size(slots)} slots per array, {_mem(2 * slots * SLOT_BYTES + cells * CELL_BYTES)})"


def _join(xs, conj="and"):
    xs = list(xs)
    if len(xs) <= 1:
        return "".join(xs)
    return ", ".join(xs[:-1]) + f" {conj} " + xs[-1]


def _x(v):
    return f"{v:.2f}x"


# ---------------------------------------------------------------------------------------------
# Throughput on one core (and on several)


def _thr_rows(r):
    """(params, mpps, insert, ns, cpu or None, p999 or None, max or None) of every 1-thread case."""
    out = []
    for m in _need(r, "flowlet_mpps", threads=1):
        p = m["params"]
        key = dict(workload=p["workload"], table=p["table"], threads=1)
        ins = r.one("insert_rate", **key)
        ns = r.one("ns_per_packet", **key)
        cpu = r.find("cpu_ns_per_packet", **key)
        p999 = r.find("batch_p999_ns", **key)
        mx = r.find("batch_max_ns", **key)
        out.append((p, m, ins, ns, cpu[0] if cpu else None, p999[0] if p999 else None, mx[0] if mx else None))
    return out


def t_throughput(runs):
    r = _run(runs)
    rows, data = [], _thr_rows(r)
    for p, m, ins, ns, cpu, p999, _ in data:
        ours_ns = _n(ns["value"]) + (f" ({_n(cpu['value'])})" if cpu else "")
        peer_ns = _n(ns["peer_value"]) + (f" ({_n(cpu['peer_value'])})" if cpu else "")
        lat = f"{_g(p999['value'] / 1000, 3)} / {_g(p999['peer_value'] / 1000, 3)}" if p999 else ""
        rows.append(
            [
                p["workload"],
                _sizing(p),
                _n(m["value"]),
                _n(m["peer_value"]),
                ratio(m.get("ratio")),
                _n(ins["value"]),
                _n(ins["peer_value"]),
                ours_ns,
                peer_ns,
                lat,
            ]
        )
    out = table(
        [
            "workload",
            "table",
            "ours Mpps",
            "hashbrown Mpps",
            "ratio",
            "ours Minsert/s",
            "hashbrown Minsert/s",
            "ours ns/pkt (on-CPU)",
            "hashbrown ns/pkt (on-CPU)",
            "batch p99.9 ours / hashbrown (us)",
        ],
        rows,
        ["---", "---"] + ["---:"] * 8,
    )

    # What the table says, in words.
    n = len(data)
    faster = [(p, m) for p, m, *_ in data if m["value"] > m["peer_value"]]
    cheap = min(data, key=lambda x: x[3]["peer_value"])[0]["workload"]
    rare = min(data, key=lambda x: x[2]["value"] / x[1]["value"])[0]["workload"]
    words = [
        f"On one core the Switcharoo Flowlet costs {_rng(x[3]['value'] for x in data)} ns per packet, "
        f"the synchronous hashbrown table {_rng(x[3]['peer_value'] for x in data)} ns "
        f"(cheapest: {cheap}{', where insertions are rarest' if cheap == rare else ''})."
    ]
    if not faster:
        words.append(f"Ours is slower in all {n} cases (ratio {_rng((x[1]['ratio'] for x in data), ratio)}).")
    elif len(faster) == n:
        words.append(f"Ours is faster in all {n} cases (ratio {_rng((x[1]['ratio'] for x in data), ratio)}).")
    else:
        slower = [x for x in data if x[1]["value"] <= x[1]["peer_value"]]
        words.append(
            f"Ours is slower in {len(slower)} of {n} cases (ratio {_rng((x[1]['ratio'] for x in slower), ratio)}) and faster in "
            + _join(f"{p['workload']} with the {p['table']} table ({ratio(m['ratio'])})" for p, m in faster)
            + "."
        )
    lat = [x for x in data if x[5] is not None]
    if lat:
        # Lower is better for latency: the record's ratio is hashbrown / ours.
        better = [x for x in lat if x[5]["value"] < x[5]["peer_value"]]
        worse = [x for x in lat if x[5]["value"] >= x[5]["peer_value"]]
        s = "What the bounded passes buy is the tail: the per-batch p99.9 is "
        def who(xs):
            out = []
            for w in _uniq(x[0]["workload"] for x in xs):
                mine = [x for x in xs if x[0]["workload"] == w]
                alls = [x for x in lat if x[0]["workload"] == w]
                out.append(w if len(mine) == len(alls) else _join(f"{w} {x[0]['table']}" for x in mine))
            return _join(out)

        if better and not worse:
            s += f"lower than hashbrown's in every case (hashbrown / ours {_rng((x[5]['ratio'] for x in better), ratio)})."
        elif worse and not better:
            s = f"The per-batch p99.9 is not lower than hashbrown's in any case (hashbrown / ours {_rng((x[5]['ratio'] for x in worse), ratio)})."
        else:
            s += (
                f"lower than hashbrown's for {who(better)} (hashbrown / ours {_rng((x[5]['ratio'] for x in better), ratio)}), "
                f"but not for {who(worse)} ({_rng((x[5]['ratio'] for x in worse), ratio)})."
            )
        words.append(s)
    mx = [x for x in data if x[6] is not None]
    if mx:
        words.append(
            f"The per-batch maxima (not tabulated) are {_rng((x[6]['value'] / 1000 for x in mx), lambda v: _g(v, 3))} us for ours and "
            f"{_rng((x[6]['peer_value'] / 1000 for x in mx), lambda v: _g(v, 3))} us for hashbrown: one batch's maximum includes any "
            "descheduling of the thread on the shared machine, so it is not a property of either table."
        )
    out += "\n\n" + " ".join(words)

    # Several threads, trace split by 5-tuple hash (one run each).
    multi = [x for x in r.find("flowlet_mpps") if x["params"].get("threads", 1) > 1]
    if multi:
        rows, keep = [], []
        for m in multi:
            p = m["params"]
            key = dict(workload=p["workload"], table=p["table"], threads=p["threads"])
            pc = r.one("insert_rate_per_core", **key)
            one = r.find("insert_rate", workload=p["workload"], table=p["table"], threads=1)
            own = pc["value"] / one[0]["value"] if one else None
            peer = pc["peer_value"] / one[0]["peer_value"] if one and one[0].get("peer_value") else None
            keep.append((own, peer))
            rows.append(
                [
                    p["workload"],
                    _sizing(p),
                    str(p["threads"]),
                    _n(m["value"]),
                    _n(m["peer_value"]),
                    ratio(m.get("ratio")),
                    _n(pc["value"]),
                    _n(pc["peer_value"]),
                    "" if own is None else ratio(own),
                    "" if peer is None else ratio(peer),
                ]
            )
        out += "\n\nSeveral threads, the trace split by 5-tuple hash over pinned threads (one run each, not best-of):\n\n" + table(
            [
                "workload",
                "table",
                "threads",
                "ours Mpps",
                "hashbrown Mpps",
                "ratio",
                "ours Minsert/s per core",
                "hashbrown Minsert/s per core",
                "ours per core / 1 thread",
                "hashbrown per core / 1 thread",
            ],
            rows,
            ["---", "---"] + ["---:"] * 8,
        )
        own = [a for a, _ in keep if a is not None]
        peer = [b for _, b in keep if b is not None]
        if own:
            out += (
                f"\n\nPer core, ours kept {_rng(own, ratio)} of its one-thread insertion rate"
                + (f", hashbrown {_rng(peer, ratio)}" if peer else "")
                + " (the threads share caches, memory bandwidth and a machine that also runs other jobs)."
            )
    return out + "\n\n" + source(r)


# ---------------------------------------------------------------------------------------------
# Fig. 4: offered load


def _load(r):
    recs = _need(r, "handled_insert_rate")
    loads = sorted(_uniq(x["params"]["offered_gbps"] for x in recs))
    works = _uniq(x["params"]["workload"] for x in recs)
    at = {(x["params"]["workload"], x["params"]["offered_gbps"]): x for x in recs}
    return recs, loads, works, at


def _overflow(x):
    p = x["params"]
    return p.get("rx_drop_pct", 0) > 0 or p.get("peer_rx_drop_pct", 0) > 0


def t_load(runs):
    r = _run(runs)
    recs, loads, works, at = _load(r)
    mpps = {x["params"]["offered_gbps"]: x["params"].get("offered_mpps") for x in recs}
    header = ["offered Gbit/s (Mpps)"] + [f"{_g(g)} ({_g(mpps[g])})" if mpps[g] is not None else _g(g) for g in loads]
    rows = []
    for w in works:
        rows.append([f"{w} M/s"] + [f"{_g(at[w, g]['value'])} / {_g(at[w, g]['peer_value'])}" if (w, g) in at else "" for g in loads])
        rows.append(
            [f"{w} ring drops %"]
            + [
                f"{_drop(at[w, g]['params']['rx_drop_pct'])} / {_drop(at[w, g]['params']['peer_rx_drop_pct'])}" if (w, g) in at else ""
                for g in loads
            ]
        )
    out = table(header, rows, ["---"] + ["---:"] * len(loads))

    words = []
    # Up to which load neither side overflowed, per workload.
    clean = {}
    for w in works:
        ok = None
        for g in loads:
            if (w, g) not in at or _overflow(at[w, g]):
                break
            ok = g
        clean[w] = ok
    groups = {}
    for w in works:
        groups.setdefault(clean[w], []).append(w)
    parts = [f"{_g(g)} Gbit/s for {_join(ws)}" for g, ws in groups.items() if g is not None]
    calm = [x for x in recs if not _overflow(x)]
    if parts:
        s = "No packet overflowed the receive ring for either table up to " + _join(parts, "and up to")
        if calm:
            dev = max(abs(1 - x["ratio"]) for x in calm if x.get("ratio") is not None) * 100
            s += f"; at those points both handled the same insertion rate within {_g(max(dev, 0.01), 2)} %"
        words.append(s + ".")
    over = [x for x in recs if _overflow(x)]
    if over:
        best = max(over, key=lambda x: x["value"])
        pbest = max(over, key=lambda x: x["peer_value"])
        more = [x for x in over if x["value"] > x["peer_value"]]
        words.append(
            "Beyond that one core saturates: per workload, ours handled "
            + "; ".join(
                f"{w} {_rng(x['value'] for x in over if x['params']['workload'] == w)} M/s"
                for w in works
                if any(x["params"]["workload"] == w for x in over)
            )
            + f" (most: {_g(best['value'])} M/s, {best['params']['workload']} at {_g(best['params']['offered_gbps'])} Gbit/s; "
            f"hashbrown's most: {_g(pbest['peer_value'])} M/s, {pbest['params']['workload']} at {_g(pbest['params']['offered_gbps'])} Gbit/s)."
            f" Ours handled more than hashbrown at {len(more)} of the {len(over)} overloaded points (ratio {_rng((x['ratio'] for x in over), ratio)})."
        )
    st = [x for x in recs if "stalled_pct" in x["params"]]
    if st:
        a = max(st, key=lambda x: x["params"]["stalled_pct"])
        b = max(st, key=lambda x: x["params"].get("peer_stalled_pct", 0))
        words.append(
            f"The time removed as descheduling was at most {_g(a['params']['stalled_pct'], 2)} % of a replay for ours "
            f"({a['params']['workload']}, {_g(a['params']['offered_gbps'])} Gbit/s) and {_g(b['params']['peer_stalled_pct'], 2)} % for hashbrown "
            f"({b['params']['workload']}, {_g(b['params']['offered_gbps'])} Gbit/s); shorter stalls stay in the measurement."
        )
    if words:
        out += "\n\n" + " ".join(words)
    return out + "\n\n" + source(r)


# ---------------------------------------------------------------------------------------------
# Figs. 5-7: sweeps


SWEEP_X = {"size": "slots_per_array", "expiry": "expiry_us", "ordering": "ordering_cells"}
SWEEP_CASES = ("recirc_gbps", "swap_pass_pct", "recirc_per_insert", "evicted")


def _sweep(r, sweep):
    """(workloads, xs, {(workload, x): {case: record}}) of one sweep."""
    cells, works, xs = {}, [], []
    for case in SWEEP_CASES:
        for rec in r.find(case, sweep=sweep):
            p = rec["params"]
            w, x = p["workload"], p[SWEEP_X[sweep]]
            works.append(w)
            xs.append(x)
            cells.setdefault((w, x), {})[case] = rec
    if not cells:
        raise KeyError(f"{r.name}: no records of the {sweep} sweep (case recirc_gbps, sweep={sweep})")
    return _uniq(works), sorted(_uniq(xs)), cells


def _c(cells, w, x, case):
    rec = cells.get((w, x), {}).get(case)
    return rec


def _swaps(rec):
    if rec is None:
        return ""
    s = rec["params"].get("swaps")
    if rec["value"] == 0:
        return "0"
    return f"{_g(rec['value'])} %" + (f" ({_cnt(s)})" if s is not None else "")


def _val(rec, f=_n):
    return "" if rec is None else f(rec["value"])


def _inserts_line(works, xs, cells, label):
    parts = []
    for w in works:
        ins = [(x, _c(cells, w, x, "swap_pass_pct")) for x in xs]
        ins = [(x, rec["params"]["inserts"]) for x, rec in ins if rec is not None and "inserts" in rec["params"]]
        if not ins:
            continue
        vals = _uniq(v for _, v in ins)
        parts.append(f"{_cnt(vals[0])} ({w})" if len(vals) == 1 else f"{_rng((v for v in vals), _cnt)} ({w}, by {label})")
    pk = _uniq(rec["params"]["packets"] for rec in (c.get("recirc_gbps") for c in cells.values()) if rec is not None and "packets" in rec["params"])
    if not parts:
        return ""
    return "Insertions per run: " + ", ".join(parts) + (f" of {_rng(pk, _cnt)} packets." if pk else ".")


def t_size(runs):
    r = _run(runs)
    works, xs, cells = _sweep(r, "size")
    header = ["slots per array"]
    for w in works:
        header += [f"{w} Gbit/s", f"{w} swaps / insertions", f"{w} passes / ins."]
    rows = []
    for x in xs:
        row = [size(int(x))]
        for w in works:
            row += [_val(_c(cells, w, x, "recirc_gbps")), _swaps(_c(cells, w, x, "swap_pass_pct")), _val(_c(cells, w, x, "recirc_per_insert"))]
        rows.append(row)
    some = next(iter(cells.values()))["recirc_gbps"]["params"]
    out = (
        f"Against cuckoo slots per array (expiry {_expiry(some['expiry_us'])}, {size(some['ordering_cells'])} ordering cells):\n\n"
        + table(header, rows, ["---:"] * len(header))
    )
    line = _inserts_line(works, xs, cells, "size")
    return out + ("\n\n" + line if line else "") + "\n\n" + source(r)


def t_expiry(runs):
    r = _run(runs)
    works, xs, cells = _sweep(r, "expiry")
    header = ["expiry"]
    for w in works:
        header += [f"{w} Gbit/s", f"{w} swaps / ins.", f"{w} passes / ins.", f"{w} evicted"]
    rows = []
    for x in xs:
        row = [_expiry(x)]
        for w in works:
            ev = _c(cells, w, x, "evicted")
            row += [
                _val(_c(cells, w, x, "recirc_gbps")),
                _swaps(_c(cells, w, x, "swap_pass_pct")),
                _val(_c(cells, w, x, "recirc_per_insert")),
                "" if ev is None else _cnt(ev["value"]),
            ]
        rows.append(row)
    some = next(iter(cells.values()))["recirc_gbps"]["params"]
    out = (
        f"Against the entry expiry ({size(some['slots_per_array'])} slots per array); \"evicted\" = live entries dropped because "
        "their swap chain reached `max_swap_passes` (16), reported by the table:\n\n" + table(header, rows, ["---:"] * len(header))
    )
    # Insertions and packets per run.
    rows = []
    for x in xs:
        pk = _uniq(c["params"]["packets"] for c in (_c(cells, w, x, "recirc_gbps") for w in works) if c is not None)
        row = [_expiry(x), _rng(pk, _cnt) if pk else ""]
        for w in works:
            s = _c(cells, w, x, "swap_pass_pct")
            row.append("" if s is None else _cnt(s["params"].get("inserts", 0)))
        rows.append(row)
    out += "\n\nInsertions per run:\n\n" + table(["expiry", "packets"] + [f"{w} insertions" for w in works], rows, ["---:"] * (2 + len(works)))

    words = []
    drops = sum(c["evicted"]["params"].get("drops", 0) for c in cells.values() if "evicted" in c)
    words.append("No packet was dropped at any expiry." if drops == 0 else f"{_cnt(drops)} packets were dropped in all.")
    for w in works:
        ev = [(x, _c(cells, w, x, "evicted")) for x in xs]
        ev = [(x, rec["value"]) for x, rec in ev if rec is not None and rec["value"] > 0]
        pi = [(x, _c(cells, w, x, "recirc_per_insert")) for x in xs]
        pi = [(x, rec["value"]) for x, rec in pi if rec is not None]
        if not ev:
            words.append(f"{w}: no entry evicted at any expiry.")
            continue
        x0, n0 = ev[0]
        s = f"{w}: first evictions at {_expiry(x0)} ({_cnt(n0)})"
        if w == "1-pkt":
            slots = 2 * int(some["slots_per_array"])
            s += f", where the live set is about {_cnt(PPS_100G * x0 / 1e6)} flows (12.5 M new flows/s x {_expiry(x0)}) for {_cnt(slots)} slots"
        xm, pm = max(pi, key=lambda t: t[1])
        s += f"; at most {_g(pm)} passes per insertion ({_expiry(xm)})."
        words.append(s)
    return out + "\n\n" + " ".join(words) + "\n\n" + source(r)


def t_ordering(runs):
    r = _run(runs)
    works, xs, cells = _sweep(r, "ordering")
    some = next(iter(cells.values()))["recirc_gbps"]["params"]
    sw = []
    for w in works:
        s = [_c(cells, w, x, "swap_pass_pct") for x in xs]
        s = [rec["params"].get("swaps") for rec in s if rec is not None]
        if s:
            sw.append(f"{w}: {_cnt(s[0])} at every size" if len(_uniq(s)) == 1 else f"{w}: {_rng(s, _cnt)}")
    intro = (
        f"Against the ordering-array size ({size(some['slots_per_array'])} slots per array, expiry {_expiry(some['expiry_us'])}); "
        f"swaps per run: {'; '.join(sw)}.\n\n"
    )
    header = ["ordering cells"]
    for w in works:
        header += [f"{w} Gbit/s", f"{w} passes / insertion", f"{w} max passes"]
    rows = []
    for x in xs:
        row = [size(int(x))]
        for w in works:
            ev = _c(cells, w, x, "evicted")
            row += [
                _val(_c(cells, w, x, "recirc_gbps")),
                _val(_c(cells, w, x, "recirc_per_insert")),
                "" if ev is None else str(ev["params"].get("max_passes", "")),
            ]
        rows.append(row)
    return intro + table(header, rows, ["---:"] * len(header)) + "\n\n" + source(r)


# ---------------------------------------------------------------------------------------------
# Fig. 9: reordering


def _sched(s):
    return {"switch": "switch (1.5 us recirculation)"}.get(s, s)


def t_reorder(runs):
    r = _run(runs)
    recs = _need(r, "out_of_order_pct")
    sizes = sorted(_uniq(x["params"]["slots_per_array"] for x in recs))
    keys = _uniq((x["params"]["schedule"], x["params"]["ordering"]) for x in recs)
    at = {(x["params"]["schedule"], x["params"]["ordering"], x["params"]["slots_per_array"]): x for x in recs}
    rows = []
    for s, o in keys:
        row = [_sched(s), "on (`Strict`)" if o == "on" else "off (`Unordered`)"]
        for n in sizes:
            x = at.get((s, o, n))
            if x is None:
                row.append("")
            else:
                c = x["params"].get("out_of_order", 0)
                row.append("0" if c == 0 else f"{_cnt(c)} ({_g(x['value'])} %)")
        rows.append(row)
    out = table(["schedule", "ordering arrays"] + [f"{size(n)}" for n in sizes[:-1]] + [f"{size(sizes[-1])} slots per array"], rows, ["---", "---"] + ["---:"] * len(sizes))
    pk = _uniq(x["params"].get("packets") for x in recs if x["params"].get("packets"))
    wl = _uniq(x["params"].get("workload") for x in recs)
    words = [f"Out-of-order packets of {_rng(pk, _cnt)} ({_join(wl)} flows at 100 Gbit/s)." if pk else ""]
    on = [x for x in recs if x["params"]["ordering"] == "on"]
    tot = sum(x["params"].get("out_of_order", 0) for x in on)
    if on:
        words.append(
            "With the ordering arrays nothing is reordered in either schedule."
            if tot == 0
            else f"With the ordering arrays {_cnt(tot)} packets were reordered in all."
        )
    parts = []
    for s in _uniq(x["params"]["schedule"] for x in recs):
        off = [x for x in recs if x["params"]["ordering"] == "off" and x["params"]["schedule"] == s]
        if not off:
            continue
        c = [x["params"].get("out_of_order", 0) for x in off]
        if max(c) == 0:
            parts.append(f"the {s} schedule reorders nothing at any size")
        else:
            v = [x["value"] for x in off]
            const = max(c) - min(c) <= max(1, max(c) // 100)
            t = f"the {s} schedule reorders {_rng(c, _cnt)} packets ({_rng(v)} %)"
            if const:
                t += ", about the same at every table size"
            elif (s, "off", sizes[0]) in at and (s, "off", sizes[-1]) in at:
                t += (
                    f", {_cnt(at[s, 'off', sizes[0]]['params']['out_of_order'])} at {size(sizes[0])} and "
                    f"{_cnt(at[s, 'off', sizes[-1]]['params']['out_of_order'])} at {size(sizes[-1])} slots per array"
                )
            parts.append(t)
    if parts:
        words.append("Without them " + "; ".join(parts) + ".")
    return out + "\n\n" + " ".join(w for w in words if w) + "\n\n" + source(r)


# ---------------------------------------------------------------------------------------------
# Fig. 10a: passes per packet


def _passes(r, mode):
    recs = r.find("passes_pct", mode=mode)
    works = _uniq(x["params"]["workload"] for x in recs)
    bins = _uniq(x["params"]["passes"] for x in recs)
    at = {(x["params"]["workload"], x["params"]["passes"]): x["value"] for x in recs}
    mx = {x["params"]["workload"]: x for x in r.find("max_passes", mode=mode)}
    return works, bins, at, mx


def t_passes(runs):
    r = _run(runs)
    _need(r, "passes_pct", mode="Strict")
    works, bins, at, mx = _passes(r, "Strict")
    rows = []
    for w in works:
        m = mx.get(w)
        rows.append(
            [w]
            + [_pct(at[w, b]) if (w, b) in at else "" for b in bins]
            + ["" if m is None else _g(m["params"].get("mean", 0), 5), "" if m is None else _cnt(m["value"])]
        )
    head = [f"{b} pass" if b == "1" else (b if b.endswith("+") else f"{b} passes") for b in bins]
    out = table(["workload"] + head + ["mean passes", "max"], rows, ["---"] + ["---:"] * (len(bins) + 2))
    others = [m for m in _uniq(x["params"]["mode"] for x in r.find("passes_pct")) if m != "Strict"]
    words = []
    for mode in others:
        w2, b2, at2, mx2 = _passes(r, mode)
        diff = [k for k in set(at) | set(at2) if at.get(k) != at2.get(k)]
        diff += [w for w in set(mx) | set(mx2) if (mx.get(w) or {}).get("value") != (mx2.get(w) or {}).get("value")]
        if not diff:
            words.append(f"`{mode}` mode gave identical figures in this (software) schedule.")
        else:
            dev = max((abs(at.get(k, 0) - at2.get(k, 0)) for k in set(at) | set(at2)), default=0)
            words.append(f"`{mode}` mode differed (largest difference in a share: {_g(dev)} percentage points).")
    return out + ("\n\n" + " ".join(words) if words else "") + "\n\n" + source(r)


# ---------------------------------------------------------------------------------------------
# Consistency and termination


def _viol(x):
    p = x["params"]
    parts = [(p.get("lost_state", 0), "lost state"), (p.get("foreign_state", 0), "foreign state"), (p.get("update_order", 0), "update-order")]
    parts = [f"{_cnt(n)} {what}" for n, what in parts if n]
    if x["value"] == 0:
        return "0"
    return " + ".join(parts) + " violations" if parts else _cnt(x["value"])


def t_consistency(runs):
    r = _run(runs)
    recs = _need(r, "consistency_violations")
    cols = _uniq((x["params"]["schedule"], x["params"]["mode"]) for x in recs)
    works = _uniq(x["params"]["workload"] for x in recs)
    at = {(x["params"]["workload"], x["params"]["schedule"], x["params"]["mode"]): x for x in recs}
    rows = []
    for w in works:
        rows.append([w] + [_viol(at[w, s, m]) if (w, s, m) in at else "" for s, m in cols])
    out = table(["workload"] + [f"{s}, {m}" for s, m in cols], rows, ["---"] + ["---:"] * len(cols))
    tot = lambda k: sum(x["params"].get(k, 0) for x in recs)  # noqa: E731
    quiet = [what for k, what in (("lost_state", "lost a state"), ("foreign_state", "read a foreign one"), ("evicted", "evicted an entry")) if tot(k) == 0]
    s = "(consistency violations = lost state + foreign state + update out of arrival order"
    if quiet:
        s += "; no run " + _join(quiet, "or")
    oo = tot("out_of_order")
    s += "; all had 0 out-of-order packets.)" if oo == 0 else f"; {_cnt(oo)} out-of-order packets in all.)"
    words = [s]
    for mode in _uniq(x["params"]["mode"] for x in recs):
        v = [x for x in recs if x["params"]["mode"] == mode]
        bad = [x for x in v if x["value"] > 0]
        if not bad:
            words.append(f"`{mode}` never violated consistency.")
        else:
            words.append(
                f"`{mode}` did, in "
                + _join(f"{x['params']['workload']} ({x['params']['schedule']} schedule: {_viol(x)})" for x in bad)
                + "."
            )
    return out + "\n\n" + " ".join(words) + "\n\n" + source(r)


def _consistency_summary(r):
    """One sentence: violations by mode and schedule."""
    recs = _need(r, "consistency_violations")
    out = []
    for mode in _uniq(x["params"]["mode"] for x in recs):
        v = [x for x in recs if x["params"]["mode"] == mode]
        scheds = _uniq(x["params"]["schedule"] for x in v)
        bad = [x for x in v if x["value"] > 0]
        if not bad:
            out.append(f"`{mode}` had 0 consistency violations in {len(v)} audited runs ({_join(scheds)} schedules)")
        else:
            per = {}
            for x in bad:
                per.setdefault(x["params"]["schedule"], []).append(f"{_cnt(x['value'])} ({x['params']['workload']})")
            clean = [s for s in scheds if s not in per]
            out.append(
                f"`{mode}` had "
                + "; ".join(f"{_join(v)} violations in the {s} schedule" for s, v in per.items())
                + (f" and none in the {_join(clean)} one" if clean else "")
            )
    return "; ".join(out)


def t_lemma(runs):
    r = _run(runs)
    return "In the stored benchmark run (see \"Consistency and termination\"), " + _consistency_summary(r) + ".\n\n" + source(r)


def t_termination(runs):
    r = _run(runs)
    ev = _need(r, "evicted")
    drops = sum(x["params"].get("drops", 0) for x in ev)
    oo = sum(x["params"].get("out_of_order", 0) for x in ev)
    cv = sum(x["params"].get("consistency_violations", 0) for x in ev)
    mp = max(x["params"].get("max_passes", 0) for x in ev)
    where = _uniq(
        f"{x['params']['workload']}, {x['params']['sweep']} sweep at "
        + (_expiry(x["params"]["expiry_us"]) if x["params"]["sweep"] == "expiry" else size(int(x["params"][SWEEP_X[x["params"]["sweep"]]])))
        for x in ev
        if x["params"].get("max_passes", 0) == mp
    )
    s = (
        f"Termination: in all {len(ev)} sweep runs "
        + ("no packet was dropped (for any reason)" if drops == 0 else f"{_cnt(drops)} packets were dropped")
        + (", none left out of order" if oo == 0 else f", {_cnt(oo)} left out of order")
        + (" and there was no consistency violation" if cv == 0 else f" and there were {_cnt(cv)} consistency violations")
        + f"; the most passes any packet took was {mp} ({'; '.join(where[:4])}{'; ...' if len(where) > 4 else ''}), against the limit of {MAX_PASSES}"
    )
    fm = r.find("max_passes")
    if fm:
        s += f"; in the Fig. 10a runs the maximum was {_cnt(max(x['value'] for x in fm))}"
    return s + ".\n\n" + source(r)


# ---------------------------------------------------------------------------------------------
# The target


def _verdict(v):
    return f"**met** ({_x(v / TARGET)})" if v >= TARGET else f"not met ({_x(v / TARGET)})"


def t_target(runs):
    r = _run(runs)
    rows, met, missed = [], [], []

    def add(what, table_, v, extra=""):
        rows.append([what, table_, _g(v) + extra, _verdict(v)])
        (met if v >= TARGET else missed).append(f"{what} with the {table_.split(' ')[0]} table")

    one = _need(r, "insert_rate", workload="1-pkt", threads=1)
    for x in one:
        rounds = x["params"].get("rounds", "")
        add(f"unpaced, 1 thread{', best of alternating rounds' if 'best' in rounds else ''} (`insert_rate`)", _sizing(x["params"]), x["value"])
    for x in r.find("insert_rate_per_core", workload="1-pkt"):
        add(f"unpaced, {x['params']['threads']} threads, one run (`insert_rate_per_core`)", _sizing(x["params"]), x["value"])
    for x in sorted(r.find("handled_insert_rate", workload="1-pkt"), key=lambda x: x["params"]["offered_gbps"]):
        p = dict(x["params"])
        like = r.find("flowlet_mpps", table=p.get("table", "sized"))
        if like:
            p.setdefault("slots_per_array", like[0]["params"].get("slots_per_array"))
            p.setdefault("cells", like[0]["params"].get("cells"))
        if p.get("offered_mpps", 0) < TARGET:
            continue  # an offered rate below the target cannot show it
        drop = p.get("rx_drop_pct", 0)
        add(
            f"real time, {_g(p['offered_gbps'])} Gbit/s offered = {_g(p['offered_mpps'])} M/s (Fig. 4, `handled_insert_rate`)",
            _sizing(p),
            x["value"],
            f" ({_drop(drop)} % ring drops)" if drop else " (no ring drops)",
        )
    out = table(["measurement", "table", "M insertions/s per core", f"against {_g(TARGET)} M/s"], rows, ["---", "---", "---:", "---"])

    words = []
    if met and not missed:
        words.append("The target is met in every recorded configuration.")
    elif not met:
        words.append("The target is met in no recorded configuration.")
    else:
        words.append(f"The target is met in {len(met)} of {len(rows)} recorded measurements; missed by: " + "; ".join(missed) + ".")
    # The other conditions, from the audited trace-time runs.
    fm = r.find("max_passes", workload="1-pkt", mode="Strict")
    ev = r.find("evicted", workload="1-pkt")
    cons = r.find("consistency_violations", workload="1-pkt", mode="Strict")
    bits = []
    if fm:
        bits.append(f"every 1-pkt packet at 100 Gbit/s left within {_cnt(max(x['value'] for x in fm))} passes (Fig. 10a)")
    if ev:
        bits.append(f"at most {max(x['params'].get('max_passes', 0) for x in ev)} in any 1-pkt sweep run (limit {MAX_PASSES})")
    oo = sum(x["params"].get("out_of_order", 0) for x in ev + cons)
    cv = sum(x["params"].get("consistency_violations", 0) for x in ev) + sum(x["value"] for x in cons)
    bits.append(f"{_cnt(oo)} out-of-order packets and {_cnt(cv)} consistency violations in `Strict` mode")
    words.append(
        "The other conditions are checked in the audited trace-time runs of the same table (the timed runs only count drops): "
        + ", ".join(bits)
        + "."
    )
    return out + "\n\n" + " ".join(words) + "\n\n" + source(r)


# ---------------------------------------------------------------------------------------------
# Comparison with the paper (§5)


def _within(vals, ref, tol):
    return all(abs(v - ref) <= tol * ref for v in vals)


def t_paper(runs):
    r = _run(runs)
    out = []

    # Fig. 4 / Q1.
    recs, loads, works, at = _load(r)
    w1 = [x for x in recs if x["params"]["workload"] == "1-pkt"]
    if w1:
        clean = [x for x in w1 if not _overflow(x)]
        s = "* **Fig. 4 / Q1 (insertions per second).** Paper: insertions scale linearly with the input, 50 M/s at 400 Gbit/s for 1-pkt. Here they scale linearly only while the core keeps up"
        if clean:
            top = max(clean, key=lambda x: x["params"]["offered_gbps"])
            s += f": up to {_g(top['params']['offered_gbps'])} Gbit/s ({_g(top['value'])} M/s for 1-pkt, no ring drops)"
        over = sorted((x for x in w1 if _overflow(x)), key=lambda x: x["params"]["offered_gbps"])
        if over:
            a = over[0]
            s += (
                f"; at {_g(a['params']['offered_gbps'])} Gbit/s one core handles {_g(a['value'])} M/s of {_g(a['params']['offered_mpps'])} M/s offered "
                f"({_g(a['params']['rx_drop_pct'], 3)} % ring drops)"
            )
        q = [x for x in w1 if x["params"]["offered_gbps"] == 400]
        if q:
            f = 50 / q[0]["value"]
            if over and over[0] is q[0]:
                s += f", {_g(f, 2)}x below the paper's 50 M/s"
            else:
                s += f" and at 400 Gbit/s {_g(q[0]['value'])} M/s, {_g(f, 2)}x below the paper's 50 M/s"
        best = max(_need(r, "insert_rate", workload="1-pkt", threads=1), key=lambda x: x["value"])
        s += f". Unpaced, the best single-core rate is {_g(best['value'])} M insertions/s (1-pkt, {best['params']['table']} table)."
        if over:
            more = [x for x in over if x["peer_value"] > x["value"]]
            s += (
                f" A plain synchronous hashbrown table on the same core handled more than ours at {len(more)} of {len(over)} overloaded 1-pkt points"
                f" (hashbrown / ours {_rng((x['peer_value'] / x['value'] for x in over), ratio)})."
            )
        out.append(s)

    # Fig. 5a / Q2.
    works, xs, cells = _sweep(r, "size")
    paper_q2 = {"1-pkt": 100.0, "2-pkt": 50.0, "8-pkt": 20.0}
    agree, disagree = [], []
    for w in works:
        if w not in paper_q2:
            continue
        v = [c["recirc_gbps"]["value"] for (ww, _), c in cells.items() if ww == w and "recirc_gbps" in c]
        (agree if _within(v, paper_q2[w], 0.1) else disagree).append(f"{w} (paper about {_g(paper_q2[w])}, here {_rng(v)} Gbit/s at every size)")
    s = "* **Fig. 5a / Q2 (recirculation against table size).** "
    if agree:
        s += "Agree for " + _join(agree) + "."
    if disagree:
        s += (" " if agree else "") + "Disagree for " + _join(disagree) + "."
    p8 = r.find("passes_pct", workload="8-pkt", mode="Strict", passes="1")
    if p8 and any(w == "8-pkt" for w in works):
        s += (
            f" In 8-pkt traffic {_g(100 - p8[0]['value'])} % of packets recirculate (Fig. 10a): the first packet of each flow, 12.5 %, plus packets that"
            " wait behind it. (The paper's Q5 text gives 20 Gbps for 2-pkt and 50 Gbps for 8-pkt, the other way round; we compare with Q2's.)"
        )
    out.append(s)

    # Fig. 5b / Q3.
    first, fourk = xs[0], (4096 if 4096 in xs else None)
    sw = {(w, x): c["swap_pass_pct"] for (w, x), c in cells.items() if "swap_pass_pct" in c}
    at_first = [(w, sw[w, first]["value"]) for w in works if (w, first) in sw]
    most = max(at_first, key=lambda t: t[1])[0] if at_first else None
    s = (
        "* **Fig. 5b / Q3 (swaps against table size).** Paper: 2-pkt has the most swaps, \"about 1.2 swaps for each insertion\" at small tables, "
        "falling as the table grows until it reaches zero. Here "
        + ("the order agrees" if most == "2-pkt" else f"the order differs ({most} has the most)")
        + (" and swaps are far rarer" if at_first and max(v for _, v in at_first) < 120 else "")
        + f": at {size(int(first))} slots per array "
        + ", ".join(f"{w} {_g(v)} %" for w, v in at_first)
        + " of insertions"
    )
    if fourk is not None and fourk != first:
        s += f"; at {size(fourk)} " + ", ".join(f"{w} {_g(sw[w, fourk]['value'])} %" for w in works if (w, fourk) in sw)
    zero, never = [], []
    for w in works:
        z = [x for x in xs if (w, x) in sw and all(sw[w, y]["params"].get("swaps", 1) == 0 for y in xs if y >= x and (w, y) in sw)]
        if z:
            zero.append(f"{size(int(z[0]))} ({w})")
        elif (w, xs[-1]) in sw:
            last = sw[w, xs[-1]]["params"]
            never.append(f"{w} still had {_cnt(last.get('swaps', 0))} in {_cnt(last.get('inserts', 0))} insertions at {size(int(xs[-1]))}")
    s += "."
    if most == "1-pkt":
        s += " In our generator 1-pkt has the largest live set (every packet a new flow)."
    s += " The paper's smallest table size is not stated in its text, so its 1.2 may come from smaller tables than ours."
    if zero:
        s += " Zero is reached here at " + _join(zero) + ("; " + "; ".join(never) if never else "") + "."
    elif never:
        s += " Zero is not reached: " + "; ".join(never) + "."
    out.append(s)

    # Fig. 6 / Q4.
    works, xs, cells = _sweep(r, "expiry")

    def g(w, x, case="recirc_gbps"):
        c = cells.get((w, x), {}).get(case)
        return None if c is None else c["value"]

    base = 50.0 if 50.0 in xs else xs[0]
    s = (
        "* **Fig. 6 / Q4 (recirculation against expiry).** Paper: no extra recirculation up to 2 ms for any workload; extra from 5 ms for 1-pkt "
        "and 2-pkt, which drop packets at 100 ms; 8-pkt flat up to 20 ms and no drops up to 100 ms. Here:"
    )
    sub = []
    lo = xs[0]
    if lo < base:
        ws = [w for w in ("2-pkt", "8-pkt") if g(w, lo) is not None and g(w, base) is not None]
        if ws:
            higher = all(g(w, lo) > g(w, base) for w in ws)
            sub.append(
                f"below {_expiry(base)} the recirculation of {_join(ws)} is {'*higher*' if higher else 'not higher'} "
                f"({' and '.join(_g(g(w, lo)) for w in ws)} Gbit/s at {_expiry(lo)} against {' and '.join(_g(g(w, base)) for w in ws)} at {_expiry(base)})"
                + (", because an expiry shorter than the flow's packet gaps creates new insertions; the paper's text reports no such rise" if higher else "")
            )
    if 2000.0 in xs and g("1-pkt", 2000.0) is not None:
        v, b = g("1-pkt", 2000.0), g("1-pkt", base)
        sub.append(
            f"at 2 ms 1-pkt needs {_g(v)} Gbit/s ({'+' if v >= b else ''}{_g(100 * (v / b - 1), 2)} % over {_expiry(base)}) with "
            f"{_g(g('1-pkt', 2000.0, 'swap_pass_pct'))} swaps per 100 insertions and {_cnt(g('1-pkt', 2000.0, 'evicted'))} evictions"
        )
    if 5000.0 in xs and xs[-1] > 5000.0:
        hi = xs[-1]
        ws = [w for w in ("1-pkt", "2-pkt") if g(w, 5000.0) is not None and g(w, hi) is not None]
        drops = sum(c["evicted"]["params"].get("drops", 0) for c in cells.values() if "evicted" in c)
        ev = []
        for w in ws:
            first = next((x for x in xs if (g(w, x, "evicted") or 0) >= 0.1 * cells[w, x]["swap_pass_pct"]["params"].get("inserts", 1)), None)
            if first is not None:
                ev.append(f"{w}: {_cnt(g(w, first, 'evicted'))} of {_cnt(cells[w, first]['swap_pass_pct']['params']['inserts'])} insertions at {_expiry(first)}")
        sub.append(
            f"from 5 ms on, {_join(ws)} need much more ({' and '.join(_g(g(w, 5000.0)) for w in ws)} Gbit/s at 5 ms; "
            f"{' and '.join(_g(g(w, hi)) for w in ws)} at {_expiry(hi)}) as in the paper, "
            + ("but no packet is ever dropped: the overload shows up as evicted state instead (" + "; ".join(ev) + ")" if drops == 0 else f"and {_cnt(drops)} packets are dropped")
        )
    if g("8-pkt", base) is not None:
        b = g("8-pkt", base)
        flat = base
        for x in xs:
            if x >= base and g("8-pkt", x) is not None:
                if abs(g("8-pkt", x) / b - 1) <= 0.01:
                    flat = x
                else:
                    break
        after = [x for x in xs if x > flat and g("8-pkt", x) is not None]
        s8 = f"8-pkt is flat to {_expiry(flat)} ({_g(g('8-pkt', flat))} Gbit/s)"
        if after:
            s8 += ", then " + ", ".join(
                f"{_g(g('8-pkt', x))} at {_expiry(x)} ({_cnt(g('8-pkt', x, 'evicted'))} of {_cnt(cells['8-pkt', x]['swap_pass_pct']['params']['inserts'])} states evicted)"
                for x in after
            )
            if any((g("8-pkt", x, "evicted") or 0) > 0 for x in after):
                s8 += ", where the paper reports no drops up to 100 ms (it does not report state losses)"
        sub.append(s8)
    s += " " + " ".join(f"({chr(ord('a') + i)}) {t[0].upper() + t[1:]}." for i, t in enumerate(sub))
    out.append(s)

    # Fig. 7 / Q5.
    works, xs, cells = _sweep(r, "ordering")
    lo, hi = xs[0], xs[-1]

    def o(w, x, case="recirc_gbps"):
        c = cells.get((w, x), {}).get(case)
        return c

    if o("1-pkt", lo) and o("1-pkt", hi):
        v, b = o("1-pkt", lo)["value"], o("1-pkt", hi)["value"]
        ev = o("1-pkt", lo, "evicted")["params"]
        s = (
            f"* **Fig. 7 / Q5 (ordering-array size).** Paper: 1-pkt with 1K ordering entries has a \"dramatic increase\" in recirculated packets and drops packets. "
            f"Here 1-pkt at {size(int(lo))} ordering cells needs {_g(v)} Gbit/s ({'+' if v >= b else ''}{_g(100 * (v / b - 1), 2)} % over {size(int(hi))}), "
            f"{_g(o('1-pkt', lo, 'recirc_per_insert')['value'])} passes per insertion, at most {ev.get('max_passes')} passes, and "
            + ("drops nothing" if ev.get("drops", 0) == 0 else f"drops {_cnt(ev['drops'])} packets")
            + "."
        )
        ws = [w for w in ("2-pkt", "8-pkt") if o(w, lo) and o(w, hi)]
        if ws:
            s += (
                f" {_join(ws)} change little ({' and '.join(_g(o(w, lo)['value']) for w in ws)} at {size(int(lo))} vs "
                f"{' and '.join(_g(o(w, hi)['value']) for w in ws)} at {size(int(hi))}), as in the paper."
            )
        out.append(s)

    # Fig. 8 / Q6 and Fig. 10b / Q9.
    lat = r.find("batch_p999_ns", threads=1)
    s = (
        "* **Fig. 8 / Q6 and Fig. 10b / Q9 (latency).** Not reproduced: there is no end-to-end latency here, and a recirculation costs one pass "
        "(the next batch), not a fixed port latency."
    )
    if lat:
        v = [x["value"] / 1000 for x in lat]
        s += (
            f" The closest figure, the per-batch p99.9 on one core (the time to process a batch of 32, not a packet's end-to-end latency), "
            f"was {_rng(v, lambda t: _g(t, 3))} us on this machine, descheduling included; the paper's end-to-end values are all below 10 us."
        )
    out.append(s)

    # Fig. 9 / Q7.
    recs = r.find("out_of_order_pct")
    if recs:
        on = sum(x["params"].get("out_of_order", 0) for x in recs if x["params"]["ordering"] == "on")
        s = "* **Fig. 9 / Q7 (reordering).** " + (
            "Agree with ordering: 0 out-of-order packets at every size, in both schedules."
            if on == 0
            else f"With ordering the paper sees none; here {_cnt(on)} packets were reordered."
        )
        parts = []
        for sched in _uniq(x["params"]["schedule"] for x in recs):
            off = [x for x in recs if x["params"]["ordering"] == "off" and x["params"]["schedule"] == sched]
            if not off:
                continue
            c = [x["params"].get("out_of_order", 0) for x in off]
            pk = off[0]["params"].get("packets")
            if max(c) == 0:
                parts.append(f"0 in the {sched} schedule")
            else:
                const = max(c) - min(c) <= max(1, max(c) // 100)
                szs = sorted(x["params"]["slots_per_array"] for x in off)
                parts.append(
                    f"{_rng((x['value'] for x in off))} % ({_rng(c, _cnt)}" + (f" of {_cnt(pk)}" if pk else "") + f") in the {sched} one"
                    + (f", *constant* from {size(szs[0])} to {size(szs[-1])} slots per array" if const else "")
                )
                if const:
                    parts.append(
                        "a likely cause (not measured): the reordering comes from packets that recirculate while their flow's state is being "
                        "inserted and are overtaken by later packets that arrive after the insertion, which does not depend on the table size"
                    )
        s += (
            " Without the ordering arrays the paper's out-of-order share is \"negligible\" and \"decreases to zero when the table is large enough\"; here it is "
            + "; ".join(parts)
            + "."
        )
        out.append(s)

    # Fig. 10a / Q8.
    works, bins, at, mx = _passes(r, "Strict")
    if works:
        s = "* **Fig. 10a / Q8 (passes per packet).** "
        items = []
        if ("1-pkt", "2") in at:
            ok = at.get(("1-pkt", "1"), 0) == 0 and at["1-pkt", "2"] > 99
            items.append(
                (ok, f"1-pkt (paper: every packet recirculates once; here {_g(at['1-pkt', '2'])} % once, {_g(at.get(('1-pkt', '3'), 0))} % twice, {_g(at.get(('1-pkt', '4+'), 0))} % more)")
            )
        if ("8-pkt", "1") in at:
            ok = abs(at["8-pkt", "1"] - 87.5) <= 5
            items.append((ok, f"8-pkt (all but a flow's first packet, 87.5 %, should leave without recirculating; here {_g(at['8-pkt', '1'])} % do and {_g(at.get(('8-pkt', '2'), 0))} % recirculate once)"))
        if ("2-pkt", "1") in at:
            ok = at["2-pkt", "1"] > 50
            items.append((ok, f"2-pkt (the paper says more than 50 % leave without recirculating; here {_g(at['2-pkt', '1'])} % do and {_g(at.get(('2-pkt', '2'), 0))} % recirculate once)"))
        yes = [t for ok, t in items if ok]
        no = [t for ok, t in items if not ok]
        if yes:
            s += "Agree for " + _join(yes) + "."
        if no:
            s += (" " if yes else "") + "Disagree for " + _join(no) + "."
        out.append(s)

    # Weak consistency (§4).
    cons = r.find("consistency_violations")
    if cons:
        out.append(
            "* **Weak consistency (§4).** The paper observed no inconsistency with its weak-consistency Tofino code. Here "
            + _consistency_summary(r)
            + f", in {_rng((x['params'].get('packets', 0) for x in cons), _cnt)} packets per run."
        )

    # The paper's own arithmetic.
    h = r.find("handled_insert_rate", workload="8-pkt", offered_gbps=100.0)
    if h:
        out.append(
            "* **The paper's own numbers.** §5 says 8-pkt at 100 Gbit/s needs 1.25 M insertions/s; 12.5 Mpps / 8 is 1.5625 M/s, which is what the "
            f"8-pkt trace here offers; one core handled {_g(h[0]['value'])} M/s of it in real time."
        )
    return "\n".join(out) + "\n\n" + source(r)


TABLES = {
    "flowstate-throughput": t_throughput,
    "flowstate-load": t_load,
    "flowstate-size": t_size,
    "flowstate-expiry": t_expiry,
    "flowstate-ordering": t_ordering,
    "flowstate-reorder": t_reorder,
    "flowstate-passes": t_passes,
    "flowstate-consistency": t_consistency,
    "flowstate-termination": t_termination,
    "flowstate-target": t_target,
    "flowstate-paper": t_paper,
    "flowstate-lemma": t_lemma,
}
