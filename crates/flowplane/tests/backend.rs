//! End-to-end test of `flowplane backend` in network namespaces.
//!
//! Topology: a "balancer" namespace (`l0`, 10.88.0.1 / fd00:88::1) and a "backend" namespace
//! (`b0`, 10.88.0.2 / fd00:88::2, default routes via the balancer) joined by a veth pair. The
//! backend is prepared by the built `flowplane backend` binary; a TCP listener runs on the VIPs in
//! the backend namespace. The balancer sends TCP SYNs from a client address (192.0.2.77 /
//! 2001:db8:c::77) to the VIP, encapsulated by fp-wire's `Encap` in GRE, IPIP or VXLAN, through an
//! AF_PACKET socket; the backend's kernel answers with a SYN-ACK straight to the client address
//! (direct server return), which the balancer namespace sees on its interface.
//!
//! Each test creates its own uniquely named namespaces and removes them on every exit path (a Drop
//! guard). Without root or network namespaces the tests fail and say why.

use fp_pipeline::craft::{self, Endpoints};
use fp_wire::encap::{Encap, OuterIp, OuterL2, Tunnel};
use fp_wire::ethernet::MacAddr;
use fp_wire::ip::IpProtocol;
use fp_wire::summary::PacketSummary;
use fp_wire::tcp::{TcpFlags, TcpPacket};
use std::net::{IpAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const LB_MAC: MacAddr = MacAddr([0x02, 0x0b, 0, 0, 0, 1]);
const BE_MAC: MacAddr = MacAddr([0x02, 0x0b, 0, 0, 0, 2]);
const VIP4: &str = "203.0.113.10";
const VIP6: &str = "2001:db8::10";
const CLIENT4: &str = "192.0.2.77";
const CLIENT6: &str = "2001:db8:c::77";
const PORT: u16 = 8080;
const VXLAN_MAC: MacAddr = MacAddr([0x02, 0x66, 0x70, 0, 0, 9]);

fn sh(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn mac_text(m: MacAddr) -> String {
    m.0.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The two namespaces, removed on drop (with the backend's state file, if a test failed before
/// `--remove`).
struct Net {
    lb: String,
    be: String,
    state_file: Option<String>,
}

impl Net {
    fn new() -> Net {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            panic!("backend end-to-end test cannot run: not root (euid {euid}); it needs network namespaces");
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let mut net = Net {
            lb: format!("fpbe-{pid}-{n}-lb"),
            be: format!("fpbe-{pid}-{n}-be"),
            state_file: None,
        };
        let (ml, mb) = (mac_text(LB_MAC), mac_text(BE_MAC));
        let (lb, be) = (net.lb.clone(), net.be.clone());
        let setup: Vec<Vec<&str>> = vec![
            vec!["ip", "netns", "add", &lb],
            vec!["ip", "netns", "add", &be],
            vec![
                "ip", "link", "add", "l0", "netns", &lb, "address", &ml, "type", "veth", "peer",
                "name", "b0", "netns", &be, "address", &mb,
            ],
            vec!["ip", "-n", &lb, "addr", "add", "10.88.0.1/24", "dev", "l0"],
            vec!["ip", "-n", &be, "addr", "add", "10.88.0.2/24", "dev", "b0"],
            vec![
                "ip",
                "-n",
                &lb,
                "addr",
                "add",
                "fd00:88::1/64",
                "dev",
                "l0",
                "nodad",
            ],
            vec![
                "ip",
                "-n",
                &be,
                "addr",
                "add",
                "fd00:88::2/64",
                "dev",
                "b0",
                "nodad",
            ],
            vec!["ip", "-n", &lb, "link", "set", "l0", "up"],
            vec!["ip", "-n", &be, "link", "set", "b0", "up"],
            vec![
                "ip",
                "-n",
                &be,
                "route",
                "add",
                "default",
                "via",
                "10.88.0.1",
            ],
            vec![
                "ip",
                "-n",
                &be,
                "-6",
                "route",
                "add",
                "default",
                "via",
                "fd00:88::1",
            ],
            // docs/platform.md, "Partial checksums on veth": without this the backend's replies cross the veth with only
            // the pseudo-header checksum (a NIC would complete it), and the test checks them.
            vec![
                "ip", "netns", "exec", &be, "ethtool", "-K", "b0", "tx", "off",
            ],
        ];
        for cmd in &setup {
            if let Err(e) = sh(cmd) {
                panic!("backend end-to-end test cannot run: namespace setup failed: {e}");
            }
        }
        // Wait until both families work between the namespaces: a fresh interface answers IPv6
        // neighbour solicitations only after it has joined the solicited-node groups (up to about
        // a second after carrier), and the backend's replies need that.
        let ready = |fam: &str, addr: &str| {
            (0..50).any(|_| {
                let ok = sh(&[
                    "ip", "netns", "exec", &be, "ping", fam, "-c", "1", "-W", "1", addr,
                ])
                .is_ok();
                if !ok {
                    std::thread::sleep(Duration::from_millis(100));
                }
                ok
            })
        };
        if !ready("-4", "10.88.0.1") || !ready("-6", "fd00:88::1") {
            panic!("backend end-to-end test cannot run: the veth between the namespaces does not pass traffic");
        }
        let cookie = net.run_in(&be, || fp_ebpf::sys::netns_cookie().expect("netns cookie"));
        net.state_file = Some(format!("/run/flowplane/backend-{cookie}.json"));
        net
    }

    /// Run `f` on a thread inside namespace `ns`.
    fn run_in<T: Send>(&self, ns: &str, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{ns}");
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                // SAFETY: setns on a namespace descriptor we hold open; only this thread moves.
                let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(r, 0, "setns {ns}: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .expect("namespace thread")
        })
    }

    /// `flowplane backend ARGS` in the backend namespace.
    fn backend(&self, args: &[&str]) -> Output {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.be,
                env!("CARGO_BIN_EXE_flowplane"),
                "backend",
            ])
            .args(args)
            .env("RUST_BACKTRACE", "0")
            .output()
            .expect("running flowplane");
        eprintln!(
            "$ flowplane backend {}\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn backend_ok(&self, args: &[&str]) -> String {
        let out = self.backend(args);
        assert!(out.status.success(), "flowplane backend {args:?} failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn be_sysctl(&self, key: &str) -> String {
        sh(&["ip", "netns", "exec", &self.be, "sysctl", "-n", key])
            .unwrap()
            .trim()
            .to_string()
    }

    fn be(&self, args: &[&str]) -> String {
        let mut v = vec!["ip", "netns", "exec", &self.be];
        v.extend_from_slice(args);
        sh(&v).unwrap()
    }

    /// TCP InSegs and InCsumErrors of the backend namespace.
    fn be_tcp_counters(&self) -> (u64, u64) {
        let snmp = self.run_in(&self.be, || {
            std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap()
        });
        let mut lines = snmp.lines().filter(|l| l.starts_with("Tcp:"));
        let names: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        let vals: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        let get = |n: &str| -> u64 {
            let i = names.iter().position(|x| *x == n).unwrap();
            vals[i].parse().unwrap()
        };
        (get("InSegs"), get("InCsumErrors"))
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.lb]);
        let _ = sh(&["ip", "netns", "del", &self.be]);
        if let Some(f) = &self.state_file {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// An AF_PACKET socket on `l0` in the balancer namespace.
struct Raw {
    fd: OwnedFd,
    ifindex: i32,
}

impl Raw {
    fn open(net: &Net) -> Raw {
        net.run_in(&net.lb, || {
            let ifindex = fp_ebpf::ifindex("l0").unwrap() as i32;
            let proto = (libc::ETH_P_ALL as u16).to_be();
            // SAFETY: plain socket creation; checked.
            let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto as i32) };
            assert!(raw >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
            // SAFETY: a fresh descriptor nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: sockaddr_ll is plain data.
            let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            sa.sll_family = libc::AF_PACKET as u16;
            sa.sll_protocol = proto;
            sa.sll_ifindex = ifindex;
            // SAFETY: the kernel reads one sockaddr_ll.
            let r = unsafe {
                libc::bind(
                    raw,
                    (&sa as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
            let tv = libc::timeval {
                tv_sec: 0,
                tv_usec: 100_000,
            };
            // SAFETY: the kernel reads one timeval.
            unsafe {
                libc::setsockopt(
                    raw,
                    libc::SOL_SOCKET,
                    libc::SO_RCVTIMEO,
                    (&tv as *const libc::timeval).cast(),
                    std::mem::size_of::<libc::timeval>() as u32,
                )
            };
            Raw { fd, ifindex }
        })
    }

    fn send(&self, frame: &[u8]) {
        // SAFETY: sockaddr_ll is plain data.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_ifindex = self.ifindex;
        sa.sll_halen = 6;
        // SAFETY: the kernel reads `frame` and one sockaddr_ll.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(
            r,
            frame.len() as isize,
            "send: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Incoming frames until `timeout` passes or `done` says stop.
    fn collect(&self, timeout: Duration, mut done: impl FnMut(&[Vec<u8>]) -> bool) -> Vec<Vec<u8>> {
        let end = Instant::now() + timeout;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 4096];
        while Instant::now() < end && !done(&got) {
            // SAFETY: sockaddr_ll is plain data.
            let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: the kernel writes at most buf.len() bytes and one sockaddr_ll.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    (&mut sa as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if n > 0 && sa.sll_pkttype != libc::PACKET_OUTGOING {
                got.push(buf[..n as usize].to_vec());
            }
        }
        got
    }
}

/// A TCP listener on both VIPs in the backend namespace (the kernel answers SYNs by itself).
fn listen(net: &Net) -> (TcpListener, TcpListener) {
    net.run_in(&net.be, || {
        (
            TcpListener::bind((VIP4.parse::<IpAddr>().unwrap(), PORT)).expect("bind VIP4"),
            TcpListener::bind((VIP6.parse::<IpAddr>().unwrap(), PORT)).expect("bind VIP6"),
        )
    })
}

/// A SYN from the client to the VIP, encapsulated towards the backend.
fn syn(v6: bool, sport: u16, tunnel: Tunnel) -> Vec<u8> {
    let e = if v6 {
        Endpoints::new(CLIENT6, sport, VIP6, PORT)
    } else {
        Endpoints::new(CLIENT4, sport, VIP4, PORT)
    };
    let inner = craft::tcp(&e, true);
    let ip = &inner[14..];
    let mut buf = vec![0u8; 256 + ip.len()];
    buf[256..].copy_from_slice(ip);
    let enc = Encap {
        l2: OuterL2 {
            src: LB_MAC,
            dst: BE_MAC,
            vlan: None,
        },
        ip: OuterIp::V4 {
            src: "10.88.0.1".parse().unwrap(),
            dst: "10.88.0.2".parse().unwrap(),
            ttl: 64,
        },
        tunnel,
    };
    let end = buf.len();
    let start = enc
        .encapsulate(&mut buf, 256..end, sport as u64, sport)
        .unwrap();
    buf[start..].to_vec()
}

/// The SYN-ACKs among `frames`: (source, destination, destination port, ack number), checked for a
/// valid TCP checksum.
fn syn_acks(frames: &[Vec<u8>]) -> Vec<(IpAddr, IpAddr, u16, u32)> {
    let mut out = Vec::new();
    for f in frames {
        let Ok(s) = PacketSummary::parse(f) else {
            continue;
        };
        if s.protocol != IpProtocol::TCP || !s.tcp_flags.contains(TcpFlags::SYN | TcpFlags::ACK) {
            continue;
        }
        let t = TcpPacket::new_checked(s.l4_bytes(f)).unwrap();
        assert!(t.verify_checksum(&s.addrs), "SYN-ACK checksum");
        out.push((s.addrs.src(), s.addrs.dst(), s.dst_port, t.ack_number()));
    }
    out
}

fn expect_syn_acks(raw: &Raw, sent: &[(bool, u16)]) {
    let frames = raw.collect(Duration::from_secs(3), |got| {
        let acks = syn_acks(got);
        sent.iter()
            .all(|&(_, sport)| acks.iter().any(|a| a.2 == sport))
    });
    let acks = syn_acks(&frames);
    for &(v6, sport) in sent {
        let (vip, client): (IpAddr, IpAddr) = if v6 {
            (VIP6.parse().unwrap(), CLIENT6.parse().unwrap())
        } else {
            (VIP4.parse().unwrap(), CLIENT4.parse().unwrap())
        };
        assert!(
            acks.iter()
                .any(|&(s, d, p, ack)| s == vip && d == client && p == sport && ack == 2),
            "a SYN-ACK from {vip} straight to {client}:{sport} (ack = seq + 1); got {acks:?}"
        );
    }
}

fn expect_no_syn_ack(raw: &Raw) {
    let frames = raw.collect(Duration::from_millis(700), |_| false);
    assert!(syn_acks(&frames).is_empty(), "no answer expected");
}

/// GRE (plain, keyed, and with flowplane's recursion mark) and IPIP, IPv4 and IPv6 inside: the
/// backend answers every SYN directly to the client; `--remove` restores the namespace.
#[test]
fn gre_and_ipip_backend_answers_and_remove_restores() {
    let net = Net::new();
    // A non-default value before the command, to check that --remove restores it, not a default.
    net.be(&["sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=2"]);
    let before_announce = net.be_sysctl("net.ipv4.conf.all.arp_announce");
    let raw = Raw::open(&net);

    // Not prepared yet: a tunnel packet gets no answer.
    raw.send(&syn(false, 1000, Tunnel::GRE));
    expect_no_syn_ack(&raw);

    let out = net.backend_ok(&[
        "--interface",
        "b0",
        "--vip",
        VIP4,
        "--vip",
        VIP6,
        "--decap",
        "gre,ipip",
    ]);
    assert!(
        out.contains("attach tc ingress decap (gre,ipip) to b0"),
        "{out}"
    );
    assert_eq!(net.be_sysctl("net.ipv4.conf.all.arp_ignore"), "1");
    assert_eq!(net.be_sysctl("net.ipv4.conf.all.arp_announce"), "2");
    let tc = net.be(&["tc", "filter", "show", "dev", "b0", "ingress"]);
    assert!(
        tc.contains("fp_tc_decap") && tc.contains("direct-action"),
        "{tc}"
    );
    // Idempotent: a second run changes nothing.
    let again = net.backend_ok(&[
        "--interface",
        "b0",
        "--vip",
        VIP4,
        "--vip",
        VIP6,
        "--decap",
        "gre,ipip",
    ]);
    assert!(again.contains("0 change(s) made"), "{again}");

    let (_l4, _l6) = listen(&net);
    let (segs0, csum0) = net.be_tcp_counters();
    let keyed = Tunnel::Gre {
        key: Some(7),
        sequence: None,
        checksum: false,
        recursion: 0,
    };
    let marked = Tunnel::Gre {
        key: None,
        sequence: None,
        checksum: false,
        recursion: 1,
    };
    let cases = [
        (false, 2001, Tunnel::GRE),
        (true, 2002, Tunnel::GRE),
        (false, 2003, Tunnel::Ipip),
        (true, 2004, Tunnel::Ipip),
        (false, 2005, keyed),
        (true, 2006, marked),
    ];
    for &(v6, sport, t) in &cases {
        raw.send(&syn(v6, sport, t));
    }
    let sent: Vec<(bool, u16)> = cases.iter().map(|&(v6, s, _)| (v6, s)).collect();
    expect_syn_acks(&raw, &sent);
    let (segs1, csum1) = net.be_tcp_counters();
    assert!(
        segs1 >= segs0 + 3,
        "the IPv4 SYNs reached TCP: {segs0} -> {segs1}"
    );
    assert_eq!(csum1, csum0, "no TCP checksum errors");
    let status = net.backend_ok(&["--status"]);
    assert!(status.contains("decapsulated: gre 4 ipip 2"), "{status}");

    // ARP: the backend answers for its own address, never for the VIP (arp_ignore=1).
    let arp = |target: [u8; 4]| {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&LB_MAC.0);
        f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&LB_MAC.0);
        f.extend_from_slice(&[10, 88, 0, 1]);
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&target);
        f
    };
    let replies_for = |target: [u8; 4]| {
        raw.send(&arp(target));
        raw.collect(Duration::from_millis(400), |_| false)
            .iter()
            .filter(|f| {
                f.len() >= 42 && f[12..14] == [0x08, 0x06] && f[21] == 2 && f[28..32] == target
            })
            .count()
    };
    assert!(
        replies_for([10, 88, 0, 2]) >= 1,
        "ARP reply for the backend's own address"
    );
    assert_eq!(
        replies_for([203, 0, 113, 10]),
        0,
        "no ARP reply for the VIP"
    );

    // --remove restores everything it changed, and only that.
    drop((_l4, _l6));
    net.backend_ok(&["--remove"]);
    assert_eq!(net.be_sysctl("net.ipv4.conf.all.arp_ignore"), "2");
    assert_eq!(
        net.be_sysctl("net.ipv4.conf.all.arp_announce"),
        before_announce
    );
    let lo = net.be(&["ip", "addr", "show", "dev", "lo"]);
    assert!(!lo.contains(VIP4) && !lo.contains(VIP6), "{lo}");
    let qd = net.be(&["tc", "qdisc", "show", "dev", "b0"]);
    assert!(!qd.contains("clsact"), "{qd}");
    assert!(!std::path::Path::new(net.state_file.as_ref().unwrap()).exists());
    raw.send(&syn(false, 3001, Tunnel::GRE));
    expect_no_syn_ack(&raw);
    // Removing again is a no-op.
    let out = net.backend_ok(&["--remove"]);
    assert!(out.contains("nothing to undo"), "{out}");
}

/// The kernel's VXLAN device in `external` mode: any VNI, inner destination MAC = the device's.
#[test]
fn vxlan_backend_answers() {
    let net = Net::new();
    let raw = Raw::open(&net);
    let mac = mac_text(VXLAN_MAC);
    net.backend_ok(&[
        "--interface",
        "b0",
        "--vip",
        VIP4,
        "--vip",
        VIP6,
        "--decap",
        "vxlan",
        "--vxlan-mac",
        &mac,
    ]);
    let link = net.be(&["ip", "-d", "link", "show", "fpvx0"]);
    assert!(link.contains("external") && link.contains(&mac), "{link}");
    let (_l4, _l6) = listen(&net);
    let vx = |vni| Tunnel::Vxlan {
        vni,
        dst_port: 4789,
        inner_src: LB_MAC,
        inner_dst: VXLAN_MAC,
        udp_checksum: false,
    };
    // Sent right after the device was created: IPv6 must work at once (see the DAD note in
    // flowplane's backend module).
    raw.send(&syn(true, 4002, vx(7)));
    raw.send(&syn(false, 4001, vx(42)));
    expect_syn_acks(&raw, &[(false, 4001), (true, 4002)]);
    drop((_l4, _l6));
    net.backend_ok(&["--remove"]);
    assert!(net
        .be(&["ip", "link", "show"])
        .lines()
        .all(|l| !l.contains("fpvx0")));
}

/// A VXLAN device for one VNI drops the others.
#[test]
fn vxlan_fixed_vni() {
    let net = Net::new();
    let raw = Raw::open(&net);
    let mac = mac_text(VXLAN_MAC);
    net.backend_ok(&[
        "--interface",
        "b0",
        "--vip",
        VIP4,
        "--decap",
        "vxlan",
        "--vxlan-vni",
        "42",
        "--vxlan-mac",
        &mac,
        "--vxlan-dev",
        "vx42",
    ]);
    let listener = net.run_in(&net.be, || {
        TcpListener::bind((VIP4.parse::<IpAddr>().unwrap(), PORT)).unwrap()
    });
    let vx = |vni| Tunnel::Vxlan {
        vni,
        dst_port: 4789,
        inner_src: LB_MAC,
        inner_dst: VXLAN_MAC,
        udp_checksum: true,
    };
    raw.send(&syn(false, 5001, vx(43)));
    expect_no_syn_ack(&raw);
    raw.send(&syn(false, 5002, vx(42)));
    expect_syn_acks(&raw, &[(false, 5002)]);
    drop(listener);
    net.backend_ok(&["--remove"]);
}

/// Wrong arguments fail with a message naming the problem and change nothing.
#[test]
fn bad_arguments_are_explained() {
    let net = Net::new();
    let out = net.backend(&["--interface", "nosuch0", "--vip", VIP4]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nosuch0") && err.contains("no such interface"),
        "{err}"
    );
    let out = net.backend(&[
        "--interface",
        "b0",
        "--decap",
        "vxlan",
        "--vxlan-mac",
        "01:00:00:00:00:01",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("multicast"));
    let out = net.backend(&["--vip", VIP4]);
    assert!(!out.status.success(), "--interface is required");
    assert!(!std::path::Path::new(net.state_file.as_ref().unwrap()).exists());
    let lo = net.be(&["ip", "addr", "show", "dev", "lo"]);
    assert!(!lo.contains(VIP4), "{lo}");
}
