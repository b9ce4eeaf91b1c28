//! Measure the AF_XDP port's receive rate on a veth pair, next to the kernel's own UDP receive path
//! fed by the same sender, and the per-packet cost of flowplane's eBPF programs (kernel-measured
//! with `BPF_PROG_TEST_RUN`).
//!
//! ```text
//! cargo build --release -p fp-engine --example afxdp_rate
//! flock /tmp/flowplane-bench.lock target/release/examples/afxdp_rate [SECONDS]
//! ```
//!
//! Namespace B sends 64-byte UDP frames to a VIP with AF_PACKET `sendmmsg` (batches of 64,
//! `PACKET_QDISC_BYPASS`) from a thread pinned to CPU 1; namespace A receives them on CPU 0 with
//! (a) the AF_XDP port (native XDP, copy mode), (b) the AF_XDP port with generic XDP, (c) a UDP
//! socket with `recvmmsg` (no XDP program: the kernel stack). On veth the sender is usually the
//! bottleneck (docs/platform.md), so the receiving thread's CPU time per packet is reported too
//! (receivers sleep in `poll`/`recvmmsg` when idle, so it measures work, not spinning). The veth
//! transfer, the XDP program and the copy into UMEM (or the kernel's UDP receive) run in softirq
//! context, mostly on the sender's CPU, and are in neither number: compare methods, not
//! absolutes. Needs root.

use fp_ebpf::decap::{DecapConfig, TcDecap};
use fp_ebpf::xsk::XskRedirect;
use fp_engine::afxdp::{AfXdpConfig, AfXdpPort, ModeChoice};
use fp_engine::port::Port;
use fp_pipeline::craft::{self, Endpoints};
use fp_pipeline::packet::{burst, Pool};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAC_A: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 1];
const VIP: &str = "203.0.113.10";
const PORT: u16 = 9000;

fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

struct Net {
    a: String,
    b: String,
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.a]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.b]).output();
    }
}

fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(&path);
            f()
        })
        .join()
        .unwrap()
    })
}

fn enter(path: &str) {
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: setns on an open namespace descriptor; it moves only the calling thread.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns {path}");
}

fn pin(cpu: usize) {
    // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET writes inside it; the call reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Send 64-byte frames to the VIP from namespace `ns` until `stop`; returns frames sent.
fn sender(ns: String, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        enter(&format!("/run/netns/{ns}"));
        pin(1);
        let ifindex = fp_ebpf::ifindex("xb0").unwrap() as i32;
        // SAFETY: plain socket creation; checked.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        assert!(raw >= 0);
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let one: libc::c_int = 1;
        // SAFETY: the kernel reads one c_int (PACKET_QDISC_BYPASS = 20).
        unsafe {
            libc::setsockopt(
                raw,
                libc::SOL_PACKET,
                20,
                (&one as *const libc::c_int).cast(),
                4,
            )
        };
        let frames: Vec<Vec<u8>> = (0..64u16)
            .map(|i| {
                let mut f = craft::udp(&Endpoints::new("10.77.0.2", 1000 + i, VIP, PORT), 18);
                f[..6].copy_from_slice(&MAC_A);
                f[6..12].copy_from_slice(&MAC_B);
                f
            })
            .collect();
        // SAFETY: sockaddr_ll is plain data.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_ifindex = ifindex;
        sa.sll_halen = 6;
        let mut iov: Vec<libc::iovec> = frames
            .iter()
            .map(|f| libc::iovec {
                iov_base: f.as_ptr() as *mut libc::c_void,
                iov_len: f.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: mmsghdr is plain data; the pointers set below stay valid for the loop.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                m.msg_hdr.msg_name = (&mut sa as *mut libc::sockaddr_ll).cast();
                m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                m
            })
            .collect();
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: 64 mmsghdrs whose iovecs point at live frames and whose names point at `sa`.
            let n = unsafe { libc::sendmmsg(fd.as_raw_fd(), msgs.as_mut_ptr(), 64, 0) };
            if n > 0 {
                sent.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    })
}

struct Row {
    name: &'static str,
    rx: u64,
    sent: u64,
    secs: f64,
    cpu_ns: u64,
}

