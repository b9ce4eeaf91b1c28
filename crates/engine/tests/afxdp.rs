//! Live tests of the AF_XDP port in network namespaces: a veth pair between namespace A (the
//! port) and namespace B (the peer, with an AF_PACKET socket and the kernel's own ping).
//!
//! Each test creates its own uniquely named namespaces and removes them on every exit path (a Drop
//! guard, which also runs when an assertion panics). They need root and network namespaces; without
//! them they fail and say why.

use fp_engine::afxdp::{AfXdpConfig, AfXdpPort, BindMode, ModeChoice, XdpMode};
use fp_engine::port::Port;
use fp_pipeline::craft::{self, Endpoints};
use fp_pipeline::packet::{burst, Pool};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const MAC_A: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 1];
const ADDR_A: &str = "10.77.0.1";
const ADDR_B: &str = "10.77.0.2";
const VIP4: &str = "203.0.113.10";
const VIP6: &str = "2001:db8::10";

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

/// Two namespaces joined by a veth pair (`xa0` in A, `xb0` in B); removed on drop.
struct Net {
    a: String,
    b: String,
}

impl Net {
    fn new(queues: u32) -> Net {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            panic!("live AF_XDP test cannot run: not root (euid {euid}); it needs network namespaces, veths and XDP");
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let net = Net {
            a: format!("fpxdp-{pid}-{n}-a"),
            b: format!("fpxdp-{pid}-{n}-b"),
        };
        let q = queues.to_string();
        let ma = mac_text(MAC_A);
        let mb = mac_text(MAC_B);
        let setup: Vec<Vec<&str>> = vec![
            vec!["ip", "netns", "add", &net.a],
            vec!["ip", "netns", "add", &net.b],
            vec![
                "ip",
                "link",
                "add",
                "xa0",
                "netns",
                &net.a,
                "address",
                &ma,
                "numrxqueues",
                &q,
                "numtxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                "xb0",
                "netns",
                &net.b,
                "address",
                &mb,
                "numrxqueues",
                &q,
                "numtxqueues",
                &q,
            ],
            vec![
                "ip",
                "-n",
                &net.a,
                "addr",
                "add",
                "10.77.0.1/24",
                "dev",
                "xa0",
            ],
            vec![
                "ip",
                "-n",
                &net.b,
                "addr",
                "add",
                "10.77.0.2/24",
                "dev",
                "xb0",
            ],
            vec!["ip", "-n", &net.a, "link", "set", "lo", "up"],
            vec!["ip", "-n", &net.b, "link", "set", "lo", "up"],
            vec!["ip", "-n", &net.a, "link", "set", "xa0", "up"],
            vec!["ip", "-n", &net.b, "link", "set", "xb0", "up"],
        ];
        for cmd in &setup {
            if let Err(e) = sh(cmd) {
                drop(net);
                panic!("live AF_XDP test cannot run: network namespace setup failed: {e}");
            }
        }
        net
    }

    /// Run `f` on a thread inside namespace `ns` (setns affects only the calling thread).
    fn run_in<T: Send>(&self, ns: &str, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{ns}");
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                // SAFETY: setns on a namespace file descriptor we hold open; it switches only this
                // thread's network namespace.
                let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(r, 0, "setns {ns}: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .expect("namespace thread")
        })
    }

    fn ping_b_to_a(&self) -> bool {
        Command::new("ip")
            .args([
                "netns", "exec", &self.b, "ping", "-c", "1", "-W", "1", ADDR_A,
            ])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    fn xdp_attached(&self) -> Option<(u8, u32)> {
        self.run_in(&self.a, || {
            let i = fp_ebpf::ifindex("xa0").unwrap();
            fp_ebpf::netlink::Netlink::open()
                .unwrap()
                .xdp_query(i)
                .unwrap()
        })
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.a]);
        let _ = sh(&["ip", "netns", "del", &self.b]);
    }
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// An AF_PACKET socket on one interface of the peer namespace.
struct Raw {
    fd: OwnedFd,
    ifindex: i32,
}

