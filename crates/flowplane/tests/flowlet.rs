//! End-to-end test of `flowplane flowlet` on a capture: flows made of flowlets (bursts of packets a
//! few microseconds apart, separated by pauses far longer than the flowlet gap), IPv4 and IPv6, TCP
//! and UDP, a fragmented datagram, and malformed frames. Checks, on the output capture and the JSON
//! summary:
//!
//! * every valid packet leaves exactly once, with only its destination MAC changed, to one of the
//!   outputs' next hops; malformed frames are dropped and counted under their parser reason;
//! * per flow, packets leave in arrival order;
//! * all packets of a flowlet leave on one output; after a pause longer than the gap, flows do move;
//! * the counters agree with the capture: packets and bytes per output, new + gap flowlets = the
//!   flowlets of the input, same-flowlet packets = the rest, nothing left in flight;
//! * with a gap longer than every pause, each flow is one flowlet on one output.

use fp_engine::pcap::{PcapReader, PcapWriter};
use fp_pipeline::craft::{self, Endpoints};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const T0: u64 = 1_700_000_000_000_000_000;
const OUTPUTS: u16 = 4;

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        fp_hash::reduce(fp_hash::splitmix64(self.0), n)
    }
}

/// One input frame and what the test knows about it.
struct Frame {
    ts: u64,
    bytes: Vec<u8>,
    /// (flow, flowlet) for a valid frame, `None` for a malformed one.
    flowlet: Option<(usize, usize)>,
}

/// A flow's frame with `id` written where it makes the frame unique (TCP sequence number or UDP
/// payload); the parser checks neither the TCP nor the UDP checksum.
fn flow_frame(flow: usize, id: u32) -> Vec<u8> {
    let i = flow as u16;
    if flow.is_multiple_of(5) {
        let e = Endpoints::new(
            &format!("2001:db8::{}", flow + 1),
            20000 + i,
            "2001:db8::10",
            80,
        );
        let mut f = craft::tcp(&e, false);
        f[58..62].copy_from_slice(&id.to_be_bytes());
        f
    } else if flow.is_multiple_of(7) {
        let src = format!("198.51.100.{}", 1 + flow % 200);
        let e = Endpoints::new(&src, 20000 + i, "203.0.113.53", 53);
        let mut f = craft::udp(&e, 16);
        f[42..46].copy_from_slice(&id.to_be_bytes());
        f
    } else {
        let src = format!("198.51.100.{}", 1 + flow % 200);
        let e = Endpoints::new(&src, 20000 + i, "203.0.113.10", 80);
        let mut f = craft::tcp(&e, false);
        f[38..42].copy_from_slice(&id.to_be_bytes());
        f
    }
}

/// 240 flows x 3 flowlets of 1-6 packets, 1-15 us apart within a flowlet, 300-600 us between
/// flowlets; one datagram in 3 fragments (one flowlet of its own flow); three malformed frames.
fn trace() -> (Vec<Frame>, usize) {
    let mut rng = Rng(42);
    let mut frames = Vec::new();
    let mut id = 0u32;
    let flows = 240;
    for flow in 0..flows {
        let mut t = T0 + rng.below(100_000);
        for flowlet in 0..3 {
            if flowlet > 0 {
                t += 300_000 + rng.below(300_000);
            }
            for k in 0..1 + rng.below(6) {
                if k > 0 {
                    t += 1_000 + rng.below(14_000);
                }
                id += 1;
                frames.push(Frame {
                    ts: t,
                    bytes: flow_frame(flow, id),
                    flowlet: Some((flow, flowlet)),
                });
            }
        }
    }
    let e = Endpoints::new("198.51.100.250", 7000, "203.0.113.53", 7001);
    for (k, f) in craft::udp_fragments(&e, 3000, 1200, 77)
        .into_iter()
        .enumerate()
    {
        frames.push(Frame {
            ts: T0 + 50_000 + k as u64 * 2_000,
            bytes: f,
            flowlet: Some((flows, 0)),
        });
    }
    let good = craft::tcp_v4("198.51.100.9", 999, "203.0.113.10", 80, true);
    let mut bad_sum = good.clone();
    bad_sum[24] ^= 0xff;
    let mut arp = good.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    for (k, b) in [good[..30].to_vec(), bad_sum, arp].into_iter().enumerate() {
        frames.push(Frame {
            ts: T0 + 20_000 + k as u64 * 30_000,
            bytes: b,
            flowlet: None,
        });
    }
    frames.sort_by_key(|f| f.ts);
    (frames, flows + 1)
}

fn write_pcap(path: &Path, frames: &[Frame]) {
    let mut w = PcapWriter::create(path).unwrap();
    for f in frames {
        w.write_frame(f.ts, &f.bytes).unwrap();
    }
    fp_engine::port::Port::flush(&mut w).unwrap();
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::open(path).unwrap();
    let mut v = Vec::new();
    while let Some((_, f)) = r.next_frame() {
        v.push(f.to_vec());
    }
    v
}

fn run(dir: &Path, input: &Path, name: &str, gap_us: &str) -> (Vec<Vec<u8>>, Value) {
    let out = dir.join(format!("{name}.pcap"));
    let json = dir.join(format!("{name}.json"));
    let o = Command::new(env!("CARGO_BIN_EXE_flowplane"))
        .args(["flowlet", "--workers", "2", "--seed", "7", "--no-pin"])
        .args(["--outputs", &OUTPUTS.to_string(), "--gap-us", gap_us])
        .arg("--in")
        .arg(input)
        .arg("--out")
        .arg(&out)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "flowplane flowlet failed: {}\n{stdout}",
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("{stdout}");
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (read_pcap(&out), summary)
}

