//! The balancer's commands as the `flowplane` binary offers them: `run` (live on an interface, or
//! offline from one capture to another) and `demo` (generated traffic); the binary only parses.

use anyhow::Result;
use std::path::PathBuf;

pub use crate::offline::{demo, DemoArgs};

/// `flowplane run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Load-balancer configuration (TOML).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Offline: input capture (pcap, Ethernet or raw IP).
    #[arg(
        long = "in",
        value_name = "IN.pcap",
        requires = "output",
        conflicts_with = "interface"
    )]
    pub input: Option<PathBuf>,
    /// Offline: output capture, the encapsulated packets sent toward backends.
    #[arg(long = "out", value_name = "OUT.pcap", requires = "input")]
    pub output: Option<PathBuf>,
    /// Live: balance the traffic of this interface (one-armed: packets to backends leave through
    /// it too). Runs until SIGTERM/SIGINT; SIGHUP reloads the configuration.
    #[arg(
        long,
        short = 'i',
        value_name = "IF",
        required_unless_present = "input"
    )]
    pub interface: Option<String>,
    /// Live: port driver, af_packet (TPACKET_V3 + fan-out) or af_xdp.
    #[arg(long, default_value = "af_packet")]
    pub driver: fp_engine::live::Driver,
    /// Live, AF_XDP: where the XDP program runs: auto, native or generic.
    #[arg(long, default_value = "auto")]
    pub xdp_mode: fp_engine::afxdp::ModeChoice,
    /// Live: serve metrics, reload, trace and status over HTTP on this address.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<std::net::SocketAddr>,
    /// Live: do not pin worker i to CPU i.
    #[arg(long)]
    pub no_pin: bool,
    /// Worker threads (default: one per CPU).
    #[arg(long)]
    pub workers: Option<usize>,
}

/// Run the balancer: offline when `--in` and `--out` are given, else live on `--interface`.
pub fn run(a: RunArgs) -> Result<()> {
    if let (Some(input), Some(output)) = (&a.input, &a.output) {
        return crate::offline::run_capture(&a.config, input, output, a.workers);
    }
    let interface = a
        .interface
        .clone()
        .expect("clap requires --interface or --in");
    crate::live::run(&crate::live::LiveOptions {
        config: a.config,
        interface,
        driver: a.driver,
        xdp_mode: a.xdp_mode,
        workers: fp_engine::driver::workers_or_cpus(a.workers),
        admin: a.admin,
        pin: !a.no_pin,
    })
}