impl Raw {
    fn open(net: &Net, ns: &str, ifname: &str) -> Raw {
        let ifname = ifname.to_string();
        net.run_in(ns, move || {
            let ifindex = fp_ebpf::ifindex(&ifname).unwrap() as i32;
            let proto = (libc::ETH_P_ALL as u16).to_be();
            // SAFETY: plain socket creation; the result is checked.
            let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto as i32) };
            assert!(
                raw >= 0,
                "AF_PACKET socket: {}",
                std::io::Error::last_os_error()
            );
            // SAFETY: a fresh descriptor nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: sockaddr_ll is plain data; all-zero is valid.
            let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            sa.sll_family = libc::AF_PACKET as u16;
            sa.sll_protocol = proto;
            sa.sll_ifindex = ifindex;
            // SAFETY: the kernel reads a sockaddr_ll of the stated size.
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
                tv_usec: 200_000,
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
        // SAFETY: sockaddr_ll is plain data; all-zero is valid.
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

    /// The next incoming frame (outgoing copies skipped), or None after the timeout.
    fn recv(&self) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 4096];
        loop {
            // SAFETY: sockaddr_ll is plain data; all-zero is valid.
            let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: the kernel writes at most buf.len() bytes into buf and one sockaddr_ll.
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
            if n < 0 {
                return None;
            }
            if sa.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            return Some(buf[..n as usize].to_vec());
        }
    }
}

fn cfg(mode: ModeChoice) -> AfXdpConfig {
    AfXdpConfig {
        vips: vec![VIP4.parse().unwrap(), VIP6.parse().unwrap()],
        mode,
        ..Default::default()
    }
}

fn open(net: &Net, queue: u32, c: &AfXdpConfig) -> AfXdpPort {
    let c = c.clone();
    net.run_in(&net.a, move || {
        AfXdpPort::open("xa0", queue, &c).unwrap_or_else(|e| panic!("opening the port: {e}"))
    })
}

/// A UDP frame from B to `dst`, with a distinct source port per `i`.
fn frame_to(dst: &str, i: u16) -> Vec<u8> {
    let src = if dst.contains(':') {
        "2001:db8::2"
    } else {
        ADDR_B
    };
    let mut f = craft::udp(
        &Endpoints::new(src, 1000 + i, dst, 53),
        18 + (i as usize % 64),
    );
    f[..6].copy_from_slice(&MAC_A);
    f[6..12].copy_from_slice(&MAC_B);
    f
}

/// Receive until `n` frames arrived or `timeout` passed.
fn receive(port: &mut AfXdpPort, n: usize, timeout: Duration) -> Vec<Vec<u8>> {
    let mut pool = Pool::new(1024);
    let mut got = Vec::new();
    let mut b = burst();
    let end = Instant::now() + timeout;
    while got.len() < n && Instant::now() < end {
        if port.rx_burst(&mut pool, &mut b, 32) == 0 {
            port.wait_rx(Duration::from_millis(10));
        }
        for p in b.drain(..) {
            assert!(p.ts_ns > 0, "receive timestamp set");
            got.push(p.data().to_vec());
            pool.put(p);
        }
    }
    got
}

fn rx_reaches_port(mode: ModeChoice) {
    let net = Net::new(1);
    let mut port = open(&net, 0, &cfg(mode));
    let info = port.info().clone();
    assert_eq!(info.queue, 0);
    assert_eq!(
        info.xdp_mode,
        match mode {
            ModeChoice::Generic => XdpMode::Generic,
            _ => XdpMode::Native,
        },
        "{info}"
    );
    // veth has no zero-copy: the port fell back to copy mode and says why when it tried.
    assert!(!info.zero_copy, "{info}");
    assert_eq!(
        info.zero_copy_refused.is_some(),
        info.xdp_mode == XdpMode::Native,
        "{info}"
    );
    eprintln!("{info}");
    let peer = Raw::open(&net, &net.b, "xb0");
    let sent: Vec<Vec<u8>> = (0..200u16)
        .map(|i| frame_to(if i % 2 == 0 { VIP4 } else { VIP6 }, i))
        .collect();
    for f in &sent {
        peer.send(f);
    }
    let got = receive(&mut port, sent.len(), Duration::from_secs(5));
    assert_eq!(got.len(), sent.len(), "frames received by the port");
    assert_eq!(got, sent, "same bytes, same order (one queue)");
    let s = port.vip_control().program_stats().unwrap();
    assert_eq!(s.to_socket, 200, "{s:?}");
    assert_eq!(port.stats().rx, 200);
    assert_eq!(port.stats().rx_dropped, 0, "{:?}", port.socket_stats());
}

