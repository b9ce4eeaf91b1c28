//! Step 1, for each packet of the burst: drop frames for another host, parse, take in fragments
//! redirected by another balancer and redirect those another balancer owns (a cluster), hold or
//! forward non-first fragments, find the flow (the quoted one for ICMP errors) and its VIP, route
//! QUIC short-header packets by connection ID, and queue the rest for their connection lookup.

use super::emit::Emitter;
use super::{Pending, Scratch, Tables};
use crate::frag::{FragAction, Piece};
use crate::snapshot::{QuicMiss, Snapshot};
use crate::stats::Outcome;
use fp_pipeline::packet::Packet;
use fp_wire::ip::IpProtocol;
use fp_wire::tcp::TcpFlags;
use fp_wire::{FlowKey, L4Kind, PacketSummary};

/// Step 1 for one packet: parse, match a VIP, route fragments; a packet that needs its
/// connection looked up is queued in `scratch.pending` with its key.
#[inline(always)]
pub(super) fn classify(
    mut p: Packet,
    out: &mut Emitter<'_>,
    tables: &mut Tables,
    scratch: &mut Scratch,
    now_ns: u64,
) {
    let snap = out.snap;
    let stats = out.stats;
    // On a live interface, a unicast frame to another MAC reaches us only when a bridge floods it
    // (e.g. to a failed balancer's address): forwarding it would duplicate it.
    if let (Some(m), Some(dst)) = (snap.local_mac, p.data().get(..6)) {
        if dst[0] & 1 == 0 && dst != m.0 {
            out.drop(p, Outcome::OtherHost);
            return;
        }
    }
    // Used in place: copying the summary out of the result would re-read, as wide loads, fields
    // the parser has just stored one by one (a store-forwarding stall per packet).
    let mut parsed = PacketSummary::parse(p.data());
    let s = match &mut parsed {
        Ok(s) => s,
        Err(e) => {
            stats.parse_error(*e);
            out.pool.put(p);
            return;
        }
    };
    // Scale-out (Maglev §4.3): fragments meet on the balancer that owns their datagram.
    if let Some(c) = &snap.cluster {
        let mut redirected = false;
        if s.protocol == IpProtocol::GRE {
            if let Some(inner) = unwrap_redirect(&mut p, s, snap) {
                stats.count(Outcome::FragRedirectIn, 1);
                *s = inner;
                redirected = true;
            }
        }
        if s.is_fragment() && !redirected && snap.match_vip(s.dst(), None, s.protocol).is_some() {
            // An owner whose MAC is not yet resolved (e.g. just after start) cannot be reached:
            // the fragment is balanced here, where a router hashing by addresses sends its
            // datagram's other fragments too.
            let owner = c.owner(&s.three_tuple());
            if owner != c.me && c.reachable(owner) {
                out.redirect(c, owner, p, s);
                return;
            }
        }
    }
    if s.is_non_first_fragment() {
        non_first_fragment(p, s, out, tables, scratch, now_ns);
        return;
    }
    // The flow this packet belongs to: its own 5-tuple, or for an ICMP error the connection it
    // quotes, seen from the client's side.
    let icmp_error = s.is_icmp_error();
    let key = if icmp_error {
        match s.icmp_quoted(p.data()) {
            Ok(q) => q.flow_key().reversed(),
            Err(_) => s.flow_key(),
        }
    } else {
        s.flow_key()
    };
    let (dst, port, proto) = key_target(&key);
    let vip = if s.has_ports() || icmp_error {
        snap.match_vip(dst, Some(port), proto)
    } else {
        None
    };
    let Some(vip) = vip else {
        out.drop(p, Outcome::NonVip);
        return;
    };
    // QUIC VIPs: a short-header packet goes to the server its connection ID names, whatever its
    // addresses and ports (a client that moved keeps its server), with no connection entry.
    if let Some(q) = &snap.vips[vip as usize].quic {
        if s.l4 == L4Kind::Udp && s.fragment.is_none() {
            let l4 = s.l4_offset as usize;
            let payload = p.data().get(l4 + 8..l4 + s.l4_len as usize).unwrap_or(&[]);
            match q.backend(payload) {
                Ok(b) if snap.vips[vip as usize].serves(b) => {
                    stats.count(Outcome::QuicRouted, 1);
                    out.sample(l3_of(s), &key, b, crate::export::Why::ConnectionId);
                    out.packet(p, l3_of(s), vip, b, &key);
                    return;
                }
                Ok(_) | Err(QuicMiss::UnknownId) => stats.count(Outcome::QuicUnknownId, 1),
                Err(QuicMiss::NotShort) => {}
            }
        }
    }
    let slot = match &key {
        FlowKey::V4(k) => {
            scratch.keys4.push(k.to_bytes());
            scratch.keys4.len() - 1
        }
        FlowKey::V6(k) => {
            scratch.keys6.push(k.to_bytes());
            scratch.keys6.len() - 1
        }
    };
    // A SYN opens a connection and will need a Maglev selection in step 3: hash it now and
    // prefetch its table entry, which the burst's connection lookups would otherwise evict
    // before step 3 reads it.
    let i = scratch.pending.len();
    if s.tcp_flags.contains(TcpFlags::SYN) && !s.tcp_flags.intersects(TcpFlags::ACK) {
        let h = key.hash(out.seed);
        scratch.hashes[i] = h;
        scratch.syns |= 1 << i;
        snap.vips[vip as usize].prefetch_select(h);
    }
    let frag = s.fragment.map(|f| (f.ident, piece(s)));
    scratch.pkts.push(p);
    scratch.pending.push(Pending {
        key,
        vip,
        slot: slot as u16,
        l3: l3_of(s),
        frag,
    });
}

