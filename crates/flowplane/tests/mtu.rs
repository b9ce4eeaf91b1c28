//! End-to-end test of path MTU handling in the live load balancer (`flowplane run --interface`,
//! over AF_PACKET and over AF_XDP): large HTTP uploads through an encapsulating balancer with
//! 1500-byte MTUs on every link.
//!
//! The lab is `ipv6.rs`'s dual-stack one (client → router → one-armed balancer on a bridge, nginx
//! backends prepared by `flowplane backend --decap gre,ipip`), every link at the default MTU of
//! 1500. The client's full-size segments (1500 bytes of IP) cannot reach a backend once the
//! balancer has put a tunnel header in front of them; the balancer must answer with ICMP
//! "fragmentation needed" / ICMPv6 "packet too big" carrying the MTU minus the encapsulation, and
//! the client's kernel must take it (path MTU discovery), so the upload completes with smaller
//! segments. Four VIPs, one per combination that gives a different MTU:
//!
//! | VIP | encap | tunnel overhead | MTU the client must learn |
//! |---|---|---|---|
//! | 10.100.0.30 | IPv4 in GRE in IPv4 | 24 | 1476 |
//! | fd00:100::30 | IPv6 in GRE in IPv6 | 44 | 1456 |
//! | 10.100.0.31 | IPv4 in IPv6 | 40 | 1460 |
//! | fd00:100::31 | IPv6 in IPv4 | 20 | 1480 |
//!
//! # What is asserted (per driver, in one balancer run)
//!
//! 1. Before: the client's route cache holds no MTU for any VIP.
//! 2. For each VIP: `curl -T` PUTs a 1 MiB file of random bytes to `/upload/NAME` (nginx's WebDAV
//!    PUT on the backends) and gets 201; exactly one backend stored it, byte for byte; the
//!    client's route cache (`ip route get VIP`) now shows the VIP's MTU from the table.
//! 3. The balancer counted ICMP errors sent (`flowplane_mtu_total{action="icmp_sent"}`) and
//!    oversized packets dropped (`flowplane_drops_total{reason="drop_too_big"}`).
//! 4. Without DF: the client switches path MTU discovery off (`net.ipv4.ip_no_pmtu_disc = 1`,
//!    route cache flushed), so its segments leave without DF; another upload to the IPv4 GRE VIP
//!    completes byte for byte, the balancer having fragmented the datagrams
//!    (`flowplane_mtu_total{action="fragmented"}` grew) and the backend reassembled them.
//! 5. `/status` shows each VIP's path MTU, 1500 from the balancer's interface; after
//!    `ip link set eth0 mtu 1400` on the balancer it shows 1400 within a few seconds.
//! 6. No TCP checksum errors on the backends; SIGTERM: exit 0.
//!
//! The tests serialise themselves (one lab at a time). Run with `cargo test -p flowplane --test
//! mtu -- --nocapture` to see each step. They need root, nginx (with its WebDAV module), curl and
//! nstat (iproute2), and fail saying so otherwise.

mod common;

use anyhow::{ensure, Context, Result};
use common::*;
use fp_testnet::Proc;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One VIP of the test.
struct Case {
    name: &'static str,
    vip: &'static str,
    /// `gre` or `ipip`.
    encap: &'static str,
    /// Served by the backends' IPv6 addresses (tunnelled in IPv6).
    outer6: bool,
    /// The MTU the client must learn for the VIP.
    mtu: u32,
}

const CASES: [Case; 4] = [
    Case {
        name: "gre4",
        vip: "10.100.0.30",
        encap: "gre",
        outer6: false,
        mtu: 1476,
    },
    Case {
        name: "gre6",
        vip: "fd00:100::30",
        encap: "gre",
        outer6: true,
        mtu: 1456,
    },
    Case {
        name: "v4-ipip6",
        vip: "10.100.0.31",
        encap: "ipip",
        outer6: true,
        mtu: 1460,
    },
    Case {
        name: "v6-ipip4",
        vip: "fd00:100::31",
        encap: "ipip",
        outer6: false,
        mtu: 1480,
    },
];

/// Bytes per upload.
const UPLOAD: usize = 1 << 20;

/// nginx on every backend: PUT under /upload/ stores the body in the document root.
const UPLOADS: &str = "    location /upload/ { dav_methods PUT; create_full_put_path on; \
                       client_max_body_size 16m; }";