#[test]
fn rx_vip_frames_reach_the_port_native() {
    rx_reaches_port(ModeChoice::Auto);
}

#[test]
fn rx_vip_frames_reach_the_port_generic() {
    rx_reaches_port(ModeChoice::Generic);
}

/// Frames the peer sends a few milliseconds apart, read in one `rx_burst`, carry their own
/// receive times (the XDP program's `bpf_ktime_get_ns`, passed in the frame's metadata), not one
/// time for the burst: the gaps follow the send gaps, stamps never go back, and none is later
/// than a clock reading taken after the burst.
fn stamps_follow_send_gaps(mode: ModeChoice) {
    let net = Net::new(1);
    let mut port = open(&net, 0, &cfg(mode));
    let peer = Raw::open(&net, &net.b, "xb0");
    let mut pool = Pool::new(256);
    let mut b = burst();
    let gap = Duration::from_millis(3);
    let mut last = 0u64;
    for round in 0..3u16 {
        let mut sent_at = Vec::new();
        let mut sent = Vec::new();
        for i in 0..8u16 {
            if i > 0 {
                std::thread::sleep(gap);
            }
            let f = frame_to(if i % 2 == 0 { VIP4 } else { VIP6 }, round * 8 + i);
            sent_at.push(fp_engine::sys::monotonic_ns());
            peer.send(&f);
            sent.push(f);
        }
        let sent_end = fp_engine::sys::monotonic_ns();
        std::thread::sleep(Duration::from_millis(20));
        let n = port.rx_burst(&mut pool, &mut b, 32);
        let after = fp_engine::sys::monotonic_ns();
        assert_eq!(n, 8, "round {round}: the 8 frames in one burst");
        let got: Vec<Vec<u8>> = b.iter().map(|p| p.data().to_vec()).collect();
        assert_eq!(
            got, sent,
            "round {round}: the frames themselves are unchanged"
        );
        let ts: Vec<u64> = b.iter().map(|p| p.ts_ns).collect();
        pool.put_all(&mut b);
        eprintln!(
            "{mode:?} round {round}: stamp gaps (us) {:?}",
            ts.windows(2)
                .map(|w| w[1].saturating_sub(w[0]) / 1000)
                .collect::<Vec<_>>()
        );
        assert!(ts[0] >= last, "stamps go forward across bursts");
        assert!(
            ts[0] >= sent_at[0],
            "the first frame is stamped after it was sent"
        );
        assert!(ts[7] <= after, "no stamp after the burst");
        for (i, w) in ts.windows(2).enumerate() {
            assert!(
                w[1] >= w[0] + 1_000_000,
                "round {round}: frames {i} and {} were sent {} us apart but stamped {} us apart",
                i + 1,
                (sent_at[i + 1] - sent_at[i]) / 1000,
                w[1].saturating_sub(w[0]) / 1000
            );
        }
        assert!(
            ts[7] - ts[0] <= sent_end - sent_at[0] + 5_000_000,
            "stamps span {} ns, sends {} ns",
            ts[7] - ts[0],
            sent_end - sent_at[0]
        );
        last = ts[7];
    }
    assert_eq!(port.stats().rx, 24);
}

#[test]
fn receive_times_are_per_frame_native() {
    stamps_follow_send_gaps(ModeChoice::Native);
}

