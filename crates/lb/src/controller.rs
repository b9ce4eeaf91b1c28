//! The balancer's controller as a state machine without I/O (Maglev §2.1, §2.2, §4.1.1): events
//! in, actions out. The live shell ([`crate::service`]) reads files, sockets and the kernel, feeds
//! what it learns in as events, and carries out the [`Action`]s; tests drive the same machine with
//! made-up events and check its decisions without a network.
//!
//! Events and what the machine does with them:
//!
//! * **Health results** ([`Balancer::on_health`]): the backend's state in the snapshot builder
//!   changes; if the forwarding state changed, a new snapshot is published (workers switch at
//!   their next burst; connections of a backend that went down are re-selected by Maglev).
//! * **Neighbour table** ([`Balancer::on_neighbors`], read by the shell every second and after
//!   health events): tunnelled and L2-DSR packets go to on-link backends' own MACs (and to peer
//!   balancers' for redirected fragments); a changed MAC publishes a new snapshot; backends
//!   without an entry are to be resolved ([`Action::Resolve`]); until then their packets go to
//!   `balancer.gateway_mac`.
//! * **Reload** ([`Balancer::prepare_reload`], then [`Balancer::commit_reload`]): parse and
//!   validate the file, refuse changes of settings fixed at start, check the health plan and the
//!   destinations the port driver can steer, check that the snapshot can be built — all without
//!   changing anything. The shell then updates the health monitor (the one step that can fail for
//!   reasons outside the configuration: a thread), and only then commits: the new configuration,
//!   the initial states of new backends, a published snapshot, the new destinations to steer.
//!   A rejected reload ([`Balancer::reject_reload`]) changes nothing and names the field.
//! * **Announcements** (Maglev §2.1, §4.1.1): after every publication the machine says which
//!   VIPs to announce over BGP ([`Action::Announce`]): exact-address VIPs of the next hop's
//!   family with at least one healthy backend, nothing while draining ([`Balancer::drain`]).
//!
//! Publishing a snapshot is not I/O: it is a pointer swap under a mutex plus a generation counter
//! the workers read (one atomic load per burst; the lock only when the counter changed).

use crate::config::{LbConfig, SeedOrigin, VipMatch};
use crate::health::{self, HealthEvent, Plan};
use crate::metrics::MaglevChanges;
use crate::snapshot::{Builder, Published, Snapshot};
use fp_control::metrics::ReloadCounts;
use fp_wire::ethernet::MacAddr;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// Why a configuration was refused, at start or by a reload (the running one stays). Every
/// message names the field.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The file does not parse or a field is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The health plan could not be made.
    #[error(transparent)]
    Health(#[from] crate::health::HealthError),
    /// The snapshot could not be built.
    #[error(transparent)]
    Build(#[from] crate::snapshot::BuildError),
    /// The seed's state file cannot be used.
    #[error(transparent)]
    Seed(#[from] crate::seed::SeedError),
    /// A setting fixed at start changed.
    #[error("{field}: cannot change by reload (it is fixed when the balancer starts); restart it")]
    RestartOnly {
        /// The field.
        field: &'static str,
    },
    /// A seed was given to a balancer that runs on a random one.
    #[error(
        "balancer.seed: the balancer hashes with the seed of its state file (or a random one \
         drawn when it started); giving it one takes a restart"
    )]
    SeedNeedsRestart,
    /// A prefix/suffix VIP with a port driver that steers listed destinations only.
    #[error(
        "vip[{index}] ({name:?}): prefix/suffix VIPs are not steered by a port driver that \
         filters destinations; use --driver af_packet"
    )]
    UnsteerableVip {
        /// The VIP's index in the file.
        index: usize,
        /// Its name.
        name: String,
    },
}

/// What the shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Write this line to the log.
    Log(String),
    /// Tell the BGP speaker to announce exactly these VIPs (and withdraw the rest).
    Announce(Vec<IpAddr>),
    /// Steer exactly these destinations to the workers (port drivers that filter in the kernel).
    SetDestinations(Vec<IpAddr>),
    /// Make the kernel resolve these neighbours (their MACs are unknown).
    Resolve(Vec<IpAddr>),
}

