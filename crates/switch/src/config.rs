//! The switch's settings, checked before anything is opened: ports and their VLANs, aging,
//! static entries and the FIB preload files (text, or a binary format for the paper's very large
//! tables). They come from command-line options or from a TOML file ([`SwitchConfig::from_toml`],
//! `flowplane switch --config FILE`), which a reload reads again. Every error names the option,
//! the file's field (`port[1].trunk[0]`) or the FIB file's line that is wrong.

use crate::controller::Static;
use crate::guard::{Damping, Storm};
use crate::vlan::{self, PortVlans};
use fp_cuckoo::FibLayout;
use fp_wire::ethernet::MacAddr;
use serde::Deserialize;
use std::collections::{BTreeSet, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the switch's settings were refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An option's value is wrong.
    #[error("{option}: {message}")]
    Invalid {
        /// The option (`--ports`, `--static "…"`).
        option: String,
        /// What is wrong.
        message: String,
    },
    /// A FIB file is wrong (`file`, and the entry or line where it matters).
    #[error("{}: {message}", file.display())]
    FibFile {
        /// The file.
        file: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
    /// A configuration file is wrong (`file`, and the field).
    #[error("{}: {message}", file.display())]
    File {
        /// The file.
        file: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
    /// A FIB file could not be read.
    #[error("{}: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn invalid(option: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        option: option.into(),
        message: message.into(),
    }
}

/// A FIB file's content that does not parse: where and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FibFormatError(pub String);

/// The switch's checked settings.
#[derive(Clone, Debug)]
pub struct SwitchConfig {
    /// The ports' interfaces; port index = position.
    pub ports: Vec<String>,
    /// Learned entries not refreshed for this long are removed.
    pub aging: Duration,
    /// Static entries.
    pub statics: Vec<Static>,
    /// Each port's VLANs (`None`: the switch is VLAN-unaware).
    pub vlans: Option<Vec<PortVlans>>,
    /// Each port's storm-control limits.
    pub storm: Vec<Storm>,
    /// Each port's limit of learned MACs (port security).
    pub max_macs: Vec<Option<u32>>,
    /// MAC-move damping.
    pub damping: Damping,
    /// The spanning tree (none: off; link-local frames, BPDUs included, are dropped).
    pub stp: Option<StpSettings>,
    /// sFlow export (`[sflow]`; none: off).
    pub sflow: Option<fp_export::config::SflowSpec>,
    /// The file the settings came from (what a reload reads again), if any.
    pub file: Option<PathBuf>,
    /// The FIB preload file, if any (read at start only).
    pub fib_file: Option<PathBuf>,
    /// Entries preloaded from a FIB file.
    pub preload: Vec<(MacAddr, u16)>,
    /// FIB capacity asked (at least the preload and the statics).
    pub fib_capacity: usize,
    /// The FIB's layout asked (`--fib-layout`; none: by capacity, [`FibLayout::auto`]).
    pub fib_layout: Option<FibLayout>,
    /// Capacity of the learn-event queue.
    pub learn_queue: usize,
    /// Entries of each worker's FIB cache (0: none).
    pub fib_cache: usize,
    /// Whether workers look for tracer probes.
    pub trace: bool,
    /// Most frames a worker gathers, while more are waiting, for one FIB lookup (1: each
    /// receive burst alone).
    pub gather: usize,
    /// Where the learned entries are kept across a restart (`--state-dir`, else the service's
    /// state directory).
    pub state_dir: std::path::PathBuf,
}

/// The spanning tree's settings (`[stp]` and the ports' `stp_*`, `edge` keys).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StpSettings {
    /// Bridge priority (0 to 61440 in steps of 4096).
    pub priority: u16,
    /// Hello time, max age, forward delay (s).
    pub hello: u16,
    /// Max age (s).
    pub max_age: u16,
    /// Forward delay (s).
    pub forward_delay: u16,
    /// Speak only 802.1D.
    pub force_stp: bool,
    /// Per port: path cost, port priority, edge.
    pub ports: Vec<(u32, u8, bool)>,
}

/// The longest aging time (one year): beyond it aging is as good as off.
pub const MAX_AGING_SECS: f64 = 365.0 * 86400.0;

/// Frames a worker gathers for one lookup by default: eight receive bursts, the lookup call
/// size at which the FIB's reads stay in flight from one chunk of keys into the next.
pub const DEFAULT_GATHER: usize = 256;