#[test]
fn receive_times_are_per_frame_generic() {
    stamps_follow_send_gaps(ModeChoice::Generic);
}

/// A UDP frame from A (a VIP) to B with destination port `dport` and `payload` bytes, appended
/// to `b` in a buffer from `pool`; returns its bytes.
fn push_frame_from_a(
    pool: &mut Pool,
    b: &mut Vec<fp_pipeline::packet::Packet>,
    dport: u16,
    payload: usize,
) -> Vec<u8> {
    let mut f = craft::udp(&Endpoints::new(VIP4, 80, "192.0.2.9", dport), payload);
    f[..6].copy_from_slice(&MAC_B);
    f[6..12].copy_from_slice(&MAC_A);
    let mut p = pool.get().unwrap();
    assert!(p.fill(&f));
    b.push(p);
    f
}

fn tx_reaches_peer(mode: ModeChoice) {
    let net = Net::new(1);
    let mut port = open(&net, 0, &cfg(mode));
    let peer = Raw::open(&net, &net.b, "xb0");
    let mut pool = Pool::new(256);
    let mut want = Vec::new();
    // 3 bursts of 32 frames of various sizes, 64 to 1514 bytes.
    for round in 0..3u16 {
        let mut b = burst();
        for i in 0..32u16 {
            let n = round * 32 + i;
            want.push(push_frame_from_a(
                &mut pool,
                &mut b,
                2000 + n,
                22 + (n as usize * 97) % 1450,
            ));
        }
        assert_eq!(port.tx_burst(&mut b, &mut pool), 32);
        assert!(b.is_empty());
    }
    port.flush().unwrap();
    let mut got = Vec::new();
    while got.len() < want.len() {
        match peer.recv() {
            Some(f) if f[..6] == MAC_B && f[6..12] == MAC_A => got.push(f),
            Some(_) => {} // e.g. IPv6 router solicitations from the peer's kernel
            None => break,
        }
    }
    assert_eq!(got.len(), want.len(), "frames seen by the peer");
    assert_eq!(got, want);
    assert_eq!(port.stats().tx, 96);
    assert_eq!(port.stats().tx_dropped, 0);
    assert_eq!(pool.in_use(), 0, "tx_burst returns every buffer");
}

#[test]
fn tx_frames_reach_the_peer_native() {
    tx_reaches_peer(ModeChoice::Native);
}

#[test]
fn tx_frames_reach_the_peer_generic() {
    tx_reaches_peer(ModeChoice::Generic);
}

/// ARP, the host's own traffic and anything not addressed to a VIP still reach the kernel; making
/// the interface's own address a VIP moves its traffic to the socket, and removing it moves it back.
#[test]
fn kernel_traffic_and_vip_updates() {
    let net = Net::new(1);
    let mut port = open(&net, 0, &cfg(ModeChoice::Auto));
    let vips = port.vip_control();
    assert!(
        net.ping_b_to_a(),
        "ping to the port's own address with the port open"
    );
    let s = vips.program_stats().unwrap();
    assert!(s.not_ip >= 1, "ARP passed to the kernel: {s:?}");
    assert!(
        s.not_vip >= 1,
        "ICMP to a non-VIP passed to the kernel: {s:?}"
    );

    let own: IpAddr = ADDR_A.parse().unwrap();
    assert!(vips.add(own).unwrap());
    assert_eq!(
        vips.list().unwrap(),
        vec![own, VIP4.parse::<IpAddr>().unwrap(), VIP6.parse().unwrap()]
    );
    assert!(
        !net.ping_b_to_a(),
        "the echo request now goes to the socket"
    );
    let got = receive(&mut port, 1, Duration::from_secs(2));
    assert!(!got.is_empty(), "the port received the echo request");
    let f = &got[0];
    assert_eq!(&f[12..14], &[0x08, 0x00]);
    assert_eq!(f[23], 1, "ICMP");
    assert_eq!(&f[30..34], &[10, 77, 0, 1]);

    assert_eq!(vips.set(&[VIP4.parse().unwrap()]).unwrap(), (0, 2));
    assert!(
        net.ping_b_to_a(),
        "ping works again once the address is no longer a VIP"
    );
}

