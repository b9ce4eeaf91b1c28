//! The `flowplane` command: argument parsing and wiring over the application crates.
//!
//! Layer: **cli** (docs/architecture.md). Each subcommand hands its parsed arguments to its
//! application: `run`, `check`, `demo` and `backend` to the load balancer (`fp-lb`), `switch` to the
//! CuckooSwitch switch (`fp-switch`), `flowlet` to the Flowlet balancer (`fp-flowlet`), `cluster`
//! to the ScaleBricks cluster node and its entry commands (`fp-cluster`). The
//! benchmarks are a separate binary, `flowplane-bench`, so this one links none of their peers.
#![deny(unsafe_code)]

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

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
    /// Run a benchmark (the separate `flowplane-bench` binary next to this one, which links the
    /// peers): `flowplane bench NAME [--quick] [--json FILE] [--plots DIR]`.
    #[command(disable_help_flag = true)]
    Bench {
        /// The benchmark and its arguments, passed to flowplane-bench.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<std::ffi::OsString>,
    },
    /// Prepare (or with --remove, restore) this Linux host as a direct-server-return backend: VIP on
    /// loopback, ARP and rp_filter settings, and decapsulation (kernel VXLAN or a tc eBPF program
    /// for GRE/IPIP).
    Backend(fp_lb::backend::BackendArgs),
    /// Run the load balancer: live on an interface (`--config FILE --interface IF [--driver
    /// af_packet|af_xdp] [--admin ADDR]`) or offline on a capture (`--config FILE --in IN.pcap
    /// --out OUT.pcap`).
    Run(fp_lb::cli::RunArgs),
    /// Check a load-balancer or switch configuration without running it (`--config FILE`):
    /// validates it as a start and a reload do, prints the plan (VIPs, pools with weights and
    /// health checks, Maglev table digests, BGP announcements; or the switch's ports, VLANs and
    /// static entries), exits non-zero naming the field on error. Use it before a reload.
    Check(fp_lb::check::CheckArgs),
    /// The main job with an embedded default: the load balancer on generated traffic, with a report
    /// of packets per second, per-backend shares, connection-table hit rate and drops by reason.
    Demo(fp_lb::cli::DemoArgs),
    /// Run the CuckooSwitch Ethernet switch on live interfaces (`--ports IF1,IF2,... [--driver
    /// af_packet|af_xdp] [--workers N] [--aging-secs S] [--static MAC=PORT] [--fib FILE] [--admin
    /// ADDR]`): MAC learning, aging, flooding, static entries, metrics and tracer.
    Switch(fp_switch::cli::SwitchArgs),
    /// A ScaleBricks cluster whose state lives in etcd: `cluster run --config FILE --node ID` runs
    /// one node (external ports, interconnect port, its FIB share and partition-table replica);
    /// `cluster entries add|move|remove|load|list --config FILE` changes the entries and waits
    /// until every live node applied them; `cluster status` and `cluster check`.
    Cluster(fp_cluster::cli::ClusterArgs),
    /// Run the Flowlet load balancer (Switcharoo flow-state table) offline: on a capture (`--in
    /// IN.pcap --out OUT.pcap`) or on generated traffic (`--generate 1-pkt|2-pkt|8-pkt|zipf-flows|MIX
    /// --packets N`), with `--outputs N`, `--gap-us 50`, `--workers N`; each forwarded frame's
    /// destination MAC names its output; prints packets/s and per-outcome counters.
    Flowlet(fp_flowlet::cli::FlowletArgs),
}

/// `flowplane bench ...` runs `flowplane-bench ...` from the same directory (the benchmarks and their
/// peers live in their own binary, so this one links none of them).
fn bench(args: Vec<std::ffi::OsString>) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let me = std::env::current_exe().context("locating this executable")?;
    let bin = me.with_file_name("flowplane-bench");
    if !bin.is_file() {
        anyhow::bail!(
            "{} not found: the benchmarks are a separate binary; build it with \
             `cargo build --release -p fp-bench`",
            bin.display()
        );
    }
    let e = std::process::Command::new(&bin).args(args).exec();
    Err(anyhow::Error::new(e).context(format!("running {}", bin.display())))
}

fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Command::Bench { args } => bench(args),
        Command::Backend(a) => fp_lb::backend::run(a),
        Command::Run(a) => fp_lb::cli::run(a),
        Command::Check(a) => match std::fs::read_to_string(&a.config) {
            Ok(text) if fp_switch::config::is_switch_config(&text) => {
                fp_switch::cli::check(&a.config, a.quiet)
            }
            _ => fp_lb::check::run(a),
        },
        Command::Demo(a) => fp_lb::cli::demo(a),
        Command::Switch(a) => fp_switch::cli::run(a),
        Command::Flowlet(a) => fp_flowlet::cli::run(a),
        Command::Cluster(a) => fp_cluster::cli::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The message and its causes on one line, for the operator and the journal; no
            // backtrace (RUST_BACKTRACE is for developers of flowplane, who can use a debugger).
            eprintln!("flowplane: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
