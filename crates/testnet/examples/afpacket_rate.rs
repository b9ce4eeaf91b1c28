//! AF_PACKET packet rates on a veth pair between two namespaces built with fp-testnet: transmit
//! with `sendmmsg` (fp-engine's port) against the kernel's UDP socket path, and receive through the
//! `TPACKET_V3` ring (one socket, and two in a fan-out group) against a kernel UDP socket, with the
//! CPU time per packet of the measured thread (from `/proc/thread-self/schedstat`).
//!
//! On veth the sender is usually the bottleneck (the veth transmit runs the receiver's softirq
//! on the sender's CPU), so compare CPU per packet more than packets per second.
//!
//! ```text
//! flock /tmp/flowplane-bench.lock cargo run --profile dev-bench -p fp-testnet --example afpacket_rate -- [SECONDS]
//! ```
//! Needs root, like every live test.

use fp_engine::afpacket::{AfPacketConfig, AfPacketPort};
use fp_engine::port::Port;
use fp_pipeline::packet::{burst, Pool};
use fp_testnet::{Netns, TestNet};
use fp_wire::ethernet::{EtherType, EthernetRepr, MacAddr};
use fp_wire::ip::{IpPair, IpProtocol};
use fp_wire::ipv4::Ipv4Repr;
use fp_wire::udp::UdpRepr;
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const GEN_IP: Ipv4Addr = Ipv4Addr::new(10, 82, 0, 1);
const DUT_IP: Ipv4Addr = Ipv4Addr::new(10, 82, 0, 2);
const PAYLOAD: usize = 18; // 14 + 20 + 8 + 18 = 60 bytes: a minimum frame without FCS

/// CPU time of the calling thread, ns.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn frame(src: [u8; 6], dst: [u8; 6], sport: u16) -> Vec<u8> {
    let udp_len = 8 + PAYLOAD;
    let mut f = vec![0x41u8; 14 + 20 + udp_len];
    EthernetRepr {
        src_addr: MacAddr(src),
        dst_addr: MacAddr(dst),
        ethertype: EtherType::IPV4,
    }
    .emit(&mut f)
    .unwrap();
    Ipv4Repr::new(GEN_IP, DUT_IP, IpProtocol::UDP, udp_len as u16, 64)
        .emit(&mut f[14..])
        .unwrap();
    UdpRepr {
        src_port: sport,
        dst_port: 9000,
    }
    .emit(&mut f[34..], Some(&IpPair::V4(GEN_IP, DUT_IP)))
    .unwrap();
    f
}

/// Result of one side of a run.
#[derive(Clone, Copy, Default)]
struct Side {
    packets: u64,
    secs: f64,
    cpu_ns: u64,
}

impl Side {
    fn kpps(&self) -> f64 {
        self.packets as f64 / self.secs / 1e3
    }
    fn ns_per_packet(&self) -> f64 {
        self.cpu_ns as f64 / self.packets.max(1) as f64
    }
}

/// Send frames with fp-engine's AF_PACKET port (sendmmsg, 32 per call) from `gen` until `stop`.
fn afp_sender(
    gen: &Netns,
    frames: Vec<Vec<u8>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Side> {
    gen.spawn_thread(move || {
        fp_engine::sys::pin_to_cpu(0);
        let mut port = AfPacketPort::open("eth0", &AfPacketConfig::default()).unwrap();
        let mut pool = Pool::new(64);
        let (t0, c0) = (Instant::now(), thread_cpu_ns());
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) {
            let mut b = burst();
            for _ in 0..32 {
                let mut p = pool.get().unwrap();
                p.fill(&frames[i % frames.len()]);
                i += 1;
                b.push(p);
            }
            port.tx_burst(&mut b, &mut pool);
        }
        Side {
            packets: port.stats().tx,
            secs: t0.elapsed().as_secs_f64(),
            cpu_ns: thread_cpu_ns() - c0,
        }
    })
    .unwrap()
}

/// Send with a kernel UDP socket (the peer for transmit).
fn udp_sender(gen: &Netns, stop: Arc<AtomicBool>, flows: u16) -> std::thread::JoinHandle<Side> {
    gen.spawn_thread(move || {
        fp_engine::sys::pin_to_cpu(0);
        let socks: Vec<UdpSocket> = (0..flows)
            .map(|f| UdpSocket::bind((GEN_IP, 20000 + f)).unwrap())
            .collect();
        let payload = [0x41u8; PAYLOAD];
        let (t0, c0) = (Instant::now(), thread_cpu_ns());
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for s in &socks {
                for _ in 0..8 {
                    if s.send_to(&payload, (DUT_IP, 9000)).is_ok() {
                        n += 1;
                    }
                }
            }
        }
        Side {
            packets: n,
            secs: t0.elapsed().as_secs_f64(),
            cpu_ns: thread_cpu_ns() - c0,
        }
    })
    .unwrap()
}