/// The XDP program is attached while the port lives and detached when it is dropped.
#[test]
fn drop_detaches_everything() {
    let net = Net::new(1);
    let port = open(&net, 0, &cfg(ModeChoice::Native));
    let id = port.vip_control().program_id().unwrap();
    assert_eq!(
        net.xdp_attached(),
        Some((1, id)),
        "driver-mode program attached"
    );
    drop(port);
    assert_eq!(net.xdp_attached(), None, "detached on drop");
    // And the interface still works for the kernel.
    assert!(net.ping_b_to_a());
    // A second port can attach again.
    let port = open(&net, 0, &cfg(ModeChoice::Generic));
    assert_eq!(net.xdp_attached().map(|(m, _)| m), Some(2), "generic mode");
    drop(port);
    assert_eq!(net.xdp_attached(), None);
}

/// Two queues, one program: both sockets bind, together they receive everything, and the program
/// stays attached until the last port is dropped.
#[test]
fn two_queues_share_one_program() {
    let net = Net::new(2);
    let c = cfg(ModeChoice::Native);
    let mut ports = net.run_in(&net.a, move || {
        AfXdpPort::open_queues("xa0", &[0, 1], &c).unwrap_or_else(|e| panic!("{e}"))
    });
    assert_eq!(ports.len(), 2);
    assert_eq!(
        net.run_in(&net.a, || fp_engine::afxdp::rx_queue_count("xa0").unwrap()),
        2
    );
    let peer = Raw::open(&net, &net.b, "xb0");
    let n = 200;
    for i in 0..n {
        peer.send(&frame_to(VIP4, i));
    }
    let mut total = 0;
    let end = Instant::now() + Duration::from_secs(5);
    let mut pool = Pool::new(1024);
    let mut b = burst();
    while total < n as usize && Instant::now() < end {
        for p in ports.iter_mut() {
            total += p.rx_burst(&mut pool, &mut b, 32);
            pool.put_all(&mut b);
        }
    }
    assert_eq!(
        total, n as usize,
        "the two sockets together got every frame"
    );
    let s = ports[0].vip_control().program_stats().unwrap();
    assert_eq!(s.to_socket, n as u64, "{s:?}");
    let second = ports.pop().unwrap();
    drop(ports);
    assert!(
        net.xdp_attached().is_some(),
        "still attached for the other queue"
    );
    drop(second);
    assert_eq!(net.xdp_attached(), None);
}

