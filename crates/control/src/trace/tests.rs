use super::*;
use fp_pipeline::craft::{self, Endpoints};
use fp_wire::ipv4::Ipv4Packet;

fn v4() -> Endpoints {
    Endpoints::new("198.51.100.7", 40000, "203.0.113.10", 80)
}

fn v6() -> Endpoints {
    Endpoints::new("2001:db8::7", 40000, "2001:db8::10", 80)
}

#[test]
fn probes_are_recognised() {
    let p = probe_payload(0x0102_0304_0506_0708);
    assert_eq!(p.len(), PROBE_LEN);
    assert_eq!(&p[..16], b"FLOWPLANE-TRACE1");
    for e in [v4(), v6()] {
        assert_eq!(
            probe_id(&craft::udp_with(&e, &p)),
            Some(0x0102_0304_0506_0708)
        );
        assert_eq!(
            probe_id(&craft::tcp_with(&e, &p)),
            Some(0x0102_0304_0506_0708)
        );
        // Trailing bytes after the id are allowed.
        let mut long = p.clone();
        long.extend_from_slice(b"anything");
        assert!(probe_id(&craft::udp_with(&e, &long)).is_some());
    }
    // One VLAN tag and two (QinQ).
    let f = craft::udp_with(&v4(), &p);
    let mut tagged = f[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    tagged.extend_from_slice(&f[12..]);
    assert_eq!(probe_id(&tagged), Some(0x0102_0304_0506_0708));
    let mut qinq = f[..12].to_vec();
    qinq.extend_from_slice(&[0x88, 0xa8, 0x00, 0x01, 0x81, 0x00, 0x00, 0x07]);
    qinq.extend_from_slice(&f[12..]);
    assert_eq!(probe_id(&qinq), Some(0x0102_0304_0506_0708));
}

#[test]
fn ordinary_packets_are_not_probes() {
    let p = probe_payload(7);
    // No payload (SYN, pure ACK), ordinary payloads, a near-miss of the magic.
    assert_eq!(probe_id(&craft::tcp(&v4(), true)), None);
    assert_eq!(probe_id(&craft::tcp(&v6(), false)), None);
    assert_eq!(probe_id(&craft::udp(&v4(), 1400)), None);
    assert_eq!(
        probe_id(&craft::tcp_with(
            &v4(),
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        )),
        None
    );
    let mut near = p.clone();
    near[15] = b'2';
    assert_eq!(probe_id(&craft::udp_with(&v4(), &near)), None);
    // The marker must be at the start of the payload.
    let mut shifted = vec![0u8];
    shifted.extend_from_slice(&p);
    assert_eq!(probe_id(&craft::udp_with(&v4(), &shifted)), None);
    // Magic beyond the IP datagram's end (in Ethernet padding) does not count.
    let mut f = craft::udp(&v4(), 0);
    f.extend_from_slice(&p);
    assert_eq!(probe_id(&f), None);
    // A non-first IPv4 fragment whose data happens to start with the magic.
    let mut frag = craft::udp_with(&v4(), &p);
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut frag[14..]);
        ip.set_frag(false, false, 1480);
        ip.fill_checksum();
    }
    assert_eq!(probe_id(&frag), None);
}

#[test]
fn truncated_and_random_frames_never_panic() {
    let f = craft::tcp_with(&v6(), &probe_payload(9));
    for n in 0..f.len() {
        assert_eq!(probe_id(&f[..n]), None, "prefix of {n} bytes");
    }
    // Random bytes behind valid-looking Ethernet/IP prefixes.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..20_000 {
        let len = (next() % 120) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if len > 14 && i % 2 == 0 {
            b[12] = if i % 4 == 0 { 0x08 } else { 0x86 };
            b[13] = if i % 4 == 0 { 0x00 } else { 0xdd };
        }
        let _ = probe_id(&b);
    }
}

#[test]
fn token_bucket() {
    let mut b = TokenBucket::new(10.0, 3);
    assert!(b.take(0) && b.take(0) && b.take(0));
    assert!(!b.take(0), "burst spent");
    assert!(!b.take(50_000_000), "half a token after 50 ms");
    assert!(b.take(100_000_000), "one token after 100 ms");
    assert!(!b.take(100_000_000));
    // Long idle refills to the burst, not beyond.
    for _ in 0..3 {
        assert!(b.take(10_000_000_000));
    }
    assert!(!b.take(10_000_000_000));
    // Time going backwards takes nothing and gives nothing.
    assert!(!b.take(5));
}
