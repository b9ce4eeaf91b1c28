//! `flowplane backend`: prepare this Linux host (or network namespace) as a direct-server-return
//! backend behind flowplane (Maglev §3.1: the balancer encapsulates packets to the backend, which
//! answers the client directly), and undo it with `--remove`.
//!
//! What it sets up:
//!
//! * each `--vip` on the loopback device (`/32` or `/128`), so the kernel accepts packets addressed
//!   to it; `lo` is brought up if it was down;
//! * `net.ipv4.conf.all.arp_ignore = 1` and `arp_announce = 2`, so the backend never answers ARP for
//!   a VIP nor uses a VIP as an ARP source (the balancer owns the VIP on the segment); IPv6 answers
//!   neighbour solicitations only for addresses on the receiving interface, so it needs nothing;
//! * `rp_filter = 0` on `all` and on the tunnel interface (and on the VXLAN device), because
//!   decapsulated packets come from clients that are not routed via the device they arrive on;
//! * decapsulation: `--decap gre,ipip` attaches flowplane's tc ingress eBPF program
//!   ([`fp_ebpf::decap`]) to `--interface` (this kernel has no GRE or IPIP devices); `--decap vxlan`
//!   creates a kernel VXLAN device (`external` mode, any VNI, unless `--vxlan-vni` fixes one) with a
//!   known MAC (`--vxlan-mac`: the balancer's inner destination MAC must equal it, see
//!   docs/platform.md, "VXLAN backends"); `--decap none` is L2 DSR (the balancer only rewrites the destination MAC).
//!   The tc program also gives **second chance**: a tunnel packet whose outer header names
//!   another backend (`fp_wire::second_chance`) and that belongs to no socket here (a TCP
//!   packet other than a SYN that finds only a listener, a UDP datagram no socket takes) is sent
//!   on to the named backend instead of being answered with a reset; `--status` counts both
//!   outcomes.
//!
//! Every change is recorded — with the previous value of each sysctl — in a state file, by
//! default `/run/flowplane/backend-<netns cookie>.json` (one per network namespace: the cookie is
//! unique for the life of the system, so a new namespace never inherits a dead one's record).
//! Running the command again is idempotent: what is already in place is left alone and recorded
//! only once (the first recorded previous value wins). `--remove` undoes exactly the recorded
//! changes, in reverse order, and deletes the file; what the command found already in place is not
//! touched. If a step fails, what was done so far is recorded, so `--remove` can still undo it.
//!
//! Addresses and the VXLAN device are managed with the `ip` command (iproute2), whose invocations
//! are printed; the tc program with rtnetlink (its file descriptor cannot be handed to `tc`
//! without a mounted bpffs). Sysctls are written under `/proc/sys`.

use anyhow::{anyhow, bail, Context, Result};
use fp_ebpf::decap::{self, DecapConfig, TcDecap};
use fp_wire::encap::EncapKind;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a backend strips, per encapsulation the balancer adds: nothing for L2 DSR (the balancer
/// rewrites the destination MAC only), a kernel VXLAN device for VXLAN, flowplane's tc eBPF
/// program for GRE and IP-in-IP.
fn parse_decap(s: &str) -> std::result::Result<EncapKind, String> {
    s.parse::<EncapKind>().map_err(|e| format!("{s:?}: {e}"))
}

#[derive(clap::Args, Debug)]
pub struct BackendArgs {
    /// Interface the balancer's packets arrive on (decapsulation and rp_filter apply to it).
    #[arg(long, short = 'i', required_unless_present_any = ["remove", "status"])]
    pub interface: Option<String>,
    /// A VIP this backend serves (repeatable; IPv4 or IPv6): added to `lo`.
    #[arg(long = "vip", value_name = "ADDR")]
    pub vips: Vec<IpAddr>,
    /// Decapsulation of the balancer's encapsulation: none (L2 DSR), vxlan, gre, ipip; gre and
    /// ipip may be combined (`gre,ipip`).
    #[arg(long, value_parser = parse_decap, value_delimiter = ',', default_value = "none")]
    pub decap: Vec<EncapKind>,
    /// UDP port of the VXLAN device.
    #[arg(long, default_value_t = 4789)]
    pub vxlan_port: u16,
    /// Accept only this VNI (default: the one in `--decap vxlan:VNI`, else an `external` device
    /// accepting any VNI).
    #[arg(long)]
    pub vxlan_vni: Option<u32>,
    /// MAC address of the VXLAN device: the inner destination MAC the balancer must use.
    #[arg(long, default_value = "02:66:70:00:00:01")]
    pub vxlan_mac: String,
    /// Name of the VXLAN device.
    #[arg(long, default_value = "fpvx0")]
    pub vxlan_dev: String,
    /// Undo everything recorded for this network namespace.
    #[arg(long, conflicts_with_all = ["vips", "status", "dry_run"])]
    pub remove: bool,
    /// Show what is recorded and the decapsulation program's counters.
    #[arg(long, conflicts_with_all = ["vips", "dry_run"])]
    pub status: bool,
    /// Print what would change without changing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// State file (default: /run/flowplane/backend-{network namespace cookie}.json).
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
}

/// One recorded change.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Change {
    /// A sysctl set from `previous` to `value`.
    Sysctl {
        key: String,
        previous: String,
        value: String,
    },
    /// A link brought up.
    LinkUp { dev: String },
    /// An address added.
    Address {
        addr: IpAddr,
        prefix: u8,
        dev: String,
    },
    /// A VXLAN device created.
    VxlanDevice { name: String },
    /// A clsact qdisc created on `dev`.
    Clsact { dev: String },
    /// flowplane's tc decap filter attached to `dev`.
    TcDecap { dev: String, gre: bool, ipip: bool },
}

