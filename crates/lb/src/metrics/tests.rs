use super::*;
use crate::config::{HealthCheck, HealthKind, LbConfig};
use crate::health::PlannedCheck;
use crate::snapshot::Builder;
use crate::stats::WorkerStats;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

// ---------------------------------------------------------------------------------------------
// A strict parser of the Prometheus text format (0.0.4), independent of the renderer.

#[derive(Debug)]
struct Family {
    kind: String,
    help: bool,
}

type Labels = BTreeMap<String, String>;

#[derive(Debug)]
struct Parsed {
    families: BTreeMap<String, Family>,
    samples: Vec<(String, Labels, f64)>,
}

impl Parsed {
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let want: Labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let found: Vec<f64> = self
            .samples
            .iter()
            .filter(|(n, l, _)| n == name && *l == want)
            .map(|s| s.2)
            .collect();
        assert_eq!(found.len(), 1, "{name}{want:?}: {found:?}");
        found[0]
    }

    fn count(&self, name: &str) -> usize {
        self.samples.iter().filter(|s| s.0 == name).count()
    }
}

fn valid_name(n: &str, colon: bool) -> bool {
    let mut c = n.chars();
    let first_ok = |ch: char| ch.is_ascii_alphabetic() || ch == '_' || (colon && ch == ':');
    c.next().is_some_and(first_ok)
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || (colon && ch == ':'))
}

