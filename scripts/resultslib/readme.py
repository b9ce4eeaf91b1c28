"""The README's benchmark tables: one function per generated block, keyed by the block's name."""

from .common import num, ratio, size, table, source


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
    text = table(
        ["traffic", "tracked conns", "ns/packet", "Mpps", "baseline ns", "ratio"], rows, ["---", "---:", "---:", "---:", "---:", "---:"]
    )
    flood = r.find("syn_table_full_ns_per_packet")
    if flood:
        rows, syn_x, ins_x, est_x = [], [], [], []
        for f in flood:
            conns = f["params"]["conns"]
            e = r.one("established_during_flood_ns_per_packet", conns=conns)
            i = r.one("insert_table_full_ns_per_packet", conns=conns)
            room = f["peer_value"]
            syn_x.append(f["value"] / room)
            ins_x.append(i["value"] / room)
            est_x.append(e["value"] / e["peer_value"])
            rows.append(
                [
                    size(conns),
                    f["params"]["table"],
                    num(room),
                    num(f["value"]),
                    f"{syn_x[-1]:.2f}×",
                    num(i["value"]),
                    f"{ins_x[-1]:.2f}×",
                    num(e["value"]),
                    num(e["peer_value"]),
                    f"{est_x[-1]:.2f}×",
                ]
            )

        def span(xs):
            lo, hi = min(xs), max(xs)
            return f"{lo:.2f}×" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}–{hi:.2f}×"

        def verdict(xs, aim):
            return "within" if max(xs) <= aim else "above"

        text += (
            "\n\nThe SYN-flood guard, same run: a second worker whose table is full of established "
            "connections. SYNs of new connections into it (balanced without an entry) and first packets of "
            "new connections that are not SYNs (inserts it refuses after its bounded search) against SYNs "
            "into the first worker's table with room; established packets inside a flood (half of every "
            "burst flood SYNs) against the same packets without it:\n\n"
            + table(
                [
                    "established conns",
                    "table",
                    "SYN ns, room",
                    "SYN ns, full",
                    "×",
                    "refused insert ns",
                    "×",
                    "established ns, flood",
                    "no flood",
                    "×",
                ],
                rows,
                ["---:", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"],
            )
            + f"\n\nSYNs into the full table cost {span(syn_x)} a SYN into a table with room "
            f"({verdict(syn_x, 2.0)} the 2× aim), established packets inside the flood {span(est_x)} their "
            f"cost without it ({verdict(est_x, 1.2)} the 1.2× aim). A refused insert costs {span(ins_x)} "
            f"a SYN with room ({verdict(ins_x, 2.0)} 2×): its search reads up to eight more buckets, "
            "each a cache miss once the table outgrows the caches (bounded: "
            "the table's own search visits up to 4096)."
        )
    text += cache_table(r, "conns", "connection table")
    takeovers = sorted(r.find("takeover_ms"), key=lambda x: x["params"]["entries"])
    if takeovers:
        def at_start(t):
            w = t["params"].get("workers", 1)
            if w == 1:
                return "per worker at the start"
            return f"at the start with {w} workers filling their tables in parallel"

        parts = [
            f"{t['params']['entries'] / 1e6:.2f} million entries: {num(t['params']['stop_ms'])} ms at "
            f"the stop, {num(t['params']['start_ms'])} ms {at_start(t)} "
            f"({t['params']['file_bytes'] / 1e6:.0f} MB)"
            for t in takeovers
        ]
        text += (
            "\n\nA restart that carries the connections (the entries the worker tracked at the end, "
            "written to the state directory by the stopping process and put into the new workers' "
            "tables by the next): " + "; ".join(parts) + "."
        )
    handovers = sorted(r.find("handover_gap_ms"), key=lambda x: (x["params"]["entries"], x["params"]["delta"]))
    if handovers:
        rows = [
            [
                f"{h['params']['entries'] / 1e6:.2f} M",
                num(h["params"]["delta"]),
                num(h["params"]["checkpoint_ms"]),
                num(h["params"]["fill_ms"]),
                num(h["value"]),
                num(h["peer_value"]),
                ratio(h.get("ratio")),
            ]
            for h in handovers
        ]
        text += (
            "\n\nThe overlapped handover of the same entries (`handover_gap_ms`): the checkpoint read "
            "through the tables' readers while the worker could forward, the successor's 2 workers "
            "filling their tables (both before the cut-over), then at the cut-over the export of the "
            "entries written since the checkpoint (the delta), its transfer and its import; the peer is "
            "the restart above (stop plus start). Stopping the workers and the ports are not in it: "
            "`bench handover` measures the whole gap on the wire.\n\n"
            + table(
                ["entries", "delta", "checkpoint ms", "fill ms", "cut-over ms", "restart ms", "ratio"],
                rows,
                ["---:", "---:", "---:", "---:", "---:", "---:", "---:"],
            )
        )
    return text + "\n\n" + source(r)


def t_handover(runs):
    """`bench handover`: the forwarding gap of a restart on the wire, handover against stop-start."""
    r = runs["handover"]
    rows = []
    for x in r.find("gap_ms"):
        p = x["params"]
        rows.append(
            [
                p["driver"],
                size(p["entries"]),
                f"{num(x['value'])} ({p['range_ms']})",
                num(p["frames_lost"]),
                f"{num(x['peer_value'])} ({p['peer_range_ms']})",
                num(p["peer_frames_lost"]),
                ratio(x.get("ratio")),
            ]
        )
    first = r.find("gap_ms")[0]["params"]
    return (
        f"`flowplane run` with {first['workers']} workers tracking {size(first['entries'])} connections, "
        f"UDP frames of 1024 flows at {num(first['kpps'])} kpps; the gap is the longest time between two "
        "packets the balancer forwarded, from the change until the successor has run 0.5 s (medians of "
        f"{first['rounds']} alternated rounds, range in brackets):\n\n"
        + table(
            ["driver", "tracked", "handover gap ms", "frames lost", "stop-start gap ms", "frames lost", "ratio"],
            rows,
            ["---", "---:", "---:", "---:", "---:", "---:", "---:"],
        )
        + "\n\n"
        + source(r)
    )


def cache_table(r, size_key, what):
    """The flow-cache cases of a run (`cache_uniform`, `cache_zipf0.9`, `cache_zipf1.1`): the same
    worker with its cache on and off; empty when the run has none."""
    rows, wins, total = [], 0, 0
    for dist, label in (("uniform", "uniform"), ("zipf0.9", "Zipf 0.9"), ("zipf1.1", "Zipf 1.1")):
        for x in sorted(r.find(f"cache_{dist}"), key=lambda x: x["params"][size_key]):
            p = x["params"]
            total += 1
            wins += (x.get("ratio") or 0) > 1.0
            rows.append([size(p[size_key]), label, f"{100 * p['hit_rate']:.1f} %", num(x["value"]), num(x["peer_value"]), ratio(x.get("ratio"))])
    if not rows:
        return ""
    entries = r.find("cache_uniform")[0]["params"]["cache_entries"]
    return (
        f"\n\nThe BLP flow cache ({num(entries)} entries, PBLRU) in front of the {what}, same run: the same worker "
        "with the cache on and off in alternated rounds (the cache starts empty each round):\n\n"
        + table(
            [f"{'tracked conns' if size_key == 'conns' else 'FIB entries'}", "traffic", "hit rate", "Mpps, cache", "Mpps, no cache", "ratio"],
            rows,
            ["---:", "---", "---:", "---:", "---:", "---:"],
        )
        + f"\n\nThe cache is faster in {wins} of these {total} cases; it stays off by default (docs/flowcache.md, "
        "\"In the data path\", says why)."
    )


def t_live(runs):
    r = runs["live"]
    kf = r.one("kernel_forward")
    kcpu = r.one("kernel_forward_forwarding_cpu_per_frame")
    rows = [["kernel forwarding", num(kf["value"]), "1", f"{num(kcpu['value'])} ns", "1", "—", "—"]]
    for case, label in (
        ("af_packet", "AF_PACKET"),
        ("af_xdp", "AF_XDP (copy mode)"),
        ("af_xdp_2q_1w", "AF_XDP, 2 queues, 1 worker"),
        ("af_xdp_2q_2w", "AF_XDP, 2 queues, 2 workers"),
    ):
        if not r.find(case):
            continue
        f = r.find(f"forwarder_{case}")
        if f:
            fc = r.one(f"forwarder_{case}_forwarding_cpu_per_frame")
            ft = r.one(f"forwarder_{case}_thread_cpu_per_frame")
            rows.append(
                [
                    f"no-lookup forwarder, {label}",
                    num(f[0]["value"]),
                    ratio(f[0].get("ratio")),
                    f"{num(fc['value'])} ns",
                    ratio(fc.get("ratio")),
                    f"{num(ft['value'])} ns (thread)",
                    "1",
                ]
            )
        d = r.one(case)
        c = r.one(f"{case}_forwarding_cpu_per_frame")
        b = r.one(f"{case}_balancer_process_cpu_per_frame")
        vs = r.find(f"{case}_vs_forwarder") or r.find(f"{case}_vs_1w")
        rows.append(
            [
                f"balancer, {label}",
                num(d["value"]),
                ratio(d.get("ratio")),
                f"{num(c['value'])} ns",
                ratio(c.get("ratio")),
                f"{num(b['params']['user_ns'])} + {num(b['params']['system_ns'])} ns",
                ratio(vs[0].get("ratio")) if vs else "—",
            ]
        )
    x = r.find("forwarder_xdp")
    if x:
        xc = r.one("forwarder_xdp_forwarding_cpu_per_frame")
        rows.append(["no-lookup forwarder in XDP (native, XDP_TX)", num(x[0]["value"]), ratio(x[0].get("ratio")), f"{num(xc['value'])} ns", ratio(xc.get("ratio")), "—", "—"])
    main = table(
        ["case", "delivered kpps", "ratio", "forwarding CPU/frame (machine − sender)", "ratio", "own thread(s): user + system", "of the forwarder (kpps; 2 workers: of 1 worker)"],
        rows,
        ["---", "---:", "---:", "---:", "---:", "---:", "---:"],
    )
    paced = []
    for case, label in (
        ("kernel_forward", "kernel forwarding"),
        ("forwarder_af_packet", "no-lookup forwarder, AF_PACKET"),
        ("af_packet", "balancer, AF_PACKET"),
        ("forwarder_af_xdp", "no-lookup forwarder, AF_XDP"),
        ("af_xdp", "balancer, AF_XDP"),
        ("forwarder_xdp", "no-lookup forwarder in XDP"),
    ):
        d = r.find(f"throttled_{case}")
        c = r.find(f"throttled_{case}_forwarding_cpu_per_frame")
        if not d or not c:
            continue
        paced.append([label, num(d[0]["params"]["offered_kpps"]), num(d[0]["value"]), ratio(d[0].get("ratio")) if case != "kernel_forward" else "1", f"{num(c[0]['value'])} ns", ratio(c[0].get("ratio")) if case != "kernel_forward" else "1"])
    if paced:
        s = r.find("throttled_sender_only_cpu_per_frame")
        main += (
            "\n\nThe same cases with the sender paced to "
            + num(r.find("throttled_kernel_forward")[0]["params"]["offered_target_kpps"])
            + " kpps, a load every path keeps up with (CPU per frame at equal offered load"
            + (f"; the paced sender alone costs {num(s[0]['value'])} ns per frame" if s else "")
            + "):\n\n"
            + table(["case", "offered kpps", "delivered kpps", "ratio", "forwarding CPU/frame (machine − sender)", "ratio"], paced, ["---", "---:", "---:", "---:", "---:", "---:"])
        )
    return main + "\n\n" + source(r)


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
    return t1 + "\n\nFIB updates at 2M entries, same run:\n\n" + t2 + cache_table(r, "entries", "FIB") + "\n\n" + source(r)


def t_fib(runs):
    r = runs["fib"]
    rows = []
    for n in sorted({x["params"]["entries"] for x in r.find("lookup_batched", threads=1)}):
        hb = r.find("lookup_batched", entries=n, threads=1)
        hbr = [x for x in hb if x.get("peer") == "hashbrown"]
        dmr = [x for x in hb if x.get("peer") == "dashmap"]
        pipe = r.find("lookup_pipelined", entries=n, threads=1)
        row = [size(n)]
        for rec in (hbr, pipe, dmr):
            if rec:
                x = rec[0]
                row += [num(x["value"]), num(x["peer_value"]), ratio(x.get("ratio"))]
            else:
                row += ["", "—", ""]
        del row[5]  # the pipelined case's hashbrown figure is the hashbrown column's
        pages = (hbr or dmr or hb)[0]["params"]
        row.append(f"{pages.get('pages', '?')} / {pages.get('peer_pages', '—')}")
        rows.append(row)
    lookups = table(
        ["entries", "flowplane Mops", "hashbrown Mops", "ratio", "pipelined: 256 keys per call, Mops", "ratio to hashbrown", "flowplane Mops (dashmap round)", "dashmap Mops", "ratio", "pages: ours / peers'"],
        rows,
        ["---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---"],
    )
    rows = []
    probes = ["prefetch_16_ahead", "prefetch_32_ahead", "chase_16_chains", "chase_32_chains"]
    for b in r.find("cacheline_bound"):
        n = b["params"]["entries"]
        fr = r.find("fraction_of_bound", entries=n)
        p = b["params"]
        rows.append(
            [size(n)]
            + [("**" if p["bound_probe"] == x else "") + num(p[f"{x}_lines_M_per_s"]) + ("**" if p["bound_probe"] == x else "") for x in probes]
            + [num(p["lines_per_lookup"]), num(b["value"]), (num(fr[0]["value"]) + " %") if fr else "—"]
        )
    bound = table(
        ["entries", "prefetch 16 ahead, lines M/s", "prefetch 32 ahead", "16 pointer chases", "32 pointer chases", "lines per lookup (measured)", "bound Mops (best lines M/s / lines per lookup)", "batched lookup: fraction of bound"],
        rows,
    )
    rows = []
    for m in r.find("bytes_per_entry"):
        p = m["params"]
        fill = "half empty (2n buckets)" if p.get("peer_fill", "").startswith("n entries") else "its sweet spot (7/8 full)"
        rows.append([p["layout"], size(p["entries"]) if p["entries"] % (1 << 20) == 0 else num(p["entries"]), num(m["value"]), m.get("peer", ""), num(m.get("peer_value")), fill, ratio(m.get("ratio"))])
    memory = table(["layout", "entries", "flowplane B/entry", "peer", "peer B/entry", "peer's fill", "ratio"], rows, ["---", "---:", "---:", "---", "---:", "---", "---:"])
    return (
        "Batched (32) successful lookups, one thread, alternating rounds (best of each); the pipelined column passes 256 keys per call, looked up in chunks of 32 with the next chunk's first buckets prefetched before this chunk's second buckets are read:\n\n"
        + lookups
        + "\n\n"
        + fib_footing(r)
        + "\n\nThe memory's bound over a written array of the table's size (at most 4 GiB), four probes in the same run, the best (bold) counting:\n\n"
        + bound
        + "\n\nBytes per entry (compact: 6-byte key, 2-byte value; general: 13-byte key, 8-byte value):\n\n"
        + memory
        + "\n\n"
        + source(r)
    )


def fib_footing(r):
    """A sentence on whether flowplane and its peers ran on the same pages in this run, and where
    the batched lookup stands against hashbrown at 64M entries (the design's aim: 2x)."""
    peered = [x for x in r.records if "peer_pages" in x.get("params", {})]
    unequal = sorted(
        {(x["params"]["entries"], x["params"]["pages"], x["params"]["peer_pages"]) for x in peered if x["params"]["pages"] != x["params"]["peer_pages"]}
    )
    if not peered:
        out = "No record of this run has a table peer."
    elif not unequal:
        kinds = sorted({x["params"]["pages"] for x in peered})
        out = f"Equal footing: in every record of this run with a table peer, both sides were measured on the same pages ({', '.join(kinds)})."
    else:
        out = (
            "**Not on equal footing** in this run: "
            + "; ".join(f"{size(n)} entries: ours {a}, peer {b}" for n, a, b in unequal)
            + " (measured); the ratios of those sizes overstate or understate flowplane by the page size."
        )
    big = [x for x in r.find("lookup_batched", threads=1) if x.get("peer") == "hashbrown" and x["params"]["entries"] == 64 << 20]
    if big:
        x = big[0]
        if x["params"]["pages"] != x["params"]["peer_pages"]:
            verdict = "cannot be held against"
        else:
            verdict = "meets" if x["ratio"] >= 2 else "falls short of"
        out += (
            f" At 64M entries the batched lookup is {ratio(x['ratio'])}× hashbrown ({num(x['value'])} against "
            f"{num(x['peer_value'])} Mops, pages {x['params']['pages']} / {x['params']['peer_pages']}): it {verdict} the 2× the design aims for."
        )
    return out


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


def t_cluster(runs):
    """The live cluster: per FIB size, ScaleBricks against full duplication and hash partitioning
    on the same ports and frames (forwarding rate per core of node CPU, delivered rate, memory
    per node, interconnect hops per frame)."""
    r = runs["cluster"]

    def rec(case, entries, peer):
        for x in r.find(case):
            p = x.get("params", {})
            if p.get("entries") == entries and x.get("peer") == peer:
                return x
        raise KeyError(f"cluster: no {case} record for {entries} entries against {peer}")

    sizes = sorted({x["params"]["entries"] for x in r.find("cluster_live_forward_per_core")})
    rows = []
    for n in sizes:
        f_d = rec("cluster_live_forward_per_core", n, "duplication")
        f_h = rec("cluster_live_forward_per_core", n, "hash-partition")
        d_d = rec("cluster_live_delivered", n, "duplication")
        d_h = rec("cluster_live_delivered", n, "hash-partition")
        m_d = rec("cluster_live_memory_per_node", n, "duplication")
        m_h = rec("cluster_live_memory_per_node", n, "hash-partition")
        h_h = rec("cluster_live_hops", n, "hash-partition")
        rows.append(
            [
                size(n),
                f"{num(f_d['value'])} / {num(f_d['peer_value'])} / {num(f_h['peer_value'])}",
                f"{ratio(f_d['ratio'])} / {ratio(f_h['ratio'])}",
                f"{num(d_d['value'])} / {num(d_d['peer_value'])} / {num(d_h['peer_value'])}",
                f"{num(m_d['value'])} / {num(m_d['peer_value'])} / {num(m_h['peer_value'])}",
                f"{num(h_h['value'])} / {num(rec('cluster_live_hops', n, 'duplication')['peer_value'])} / {num(h_h['peer_value'])}",
            ]
        )
    return table(
        [
            "entries",
            "kpps per core of node CPU (SB / dup / hash)",
            "ratio vs dup / hash",
            "delivered kpps (SB / dup / hash)",
            "MiB per node (SB / dup / hash)",
            "hops per frame (SB / dup / hash)",
        ],
        rows,
        ["---:", "---:", "---:", "---:", "---:", "---:"],
    ) + "\n\n" + source(r)


def t_cluster_capacity(runs):
    """Fig 11's shape: entries a cluster holds with 16 MiB of tables per node, by cluster size."""
    r = runs["cluster"]
    by = {}
    for x in r.find("cluster_capacity_16mib"):
        p = x["params"]
        by.setdefault(p["nodes"], {})[x["peer"]] = x
    rows = []
    for n in sorted(by):
        d, h = by[n]["duplication"], by[n]["hash-partition"]
        rows.append(
            [
                n,
                f"{num(d['value'])} ({num(d['params']['bytes_per_entry_per_node'])} B)",
                f"{num(d['peer_value'])} ({num(d['params']['peer_bytes_per_entry_per_node'])} B)",
                f"{num(h['peer_value'])} ({num(h['params']['peer_bytes_per_entry_per_node'])} B)",
                ratio(d["ratio"]),
            ]
        )
    return table(
        [
            "nodes",
            "ScaleBricks M entries (bytes/entry/node)",
            "full duplication",
            "hash partitioning",
            "ScaleBricks / duplication",
        ],
        rows,
        ["---:", "---:", "---:", "---:", "---:"],
    ) + "\n\n" + source(r)


def t_fib_quotient(runs):
    """`bench fib --cases quotient`: the quotiented layout against the compact layout and hashbrown."""
    r = runs["fib-quotient"]
    by = {}
    for case in (
        "quotient_lookup_batched",
        "quotient_lookup_pipelined",
        "quotient_lookup_batched_vs_hashbrown",
        "quotient_insert",
        "quotient_bytes_per_entry",
        "quotient_lines_per_lookup",
    ):
        for x in r.find(case):
            by.setdefault(x["params"]["entries"], {})[case] = x
    rows = []
    for n in sorted(by):
        c = by[n]
        b, p, ins = c["quotient_lookup_batched"], c["quotient_lookup_pipelined"], c["quotient_insert"]
        mem, lines = c["quotient_bytes_per_entry"], c["quotient_lines_per_lookup"]
        hb = c.get("quotient_lookup_batched_vs_hashbrown")
        rows.append(
            [
                size(n),
                f"{mem['params']['slots_per_bucket']} × {mem['params']['slot_bits']} bits",
                f"{num(mem['value'])} / {num(mem['peer_value'])}",
                f"{num(lines['value'])} / {num(lines['peer_value'])}",
                f"{num(b['value'])} / {num(b['peer_value'])} ({ratio(b['ratio'])})",
                f"{num(hb['peer_value'])} ({ratio(hb['ratio'])})" if hb else "—",
                f"{num(p['value'])} / {num(p['peer_value'])} ({ratio(p['ratio'])})",
                f"{num(ins['value'])} / {num(ins['peer_value'])} ({ratio(ins['ratio'])})",
            ]
        )
    return (
        "One thread, uniform random successful lookups of the same keys, tables filled to 95 %; "
        "each figure quotient layout / compact layout (ratio), lookups in alternated rounds:\n\n"
        + table(
            [
                "entries",
                "slots per 64-byte bucket",
                "bytes/entry",
                "lines/lookup",
                "batched (32) Mops",
                "hashbrown Mops (quotient ÷)",
                "pipelined (256/call) Mops",
                "insert Mops",
            ],
            rows,
            ["---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"],
        )
        + "\n\n"
        + fills_note(by)
        + "".join(
            f"Under updates ({size(u['params']['entries'])} entries, one reader, one writer at "
            f"{num(u['params']['achieved_updates_per_s'])} updates/s): quotient {num(u['value'])} Mops "
            f"({num(u['params']['lost_pct'])} % fewer than without the writer), compact "
            f"{num(u['peer_value'])} Mops ({num(u['params']['peer_lost_pct'])} % fewer).\n\n"
            for u in r.find("quotient_lookup_under_updates")
        )
        + source(r)
    )


def fills_note(by):
    """How the insert column was measured: fills per layout at each size (older runs: one)."""
    counts = {}
    for n in sorted(by):
        ins = by[n]["quotient_insert"]
        k = int(str(ins["params"].get("fills", "1")).split(",")[0])
        counts.setdefault(k, []).append(size(n))
    if list(counts) == [1]:
        return "Inserts: one fill from empty to 95 % per layout and size.\n\n"
    parts = [
        f"the median of {k} alternated fills at {', '.join(ns)}" if k > 1 else f"one fill at {', '.join(ns)}"
        for k, ns in counts.items()
    ]
    return "Inserts: each layout filled from empty to 95 %: " + "; ".join(parts) + ".\n\n"


def t_flow_export(runs):
    """Flow export's cost: `bench lb` (ipfix_*) and `bench switch --parts memory` (forward_sflow)."""
    lb, sw = runs["lb"], runs["switch-memory"]
    names = {
        "connections_1_in_1000": "connection records, 1 packet in 1000",
        "connections_every_packet": "connection records, every packet",
        "connections_1_in_1000_no_rate_limit": "connection records, 1 packet in 1000, no rate limit",
    }
    traffic = {"ipfix_syn": "every packet a new connection (SYN)", "ipfix_non_syn": "established connections"}
    rows = []
    for case in ("ipfix_non_syn", "ipfix_syn"):
        for x in sorted(lb.find(case), key=lambda x: (x["params"]["conns"], x["params"]["export"])):
            p = x["params"]
            export = names.get(p["export"], p["export"])
            if p.get("max_records_per_second"):
                export += f", at most {p['max_records_per_second']:,} records/s"
            rows.append(
                [
                    "balancer, IPFIX",
                    traffic[case],
                    size(p["conns"]) + " conns",
                    export,
                    num(x["peer_value"]),
                    num(x["value"]),
                    ratio(x.get("ratio")),
                    f"{p['events_dropped_share'] * 100:.0f} %",
                ]
            )
    for x in sorted(lb.find("conn_counters"), key=lambda x: x["params"]["conns"]):
        p = x["params"]
        rows.append(
            [
                "balancer, packet and byte counters per connection (modelled, not in the product)",
                "established connections",
                size(p["conns"]) + " conns",
                f"an 8-byte counter word per table slot ({p['counter_bytes'] / 2**20:.0f} MiB) written by every packet",
                num(x["peer_value"]),
                num(x["value"]),
                ratio(x.get("ratio")),
                "",
            ]
        )
    for x in sorted(sw.find("forward_sflow"), key=lambda x: (x["params"]["entries"], -x["params"]["sample_one_in"])):
        p = x["params"]
        q, d = p["samples_queued"], p["samples_dropped"]
        med = p.get("round_ratio_median")
        rows.append(
            [
                "switch, sFlow",
                "60-byte frames, uniform destinations",
                size(p["entries"]) + " FIB",
                "every frame" if p["sample_one_in"] == 1 else f"1 frame in {p['sample_one_in']}",
                num(x["peer_value"]),
                num(x["value"]),
                ratio(x.get("ratio")) + ("" if med is None else f" (median {ratio(med)})"),
                f"{d / max(q + d, 1) * 100:.0f} % (all rates)",
            ]
        )
    out = (
        "One worker; export off against on in alternated rounds of the same worker and traffic, the exporter "
        "thread on the other core sending to a socket nobody reads; Mpps (each case's best round); the ratio "
        "of those, and for the switch, whose rates each run in a contest of their own with sampling off, the "
        "median of the per-round ratios; the last column is the share of events (samples) the worker's queue "
        "could not take, dropped and counted:\n\n"
    )
    out += table(
        ["application", "traffic", "table", "export", "off, Mpps", "on, Mpps", "ratio", "dropped"],
        rows,
        ["---", "---", "---:", "---", "---:", "---:", "---:", "---:"],
    )
    return out + "\n\n" + source(lb) + "\n\n" + source(sw)


TABLES = {
    "flow-export": t_flow_export,
    "fib-quotient": t_fib_quotient,
    "lb": t_lb,
    "live": t_live,
    "handover": t_handover,
    "switch-memory": t_switch_memory,
    "switch-live-fib": t_switch_live_fib,
    "fib": t_fib,
    "flowstate": t_flowstate,
    "maglev": t_records("maglev", ["balance_spread", "disruption", "populate"], keys={"backends", "size", "failed_pct", "m", "trials"}),
    "fib-dpdk": t_records("fib-dpdk", ["lookup_batched"], keys={"entries", "layout", "threads", "batch", "pages", "peer_pages", "peer_config"}),
    "cluster": t_cluster,
    "cluster-capacity": t_cluster_capacity,
    "setsep": t_records("setsep", ["bits_per_key", "lookup"], keys={"setting", "value_bits", "keys", "batch", "threads", "pages", "peer_pages"}),
}
