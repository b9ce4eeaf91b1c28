//! Namespaces and the links in them: addresses, routes, sysctls, offloads, bridges, and running
//! Rust code inside a namespace.

use crate::cmd::{self, Cmd, Output};
use crate::{io_err, sys, Error, Inner, Result};
use std::ffi::OsStr;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) fn check_simple_name(what: &str, name: &str, max: usize) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= max
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid {
            what: what.into(),
            why: format!("`{name}`: use 1-{max} letters, digits, `-`, `_` or `.`"),
        })
    }
}

/// Linux interface names: at most 15 bytes (IFNAMSIZ - 1).
pub(crate) fn check_ifname(name: &str) -> Result<()> {
    check_simple_name("interface name", name, 15)
}

/// A network namespace of a [`TestNet`](crate::TestNet). Cheap to clone, `Send + Sync`; its
/// methods fail once the test network has been dropped.
#[derive(Clone)]
pub struct Netns {
    net: Arc<Inner>,
    name: String,
    short: String,
}

impl std::fmt::Debug for Netns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Netns({})", self.name)
    }
}

impl Netns {
    pub(crate) fn new(net: Arc<Inner>, name: String, short: String) -> Netns {
        Netns { net, name, short }
    }

    pub(crate) fn net(&self) -> &Arc<Inner> {
        &self.net
    }

    /// Full name, as `ip netns list` shows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name given to [`TestNet::ns`](crate::TestNet::ns).
    pub fn short_name(&self) -> &str {
        &self.short
    }

    /// `/run/netns/<name>`: what `setns` opens.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// A command to run in this namespace: `ns.cmd(["curl", "-s", url]).run()?`.
    pub fn cmd<I, S>(&self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Cmd::new(self.clone(), args)
    }

    /// Run a shell script (`sh -c SCRIPT`) in this namespace; fails on a non-zero exit.
    pub fn sh(&self, script: &str) -> Result<Output> {
        self.cmd(["sh", "-c", script]).run()
    }

    /// `ip -n <ns> ARGS…`; fails on a non-zero exit.
    pub fn ip(&self, args: &[&str]) -> Result<Output> {
        let mut v = vec!["-n", self.name.as_str()];
        v.extend_from_slice(args);
        cmd::host_ip(&v)
    }

    /// A handle on existing interface `dev` in this namespace (no check that it exists).
    pub fn link(&self, dev: &str) -> Link {
        Link {
            ns: self.clone(),
            name: dev.to_string(),
        }
    }

    /// The loopback interface (up since creation): put a VIP on it with `ns.lo().addr_add(..)`.
    pub fn lo(&self) -> Link {
        self.link("lo")
    }

    /// Create Linux bridge `name` (STP off, forwarding at once) and bring it up. Attach ports
    /// with [`Link::set_master`].
    pub fn bridge(&self, name: &str) -> Result<Link> {
        check_ifname(name)?;
        self.ip(&[
            "link",
            "add",
            name,
            "type",
            "bridge",
            "stp_state",
            "0",
            "forward_delay",
            "0",
        ])?;
        let l = self.link(name);
        l.up()?;
        Ok(l)
    }

    /// `ip route add DST via GW` (`DST` may be `default`).
    pub fn route_add(&self, dst: &str, gw: &str) -> Result<()> {
        self.ip(&["route", "add", dst, "via", gw]).map(|_| ())
    }

    /// `ip route add DST dev DEV` (an on-link route).
    pub fn route_add_dev(&self, dst: &str, dev: &str) -> Result<()> {
        self.ip(&["route", "add", dst, "dev", dev]).map(|_| ())
    }