fn parse(text: &str) -> Result<Parsed, String> {
    if !text.ends_with('\n') {
        return Err("output must end with a newline".into());
    }
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut samples = Vec::new();
    let mut seen = HashSet::new();
    let mut closed: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    for (no, line) in text.lines().enumerate() {
        let at = |m: &str| format!("line {}: {m}: {line:?}", no + 1);
        if line.is_empty() {
            return Err(at("empty line"));
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let (kw, rest) = rest.split_once(' ').ok_or_else(|| at("bad comment"))?;
            let (name, arg) = rest.split_once(' ').ok_or_else(|| at("no argument"))?;
            if !valid_name(name, true) {
                return Err(at("bad metric name"));
            }
            if current.as_deref() != Some(name) {
                if let Some(c) = current.take() {
                    closed.insert(c);
                }
                if closed.contains(name) {
                    return Err(at("family not contiguous"));
                }
                current = Some(name.to_string());
            }
            let f = families.entry(name.to_string()).or_insert(Family {
                kind: String::new(),
                help: false,
            });
            match kw {
                "HELP" => {
                    if f.help || !f.kind.is_empty() {
                        return Err(at("HELP twice or after TYPE"));
                    }
                    // Only \\ and \n escapes are allowed in HELP.
                    let mut it = arg.chars();
                    while let Some(ch) = it.next() {
                        if ch == '\\' && !matches!(it.next(), Some('\\') | Some('n')) {
                            return Err(at("bad escape in HELP"));
                        }
                    }
                    f.help = true;
                }
                "TYPE" => {
                    if !f.kind.is_empty() {
                        return Err(at("TYPE twice"));
                    }
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&arg) {
                        return Err(at("unknown type"));
                    }
                    if arg == "counter" && !name.ends_with("_total") {
                        return Err(at("counter name must end in _total"));
                    }
                    f.kind = arg.to_string();
                }
                _ => return Err(at("unknown comment keyword")),
            }
            continue;
        }
        // A sample: name{labels} value
        let name_end = line.find(['{', ' ']).ok_or_else(|| at("no value"))?;
        let name = &line[..name_end];
        if !valid_name(name, true) {
            return Err(at("bad sample name"));
        }
        let mut rest = &line[name_end..];
        let mut labels = Labels::new();
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices().peekable();
            loop {
                // label name
                let start = chars
                    .peek()
                    .map(|c| c.0)
                    .ok_or_else(|| at("eof in labels"))?;
                if r[start..].starts_with('}') {
                    chars.next();
                    break;
                }
                let eq = r[start..].find('=').ok_or_else(|| at("label without ="))? + start;
                let lname = &r[start..eq];
                if !valid_name(lname, false) || lname.starts_with("__") {
                    return Err(at("bad label name"));
                }
                while chars.peek().is_some_and(|c| c.0 <= eq) {
                    chars.next();
                }
                if chars.next().map(|c| c.1) != Some('"') {
                    return Err(at("label value not quoted"));
                }
                let mut val = String::new();
                loop {
                    match chars.next().map(|c| c.1) {
                        None => return Err(at("unterminated label value")),
                        Some('"') => break,
                        Some('\\') => match chars.next().map(|c| c.1) {
                            Some('\\') => val.push('\\'),
                            Some('"') => val.push('"'),
                            Some('n') => val.push('\n'),
                            _ => return Err(at("bad escape in label value")),
                        },
                        Some('\n') => return Err(at("raw newline in label value")),
                        Some(ch) => val.push(ch),
                    }
                }
                if labels.insert(lname.to_string(), val).is_some() {
                    return Err(at("duplicate label"));
                }
                match chars.next().map(|c| c.1) {
                    Some(',') => {}
                    Some('}') => break,
                    _ => return Err(at("expected , or }")),
                }
            }
            let consumed = chars.peek().map_or(r.len(), |c| c.0);
            rest = &r[consumed..];
        }
        let value_text = rest
            .strip_prefix(' ')
            .ok_or_else(|| at("no space before value"))?;
        if value_text.contains(' ') {
            return Err(at("timestamps or extra fields are not expected"));
        }
        let value: f64 = match value_text {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            t => t.parse().map_err(|_| at("bad value"))?,
        };
        // Which family?
        let family = if families.contains_key(name) {
            name.to_string()
        } else {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    let base = name.strip_suffix(s)?;
                    families
                        .get(base)
                        .filter(|f| f.kind == "histogram")
                        .map(|_| base.to_string())
                })
                .ok_or_else(|| at("sample without TYPE"))?
        };
        if current.as_deref() != Some(family.as_str()) {
            return Err(at("sample outside its family's block"));
        }
        let f = &families[&family];
        if f.kind.is_empty() || !f.help {
            return Err(at("sample before HELP and TYPE"));
        }
        if f.kind == "counter" && (value < 0.0 || value.fract() != 0.0) {
            return Err(at("counter value must be a non-negative integer here"));
        }
        if f.kind == "histogram" && name.ends_with("_bucket") && !labels.contains_key("le") {
            return Err(at("bucket without le"));
        }
        if !seen.insert(format!("{name}{labels:?}")) {
            return Err(at("duplicate series"));
        }
        samples.push((name.to_string(), labels, value));
    }
    // Histograms: cumulative buckets, +Inf equals _count.
    for (fname, f) in &families {
        if f.kind != "histogram" {
            continue;
        }
        let mut series: HashMap<Labels, Vec<(f64, f64)>> = HashMap::new();
        let mut counts: HashMap<Labels, f64> = HashMap::new();
        for (n, l, v) in &samples {
            if *n == format!("{fname}_bucket") {
                let mut base = l.clone();
                let le = base.remove("le").unwrap();
                let le: f64 = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().map_err(|_| format!("bad le {le}"))?
                };
                series.entry(base).or_default().push((le, *v));
            } else if *n == format!("{fname}_count") {
                counts.insert(l.clone(), *v);
            }
        }
        for (l, b) in series {
            if !b.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1) {
                return Err(format!(
                    "{fname}{l:?}: buckets not increasing/cumulative: {b:?}"
                ));
            }
            let last = b.last().unwrap();
            if last.0 != f64::INFINITY || Some(&last.1) != counts.get(&l) {
                return Err(format!("{fname}{l:?}: +Inf bucket missing or != _count"));
            }
        }
    }
    Ok(Parsed { families, samples })
}

