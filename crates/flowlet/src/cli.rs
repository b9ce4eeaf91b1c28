//! `flowplane flowlet`: the Flowlet balancer's command-line options, the balancer's settings
//! built from them (errors name the option), and the entry point — offline ([`crate::offline`])
//! or live ([`crate::service`]).

use anyhow::{bail, Context, Result};
use fp_flowstate::{Config, FlowletConfig, Mode, Policy};
use fp_service::LiveArgs;
use fp_wire::ethernet::MacAddr;
use std::path::PathBuf;

/// `flowplane flowlet`: offline on a capture or generated traffic, or live on interfaces.
#[derive(clap::Args, Debug)]
pub struct FlowletArgs {
    /// Input capture (pcap, Ethernet or raw IP).
    #[arg(long = "in", value_name = "IN.pcap", conflicts_with = "generate")]
    pub input: Option<PathBuf>,
    /// Output capture: every forwarded frame, its destination MAC set to its output's next hop.
    /// Required with --in; optional with --generate (default: count and discard).
    #[arg(long = "out", value_name = "OUT.pcap")]
    pub output: Option<PathBuf>,
    /// Generated traffic instead of a capture: a Switcharoo workload (1-pkt, 2-pkt, 8-pkt: flows of
    /// k packets within 50 us; zipf-flows: 1M flows, Zipf(1)) or a traffic-generator mix (syn,
    /// established, zipf, constant, v4v6, fragmented, malformed, demo).
    #[arg(
        long,
        value_name = "NAME",
        required_unless_present_any = ["input", "interface"]
    )]
    pub generate: Option<String>,
    /// Live: the input interface (frames to balance arrive here); needs --paths and --next-hops.
    #[arg(long, value_name = "IF", conflicts_with_all = ["input", "generate", "output"], requires = "paths")]
    pub interface: Option<String>,
    /// Live: the output paths, one interface each, comma-separated; path o's frames leave on the
    /// o-th interface with destination MAC the o-th of --next-hops and source MAC the interface's.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "IF1,IF2,...",
        requires = "interface"
    )]
    pub paths: Vec<String>,
    /// Live: do not look for tracer probes.
    #[arg(long)]
    pub no_trace: bool,
    /// Generated packets.
    #[arg(long, default_value_t = 4_000_000)]
    pub packets: u64,
    /// Generated packet rate in Mpps: it spaces the timestamps (12.5 = 100 Gbit/s of 1000-byte
    /// packets, the paper's setting).
    #[arg(long, default_value_t = 12.5)]
    pub mpps: f64,
    /// Frame size of the Switcharoo workloads (UDP frames).
    #[arg(long, default_value_t = 1000)]
    pub frame_bytes: usize,
    /// Connections of the traffic-generator mixes.
    #[arg(long, default_value_t = 200_000)]
    pub conns: u64,
    /// Number of outputs (paths or next hops).
    #[arg(long, default_value_t = 4)]
    pub outputs: u16,
    /// Next-hop MAC of each output, comma-separated (sets the number of outputs). Default:
    /// 02:66:6c:00:HH:LL for output HHLL.
    #[arg(long, value_name = "MAC,MAC,...", value_delimiter = ',')]
    pub next_hops: Vec<String>,
    /// Flowlet gap in microseconds: a longer pause lets the flow's next packet move (also the
    /// table's expiry, from the last packet).
    #[arg(long, default_value_t = 50.0)]
    pub gap_us: f64,
    /// Batching window in microseconds (see the module doc; default: gap / 10).
    #[arg(long)]
    pub window_us: Option<f64>,
    /// Cuckoo slots per array of each worker's table (the table holds twice as many flows).
    #[arg(long, default_value_t = 32 * 1024)]
    pub slots: usize,
    /// Consistency mode: strict (default), weak (the paper's Tofino code) or unordered.
    #[arg(long, default_value = "strict", value_parser = parse_mode)]
    pub mode: Mode,
    /// Output choice for a new flowlet: least-loaded (bytes) or random.
    #[arg(long, default_value = "least-loaded", value_parser = parse_policy)]
    pub policy: Policy,
    /// Seed of the steering and table hashes and the generators (default: random, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the summary (counters, rates) as one JSON object to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Workers and CPUs (offline too); live: driver and admin address.
    #[command(flatten)]
    pub live: LiveArgs,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    match s {
        "strict" => Ok(Mode::Strict),
        "weak" => Ok(Mode::Weak),
        "unordered" => Ok(Mode::Unordered),
        _ => Err(format!("{s:?}: use strict, weak or unordered")),
    }
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    match s {
        "least-loaded" => Ok(Policy::LeastLoaded),
        "random" => Ok(Policy::Random),
        _ => Err(format!("{s:?}: use least-loaded or random")),
    }
}

