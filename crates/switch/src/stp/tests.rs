//! The spanning tree between simulated bridges: BPDUs carried between ports by a test network,
//! time stepped by hand.

use super::*;

const S: u64 = 1_000_000_000;

fn mac(b: u8, p: u8) -> [u8; 6] {
    [2, 0, 0, 0, b, p]
}

fn bridge(n: u8, priority: u16, ports: usize, force_stp: bool, edge: &[usize]) -> Stp {
    Stp::new(StpConfig {
        priority,
        mac: mac(n, 0),
        max_age: 20,
        hello: 2,
        forward_delay: 4,
        force_stp,
        ports: (0..ports)
            .map(|i| PortConfig {
                edge: edge.contains(&i),
                mac: mac(n, i as u8 + 1),
                ..PortConfig::default()
            })
            .collect(),
    })
}

/// (bridge, port).
type End = (usize, u16);

/// Bridges and the links between their ports; frames sent on a port with no link are lost
/// (a host that ignores BPDUs).
struct Net {
    b: Vec<Stp>,
    links: Vec<(End, End, bool)>,
    now: u64,
    /// Frames sent from this end are lost (a one-way fault).
    deaf: Option<End>,
}

impl Net {
    fn new(b: Vec<Stp>, links: &[(End, End)]) -> Net {
        let mut n = Net {
            b,
            links: links.iter().map(|&(x, y)| (x, y, true)).collect(),
            now: 1,
            deaf: None,
        };
        for i in 0..n.b.len() {
            for p in 0..n.b[i].ports.len() {
                n.b[i].link(p as u16, true, 1);
            }
        }
        n.deliver();
        n
    }

    fn peer(&self, at: End) -> Option<End> {
        self.links.iter().find_map(|&(x, y, up)| match () {
            _ if !up => None,
            _ if x == at => Some(y),
            _ if y == at => Some(x),
            _ => None,
        })
    }

    /// Carry every frame sent until nothing more is sent.
    fn deliver(&mut self) {
        for _ in 0..50 {
            let mut any = false;
            for i in 0..self.b.len() {
                for (port, frame) in self.b[i].take_tx() {
                    any = true;
                    if self.deaf == Some((i, port)) {
                        continue;
                    }
                    if let Some((j, q)) = self.peer((i, port)) {
                        let now = self.now;
                        self.b[j].receive(q, &frame, now);
                    }
                }
            }
            if !any {
                return;
            }
        }
        panic!("BPDUs never stop");
    }

    /// Advance by `ns` in steps of 50 ms.
    fn run(&mut self, ns: u64) {
        let end = self.now + ns;
        while self.now < end {
            self.now += 50_000_000;
            for b in &mut self.b {
                b.tick(self.now);
            }
            self.deliver();
        }
    }

    fn state(&self, b: usize, p: usize) -> (Role, State) {
        let st = self.b[b].status()[p];
        (st.role, st.state)
    }

    /// Take link `i` down (both ends see it).
    fn cut(&mut self, i: usize) {
        let (x, y, _) = self.links[i];
        self.links[i].2 = false;
        let now = self.now;
        self.b[x.0].link(x.1, false, now);
        self.b[y.0].link(y.1, false, now);
        self.deliver();
    }

    /// Links on which both ends forward.
    fn forwarding_links(&self) -> Vec<usize> {
        (0..self.links.len())
            .filter(|&i| {
                let (x, y, up) = self.links[i];
                up && self.state(x.0, x.1 as usize).1 == State::Forwarding
                    && self.state(y.0, y.1 as usize).1 == State::Forwarding
            })
            .collect()
    }
}