/// A validated configuration, ready to commit.
#[derive(Debug)]
pub struct Reload {
    config: Arc<LbConfig>,
    plan: Plan,
    destinations: Vec<IpAddr>,
}

impl Reload {
    /// The health plan the shell must give the monitor before committing.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
}

/// The controller's state.
pub struct Balancer {
    config: Arc<LbConfig>,
    builder: Builder,
    snaps: Arc<Published<Snapshot>>,
    generation: u64,
    reloads: ReloadCounts,
    maglev: MaglevChanges,
    neighbors: HashMap<IpAddr, MacAddr>,
    filters_destinations: bool,
    draining: bool,
    /// The MTU of the interface, once the shell has read it.
    interface_mtu: Option<u16>,
}

/// Reject a reload that changes a setting fixed at start: table sizes and timeouts the workers
/// allocated, the flow-hash seed the workers hash with (a balancer that reloaded a new seed would
/// disagree with one that restarted), the counter slots, and the BGP speaker's settings.
pub fn restart_only(old: &LbConfig, new: &LbConfig) -> Result<(), ControlError> {
    let (a, b) = (&old.balancer, &new.balancer);
    let queue = |c: &LbConfig| {
        c.ipfix
            .as_ref()
            .map_or(fp_export::config::DEFAULT_QUEUE, |x| x.queue)
    };
    let fixed: [(&str, bool); 12] = [
        ("balancer.seed", a.seed != b.seed),
        ("balancer.seed_file", a.seed_file != b.seed_file),
        ("balancer.state_dir", a.state_dir != b.state_dir),
        (
            "balancer.conn_table_capacity",
            a.conn_capacity != b.conn_capacity,
        ),
        (
            "balancer.conn_table_capacity_v6",
            a.conn_capacity_v6 != b.conn_capacity_v6,
        ),
        (
            "balancer.fragment_table_capacity",
            a.frag_capacity != b.frag_capacity,
        ),
        (
            "balancer.fragment_timeout_ms",
            a.frag_timeout_ms != b.frag_timeout_ms,
        ),
        ("balancer.max_vips", a.max_vips != b.max_vips),
        ("balancer.max_backends", a.max_backends != b.max_backends),
        (
            "balancer.conn_cache_entries",
            a.conn_cache_entries != b.conn_cache_entries,
        ),
        ("bgp", old.bgp != new.bgp),
        // The workers' queues to the exporter are made at start.
        ("ipfix.queue", queue(old) != queue(new)),
    ];
    match fixed.iter().find(|(_, changed)| *changed) {
        Some((field, _)) => Err(ControlError::RestartOnly { field }),
        None => Ok(()),
    }
}

/// The exact VIP addresses: what a port driver that filters in the kernel steers to the workers.
/// Prefix/suffix VIPs cannot be listed; with such a driver they are an error naming the VIP.
pub fn destinations(cfg: &LbConfig, filters: bool) -> Result<Vec<IpAddr>, ControlError> {
    let mut out = Vec::new();
    for (i, v) in cfg.vips.iter().enumerate() {
        match v.matcher {
            VipMatch::Exact(a) => {
                if !out.contains(&a) {
                    out.push(a)
                }
            }
            VipMatch::Suffix { .. } if filters => {
                return Err(ControlError::UnsteerableVip {
                    index: i,
                    name: v.name.clone(),
                })
            }
            VipMatch::Suffix { .. } => {}
        }
    }
    Ok(out)
}

impl Balancer {
    /// A controller for `config`, on an interface whose MAC is `local_mac` (if known), with a
    /// port driver that does or does not filter destinations. Builds and publishes the first
    /// snapshot (every backend healthy until the health monitor says otherwise).
    pub fn new(
        config: LbConfig,
        local_mac: Option<MacAddr>,
        filters_destinations: bool,
    ) -> Result<Balancer, ControlError> {
        destinations(&config, filters_destinations)?;
        health::plan(&config)?;
        let mut builder = Builder::new();
        if let Some(m) = local_mac {
            builder.set_local_mac(m);
        }
        let config = Arc::new(config);
        let first = builder.build(config.clone())?;
        Ok(Balancer {
            config,
            builder,
            snaps: Arc::new(Published::new(Arc::new(first))),
            generation: 1,
            reloads: ReloadCounts::default(),
            maglev: MaglevChanges::new(),
            neighbors: HashMap::new(),
            filters_destinations,
            draining: false,
            interface_mtu: None,
        })
    }