fn config_text() -> String {
    let mut s = format!(
        "[balancer]\naddress = \"{LB}\"\naddress6 = \"{LB6}\"\nseed = 0x5eed\n\
         conn_table_capacity = 65536\n\n"
    );
    for c in &CASES {
        s += &format!(
            "[[vip]]\nname = \"{}\"\naddress = \"{}\"\nport = 80\nprotocol = \"tcp\"\n\
             pools = [\"{}\"]\nencap = \"{}\"\n\n",
            c.name,
            c.vip,
            if c.outer6 { "web6" } else { "web4" },
            c.encap
        );
    }
    for (pool, addr) in [
        ("web6", backend_addr6 as fn(usize) -> String),
        ("web4", backend_addr),
    ] {
        let backends = (1..=2)
            .map(|i| format!("{{ address = \"{}\" }}", addr(i)))
            .collect::<Vec<_>>()
            .join(", ");
        s += &format!("[[pool]]\nname = \"{pool}\"\nbackends = [{backends}]\n\n");
    }
    s
}

fn build(tag: &str) -> Result<Lab> {
    let vips: Vec<&str> = CASES.iter().map(|c| c.vip).collect();
    LabSpec {
        tag,
        tools: &["nginx", "curl", "nstat"],
        vips: &vips,
        decap: "gre,ipip",
        backend_args: &|_| Vec::new(),
        backends: 2,
        nginx_server: UPLOADS,
    }
    .build_dual_stack()
}

/// Random bytes (a fixed generator: the content only has to be checkable).
fn payload(seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..UPLOAD)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// PUT `file` to `vip` as `/upload/NAME`; the HTTP status.
fn upload(lab: &Lab, vip: &str, file: &Path, name: &str) -> Result<u16> {
    let url = format!("{}upload/{name}", url_of(vip));
    let out = lab
        .client
        .cmd([
            "curl",
            "-g",
            "-sS",
            "-m",
            "30",
            "-T",
            &file.to_string_lossy(),
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &url,
        ])
        .run()
        .with_context(|| format!("curl -T {url}"))?;
    out.stdout
        .trim()
        .parse()
        .with_context(|| format!("curl's status {:?}", out.stdout))
}

/// The backends that stored `/upload/NAME`, and whether each copy equals `data`.
fn stored(lab: &Lab, name: &str, data: &[u8]) -> Vec<(usize, bool)> {
    lab.backends
        .iter()
        .filter_map(|b| {
            let p: PathBuf = b.nginx.www.join("upload").join(name);
            std::fs::read(p).ok().map(|got| (b.i, got == data))
        })
        .collect()
}

/// The MTU in the client's route cache for `vip`, if any.
fn cached_mtu(lab: &Lab, vip: &str) -> Result<Option<u32>> {
    let fam = if vip.contains(':') { "-6" } else { "-4" };
    let out = lab.client.cmd(["ip", fam, "route", "get", vip]).run()?;
    let words: Vec<&str> = out.stdout.split_whitespace().collect();
    Ok(words
        .windows(2)
        .find(|w| w[0] == "mtu")
        .and_then(|w| w[1].parse().ok()))
}

fn mtu_total(m: &Metrics, action: &str) -> Result<f64> {
    m.val("flowplane_mtu_total", &[("action", action)])
}