    /// An ECMP route: `ip route add DST nexthop via GW1 nexthop via GW2 …`. Set
    /// `net.ipv4.fib_multipath_hash_policy` to 1 (with [`Netns::sysctl`]) to spread flows by
    /// 5-tuple rather than by addresses only.
    pub fn route_add_multipath(&self, dst: &str, gateways: &[&str]) -> Result<()> {
        if gateways.is_empty() {
            return Err(Error::Invalid {
                what: "multipath route".into(),
                why: "no next hop".into(),
            });
        }
        let mut args = vec!["route", "add", dst];
        for g in gateways {
            args.extend_from_slice(&["nexthop", "via", g]);
        }
        self.ip(&args).map(|_| ())
    }

    /// `ip route del DST`.
    pub fn route_del(&self, dst: &str) -> Result<()> {
        self.ip(&["route", "del", dst]).map(|_| ())
    }

    /// The routing table (`ip route show`), for assertions and messages.
    pub fn routes(&self) -> Result<String> {
        Ok(self.ip(&["route", "show"])?.stdout)
    }

    /// Set a sysctl of this namespace, e.g. `ns.sysctl("net.ipv4.ip_forward", "1")` (a key
    /// containing `/` is taken as a path under `/proc/sys`, for interface names with dots).
    /// Written from a thread inside the namespace: `/proc/sys/net` shows the namespace of the
    /// thread that opens it.
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        let path = sysctl_path(key);
        let value = value.to_string();
        self.enter(move || std::fs::write(&path, value.as_bytes()))?
            .map_err(io_err(format!("setting sysctl {key} in {}", self.name)))
    }

    /// Read a sysctl of this namespace.
    pub fn sysctl_get(&self, key: &str) -> Result<String> {
        let path = sysctl_path(key);
        self.enter(move || std::fs::read_to_string(&path))?
            .map(|s| s.trim().to_string())
            .map_err(io_err(format!("reading sysctl {key} in {}", self.name)))
    }

    /// Run `f` on a thread that has entered this namespace, and return its result (a panic in `f`
    /// is propagated). Sockets `f` creates belong to this namespace for their whole life.
    pub fn enter<T, F>(&self, f: F) -> Result<T>
    where
        T: Send,
        F: FnOnce() -> T + Send,
    {
        let file = std::fs::File::open(self.path())
            .map_err(io_err(format!("opening {}", self.path().display())))?;
        std::thread::scope(|s| {
            let h = std::thread::Builder::new()
                .name(format!("netns {}", self.short))
                .spawn_scoped(s, move || -> Result<T> {
                    sys::setns_net(&file).map_err(io_err("setns into the namespace"))?;
                    Ok(f())
                })
                .map_err(io_err("spawning a thread"))?;
            match h.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Start a thread inside this namespace running `f` (a dataplane worker, a traffic source).
    /// Returns once the thread is in the namespace.
    pub fn spawn_thread<T, F>(&self, f: F) -> Result<std::thread::JoinHandle<T>>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let file = std::fs::File::open(self.path())
            .map_err(io_err(format!("opening {}", self.path().display())))?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<()>>(1);
        let h = std::thread::Builder::new()
            .name(format!("netns {}", self.short))
            .spawn(move || {
                let r = sys::setns_net(&file);
                let ok = r.is_ok();
                let _ = tx.send(r);
                if !ok {
                    // Reported through the channel; unwind without running `f` (and without the
                    // panic hook's message).
                    std::panic::resume_unwind(Box::new("setns failed"));
                }
                f()
            })
            .map_err(io_err("spawning a thread"))?;
        match rx.recv() {
            Ok(Ok(())) => Ok(h),
            Ok(Err(e)) => {
                let _ = h.join();
                Err(io_err("setns into the namespace")(e))
            }
            Err(_) => {
                let _ = h.join();
                Err(Error::Invalid {
                    what: "thread".into(),
                    why: "died before entering the namespace".into(),
                })
            }
        }
    }

    /// Wait until a TCP connection to `addr` from inside this namespace succeeds.
    pub fn wait_tcp(&self, addr: SocketAddr, timeout: Duration) -> Result<()> {
        let ok = self.enter(move || {
            let deadline = Instant::now() + timeout;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let attempt = left.clamp(Duration::from_millis(1), Duration::from_millis(200));
                if TcpStream::connect_timeout(&addr, attempt).is_ok() {
                    return true;
                }
                if Instant::now() >= deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })?;
        if ok {
            Ok(())
        } else {
            Err(Error::Timeout {
                what: format!("a TCP connection to {addr} from {}", self.name),
                after: timeout,
            })
        }
    }

    /// `ping -c COUNT ADDR` (0.1 s apart, 2 s deadline per reply); fails unless every reply
    /// arrives.
    pub fn ping(&self, addr: &str, count: u32) -> Result<()> {
        let count = count.max(1).to_string();
        self.cmd([
            "ping", "-n", "-q", "-c", &count, "-i", "0.1", "-W", "2", addr,
        ])
        .timeout(Duration::from_secs(30))
        .run()
        .map(|_| ())
    }

    /// Processes running in this namespace (`ip netns pids`).
    pub fn pids(&self) -> Result<Vec<u32>> {
        cmd::ip_netns_pids(&self.name)
    }
}

fn sysctl_path(key: &str) -> PathBuf {
    if key.contains('/') {
        PathBuf::from("/proc/sys").join(key.trim_start_matches('/'))
    } else {
        PathBuf::from("/proc/sys").join(key.replace('.', "/"))
    }
}

/// An interface in a namespace.
#[derive(Clone)]
pub struct Link {
    ns: Netns,
    name: String,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Link({} in {})", self.name, self.ns.name)
    }
}