#[test]
fn parser_rejects_what_it_should() {
    let good = "# HELP a_total x\n# TYPE a_total counter\na_total{l=\"v\"} 1\n";
    assert!(parse(good).is_ok());
    for bad in [
        "# HELP a x\n# TYPE a counter\na 1\n", // counter without _total
        "a_total 1\n",                         // no TYPE
        "# HELP a x\n# TYPE a gauge\na{l=\"v} 1\n", // unterminated
        "# HELP a x\n# TYPE a gauge\na{l=\"\\t\"} 1\n", // bad escape
        "# HELP a x\n# TYPE a gauge\na 1\na 2\n", // duplicate
        "# HELP a x\n# TYPE a gauge\na 1\n# HELP b x\n# TYPE b gauge\nb 1\na{x=\"1\"} 1\n", // split
        "# HELP a x\n# TYPE a gauge\na one\n", // bad value
        "# HELP a x\n# TYPE a gauge\na 1",     // no final newline
    ] {
        assert!(parse(bad).is_err(), "accepted {bad:?}");
    }
}

// ---------------------------------------------------------------------------------------------

const CFG: &str = r#"
    [balancer]
    address = "10.0.0.2"
    maglev_size = 1009
    seed = 9
    max_vips = 8
    max_backends = 16
    [[prefix_group]]
    name = "g"
    prefixes = ["74.125.0.0/16"]
    [[vip]]
    name = "web \"blue\"\\edge"
    address = "203.0.113.10"
    port = 80
    protocol = "tcp"
    pools = ["p"]
    [[vip]]
    name = "sfx"
    prefix_group = "g"
    suffix = "0.0.0.7"
    suffix_len = 8
    port = 53
    protocol = "udp"
    pools = ["q"]
    encap = "ipip"
    [[pool]]
    name = "p"
    backends = [{ address = "10.0.1.1", name = "b1\nline" }, { address = "10.0.1.2" }, { address = "10.0.1.3" }]
    [[pool]]
    name = "q"
    backends = [{ address = "10.0.2.1" }]