/// The default next hop of output `o`: 02:66:6c:00:HH:LL.
pub fn default_next_hop(o: u16) -> MacAddr {
    let [h, l] = o.to_be_bytes();
    MacAddr([0x02, 0x66, 0x6c, 0x00, h, l])
}

pub(crate) fn parse_mac(s: &str) -> Result<MacAddr> {
    // '-' separators (Windows style) are accepted too.
    s.trim()
        .replace('-', ":")
        .parse::<MacAddr>()
        .with_context(|| {
            format!("--next-hops: {s:?} is not a MAC address (six hex bytes separated by ':')")
        })
}

/// Run `flowplane flowlet`: live with `--interface`, else offline.
pub fn run(a: FlowletArgs) -> Result<()> {
    let macs: Vec<MacAddr> = if a.next_hops.is_empty() {
        if a.outputs == 0 {
            bail!("--outputs 0: at least one output is needed");
        }
        (0..a.outputs).map(default_next_hop).collect()
    } else {
        if a.next_hops.len() > u16::MAX as usize {
            bail!("--next-hops: at most 65535 outputs");
        }
        a.next_hops
            .iter()
            .map(|s| parse_mac(s))
            .collect::<Result<_>>()?
    };
    if !(a.gap_us > 0.0 && a.gap_us.is_finite()) {
        bail!("--gap-us {}: must be positive", a.gap_us);
    }
    let gap_ns = (a.gap_us * 1e3).round().max(1.0) as u64;
    let window_ns = match a.window_us {
        Some(w) if w >= 0.0 && w.is_finite() => (w * 1e3).round() as u64,
        Some(w) => bail!("--window-us {w}: must be 0 or more"),
        None => gap_ns / 10,
    };
    let seed = match a.seed {
        Some(s) => s,
        None => {
            let mut b = [0u8; 8];
            getrandom::getrandom(&mut b).context("drawing a random seed")?;
            u64::from_le_bytes(b)
        }
    };
    let lb = FlowletConfig {
        outputs: macs.len() as u16,
        flowlet_timeout_ns: gap_ns,
        policy: a.policy,
        table: Config {
            slots_per_array: a.slots,
            mode: a.mode,
            seed: fp_hash::splitmix64(seed ^ 0x7ab1e),
            ..Config::default()
        },
        engine: Default::default(),
    };
    if let Some(input) = &a.interface {
        if a.next_hops.is_empty() {
            bail!("--interface needs --next-hops: one next-hop MAC per path");
        }
        return crate::service::run(
            crate::service::FlowletLive {
                input: input.clone(),
                paths: a.paths.clone(),
                next_hops: macs,
                lb,
                trace: !a.no_trace,
            },
            &a.live.options(),
        );
    }
    crate::offline::run(&a, seed, window_ns, lb, macs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_hops_and_mac_parsing() {
        assert_eq!(default_next_hop(0).0, [0x02, 0x66, 0x6c, 0, 0, 0]);
        assert_eq!(
            default_next_hop(0x1234).0,
            [0x02, 0x66, 0x6c, 0, 0x12, 0x34]
        );
        assert_eq!(
            parse_mac("0a:1B:2c:3d:4e:5f").unwrap().0,
            [0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f]
        );
        for bad in [
            "0a:1b:2c:3d:4e",
            "0a:1b:2c:3d:4e:5f:60",
            "0a:1b:2c:3d:4e:zz",
            "0a:1b:2c:3d:4e:123",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
    }
}
