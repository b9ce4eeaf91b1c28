//! The spanning tree protocol on the switch's ports: RSTP (IEEE 802.1D-2004 clause 17, the
//! former 802.1w) with the fall-back to the original STP (802.1D-1998) on every port whose
//! neighbour speaks only that — as a Linux bridge with `stp_state 1` does — so a flowplane switch,
//! Linux bridges and other RSTP switches agree on one loop-free tree.
//!
//! Sans-I/O: [`Stp`] takes received BPDUs, link changes and the time (`now` in ns), and gives
//! back the BPDUs to send ([`Stp::take_tx`]), the port states the workers must apply
//! ([`Stp::states`]) and the learned entries a topology change flushes ([`Stp::take_flush`]). The
//! switch's control thread drives it: the workers only recognise BPDUs (to 01:80:C2:00:00:00) and
//! hand them over; they forward nothing on a port that is not forwarding, and learn only on ports
//! that are learning or forwarding.
//!
//! What is implemented, in the standard's terms:
//!
//! * **Priority vectors and roles** (port role selection): the bridge with the lowest bridge id
//!   (priority, MAC) is the root; every bridge's root port is the one with the best path (root
//!   path cost, then designated bridge, designated port, own port id); on every segment the port
//!   offering the best vector is designated; the others are alternate (a path to the root through
//!   another bridge) or backup (another port of this bridge on the same segment).
//! * **States**: alternate, backup and disabled ports discard at once. A root port forwards at
//!   once (its predecessor is discarded in the same update). A designated port forwards at once
//!   when it is an edge port (configured, or no BPDU heard for 3 s: a host), at once when the RSTP
//!   neighbour agrees to its proposal (the proposal/agreement handshake, with the *sync* that
//!   puts this bridge's other designated ports back to discarding before it agrees upstream), and
//!   otherwise after two forward delays (discarding, learning, forwarding) — the only way towards
//!   an 802.1D neighbour.
//! * **Versions**: a port sends RST BPDUs until it receives a configuration or TCN BPDU, then
//!   802.1D configuration BPDUs (designated ports) and TCNs (root port) — and back when it hears
//!   RST BPDUs again.
//! * **Topology changes**: a non-edge port that starts forwarding, a TC flag or a TCN flushes the
//!   learned entries of every other port and is passed on (TC flags for two hello times; towards
//!   an 802.1D bridge a TCN on the root port until acknowledged; as the root, the TC flag in
//!   configuration BPDUs for max age + forward delay, as 802.1D asks).
//! * **Timers**: received information expires after three hello times (RSTP) or when its message
//!   age reaches max age (802.1D); a port whose link goes down is disabled at once.
//!
//! Not implemented: MSTP (one tree for all VLANs, as RSTP), the transmit hold count's exact
//! accounting (BPDUs are sent on change and every hello time), point-to-point detection (every
//! link is taken as point-to-point).

use std::fmt;

/// The spanning tree group address.
pub const BPDU_MAC: [u8; 6] = [0x01, 0x80, 0xc2, 0, 0, 0];

/// RSTP's migration delay and the auto-edge delay (ns).
const MIGRATE_NS: u64 = 3_000_000_000;

/// 1/256 s units of BPDU times, in ns.
const UNIT_NS: u64 = 1_000_000_000 / 256;

/// A bridge id: priority (16 bits, a multiple of 4096 in RSTP) above the MAC.
pub type BridgeId = u64;

/// The bridge id of priority `priority` and MAC `mac`.
pub fn bridge_id(priority: u16, mac: [u8; 6]) -> BridgeId {
    let mut b = [0u8; 8];
    b[..2].copy_from_slice(&priority.to_be_bytes());
    b[2..].copy_from_slice(&mac);
    u64::from_be_bytes(b)
}

/// A priority vector: lower is better, compared field by field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Vector {
    /// Root bridge id.
    pub root: BridgeId,
    /// Root path cost.
    pub cost: u32,
    /// Designated bridge id.
    pub bridge: BridgeId,
    /// Designated port id.
    pub port: u16,
}

/// BPDU timer values, in 1/256 s as on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Times {
    /// Age of the information since the root sent it.
    pub message_age: u16,
    /// Information older than this is discarded.
    pub max_age: u16,
    /// Interval between BPDUs.
    pub hello: u16,
    /// Time in each of the listening/learning states.
    pub forward_delay: u16,
}