impl SwitchConfig {
    /// Check the settings and read the preload file.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ports: Vec<String>,
        aging_secs: f64,
        statics: &[String],
        fib: Option<&Path>,
        fib_capacity: usize,
        learn_queue: usize,
        fib_cache: usize,
        trace: bool,
    ) -> Result<SwitchConfig, ConfigError> {
        let nports = ports.len();
        if nports < 2 {
            return Err(invalid(
                "--ports",
                format!("a switch needs at least 2 ports, got {nports}"),
            ));
        }
        if nports > u16::MAX as usize - 1 {
            return Err(invalid(
                "--ports",
                format!("at most {} ports", u16::MAX - 1),
            ));
        }
        for (i, p) in ports.iter().enumerate() {
            if ports[..i].contains(p) {
                return Err(invalid("--ports", format!("{p:?} is listed twice")));
            }
        }
        if !(1.0..=MAX_AGING_SECS).contains(&aging_secs) {
            return Err(invalid(
                "--aging-secs",
                format!("must be between 1 and {MAX_AGING_SECS} seconds, got {aging_secs}"),
            ));
        }
        if learn_queue == 0 {
            return Err(invalid("--learn-queue", "must be at least 1"));
        }
        let statics = statics
            .iter()
            .map(|s| parse_static(s, &ports).map(|(mac, port)| Static { mac, vlan: 0, port }))
            .collect::<Result<Vec<_>, _>>()?;
        let preload = match fib {
            Some(p) => read_fib(p, nports)?,
            None => Vec::new(),
        };
        let fib_capacity =
            fib_capacity.max(preload.len() + preload.len() / 16 + statics.len() + 1024);
        Ok(SwitchConfig {
            ports,
            aging: Duration::from_secs_f64(aging_secs),
            vlans: None,
            storm: vec![Storm::default(); nports],
            max_macs: vec![None; nports],
            damping: Damping::default(),
            stp: None,
            sflow: None,
            statics,
            file: None,
            fib_file: fib.map(Path::to_path_buf),
            preload,
            fib_capacity,
            fib_layout: None,
            learn_queue,
            fib_cache,
            trace,
            gather: DEFAULT_GATHER,
            state_dir: fp_control::state::state_directory(),
        })
    }

    /// Set how many frames a worker gathers for one lookup (`--gather`): 1 to
    /// [`crate::stage::MAX_GATHER`].
    pub fn set_gather(&mut self, frames: usize) -> Result<(), ConfigError> {
        if !(1..=crate::stage::MAX_GATHER).contains(&frames) {
            return Err(invalid(
                "--gather",
                format!(
                    "must be between 1 and {} frames, got {frames}",
                    crate::stage::MAX_GATHER
                ),
            ));
        }
        self.gather = frames;
        Ok(())
    }

    /// Set the FIB's layout (`--fib-layout`): `auto` (the quotiented layout from
    /// [`FibLayout::QUOTIENT_FROM`] entries, else the 2,4 layout), `compact` or `quotient`.
    pub fn set_fib_layout(&mut self, layout: &str) -> Result<(), ConfigError> {
        self.fib_layout = match layout {
            "auto" => None,
            l => Some(
                l.parse()
                    .map_err(|e: String| invalid("--fib-layout", format!("{e} or auto")))?,
            ),
        };
        Ok(())
    }

    /// The FIB's layout: the one asked, else the one for its capacity.
    pub fn fib_layout(&self) -> FibLayout {
        self.fib_layout
            .unwrap_or_else(|| FibLayout::auto(self.fib_capacity))
    }

    /// The aging time in nanoseconds.
    pub fn aging_ns(&self) -> u64 {
        self.aging.as_nanos().min(u64::MAX as u128) as u64
    }

    /// Read and check a configuration file ([`SwitchConfig::from_toml`]); errors name the file.
    pub fn from_file(path: &Path) -> Result<SwitchConfig, ConfigError> {
        SwitchConfig::read_file(path, true)
    }

    /// [`SwitchConfig::from_file`] for a reload: the FIB preload file is named but not read
    /// (a preload is loaded at start only).
    pub fn from_file_for_reload(path: &Path) -> Result<SwitchConfig, ConfigError> {
        SwitchConfig::read_file(path, false)
    }

    fn read_file(path: &Path, preload: bool) -> Result<SwitchConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            file: path.to_path_buf(),
            source,
        })?;
        let mut cfg = SwitchConfig::parse(&text, preload).map_err(|e| match e {
            ConfigError::Invalid { .. } => ConfigError::File {
                file: path.to_path_buf(),
                message: e.to_string(),
            },
            other => other,
        })?;
        cfg.file = Some(path.to_path_buf());
        Ok(cfg)
    }

    /// Check a configuration file's text:
    ///
    /// ```toml
    /// [switch]                 # all optional; defaults as the command-line options'
    /// aging_secs = 300
    /// fib_capacity = 1048576
    ///
    /// [[port]]                 # one per port, in port order
    /// interface = "veth1"
    /// vlan = 10                # an access port of VLAN 10
    ///
    /// [[port]]
    /// interface = "veth2"
    /// trunk = [10, 20]         # a trunk: VLANs 10 and 20 tagged
    /// native = 30              # and VLAN 30 untagged (optional)
    ///
    /// [[static]]
    /// mac = "02:00:00:00:00:0b"
    /// port = "veth1"           # interface or index
    /// vlan = 10                # default: the port's untagged VLAN
    /// ```
    ///
    /// A port without `vlan` or `trunk` is an access port of VLAN 1 when some other port has
    /// VLAN settings; when none has, the switch is VLAN-unaware.
    pub fn from_toml(text: &str) -> Result<SwitchConfig, ConfigError> {
        SwitchConfig::parse(text, true)
    }

    fn parse(text: &str, read_preload: bool) -> Result<SwitchConfig, ConfigError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| format!(" (line {})", text[..s.start].lines().count().max(1)))
                .unwrap_or_default();
            invalid("configuration", format!("{}{at}", e.message()))
        })?;
        let sw = raw.switch.unwrap_or_default();
        let ports: Vec<String> = raw.port.iter().map(|p| p.interface.clone()).collect();
        for (i, p) in ports.iter().enumerate() {
            if p.is_empty() {
                return Err(invalid(format!("port[{i}].interface"), "is empty"));
            }
        }
        let mut cfg = SwitchConfig::new(
            ports.clone(),
            sw.aging_secs.unwrap_or(300.0),
            &[],
            sw.fib.as_deref().filter(|_| read_preload),
            sw.fib_capacity.unwrap_or(1 << 20),
            sw.learn_queue.unwrap_or(4096),
            sw.fib_cache.unwrap_or(0),
            sw.trace.unwrap_or(true),
        )
        .map_err(|e| rename_option(e, "port", "switch"))?;
        cfg.fib_file = sw.fib.clone();
        if let Some(l) = &sw.fib_layout {
            cfg.set_fib_layout(l)
                .map_err(|e| rename_option(e, "", "switch"))?;
        }
        if let Some(g) = sw.gather {
            cfg.set_gather(g)
                .map_err(|e| rename_option(e, "", "switch"))?;
        }
        if let Some(d) = sw.state_dir {
            cfg.state_dir = d;
        }
        let secs = |field: &str, v: Option<f64>, default: u64| -> Result<u64, ConfigError> {
            match v {
                None => Ok(default),
                Some(x) if x > 0.0 && x.is_finite() && x < 1e9 => Ok((x * 1e9) as u64),
                Some(x) => Err(invalid(
                    format!("switch.{field}"),
                    format!("{x} is not a positive number of seconds"),
                )),
            }
        };
        let d = Damping::default();
        cfg.damping = Damping {
            moves: sw.mac_move_limit.unwrap_or(d.moves),
            window_ns: secs("mac_move_window_secs", sw.mac_move_window_secs, d.window_ns)?,
            hold_ns: secs("mac_move_hold_secs", sw.mac_move_hold_secs, d.hold_ns)?,
        };
        for (i, p) in raw.port.iter().enumerate() {
            cfg.storm[i] = Storm {
                broadcast: p.storm_broadcast.unwrap_or(0),
                multicast: p.storm_multicast.unwrap_or(0),
                unknown_unicast: p.storm_unknown_unicast.unwrap_or(0),
            };
            if p.max_macs == Some(0) {
                return Err(invalid(
                    format!("port[{i}].max_macs"),
                    "must be at least 1 (leave it out for no limit)",
                ));
            }
            cfg.max_macs[i] = p.max_macs;
        }
        let aware = raw
            .port
            .iter()
            .any(|p| p.vlan.is_some() || p.trunk.is_some());
        if aware {
            let mut modes = Vec::with_capacity(ports.len());
            for (i, p) in raw.port.iter().enumerate() {
                modes.push(port_vlans(i, p)?);
            }
            let vids: BTreeSet<u16> = modes.iter().flat_map(PortVlans::members).collect();
            let limit = ((1usize << vlan::fid_bits(ports.len())) - 1).min(vlan::MAX_VID as usize);
            if vids.len() > limit {
                return Err(invalid(
                    "port",
                    format!(
                        "{} VLANs configured; a switch of {} ports has room for {limit} in its                          FIB key",
                        vids.len(),
                        ports.len()
                    ),
                ));
            }
            cfg.vlans = Some(modes);
        } else if let Some(i) = raw.port.iter().position(|p| p.native.is_some()) {
            return Err(invalid(format!("port[{i}].native"), "needs `trunk`"));
        }
        cfg.stp = stp_settings(raw.stp.as_ref(), &raw.port)?;
        cfg.sflow = match &raw.sflow {
            Some(x) => Some(x.validate().map_err(|e| invalid(e.field, e.message))?),
            None => None,
        };
        let mut seen = HashSet::new();
        for (i, st) in raw.statics.iter().enumerate() {
            let field = |f: &str| format!("static[{i}].{f}");
            let mac: MacAddr = st
                .mac
                .parse()
                .map_err(|_| invalid(field("mac"), format!("{:?} is not a MAC address", st.mac)))?;
            if mac.is_multicast() {
                return Err(invalid(
                    field("mac"),
                    format!("{mac} is a group (multicast) address; those are always flooded"),
                ));
            }
            let port = match &st.port {
                PortRef::Index(n) => *n,
                PortRef::Name(n) => ports.iter().position(|x| x == n).ok_or_else(|| {
                    invalid(field("port"), format!("{n:?} is not one of the ports"))
                })?,
            };
            if port >= ports.len() {
                return Err(invalid(
                    field("port"),
                    format!(
                        "port {port} does not exist (the switch has {} ports)",
                        ports.len()
                    ),
                ));
            }
            let vlan = match (&cfg.vlans, st.vlan) {
                (None, None) => 0,
                (None, Some(_)) => {
                    return Err(invalid(field("vlan"), "the switch has no VLAN settings"))
                }
                (Some(m), v) => {
                    let mode = &m[port];
                    let v = v.or(mode.untagged()).ok_or_else(|| {
                        invalid(
                            field("vlan"),
                            format!("port {} has no untagged VLAN: say which", ports[port]),
                        )
                    })?;
                    if !mode.members().contains(&v) {
                        return Err(invalid(
                            field("vlan"),
                            format!("port {} ({mode}) is not in VLAN {v}", ports[port]),
                        ));
                    }
                    v
                }
            };
            if !seen.insert((vlan, mac)) {
                return Err(invalid(
                    field("mac"),
                    format!("{mac} in VLAN {vlan} has a static entry already"),
                ));
            }
            cfg.statics.push(Static {
                mac,
                vlan,
                port: port as u16,
            });
        }
        if let (Some(m), false) = (&cfg.vlans, cfg.preload.is_empty()) {
            if let Some(&(mac, p)) = cfg
                .preload
                .iter()
                .find(|e| m[e.1 as usize].untagged().is_none())
            {
                return Err(invalid(
                    "switch.fib",
                    format!("entry {mac} names port {p}, which has no untagged VLAN to put it in"),
                ));
            }
        }
        Ok(cfg)
    }

    /// What the switch will do with these settings, for `flowplane check`.
    pub fn describe(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "switch: {} ports, aging {:?}, FIB capacity {} ({} layout), learn queue {}, FIB cache \
             {}, gather {}, tracer {}",
            self.ports.len(),
            self.aging,
            self.fib_capacity,
            self.fib_layout(),
            self.learn_queue,
            self.fib_cache,
            self.gather,
            if self.trace { "on" } else { "off" }
        );
        for (i, p) in self.ports.iter().enumerate() {
            match &self.vlans {
                Some(m) => {
                    let _ = writeln!(s, "port {i}: {p} ({})", m[i]);
                }
                None => {
                    let _ = writeln!(s, "port {i}: {p}");
                }
            }
        }
        match &self.vlans {
            Some(m) => {
                let vids: BTreeSet<u16> = m.iter().flat_map(PortVlans::members).collect();
                for v in vids {
                    let members: Vec<String> = m
                        .iter()
                        .enumerate()
                        .filter(|(_, x)| x.members().contains(&v))
                        .map(|(i, x)| {
                            let tag = if x.untagged() == Some(v) {
                                "untagged"
                            } else {
                                "tagged"
                            };
                            format!("{} {tag}", self.ports[i])
                        })
                        .collect();
                    let _ = writeln!(s, "vlan {v}: {}", members.join(", "));
                }
            }
            None => {
                let _ = writeln!(
                    s,
                    "vlans: none (VLAN-unaware: frames switched by MAC alone)"
                );
            }
        }
        for (i, p) in self.ports.iter().enumerate() {
            let st = self.storm[i];
            if st.any() {
                let _ = writeln!(
                    s,
                    "storm control {p}: broadcast {}/s, multicast {}/s, unknown unicast {}/s (0: \
                     no limit)",
                    st.broadcast, st.multicast, st.unknown_unicast
                );
            }
            if let Some(m) = self.max_macs[i] {
                let _ = writeln!(s, "port security {p}: at most {m} learned MACs");
            }
        }
        let d = self.damping;
        match d.moves {
            0 => {
                let _ = writeln!(s, "mac-move damping: off");
            }
            n => {
                let _ = writeln!(
                    s,
                    "mac-move damping: more than {n} moves within {:?} pins a MAC for {:?}",
                    Duration::from_nanos(d.window_ns),
                    Duration::from_nanos(d.hold_ns)
                );
            }
        }
        if let Some(t) = &self.stp {
            let _ = writeln!(
                s,
                "spanning tree: {}, bridge priority {}, hello {} s, max age {} s, forward delay {} s",
                if t.force_stp { "802.1D STP" } else { "RSTP (802.1D for STP neighbours)" },
                t.priority,
                t.hello,
                t.max_age,
                t.forward_delay
            );
            for (i, &(cost, prio, edge)) in t.ports.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "stp port {}: cost {cost}, priority {prio}{}",
                    self.ports[i],
                    if edge { ", edge" } else { "" }
                );
            }
        }
        for st in &self.statics {
            let _ = writeln!(
                s,
                "static {} vlan {} -> port {} ({})",
                st.mac, st.vlan, st.port, self.ports[st.port as usize]
            );
        }
        if let Some(f) = &self.sflow {
            let to: Vec<String> = f.collectors.iter().map(|c| c.to_string()).collect();
            let _ = writeln!(
                s,
                "sflow: agent {}, one frame in {} sampled per port, counters every {} s, to {}",
                f.agent,
                f.sample_one_in,
                f.counters_interval_s,
                to.join(", ")
            );
        }
        if !self.preload.is_empty() {
            let _ = writeln!(s, "preload: {} entries", self.preload.len());
        }
        s
    }

    /// Samples each worker may queue for the sFlow exporter (the queues are made at start).
    pub fn sflow_queue(&self) -> usize {
        self.sflow
            .as_ref()
            .map_or(fp_export::config::DEFAULT_QUEUE, |s| s.queue)
    }

    /// What a reload may not change (they shape the FIB and the workers at start), named as
    /// the file's field: `Err` with the first that differs.
    pub fn fixed_differs(&self, new: &SwitchConfig) -> Option<&'static str> {
        if self.ports != new.ports {
            Some("port (the ports and their order)")
        } else if self.fib_capacity != new.fib_capacity {
            Some("switch.fib_capacity")
        } else if self.fib_layout() != new.fib_layout() {
            Some("switch.fib_layout")
        } else if self.learn_queue != new.learn_queue {
            Some("switch.learn_queue")
        } else if self.fib_cache != new.fib_cache {
            Some("switch.fib_cache")
        } else if self.gather != new.gather {
            Some("switch.gather")
        } else if self.sflow_queue() != new.sflow_queue() {
            Some("sflow.queue")
        } else if self.trace != new.trace {
            Some("switch.trace")
        } else if self.state_dir != new.state_dir {
            Some("switch.state_dir")
        } else if self.fib_file != new.fib_file {
            Some("switch.fib")
        } else if self.fib_file.is_some() && self.vlans != new.vlans {
            Some("port (VLANs: the preloaded entries of switch.fib sit in their ports' VLANs)")
        } else if self.stp != new.stp {
            Some("stp (and the ports' stp_cost, stp_priority, edge)")
        } else {
            None
        }
    }
}

