//! `--parts latency`: what streaming lookups add to a frame's latency when traffic is light.
//!
//! ```text
//!   snd eth0 10.77.0.1 ──veth── p0 ┐ sw: `flowplane switch --ports p0,p1 --workers 1 ┌ p1 ──veth── rcv eth0 10.77.0.2
//!   (UDP client: one request       │      --gather G`                                │   (UDP echo server)
//!    in flight, then a pause)      ┘                                                 ┘
//! ```
//!
//! A worker that gathers holds a burst only when it filled the whole receive burst (more frames
//! waiting); light traffic never does, so each frame should wait for nothing. Measured: the round
//! trip of a UDP request and its echo through the switch (each crosses it twice), one request in
//! flight and a pause after each reply, with the default gather (256 frames) and with 1 (every
//! burst switched alone), on both drivers, in alternated rounds with a fresh switch process each.
//! Percentiles pool every round's round trips. With AF_PACKET a frame waits in its socket's
//! receive block until the block's retire timer fires (`TPACKET_V3`), and the phase between the
//! two ports' timers, fixed for a process's life, sets most of the round trip.

use crate::{Record, Report};
use anyhow::{bail, Context, Result};
use fp_testnet::{Netns, TestNet};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SND_IP: &str = "10.77.0.1";
const RCV_IP: &str = "10.77.0.2";
const ECHO_PORT: u16 = 7007;
/// The pause after each reply: a few thousand frames per second at most, none queued.
const GAP: Duration = Duration::from_micros(200);
/// Requests before the measured ones: ARP, the switch's learning, warm caches.
const WARMUP: usize = 200;

struct Bed {
    net: TestNet,
    snd: Netns,
    rcv: Netns,
    sw: Netns,
}

fn bed() -> Result<Bed> {
    let (net, [snd, rcv, sw], se, re) = super::veth_bed("bench-swlat")?;
    for (l, ip) in [(&se, SND_IP), (&re, RCV_IP)] {
        l.addr_add(&format!("{ip}/24"))?;
        // AF_XDP cannot complete partial checksums: the hosts send complete ones.
        l.tx_checksum_off()?;
    }
    Ok(Bed { net, snd, rcv, sw })
}

/// One case: a fresh switch with `gather` on `driver`, `requests` round trips (after the
/// warm-up). The round trips in nanoseconds, and the requests without a reply.
fn measure(b: &Bed, driver: &str, gather: usize, requests: usize) -> Result<(Vec<u64>, usize)> {
    let exe = crate::flowplane_binary()?;
    let state = b.net.dir("switch-state")?;
    let _ = std::fs::remove_file(fp_switch::carry::path_in(&state));
    let g = gather.to_string();
    let p =
        b.sw.cmd([
            exe.to_str().context("executable path")?,
            "switch",
            "--ports",
            "p0,p1",
            "--driver",
            driver,
            "--workers",
            "1",
            "--no-pin",
            "--gather",
            &g,
            "--state-dir",
            state.to_str().context("state directory path")?,
        ])
        .spawn()?;
    p.wait_log("flowplane: ready", Duration::from_secs(20))
        .with_context(|| format!("the switch did not start:\n{}", p.log()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop_srv = stop.clone();
    let server = b.rcv.spawn_thread(move || -> Result<()> {
        let s = UdpSocket::bind((RCV_IP, ECHO_PORT))?;
        s.set_read_timeout(Some(Duration::from_millis(50)))?;
        let mut buf = [0u8; 64];
        while !stop_srv.load(Ordering::Relaxed) {
            if let Ok((n, from)) = s.recv_from(&mut buf) {
                s.send_to(&buf[..n], from)?;
            }
        }
        Ok(())
    })?;
    let client = b.snd.enter(move || -> Result<(Vec<u64>, usize)> {
        let s = UdpSocket::bind((SND_IP, 0))?;
        s.connect((RCV_IP, ECHO_PORT))?;
        s.set_read_timeout(Some(Duration::from_millis(100)))?;
        let (mut rtts, mut lost) = (Vec::with_capacity(requests), 0usize);
        let mut buf = [0u8; 64];
        for seq in 0..(WARMUP + requests) as u32 {
            // 18 bytes of payload: a 60-byte frame.
            let mut req = [0u8; 18];
            req[..4].copy_from_slice(&seq.to_be_bytes());
            let t = Instant::now();
            s.send(&req)?;
            let got = loop {
                match s.recv(&mut buf) {
                    Ok(n) if n == req.len() && buf[..4] == seq.to_be_bytes() => break true,
                    Ok(_) => continue, // a late reply to an earlier request
                    Err(_) => break false,
                }
            };
            let rtt = t.elapsed().as_nanos() as u64;
            if seq as usize >= WARMUP {
                if got {
                    rtts.push(rtt);
                } else {
                    lost += 1;
                }
            }
            std::thread::sleep(GAP);
        }
        Ok((rtts, lost))
    })?;
    stop.store(true, Ordering::Relaxed);
    let served = server
        .join()
        .map_err(|_| anyhow::anyhow!("echo server panicked"))?;
    p.signal(libc::SIGTERM);
    p.wait(Duration::from_secs(10))?;
    if !p.log().contains("shutting down") {
        bail!("the switch did not run to the end:\n{}", p.log());
    }
    served.context("echo server")?;
    client
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1));
    sorted.get(i).map_or(f64::NAN, |&v| v as f64 / 1e3)
}

/// Run the part: `rounds` alternated rounds of `requests` round trips per case.
pub fn run(rep: &mut Report, rounds: usize, requests: usize) -> Result<()> {
    rep.note(&format!(
        "latency: UDP request/echo through a 2-port switch (one worker, not pinned), one request \
         in flight and a {} us pause after each reply; {requests} requests per case and round \
         after {WARMUP} of warm-up, {rounds} alternated rounds, a fresh switch each",
        GAP.as_micros()
    ));
    let b = bed()?;
    for driver in ["af_packet", "af_xdp"] {
        let gathers = [super::STREAM_GATHER, 1];
        let mut rtts: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
        let mut lost = [0usize; 2];
        for round in 0..rounds.max(1) {
            for k in 0..2 {
                let j = if round % 2 == 0 { k } else { 1 - k };
                let (v, l) = measure(&b, driver, gathers[j], requests)
                    .with_context(|| format!("{driver}, gather {}", gathers[j]))?;
                rtts[j].extend(v);
                lost[j] += l;
            }
        }
        for v in &mut rtts {
            v.sort_unstable();
        }
        let total = requests * rounds.max(1);
        for (case, p) in [("live_latency_p50", 0.5), ("live_latency_p99", 0.99)] {
            rep.add(
                Record::lower(case, percentile(&rtts[0], p), "us")
                    .param("driver", driver)
                    .param("gather_frames", gathers[0])
                    .param("requests", total)
                    .param("lost", lost[0])
                    .param("peer_lost", lost[1])
                    .param(
                        "peer_config",
                        "the same switch with --gather 1 (every receive burst switched alone), \
                         alternated rounds",
                    )
                    .peer("gather_1", percentile(&rtts[1], p)),
            )?;
        }
    }
    Ok(())
}
