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
    /// Live: driver, workers, CPUs, admin address (offline: workers).
    #[command(flatten)]
    pub live: fp_service::LiveArgs,
}

/// Run the balancer: offline when `--in` and `--out` are given, else live on `--interface`.
pub fn run(a: RunArgs) -> Result<()> {
    if let (Some(input), Some(output)) = (&a.input, &a.output) {
        return crate::offline::run_capture(&a.config, input, output, a.live.workers);
    }
    let interface = a
        .interface
        .clone()
        .expect("clap requires --interface or --in");
    crate::service::run(&a.config, &interface, &a.live.options())
}