    /// The snapshots the workers follow.
    pub fn snapshots(&self) -> &Arc<Published<Snapshot>> {
        &self.snaps
    }

    /// The configuration in force.
    pub fn config(&self) -> &Arc<LbConfig> {
        &self.config
    }

    /// Configuration generation (1 at start, +1 per committed reload).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Reloads so far.
    pub fn reloads(&self) -> ReloadCounts {
        self.reloads
    }

    /// Snapshots built so far (start, health changes, reloads, neighbour and MTU changes).
    pub fn snapshot_builds(&self) -> u64 {
        self.builder.builds()
    }

    /// Maglev table changes so far.
    pub fn maglev(&self) -> &MaglevChanges {
        &self.maglev
    }

    /// The neighbour MACs last read.
    pub fn neighbors(&self) -> &HashMap<IpAddr, MacAddr> {
        &self.neighbors
    }

    /// The health plan of the configuration in force.
    pub fn health_plan(&self) -> Plan {
        health::plan(&self.config).expect("validated when the configuration was accepted")
    }

    /// The destinations to steer to the workers.
    pub fn destinations(&self) -> Vec<IpAddr> {
        destinations(&self.config, self.filters_destinations)
            .expect("validated when the configuration was accepted")
    }

    /// The VIP addresses this balancer should announce now (Maglev §2.1, §4.1.1): exact VIPs of
    /// the next hop's family with at least one healthy backend (an address serving several VIPs is
    /// announced while any of them has one), nothing while draining or without `[bgp]`.
    pub fn announcements(&self) -> Vec<IpAddr> {
        let Some(bgp) = &self.config.bgp else {
            return Vec::new();
        };
        if self.draining {
            return Vec::new();
        }
        let snap = self.snaps.load();
        let mut out: Vec<IpAddr> = snap
            .vips
            .iter()
            .filter(|v| v.table.is_some())
            .filter_map(|v| match v.matcher {
                VipMatch::Exact(a) if a.is_ipv4() == bgp.next_hop.is_ipv4() => Some(a),
                _ => None,
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Apply the initial health states (the monitor's, when it starts backends unhealthy) before
    /// the workers run.
    pub fn initial_health(&mut self, states: &[(IpAddr, bool)]) -> Vec<Action> {
        let mut changed = false;
        for &(a, h) in states {
            changed |= self.builder.set_health(a, h);
        }
        if changed {
            self.publish("initial health")
        } else {
            Vec::new()
        }
    }

    /// Build a snapshot of the current configuration and state and publish it.
    fn publish(&mut self, why: &str) -> Vec<Action> {
        let new = match self.builder.build(self.config.clone()) {
            Ok(s) => s,
            Err(e) => return vec![Action::Log(format!("could not build a snapshot: {e}"))],
        };
        let old = self.snaps.load();
        let moved = self.maglev.record(Some(&old), &new);
        self.snaps.publish(Arc::new(new));
        let moved: Vec<String> = moved.iter().map(|(v, n)| format!("{v}: {n}")).collect();
        vec![
            Action::Log(format!(
                "snapshot {} published ({why}){}",
                self.snaps.generation(),
                if moved.is_empty() {
                    String::new()
                } else {
                    format!("; Maglev entries moved: {}", moved.join(", "))
                }
            )),
            Action::Announce(self.announcements()),
        ]
    }

    /// The MTU of the interface the balancer sends on (read at start and whenever it may have
    /// changed): the path MTU of VIPs without `mtu` when `balancer.mtu` is not set. Publishes a
    /// new snapshot when the value changed.
    pub fn on_interface_mtu(&mut self, mtu: u16) -> Vec<Action> {
        if self.interface_mtu == Some(mtu) {
            return Vec::new();
        }
        self.interface_mtu = Some(mtu);
        self.builder.set_interface_mtu(mtu);
        self.publish(&format!("interface MTU {mtu}"))
    }

    /// The interface MTU last reported, if any.
    pub fn interface_mtu(&self) -> Option<u16> {
        self.interface_mtu
    }

    /// Health state changes.
    pub fn on_health(&mut self, events: &[HealthEvent]) -> Vec<Action> {
        let mut out = Vec::new();
        let mut changed = false;
        for e in events {
            out.push(Action::Log(format!(
                "backend {} is {}: {}",
                e.address,
                if e.healthy { "up" } else { "down" },
                e.reason
            )));
            changed |= self.builder.set_health(e.address, e.healthy);
        }
        if changed {
            out.extend(self.publish("health changed"));
        }
        out
    }

    /// Addresses whose MACs the data path needs: backends, and the other balancers of a
    /// `[cluster]` (fragments are redirected to them).
    pub fn on_link(&self) -> Vec<IpAddr> {
        let mut v = self.config.backend_addresses();
        if let Some(c) = &self.config.cluster {
            v.extend(
                c.balancers
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != c.me)
                    .map(|(_, a)| IpAddr::V4(*a)),
            );
        }
        v
    }

    /// Whether the on-link addresses include IPv6 ones (the shell reads that table only then).
    pub fn wants_ipv6_neighbors(&self) -> bool {
        self.on_link().iter().any(|a| a.is_ipv6())
    }

    /// The kernel's neighbour table as read now (complete entries only).
    pub fn on_neighbors(&mut self, table: &HashMap<IpAddr, MacAddr>) -> Vec<Action> {
        let mut out = Vec::new();
        let mut changed = false;
        let wanted = self.on_link();
        for &a in &wanted {
            // The builder holds what the data path uses: compare with it, not with the last table
            // (an address a reload just added may have had its entry for long).
            let mac = table.get(&a).copied();
            if self.builder.set_neighbor(a, mac) {
                out.push(Action::Log(match mac {
                    Some(m) => format!("{a} is at {m}"),
                    None => format!("{a}: neighbour entry gone"),
                }));
                changed = true;
            }
        }
        self.neighbors = table.clone();
        if changed {
            out.extend(self.publish("neighbours changed"));
        }
        let unresolved: Vec<IpAddr> = wanted
            .into_iter()
            .filter(|a| !self.neighbors.contains_key(a))
            .collect();
        if !unresolved.is_empty() {
            out.push(Action::Resolve(unresolved));
        }
        out
    }

    /// Validate a reloaded configuration file's text without changing anything.
    pub fn prepare_reload(&self, text: &str) -> Result<Reload, ControlError> {
        let mut cfg = LbConfig::from_toml(text)?;
        if self.config.balancer.seed_origin != SeedOrigin::Configured
            && cfg.balancer.seed_origin == SeedOrigin::Configured
        {
            return Err(ControlError::SeedNeedsRestart);
        }
        if cfg.balancer.seed_origin == SeedOrigin::Random {
            // A file without a seed keeps the one the workers hash with.
            cfg.balancer.seed = self.config.balancer.seed;
            cfg.balancer.seed_origin = self.config.balancer.seed_origin;
        }
        restart_only(&self.config, &cfg)?;
        let plan = health::plan(&cfg)?;
        let destinations = destinations(&cfg, self.filters_destinations)?;
        // The snapshot itself is built once, at commit, with the health states the monitor
        // reports for new backends; here only what could make that build fail is checked.
        self.builder.check(&cfg)?;
        let cfg = Arc::new(cfg);
        Ok(Reload {
            config: cfg,
            plan,
            destinations,
        })
    }

    /// Commit a prepared reload, given the states the health monitor reported for new backends
    /// (and for backends whose check was removed). Returns the new configuration generation.
    pub fn commit_reload(&mut self, r: Reload, health: &[HealthEvent]) -> (u64, Vec<Action>) {
        for e in health {
            self.builder.set_health(e.address, e.healthy);
        }
        self.config = r.config;
        // Addresses the new configuration puts on the link whose entries are known already.
        for a in self.on_link() {
            if let Some(&m) = self.neighbors.get(&a) {
                self.builder.set_neighbor(a, Some(m));
            }
        }
        self.generation += 1;
        self.reloads.ok += 1;
        let g = self.generation;
        let mut out = self.publish(&format!("configuration generation {g}"));
        out.push(Action::SetDestinations(r.destinations));
        let unresolved: Vec<IpAddr> = self
            .on_link()
            .into_iter()
            .filter(|a| !self.neighbors.contains_key(a))
            .collect();
        if !unresolved.is_empty() {
            out.push(Action::Resolve(unresolved));
        }
        (g, out)
    }

    /// Every VIP's backend sets, for the state file a successor reads (`crate::sets`).
    pub fn backend_sets(&self) -> std::collections::BTreeMap<String, crate::snapshot::VipSets> {
        self.builder.sets()
    }

    /// Take the backend sets a predecessor left (before the workers start) and publish: VIPs
    /// whose set changed since give second chance toward the predecessor's backends. Returns how
    /// many VIPs have an earlier set now.
    pub fn restore_sets(
        &mut self,
        sets: &std::collections::BTreeMap<String, crate::snapshot::VipSets>,
    ) -> (usize, Vec<Action>) {
        let b = &self.config.balancer;
        let maglev =
            fp_maglev::Config::new(b.maglev_size as u64, b.seed).expect("validated maglev_size");
        self.builder.restore(sets, &maglev);
        let out = self.publish("backend sets of the previous run restored");
        let n = self
            .snaps
            .load()
            .vips
            .iter()
            .filter(|v| !v.earlier.is_empty())
            .count();
        (n, out)
    }

    /// Close the second-chance windows that ended by `now` (a new snapshot without their earlier
    /// tables).
    pub fn on_clock(&mut self, now: std::time::Instant) -> Vec<Action> {
        if self.builder.expire(now) {
            self.publish("second-chance window ended")
        } else {
            Vec::new()
        }
    }

    /// Count a rejected reload; the running configuration stays.
    pub fn reject_reload(&mut self) {
        self.reloads.failed += 1;
    }

    /// The BGP speaker (re)started: what it must announce.
    pub fn on_speaker_started(&self) -> Vec<Action> {
        vec![Action::Announce(self.announcements())]
    }

    /// Shutting down (or the forwarder failed): announce nothing from now on.
    pub fn drain(&mut self) -> Vec<Action> {
        self.draining = true;
        vec![Action::Announce(Vec::new())]
    }

    /// Whether [`Balancer::drain`] was called.
    pub fn draining(&self) -> bool {
        self.draining
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: &str = r#"
        [balancer]
        address = "10.0.0.2"
        seed = 7
        conn_table_capacity = 1000
        [[vip]]
        name = "web"
        address = "203.0.113.10"
        port = 80
        protocol = "tcp"
        pools = ["p"]
        [[pool]]
        name = "p"
        backends = [{ address = "10.0.1.1" }]
    "#;

    const BGP: &str = "\n[bgp]\nlocal_as = 65001\npeer = \"10.0.0.1\"\npeer_as = 65000\n";

    fn cfg(text: &str) -> LbConfig {
        LbConfig::from_toml(text).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn event(a: &str, healthy: bool) -> HealthEvent {
        HealthEvent {
            address: ip(a),
            healthy,
            reason: "test".into(),
        }
    }

    fn announced(actions: &[Action]) -> Option<Vec<IpAddr>> {
        actions.iter().rev().find_map(|a| match a {
            Action::Announce(v) => Some(v.clone()),
            _ => None,
        })
    }

    #[test]
    fn reload_rejects_start_time_settings_naming_the_field() {
        let old = cfg(CFG);
        assert!(restart_only(&old, &cfg(&CFG.replace("10.0.1.1", "10.0.1.9"))).is_ok());
        for (from, to, field) in [
            ("seed = 7", "seed = 8", "balancer.seed"),
            (
                "capacity = 1000",
                "capacity = 2000",
                "balancer.conn_table_capacity",
            ),
            (
                "seed = 7",
                "seed = 7\n        max_backends = 10",
                "balancer.max_backends",
            ),
        ] {
            let e = restart_only(&old, &cfg(&CFG.replace(from, to)))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(field), "{e}");
        }
        assert!(restart_only(&old, &cfg(&format!("{CFG}{BGP}")))
            .unwrap_err()
            .to_string()
            .starts_with("bgp"));
    }

    #[test]
    fn steering_rejects_suffix_vips_only_for_filtering_drivers() {
        let text = CFG.replace(
            "address = \"203.0.113.10\"",
            "prefix_group = \"g\"\n        suffix = \"0.0.0.10\"\n        suffix_len = 8",
        ) + "\n[[prefix_group]]\nname = \"g\"\nprefixes = [\"203.0.113.0/24\"]\n";
        let c = cfg(&text);
        assert!(destinations(&c, false).unwrap().is_empty());
        let e = destinations(&c, true).unwrap_err().to_string();
        assert!(e.starts_with("vip[0]"), "{e}");
        assert!(Balancer::new(c, None, true).is_err());
    }

    #[test]
    fn health_gates_snapshots_and_announcements() {
        let mut b = Balancer::new(cfg(&format!("{CFG}{BGP}")), None, false).unwrap();
        assert_eq!(b.announcements(), vec![ip("203.0.113.10")]);
        let g0 = b.snapshots().generation();
        // The only backend goes down: a new snapshot without a Maglev table, nothing announced.
        let a = b.on_health(&[event("10.0.1.1", false)]);
        assert_eq!(b.snapshots().generation(), g0 + 1);
        assert!(b.snapshots().load().vips[0].table.is_none());
        assert_eq!(announced(&a), Some(vec![]));
        // A repeated state changes nothing.
        assert!(announced(&b.on_health(&[event("10.0.1.1", false)])).is_none());
        assert_eq!(b.snapshots().generation(), g0 + 1);
        // Back up: announced again.
        let a = b.on_health(&[event("10.0.1.1", true)]);
        assert_eq!(announced(&a), Some(vec![ip("203.0.113.10")]));
        // Draining withdraws everything, whatever the health.
        assert_eq!(announced(&b.drain()), Some(vec![]));
        assert!(b.announcements().is_empty());
    }

    #[test]
    fn neighbours_publish_and_unresolved_are_resolved() {
        let mut b = Balancer::new(cfg(CFG), None, false).unwrap();
        let g0 = b.snapshots().generation();
        let a = b.on_neighbors(&HashMap::new());
        assert_eq!(a, vec![Action::Resolve(vec![ip("10.0.1.1")])]);
        let mac: MacAddr = "02:00:00:00:01:01".parse().unwrap();
        let table = HashMap::from([(ip("10.0.1.1"), mac)]);
        let a = b.on_neighbors(&table);
        assert_eq!(b.snapshots().generation(), g0 + 1);
        assert!(a
            .iter()
            .any(|x| matches!(x, Action::Log(l) if l.contains("is at"))));
        assert!(!a.iter().any(|x| matches!(x, Action::Resolve(_))));
        assert!(b.on_neighbors(&table).is_empty(), "no change, no action");
    }

    #[test]
    fn a_reload_uses_known_neighbour_entries_of_new_backends() {
        let mut b = Balancer::new(cfg(CFG), None, false).unwrap();
        let (m1, m2): (MacAddr, MacAddr) = (
            "02:00:00:00:01:01".parse().unwrap(),
            "02:00:00:00:01:02".parse().unwrap(),
        );
        // The kernel knows 10.0.1.2 before any configuration uses it.
        let table = HashMap::from([(ip("10.0.1.1"), m1), (ip("10.0.1.2"), m2)]);
        b.on_neighbors(&table);
        let text = CFG.replace(
            "{ address = \"10.0.1.1\" }",
            "{ address = \"10.0.1.1\" }, { address = \"10.0.1.2\" }",
        );
        let r = b.prepare_reload(&text).unwrap();
        let (_, actions) = b.commit_reload(r, &[]);
        assert!(!actions.iter().any(|x| matches!(x, Action::Resolve(_))));
        assert!(
            !b.builder.clone().set_neighbor(ip("10.0.1.2"), Some(m2)),
            "the new backend's MAC is in the published snapshot's builder"
        );
        assert!(b.on_neighbors(&table).is_empty(), "nothing left to change");
    }

    #[test]
    fn a_file_without_seed_keeps_the_running_seed() {
        let text = CFG.replace("seed = 7\n", "");
        let mut b = Balancer::new(cfg(&text), None, true).unwrap();
        let running = b.config().balancer.seed;
        assert_eq!(b.config().balancer.seed_origin, SeedOrigin::Random);
        for _ in 0..2 {
            let r = b.prepare_reload(&text).unwrap();
            b.commit_reload(r, &[]);
            assert_eq!(
                b.config().balancer.seed,
                running,
                "a reload draws no new seed"
            );
        }
        // Giving a seed to a balancer running on a random one is a restart-time change.
        let e = b.prepare_reload(CFG).unwrap_err().to_string();
        assert!(
            e.starts_with("balancer.seed") && e.contains("random"),
            "{e}"
        );
        // A balancer started with a seed keeps it when a reloaded file leaves it out.
        let mut c = Balancer::new(cfg(CFG), None, true).unwrap();
        let r = c.prepare_reload(&text).unwrap();
        c.commit_reload(r, &[]);
        let bal = &c.config().balancer;
        assert_eq!((bal.seed, bal.seed_origin), (7, SeedOrigin::Configured));
    }

    #[test]
    fn reload_validates_first_then_commits() {
        let mut b = Balancer::new(cfg(CFG), None, true).unwrap();
        // Invalid: nothing changes, the field is named.
        let e = b
            .prepare_reload(&CFG.replace("pools = [\"p\"]", "pools = [\"q\"]"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("vip[0]"), "{e}");
        b.reject_reload();
        assert_eq!((b.generation(), b.reloads().failed), (1, 1));
        // Valid: a new backend, which the monitor reports unhealthy until it passes its checks.
        let text = CFG.replace(
            "{ address = \"10.0.1.1\" }",
            "{ address = \"10.0.1.1\" }, { address = \"10.0.1.2\" }",
        );
        let builds = b.snapshot_builds();
        let r = b.prepare_reload(&text).unwrap();
        assert_eq!(r.plan().unchecked.len(), 2);
        assert_eq!(b.generation(), 1, "prepare changes nothing");
        assert_eq!(b.snapshot_builds(), builds, "prepare builds no snapshot");
        let (g, a) = b.commit_reload(r, &[event("10.0.1.2", false)]);
        assert_eq!(
            b.snapshot_builds(),
            builds + 1,
            "a reload builds one snapshot"
        );
        assert_eq!((g, b.generation(), b.reloads().ok), (2, 2, 1));
        assert!(a.contains(&Action::SetDestinations(vec![ip("203.0.113.10")])));
        let snap = b.snapshots().load();
        assert_eq!(snap.vips[0].members.len(), 2);
        let down = snap
            .backends
            .iter()
            .flatten()
            .find(|x| x.address == ip("10.0.1.2"));
        assert!(!down.unwrap().healthy);
    }

    #[test]
    fn a_reload_beyond_max_backends_is_refused_before_anything_is_built() {
        // Backend ids are stable, so addresses seen before keep theirs: three reloads of three
        // backends each use ids 0..=6, beyond max_backends = 4 although each file has fewer.
        let base = CFG.replace("[balancer]", "[balancer]\nmax_backends = 4");
        let with = |addrs: &[u8]| {
            let list: Vec<String> = addrs
                .iter()
                .map(|i| format!("{{ address = \"10.0.1.{i}\" }}"))
                .collect();
            base.replace("{ address = \"10.0.1.1\" }", &list.join(", "))
        };
        let mut b = Balancer::new(cfg(&with(&[1])), None, true).unwrap();
        let r = b.prepare_reload(&with(&[2, 3])).unwrap();
        b.commit_reload(r, &[]);
        let builds = b.snapshot_builds();
        let e = b.prepare_reload(&with(&[4, 5, 6])).unwrap_err().to_string();
        assert!(e.starts_with("balancer.max_backends: backend id 4"), "{e}");
        b.reject_reload();
        assert_eq!(
            b.snapshot_builds(),
            builds,
            "nothing built for a refused reload"
        );
        assert_eq!(b.generation(), 2);
    }
}