/// A command-line option's error renamed to the file's field.
fn rename_option(e: ConfigError, ports: &str, section: &str) -> ConfigError {
    match e {
        ConfigError::Invalid { option, message } => {
            let name = option.trim_start_matches("--").replace('-', "_");
            let option = if name == "ports" && !ports.is_empty() {
                ports.to_string()
            } else {
                format!("{section}.{name}")
            };
            ConfigError::Invalid { option, message }
        }
        other => other,
    }
}

/// The spanning tree's settings from `[stp]` and the ports (none without `[stp]`).
fn stp_settings(
    raw: Option<&RawStp>,
    ports: &[RawPort],
) -> Result<Option<StpSettings>, ConfigError> {
    let Some(r) = raw else {
        if let Some(i) = ports
            .iter()
            .position(|p| p.stp_cost.is_some() || p.stp_priority.is_some() || p.edge.is_some())
        {
            return Err(invalid(
                format!("port[{i}]"),
                "stp_cost, stp_priority and edge need an [stp] section",
            ));
        }
        return Ok(None);
    };
    if r.enabled == Some(false) {
        return Ok(None);
    }
    let priority = r.priority.unwrap_or(32768);
    if priority > 61440 || priority % 4096 != 0 {
        return Err(invalid(
            "stp.priority",
            format!("{priority} is not a bridge priority (0 to 61440 in steps of 4096)"),
        ));
    }
    let (hello, max_age, fd) = (
        r.hello_secs.unwrap_or(2),
        r.max_age_secs.unwrap_or(20),
        r.forward_delay_secs.unwrap_or(15),
    );
    if !(1..=10).contains(&hello) {
        return Err(invalid(
            "stp.hello_secs",
            format!("{hello} is not in 1..=10"),
        ));
    }
    if !(6..=40).contains(&max_age) {
        return Err(invalid(
            "stp.max_age_secs",
            format!("{max_age} is not in 6..=40"),
        ));
    }
    if !(4..=30).contains(&fd) {
        return Err(invalid(
            "stp.forward_delay_secs",
            format!("{fd} is not in 4..=30"),
        ));
    }
    // 802.1D's consistency rule: 2 (forward delay - 1) >= max age >= 2 (hello + 1).
    if 2 * (fd - 1) < max_age || max_age < 2 * (hello + 1) {
        return Err(invalid(
            "stp.max_age_secs",
            format!(
                "max age {max_age} must be between 2 x (hello + 1) = {} and 2 x (forward delay - \
                 1) = {}",
                2 * (hello + 1),
                2 * (fd - 1)
            ),
        ));
    }
    let force_stp = match r.version.as_deref() {
        None | Some("rstp") => false,
        Some("stp") => true,
        Some(v) => {
            return Err(invalid(
                "stp.version",
                format!("{v:?}: expected \"rstp\" or \"stp\""),
            ))
        }
    };
    if ports.len() > 4095 {
        return Err(invalid(
            "port",
            "the spanning tree numbers at most 4095 ports",
        ));
    }
    let mut out = Vec::with_capacity(ports.len());
    for (i, p) in ports.iter().enumerate() {
        let cost = p.stp_cost.unwrap_or(20_000);
        if !(1..=200_000_000).contains(&cost) {
            return Err(invalid(
                format!("port[{i}].stp_cost"),
                format!("{cost} is not in 1..=200000000"),
            ));
        }
        let prio = p.stp_priority.unwrap_or(128);
        if prio > 240 || prio % 16 != 0 {
            return Err(invalid(
                format!("port[{i}].stp_priority"),
                format!("{prio} is not a port priority (0 to 240 in steps of 16)"),
            ));
        }
        out.push((cost, prio as u8, p.edge.unwrap_or(false)));
    }
    Ok(Some(StpSettings {
        priority,
        hello,
        max_age,
        forward_delay: fd,
        force_stp,
        ports: out,
    }))
}