#[test]
fn bpdus_round_trip_and_match_the_standard_layout() {
    let v = Vector {
        root: bridge_id(0x8000, [0, 0x11, 0x22, 0x33, 0x44, 0x55]),
        cost: 4,
        bridge: bridge_id(0x8001, [0, 0x11, 0x22, 0x33, 0x44, 0x66]),
        port: 0x8002,
    };
    let times = Times::secs(20, 2, 15);
    let cfg = Bpdu::Config {
        rst: false,
        flags: TC | TCA,
        vector: v,
        times,
    };
    let f = cfg.frame([2, 0, 0, 0, 0, 1]);
    // 802.3 header with length 38 (3 LLC + 35 BPDU), LLC 42 42 03, protocol 0, version 0, type 0.
    assert_eq!(f.len(), 60);
    assert_eq!(f[12..14], [0, 38]);
    assert_eq!(f[14..21], [0x42, 0x42, 0x03, 0, 0, 0, 0]);
    assert_eq!(f[21], 0x81, "flags TC and TCA");
    assert_eq!(f[22..30], [0x80, 0x00, 0, 0x11, 0x22, 0x33, 0x44, 0x55]);
    assert_eq!(f[30..34], [0, 0, 0, 4]);
    assert_eq!(f[42..44], [0x80, 0x02]);
    assert_eq!(f[44..52], [0, 0, 20, 0, 2, 0, 15, 0], "times in 1/256 s");
    assert_eq!(Bpdu::parse(&f), Some(cfg));
    let rst = Bpdu::Config {
        rst: true,
        flags: PROPOSAL | 3 << ROLE_SHIFT,
        vector: v,
        times,
    };
    let f = rst.frame([2, 0, 0, 0, 0, 1]);
    assert_eq!((f[12..14].to_vec(), f[19], f[20]), (vec![0, 39], 2, 2));
    assert_eq!(Bpdu::parse(&f), Some(rst));
    let f = Bpdu::Tcn.frame([2, 0, 0, 0, 0, 1]);
    assert_eq!((f[12..14].to_vec(), f[20]), (vec![0, 7], 0x80));
    assert_eq!(Bpdu::parse(&f), Some(Bpdu::Tcn));
    // Not BPDUs: another group address, truncated, another protocol.
    let mut other = f.clone();
    other[5] = 2;
    assert_eq!(Bpdu::parse(&other), None);
    assert_eq!(Bpdu::parse(&f[..18]), None);
    let mut proto = f;
    proto[17] = 1;
    assert_eq!(Bpdu::parse(&proto), None);
}

/// Two RSTP bridges joined by two links, B with a host on port 2: one link forwards, the other
/// is blocked at B, and losing the forwarding link moves traffic to the other at once.
#[test]
fn two_links_make_one_tree_and_the_alternate_takes_over() {
    let a = bridge(1, 4096, 2, false, &[]);
    let b = bridge(2, 32768, 3, false, &[]);
    let mut n = Net::new(vec![a, b], &[((0, 0), (1, 0)), ((0, 1), (1, 1))]);
    n.run(S);
    // Rapid: A is the root, B's port 0 its root port; the proposal/agreement handshake makes
    // the link forward within a second, B's port 1 is an alternate.
    assert_eq!(n.b[1].root().0, n.b[0].id());
    assert_eq!(n.b[1].root().2, Some(0));
    assert_eq!(n.state(1, 0), (Role::Root, State::Forwarding));
    assert_eq!(n.state(1, 1), (Role::Alternate, State::Discarding));
    assert_eq!(n.state(0, 0), (Role::Designated, State::Forwarding));
    assert_eq!(n.forwarding_links(), vec![0]);
    // The host port hears no BPDU: an edge port after 3 s.
    assert_eq!(n.state(1, 2).1, State::Discarding);
    n.run(3 * S);
    assert_eq!(n.state(1, 2), (Role::Designated, State::Forwarding));
    assert!(n.b[1].status()[2].edge);
    // Steady: still one link.
    n.run(30 * S);
    assert_eq!(n.forwarding_links(), vec![0]);
    let flushes0 = n.b[1].topology_changes;
    // The forwarding link goes down: the alternate is the root port at once.
    n.cut(0);
    assert_eq!(n.state(1, 1), (Role::Root, State::Forwarding));
    assert!(n.b[1].topology_changes > flushes0, "a topology change");
    assert!(
        n.b[1].take_flush().contains(&Flush::AllBut(Some(1))),
        "the other ports' entries flushed"
    );
    // The change travelled: A flushed what it learned on its other ports.
    n.run(S);
    assert!(n.b[0].take_flush().contains(&Flush::AllBut(Some(1))));
    assert_eq!(n.forwarding_links(), vec![1]);
}