"#;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn render_is_valid_and_complete() {
    let cfg = Arc::new(LbConfig::from_toml(CFG).unwrap());
    let mut builder = Builder::new();
    let s1 = builder.build(cfg.clone()).unwrap();
    builder.set_health(ip("10.0.1.2"), false);
    builder.set_health(ip("10.0.2.1"), false);
    let s2 = builder.build(cfg.clone()).unwrap();
    let mut changes = MaglevChanges::new();
    assert!(changes.record(None, &s1).is_empty());
    let moved = changes.record(Some(&s1), &s2);
    let web_table_diff = s1.vips[0]
        .table
        .as_ref()
        .unwrap()
        .diff(s2.vips[0].table.as_ref().unwrap())
        .unwrap()
        .changed() as u64;
    assert!(
        web_table_diff > 1009 / 4,
        "removing 1 of 3 moves about a third"
    );
    assert_eq!(
        moved,
        vec![
            (s2.vips[0].name.clone(), web_table_diff),
            ("sfx".to_string(), 1009)
        ]
    );

    // Two workers' counters.
    let w0 = WorkerStats::new(8, 16);
    let w1 = WorkerStats::new(8, 16);
    w0.count(Outcome::Rx, 100);
    w1.count(Outcome::Rx, 50);
    w0.count(Outcome::RxBytes, 6400);
    w0.count(Outcome::ConnHit, 90);
    w1.count(Outcome::ConnMiss, 10);
    w0.count(Outcome::NonVip, 3);
    w1.parse_error(fp_wire::Error::Ipv4BadChecksum);
    w1.parse_error(fp_wire::Error::Ipv4BadChecksum);
    w0.vip(0).unwrap().packets.add(97);
    w0.vip(0).unwrap().bytes.add(9700);
    w1.vip(0).unwrap().connections.add(10);
    let b1 = s2.vips[0].members[0];
    w1.backend(b1 as usize).unwrap().packets.add(40);
    for (n, times) in [(0usize, 5u64), (1, 2), (3, 4), (32, 1)] {
        for _ in 0..times {
            w0.burst(n);
        }
    }
    let totals = Totals::sum([&w0, &w1]);
    let workers = vec![
        WorkerMetrics {
            worker: 0,
            bursts: w0.bursts(),
            connections: (12, 1),
            connection_slots: (1024, 1024),
            held_fragments: 2,
            generation: s2.generation,
            guard_mode: 2,
        },
        WorkerMetrics {
            worker: 1,
            bursts: w1.bursts(),
            connections: (7, 0),
            connection_slots: (1024, 1024),
            held_fragments: 0,
            generation: s1.generation,
            guard_mode: 0,
        },
    ];
    let check = PlannedCheck {
        address: ip("10.0.1.2"),
        pool: "p".into(),
        port: 80,
        check: HealthCheck {
            kind: HealthKind::Http {
                path: "/".into(),
                status: 200,
                body: None,
            },
            port: None,
            interval_ms: 1000,
            timeout_ms: 500,
            rise: 2,
            fall: 2,
        },
    };
    let health = vec![
        BackendHealth {
            address: ip("10.0.1.2"),
            healthy: false,
            reason: "2 consecutive failed http checks".into(),
            check: Some(check),
            successes: 10,
            failures: 2,
            transitions: 1,
            since: Instant::now(),
        },
        BackendHealth {
            address: ip("10.0.1.1"),
            healthy: true,
            reason: "no health check".into(),
            check: None,
            successes: 0,
            failures: 0,
            transitions: 0,
            since: Instant::now(),
        },
    ];
    let export = crate::export::ExportStats::default();
    export
        .created
        .store(7, std::sync::atomic::Ordering::Relaxed);
    let view = MetricsView {
        totals: &totals,
        workers: &workers,
        snapshot: &s2,
        config_generation: 4,
        reloads: ReloadCounts { ok: 3, failed: 1 },
        health: &health,
        maglev: &changes,
        takeover: &Default::default(),
        export: Some(&export),
    };
    let mut e = Exposition::new();
    render(&view, &mut e);
    let text = e.finish();
    if std::env::var_os("FP_PRINT_METRICS").is_some() {
        println!("{text}");
    }
    let p = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));

    let web = s2.vips[0].name.as_str();
    assert_eq!(web, "web \"blue\"\\edge");
    assert_eq!(p.get("flowplane_config_generation", &[]), 4.0);
    assert_eq!(
        p.get("flowplane_snapshot_generation", &[]),
        s2.generation as f64
    );
    assert_eq!(
        p.get("flowplane_config_reloads_total", &[("result", "error")]),
        1.0
    );
    assert_eq!(p.get("flowplane_rx_packets_total", &[]), 150.0);
    assert_eq!(
        p.get("flowplane_ipfix_records_total", &[("kind", "created")]),
        7.0
    );
    assert_eq!(p.get("flowplane_ipfix_events_dropped_total", &[]), 0.0);
    assert_eq!(p.get("flowplane_rx_bytes_total", &[]), 6400.0);
    assert_eq!(
        p.get("flowplane_conn_lookups_total", &[("result", "hit")]),
        90.0
    );
    assert_eq!(
        p.get("flowplane_conn_lookups_total", &[("result", "miss")]),
        10.0
    );
    // Drops: every drop_ outcome and every parse error, zero or not.
    assert_eq!(
        p.get("flowplane_drops_total", &[("reason", "drop_non_vip")]),
        3.0
    );
    assert_eq!(
        p.get("flowplane_drops_total", &[("reason", "ipv4_bad_checksum")]),
        2.0
    );
    let drop_outcomes = Outcome::ALL
        .iter()
        .filter(|o| o.name().starts_with("drop_"))
        .count();
    assert_eq!(
        p.count("flowplane_drops_total"),
        drop_outcomes + fp_wire::Error::COUNT
    );
    // Per-worker tables and batches.
    assert_eq!(
        p.get(
            "flowplane_conn_table_entries",
            &[("worker", "0"), ("family", "ipv4")]
        ),
        12.0
    );
    assert_eq!(
        p.get(
            "flowplane_conn_table_slots",
            &[("worker", "1"), ("family", "ipv6")]
        ),
        1024.0
    );
    assert_eq!(p.get("flowplane_held_fragments", &[("worker", "0")]), 2.0);
    let bucket = |le: &str| {
        p.get(
            "flowplane_batch_size_bucket",
            &[("worker", "0"), ("le", le)],
        )
    };
    assert_eq!(bucket("0"), 5.0);
    assert_eq!(bucket("1"), 7.0);
    assert_eq!(bucket("2"), 7.0);
    assert_eq!(bucket("4"), 11.0);
    assert_eq!(bucket("16"), 11.0);
    assert_eq!(bucket("32"), 12.0);
    assert_eq!(bucket("+Inf"), 12.0);
    assert_eq!(
        p.get("flowplane_batch_size_sum", &[("worker", "0")]),
        (2 + 12 + 32) as f64
    );
    assert_eq!(p.get("flowplane_batch_size_count", &[("worker", "1")]), 0.0);
    // VIPs: escaped names survive the round trip.
    assert_eq!(p.get("flowplane_vip_packets_total", &[("vip", web)]), 97.0);
    assert_eq!(p.get("flowplane_vip_bytes_total", &[("vip", web)]), 9700.0);
    assert_eq!(
        p.get("flowplane_vip_connections_total", &[("vip", web)]),
        10.0
    );
    assert_eq!(p.get("flowplane_vip_packets_total", &[("vip", "sfx")]), 0.0);
    assert_eq!(
        p.get(
            "flowplane_vip_info",
            &[
                ("vip", "sfx"),
                ("match", "g/suffix:0x7/8"),
                ("port", "53"),
                ("protocol", "udp"),
                ("encap", "ipip")
            ]
        ),
        1.0
    );
    assert_eq!(
        p.get(
            "flowplane_vip_backends",
            &[("vip", web), ("state", "configured")]
        ),
        3.0
    );
    assert_eq!(
        p.get(
            "flowplane_vip_backends",
            &[("vip", web), ("state", "healthy")]
        ),
        2.0
    );
    let digest = format!("{:016x}", s2.vips[0].table.as_ref().unwrap().digest());
    assert_eq!(
        p.get(
            "flowplane_maglev_table_info",
            &[("vip", web), ("digest", &digest), ("size", "1009")]
        ),
        1.0
    );
    assert_eq!(
        p.get(
            "flowplane_maglev_table_info",
            &[("vip", "sfx"), ("digest", "none"), ("size", "0")]
        ),
        1.0
    );
    assert_eq!(
        p.get("flowplane_maglev_last_entries_moved", &[("vip", web)]),
        web_table_diff as f64
    );
    assert_eq!(
        p.get("flowplane_maglev_entries_moved_total", &[("vip", "sfx")]),
        1009.0
    );
    assert_eq!(
        p.get("flowplane_maglev_table_updates_total", &[("vip", web)]),
        1.0
    );
    // Backends.
    assert_eq!(
        p.get(
            "flowplane_backend_info",
            &[("backend", "10.0.1.1"), ("name", "b1\nline")]
        ),
        1.0
    );
    assert_eq!(
        p.get("flowplane_backend_healthy", &[("backend", "10.0.1.2")]),
        0.0
    );
    assert_eq!(
        p.get("flowplane_backend_healthy", &[("backend", "10.0.1.3")]),
        1.0
    );
    assert_eq!(p.count("flowplane_backend_healthy"), 4);
    let b1_addr = s2.backend(b1).unwrap().address.to_string();
    assert_eq!(
        p.get("flowplane_backend_packets_total", &[("backend", &b1_addr)]),
        40.0
    );
    // Health checks: only checked backends have a verdict and check counts.
    assert_eq!(
        p.get(
            "flowplane_health_check_up",
            &[("backend", "10.0.1.2"), ("kind", "http")]
        ),
        0.0
    );
    assert_eq!(p.count("flowplane_health_check_up"), 1);
    assert_eq!(
        p.get(
            "flowplane_health_checks_total",
            &[("backend", "10.0.1.2"), ("result", "success")]
        ),
        10.0
    );
    assert_eq!(
        p.get(
            "flowplane_health_transitions_total",
            &[("backend", "10.0.1.1")]
        ),
        0.0
    );
    // Every family has HELP and TYPE, every counter ends in _total (checked by the parser).
    assert!(p.families.values().all(|f| f.help && !f.kind.is_empty()));
    assert!(p.families.len() >= 40, "{}", p.families.len());

    // The operator's reference documents every family and every drop reason.
    let doc_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operations.md");
    let doc = std::fs::read_to_string(doc_path).expect("docs/operations.md");
    for name in p.families.keys() {
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/operations.md lacks {name}"
        );
    }
    for (n, l, _) in &p.samples {
        if n == "flowplane_drops_total" {
            let r = &l["reason"];
            assert!(
                doc.contains(&format!("`{r}`")),
                "docs/operations.md lacks reason {r}"
            );
        }
    }
}