fn port_vlans(i: usize, p: &RawPort) -> Result<PortVlans, ConfigError> {
    let field = |f: &str| format!("port[{i}].{f}");
    let vid = |f: String, v: u16| {
        if (1..=vlan::MAX_VID).contains(&v) {
            Ok(v)
        } else {
            Err(invalid(f, format!("{v} is not a VLAN id (1..=4094)")))
        }
    };
    match (p.vlan, &p.trunk, p.native) {
        (Some(_), Some(_), _) => Err(invalid(
            field("trunk"),
            "a port is an access port (`vlan`) or a trunk (`trunk`), not both",
        )),
        (Some(_), None, Some(_)) | (None, None, Some(_)) => {
            Err(invalid(field("native"), "needs `trunk`"))
        }
        (Some(v), None, None) => Ok(PortVlans::Access(vid(field("vlan"), v)?)),
        (None, None, None) => Ok(PortVlans::Access(1)),
        (None, Some(list), native) => {
            let mut allowed = Vec::with_capacity(list.len());
            for (j, &v) in list.iter().enumerate() {
                let v = vid(format!("port[{i}].trunk[{j}]"), v)?;
                if allowed.contains(&v) {
                    return Err(invalid(
                        format!("port[{i}].trunk[{j}]"),
                        format!("VLAN {v} is listed twice"),
                    ));
                }
                allowed.push(v);
            }
            let native = native.map(|v| vid(field("native"), v)).transpose()?;
            if allowed.is_empty() && native.is_none() {
                return Err(invalid(field("trunk"), "a trunk needs at least one VLAN"));
            }
            if let Some(n) = native.filter(|n| allowed.contains(n)) {
                return Err(invalid(
                    field("native"),
                    format!("VLAN {n} is both native (untagged) and in `trunk` (tagged)"),
                ));
            }
            allowed.sort_unstable();
            Ok(PortVlans::Trunk { allowed, native })
        }
    }
}