/// Receive on `ports` (one thread each) until `stop`; sleeps in poll when the ring is empty.
fn afp_receivers(
    dut: &Netns,
    ports: Vec<AfPacketPort>,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<(Side, u64)>> {
    ports
        .into_iter()
        .enumerate()
        .map(|(i, mut port)| {
            let stop = stop.clone();
            dut.spawn_thread(move || {
                fp_engine::sys::pin_to_cpu(1 + i);
                let mut pool = Pool::new(256);
                let mut rx = burst();
                let (t0, c0) = (Instant::now(), thread_cpu_ns());
                while !stop.load(Ordering::Relaxed) {
                    if port.rx_burst(&mut pool, &mut rx, 32) == 0 {
                        let _ = port.wait_rx(Duration::from_millis(1));
                    }
                    pool.put_all(&mut rx);
                }
                let s = port.afp_stats();
                (
                    Side {
                        packets: s.rx,
                        secs: t0.elapsed().as_secs_f64(),
                        cpu_ns: thread_cpu_ns() - c0,
                    },
                    s.rx_ring_drops,
                )
            })
            .unwrap()
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(3.0);
    let dur = Duration::from_secs_f64(secs);
    let net = TestNet::new("afprate")?;
    let gen = net.ns("gen")?;
    let dut = net.ns("dut")?;
    for ns in [&gen, &dut] {
        ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
    }
    let (eg, ed) = net.veth(&gen, "eth0", &dut, "eth0")?;
    eg.addr_add(&format!("{GEN_IP}/24"))?;
    ed.addr_add(&format!("{DUT_IP}/24"))?;
    eg.tx_checksum_off()?;
    let (gmac, dmac) = (eg.mac()?, ed.mac()?);
    gen.ping(&DUT_IP.to_string(), 1)?; // ARP resolved for the UDP sender
    let flows = 64u16;
    let frames: Vec<Vec<u8>> = (0..flows).map(|f| frame(gmac, dmac, 20000 + f)).collect();
    println!("AF_PACKET on veth, {secs} s per case, 60-byte UDP frames, {flows} flows");
    println!(
        "{:<48} {:>8} {:>12} {:>12}",
        "case", "kpps", "CPU ns/pkt", "ring drops"
    );
    let row = |case: &str, s: &Side, drops: Option<u64>| {
        println!(
            "{case:<48} {:>8.0} {:>12.0} {:>12}",
            s.kpps(),
            s.ns_per_packet(),
            drops.map(|d| d.to_string()).unwrap_or_else(|| "-".into())
        )
    };
    // The dut's UDP socket (receive peer) is only bound in the receive-peer case; otherwise the
    // dut's stack drops the datagrams (no listener; ICMP errors are rate limited).
    let tx_afp = timed(dur, |stop| {
        afp_sender(&gen, frames.clone(), stop).join().unwrap()
    });
    row(
        "tx: fp-engine AF_PACKET sendmmsg (sender CPU)",
        &tx_afp,
        None,
    );
    let tx_udp = timed(dur, |stop| udp_sender(&gen, stop, flows).join().unwrap());
    row("tx peer: kernel UDP sendto (sender CPU)", &tx_udp, None);
    println!(
        "  ratio tx kpps AF_PACKET / UDP socket: {:.2}; CPU/pkt UDP / AF_PACKET: {:.2}",
        tx_afp.kpps() / tx_udp.kpps(),
        tx_udp.ns_per_packet() / tx_afp.ns_per_packet()
    );
    for n in [1usize, 2] {
        let ports = if n == 1 {
            vec![dut.enter(|| AfPacketPort::open("eth0", &AfPacketConfig::default()))??]
        } else {
            dut.enter(|| AfPacketPort::open_fanout("eth0", &AfPacketConfig::default(), n))??
        };
        let (tx, rx) = timed(dur, |stop| {
            let recv = afp_receivers(&dut, ports, stop.clone());
            let tx = afp_sender(&gen, frames.clone(), stop).join().unwrap();
            let rx: Vec<(Side, u64)> = recv.into_iter().map(|h| h.join().unwrap()).collect();
            (tx, rx)
        });
        let total = Side {
            packets: rx.iter().map(|r| r.0.packets).sum(),
            secs: rx.iter().map(|r| r.0.secs).fold(0.0, f64::max),
            cpu_ns: rx.iter().map(|r| r.0.cpu_ns).sum(),
        };
        let drops = rx.iter().map(|r| r.1).sum();
        row(
            &format!("rx: TPACKET_V3 ring, {n} socket(s) (receiver CPU)"),
            &total,
            Some(drops),
        );
        println!(
            "  offered by the AF_PACKET sender: {:.0} kpps; per socket: {:?}",
            tx.kpps(),
            rx.iter().map(|r| r.0.packets).collect::<Vec<_>>()
        );
    }
    // Receive peer: the kernel's UDP socket on the dut, fed by the same sender.
    let sock = dut.enter(|| UdpSocket::bind((DUT_IP, 9000)))??;
    sock.set_read_timeout(Some(Duration::from_millis(20)))?;
    let (tx, rx_udp) = timed(dur, |stop| {
        let s = sock.try_clone().unwrap();
        let st = stop.clone();
        let h = std::thread::spawn(move || {
            fp_engine::sys::pin_to_cpu(1);
            let mut buf = [0u8; 2048];
            let (t0, c0) = (Instant::now(), thread_cpu_ns());
            let mut n = 0u64;
            while !st.load(Ordering::Relaxed) {
                if s.recv(&mut buf).is_ok() {
                    n += 1;
                }
            }
            Side {
                packets: n,
                secs: t0.elapsed().as_secs_f64(),
                cpu_ns: thread_cpu_ns() - c0,
            }
        });
        let tx = afp_sender(&gen, frames.clone(), stop).join().unwrap();
        (tx, h.join().unwrap())
    });
    row(
        "rx peer: kernel UDP socket recv (receiver CPU)",
        &rx_udp,
        None,
    );
    println!("  offered: {:.0} kpps", tx.kpps());
    Ok(())
}

/// Run `f` with a flag that is raised after `dur`.
fn timed<R>(dur: Duration, f: impl FnOnce(Arc<AtomicBool>) -> R) -> R {
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let h = std::thread::spawn(move || {
        std::thread::sleep(dur);
        s2.store(true, Ordering::Relaxed);
    });
    let r = f(stop);
    h.join().unwrap();
    r
}
