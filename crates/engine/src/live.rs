//! Live interfaces: the port drivers that open Linux interfaces for a set of workers, behind one
//! table ([`DRIVERS`]), so applications name a driver (`--driver af_xdp`) and never match on one.
//!
//! An application describes what it needs in a [`LiveSpec`] — interfaces, workers, and what to
//! capture: the frames addressed to some destinations (a load balancer's VIPs; the rest of the
//! interface's traffic stays with the kernel where the driver can filter) or every frame (a switch
//! port, promiscuous) — and gets [`Opened`] back: `ports[w][i]` is worker `w`'s socket of interface
//! `i` (the kernel or the NIC spreads flows over the workers' sockets: AF_PACKET fan-out by flow
//! hash, AF_XDP one receive queue per worker), plus a [`LiveControl`] to change the destinations
//! while running and that undoes the interface changes (promiscuous mode, AF_PACKET's tc program
//! that keeps destination frames from the host's stack) when dropped.
//!
//! Adding a driver is one file that implements [`PortDriver`] (opening its sockets, each a
//! [`Port`]) and one line in [`DRIVERS`].
//!
//! Sockets belong to the network namespace of the thread that opens them (run the process with
//! `ip netns exec`, or open from a thread that entered the namespace); the ports may then be moved
//! to any thread.

use crate::port::Port;
use std::net::IpAddr;

/// What an application wants to receive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Capture {
    /// Frames to these destination addresses (a load balancer's VIPs). Drivers that filter in the
    /// kernel ([`PortDriver::filters_destinations`]: AF_XDP) leave everything else to the host's
    /// stack and keep these frames from it; the others deliver every frame and the application
    /// filters. AF_PACKET, which cannot take frames away from the stack, still keeps the stack
    /// from answering or forwarding frames to these destinations: a tc ingress program drops
    /// them after its sockets have received them.
    Destinations(Vec<IpAddr>),
    /// Every frame, for any MAC address (a switch port): the interfaces go promiscuous.
    All,
}

/// Which interfaces to open for how many workers.
#[derive(Clone, Debug)]
pub struct LiveSpec {
    /// The interfaces; port index = position.
    pub interfaces: Vec<String>,
    /// Workers wanted; a driver may open fewer (AF_XDP: at most one per receive queue of the
    /// interface with the fewest).
    pub workers: usize,
    /// What to receive.
    pub capture: Capture,
    /// For drivers that attach an XDP program: where it runs.
    pub xdp_mode: crate::afxdp::ModeChoice,
    /// Receive ring memory per socket, for drivers with a kernel ring (AF_PACKET); `None`: the
    /// driver's default.
    pub ring_bytes: Option<usize>,
    /// Open the ports holding: they receive nothing until [`LiveControl::release`] (only for
    /// drivers that [hold](PortDriver::holds); a process taking over from another that still
    /// forwards on the same interfaces).
    pub hold: bool,
}

impl LiveSpec {
    /// `workers` workers on `interfaces`, capturing `capture`, with the drivers' defaults.
    pub fn new(interfaces: &[&str], workers: usize, capture: Capture) -> LiveSpec {
        LiveSpec {
            interfaces: interfaces.iter().map(|s| s.to_string()).collect(),
            workers,
            capture,
            xdp_mode: crate::afxdp::ModeChoice::Auto,
            ring_bytes: None,
            hold: false,
        }
    }
}

/// Why interfaces could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// A socket could not be opened.
    #[error("interface {interface}: {message}")]
    Open {
        /// The interface.
        interface: String,
        /// What failed.
        message: String,
    },
    /// The request itself is not possible.
    #[error("{0}")]
    Spec(String),
    /// No port driver has this name.
    #[error("{name:?}: use one of {known}")]
    UnknownDriver {
        /// The name asked for.
        name: String,
        /// The drivers there are, comma-separated.
        known: String,
    },
    /// Reading or changing an interface's settings failed.
    #[error("interface {interface}: {what}: {source}")]
    Interface {
        /// The interface.
        interface: String,
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
    /// An interface setting read from sysfs is not what it should be.
    #[error("{path}: {value:?} is not an MTU")]
    BadMtu {
        /// The file.
        path: String,
        /// What it held.
        value: String,
    },
    /// A driver's destination map could not be updated.
    #[error("updating the {map}: {source}")]
    Destinations {
        /// Which map (the XDP program's, the tc shield's).
        map: &'static str,
        /// Why.
        source: fp_ebpf::Error,
    },
    /// A port opened holding could not be released.
    #[error("releasing a port opened holding: {source}")]
    Release {
        /// Why.
        source: std::io::Error,
    },
}