impl Change {
    fn same_target(&self, other: &Change) -> bool {
        use Change::*;
        match (self, other) {
            (Sysctl { key: a, .. }, Sysctl { key: b, .. }) => a == b,
            (LinkUp { dev: a }, LinkUp { dev: b }) => a == b,
            (
                Address {
                    addr: a, dev: d, ..
                },
                Address {
                    addr: b, dev: e, ..
                },
            ) => a == b && d == e,
            (VxlanDevice { name: a }, VxlanDevice { name: b }) => a == b,
            (Clsact { dev: a }, Clsact { dev: b }) => a == b,
            (TcDecap { dev: a, .. }, TcDecap { dev: b, .. }) => a == b,
            _ => false,
        }
    }
}

/// The state file.
#[derive(Serialize, Deserialize, Debug, Default)]
struct State {
    /// Format version.
    version: u32,
    /// Network namespace cookie the changes were made in.
    netns_cookie: u64,
    /// Changes in the order they were made.
    changes: Vec<Change>,
}

const STATE_VERSION: u32 = 1;

impl State {
    fn load(path: &Path, cookie: u64) -> Result<Option<State>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let s: State = serde_json::from_str(&text)
            .with_context(|| format!("parsing state file {}", path.display()))?;
        if s.version != STATE_VERSION {
            bail!(
                "state file {} has format version {}, this flowplane writes {STATE_VERSION}",
                path.display(),
                s.version
            );
        }
        if s.netns_cookie != cookie {
            bail!(
                "state file {} records changes made in another network namespace (cookie {}, this \
                 one is {cookie}); run the command in that namespace or pass another --state",
                path.display(),
                s.netns_cookie
            );
        }
        Ok(Some(s))
    }

    fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(self)? + "\n")
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
    }

    /// Record `c` unless a change to the same target is already recorded (the first one keeps the
    /// original previous value); a changed tc decap configuration replaces the recorded one.
    fn record(&mut self, c: Change) {
        match self.changes.iter_mut().find(|x| x.same_target(&c)) {
            Some(existing @ Change::TcDecap { .. }) => *existing = c,
            Some(_) => {}
            None => self.changes.push(c),
        }
    }

    fn recorded(&self, c: &Change) -> bool {
        self.changes.iter().any(|x| x.same_target(c))
    }
}

fn default_state_path(cookie: u64) -> PathBuf {
    PathBuf::from(format!("/run/flowplane/backend-{cookie}.json"))
}