impl Times {
    /// From seconds.
    pub fn secs(max_age: u16, hello: u16, forward_delay: u16) -> Times {
        Times {
            message_age: 0,
            max_age: max_age * 256,
            hello: hello * 256,
            forward_delay: forward_delay * 256,
        }
    }

    fn ns(units: u16) -> u64 {
        units as u64 * UNIT_NS
    }
}

/// What a BPDU says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bpdu {
    /// An 802.1D configuration BPDU (`rst`: false) or an RST BPDU (`rst`: true).
    Config {
        /// RST BPDU (version 2).
        rst: bool,
        /// The flags byte.
        flags: u8,
        /// The sender's priority vector.
        vector: Vector,
        /// Its times.
        times: Times,
    },
    /// A topology change notification (802.1D).
    Tcn,
}

/// Flag bits.
const TC: u8 = 0x01;
const PROPOSAL: u8 = 0x02;
const LEARNING: u8 = 0x10;
const FORWARDING: u8 = 0x20;
const AGREEMENT: u8 = 0x40;
const TCA: u8 = 0x80;
const ROLE_SHIFT: u8 = 2;

impl Bpdu {
    /// Parse a received frame (Ethernet header included). `None` if it is not a BPDU this
    /// bridge understands (not to the group address, not LLC 42-42-03, protocol id not 0,
    /// truncated).
    pub fn parse(frame: &[u8]) -> Option<Bpdu> {
        if frame.len() < 14 + 3 + 4 || frame[..6] != BPDU_MAC {
            return None;
        }
        let len = u16::from_be_bytes([frame[12], frame[13]]) as usize;
        if len > 1500 || frame[14..17] != [0x42, 0x42, 0x03] {
            return None;
        }
        let b = &frame[17..];
        if b[0] != 0 || b[1] != 0 {
            return None;
        }
        let (version, kind) = (b[2], b[3]);
        match kind {
            0x80 => Some(Bpdu::Tcn),
            0x00 | 0x02 if b.len() >= 35 => {
                let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
                let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8"));
                Some(Bpdu::Config {
                    rst: kind == 0x02 && version >= 2,
                    flags: b[4],
                    vector: Vector {
                        root: u64_at(5),
                        cost: u32::from_be_bytes(b[13..17].try_into().expect("4")),
                        bridge: u64_at(17),
                        port: u16_at(25),
                    },
                    times: Times {
                        message_age: u16_at(27),
                        max_age: u16_at(29),
                        hello: u16_at(31),
                        forward_delay: u16_at(33),
                    },
                })
            }
            _ => None,
        }
    }

    /// The frame carrying this BPDU from a port whose MAC is `src` (padded to 60 bytes).
    pub fn frame(&self, src: [u8; 6]) -> Vec<u8> {
        let mut f = Vec::with_capacity(60);
        f.extend_from_slice(&BPDU_MAC);
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0, 0]); // 802.3 length, set below
        f.extend_from_slice(&[0x42, 0x42, 0x03, 0, 0]);
        match *self {
            Bpdu::Tcn => f.extend_from_slice(&[0, 0x80]),
            Bpdu::Config {
                rst,
                flags,
                vector,
                times,
            } => {
                f.extend_from_slice(if rst { &[2, 0x02] } else { &[0, 0x00] });
                f.push(flags);
                f.extend_from_slice(&vector.root.to_be_bytes());
                f.extend_from_slice(&vector.cost.to_be_bytes());
                f.extend_from_slice(&vector.bridge.to_be_bytes());
                f.extend_from_slice(&vector.port.to_be_bytes());
                for t in [
                    times.message_age,
                    times.max_age,
                    times.hello,
                    times.forward_delay,
                ] {
                    f.extend_from_slice(&t.to_be_bytes());
                }
                if rst {
                    f.push(0); // version 1 length
                }
            }
        }
        let len = (f.len() - 14) as u16;
        f[12..14].copy_from_slice(&len.to_be_bytes());
        f.resize(60, 0);
        f
    }
}

/// Learned entries a topology change removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flush {
    /// Those of every port but this one (`None`: of every port).
    AllBut(Option<u16>),
    /// Those of this port only (it stopped forwarding).
    Only(u16),
}

