//! The `flowplane` command: thin front end over the engine crates.
//!
//! Layer: **cli**. It parses arguments, builds what the command needs, and prints results.
#![deny(unsafe_code)]

use anyhow::Result;
use clap::{Parser, Subcommand};

mod backend;
mod bench;
mod flowlet;
mod lb;
mod live;
mod switch;

/// OS helpers shared with the I/O layer.
mod sys {
    pub use fp_io::sys::pin_to_cpu;
}
#[derive(Parser, Debug)]
#[command(
    name = "flowplane",
    version,
    about = "A software dataplane with very large tables"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a benchmark: prints a table; `--json FILE` writes records, `--quick` is a one-minute smoke run.
    Bench {
        #[command(subcommand)]
        which: Box<bench::BenchCmd>,
    },
    /// Prepare (or with --remove, restore) this Linux host as a direct-server-return backend: VIP on
    /// loopback, ARP and rp_filter settings, and decapsulation (kernel VXLAN or a tc eBPF program
    /// for GRE/IPIP).
    Backend(backend::BackendArgs),
    /// Run the load balancer: live on an interface (`--config FILE --interface IF [--driver
    /// af_packet|af_xdp] [--admin ADDR]`) or offline on a capture (`--config FILE --in IN.pcap
    /// --out OUT.pcap`).
    Run(lb::RunArgs),
    /// The main job with an embedded default: the load balancer on generated traffic, with a report
    /// of packets per second, per-backend shares, connection-table hit rate and drops by reason.
    Demo(lb::DemoArgs),
    /// Run the CuckooSwitch Ethernet switch on live interfaces (`--ports IF1,IF2,... [--driver
    /// af_packet|af_xdp] [--workers N] [--aging-secs S] [--static MAC=PORT] [--fib FILE] [--admin
    /// ADDR]`): MAC learning, aging, flooding, static entries, metrics and tracer.
    Switch(switch::SwitchArgs),
    /// Run the Flowlet load balancer (Switcharoo flow-state table) offline: on a capture (`--in
    /// IN.pcap --out OUT.pcap`) or on generated traffic (`--generate 1-pkt|2-pkt|8-pkt|zipf-flows|MIX
    /// --packets N`), with `--outputs N`, `--gap-us 50`, `--workers N`; each forwarded frame's
    /// destination MAC names its output; prints packets/s and per-outcome counters.
    Flowlet(flowlet::FlowletArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench { which } => bench::run(*which),
        Command::Backend(a) => backend::run(a),
        Command::Run(a) => lb::run(a),
        Command::Demo(a) => lb::demo(a),
        Command::Switch(a) => switch::run(a),
        Command::Flowlet(a) => flowlet::run(a),
    }
}