/// Fewer workers than queues: the driver still opens a socket on every queue and gives one worker
/// all of them as one port, so the frames the sender's flows hash to queues 1 and 2 are not lost
/// to the kernel. The group port sleeps on one descriptor that wakes for any queue, receives
/// every frame, and transmits on its sockets in turn.
#[test]
fn one_worker_serves_every_queue() {
    use fp_engine::afxdp::AfXdpQueues;
    use fp_engine::live::{Capture, LiveSpec};
    use fp_engine::port::Wait;
    let net = Net::new(3);
    let dsts: Vec<IpAddr> = vec![VIP4.parse().unwrap(), VIP6.parse().unwrap()];

    // Through the driver, as `flowplane run --workers 1` opens it.
    let mut opened = net.run_in(&net.a, move || {
        let spec = LiveSpec::new(&["xa0"], 1, Capture::Destinations(dsts));
        fp_engine::live::driver("af_xdp")
            .unwrap()
            .open(&spec)
            .unwrap_or_else(|e| panic!("{e}"))
    });
    assert_eq!(opened.ports.len(), 1, "{}", opened.description);
    assert_eq!(opened.ports[0].len(), 1);
    assert!(
        opened.description.contains("1 worker(s) over 3 queue(s)"),
        "{}",
        opened.description
    );
    let port = &mut opened.ports[0][0];
    assert_eq!(port.name(), "afxdp:xa0:0+1+2");
    let Wait::Readable(fd) = port.wait() else {
        panic!("the group port waits on a descriptor");
    };
    let peer = Raw::open(&net, &net.b, "xb0");
    let mut pool = Pool::new(1024);
    let mut b = burst();
    // Idle: nothing to read, and the wait descriptor says so.
    assert_eq!(port.rx_burst(&mut pool, &mut b, 32), 0);
    assert!(!fp_engine::sys::poll_readable(&[fd], Duration::from_millis(20)).unwrap());
    let n = 300u16;
    let sent: Vec<Vec<u8>> = (0..n).map(|i| frame_to(VIP4, i)).collect();
    for f in &sent {
        peer.send(f);
    }
    assert!(
        fp_engine::sys::poll_readable(&[fd], Duration::from_secs(2)).unwrap(),
        "the group's descriptor wakes the worker"
    );
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while got.len() < sent.len() && Instant::now() < end {
        if port.rx_burst(&mut pool, &mut b, 32) == 0 {
            let _ = fp_engine::sys::poll_readable(&[fd], Duration::from_millis(10));
        }
        for p in b.drain(..) {
            got.push(p.data().to_vec());
            pool.put(p);
        }
    }
    got.sort();
    let mut want = sent.clone();
    want.sort();
    assert_eq!(got, want, "every frame, from every queue, once");
    assert_eq!(port.stats().rx, n as u64);
    drop(opened);
    assert_eq!(net.xdp_attached(), None, "dropping the ports detaches");

    // The group itself: the flows really spread over the queues (so the frames above did not
    // all come through queue 0), and transmit alternates sockets without losing a frame.
    let c = cfg(ModeChoice::Native);
    let mut group = net.run_in(&net.a, move || {
        let ports = AfXdpPort::open_queues("xa0", &[0, 1, 2], &c).unwrap_or_else(|e| panic!("{e}"));
        AfXdpQueues::new(ports).unwrap()
    });
    for f in &sent {
        peer.send(f);
    }
    let mut total = 0;
    let end = Instant::now() + Duration::from_secs(5);
    while total < n as usize && Instant::now() < end {
        total += group.rx_burst(&mut pool, &mut b, 32);
        pool.put_all(&mut b);
    }
    assert_eq!(total, n as usize);
    let per_queue: Vec<u64> = group.queues().iter().map(|p| p.stats().rx).collect();
    assert!(
        per_queue.iter().filter(|&&r| r > 0).count() >= 2,
        "flows hashed to more than one queue: {per_queue:?}"
    );
    let mut want = Vec::new();
    for round in 0..6u16 {
        for i in 0..16u16 {
            want.push(push_frame_from_a(
                &mut pool,
                &mut b,
                3000 + round * 16 + i,
                40,
            ));
        }
        assert_eq!(group.tx_burst(&mut b, &mut pool), 16);
    }
    group.flush().unwrap();
    let tx: Vec<u64> = group.queues().iter().map(|p| p.stats().tx).collect();
    assert_eq!(tx, vec![32, 32, 32], "bursts alternate over the sockets");
    let mut seen = Vec::new();
    while seen.len() < want.len() {
        match peer.recv() {
            Some(f) if f[..6] == MAC_B && f[6..12] == MAC_A => seen.push(f),
            Some(_) => {}
            None => break,
        }
    }
    seen.sort();
    want.sort();
    assert_eq!(seen, want, "the peer got every transmitted frame");
    assert_eq!(pool.in_use(), 0);
}

/// Bad settings and a missing interface are errors that say what is wrong.
#[test]
fn errors_are_clear() {
    let net = Net::new(1);
    let e = net
        .run_in(&net.a, || {
            AfXdpPort::open("nosuch0", 0, &AfXdpConfig::default())
        })
        .unwrap_err();
    assert!(e.to_string().contains("nosuch0"), "{e}");
    let c = AfXdpConfig {
        bind: BindMode::ZeroCopy,
        ..cfg(ModeChoice::Native)
    };
    let e = net
        .run_in(&net.a, move || AfXdpPort::open("xa0", 0, &c))
        .unwrap_err();
    assert!(e.to_string().contains("zero-copy"), "{e}");
    assert_eq!(
        net.xdp_attached(),
        None,
        "a failed open leaves nothing attached"
    );
}

