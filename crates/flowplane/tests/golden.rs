//! Golden test of `flowplane run`: a fixed capture in, exact bytes out, checked against committed
//! fixtures and decoded by an independent decoder (tshark, installed by scripts/deps.sh).
//!
//! The input holds a TCP SYN and an ACK to an IPv4 VIP, a SYN to an IPv6 VIP, a UDP datagram, a
//! fragmented UDP datagram arriving in reverse order, and frames that must be dropped (non-VIP,
//! truncated, bad header checksum). The output must be exactly `fixtures/lb-out.pcap`.
//! Regenerate the fixtures after an intended change with `UPDATE_GOLDEN=1 cargo test -p flowplane
//! --test golden` and review the diff.

use fp_engine::pcap::{PcapReader, PcapWriter};
use fp_pipeline::craft::{self, Endpoints};
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn input_frames() -> Vec<Vec<u8>> {
    let mut v = vec![
        craft::tcp_v4("198.51.100.7", 40000, "203.0.113.10", 80, true),
        craft::tcp_v4("198.51.100.7", 40000, "203.0.113.10", 80, false),
        craft::tcp(
            &Endpoints::new("2001:db8::7", 40001, "2001:db8::10", 80),
            true,
        ),
        craft::udp(
            &Endpoints::new("198.51.100.8", 40053, "203.0.113.53", 7000),
            40,
        ),
    ];
    let mut frags = craft::udp_fragments(
        &Endpoints::new("198.51.100.9", 40054, "203.0.113.53", 7000),
        2000,
        800,
        4242,
    );
    frags.reverse();
    v.extend(frags);
    v.push(craft::tcp_v4(
        "198.51.100.7",
        40000,
        "203.0.113.99",
        80,
        true,
    )); // not a VIP
    v.push(craft::tcp_v4("198.51.100.7", 40000, "203.0.113.10", 80, true)[..30].to_vec()); // truncated
    let mut bad = craft::tcp_v4("198.51.100.7", 40002, "203.0.113.10", 80, true);
    bad[24] ^= 0xff; // IPv4 header checksum
    v.push(bad);
    v
}

fn write_input(path: &Path) {
    let mut w = PcapWriter::create(path).unwrap();
    for (i, f) in input_frames().iter().enumerate() {
        w.write_frame(1_700_000_000_000_000_000 + i as u64 * 1000, f)
            .unwrap();
    }
    fp_engine::port::Port::flush(&mut w).unwrap();
}

fn read_all(path: &Path) -> Vec<(u64, Vec<u8>)> {
    let mut r = PcapReader::open(path).unwrap();
    let mut v = Vec::new();
    while let Some((ts, f)) = r.next_frame() {
        v.push((ts, f.to_vec()));
    }
    v
}

#[test]
fn run_produces_the_golden_capture() {
    let dir = std::env::temp_dir().join(format!("fp-golden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.pcap");
    let output = dir.join("out.pcap");
    write_input(&input);
    let out = Command::new(env!("CARGO_BIN_EXE_flowplane"))
        .args(["run", "--workers", "1", "--config"])
        .arg(fixtures().join("lb-golden.toml"))
        .arg("--in")
        .arg(&input)
        .arg("--out")
        .arg(&output)
        .output()
        .expect("run flowplane");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "flowplane run failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The report names every drop reason.
    for reason in ["drop_non_vip", "ipv4_truncated", "ipv4_bad_checksum"] {
        assert!(stdout.contains(reason), "report lacks {reason}:\n{stdout}");
    }

    let golden = fixtures().join("lb-out.pcap");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::copy(&output, &golden).unwrap();
        std::fs::copy(&input, fixtures().join("lb-in.pcap")).unwrap();
    }
    assert_eq!(
        std::fs::read(&input).unwrap(),
        std::fs::read(fixtures().join("lb-in.pcap")).unwrap(),
        "input fixture changed"
    );
    let got = read_all(&output);
    let want = read_all(&golden);
    assert_eq!(
        got.len(),
        4 + 3,
        "forwarded frames: 4 single packets and 3 fragments"
    );
    assert_eq!(got, want, "output differs from the golden capture");

    // The inner packets are untouched: each output frame ends with an input frame's IP packet.
    let inputs: Vec<Vec<u8>> = input_frames().iter().map(|f| f[14..].to_vec()).collect();
    for (_, f) in &got {
        let inner = &f[14 + 20 + 4..];
        assert!(
            inputs.iter().any(|i| i == inner),
            "an output frame's inner packet is not an input packet"
        );
    }

    tshark_check(&output);
    std::fs::remove_dir_all(&dir).ok();
}

/// Decode the output with tshark: every frame is IPv4/GRE from the balancer to a backend, carrying
/// the original packet with valid checksums.
fn tshark_check(pcap: &Path) {
    let run = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(pcap)
        .args([
            "-o",
            "ip.check_checksum:TRUE",
            "-o",
            "tcp.check_checksum:TRUE",
            "-o",
            "udp.check_checksum:TRUE",
            "-T",
            "fields",
            "-E",
            "separator=;",
            "-E",
            "aggregator=|",
            "-e",
            "ip.src",
            "-e",
            "ip.dst",
            "-e",
            "ipv6.src",
            "-e",
            "ipv6.dst",
            "-e",
            "gre.proto",
            "-e",
            "ip.checksum.status",
            "-e",
            "tcp.srcport",
            "-e",
            "tcp.checksum.status",
            "-e",
            "udp.dstport",
            "-e",
            "_ws.malformed",
        ])
        .output();
    let out = match run {
        Ok(o) => o,
        Err(e) => panic!("tshark is required for this test (scripts/deps.sh installs it): {e}"),
    };
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 7, "{text}");
    let backends = ["10.0.1.1", "10.0.1.2", "10.0.1.3"];
    for l in &lines {
        let f: Vec<&str> = l.split(';').collect();
        let ip_src: Vec<&str> = f[0].split('|').collect();
        let ip_dst: Vec<&str> = f[1].split('|').collect();
        assert_eq!(ip_src[0], "10.0.0.2", "outer source: {l}");
        assert!(backends.contains(&ip_dst[0]), "outer destination: {l}");
        assert!(f[4] == "0x0800" || f[4] == "0x86dd", "GRE protocol: {l}");
        // Every IPv4 header checksum tshark verified is good (status 1).
        assert!(f[5].split('|').all(|s| s == "1"), "IPv4 checksum: {l}");
        if !f[7].is_empty() {
            assert_eq!(f[7], "1", "TCP checksum: {l}");
        }
        assert!(f[9].is_empty(), "tshark found the frame malformed: {l}");
        if f[4] == "0x0800" {
            assert!(
                ip_src.len() == 2 && ip_src[1].starts_with("198.51.100."),
                "inner source: {l}"
            );
        } else {
            assert_eq!(f[2], "2001:db8::7", "inner IPv6 source: {l}");
        }
    }
    // The fragments all went to one backend.
    let frag_backends: std::collections::HashSet<&str> = lines
        .iter()
        .filter(|l| l.contains("198.51.100.9"))
        .map(|l| l.split(';').nth(1).unwrap().split('|').next().unwrap())
        .collect();
    assert_eq!(frag_backends.len(), 1, "{text}");
}