/// A port's role in the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Towards the root.
    Root,
    /// The best path to the root for its segment.
    Designated,
    /// Another path to the root (discarding).
    Alternate,
    /// A second port of this bridge on a segment (discarding).
    Backup,
    /// Link down or spanning tree off for the port.
    Disabled,
}

/// A port's state: what the workers do with its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Neither learn from nor forward its frames, send nothing to it.
    Discarding,
    /// Learn from its frames, forward none.
    Learning,
    /// Learn and forward.
    Forwarding,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Root => "root",
            Role::Designated => "designated",
            Role::Alternate => "alternate",
            Role::Backup => "backup",
            Role::Disabled => "disabled",
        })
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::Discarding => "discarding",
            State::Learning => "learning",
            State::Forwarding => "forwarding",
        })
    }
}

/// The bridge's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StpConfig {
    /// Bridge priority (0 to 61440 in steps of 4096; lower wins the root election).
    pub priority: u16,
    /// The bridge's MAC (its id with the priority).
    pub mac: [u8; 6],
    /// Times this bridge uses when it is the root (seconds): max age, hello, forward delay.
    pub max_age: u16,
    /// Hello time (s).
    pub hello: u16,
    /// Forward delay (s).
    pub forward_delay: u16,
    /// Speak only 802.1D (never RST BPDUs).
    pub force_stp: bool,
    /// Per port: path cost, port priority (0 to 240 in steps of 16), admin edge.
    pub ports: Vec<PortConfig>,
}

/// A port's spanning tree settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// Path cost (RSTP's default for 1 Gb/s is 20 000).
    pub cost: u32,
    /// Port priority.
    pub priority: u8,
    /// An edge port (a host, never a bridge): forwards at once, no topology change.
    pub edge: bool,
    /// The port's MAC (BPDUs' source).
    pub mac: [u8; 6],
}