/// BPDUs from the root lost in one direction on the forwarding link (a one-way fault): B's
/// information there ages, its port there becomes designated and starts over from discarding,
/// the alternate takes over, and the root disputes B's designated claim — at no moment do both
/// links forward.
#[test]
fn a_one_way_fault_never_makes_a_loop() {
    let a = bridge(1, 4096, 2, false, &[]);
    let b = bridge(2, 32768, 2, false, &[]);
    let mut n = Net::new(vec![a, b], &[((0, 0), (1, 0)), ((0, 1), (1, 1))]);
    n.run(S);
    assert_eq!(n.forwarding_links(), vec![0]);
    n.deaf = Some((0, 0));
    for _ in 0..600 {
        n.run(50_000_000);
        assert!(n.forwarding_links().len() <= 1, "loop at {} ns", n.now);
    }
    assert_eq!(n.state(1, 1), (Role::Root, State::Forwarding));
    assert_ne!(
        n.state(0, 0).1,
        State::Forwarding,
        "the root's side disputes"
    );
    // The fault clears: the tree returns to link 0.
    n.deaf = None;
    for _ in 0..300 {
        n.run(50_000_000);
        assert!(n.forwarding_links().len() <= 1, "loop at {} ns", n.now);
    }
    assert_eq!(n.forwarding_links(), vec![0]);
}

/// Against a bridge that speaks only 802.1D (as a Linux bridge with `stp_state 1`): the ports
/// facing it fall back to 802.1D BPDUs and timers, the tree is the same, and topology changes
/// travel as TCNs acknowledged by the root.
#[test]
fn an_8021d_neighbour_gets_8021d() {
    let a = bridge(1, 32768, 2, false, &[]);
    let linux = bridge(2, 4096, 2, true, &[]);
    let mut n = Net::new(vec![a, linux], &[((0, 0), (1, 0)), ((0, 1), (1, 1))]);
    n.run(S);
    assert!(n.b[0].status().iter().all(|p| p.stp), "fell back to 802.1D");
    assert_eq!(n.state(0, 0), (Role::Root, State::Forwarding));
    assert_eq!(n.state(0, 1), (Role::Alternate, State::Discarding));
    // The 802.1D root's designated ports need two forward delays (4 s each here).
    assert_ne!(n.state(1, 0).1, State::Forwarding);
    n.run(8 * S);
    assert_eq!(n.state(1, 0), (Role::Designated, State::Forwarding));
    assert_eq!(n.forwarding_links(), vec![0]);
    // A topology change at A (its root port started forwarding) went up as a TCN and was
    // acknowledged.
    assert!(!n.b[0].ports[0].tcn_pending);
    assert!(n.b[1].topology_changes >= 1);
    // The root's link to A's root port goes down: A's alternate takes over at once; the root's
    // other port was forwarding already.
    n.cut(0);
    n.run(S);
    assert_eq!(n.state(0, 1), (Role::Root, State::Forwarding));
    assert_eq!(n.forwarding_links(), vec![1]);
}

/// A loop inside one bridge (two of its ports on one segment, through a hub-like link): one is
/// designated, the other a backup.
#[test]
fn two_ports_on_one_segment_make_a_backup() {
    let a = bridge(1, 32768, 3, false, &[]);
    let mut n = Net::new(vec![a], &[((0, 0), (0, 1))]);
    n.run(S);
    assert_eq!(n.state(0, 0), (Role::Designated, State::Forwarding));
    assert_eq!(n.state(0, 1), (Role::Backup, State::Discarding));
    n.run(10 * S);
    assert_eq!(n.state(0, 1), (Role::Backup, State::Discarding));
}