/// Whether a configuration file's text is a switch's (it has `[switch]` or `[[port]]`), as
/// opposed to a load balancer's.
pub fn is_switch_config(text: &str) -> bool {
    toml::from_str::<toml::Table>(text)
        .map(|t| t.contains_key("switch") || t.contains_key("port"))
        .unwrap_or(false)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSwitch {
    aging_secs: Option<f64>,
    fib: Option<PathBuf>,
    fib_capacity: Option<usize>,
    fib_layout: Option<String>,
    learn_queue: Option<usize>,
    fib_cache: Option<usize>,
    gather: Option<usize>,
    trace: Option<bool>,
    state_dir: Option<PathBuf>,
    mac_move_limit: Option<u32>,
    mac_move_window_secs: Option<f64>,
    mac_move_hold_secs: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPort {
    interface: String,
    vlan: Option<u16>,
    trunk: Option<Vec<u16>>,
    native: Option<u16>,
    max_macs: Option<u32>,
    storm_broadcast: Option<u32>,
    storm_multicast: Option<u32>,
    storm_unknown_unicast: Option<u32>,
    stp_cost: Option<u32>,
    stp_priority: Option<u16>,
    edge: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStp {
    enabled: Option<bool>,
    priority: Option<u16>,
    hello_secs: Option<u16>,
    max_age_secs: Option<u16>,
    forward_delay_secs: Option<u16>,
    version: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum PortRef {
    Index(usize),
    Name(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStatic {
    mac: String,
    port: PortRef,
    vlan: Option<u16>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    switch: Option<RawSwitch>,
    #[serde(default)]
    port: Vec<RawPort>,
    #[serde(default, rename = "static")]
    statics: Vec<RawStatic>,
    stp: Option<RawStp>,
    sflow: Option<fp_export::config::RawSflow>,
}

/// `MAC=PORT` with PORT an index or one of `ports`.
pub fn parse_static(s: &str, ports: &[String]) -> Result<(MacAddr, u16), ConfigError> {
    let opt = || format!("--static {s:?}");
    let (m, p) = s
        .split_once('=')
        .ok_or_else(|| invalid(opt(), "expected MAC=PORT"))?;
    let mac: MacAddr = m
        .trim()
        .parse()
        .map_err(|_| invalid(opt(), format!("{m:?} is not a MAC address")))?;
    if mac.is_multicast() {
        return Err(invalid(
            opt(),
            format!("{m} is a group (multicast) address; those are always flooded"),
        ));
    }
    let p = p.trim();
    let port = match ports.iter().position(|x| x == p) {
        Some(i) => i,
        None => p.parse::<usize>().map_err(|_| {
            invalid(
                opt(),
                format!("{p:?} is neither a port index nor one of the ports"),
            )
        })?,
    };
    if port >= ports.len() {
        return Err(invalid(
            opt(),
            format!(
                "port {port} does not exist (the switch has {} ports)",
                ports.len()
            ),
        ));
    }
    Ok((mac, port as u16))
}

/// The entries of a FIB file, checked against the port count: text (`aa:bb:cc:dd:ee:ff PORT` per
/// line) or, for names ending in `.bin`, the binary format ([`parse_fib_binary`]).
pub fn read_fib(path: &Path, nports: usize) -> Result<Vec<(MacAddr, u16)>, ConfigError> {
    let file = || path.to_path_buf();
    let io = |source| ConfigError::Io {
        file: file(),
        source,
    };
    let bad = |message: String| ConfigError::FibFile {
        file: file(),
        message,
    };
    let mut out = Vec::new();
    if path.extension().is_some_and(|e| e == "bin") {
        let mut f = std::fs::File::open(path).map_err(io)?;
        let len = f.metadata().map_err(io)?.len();
        if len % 8 != 0 {
            return Err(bad(format!(
                "{len} bytes is not a whole number of 8-byte records"
            )));
        }
        out.reserve((len / 8) as usize);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let mut filled = 0;
            while filled < buf.len() {
                let n = f.read(&mut buf[filled..]).map_err(io)?;
                if n == 0 {
                    break;
                }
                filled += n;
            }
            if filled == 0 {
                break;
            }
            out.extend(parse_fib_binary(&buf[..filled]).map_err(|e| bad(e.0))?);
            if filled < buf.len() {
                break;
            }
        }
    } else {
        let text = std::fs::read_to_string(path).map_err(io)?;
        out = parse_fib_text(&text).map_err(|e| bad(e.0))?;
    }
    for (i, &(m, p)) in out.iter().enumerate() {
        if p as usize >= nports {
            return Err(bad(format!(
                "entry {} names port {p}, but the switch has {nports} ports",
                i + 1
            )));
        }
        if m.is_multicast() {
            return Err(bad(format!("entry {} is a group address {m}", i + 1)));
        }
    }
    Ok(out)
}

/// Load FIB entries from text: one `aa:bb:cc:dd:ee:ff PORT` per line (`#` comments). Returns the
/// entries, or the line number and what is wrong.
pub fn parse_fib_text(text: &str) -> Result<Vec<(MacAddr, u16)>, FibFormatError> {
    let mut v = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let (Some(m), Some(p), None) = (it.next(), it.next(), it.next()) else {
            return Err(FibFormatError(format!(
                "line {}: expected `MAC PORT`",
                i + 1
            )));
        };
        let mac: MacAddr = m
            .parse()
            .map_err(|_| FibFormatError(format!("line {}: {m:?} is not a MAC address", i + 1)))?;
        let port: u16 = p
            .parse()
            .map_err(|_| FibFormatError(format!("line {}: {p:?} is not a port number", i + 1)))?;
        v.push((mac, port));
    }
    Ok(v)
}

/// The binary FIB file format for very large preloads: a sequence of little-endian u64 records,
/// each `mac << 16 | port`. Returns the entries of `bytes` (its length must be a multiple of 8).
pub fn parse_fib_binary(
    bytes: &[u8],
) -> Result<impl Iterator<Item = (MacAddr, u16)> + '_, FibFormatError> {
    if !bytes.len().is_multiple_of(8) {
        return Err(FibFormatError(format!(
            "binary FIB of {} bytes is not a whole number of 8-byte records",
            bytes.len()
        )));
    }
    Ok(bytes.chunks_exact(8).map(|c| {
        let r = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        (MacAddr::from_u64(r >> 16), r as u16)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statics_parse_by_index_or_name() {
        let ports: Vec<String> = ["p1", "p2", "p3"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            parse_static("02:00:00:00:00:99=2", &ports).unwrap(),
            (MacAddr::from_u64(0x0200_0000_0099), 2)
        );
        assert_eq!(
            parse_static("02:00:00:00:00:99=p2", &ports).unwrap(),
            (MacAddr::from_u64(0x0200_0000_0099), 1)
        );
        let e = parse_static("02:00:00:00:00:99=3", &ports).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        let e = parse_static("01:00:5e:00:00:01=1", &ports).unwrap_err();
        assert!(e.to_string().contains("group"), "{e}");
        assert!(parse_static("02:00:00:00:00=1", &ports).is_err());
        assert!(parse_static("02:00:00:00:00:99", &ports).is_err());
        assert!(parse_static("02:00:00:00:00:99=eth9", &ports).is_err());
    }

    #[test]
    fn mac_text_round_trips() {
        for m in [0u64, 0x0200_0000_000a, 0xffff_ffff_ffff] {
            let m = MacAddr::from_u64(m);
            assert_eq!(m.to_string().parse::<MacAddr>().ok(), Some(m));
        }
        assert_eq!(
            "2:0:0:0:0:a".parse::<MacAddr>().ok(),
            Some(MacAddr::from_u64(0x0200_0000_000a))
        );
        assert!("02:00:00:00:00:100".parse::<MacAddr>().is_err());
    }

    #[test]
    fn settings_are_checked_and_name_the_option() {
        let ports = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ok = SwitchConfig::new(ports(&["a", "b"]), 300.0, &[], None, 10, 64, 0, true).unwrap();
        assert_eq!(ok.fib_capacity, 1024, "grown to the minimum");
        assert_eq!(ok.gather, DEFAULT_GATHER);
        let mut g = ok.clone();
        for bad in [0, crate::stage::MAX_GATHER + 1] {
            let e = g.set_gather(bad).unwrap_err();
            assert!(e.to_string().starts_with("--gather"), "{e}");
            assert_eq!(g.gather, DEFAULT_GATHER, "a rejected value changes nothing");
        }
        g.set_gather(1).unwrap();
        assert_eq!(g.gather, 1);
        for (p, aging, q, want) in [
            (
                ports(&["a"]),
                300.0,
                64,
                "--ports: a switch needs at least 2 ports",
            ),
            (
                ports(&["a", "a"]),
                300.0,
                64,
                "--ports: \"a\" is listed twice",
            ),
            (ports(&["a", "b"]), 0.0, 64, "--aging-secs"),
            (ports(&["a", "b"]), f64::NAN, 64, "--aging-secs"),
            (ports(&["a", "b"]), 1e20, 64, "--aging-secs"),
            (ports(&["a", "b"]), 1e-12, 64, "--aging-secs"),
            (ports(&["a", "b"]), 300.0, 0, "--learn-queue"),
        ] {
            let e = SwitchConfig::new(p, aging, &[], None, 10, q, 0, true).unwrap_err();
            assert!(e.to_string().starts_with(want), "{e}");
        }
    }

    const FILE: &str = r#"
        [switch]
        aging_secs = 60
        [[port]]
        interface = "h1"
        vlan = 10
        [[port]]
        interface = "h2"
        vlan = 20
        [[port]]
        interface = "up"
        trunk = [20, 10]
        native = 30
        [[port]]
        interface = "spare"
        max_macs = 100
        storm_broadcast = 1000
        [[static]]
        mac = "02:00:00:00:00:0b"
        port = "up"
        vlan = 20
        [[static]]
        mac = "02:00:00:00:00:0b"
        port = 0
    "#;

    #[test]
    fn a_configuration_file_gives_ports_vlans_and_statics() {
        let c = SwitchConfig::from_toml(FILE).unwrap();
        assert_eq!(c.ports, ["h1", "h2", "up", "spare"]);
        assert_eq!(c.aging, Duration::from_secs(60));
        assert_eq!(
            c.vlans.as_deref().unwrap(),
            [
                PortVlans::Access(10),
                PortVlans::Access(20),
                PortVlans::Trunk {
                    allowed: vec![10, 20],
                    native: Some(30)
                },
                PortVlans::Access(1),
            ]
        );
        let b = MacAddr::from_u64(0x0200_0000_000b);
        assert_eq!(
            c.statics,
            [
                Static {
                    mac: b,
                    vlan: 20,
                    port: 2
                },
                Static {
                    mac: b,
                    vlan: 10,
                    port: 0
                }
            ]
        );
        assert_eq!(c.max_macs, [None, None, None, Some(100)]);
        assert_eq!(c.storm[3].broadcast, 1000);
        assert!(!c.storm[0].any());
        assert_eq!(c.damping, Damping::default());
        let d = c.describe();
        assert!(d.contains("vlan 20: h2 untagged, up tagged"), "{d}");
        assert!(
            d.contains("port security spare: at most 100 learned MACs"),
            "{d}"
        );
        assert!(d.contains("port 2: up (trunk [10,20] native 30)"), "{d}");
        // Without VLAN settings: VLAN-unaware.
        let u =
            SwitchConfig::from_toml("[[port]]\ninterface = \"a\"\n[[port]]\ninterface = \"b\"\n")
                .unwrap();
        assert!(u.vlans.is_none());
        assert!(is_switch_config(FILE));
        assert!(!is_switch_config("[balancer]\naddress = \"10.0.0.1\"\n"));
    }

    #[test]
    fn configuration_errors_name_the_field() {
        for (from, to, want) in [
            (
                "vlan = 20\n",
                "vlan = 4095\n",
                "port[1].vlan: 4095 is not a VLAN id",
            ),
            (
                "trunk = [20, 10]",
                "trunk = [20, 20]",
                "port[2].trunk[1]: VLAN 20 is listed twice",
            ),
            (
                "native = 30",
                "native = 10",
                "port[2].native: VLAN 10 is both native",
            ),
            (
                "vlan = 10\n",
                "vlan = 10\n        trunk = [5]\n",
                "port[0].trunk: a port is an access",
            ),
            (
                "port = \"up\"",
                "port = \"nope\"",
                "static[0].port: \"nope\" is not one of the ports",
            ),
            (
                "port = 0",
                "port = 9",
                "static[1].port: port 9 does not exist",
            ),
            (
                "vlan = 20\n        [[static]]",
                "vlan = 40\n        [[static]]",
                "static[0].vlan: port up",
            ),
            ("aging_secs = 60", "aging_secs = -1", "switch.aging_secs"),
            (
                "aging_secs = 60",
                "agin_secs = 60",
                "configuration: unknown field `agin_secs`",
            ),
            (
                "aging_secs = 60",
                "aging_secs = 60\ngather = 0",
                "switch.gather",
            ),
            (
                "aging_secs = 60",
                "aging_secs = 60\nfib_layout = \"2,5\"",
                "switch.fib_layout: \"2,5\": expected compact or quotient or auto",
            ),
            (
                "interface = \"spare\"",
                "interface = \"h1\"",
                "port: \"h1\" is listed twice",
            ),
        ] {
            assert!(FILE.contains(from), "{from}");
            let text = FILE.replacen(from, to, 1);
            let e = SwitchConfig::from_toml(&text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{want:?}: got {e:?}");
        }
        // A static entry on a trunk without an untagged VLAN must say which VLAN.
        let text = FILE
            .replace("native = 30\n", "")
            .replace("port = \"up\"\n        vlan = 20", "port = \"up\"");
        let e = SwitchConfig::from_toml(&text).unwrap_err().to_string();
        assert!(
            e.starts_with("static[0].vlan: port up has no untagged VLAN"),
            "{e}"
        );
    }

    #[test]
    fn spanning_tree_settings_are_checked() {
        let base =
            "[[port]]\ninterface = \"a\"\nedge = true\n[[port]]\ninterface = \"b\"\nstp_cost = 4\n";
        let with = |stp: &str| format!("[stp]\n{stp}\n{base}");
        let c = SwitchConfig::from_toml(&with(
            "priority = 4096\nforward_delay_secs = 4\nmax_age_secs = 6",
        ))
        .unwrap();
        let t = c.stp.unwrap();
        assert_eq!(
            (t.priority, t.hello, t.max_age, t.forward_delay),
            (4096, 2, 6, 4)
        );
        assert_eq!(t.ports, vec![(20_000, 128, true), (4, 128, false)]);
        assert!(!t.force_stp);
        assert!(
            SwitchConfig::from_toml(&with("version = \"stp\""))
                .unwrap()
                .stp
                .unwrap()
                .force_stp
        );
        assert!(SwitchConfig::from_toml(&with("enabled = false"))
            .unwrap()
            .stp
            .is_none());
        for (stp, want) in [
            (
                "priority = 1000",
                "stp.priority: 1000 is not a bridge priority",
            ),
            (
                "forward_delay_secs = 4",
                "stp.max_age_secs: max age 20 must be between",
            ),
            ("hello_secs = 0", "stp.hello_secs"),
            ("version = \"mstp\"", "stp.version"),
            ("bogus = 1", "configuration: unknown field `bogus`"),
        ] {
            let e = SwitchConfig::from_toml(&with(stp)).unwrap_err().to_string();
            assert!(e.starts_with(want), "{want:?}: got {e:?}");
        }
        let e = SwitchConfig::from_toml(base).unwrap_err().to_string();
        assert!(
            e.starts_with("port[0]: stp_cost, stp_priority and edge need an [stp]"),
            "{e}"
        );
        let e = SwitchConfig::from_toml(&with("").replace("stp_cost = 4", "stp_priority = 100"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("port[1].stp_priority"), "{e}");
    }

    #[test]
    fn the_sflow_section_is_checked_and_its_queue_is_fixed_at_start() {
        let sflow = "\n[sflow]\ncollectors = [\"192.0.2.9:6343\"]\nagent = \"192.0.2.1\"\n";
        let c = SwitchConfig::from_toml(&format!("{FILE}{sflow}")).unwrap();
        let s = c.sflow.as_ref().unwrap();
        assert_eq!(s.sample_one_in, 1000);
        assert_eq!(s.collectors[0].port(), 6343);
        assert!(c
            .describe()
            .contains("sflow: agent 192.0.2.1, one frame in 1000"));
        for (bad, want) in [
            ("agent = \"192.0.2.1\"", "sflow.agent"),
            ("collectors = [\"192.0.2.9:6343\"]", "sflow.collectors[0]"),
        ] {
            let text = format!("{FILE}{sflow}").replace(bad, &bad.replace("192.0.2", "x"));
            let e = SwitchConfig::from_toml(&text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{want}: {e}");
        }
        let e = SwitchConfig::from_toml(&format!("{FILE}{sflow}sample_one_in = 99999999999\n"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("sflow.sample_one_in"), "{e}");
        let q = SwitchConfig::from_toml(&format!("{FILE}{sflow}queue = 128\n")).unwrap();
        assert_eq!(c.fixed_differs(&q), Some("sflow.queue"));
        let rate = SwitchConfig::from_toml(&format!("{FILE}{sflow}sample_one_in = 5\n")).unwrap();
        assert_eq!(c.fixed_differs(&rate), None, "the rate changes on a reload");
    }

    #[test]
    fn a_reload_may_not_change_what_shapes_the_fib() {
        let a = SwitchConfig::from_toml(FILE).unwrap();
        let same = SwitchConfig::from_toml(&FILE.replace("vlan = 20\n", "vlan = 30\n")).unwrap();
        assert_eq!(a.fixed_differs(&same), None, "VLANs may change");
        let b = SwitchConfig::from_toml(&FILE.replace("aging_secs = 60", "fib_capacity = 9999"))
            .unwrap();
        assert_eq!(a.fixed_differs(&b), Some("switch.fib_capacity"));
        // The layout follows the capacity unless asked; changing it needs a restart.
        assert_eq!(a.fib_layout(), FibLayout::Compact);
        let q = FILE.replace("aging_secs = 60", "fib_layout = \"quotient\"");
        let q = SwitchConfig::from_toml(&q).unwrap();
        assert_eq!(q.fib_layout(), FibLayout::Quotient);
        assert_eq!(a.fixed_differs(&q), Some("switch.fib_layout"));
        let big = FILE.replace("aging_secs = 60", "fib_capacity = 268435456");
        let big = SwitchConfig::from_toml(&big).unwrap();
        assert_eq!(
            big.fib_layout(),
            FibLayout::Quotient,
            "auto from 256 Mi entries"
        );
        let asked = FILE.replace("aging_secs = 60", "fib_layout = \"auto\"");
        assert_eq!(
            a.fixed_differs(&SwitchConfig::from_toml(&asked).unwrap()),
            None
        );
        let c = SwitchConfig::from_toml(&FILE.replace("\"spare\"", "\"other\"")).unwrap();
        assert!(a.fixed_differs(&c).unwrap().starts_with("port"));
        // A preload is named, not read, on a reload; with one, VLAN changes need a restart.
        let dir = std::env::temp_dir().join(format!("fp-switch-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fib = dir.join("fib.txt");
        std::fs::write(&fib, "02:00:00:00:00:0a 0\n").unwrap();
        let with_fib = FILE.replace("aging_secs = 60", &format!("fib = {:?}", fib));
        let f = dir.join("sw.toml");
        std::fs::write(&f, &with_fib).unwrap();
        let start = SwitchConfig::from_file(&f).unwrap();
        assert_eq!(start.preload.len(), 1);
        std::fs::remove_file(&fib).unwrap();
        let again = SwitchConfig::from_file_for_reload(&f).unwrap();
        assert!(again.preload.is_empty());
        assert_eq!(start.fixed_differs(&again), None);
        std::fs::write(&f, with_fib.replace("vlan = 20\n", "vlan = 30\n")).unwrap();
        let vlans = SwitchConfig::from_file_for_reload(&f).unwrap();
        assert!(start.fixed_differs(&vlans).unwrap().contains("switch.fib"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn fib_files_are_checked_against_the_ports() {
        let dir = std::env::temp_dir().join(format!("fp-switch-fib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let txt = dir.join("fib.txt");
        std::fs::write(&txt, "02:00:00:00:00:0a 1\n02:00:00:00:00:0b 0\n").unwrap();
        assert_eq!(
            read_fib(&txt, 2).unwrap(),
            vec![
                (MacAddr::from_u64(0x0200_0000_000a), 1),
                (MacAddr::from_u64(0x0200_0000_000b), 0)
            ]
        );
        let e = read_fib(&txt, 1).unwrap_err();
        assert!(e.to_string().contains("names port 1"), "{e}");
        let bin = dir.join("fib.bin");
        let mut b = Vec::new();
        for i in 0..300_000u64 {
            b.extend_from_slice(&((0x0200_0000_0000 + i) << 16 | (i % 3)).to_le_bytes());
        }
        std::fs::write(&bin, &b).unwrap();
        let v = read_fib(&bin, 3).unwrap();
        assert_eq!(v.len(), 300_000);
        assert_eq!(
            v[299_999],
            (
                MacAddr::from_u64(0x0200_0000_0000 + 299_999),
                (299_999u64 % 3) as u16
            )
        );
        std::fs::write(&bin, &b[..13]).unwrap();
        assert!(read_fib(&bin, 3).is_err());
        let e = read_fib(&dir.join("missing.txt"), 3).unwrap_err();
        assert!(e.to_string().contains("missing.txt"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn fib_files() {
        let t = parse_fib_text("# comment\n02:00:00:00:00:0a 3\n\nff:ff:ff:ff:ff:fe 65534 # x\n")
            .unwrap();
        assert_eq!(
            t,
            vec![
                (MacAddr::from_u64(0x0200_0000_000a), 3),
                (MacAddr::from_u64(0xffff_ffff_fffe), 65534)
            ]
        );
        assert!(parse_fib_text("02:00:00:00:00 1")
            .unwrap_err()
            .0
            .contains("line 1"));
        assert!(parse_fib_text("02:00:00:00:00:0a x")
            .unwrap_err()
            .0
            .contains("port"));
        let mut bin = Vec::new();
        bin.extend_from_slice(&(0x0200_0000_000au64 << 16 | 7).to_le_bytes());
        let v: Vec<_> = parse_fib_binary(&bin).unwrap().collect();
        assert_eq!(v, vec![(MacAddr::from_u64(0x0200_0000_000a), 7)]);
        assert!(parse_fib_binary(&bin[..5]).is_err());
    }
}