impl Default for PortConfig {
    fn default() -> PortConfig {
        PortConfig {
            cost: 20_000,
            priority: 128,
            edge: false,
            mac: [0; 6],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Info {
    Disabled,
    Aged,
    Received {
        vector: Vector,
        times: Times,
        expires: u64,
    },
}

#[derive(Clone, Debug)]
struct Port {
    cfg: PortConfig,
    id: u16,
    up: bool,
    role: Role,
    state: State,
    info: Info,
    /// Sends 802.1D BPDUs (its neighbour spoke 802.1D).
    stp: bool,
    /// Operational edge: admin edge, or no BPDU heard for [`MIGRATE_NS`] since the link came up.
    edge: bool,
    /// When the link came up.
    up_since: u64,
    /// A BPDU was heard since the link came up (the port is not automatically an edge port).
    heard: bool,
    /// Last BPDU received.
    last_rx: u64,
    /// Next state step of the timer path (0: not running).
    step_at: u64,
    proposing: bool,
    agreed: bool,
    proposed: bool,
    /// The neighbour disputes our designated role (its RST BPDU says designated, learning, with
    /// worse information): discard until it stops.
    disputed: bool,
    /// More than one other bridge heard on the port: a shared segment, no rapid handshake.
    shared: bool,
    /// The last other bridge heard, and when.
    last_peer: (BridgeId, u64),
    /// The role changed to designated from another: start again from discarding.
    fresh: bool,
    /// Send TC flags until then.
    tc_until: u64,
    tcn_pending: bool,
    tca_pending: bool,
    /// Next periodic BPDU.
    hello_at: u64,
    /// A BPDU should go out at the next transmit pass.
    send_now: bool,
    /// BPDUs received and sent, topology changes seen.
    rx: u64,
    tx: u64,
}

/// The bridge.
#[derive(Debug)]
pub struct Stp {
    cfg: StpConfig,
    id: BridgeId,
    ports: Vec<Port>,
    root: Vector,
    root_port: Option<usize>,
    root_times: Times,
    own_times: Times,
    tx: Vec<(u16, Vec<u8>)>,
    flush: Vec<Flush>,
    /// Topology changes detected or received.
    pub topology_changes: u64,
    /// Whether the port states changed since [`Stp::take_changed`].
    changed: bool,
}

/// What a port looks like, for status pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortStatus {
    /// Role.
    pub role: Role,
    /// State.
    pub state: State,
    /// Operational edge.
    pub edge: bool,
    /// Speaking 802.1D to its neighbour.
    pub stp: bool,
    /// Path cost.
    pub cost: u32,
    /// BPDUs received and sent.
    pub rx: u64,
    /// BPDUs sent.
    pub tx: u64,
}

impl Stp {
    /// A bridge with `cfg`, its ports down until [`Stp::link`] says otherwise.
    pub fn new(cfg: StpConfig) -> Stp {
        let id = bridge_id(cfg.priority, cfg.mac);
        let own_times = Times::secs(cfg.max_age, cfg.hello, cfg.forward_delay);
        let ports = cfg
            .ports
            .iter()
            .enumerate()
            .map(|(i, pc)| Port {
                cfg: *pc,
                id: (pc.priority as u16 & 0xf0) << 8 | (i as u16 + 1) & 0xfff,
                up: false,
                role: Role::Disabled,
                state: State::Discarding,
                info: Info::Disabled,
                stp: cfg.force_stp,
                edge: pc.edge,
                up_since: 0,
                heard: false,
                last_rx: 0,
                step_at: 0,
                proposing: false,
                agreed: false,
                proposed: false,
                disputed: false,
                shared: false,
                last_peer: (0, 0),
                fresh: false,
                tc_until: 0,
                tcn_pending: false,
                tca_pending: false,
                hello_at: 0,
                send_now: false,
                rx: 0,
                tx: 0,
            })
            .collect();
        Stp {
            root: Vector {
                root: id,
                cost: 0,
                bridge: id,
                port: 0,
            },
            id,
            cfg,
            ports,
            root_port: None,
            root_times: own_times,
            own_times,
            tx: Vec::new(),
            flush: Vec::new(),
            topology_changes: 0,
            changed: true,
        }
    }

    /// This bridge's id.
    pub fn id(&self) -> BridgeId {
        self.id
    }

    /// The root bridge's id, the root path cost, and the root port.
    pub fn root(&self) -> (BridgeId, u32, Option<u16>) {
        (
            self.root.root,
            self.root.cost,
            self.root_port.map(|p| p as u16),
        )
    }

    /// Every port's state, in port order.
    pub fn states(&self) -> Vec<State> {
        self.ports.iter().map(|p| p.state).collect()
    }

    /// Every port's status.
    pub fn status(&self) -> Vec<PortStatus> {
        self.ports
            .iter()
            .map(|p| PortStatus {
                role: p.role,
                state: p.state,
                edge: p.edge,
                stp: p.stp,
                cost: p.cfg.cost,
                rx: p.rx,
                tx: p.tx,
            })
            .collect()
    }

    /// Whether any port's state changed since the last call.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// BPDUs to send: (port, frame).
    pub fn take_tx(&mut self) -> Vec<(u16, Vec<u8>)> {
        std::mem::take(&mut self.tx)
    }

    /// Learned entries to flush.
    pub fn take_flush(&mut self) -> Vec<Flush> {
        std::mem::take(&mut self.flush)
    }

    /// A port's link went up or down.
    pub fn link(&mut self, port: u16, up: bool, now: u64) {
        let Some(p) = self.ports.get_mut(port as usize) else {
            return;
        };
        if p.up == up {
            return;
        }
        p.up = up;
        p.info = if up { Info::Aged } else { Info::Disabled };
        p.stp = self.cfg.force_stp;
        p.edge = p.cfg.edge;
        p.up_since = now;
        p.heard = false;
        p.agreed = false;
        p.proposed = false;
        p.disputed = false;
        p.shared = false;
        p.last_peer = (0, 0);
        p.step_at = 0;
        self.update(now);
    }

    /// A BPDU frame received on `port` at `now`.
    pub fn receive(&mut self, port: u16, frame: &[u8], now: u64) {
        let Some(bpdu) = Bpdu::parse(frame) else {
            return;
        };
        let id = self.id;
        let force_stp = self.cfg.force_stp;
        let Some(p) = self.ports.get_mut(port as usize).filter(|p| p.up) else {
            return;
        };
        p.rx += 1;
        p.last_rx = now;
        // A BPDU: a bridge is there, whatever the configuration said.
        p.heard = true;
        p.edge = false;
        match bpdu {
            Bpdu::Tcn => {
                p.stp = true;
                if p.role == Role::Designated {
                    p.tca_pending = true;
                    p.send_now = true;
                    // The change came from this port's side: flush the others, and tell this
                    // port's 802.1D neighbour too (its root port ages its table on the TC flag).
                    self.topology_change(Some(port as usize), true, now);
                }
            }
            Bpdu::Config {
                rst,
                flags,
                vector,
                times,
            } => {
                p.stp = force_stp || !rst;
                if times.message_age >= times.max_age {
                    return;
                }
                let ours = Vector {
                    root: self.root.root,
                    cost: self.root.cost,
                    bridge: id,
                    port: p.id,
                };
                let same_sender = matches!(p.info, Info::Received { vector: v, .. }
                    if v.bridge == vector.bridge && v.port == vector.port);
                // Two other bridges on one port within three hello times: a shared segment.
                if vector.bridge != id {
                    let (peer, at) = p.last_peer;
                    if peer != 0
                        && peer != vector.bridge
                        && now < at + 3 * Times::ns(times.hello.max(256))
                    {
                        p.shared = true;
                    }
                    p.last_peer = (vector.bridge, now);
                }
                let role_bits = (flags >> ROLE_SHIFT) & 3;
                // A neighbour that claims to be designated and learning with worse information
                // has not heard us: it disputes our role (§17.21.8), and we discard meanwhile.
                p.disputed = rst
                    && p.role == Role::Designated
                    && role_bits == 3
                    && flags & LEARNING != 0
                    && vector > ours
                    && vector.bridge != id;
                let expires = now
                    + if rst {
                        3 * Times::ns(times.hello.max(256))
                    } else {
                        Times::ns(times.max_age.saturating_sub(times.message_age))
                    };
                if vector < ours || same_sender || vector.bridge == id {
                    if let Info::Received { vector: old, .. } = p.info {
                        // New information: an agreement given for the old one is void.
                        if old != vector {
                            p.agreed = false;
                        }
                    }
                    p.info = Info::Received {
                        vector,
                        times,
                        expires,
                    };
                    if rst && flags & PROPOSAL != 0 {
                        p.proposed = true;
                        // An alternate or backup port discards already: it agrees at once.
                        if matches!(p.role, Role::Alternate | Role::Backup) {
                            p.send_now = true;
                        }
                    }
                } else if p.role == Role::Designated {
                    // An inferior designated BPDU: answer with ours.
                    p.send_now = true;
                }
                // An agreement counts only for a proposal we made, on our root, point to point.
                if rst
                    && !p.stp
                    && !p.shared
                    && p.proposing
                    && flags & AGREEMENT != 0
                    && role_bits != 3
                    && p.role == Role::Designated
                    && vector.root == self.root.root
                {
                    p.agreed = true;
                }
                if flags & TCA != 0 {
                    p.tcn_pending = false;
                }
                if flags & TC != 0 && matches!(p.role, Role::Root | Role::Designated) {
                    self.topology_change(Some(port as usize), false, now);
                }
            }
        }
        self.update(now);
    }

    /// Run the timers at `now`: information aging, auto edge, the designated ports' timed
    /// transitions, periodic BPDUs.
    pub fn tick(&mut self, now: u64) {
        let mut dirty = false;
        for p in &mut self.ports {
            if let Info::Received { expires, .. } = p.info {
                if now >= expires {
                    p.info = Info::Aged;
                    dirty = true;
                }
            }
            // Auto edge: an RSTP port proposing to nobody for the migration delay. Not with
            // 802.1D, whose neighbours' root and blocked ports are silent.
            if p.up
                && !p.edge
                && !p.heard
                && !p.stp
                && p.proposing
                && p.role == Role::Designated
                && now >= p.up_since + MIGRATE_NS
            {
                p.edge = true;
                dirty = true;
            }
            if p.step_at != 0 && now >= p.step_at {
                dirty = true;
            }
        }
        if dirty {
            self.update(now);
        } else {
            self.transmit(now);
        }
    }

    /// Recompute roles and states, then send what changed.
    fn update(&mut self, now: u64) {
        self.select_roles();
        self.set_states(now);
        self.transmit(now);
    }

    /// Port role selection (802.1D-2004 §17.21.25, updtRolesTree).
    fn select_roles(&mut self) {
        let own = Vector {
            root: self.id,
            cost: 0,
            bridge: self.id,
            port: 0,
        };
        let mut best = (own, 0u16);
        let mut root_port = None;
        let mut root_times = self.own_times;
        for (i, p) in self.ports.iter().enumerate() {
            if let (true, Info::Received { vector, times, .. }) = (p.up, p.info) {
                if vector.bridge == self.id {
                    continue;
                }
                let path = Vector {
                    cost: vector.cost.saturating_add(p.cfg.cost),
                    ..vector
                };
                if (path, p.id) < best {
                    best = (path, p.id);
                    root_port = Some(i);
                    root_times = Times {
                        message_age: times.message_age.saturating_add(256),
                        ..times
                    };
                }
            }
        }
        self.root = best.0;
        self.root_port = root_port;
        self.root_times = root_times;
        let (id, root) = (self.id, self.root);
        for (i, p) in self.ports.iter_mut().enumerate() {
            let designated = Vector {
                root: root.root,
                cost: root.cost,
                bridge: id,
                port: p.id,
            };
            let role = match (p.up, p.info) {
                (false, _) | (_, Info::Disabled) => Role::Disabled,
                _ if Some(i) == root_port => Role::Root,
                (_, Info::Received { vector, .. }) => {
                    if designated < vector {
                        Role::Designated
                    } else if vector.bridge == id {
                        Role::Backup
                    } else {
                        Role::Alternate
                    }
                }
                _ => Role::Designated,
            };
            if role != p.role {
                // A port that takes the designated role from another starts over from
                // discarding (it may have been forwarding as a root port: the standard's
                // rrWhile/reRoot), and no agreement carries over between roles.
                p.fresh = role == Role::Designated;
                p.agreed = false;
                p.role = role;
                p.send_now = true;
            }
        }
    }

    /// Port states from roles (the port role transitions of §17.29, simplified as the module
    /// doc says).
    fn set_states(&mut self, now: u64) {
        // A proposal on the root port: sync (every other non-edge designated port back to
        // discarding, to propose downstream), then agree.
        let mut agree = false;
        if let Some(r) = self.root_port {
            if self.ports[r].proposed && !self.ports[r].stp {
                self.ports[r].proposed = false;
                agree = true;
                for (i, p) in self.ports.iter_mut().enumerate() {
                    if i != r
                        && p.role == Role::Designated
                        && !p.edge
                        && p.state != State::Discarding
                    {
                        p.state = State::Discarding;
                        p.agreed = false;
                        p.step_at = 0;
                        p.send_now = true;
                        self.changed = true;
                    }
                }
            }
        }
        let fd = Times::ns(self.root_times.forward_delay.max(256));
        let mut tc_from = Vec::new();
        for (i, p) in self.ports.iter_mut().enumerate() {
            let before = p.state;
            if std::mem::take(&mut p.fresh) && !p.edge {
                p.state = State::Discarding;
                p.step_at = 0;
            }
            if p.disputed && p.role == Role::Designated && !p.edge {
                p.state = State::Discarding;
                p.step_at = 0;
                p.agreed = false;
            }
            match p.role {
                Role::Disabled | Role::Alternate | Role::Backup => {
                    p.state = State::Discarding;
                    p.step_at = 0;
                    p.proposing = false;
                }
                Role::Root => {
                    p.state = State::Forwarding;
                    p.step_at = 0;
                    p.proposing = false;
                }
                Role::Designated if p.disputed && !p.edge => {}
                Role::Designated => {
                    if p.edge || p.agreed {
                        p.state = State::Forwarding;
                        p.step_at = 0;
                        p.proposing = false;
                    } else if p.state != State::Forwarding {
                        p.proposing = !p.stp;
                        if p.step_at == 0 {
                            p.step_at = now + fd;
                        } else if now >= p.step_at {
                            p.state = match p.state {
                                State::Discarding => State::Learning,
                                _ => State::Forwarding,
                            };
                            p.step_at = if p.state == State::Forwarding {
                                0
                            } else {
                                now + fd
                            };
                        }
                    }
                }
            }
            if p.state != before {
                self.changed = true;
                p.send_now = true;
                if p.state == State::Forwarding && !p.edge {
                    tc_from.push(i);
                }
                if before == State::Forwarding && p.state == State::Discarding {
                    // Its learned entries point where frames no longer go.
                    self.flush.push(Flush::Only(i as u16));
                }
            }
        }
        if agree {
            if let Some(r) = self.root_port {
                self.ports[r].send_now = true;
                self.ports[r].agreed = true;
            }
        }
        for i in tc_from {
            self.topology_change(Some(i), true, now);
        }
    }

    /// A topology change at `now`, seen on `from` (`detected`: caused by `from` starting to
    /// forward, or notified by its 802.1D neighbour; else received as a TC flag): flush the
    /// other ports' learned entries and tell the rest of the tree — on `from` too when detected
    /// there (§17.31).
    fn topology_change(&mut self, from: Option<usize>, detected: bool, now: u64) {
        self.topology_changes += 1;
        self.flush.push(Flush::AllBut(from.map(|p| p as u16)));
        let hello = Times::ns(self.root_times.hello.max(256));
        // 802.1D bridges age their tables fast while the root's TC flag lasts: max age + forward
        // delay (§17.31 for 802.1D ports).
        let long = Times::ns(self.root_times.max_age) + Times::ns(self.root_times.forward_delay);
        for (i, p) in self.ports.iter_mut().enumerate() {
            if (Some(i) == from && !detected) || p.edge || !p.up {
                continue;
            }
            // A port already signalling a change goes on as it is (newTcWhile starts the timer
            // only when it is not running): a change travels around a loop once, not forever.
            match p.role {
                Role::Root if p.stp && !p.tcn_pending => {
                    p.tcn_pending = true;
                    p.send_now = true;
                }
                Role::Root if p.stp => {}
                Role::Root | Role::Designated if p.tc_until <= now => {
                    p.tc_until = now + if p.stp { long } else { 2 * hello };
                    p.send_now = true;
                }
                _ => {}
            }
        }
    }

    /// Send what is due: BPDUs on changed ports now, on designated ports every hello time,
    /// TCNs on an 802.1D root port until acknowledged.
    fn transmit(&mut self, now: u64) {
        let hello = Times::ns(self.own_times.hello.max(256));
        // The root's times, but the hello time this bridge sends at: receivers age our
        // information after three of those.
        let times = Times {
            hello: self.own_times.hello,
            ..self.root_times
        };
        let (id, root) = (self.id, self.root);
        for (i, p) in self.ports.iter_mut().enumerate() {
            if !p.up {
                continue;
            }
            let due = now >= p.hello_at;
            // What this port says as a designated port would.
            let mine = Vector {
                root: root.root,
                cost: root.cost,
                bridge: id,
                port: p.id,
            };
            let bpdu = match p.role {
                Role::Designated if p.send_now || due => {
                    let mut flags = 0;
                    if p.tc_until > now {
                        flags |= TC;
                    }
                    if p.tca_pending && p.stp {
                        flags |= TCA;
                        p.tca_pending = false;
                    }
                    if !p.stp {
                        flags |= 3 << ROLE_SHIFT;
                        if p.proposing {
                            flags |= PROPOSAL;
                        }
                        flags |= state_flags(p.state);
                    }
                    Some(Bpdu::Config {
                        rst: !p.stp,
                        flags,
                        vector: mine,
                        times,
                    })
                }
                Role::Root if p.stp && p.tcn_pending && (p.send_now || due) => Some(Bpdu::Tcn),
                Role::Root | Role::Alternate | Role::Backup
                    if !p.stp && (p.send_now || (due && p.tc_until > now)) =>
                {
                    // RSTP: an agreement, a TC or a role change goes out on the root port too.
                    let role_bits: u8 = if p.role == Role::Root { 2 } else { 1 };
                    let mut flags = state_flags(p.state) | role_bits << ROLE_SHIFT;
                    // The root port agrees once synced; alternate and backup ports discard and
                    // so agree to any proposal.
                    if (p.agreed && p.role == Role::Root) || (p.proposed && p.role != Role::Root) {
                        flags |= AGREEMENT;
                        if p.role != Role::Root {
                            p.proposed = false;
                        }
                    }
                    if p.tc_until > now {
                        flags |= TC;
                    }
                    Some(Bpdu::Config {
                        rst: true,
                        flags,
                        vector: mine,
                        times,
                    })
                }
                _ => None,
            };
            p.send_now = false;
            if let Some(b) = bpdu {
                self.tx.push((i as u16, b.frame(p.cfg.mac)));
                p.tx += 1;
                p.hello_at = now + hello;
            } else if due {
                p.hello_at = now + hello;
            }
        }
    }
}

fn state_flags(s: State) -> u8 {
    match s {
        State::Discarding => 0,
        State::Learning => LEARNING,
        State::Forwarding => LEARNING | FORWARDING,
    }
}

#[cfg(test)]
mod tests;