/// Sets an opened driver's destinations (for [`LiveControl::set_destinations`]).
pub type DestinationSetter = Box<dyn Fn(&[IpAddr]) -> Result<(), LiveError> + Send + Sync>;

/// Lets a port opened holding ([`LiveSpec::hold`]) receive.
pub type Releaser = Box<dyn Fn() -> std::io::Result<()> + Send + Sync>;

/// Control of opened interfaces while they run; dropping it undoes what opening changed on the
/// interfaces (promiscuous mode a driver turned on, programs it attached).
#[derive(Default)]
pub struct LiveControl {
    pub(crate) setters: Vec<DestinationSetter>,
    pub(crate) promisc_set: Vec<String>,
    /// Attachments released on drop (AF_PACKET's tc VIP shields).
    pub(crate) held: Vec<Box<dyn std::any::Any + Send + Sync>>,
    /// What lets ports opened holding receive.
    pub(crate) releases: Vec<Releaser>,
}

impl LiveControl {
    /// A control with these destination setters and interfaces to take out of promiscuous mode
    /// on drop (for driver implementations).
    pub fn new(setters: Vec<DestinationSetter>, promisc_set: Vec<String>) -> LiveControl {
        LiveControl {
            setters,
            promisc_set,
            held: Vec::new(),
            releases: Vec::new(),
        }
    }

    /// Let ports opened holding ([`LiveSpec::hold`]) receive from now on; a no-op for ports that
    /// do not hold.
    pub fn release(&mut self) -> Result<(), LiveError> {
        // Once released, the duplicate descriptors go: the sockets close with their ports.
        for r in std::mem::take(&mut self.releases) {
            r().map_err(|source| LiveError::Release { source })?;
        }
        Ok(())
    }

    /// Add what this control would undo on the interfaces (promiscuous mode) to `to`: the
    /// process that adopts the ports undoes it instead.
    pub fn hand_off(&self, to: &mut Handoff) {
        for ifname in &self.promisc_set {
            to.bytes.push(b'P');
            put_str(&mut to.bytes, ifname);
        }
    }

    /// The handoff went through: leave the interfaces as they are when dropped.
    pub fn handed_over(&mut self) {
        self.promisc_set.clear();
    }

    /// Keep `resource` (an attachment that undoes itself when dropped, such as a tc program's
    /// link) until this control is dropped (for driver implementations).
    pub fn keep(&mut self, resource: impl std::any::Any + Send + Sync) {
        self.held.push(Box::new(resource));
    }

    /// Change the destinations captured ([`Capture::Destinations`]): the AF_XDP program's VIP
    /// map, the AF_PACKET tc shield's map (new destinations are added before old ones are
    /// removed); a no-op for drivers with neither.
    pub fn set_destinations(&self, dsts: &[IpAddr]) -> Result<(), LiveError> {
        for s in &self.setters {
            s(dsts)?;
        }
        Ok(())
    }
}

impl Drop for LiveControl {
    fn drop(&mut self) {
        // The setters may share what `held` holds: drop both, so the attachments go now.
        self.setters.clear();
        self.held.clear();
        for ifname in &self.promisc_set {
            if let Err(e) = set_promisc(ifname, false) {
                eprintln!("flowplane: could not turn promiscuous mode off on {ifname}: {e}");
            }
        }
    }
}

/// Opened interfaces.
pub struct Opened {
    /// `ports[w][i]`: worker `w`'s socket of interface `i`.
    pub ports: Vec<Vec<Box<dyn Port>>>,
    /// Destinations and cleanup; keep it until the workers have stopped.
    pub control: LiveControl,
    /// A line describing what was opened (for the log and status pages).
    pub description: String,
}