pub fn run(a: BackendArgs) -> Result<()> {
    let cookie = fp_ebpf::sys::netns_cookie()
        .context("reading this network namespace's cookie (SO_NETNS_COOKIE, Linux >= 5.14)")?;
    let path = a
        .state
        .clone()
        .unwrap_or_else(|| default_state_path(cookie));
    if a.status {
        return status(&path, cookie);
    }
    if a.remove {
        return remove(&path, cookie);
    }
    if fp_ebpf::sys::euid() != 0 && !a.dry_run {
        bail!("flowplane backend changes addresses, sysctls and tc filters: run it as root");
    }
    let iface = a.interface.clone().expect("clap requires --interface");
    validate(&a, &iface)?;
    let mut state = State::load(&path, cookie)?.unwrap_or(State {
        version: STATE_VERSION,
        netns_cookie: cookie,
        changes: Vec::new(),
    });
    let mut ctx = Apply {
        state: &mut state,
        dry_run: a.dry_run,
        changed: 0,
    };
    let result = ctx.apply(&a, &iface);
    let changed = ctx.changed;
    if !a.dry_run {
        // Save whatever was done, also after a failure, so that --remove can undo it.
        state
            .save(&path)
            .with_context(|| "recording the changes (they are made but not recorded!)")?;
    }
    result?;
    if a.dry_run {
        println!("dry run: {changed} change(s) would be made");
    } else {
        println!(
            "backend ready: {changed} change(s) made, {} recorded in {} (undo with `flowplane backend --remove`)",
            state.changes.len(),
            path.display()
        );
    }
    Ok(())
}

fn validate(a: &BackendArgs, iface: &str) -> Result<()> {
    if fp_ebpf::ifindex(iface).is_err() {
        bail!("--interface {iface}: no such interface in this network namespace");
    }
    if a.decap.contains(&EncapKind::L2Dsr) && a.decap.len() > 1 {
        bail!("--decap none cannot be combined with other methods");
    }
    if a.decap.iter().any(EncapKind::is_vxlan) {
        parse_mac(&a.vxlan_mac)?;
        if a.vxlan_vni.is_some_and(|v| v >= 1 << 24) {
            bail!(
                "--vxlan-vni {}: a VNI has 24 bits",
                a.vxlan_vni.unwrap_or(0)
            );
        }
        if a.vxlan_dev.len() > 15 || a.vxlan_dev.is_empty() {
            bail!(
                "--vxlan-dev {:?}: an interface name has 1 to 15 characters",
                a.vxlan_dev
            );
        }
    }
    for v in &a.vips {
        if v.is_unspecified() || v.is_multicast() || v.is_loopback() {
            bail!("--vip {v}: not a unicast service address");
        }
    }
    Ok(())
}

fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let m = s
        .parse::<fp_wire::ethernet::MacAddr>()
        .map_err(|_| anyhow!("--vxlan-mac {s:?}: expected six hex bytes like 02:66:70:00:00:01"))?
        .0;
    if m[0] & 1 != 0 {
        bail!("--vxlan-mac {s}: a multicast address cannot be a device address");
    }
    Ok(m)
}

struct Apply<'a> {
    state: &'a mut State,
    dry_run: bool,
    changed: usize,
}