#[test]
fn maglev_changes_follow_vips_by_name() {
    let cfg = Arc::new(LbConfig::from_toml(CFG).unwrap());
    let mut b = Builder::new();
    let s1 = b.build(cfg.clone()).unwrap();
    let s2 = b.build(cfg.clone()).unwrap();
    let mut c = MaglevChanges::new();
    c.record(None, &s1);
    assert!(
        c.record(Some(&s1), &s2).is_empty(),
        "identical tables move nothing"
    );
    assert_eq!(c.get("sfx"), Some(&VipTableChanges::default()));
    // Dropping a VIP forgets it.
    let fewer =
        Arc::new(LbConfig::from_toml(&CFG.replace("name = \"sfx\"", "name = \"sfx2\"")).unwrap());
    let s3 = b.build(fewer).unwrap();
    assert!(
        c.record(Some(&s2), &s3).is_empty(),
        "a renamed VIP is new: nothing moved"
    );
    assert!(c.get("sfx").is_none());
    assert!(c.get("sfx2").is_some());
}

#[test]
fn worker_gauges_carry_table_sizes() {
    let cfg = Arc::new(
        LbConfig::from_toml(&CFG.replace(
            "maglev_size = 1009",
            "maglev_size = 1009\n    conn_table_capacity = 1000",
        ))
        .unwrap(),
    );
    let snaps = Arc::new(crate::snapshot::Published::new(Arc::new(
        Builder::new().build(cfg).unwrap(),
    )));
    let mut worker = crate::stage::LbStage::new(0, snaps, 1).unwrap();
    let frame = fp_pipeline::craft::tcp_v4("198.51.100.7", 40000, "203.0.113.10", 80, true);
    let mut pool = fp_pipeline::packet::Pool::new(8);
    let (mut rx, mut tx) = (fp_pipeline::packet::burst(), fp_pipeline::packet::burst());
    let mut p = pool.get().unwrap();
    p.fill(&frame);
    rx.push(p);
    worker.process(&mut rx, &mut tx, &mut pool, 1_000_000);
    assert_eq!(tx.len(), 1);
    let m = WorkerMetrics::of(0, worker.stats());
    assert_eq!(m.connections, (1, 0));
    assert_eq!(m.connection_slots, worker.connection_slots());
    assert!(m.connection_slots.0 >= 1000);
    assert_eq!(m.generation, worker.generation());
    assert_eq!(m.bursts[1], 1);
}
