//! `flowplane switch`: the switch's command-line options and its entry point.

use crate::config::SwitchConfig;
use anyhow::Result;
use fp_service::LiveArgs;
use std::path::PathBuf;

/// `flowplane switch --ports IF1,IF2,...`.
#[derive(clap::Args, Debug)]
pub struct SwitchArgs {
    /// A configuration file (TOML: ports with their VLANs, static entries, settings; see
    /// docs/switch-configuration.md) instead of the options below; SIGHUP or `POST /reload`
    /// reads it again.
    #[arg(long, value_name = "FILE", conflicts_with_all = [
        "ports", "statics", "fib", "aging_secs", "fib_capacity", "fib_layout", "learn_queue",
        "fib_cache", "gather", "no_trace", "state_dir"
    ])]
    pub config: Option<PathBuf>,
    /// The switch ports: interfaces, comma-separated; port index = position (0, 1, ...).
    #[arg(
        long,
        value_delimiter = ',',
        required_unless_present = "config",
        value_name = "IF1,IF2,..."
    )]
    pub ports: Vec<String>,
    /// Learned entries not refreshed for this long are removed (seconds; fractions allowed).
    #[arg(long, default_value_t = 300.0)]
    pub aging_secs: f64,
    /// A static entry, MAC=PORT (PORT: index or interface name); learning never changes it and it
    /// never ages. Repeatable.
    #[arg(long = "static", value_name = "MAC=PORT")]
    pub statics: Vec<String>,
    /// Preload the FIB: text (`aa:bb:cc:dd:ee:ff PORT` per line) or, for names ending in `.bin`,
    /// little-endian u64 records `mac << 16 | port`.
    #[arg(long, value_name = "FILE")]
    pub fib: Option<PathBuf>,
    /// FIB capacity in entries (grown to fit a preload).
    #[arg(long, default_value_t = 1 << 20)]
    pub fib_capacity: usize,
    /// The FIB's layout: `compact` (the 2,4 layout, 8.4 bytes per entry), `quotient` (5.2 to 6.8
    /// bytes per entry, fewer lines per lookup, more instructions), or `auto`: quotient from
    /// 268435456 (256 Mi) entries, compact below (docs/quotient.md).
    #[arg(long, default_value = "auto", value_name = "auto|compact|quotient")]
    pub fib_layout: String,
    /// Capacity of the learn-event queue from the workers to the FIB writer.
    #[arg(long, default_value_t = 4096)]
    pub learn_queue: usize,
    /// Entries of each worker's flow cache in front of the FIB (BLP 2-4 with PBLRU, at most
    /// 65536); 0: no cache (the default: see docs/flowcache.md for when it pays).
    #[arg(long, default_value_t = 0)]
    pub fib_cache: usize,
    /// Most frames a worker gathers for one FIB lookup while more are waiting (bursts that filled
    /// the receive burst are held, up to this many frames; a shorter burst, or a polling pass that
    /// found none full, sends everything held at once). 1: each burst alone.
    #[arg(long, default_value_t = crate::config::DEFAULT_GATHER, value_name = "FRAMES")]
    pub gather: usize,
    /// Do not look for tracer probes.
    #[arg(long)]
    pub no_trace: bool,
    /// Where the learned FIB entries are kept across a restart (the file `switch-fib`); default
    /// the service's state directory ($STATE_DIRECTORY, else /var/lib/flowplane).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Driver, workers, CPUs, admin address.
    #[command(flatten)]
    pub live: LiveArgs,
}

/// Run the switch until SIGTERM/SIGINT.
pub fn run(a: SwitchArgs) -> Result<()> {
    if let Some(path) = &a.config {
        let cfg = SwitchConfig::from_file(path)?;
        return crate::service::run(cfg, &a.live.options());
    }
    let mut cfg = SwitchConfig::new(
        a.ports,
        a.aging_secs,
        &a.statics,
        a.fib.as_deref(),
        a.fib_capacity,
        a.learn_queue,
        a.fib_cache,
        !a.no_trace,
    )?;
    cfg.set_gather(a.gather)?;
    cfg.set_fib_layout(&a.fib_layout)?;
    if let Some(dir) = a.state_dir {
        cfg.state_dir = dir;
    }
    crate::service::run(cfg, &a.live.options())
}

/// `flowplane check --config FILE` for a switch's file: validate it as a start and a reload do,
/// and print the plan unless `quiet`. The error names the file and the field.
pub fn check(path: &std::path::Path, quiet: bool) -> Result<()> {
    let cfg = SwitchConfig::from_file(path)?;
    if !quiet {
        print!("{}: valid\n{}", path.display(), cfg.describe());
    }
    Ok(())
}