impl Apply<'_> {
    fn apply(&mut self, a: &BackendArgs, iface: &str) -> Result<()> {
        self.sysctl("net.ipv4.conf.all.arp_ignore", "1")?;
        self.sysctl("net.ipv4.conf.all.arp_announce", "2")?;
        self.sysctl("net.ipv4.conf.all.rp_filter", "0")?;
        self.sysctl(&format!("net.ipv4.conf.{iface}.rp_filter"), "0")?;
        if !a.vips.is_empty() {
            self.link_up("lo")?;
        }
        for &v in &a.vips {
            self.address(v, "lo")?;
        }
        let gre = a.decap.contains(&EncapKind::Gre);
        let ipip = a.decap.contains(&EncapKind::Ipip);
        if gre || ipip {
            self.tc_decap(iface, DecapConfig { gre, ipip })?;
        }
        if a.decap.iter().any(EncapKind::is_vxlan) {
            self.vxlan(a, iface)?;
        }
        Ok(())
    }

    fn sysctl(&mut self, key: &str, value: &str) -> Result<()> {
        let path = sysctl_path(key);
        let previous = std::fs::read_to_string(&path)
            .with_context(|| format!("reading sysctl {key} ({})", path.display()))?
            .trim()
            .to_string();
        if previous == value {
            return Ok(());
        }
        println!("set {key} = {value} (was {previous})");
        self.changed += 1;
        if self.dry_run {
            return Ok(());
        }
        std::fs::write(&path, value).with_context(|| format!("writing sysctl {key} = {value}"))?;
        self.state.record(Change::Sysctl {
            key: key.into(),
            previous,
            value: value.into(),
        });
        Ok(())
    }

    fn link_up(&mut self, dev: &str) -> Result<()> {
        let out = ip(&["-o", "link", "show", "dev", dev])?;
        if link_is_up(&out) {
            return Ok(());
        }
        self.changed += 1;
        println!("ip link set dev {dev} up");
        if self.dry_run {
            return Ok(());
        }
        ip(&["link", "set", "dev", dev, "up"])?;
        self.state.record(Change::LinkUp { dev: dev.into() });
        Ok(())
    }

    fn address(&mut self, v: IpAddr, dev: &str) -> Result<()> {
        let prefix = if v.is_ipv4() { 32 } else { 128 };
        let c = Change::Address {
            addr: v,
            prefix,
            dev: dev.into(),
        };
        if has_address(dev, v)? {
            return Ok(());
        }
        let cidr = format!("{v}/{prefix}");
        let mut args = vec!["addr", "add", &cidr, "dev", dev];
        if v.is_ipv6() {
            args.push("nodad");
        }
        println!("ip {}", args.join(" "));
        self.changed += 1;
        if self.dry_run {
            return Ok(());
        }
        ip(&args)?;
        self.state.record(c);
        Ok(())
    }

    fn tc_decap(&mut self, iface: &str, cfg: DecapConfig) -> Result<()> {
        let what = match (cfg.gre, cfg.ipip) {
            (true, true) => "gre,ipip",
            (true, false) => "gre",
            _ => "ipip",
        };
        let ifindex = fp_ebpf::ifindex(iface)?;
        let c = Change::TcDecap {
            dev: iface.into(),
            gre: cfg.gre,
            ipip: cfg.ipip,
        };
        let present = decap::installed(ifindex)?;
        if present.is_some() && self.state.changes.contains(&c) {
            return Ok(()); // already attached by us with this configuration
        }
        if present.is_some() && !self.state.recorded(&c) {
            bail!(
                "a tc filter already sits at flowplane's position (ingress prio {:#x}, handle {:#x}) \
                 on {iface} and was not installed by this command's record; remove it first \
                 (tc filter del dev {iface} ingress prio {})",
                decap::TC_PRIO,
                decap::TC_HANDLE,
                decap::TC_PRIO
            );
        }
        println!("attach tc ingress decap ({what}) to {iface}");
        self.changed += 1;
        if self.dry_run {
            return Ok(());
        }
        let d = TcDecap::load(cfg).context("loading the tc decapsulation program")?;
        let created_qdisc = d
            .attach(ifindex)
            .with_context(|| format!("attaching the decapsulation program to {iface}"))?;
        if created_qdisc {
            self.state.record(Change::Clsact { dev: iface.into() });
        }
        self.state.record(c);
        let id = d.program().info().map(|i| i.id).unwrap_or(0);
        println!(
            "  program {} (id {id}) on {iface} ingress",
            decap::PROG_NAME
        );
        Ok(())
    }

    fn vxlan(&mut self, a: &BackendArgs, iface: &str) -> Result<()> {
        let dev = a.vxlan_dev.as_str();
        let c = Change::VxlanDevice { name: dev.into() };
        let exists = fp_ebpf::ifindex(dev).is_ok();
        if exists && !self.state.recorded(&c) {
            bail!(
                "--vxlan-dev {dev}: a device with that name exists and was not created by \
                 flowplane backend; pick another name"
            );
        }
        if !exists {
            let port = a.vxlan_port.to_string();
            // `--vxlan-vni`, else a VNI named in `--decap vxlan:VNI`, else any (external).
            let named = a.decap.iter().find_map(|k| match k {
                EncapKind::Vxlan { vni } if *vni != 0 => Some(*vni),
                _ => None,
            });
            let vni = a.vxlan_vni.or(named).map(|v| v.to_string());
            let mut args = vec!["link", "add", dev, "address", &a.vxlan_mac, "type", "vxlan"];
            match &vni {
                Some(v) => args.extend(["id", v.as_str(), "dev", iface]),
                None => args.push("external"),
            }
            args.extend(["dstport", port.as_str()]);
            println!("ip {}", args.join(" "));
            self.changed += 1;
            if !self.dry_run {
                ip(&args)?;
                self.state.record(c);
            }
        }
        if self.dry_run && !exists {
            println!("set net.ipv4.conf.{dev}.rp_filter = 0");
            println!("ip link set dev {dev} up");
            return Ok(());
        }
        self.sysctl(&format!("net.ipv4.conf.{dev}.rp_filter"), "0")?;
        let out = ip(&["-o", "link", "show", "dev", dev])?;
        if !link_is_up(&out) {
            println!("ip link set dev {dev} up");
            if !self.dry_run {
                ip(&["link", "set", "dev", dev, "up"])?;
            }
        }
        Ok(())
    }
}

