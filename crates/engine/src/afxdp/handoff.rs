//! Handing an interface's AF_XDP sockets to another process, and going on with them there.
//!
//! A queue binds one AF_XDP socket, and a closed socket frees its queue only after an RCU grace
//! period; detaching an XDP program and attaching another costs more. A successor that closes
//! and opens again leaves the queue unserved for tens of milliseconds. Handed over, nothing is
//! closed or bound: the predecessor passes (with `SCM_RIGHTS`) each socket, the memory file of
//! its UMEM and, once per interface, the XDP program, its maps and its link; the successor maps
//! the same rings and frames and goes on where the predecessor stopped. Frames that arrive in
//! between wait on the rx ring.
//!
//! Each frame of the UMEM is, at any moment, on one of the four rings, in the kernel between two
//! of them, or with user space: on the free tx list or waiting to go back to the fill ring. The
//! rings stay as they are; the description carries the two lists, so the successor owns exactly
//! the frames the predecessor owned.
//!
//! The description (tag byte, then fields, little-endian):
//! - `I` interface: name, steering (0: VIPs, 1: all), XDP mode (0: native, 1: generic); five
//!   descriptors (program, VIP map, socket map, counters, link).
//! - `S` socket: interface, queue, frames, frame size, ring size (u32 each), UMEM bytes (u64),
//!   UMEM pages (0: 2 MiB, 1: transparent, 2: normal), why zero-copy was refused (empty: it was
//!   not), the free tx frames and the frames to refill (u32 count, u64 each); two descriptors
//!   (socket, UMEM file).
//! - `P` interface the predecessor made promiscuous (undone by whoever holds it last).

use super::{assign, sys, AfXdpInfo, AfXdpPort, UmemPages};
use crate::live::{
    put_str, put_u64s, Capture, Handoff, HandoffReader, LiveControl, LiveError, LiveSpec, Opened,
};
use crate::port::{Port, PortStats};
use fp_ebpf::xsk::{ModeChoice, Steering, XskRedirect};
use fp_ebpf::XdpMode;
use std::io;
use std::sync::Arc;

/// Add port `p` (and, the first time, its interface's XDP program) to `to`.
pub(super) fn put_port(p: &AfXdpPort, to: &mut Handoff) -> io::Result<()> {
    let ifname = &p.info.ifname;
    let key = format!("afxdp:{ifname}");
    if !to.shared.contains(&key) {
        let fds = p.redirect.hand_off().map_err(io::Error::other)?;
        to.bytes.push(b'I');
        put_str(&mut to.bytes, ifname);
        to.bytes.push(match p.redirect.steering() {
            Steering::Vips => 0,
            Steering::All => 1,
        });
        to.bytes.push(match p.info.xdp_mode {
            XdpMode::Native => 0,
            XdpMode::Generic => 1,
        });
        to.fds.extend(fds);
        to.shared.push(key);
    }
    let (sock, umem) = (p.xsk.dup_fd()?, p.xsk.umem().dup_file()?);
    let b = &mut to.bytes;
    b.push(b'S');
    put_str(b, ifname);
    for v in [
        p.info.queue,
        p.info.frames,
        p.info.frame_size,
        p.xsk.rx.size(),
    ] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&(p.xsk.umem().len() as u64).to_le_bytes());
    b.push(match p.info.umem_pages {
        UmemPages::HugeTlb => 0,
        UmemPages::Transparent => 1,
        UmemPages::Normal => 2,
    });
    put_str(b, p.info.zero_copy_refused.as_deref().unwrap_or(""));
    put_u64s(b, &p.tx_free);
    put_u64s(b, &p.refill);
    to.fds.push(sock);
    to.fds.push(umem);
    Ok(())
}

/// One interface's program, as handed over.
struct Program {
    ifname: String,
    redirect: Arc<XskRedirect>,
    mode: XdpMode,
}