/// Every frame `ports` receive within `timeout`, until `n` arrived.
fn receive_all(ports: &mut [Vec<Box<dyn Port>>], n: usize, timeout: Duration) -> Vec<Vec<u8>> {
    let mut pool = Pool::new(1024);
    let mut b = burst();
    let mut got = Vec::new();
    let end = Instant::now() + timeout;
    while got.len() < n && Instant::now() < end {
        for p in ports.iter_mut().flatten() {
            p.rx_burst(&mut pool, &mut b, 32);
            for f in b.drain(..) {
                got.push(f.data().to_vec());
                pool.put(f);
            }
        }
    }
    got
}

/// A running process hands its sockets to a successor: the program stays attached, frames that
/// arrived in between are received by the successor, which goes on receiving and transmitting
/// with the same frames, applies its own VIP set, and detaches everything when it stops.
#[test]
fn handed_off_sockets_go_on_in_the_adopter() {
    use fp_engine::live::{Capture, Handoff, LiveSpec};
    let net = Net::new(2);
    let driver = fp_engine::live::driver("af_xdp").unwrap();
    assert!(driver.hands_off());
    let dsts: Vec<IpAddr> = vec![VIP4.parse().unwrap(), VIP6.parse().unwrap()];
    let spec = LiveSpec::new(&["xa0"], 2, Capture::Destinations(dsts));
    let s = spec.clone();
    let mut old = net.run_in(&net.a, move || {
        driver.open(&s).unwrap_or_else(|e| panic!("{e}"))
    });
    assert_eq!(old.ports.len(), 2, "{}", old.description);
    let id = net.xdp_attached().expect("attached").1;
    let peer = Raw::open(&net, &net.b, "xb0");
    let first: Vec<Vec<u8>> = (0..100).map(|i| frame_to(VIP4, i)).collect();
    for f in &first {
        peer.send(f);
    }
    assert_eq!(
        receive_all(&mut old.ports, first.len(), Duration::from_secs(5)).len(),
        first.len()
    );
    // Frames sent out before the handoff: some tx frames are on the completion ring.
    let mut pool = Pool::new(256);
    let mut b = burst();
    for i in 0..32 {
        push_frame_from_a(&mut pool, &mut b, 3000 + i, 100);
    }
    assert_eq!(old.ports[0][0].tx_burst(&mut b, &mut pool), 32);
    // Frames that arrive after the old process stopped receiving wait on the rx rings.
    let waiting: Vec<Vec<u8>> = (100..150).map(|i| frame_to(VIP4, i)).collect();
    for f in &waiting {
        peer.send(f);
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut h = Handoff::default();
    old.control.hand_off(&mut h);
    for p in old.ports.iter().flatten() {
        p.hand_off(&mut h).unwrap();
    }
    // One program (five descriptors) and two per socket.
    assert_eq!(h.fds.len(), 5 + 2 * 2);
    for p in old.ports.iter_mut().flatten() {
        p.handed_over();
    }
    old.control.handed_over();
    drop(old);
    assert_eq!(
        net.xdp_attached(),
        Some((1, id)),
        "the program stays attached while the successor holds it"
    );

    // The successor serves only the IPv4 VIP.
    let spec = LiveSpec::new(
        &["xa0"],
        2,
        Capture::Destinations(vec![VIP4.parse().unwrap()]),
    );
    let mut new = net.run_in(&net.a, move || {
        let h = Handoff::received(h.bytes, h.fds);
        driver.adopt(&spec, h).unwrap_or_else(|e| panic!("{e}"))
    });
    assert!(
        new.description.contains("taken over"),
        "{}",
        new.description
    );
    let mut got = receive_all(&mut new.ports, waiting.len(), Duration::from_secs(5));
    got.sort();
    let mut want = waiting.clone();
    want.sort();
    assert_eq!(got, want, "the frames that waited, each once");
    // It goes on receiving (its VIP set applied: IPv6 frames go to the kernel now) ...
    let more: Vec<Vec<u8>> = (150..1150).map(|i| frame_to(VIP4, i % 60_000)).collect();
    for (i, f) in more.iter().enumerate() {
        peer.send(f);
        if i % 8 == 0 {
            peer.send(&frame_to(VIP6, i as u16));
        }
    }
    let got = receive_all(&mut new.ports, more.len() + 1, Duration::from_secs(2));
    assert_eq!(got.len(), more.len(), "every IPv4 frame and no IPv6 one");
    // ... and transmitting: more than the tx half of the UMEM, so the frames the old process
    // left on the completion ring come back.
    // Room for every frame on the peer's socket, so none is dropped there.
    let big: libc::c_int = 64 << 20;
    // SAFETY: the kernel reads one c_int from a live value; the descriptor is the peer's.
    let r = unsafe {
        libc::setsockopt(
            peer.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&big as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        )
    };
    assert_eq!(r, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
    let peer_seen = std::thread::spawn(move || {
        let mut n = 0;
        while let Some(f) = peer.recv() {
            n += (f[..6] == MAC_B && f[6..12] == MAC_A) as usize;
        }
        n
    });
    let mut sent = 0;
    for round in 0..200 {
        for i in 0..32 {
            push_frame_from_a(&mut pool, &mut b, 4000 + i + round, 100);
        }
        sent += new.ports[round as usize % 2][0].tx_burst(&mut b, &mut pool);
        if round % 8 == 0 {
            for p in new.ports.iter_mut().flatten() {
                let _ = p.flush();
            }
        }
    }
    for p in new.ports.iter_mut().flatten() {
        p.flush().unwrap();
    }
    assert_eq!(sent, 200 * 32, "no frame lost to the tx free list");
    assert!(peer_seen.join().unwrap() >= sent, "the peer saw them");
    drop(new);
    assert_eq!(net.xdp_attached(), None, "the successor detaches on drop");
}

/// A successor that cannot use what was handed over (here: it wants every frame, the program
/// steers VIPs) refuses it without leaving the program attached, and the interface opens anew.
#[test]
fn a_refused_handoff_detaches_what_it_took() {
    use fp_engine::live::{Capture, Handoff, LiveSpec};
    let net = Net::new(1);
    let driver = fp_engine::live::driver("af_xdp").unwrap();
    let spec = LiveSpec::new(
        &["xa0"],
        1,
        Capture::Destinations(vec![VIP4.parse().unwrap()]),
    );
    let s = spec.clone();
    let mut old = net.run_in(&net.a, move || {
        driver.open(&s).unwrap_or_else(|e| panic!("{e}"))
    });
    let mut h = Handoff::default();
    old.control.hand_off(&mut h);
    for p in old.ports.iter().flatten() {
        p.hand_off(&mut h).unwrap();
    }
    for p in old.ports.iter_mut().flatten() {
        p.handed_over();
    }
    old.control.handed_over();
    drop(old);
    assert!(net.xdp_attached().is_some());
    let all = LiveSpec::new(&["xa0"], 1, Capture::All);
    let err = net
        .run_in(&net.a, move || {
            driver.adopt(&all, Handoff::received(h.bytes, h.fds)).err()
        })
        .expect("refused");
    assert!(err.to_string().contains("steers"), "{err}");
    assert_eq!(net.xdp_attached(), None, "nothing left attached");
    // The queue is free again (once the kernel released the socket): a fresh open works.
    let again = net.run_in(&net.a, move || driver.open(&spec).map(|o| o.ports.len()));
    assert_eq!(again.unwrap_or_else(|e| panic!("{e}")), 1);
}