/// Whether `ip -o link show` output shows the administrative UP flag.
fn link_is_up(out: &str) -> bool {
    out.split_once('<')
        .and_then(|(_, r)| r.split_once('>'))
        .is_some_and(|(flags, _)| flags.split(',').any(|f| f == "UP"))
}

fn sysctl_path(key: &str) -> PathBuf {
    // net.ipv4.conf.<dev>.rp_filter: the device name may itself contain dots, so only the fixed
    // components are turned into path separators.
    let parts: Vec<&str> = key.split('.').collect();
    if parts.len() > 5 && parts[0] == "net" && parts[2] == "conf" {
        let dev = parts[3..parts.len() - 1].join(".");
        return PathBuf::from(format!(
            "/proc/sys/net/{}/conf/{dev}/{}",
            parts[1],
            parts[parts.len() - 1]
        ));
    }
    PathBuf::from(format!("/proc/sys/{}", key.replace('.', "/")))
}

fn ip(args: &[&str]) -> Result<String> {
    let out = Command::new("ip").args(args).output().map_err(|e| {
        anyhow!(
            "running `ip {}`: {e} (the ip command from iproute2 is needed)",
            args.join(" ")
        )
    })?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn has_address(dev: &str, v: IpAddr) -> Result<bool> {
    let fam = if v.is_ipv4() { "-4" } else { "-6" };
    let out = ip(&[fam, "-o", "addr", "show", "dev", dev])?;
    Ok(out.split_whitespace().any(|w| {
        w.split('/')
            .next()
            .and_then(|a| a.parse::<IpAddr>().ok())
            .is_some_and(|a| a == v)
    }))
}

fn undo(c: &Change) -> Result<()> {
    match c {
        Change::Sysctl { key, previous, .. } => {
            let path = sysctl_path(key);
            if !path.exists() {
                println!("skip {key}: the device is gone");
                return Ok(());
            }
            println!("set {key} = {previous} (restored)");
            std::fs::write(&path, previous).with_context(|| format!("restoring sysctl {key}"))
        }
        Change::LinkUp { dev } => {
            println!("ip link set dev {dev} down");
            ip(&["link", "set", "dev", dev, "down"]).map(drop)
        }
        Change::Address { addr, prefix, dev } => {
            if !has_address(dev, *addr)? {
                println!("skip {addr}/{prefix} on {dev}: already gone");
                return Ok(());
            }
            let cidr = format!("{addr}/{prefix}");
            println!("ip addr del {cidr} dev {dev}");
            ip(&["addr", "del", &cidr, "dev", dev]).map(drop)
        }
        Change::VxlanDevice { name } => {
            if fp_ebpf::ifindex(name).is_err() {
                println!("skip {name}: already gone");
                return Ok(());
            }
            println!("ip link del dev {name}");
            ip(&["link", "del", "dev", name]).map(drop)
        }
        Change::Clsact { dev } => {
            let Ok(i) = fp_ebpf::ifindex(dev) else {
                println!("skip clsact on {dev}: the device is gone");
                return Ok(());
            };
            println!("remove clsact qdisc from {dev}");
            fp_ebpf::netlink::Netlink::open()?.clsact_del(i)?;
            Ok(())
        }
        Change::TcDecap { dev, .. } => {
            let Ok(i) = fp_ebpf::ifindex(dev) else {
                println!("skip tc decap on {dev}: the device is gone");
                return Ok(());
            };
            println!("detach tc ingress decap from {dev}");
            decap::detach(i, false)?;
            Ok(())
        }
    }
}

fn remove(path: &Path, cookie: u64) -> Result<()> {
    let Some(mut state) = State::load(path, cookie)? else {
        println!(
            "nothing to undo: no record for this network namespace ({})",
            path.display()
        );
        return Ok(());
    };
    while let Some(c) = state.changes.last().cloned() {
        if let Err(e) = undo(&c) {
            state.save(path)?;
            return Err(e.context(format!(
                "undoing {c:?}; the remaining changes stay recorded in {}",
                path.display()
            )));
        }
        state.changes.pop();
    }
    std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
    println!("backend settings removed");
    Ok(())
}

fn status(path: &Path, cookie: u64) -> Result<()> {
    let Some(state) = State::load(path, cookie)? else {
        println!(
            "no flowplane backend settings recorded here ({})",
            path.display()
        );
        return Ok(());
    };
    println!("recorded in {}:", path.display());
    for c in &state.changes {
        match c {
            Change::Sysctl {
                key,
                previous,
                value,
            } => println!("  sysctl {key} = {value} (was {previous})"),
            Change::LinkUp { dev } => println!("  link {dev} brought up"),
            Change::Address { addr, prefix, dev } => println!("  address {addr}/{prefix} on {dev}"),
            Change::VxlanDevice { name } => println!("  VXLAN device {name}"),
            Change::Clsact { dev } => println!("  clsact qdisc on {dev}"),
            Change::TcDecap { dev, gre, ipip } => {
                println!("  tc decap on {dev} (gre {gre}, ipip {ipip})");
                if let Ok(i) = fp_ebpf::ifindex(dev) {
                    match decap::installed(i)? {
                        Some(d) => {
                            println!("    program {} id {}", d.name, d.prog_id);
                            if let Some(s) = d.stats {
                                println!(
                                    "    decapsulated: gre {} ipip {}; untouched {}; unsupported {}; errors {}",
                                    s.gre, s.ipip, s.pass, s.unsupported, s.error
                                );
                                println!(
                                    "    second chance: delivered here {}, forwarded to the named backend {}",
                                    s.second_chance_local, s.second_chance_forwarded
                                );
                            }
                        }
                        None => println!("    (not attached any more)"),
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_paths() {
        assert_eq!(
            sysctl_path("net.ipv4.conf.all.arp_ignore"),
            PathBuf::from("/proc/sys/net/ipv4/conf/all/arp_ignore")
        );
        assert_eq!(
            sysctl_path("net.ipv4.conf.eth0.100.rp_filter"),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/rp_filter")
        );
    }

    #[test]
    fn records_once_and_keeps_the_first_previous_value() {
        let mut s = State::default();
        s.record(Change::Sysctl {
            key: "k".into(),
            previous: "1".into(),
            value: "0".into(),
        });
        s.record(Change::Sysctl {
            key: "k".into(),
            previous: "0".into(),
            value: "0".into(),
        });
        assert_eq!(s.changes.len(), 1);
        assert!(matches!(&s.changes[0], Change::Sysctl { previous, .. } if previous == "1"));
        s.record(Change::TcDecap {
            dev: "eth0".into(),
            gre: true,
            ipip: false,
        });
        s.record(Change::TcDecap {
            dev: "eth0".into(),
            gre: true,
            ipip: true,
        });
        assert_eq!(s.changes.len(), 2);
        assert!(matches!(&s.changes[1], Change::TcDecap { ipip: true, .. }));
        let json = serde_json::to_string(&s).unwrap();
        let back: State = serde_json::from_str(&json).unwrap();
        assert_eq!(back.changes, s.changes);
    }

    #[test]
    fn flags_and_macs() {
        assert!(link_is_up("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536"));
        assert!(!link_is_up("1: lo: <LOOPBACK> mtu 65536 state UP"));
        assert_eq!(parse_mac("02:66:70:00:00:01").unwrap()[5], 1);
        assert!(parse_mac("01:00:00:00:00:01").is_err());
        assert!(parse_mac("02:66:70").is_err());
    }
}