/// Interface counters (`ip -s link`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Receive drops (for a veth: frames its peer could not deliver).
    pub rx_dropped: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Transmit drops.
    pub tx_dropped: u64,
    /// Transmit errors.
    pub tx_errors: u64,
}

impl Link {
    /// The namespace.
    pub fn ns(&self) -> &Netns {
        &self.ns
    }

    /// Interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn set(&self, args: &[&str]) -> Result<()> {
        let mut v = vec!["link", "set", "dev", self.name.as_str()];
        v.extend_from_slice(args);
        self.ns.ip(&v).map(|_| ())
    }

    /// Bring it up.
    pub fn up(&self) -> Result<()> {
        self.set(&["up"])
    }

    /// Take it down.
    pub fn down(&self) -> Result<()> {
        self.set(&["down"])
    }

    /// Add an address with prefix length, e.g. `"10.0.0.1/24"` or `"fd00::1/64"`.
    pub fn addr_add(&self, cidr: &str) -> Result<()> {
        self.ns
            .ip(&["addr", "add", cidr, "dev", &self.name])
            .map(|_| ())
    }

    /// Set the MAC address (`"02:00:00:00:00:01"`).
    pub fn set_mac(&self, mac: &str) -> Result<()> {
        self.set(&["address", mac])
    }

    /// Set the MTU.
    pub fn set_mtu(&self, mtu: u32) -> Result<()> {
        self.set(&["mtu", &mtu.to_string()])
    }

    /// Make it a port of `bridge` (an interface in the same namespace).
    pub fn set_master(&self, bridge: &Link) -> Result<()> {
        self.set(&["master", &bridge.name])
    }

    /// Turn promiscuous mode on or off.
    pub fn set_promisc(&self, on: bool) -> Result<()> {
        self.set(&["promisc", if on { "on" } else { "off" }])
    }

    fn json(&self, stats: bool) -> Result<serde_json::Value> {
        let mut args = vec!["-j"];
        if stats {
            args.push("-s");
        }
        args.extend_from_slice(&["link", "show", "dev", &self.name]);
        let out = self.ns.ip(&args)?;
        let v: serde_json::Value =
            serde_json::from_str(&out.stdout).map_err(|e| Error::Invalid {
                what: "`ip -j link` output".into(),
                why: e.to_string(),
            })?;
        v.get(0).cloned().ok_or_else(|| Error::Invalid {
            what: "`ip -j link` output".into(),
            why: format!("no entry for {}", self.name),
        })
    }

    /// Interface index (within its namespace).
    pub fn ifindex(&self) -> Result<u32> {
        self.json(false)?
            .get("ifindex")
            .and_then(|v| v.as_u64())
            .map(|v| v as u32)
            .ok_or_else(|| Error::Invalid {
                what: "ifindex".into(),
                why: format!("not reported for {}", self.name),
            })
    }

    /// MAC address as text (`02:…`).
    pub fn mac_string(&self) -> Result<String> {
        self.json(false)?
            .get("address")
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .ok_or_else(|| Error::Invalid {
                what: "MAC address".into(),
                why: format!("not reported for {}", self.name),
            })
    }

    /// MAC address as bytes.
    pub fn mac(&self) -> Result<[u8; 6]> {
        let s = self.mac_string()?;
        parse_mac(&s).ok_or_else(|| Error::Invalid {
            what: "MAC address".into(),
            why: s,
        })
    }

    /// Counters.
    pub fn stats(&self) -> Result<LinkStats> {
        let v = self.json(true)?;
        let s = v.get("stats64").or_else(|| v.get("stats"));
        let get = |dir: &str, k: &str| {
            s.and_then(|s| s.get(dir))
                .and_then(|d| d.get(k))
                .and_then(|x| x.as_u64())
                .unwrap_or(0)
        };
        Ok(LinkStats {
            rx_packets: get("rx", "packets"),
            rx_bytes: get("rx", "bytes"),
            rx_dropped: get("rx", "dropped"),
            rx_errors: get("rx", "errors"),
            tx_packets: get("tx", "packets"),
            tx_bytes: get("tx", "bytes"),
            tx_dropped: get("tx", "dropped"),
            tx_errors: get("tx", "errors"),
        })
    }

    /// `ethtool -K DEV FEATURE on|off …`, e.g. `&[("tx", "off"), ("gro", "off")]`.
    pub fn ethtool_k(&self, settings: &[(&str, &str)]) -> Result<()> {
        let mut args = vec!["ethtool", "-K", self.name.as_str()];
        for (k, v) in settings {
            args.push(k);
            args.push(v);
        }
        self.ns.cmd(args).run().map(|_| ())
    }

    /// `ethtool -K DEV tx off`: the kernel computes TCP/UDP checksums in software before the
    /// frame leaves, so a user-space dataplane on the far end sees complete checksums
    /// (docs/platform.md, "Partial checksums on veth"). This also turns TSO off, so the kernel sends MTU-sized frames.
    pub fn tx_checksum_off(&self) -> Result<()> {
        self.ethtool_k(&[("tx", "off")])
    }

    /// Whether `ethtool -k` reports `feature` (e.g. `tx-checksumming`) as on.
    pub fn feature_on(&self, feature: &str) -> Result<bool> {
        let out = self.ns.cmd(["ethtool", "-k", &self.name]).run()?;
        let prefix = format!("{feature}:");
        out.stdout
            .lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(&prefix))
            .map(|rest| rest.trim_start().starts_with("on"))
            .ok_or_else(|| Error::Invalid {
                what: "ethtool feature".into(),
                why: format!("`{feature}` not listed for {}", self.name),
            })
    }
}

pub(crate) fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut m {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths() {
        assert!(check_ifname("eth0").is_ok());
        assert!(check_ifname("a-very-long-name").is_err()); // 16 bytes
        assert!(check_ifname("bad/name").is_err());
        assert!(check_ifname("").is_err());
        assert_eq!(
            sysctl_path("net.ipv4.ip_forward"),
            PathBuf::from("/proc/sys/net/ipv4/ip_forward")
        );
        assert_eq!(
            sysctl_path("net/ipv4/conf/eth0.5/rp_filter"),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.5/rp_filter")
        );
        assert_eq!(parse_mac("02:00:0a:ff:00:01"), Some([2, 0, 10, 255, 0, 1]));
        assert_eq!(parse_mac("02:00:0a:ff:00"), None);
    }
}