/// Go on with the sockets of `handoff` for `spec` (see [`crate::live::PortDriver::adopt`]).
pub(super) fn adopt(spec: &LiveSpec, handoff: Handoff) -> Result<Opened, LiveError> {
    let all = spec.interfaces.join(",");
    let open_err = |interface: &str, message: String| LiveError::Open {
        interface: interface.to_string(),
        message,
    };
    let bad = |e: io::Error| open_err(&all, format!("reading the sockets handed over: {e}"));
    let want = match spec.capture {
        Capture::Destinations(_) => Steering::Vips,
        Capture::All => Steering::All,
    };
    let mut r = HandoffReader::new(handoff);
    let mut programs: Vec<Program> = Vec::new();
    let mut socks: Vec<AfXdpPort> = Vec::new();
    // What the predecessor made promiscuous (its records come first): this process undoes it
    // when it stops, or, should taking the ports fail, now (a fresh open sets it again).
    let mut control = LiveControl::new(Vec::new(), Vec::new());
    // Every error below drops what was taken so far: the programs detach, the sockets close.
    while let Some(tag) = r.tag() {
        match tag {
            b'I' => {
                let ifname = r.str().map_err(bad)?;
                let steering = match r.u8().map_err(bad)? {
                    0 => Steering::Vips,
                    _ => Steering::All,
                };
                let mode = match r.u8().map_err(bad)? {
                    0 => XdpMode::Native,
                    _ => XdpMode::Generic,
                };
                let fds = (0..5).map(|_| r.fd()).collect::<io::Result<Vec<_>>>();
                let fds = fds.map_err(bad)?;
                let ifindex = fp_ebpf::ifindex(&ifname);
                // Wrapped first, so that refusing it below detaches it.
                let redirect =
                    XskRedirect::adopt(fds, steering, *ifindex.as_ref().unwrap_or(&0), mode)
                        .map_err(|e| open_err(&ifname, format!("taking its XDP program: {e}")))?;
                if let Err(e) = ifindex {
                    return Err(open_err(&ifname, format!("no such interface: {e}")));
                }
                if steering != want {
                    return Err(open_err(
                        &ifname,
                        format!("the program handed over steers {steering:?}, this needs {want:?}"),
                    ));
                }
                let mode_wanted = match spec.xdp_mode {
                    ModeChoice::Auto => mode,
                    ModeChoice::Native => XdpMode::Native,
                    ModeChoice::Generic => XdpMode::Generic,
                };
                if mode != mode_wanted {
                    return Err(open_err(
                        &ifname,
                        format!("the program handed over runs in {mode} mode, this asks for {mode_wanted}"),
                    ));
                }
                programs.push(Program {
                    ifname,
                    redirect: Arc::new(redirect),
                    mode,
                });
            }
            b'S' => {
                let ifname = r.str().map_err(bad)?;
                let (queue, frames, frame_size, ring_size) = (
                    r.u32().map_err(bad)?,
                    r.u32().map_err(bad)?,
                    r.u32().map_err(bad)?,
                    r.u32().map_err(bad)?,
                );
                let umem_len = r.u64().map_err(bad)? as usize;
                let umem_pages = match r.u8().map_err(bad)? {
                    0 => UmemPages::HugeTlb,
                    1 => UmemPages::Transparent,
                    _ => UmemPages::Normal,
                };
                let refused = r.str().map_err(bad)?;
                let tx_free = r.u64s().map_err(bad)?;
                let refill = r.u64s().map_err(bad)?;
                let (sock, file) = (r.fd().map_err(bad)?, r.fd().map_err(bad)?);
                let Some(prog) = programs.iter().find(|p| p.ifname == ifname) else {
                    return Err(open_err(
                        &ifname,
                        "a socket handed over without its program".into(),
                    ));
                };
                if !frame_size.is_power_of_two()
                    || !ring_size.is_power_of_two()
                    || umem_len != frames as usize * frame_size as usize
                {
                    return Err(open_err(
                        &ifname,
                        "a socket handed over with a bad layout".into(),
                    ));
                }
                let sock_err = |op: &str, e: io::Error| {
                    open_err(
                        &ifname,
                        format!("taking the socket of queue {queue}: {op}: {e}"),
                    )
                };
                let umem = sys::Umem::from_fd(file, umem_len, umem_pages)
                    .map_err(|e| sock_err("mapping its UMEM", e))?;
                let xsk = sys::Xsk::adopt(sock, umem, ring_size)
                    .map_err(|e| sock_err("mapping its rings", e))?;
                let info = AfXdpInfo {
                    ifname: ifname.clone(),
                    ifindex: prog.redirect.link().map_or(0, |l| l.ifindex()),
                    queue,
                    xdp_mode: prog.mode,
                    zero_copy: xsk.zero_copy(),
                    zero_copy_refused: (!refused.is_empty()).then_some(refused),
                    umem_pages,
                    frames,
                    frame_size,
                };
                socks.push(AfXdpPort {
                    name: format!("afxdp:{ifname}:{queue}"),
                    info,
                    xsk,
                    redirect: prog.redirect.clone(),
                    tx_free,
                    refill,
                    frame_mask: !(frame_size as u64 - 1),
                    stats: PortStats::default(),
                    last_ts: 0,
                    handed: false,
                });
            }
            b'P' => control.promisc_set.push(r.str().map_err(bad)?),
            t => {
                return Err(open_err(
                    &all,
                    format!(
                        "the sockets handed over carry an unknown record {:?}",
                        t as char
                    ),
                ))
            }
        }
    }
    if let Some(p) = programs
        .iter()
        .find(|p| !spec.interfaces.contains(&p.ifname))
    {
        return Err(open_err(
            &p.ifname,
            "handed over, but this process does not serve it".into(),
        ));
    }
    let mut per_if = Vec::with_capacity(spec.interfaces.len());
    for ifname in &spec.interfaces {
        let (mut mine, rest): (Vec<_>, Vec<_>) =
            socks.into_iter().partition(|s| &s.info.ifname == ifname);
        socks = rest;
        mine.sort_by_key(|s| s.info.queue);
        // One socket per queue the interface has now (its channels may have changed since).
        let queues = super::rx_queue_count(ifname)
            .map_err(|e| open_err(ifname, format!("reading its queue count: {e}")))?
            .max(1);
        if mine.len() != queues as usize
            || mine
                .iter()
                .enumerate()
                .any(|(q, s)| s.info.queue != q as u32)
        {
            return Err(open_err(
                ifname,
                format!(
                    "the {} socket(s) handed over do not cover its {queues} queue(s)",
                    mine.len()
                ),
            ));
        }
        per_if.push(mine);
    }
    let workers = per_if
        .iter()
        .map(Vec::len)
        .min()
        .unwrap_or(1)
        .min(spec.workers.max(1));
    if let Capture::Destinations(d) = &spec.capture {
        for p in &programs {
            p.redirect
                .set_vips(d)
                .map_err(|source| LiveError::Destinations {
                    map: "XDP destination map",
                    source,
                })?;
        }
    }
    let mut ports: Vec<Vec<Box<dyn Port>>> = (0..workers).map(|_| Vec::new()).collect();
    let mut info = String::new();
    let counts: Vec<String> = per_if.iter().map(|s| s.len().to_string()).collect();
    for (ifname, socks) in spec.interfaces.iter().zip(per_if) {
        if info.is_empty() {
            info = socks[0].info().to_string();
        }
        assign(spec, ifname, socks, &mut ports, &mut control)?;
    }
    let description = format!(
        "AF_XDP on {}: {workers} worker(s) over {} queue(s), sockets taken over from the \
         predecessor{}; {info}",
        spec.interfaces.join(","),
        counts.join("/"),
        if spec.capture == Capture::All {
            ", every frame steered to the sockets"
        } else {
            ""
        }
    );
    Ok(Opened {
        ports,
        control,
        description,
    })
}
