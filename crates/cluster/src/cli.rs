//! `flowplane cluster`: a ScaleBricks cluster of separate node processes whose state lives in
//! etcd — the command line and its dispatch.
//!
//! ```text
//!  flowplane cluster entries add|move|remove|load ──put──► etcd  <prefix>/entries/<MAC> = {"node":N,"port":P}
//!                         ▲  waits until every live member's "applied" ≥ the write's revision
//!                         │                                       <prefix>/members/<id> (under a lease)
//!  flowplane cluster run --node i: snapshot ─► Member (FIB share + partition table replica)
//!                                  watch    ─► apply each change in revision order ─► put applied revision
//!                                  data path: the node's stage on AF_PACKET / AF_XDP (the service runner)
//! ```
//!
//! The configuration file is [`crate::config`], the key schema [`crate::store`], the entry
//! commands [`crate::entries`], a node [`crate::service`].

use crate::config::Config;
use anyhow::Result;
use std::path::PathBuf;

/// `flowplane cluster`.
#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub cmd: ClusterCmd,
}

/// What `flowplane cluster` does.
#[derive(clap::Subcommand, Debug)]
pub enum ClusterCmd {
    /// Run one node of the cluster on its interfaces (until SIGTERM).
    Run {
        /// The cluster's configuration file.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// This node's id (a `[[node]]` of the file).
        #[arg(long)]
        node: u8,
        /// Pin the node's worker thread to this CPU (default: not pinned).
        #[arg(long)]
        cpu: Option<usize>,
        /// Do not look for tracer probes.
        #[arg(long)]
        no_trace: bool,
    },
    /// Validate the configuration file and print what it describes.
    Check {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Add, move, remove, load or list entries (host MAC → node, external port).
    Entries {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Seconds to wait for every live member to apply the change (0: do not wait).
        #[arg(long, default_value_t = 10.0)]
        wait: f64,
        #[command(subcommand)]
        op: EntryOp,
    },
    /// The members, the revision each applied, their digests, and the entry count.
    Status {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
}

/// A change to the entries.
#[derive(clap::Subcommand, Debug)]
pub enum EntryOp {
    /// Add (or overwrite) an entry.
    Add {
        mac: String,
        #[arg(long)]
        node: u8,
        #[arg(long)]
        port: u16,
    },
    /// Move an entry to another node (and port; default: the same port number).
    Move {
        mac: String,
        #[arg(long)]
        node: u8,
        #[arg(long)]
        port: Option<u16>,
    },
    /// Remove an entry.
    Remove { mac: String },
    /// Add or overwrite every entry of FILE (lines `MAC NODE PORT`, `#` comments).
    Load {
        file: PathBuf,
        /// Also remove the entries FILE does not list.
        #[arg(long)]
        replace: bool,
    },
    /// Print every entry (`MAC NODE PORT`).
    List,
}

/// `flowplane cluster ...`.
pub fn run(args: ClusterArgs) -> Result<()> {
    match args.cmd {
        ClusterCmd::Run {
            config,
            node,
            cpu,
            no_trace,
        } => crate::service::run(&Config::load(&config)?, node, cpu, !no_trace),
        ClusterCmd::Check { config } => {
            let c = Config::load(&config)?;
            println!(
                "cluster {:?}: {} node(s), mode {}, capacity {}, etcd {}, lease {} s, driver {}",
                c.cluster.name,
                c.n(),
                c.mode.name(),
                c.cluster.capacity,
                c.cluster.etcd.join(","),
                c.cluster.lease_ttl,
                c.driver
            );
            for nd in &c.nodes {
                println!(
                    "node {}: external {} (ports 0..{}), interconnect {}, admin {}",
                    nd.id,
                    nd.external.join(","),
                    nd.external.len(),
                    nd.interconnect,
                    nd.admin.map_or("-".into(), |a| a.to_string())
                );
            }
            Ok(())
        }
        ClusterCmd::Entries { config, wait, op } => {
            crate::entries::entries(&Config::load(&config)?, wait, op)
        }
        ClusterCmd::Status { config } => crate::entries::status(&Config::load(&config)?),
    }
}