fn scenario(lab: &Lab, driver: &str, balancer: &mut Option<Proc>, t0: Instant) -> Result<()> {
    let lb = &lab.lb;
    let snmp_start: Vec<_> = lab
        .backends
        .iter()
        .map(|b| snmp(&b.ns))
        .collect::<Result<_>>()?;
    lab.write_config(&config_text())?;
    let fp = start_balancer(lab, driver, 2, balancer, t0)?;
    let dir = lab.net.dir("uploads")?;

    // ---- 1. nothing learnt yet ------------------------------------------------------------------
    for c in &CASES {
        ensure!(
            cached_mtu(lab, c.vip)?.is_none(),
            "the client's route cache has an MTU for {} before any traffic",
            c.vip
        );
    }
    let m0 = Metrics::scrape(lb)?;

    // ---- 2. an upload per VIP: path MTU discovery through the balancer ------------------------
    let mut failures = Vec::new();
    for (k, c) in CASES.iter().enumerate() {
        let data = payload(k as u64 + 1);
        let name = format!("{driver}-{}", c.name);
        let file = dir.join(&name);
        std::fs::write(&file, &data)?;
        let r = (|| -> Result<String> {
            let status = upload(lab, c.vip, &file, &name)?;
            ensure!(status == 201, "PUT answered HTTP {status}, not 201");
            let at = stored(lab, &name, &data);
            ensure!(
                at.len() == 1 && at[0].1,
                "stored by (backend, intact): {at:?}, expected one intact copy"
            );
            let mtu = cached_mtu(lab, c.vip)?;
            ensure!(
                mtu == Some(c.mtu),
                "the client's route cache shows MTU {mtu:?} for {}, expected {}",
                c.vip,
                c.mtu
            );
            Ok(format!(
                "1 MiB stored intact on b{}, client learnt MTU {}",
                at[0].0, c.mtu
            ))
        })();
        match r {
            Ok(n) => println!("{driver}: {} {}: {n}", c.name, c.vip),
            Err(e) => {
                println!("{driver}: {} {}: FAILED: {e:#}", c.name, c.vip);
                failures.push(format!("{} ({}): {e:#}", c.name, c.vip));
            }
        }
    }
    step("uploads with path MTU discovery", t0);

    // ---- 3. what the balancer counted ---------------------------------------------------------
    let m1 = Metrics::scrape(lb)?;
    let icmp = mtu_total(&m1, "icmp_sent")? - mtu_total(&m0, "icmp_sent")?;
    let too_big = m1.drops("drop_too_big")? - m0.drops("drop_too_big")?;
    println!("{driver}: {icmp} ICMP too-big errors sent, {too_big} packets too big dropped");
    if icmp < CASES.len() as f64 || too_big < icmp {
        failures.push(format!(
            "{icmp} ICMP errors sent and {too_big} packets dropped as too big: expected at least \
             one error per VIP, and a drop for each"
        ));
    }

    // ---- 4. without DF: the balancer fragments -------------------------------------------------
    lab.client.sysctl("net.ipv4.ip_no_pmtu_disc", "1")?;
    lab.client.cmd(["ip", "route", "flush", "cache"]).run()?;
    let c = &CASES[0];
    let data = payload(99);
    let name = format!("{driver}-nodf");
    let file = dir.join(&name);
    std::fs::write(&file, &data)?;
    let r = (|| -> Result<String> {
        let status = upload(lab, c.vip, &file, &name)?;
        ensure!(status == 201, "PUT answered HTTP {status}, not 201");
        let at = stored(lab, &name, &data);
        ensure!(
            at.len() == 1 && at[0].1,
            "stored by (backend, intact): {at:?}, expected one intact copy"
        );
        let m2 = Metrics::scrape(lb)?;
        let frag = mtu_total(&m2, "fragmented")? - mtu_total(&m1, "fragmented")?;
        ensure!(frag > 0.0, "no datagram fragmented by the balancer");
        Ok(format!(
            "1 MiB stored intact on b{}, {frag} datagrams fragmented",
            at[0].0
        ))
    })();
    lab.client.sysctl("net.ipv4.ip_no_pmtu_disc", "0")?;
    match r {
        Ok(n) => println!("{driver}: without DF to {}: {n}", c.vip),
        Err(e) => failures.push(format!("without DF to {}: {e:#}", c.vip)),
    }
    step("upload without DF", t0);

    // ---- 5. the path MTU follows the interface's ----------------------------------------------
    let r = (|| -> Result<()> {
        let (_, status) = admin(lb, "GET", "/status")?;
        ensure!(
            status.contains("vip \"gre4\": ") && status.contains("; path MTU 1500"),
            "/status does not show path MTU 1500 (the interface's):\n{status}"
        );
        lb.ip(&["link", "set", "eth0", "mtu", "1400"])?;
        let seen = wait_for(
            "/status to show the interface's new MTU",
            Duration::from_secs(5),
            || {
                let (_, s) = admin(lb, "GET", "/status")?;
                Ok(s.lines()
                    .any(|l| l.starts_with("vip \"gre4\"") && l.ends_with("path MTU 1400"))
                    .then_some(()))
            },
        );
        lb.ip(&["link", "set", "eth0", "mtu", "1500"])?;
        seen
    })();
    if let Err(e) = r {
        failures.push(format!("interface MTU: {e:#}"));
    }
    step("the path MTU follows the interface's", t0);

    // ---- 6. backends' kernels, shutdown --------------------------------------------------------
    for (b, start) in lab.backends.iter().zip(&snmp_start) {
        let e = delta(start, &snmp(&b.ns)?, "TcpInCsumErrors");
        if e != 0 {
            failures.push(format!("backend {}: {e} TCP checksum errors", b.i));
        }
    }
    if let Err(e) = stop_balancer(lab, &fp, t0) {
        failures.push(format!("shutdown: {e:#}"));
    }
    none_failed(&failures)
}

fn run_driver(driver: &str) {
    run_lab(
        driver,
        || build(&lab_tag("mtu", driver)),
        |lab, balancer, t0| scenario(lab, driver, balancer, t0),
    );
}

#[test]
fn mtu_af_packet() {
    run_driver("af_packet");
}

#[test]
fn mtu_af_xdp() {
    run_driver("af_xdp");
}