/// A non-first fragment: forwarded with its datagram's decision if the first fragment came
/// already, else held until it does.
#[inline]
fn non_first_fragment(
    p: Packet,
    s: &PacketSummary,
    out: &mut Emitter<'_>,
    tables: &mut Tables,
    scratch: &mut Scratch,
    now_ns: u64,
) {
    let (Some(fk), true) = (
        s.fragment_key(),
        out.snap.match_vip(s.dst(), None, s.protocol).is_some(),
    ) else {
        out.drop(p, Outcome::NonVip);
        return;
    };
    match tables
        .frags
        .non_first(&fk, p, piece(s), now_ns, &mut scratch.expired)
    {
        FragAction::Forward(d, p) => {
            out.stats.count(Outcome::FragForwarded, 1);
            out.packet(p, l3_of(s), d.vip, d.backend, &s.flow_key());
        }
        FragAction::Held => out.stats.count(Outcome::FragHeld, 1),
        FragAction::TableFull(p) => out.drop(p, Outcome::FragTableFull),
        FragAction::HoldFull(p) => out.drop(p, Outcome::FragHoldFull),
    }
}

/// A fragment another balancer redirected to this one (Maglev §4.3): GRE with recursion control
/// set, whose inner packet is a fragment to a VIP, addressed (outer and inner) to that VIP. The
/// outer IP and GRE headers are stripped in place (the Ethernet header moves up to the inner
/// packet) and the inner packet's summary is returned; anything else is left untouched (`None`).
fn unwrap_redirect(p: &mut Packet, s: &PacketSummary, snap: &Snapshot) -> Option<PacketSummary> {
    use fp_wire::encap::{decapsulate, InnerKind};
    if s.is_fragment() {
        return None;
    }
    let d = decapsulate(p.data(), s, 0).ok()?;
    if d.gre.is_none_or(|g| g.recursion == 0) || d.inner == InnerKind::Ethernet {
        return None;
    }
    let inner = PacketSummary::parse_ip(
        &p.data()[d.inner_range()],
        &fp_wire::summary::ParseOptions::DEFAULT,
    )
    .ok()?;
    if !inner.is_fragment()
        || inner.dst() != s.dst()
        || snap.match_vip(inner.dst(), None, inner.protocol).is_none()
    {
        return None;
    }
    let l2 = s.l3_offset as usize;
    let start = p.start();
    let new_start = start + d.inner_offset - l2;
    let ethertype: u16 = if d.inner == InnerKind::Ipv4 {
        0x0800
    } else {
        0x86DD
    };
    let buf = p.buffer();
    buf.copy_within(start..start + l2, new_start);
    buf[new_start + l2 - 2..new_start + l2].copy_from_slice(&ethertype.to_be_bytes());
    p.set_frame(new_start, l2 + d.inner_len);
    PacketSummary::parse(p.data()).ok()
}

/// Where a fragment's data lies in its datagram.
fn piece(s: &PacketSummary) -> Piece {
    let f = s.fragment.unwrap_or(fp_wire::FragmentInfo {
        ident: 0,
        offset: 0,
        more: false,
    });
    Piece {
        offset: f.offset as u32,
        len: (s.l3_end() as u32).saturating_sub(s.l4_offset as u32),
        more: f.more,
    }
}

/// Destination address, port and protocol of a flow key (what VIPs match on).
fn key_target(k: &FlowKey) -> (std::net::IpAddr, u16, fp_wire::ip::IpProtocol) {
    match k {
        FlowKey::V4(k) => (k.dst.into(), k.dst_port, k.protocol),
        FlowKey::V6(k) => (k.dst.into(), k.dst_port, k.protocol),
    }
}

/// The IP packet's place in a frame: (offset, end).
#[inline(always)]
pub(super) fn l3_of(s: &PacketSummary) -> (u16, u16) {
    (s.l3_offset, s.l3_end() as u16)
}