/// A kind of socket that opens Linux interfaces.
pub trait PortDriver: Send + Sync {
    /// The name users give (`--driver NAME`).
    fn name(&self) -> &'static str;
    /// Other accepted spellings.
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }
    /// Whether the driver delivers only [`Capture::Destinations`] (filtering in the kernel), so
    /// an application cannot serve a destination it cannot list (a prefix). A driver that
    /// delivers every frame (false) may still shield the host's stack from the destinations
    /// (AF_PACKET does); that does not change what the application receives.
    fn filters_destinations(&self) -> bool;
    /// Open `spec.interfaces` for `spec.workers` workers (or fewer).
    fn open(&self, spec: &LiveSpec) -> Result<Opened, LiveError>;
    /// Whether ports can be opened holding ([`LiveSpec::hold`]) while another process still
    /// receives on the same interfaces (AF_PACKET: yes; AF_XDP: no, a queue binds one socket).
    fn holds(&self) -> bool {
        false
    }
    /// How many workers [`open`](Self::open) would open for `spec`, without opening anything.
    fn workers(&self, spec: &LiveSpec) -> Result<usize, LiveError> {
        Ok(spec.workers.max(1))
    }
    /// Whether the ports of a running process can be handed to a successor ([`Port::hand_off`],
    /// then [`adopt`](Self::adopt)) instead of being closed and opened again.
    fn hands_off(&self) -> bool {
        false
    }
    /// Go on with the ports another process handed off, as [`open`](Self::open) would have
    /// opened them for `spec` (the handoff names each port's interface).
    fn adopt(&self, spec: &LiveSpec, handoff: Handoff) -> Result<Opened, LiveError> {
        let _ = handoff;
        Err(LiveError::Open {
            interface: spec.interfaces.join(","),
            message: format!("the {} driver cannot take ports over", self.name()),
        })
    }
}

/// Ports handed from one process to another ([`Port::hand_off`], [`PortDriver::adopt`]): the
/// driver's description of them and the descriptors of their kernel objects, which the
/// processes pass with `SCM_RIGHTS`.
#[derive(Debug, Default)]
pub struct Handoff {
    /// The driver's description, in its own format.
    pub bytes: Vec<u8>,
    /// The descriptors, in the order the description names them.
    pub fds: Vec<std::os::fd::OwnedFd>,
    /// Keys of objects shared between ports and handed off once (an interface's XDP program).
    pub(crate) shared: Vec<String>,
}

impl Handoff {
    /// What a process received: `bytes` and `fds` as the other one sent them.
    pub fn received(bytes: Vec<u8>, fds: Vec<std::os::fd::OwnedFd>) -> Handoff {
        Handoff {
            bytes,
            fds,
            shared: Vec::new(),
        }
    }
}

/// A port driver chosen by name (`--driver af_xdp`): what command-line options hold.
#[derive(Clone, Copy)]
pub struct Driver(pub &'static dyn PortDriver);

impl std::ops::Deref for Driver {
    type Target = dyn PortDriver;
    fn deref(&self) -> &(dyn PortDriver + 'static) {
        self.0
    }
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name())
    }
}

impl std::fmt::Display for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name())
    }
}

impl std::str::FromStr for Driver {
    type Err = LiveError;
    fn from_str(s: &str) -> Result<Driver, LiveError> {
        driver(s).map(Driver)
    }
}

/// Every port driver, by name.
pub static DRIVERS: &[&dyn PortDriver] =
    &[&crate::afpacket::AfPacketDriver, &crate::afxdp::AfXdpDriver];

