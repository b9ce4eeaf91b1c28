//! The live options every application takes, once: the port driver, where its XDP program runs,
//! workers and their CPUs, the admin address.

use fp_engine::afxdp::ModeChoice;
use fp_engine::live::Driver;
use std::net::SocketAddr;

/// The live options of every application on the command line (`#[command(flatten)]`).
#[derive(clap::Args, Clone, Debug)]
pub struct LiveArgs {
    /// Port driver: af_packet (TPACKET_V3 + fan-out) or af_xdp.
    #[arg(long, default_value = "af_packet")]
    pub driver: Driver,
    /// AF_XDP: where the XDP program runs: auto, native or generic.
    #[arg(long, default_value = "auto")]
    pub xdp_mode: ModeChoice,
    /// Worker threads (default: one per CPU, or one per CPU of --cpus). AF_XDP: at most the
    /// smallest receive-queue count of the interfaces.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Pin the workers to these CPUs, in order (`0-3,6`); default: worker i on CPU i.
    #[arg(long, value_name = "LIST", value_parser = parse_cpus)]
    pub cpus: Option<CpuList>,
    /// Serve metrics, reload, trace and status over HTTP on this address.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,
    /// Do not pin the workers to CPUs.
    #[arg(long)]
    pub no_pin: bool,
}

impl LiveArgs {
    /// The options these arguments give.
    pub fn options(&self) -> LiveOptions {
        let cpus = self.cpus.clone().map(|c| c.0).unwrap_or_default();
        LiveOptions {
            driver: self.driver,
            xdp_mode: self.xdp_mode,
            workers: self
                .workers
                .or((!cpus.is_empty()).then_some(cpus.len()))
                .unwrap_or_else(|| fp_engine::driver::workers_or_cpus(None))
                .max(1),
            cpus,
            admin: self.admin,
            pin: !self.no_pin,
        }
    }
}

/// How a service runs on live interfaces (from [`LiveArgs`], or an application's own
/// configuration file).
#[derive(Clone, Debug)]
pub struct LiveOptions {
    /// The port driver.
    pub driver: Driver,
    /// Where the driver's XDP program runs (AF_XDP).
    pub xdp_mode: ModeChoice,
    /// Workers wanted (a driver may open fewer).
    pub workers: usize,
    /// CPUs to pin the workers to, in order; empty: worker i on CPU i.
    pub cpus: Vec<usize>,
    /// The admin server's address.
    pub admin: Option<SocketAddr>,
    /// Pin the workers.
    pub pin: bool,
}

impl LiveOptions {
    /// One worker per CPU on `driver`, pinned, no admin server.
    pub fn new(driver: Driver) -> LiveOptions {
        LiveOptions {
            driver,
            xdp_mode: ModeChoice::Auto,
            workers: fp_engine::driver::workers_or_cpus(None),
            cpus: Vec::new(),
            admin: None,
            pin: true,
        }
    }
}

/// A list of CPUs: numbers and ranges, comma-separated (`0-3,6`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// Parse `0-3,6` into `[0, 1, 2, 3, 6]`; the error names the part that is wrong.
pub fn parse_cpus(s: &str) -> Result<CpuList, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("{part:?} is neither a CPU number nor a range like 0-3");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (
                    a.trim().parse().map_err(|_| bad())?,
                    b.trim().parse().map_err(|_| bad())?,
                );
                if a > b || b - a > 4096 {
                    return Err(format!("{part:?}: not an increasing range"));
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    if out.is_empty() {
        return Err("an empty CPU list".into());
    }
    Ok(CpuList(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        live: LiveArgs,
    }

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpus("0-3,6"), Ok(CpuList(vec![0, 1, 2, 3, 6])));
        assert_eq!(parse_cpus("5"), Ok(CpuList(vec![5])));
        assert!(parse_cpus("3-1").unwrap_err().contains("3-1"));
        assert!(parse_cpus("x").unwrap_err().contains("\"x\""));
        assert!(parse_cpus("").is_err());
    }

    #[test]
    fn the_options_follow_the_arguments() {
        let o = Cli::parse_from(["t", "--driver", "af_xdp", "--cpus", "2,3", "--no-pin"])
            .live
            .options();
        assert_eq!(o.driver.name(), "af_xdp");
        assert_eq!((o.workers, o.cpus.clone(), o.pin), (2, vec![2, 3], false));
        let o = Cli::parse_from(["t", "--workers", "1", "--admin", "127.0.0.1:9"])
            .live
            .options();
        assert_eq!(o.driver.name(), "af_packet");
        assert_eq!((o.workers, o.admin.map(|a| a.port())), (1, Some(9)));
        assert!(Cli::try_parse_from(["t", "--driver", "dpdk"]).is_err());
    }
}