fn measure(net: &Net, name: &'static str, secs: f64, mut recv: impl FnMut() -> u64) -> Row {
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let h = sender(net.b.clone(), stop.clone(), sent.clone());
    // Warm up, then measure.
    let warm = Instant::now() + Duration::from_millis(300);
    while Instant::now() < warm {
        recv();
    }
    let s0 = sent.load(Ordering::Relaxed);
    let c0 = thread_cpu_ns();
    let t0 = Instant::now();
    let mut rx = 0;
    while t0.elapsed().as_secs_f64() < secs {
        rx += recv();
    }
    let el = t0.elapsed().as_secs_f64();
    let cpu = thread_cpu_ns() - c0;
    let s1 = sent.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
    Row {
        name,
        rx,
        sent: s1 - s0,
        secs: el,
        cpu_ns: cpu,
    }
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    if let Some(why) = fp_ebpf::privilege_problem() {
        eprintln!("cannot run: {why}");
        std::process::exit(1);
    }
    // ---- program costs ----
    let r = XskRedirect::load(16, 4).unwrap();
    r.set_vips(&[VIP.parse().unwrap()]).unwrap();
    let mut vip = craft::udp(&Endpoints::new("10.0.0.1", 1, VIP, PORT), 18);
    vip[..6].copy_from_slice(&MAC_A);
    let other = craft::udp(&Endpoints::new("10.0.0.1", 1, "10.0.0.2", PORT), 18);
    let d = TcDecap::load(DecapConfig::ALL).unwrap();
    let mut plain = other.clone();
    plain[..6].fill(0);
    println!(
        "eBPF program cost (BPF_PROG_TEST_RUN, 1e6 runs, ns per packet, includes the run loop):"
    );
    for (n, p, f) in [
        (
            "fp_xsk_redirect, VIP (lookup + redirect_map)",
            r.program(),
            &vip,
        ),
        (
            "fp_xsk_redirect, not a VIP (lookup, pass)",
            r.program(),
            &other,
        ),
        ("fp_tc_decap, plain IPv4 (untouched)", d.program(), &plain),
    ] {
        let ns = p.bench(f, 1_000_000).unwrap();
        println!("  {n:48} {ns:>4} ns");
    }

    // ---- live receive ----
    let pid = std::process::id();
    let net = Net {
        a: format!("fprate-{pid}-a"),
        b: format!("fprate-{pid}-b"),
    };
    let (a, b) = (net.a.clone(), net.b.clone());
    sh(&["ip", "netns", "add", &a]);
    sh(&["ip", "netns", "add", &b]);
    sh(&[
        "ip",
        "link",
        "add",
        "xa0",
        "netns",
        &a,
        "address",
        "02:aa:00:00:00:01",
        "type",
        "veth",
        "peer",
        "name",
        "xb0",
        "netns",
        &b,
        "address",
        "02:bb:00:00:00:01",
    ]);
    sh(&["ip", "-n", &a, "addr", "add", "10.77.0.1/24", "dev", "xa0"]);
    sh(&["ip", "-n", &b, "addr", "add", "10.77.0.2/24", "dev", "xb0"]);
    for (ns, dev) in [(&a, "xa0"), (&b, "xb0"), (&a, "lo")] {
        sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
    }
    let mut rows = Vec::new();
    for (name, mode) in [
        ("AF_XDP port, native XDP, copy", ModeChoice::Native),
        ("AF_XDP port, generic XDP, copy", ModeChoice::Generic),
    ] {
        let cfg = AfXdpConfig {
            vips: vec![VIP.parse().unwrap()],
            mode,
            ..Default::default()
        };
        // The previous case's socket is released by the kernel asynchronously after close: a
        // bind to the same queue right after can fail with EBUSY for a few milliseconds.
        let mut port = in_ns(&a, || {
            let mut tries = 0;
            loop {
                match AfXdpPort::open("xa0", 0, &cfg) {
                    Ok(p) => break p,
                    Err(e) if tries < 50 => {
                        tries += 1;
                        let _ = e;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        });
        eprintln!("{}", port.info());
        pin(0);
        let mut pool = Pool::new(4096);
        let mut b = burst();
        let row = measure(&net, name, secs, || {
            let n = port.rx_burst(&mut pool, &mut b, 32) as u64;
            pool.put_all(&mut b);
            if n == 0 {
                // Sleep in poll() when idle, so that CPU time measures work, not spinning.
                port.wait_rx(Duration::from_millis(1));
            }
            n
        });
        eprintln!("  socket stats: {:?}", port.socket_stats());
        rows.push(row);
    }
    // Kernel stack: VIP on lo, UDP socket, recvmmsg.
    sh(&[
        "ip",
        "-n",
        &a,
        "addr",
        "add",
        &format!("{VIP}/32"),
        "dev",
        "lo",
    ]);
    let sock = in_ns(&a, || std::net::UdpSocket::bind((VIP, PORT)).unwrap());
    sock.set_read_timeout(Some(Duration::from_millis(1)))
        .unwrap();
    let mut bufs = vec![[0u8; 2048]; 32];
    let row = measure(&net, "kernel UDP socket, recvmmsg", secs, || {
        let mut iov: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: mmsghdr is plain data.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        // SAFETY: 32 mmsghdrs whose iovecs point at live 2 KiB buffers.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        n.max(0) as u64
    });
    rows.push(row);

    println!("\nreceive on veth, 64-byte UDP frames, sender AF_PACKET sendmmsg on CPU 1, receiver on CPU 0, {secs} s:");
    println!(
        "  {:34} {:>10} {:>10} {:>9} {:>14}",
        "receiver", "sent kpps", "rx kpps", "rx/sent", "rx CPU ns/pkt"
    );
    for r in &rows {
        println!(
            "  {:34} {:>10.0} {:>10.0} {:>8.1}% {:>14.0}",
            r.name,
            r.sent as f64 / r.secs / 1e3,
            r.rx as f64 / r.secs / 1e3,
            100.0 * r.rx as f64 / r.sent.max(1) as f64,
            r.cpu_ns as f64 / r.rx.max(1) as f64
        );
    }
}