/// The driver called `name` (or one of its aliases).
pub fn driver(name: &str) -> Result<&'static dyn PortDriver, LiveError> {
    DRIVERS
        .iter()
        .copied()
        .find(|d| d.name() == name || d.aliases().contains(&name))
        .ok_or_else(|| LiveError::UnknownDriver {
            name: name.to_string(),
            known: DRIVERS
                .iter()
                .map(|d| d.name())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

fn interface_err(ifname: &str, what: &'static str) -> impl FnOnce(std::io::Error) -> LiveError {
    let interface = ifname.to_string();
    move |source| LiveError::Interface {
        interface,
        what,
        source,
    }
}

/// Whether `ifname` (of the calling thread's network namespace) is in promiscuous mode.
pub fn is_promisc(ifname: &str) -> Result<bool, LiveError> {
    let flags =
        crate::sys::interface_flags(ifname).map_err(interface_err(ifname, "reading its flags"))?;
    Ok(flags & libc::IFF_PROMISC as u32 != 0)
}

/// Turn promiscuous mode on or off (as `ip link set dev IF promisc on|off`), in the calling
/// thread's network namespace.
pub fn set_promisc(ifname: &str, on: bool) -> Result<(), LiveError> {
    let what = if on {
        "turning promiscuous mode on"
    } else {
        "turning promiscuous mode off"
    };
    crate::sys::set_interface_flag(ifname, libc::IFF_PROMISC as u32, on)
        .map_err(interface_err(ifname, what))
}

/// The MAC address of interface `ifname` (of the calling thread's network namespace).
pub fn interface_mac(ifname: &str) -> Result<fp_wire::ethernet::MacAddr, LiveError> {
    crate::sys::interface_hwaddr(ifname)
        .map(fp_wire::ethernet::MacAddr)
        .map_err(interface_err(ifname, "reading its MAC address"))
}

/// The interface's MTU (the largest IP packet it sends), from sysfs.
pub fn interface_mtu(ifname: &str) -> Result<u16, LiveError> {
    let path = format!("/sys/class/net/{ifname}/mtu");
    let text = std::fs::read_to_string(&path).map_err(interface_err(ifname, "reading its MTU"))?;
    let mtu: u32 = text.trim().parse().map_err(|_| LiveError::BadMtu {
        path,
        value: text.trim().to_string(),
    })?;
    Ok(mtu.min(u16::MAX as u32) as u16)
}

/// Append `s` with a little-endian u16 length (handoff descriptions).
pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Reads a handoff description ([`Handoff::bytes`]) and hands out its descriptors in order.
pub(crate) struct HandoffReader {
    bytes: Vec<u8>,
    at: usize,
    fds: std::vec::IntoIter<std::os::fd::OwnedFd>,
}

impl HandoffReader {
    pub(crate) fn new(h: Handoff) -> HandoffReader {
        HandoffReader {
            bytes: h.bytes,
            at: 0,
            fds: h.fds.into_iter(),
        }
    }

    fn take(&mut self, n: usize) -> std::io::Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a handoff description cut short",
            ));
        };
        let b = &self.bytes[self.at..end];
        self.at = end;
        Ok(b)
    }

    /// The next tag, `None` at the end.
    pub(crate) fn tag(&mut self) -> Option<u8> {
        let t = self.bytes.get(self.at).copied();
        self.at += t.is_some() as usize;
        t
    }

    pub(crate) fn u8(&mut self) -> std::io::Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> std::io::Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    pub(crate) fn u64(&mut self) -> std::io::Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    pub(crate) fn str(&mut self) -> std::io::Result<String> {
        let n = u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")) as usize;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    /// `n` u64s after their u32 count.
    pub(crate) fn u64s(&mut self) -> std::io::Result<Vec<u64>> {
        let n = self.u32()? as usize;
        let b = self.take(n.saturating_mul(8))?;
        Ok(b.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }

    /// The next descriptor.
    pub(crate) fn fd(&mut self) -> std::io::Result<std::os::fd::OwnedFd> {
        self.fds.next().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a handoff with fewer descriptors than its description names",
            )
        })
    }
}

/// Append `v` and its u32 count (handoff descriptions).
pub(crate) fn put_u64s(out: &mut Vec<u8>, v: &[u64]) {
    out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drivers_are_found_by_name_and_alias() {
        assert_eq!(driver("af_packet").unwrap().name(), "af_packet");
        assert_eq!(driver("xdp").unwrap().name(), "af_xdp");
        assert!(driver("af_xdp").unwrap().filters_destinations());
        assert!(!driver("afpacket").unwrap().filters_destinations());
        let e = driver("dpdk").err().unwrap().to_string();
        assert!(e.contains("af_packet, af_xdp"), "{e}");
    }
}