fn next_hop(o: u16) -> [u8; 6] {
    let [h, l] = o.to_be_bytes();
    [0x02, 0x66, 0x6c, 0x00, h, l]
}

/// The output of every valid input frame, checking that each leaves once, unchanged but for its
/// destination MAC, and that each flow's frames leave in arrival order. Returns (input index →
/// output) and the per-output (packets, bytes) seen in the capture.
fn check_capture(frames: &[Frame], out: &[Vec<u8>]) -> (HashMap<usize, u16>, Vec<(u64, u64)>) {
    let by_rest: HashMap<&[u8], usize> = frames
        .iter()
        .enumerate()
        .filter(|(_, f)| f.flowlet.is_some())
        .map(|(i, f)| (&f.bytes[6..], i))
        .collect();
    let valid = frames.iter().filter(|f| f.flowlet.is_some()).count();
    assert_eq!(by_rest.len(), valid, "test frames must be distinct");
    let hops: HashMap<[u8; 6], u16> = (0..OUTPUTS).map(|o| (next_hop(o), o)).collect();
    let mut seen = HashMap::new();
    let mut per_output = vec![(0u64, 0u64); OUTPUTS as usize];
    let mut last_of_flow: HashMap<usize, usize> = HashMap::new();
    for f in out {
        let i = *by_rest
            .get(&f[6..])
            .expect("an output frame that is no input frame with its destination MAC changed");
        let mac: [u8; 6] = f[..6].try_into().unwrap();
        let o = *hops
            .get(&mac)
            .expect("destination MAC is an output's next hop");
        assert!(seen.insert(i, o).is_none(), "frame {i} left twice");
        per_output[o as usize].0 += 1;
        per_output[o as usize].1 += f.len() as u64;
        let (flow, _) = frames[i].flowlet.unwrap();
        if let Some(prev) = last_of_flow.insert(flow, i) {
            assert!(prev < i, "flow {flow}: frame {i} left after frame {prev}");
        }
    }
    assert_eq!(seen.len(), valid, "every valid frame leaves");
    (seen, per_output)
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fp-flowlet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn flowlets_keep_one_output_flows_keep_order_counters_agree() {
    let dir = temp_dir();
    let (frames, flows) = trace();
    let input = dir.join("in.pcap");
    write_pcap(&input, &frames);
    let valid = frames.iter().filter(|f| f.flowlet.is_some()).count() as u64;
    let flowlets: HashSet<(usize, usize)> = frames.iter().filter_map(|f| f.flowlet).collect();

    let (out, s) = run(&dir, &input, "gap50", "50");
    let (output_of, per_output) = check_capture(&frames, &out);

    // Packets of a flowlet share an output; pauses longer than the gap let flows move.
    let mut flowlet_output: HashMap<(usize, usize), u16> = HashMap::new();
    for (&i, &o) in &output_of {
        let fl = frames[i].flowlet.unwrap();
        let first = *flowlet_output.entry(fl).or_insert(o);
        assert_eq!(
            first, o,
            "flowlet {fl:?} split over outputs {first} and {o}"
        );
    }
    let moves = (0..flows)
        .flat_map(|f| (1..3).map(move |k| (f, k)))
        .filter(|&(f, k)| {
            let (a, b) = (flowlet_output.get(&(f, k - 1)), flowlet_output.get(&(f, k)));
            a.is_some() && b.is_some() && a != b
        })
        .count();
    assert!(moves > 0, "no flow changed output after a pause of 300+ us");

    // Counters agree with the capture.
    assert_eq!(s["packets_in"], frames.len() as u64);
    assert_eq!(s["forwarded"], valid);
    assert_eq!(s["packets_out"], valid);
    assert_eq!(s["in_flight_end"], 0);
    let new = s["new_flowlets"].as_u64().unwrap();
    let gap = s["gap_flowlets"].as_u64().unwrap();
    assert_eq!(new + gap, flowlets.len() as u64, "{s}");
    assert_eq!(
        s["same_flowlet"].as_u64().unwrap(),
        valid - flowlets.len() as u64
    );
    for (o, &(p, b)) in per_output.iter().enumerate() {
        assert_eq!(s["per_output"][o]["packets"], p, "output {o}");
        assert_eq!(s["per_output"][o]["bytes"], b, "output {o}");
        assert_eq!(
            s["per_output"][o]["next_hop"],
            format!("02:66:6c:00:00:{o:02x}")
        );
    }
    for (reason, n) in s["drops"]["table"].as_object().unwrap() {
        assert_eq!(n, 0, "table drop {reason}");
    }
    let parse = s["drops"]["parse"].as_object().unwrap();
    assert_eq!(parse.len(), 3, "{parse:?}");
    for reason in ["ipv4_truncated", "ipv4_bad_checksum", "unknown_ethertype"] {
        assert_eq!(parse[reason], 1, "{reason}: {parse:?}");
    }
    let hist: u64 = s["passes_hist"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(hist, valid);
    assert!(s["table"]["inserts"].as_u64().unwrap() >= new);

    // A gap longer than every pause: one flowlet per flow, one output per flow.
    let (out, s) = run(&dir, &input, "gap2000", "2000");
    let (output_of, _) = check_capture(&frames, &out);
    let mut flow_output: HashMap<usize, u16> = HashMap::new();
    for (&i, &o) in &output_of {
        let flow = frames[i].flowlet.unwrap().0;
        assert_eq!(
            *flow_output.entry(flow).or_insert(o),
            o,
            "flow {flow} moved"
        );
    }
    assert_eq!(
        s["new_flowlets"].as_u64().unwrap() + s["gap_flowlets"].as_u64().unwrap(),
        flows as u64
    );
    assert_eq!(s["in_flight_end"], 0);
    std::fs::remove_dir_all(&dir).ok();
}
