//! Tests that run in the kernel: the assembler's instructions against a model (each program is
//! verified and executed with `BPF_PROG_TEST_RUN`), the verifier log on rejection, maps, the XDP
//! redirect program and the tc decapsulation program (against a model of its rules).
//!
//! They need root. Without it they fail and say why (they never silently pass).

use fp_ebpf::asm::{eval_alu64, eval_cond, Alu, Asm, Cond, Insn, Size, R0, R1, R10, R2};
use fp_ebpf::decap::{self, DecapConfig, TcDecap};
use fp_ebpf::xsk::{self, XskRedirect};
use fp_ebpf::{Error, Map, MapType, ProgType, Program};
use fp_pipeline::craft::{self, Endpoints};
use fp_wire::encap::{Encap, OuterIp, OuterL2, Tunnel};
use fp_wire::ethernet::MacAddr;
use proptest::prelude::*;
use std::net::IpAddr;

/// `CLOCK_MONOTONIC` in ns: the clock `bpf_ktime_get_ns` reads.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec that outlives the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn need_root() {
    if let Some(why) = fp_ebpf::privilege_problem() {
        panic!("this test loads eBPF programs and cannot run: {why}");
    }
}

/// Run a straight-line program (as a tc classifier) on a dummy packet and return r0.
fn run(insns: &[Insn]) -> u32 {
    let p = Program::load(ProgType::SchedCls, "fp_test", insns).expect("program loads");
    p.test_run(&[0u8; 64]).expect("test run").0
}

/// A program computing `a op b` (64-bit, register or immediate operand), returning the low or
/// the high half.
fn alu_prog(op: Alu, a: u64, b: u64, imm: bool, high: bool, wide: bool) -> Vec<Insn> {
    let mut s = Asm::new();
    s.ld_imm64(R0, a);
    if imm {
        if wide {
            s.alu64(op, R0, b as u32 as i32);
        } else {
            s.alu32(op, R0, b as u32 as i32);
        }
    } else {
        s.ld_imm64(R1, b);
        if wide {
            s.alu64(op, R0, R1);
        } else {
            s.alu32(op, R0, R1);
        }
    }
    if high {
        s.rsh64(R0, 32);
    }
    s.exit();
    s.finish().unwrap()
}

/// The model of 32-bit ALU operations: on the low halves, result zero-extended.
fn eval_alu32(op: Alu, a: u64, b: u64) -> u64 {
    let (x, y) = (a as u32, b as u32);
    (match op {
        Alu::Lsh => x.wrapping_shl(y & 31),
        Alu::Rsh => x.wrapping_shr(y & 31),
        Alu::Arsh => ((x as i32) >> (y & 31)) as u32,
        _ => eval_alu64(op, x as u64, y as u64) as u32,
    }) as u64
}

fn operand() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0u64..70,
        Just(0u64),
        Just(u64::MAX),
        Just(1u64 << 63),
        Just(0x8000_0000u64),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every ALU operation, 64 and 32 bits, register and immediate operand, equals the model.
    #[test]
    fn alu_matches_model(op in prop::sample::select(Alu::ALL.to_vec()), a in operand(), b in operand(),
                         imm in any::<bool>(), wide in any::<bool>()) {
        need_root();
        let mut b = b;
        if matches!(op, Alu::Lsh | Alu::Rsh | Alu::Arsh) {
            // The verifier rejects constant shifts beyond the width.
            b %= if wide { 64 } else { 32 };
        }
        if imm && matches!(op, Alu::Div | Alu::Mod) && b as u32 == 0 {
            b = 3; // division by a zero immediate is rejected by the verifier
        }
        // An immediate is 32 bits, sign-extended for 64-bit operations.
        let eff_b = if imm { b as u32 as i32 as i64 as u64 } else { b };
        let want = if wide { eval_alu64(op, a, eff_b) } else { eval_alu32(op, a, eff_b) };
        let lo = run(&alu_prog(op, a, b, imm, false, wide));
        let hi = run(&alu_prog(op, a, b, imm, true, wide));
        prop_assert_eq!(((hi as u64) << 32) | lo as u64, want, "{:?} {:#x} {:#x} imm={} wide={}", op, a, b, imm, wide);
    }

    /// Every jump condition, 64 and 32 bits, register and immediate operand, equals the model.
    #[test]
    fn jumps_match_model(c in prop::sample::select(Cond::ALL.to_vec()), a in operand(), b in operand(),
                         imm in any::<bool>(), wide in any::<bool>()) {
        need_root();
        let mut s = Asm::new();
        let taken = s.label();
        s.ld_imm64(R1, a);
        s.ld_imm64(R2, b);
        s.mov64(R0, 0);
        match (imm, wide) {
            (false, true) => s.jmp(c, R1, R2, taken),
            (false, false) => s.jmp32(c, R1, R2, taken),
            (true, true) => s.jmp(c, R1, b as u32 as i32, taken),
            (true, false) => s.jmp32(c, R1, b as u32 as i32, taken),
        }
        s.exit();
        s.bind(taken);
        s.mov64(R0, 1);
        s.exit();
        let eff_b = if imm { b as u32 as i32 as i64 as u64 } else { b };
        let want = if wide {
            eval_cond(c, a, eff_b)
        } else {
            // 32-bit compares look at the low halves; sign from bit 31.
            let (x, y) = (a as u32 as u64, eff_b as u32 as u64);
            match c {
                Cond::Sgt | Cond::Sge | Cond::Slt | Cond::Sle => {
                    eval_cond(c, a as u32 as i32 as i64 as u64, eff_b as u32 as i32 as i64 as u64)
                }
                _ => eval_cond(c, x, y),
            }
        };
        prop_assert_eq!(run(&s.finish().unwrap()), want as u32, "{:?} {:#x} {:#x}", c, a, b);
    }
}

/// Loads and stores of each size, register and immediate, at several stack offsets, and the byte
/// swaps, against little-endian semantics.
#[test]
fn memory_and_byte_order() {
    need_root();
    let pattern = 0x0123_4567_89ab_cdefu64;
    let bytes = pattern.to_le_bytes();
    for (size, n) in [(Size::B, 1), (Size::H, 2), (Size::W, 4), (Size::DW, 8)] {
        for off in [0usize, 1, 2, 4, 6] {
            // The verifier requires aligned stack accesses.
            if off + n > 8 || off % n != 0 {
                continue;
            }
            let mut s = Asm::new();
            s.ld_imm64(R1, pattern);
            s.store(Size::DW, R10, -8, R1);
            s.load(size, R0, R10, -8 + off as i16);
            s.exit();
            let mut want = [0u8; 8];
            want[..n].copy_from_slice(&bytes[off..off + n]);
            let want = u64::from_le_bytes(want) as u32;
            assert_eq!(run(&s.finish().unwrap()), want, "load {size:?} at +{off}");
        }
        // store_imm then read back as u64 (sign extension only matters for DW).
        let mut s = Asm::new();
        s.store_imm(Size::DW, R10, -8, 0);
        s.store_imm(size, R10, -8, -2);
        s.load(Size::DW, R0, R10, -8);
        s.exit();
        let want = match size {
            Size::B => 0xfe,
            Size::H => 0xfffe,
            Size::W | Size::DW => 0xffff_fffe,
        };
        assert_eq!(run(&s.finish().unwrap()), want, "store_imm {size:?}");
    }
    for (bits, want) in [(16, 0xefcdu32), (32, 0xefcd_ab89)] {
        let mut s = Asm::new();
        s.ld_imm64(R0, pattern);
        s.to_be(R0, bits);
        s.exit();
        assert_eq!(run(&s.finish().unwrap()), want, "be{bits}");
    }
    let mut s = Asm::new();
    s.ld_imm64(R0, pattern);
    s.to_be(R0, 64);
    s.rsh64(R0, 32);
    s.exit();
    assert_eq!(run(&s.finish().unwrap()), 0xefcd_ab89);
    let mut s = Asm::new();
    s.mov64(R0, 5);
    s.neg64(R0);
    s.exit();
    assert_eq!(run(&s.finish().unwrap()), (-5i32) as u32);
}

/// A program reading the packet without a bounds check is rejected, and the error carries the
/// verifier's explanation.
#[test]
fn verifier_log_in_error() {
    need_root();
    let mut s = Asm::new();
    s.load(Size::W, R2, R1, 76); // skb->data
    s.load(Size::W, R0, R2, 0); // no check against data_end
    s.exit();
    let e = Program::load(ProgType::SchedCls, "fp_bad", &s.finish().unwrap()).unwrap_err();
    let Error::Verifier { log, .. } = &e else {
        panic!("expected a verifier error, got {e}");
    };
    assert!(log.contains("invalid access to packet"), "log: {log}");
    assert!(e.to_string().contains("verifier log"), "{e}");
}

#[test]
fn hash_map_operations() {
    need_root();
    let m = Map::create(MapType::Hash, 4, 8, 16, "fp_test_map").unwrap();
    assert_eq!(m.lookup(&1u32.to_ne_bytes()).unwrap(), None);
    m.update(
        &1u32.to_ne_bytes(),
        &7u64.to_ne_bytes(),
        fp_ebpf::map::Update::Any,
    )
    .unwrap();
    m.update(
        &2u32.to_ne_bytes(),
        &8u64.to_ne_bytes(),
        fp_ebpf::map::Update::Any,
    )
    .unwrap();
    assert_eq!(
        m.lookup(&1u32.to_ne_bytes()).unwrap(),
        Some(7u64.to_ne_bytes().to_vec())
    );
    let mut keys = m.keys().unwrap();
    keys.sort();
    assert_eq!(
        keys,
        vec![1u32.to_ne_bytes().to_vec(), 2u32.to_ne_bytes().to_vec()]
    );
    assert!(m
        .update(
            &3u32.to_ne_bytes(),
            &1u64.to_ne_bytes(),
            fp_ebpf::map::Update::Exist
        )
        .is_err());
    assert!(m.delete(&1u32.to_ne_bytes()).unwrap());
    assert!(!m.delete(&1u32.to_ne_bytes()).unwrap());
    // Wrong sizes are refused before the kernel sees them.
    assert!(m.lookup(&[1, 2]).is_err());
    assert!(m
        .update(&1u32.to_ne_bytes(), &[0u8; 4], fp_ebpf::map::Update::Any)
        .is_err());
    assert_eq!(m.info().unwrap().name, "fp_test_map");
}

// ---------- XDP redirect program ----------

fn udp_frame(src: &str, dst: &str) -> Vec<u8> {
    craft::udp(&Endpoints::new(src, 1000, dst, 53), 20)
}

fn tag(frame: &[u8], tpid: u16, vid: u16) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&tpid.to_be_bytes());
    f.extend_from_slice(&vid.to_be_bytes());
    f.extend_from_slice(&frame[12..]);
    f
}

/// Split a test run's output into the receive stamp and the frame. `BPF_PROG_TEST_RUN` returns
/// the packet from `data_meta` on, so a frame the program stamped comes back with the
/// [`xsk::META_LEN`]-byte stamp in front. Checks that the frame itself is unchanged and that the
/// stamp is a `CLOCK_MONOTONIC` reading taken during the run (`before..=after`).
fn unstamp(name: &str, out: &[u8], frame: &[u8], before: u64, after: u64) -> Option<u64> {
    if out.len() == frame.len() {
        assert_eq!(out, frame, "{name}: the program never writes the frame");
        return None;
    }
    assert_eq!(out.len(), frame.len() + xsk::META_LEN, "{name}: {out:02x?}");
    assert_eq!(
        &out[xsk::META_LEN..],
        frame,
        "{name}: the program never writes the frame"
    );
    let stamp = u64::from_ne_bytes(out[..xsk::META_LEN].try_into().unwrap());
    assert!(
        (before..=after).contains(&stamp),
        "{name}: stamp {stamp} outside the run {before}..={after}"
    );
    Some(stamp)
}

#[test]
fn xsk_redirect_program_outcomes() {
    need_root();
    let r = XskRedirect::load(16, 4).unwrap();
    let vip4: IpAddr = "203.0.113.10".parse().unwrap();
    let vip6: IpAddr = "2001:db8::10".parse().unwrap();
    assert_eq!(r.set_vips(&[vip4, vip6]).unwrap(), (2, 0));
    assert_eq!(r.vips().unwrap(), vec![vip4, vip6]);
    let p = r.program();
    let pass = fp_ebpf::helper::xdp::PASS as u32;

    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.extend_from_slice(&[0u8; 28]);
    // (name, frame, stamped: steered towards a socket, so it carries a receive stamp)
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        ("arp", arp, false),
        ("v4 other", udp_frame("10.0.0.1", "10.0.0.2"), false),
        ("v4 vip", udp_frame("10.0.0.1", "203.0.113.10"), true),
        ("v6 vip", udp_frame("2001:db8::1", "2001:db8::10"), true),
        ("v6 other", udp_frame("2001:db8::1", "2001:db8::11"), false),
        (
            "dot1q vip",
            tag(&udp_frame("10.0.0.1", "203.0.113.10"), 0x8100, 5),
            true,
        ),
        (
            "qinq vip",
            tag(
                &tag(&udp_frame("10.0.0.1", "203.0.113.10"), 0x8100, 5),
                0x88a8,
                7,
            ),
            true,
        ),
        (
            "truncated ip",
            {
                let f = udp_frame("10.0.0.1", "203.0.113.10");
                f[..30].to_vec()
            },
            false,
        ),
    ];
    let mut last = 0;
    for (name, f, stamped) in &cases {
        let before = monotonic_ns();
        let (ret, out) = p.test_run(f).unwrap();
        let after = monotonic_ns();
        // No socket is bound in a test run: VIP frames fall back to XDP_PASS.
        assert_eq!(ret, pass, "{name}");
        let stamp = unstamp(name, &out, f, before, after);
        assert_eq!(stamp.is_some(), *stamped, "{name}: stamp {stamp:?}");
        if let Some(t) = stamp {
            assert!(t >= last, "{name}: stamps go forward");
            last = t;
        }
    }
    let s = r.stats().unwrap();
    assert_eq!(
        s,
        xsk::XskStats {
            not_ip: 1,
            not_vip: 2,
            to_socket: 0,
            no_socket: 4,
            malformed: 1,
        }
    );
    // Replacing the set: one kept, one removed, one added.
    let vip3: IpAddr = "198.51.100.1".parse().unwrap();
    assert_eq!(r.set_vips(&[vip4, vip3]).unwrap(), (1, 1));
    assert_eq!(r.vips().unwrap(), vec![vip3, vip4]);
    assert!(!r.add_vip(vip3).unwrap());
    assert!(r.remove_vip(vip3).unwrap());
    assert!(!r.remove_vip(vip3).unwrap());
}

/// The switch-port program steers every frame with an Ethernet header — ARP, broadcast,
/// non-IP, IP to any address — and counts only runts as malformed.
#[test]
fn xsk_steer_all_program_outcomes() {
    need_root();
    let r = XskRedirect::load_steering(xsk::Steering::All, 4, 4).unwrap();
    assert_eq!(r.steering(), xsk::Steering::All);
    let p = r.program();
    let pass = fp_ebpf::helper::xdp::PASS as u32;
    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.extend_from_slice(&[0u8; 28]);
    let mut lldp = vec![0x01, 0x80, 0xc2, 0, 0, 0x0e, 2, 0, 0, 0, 0, 1, 0x88, 0xcc];
    lldp.extend_from_slice(&[0u8; 46]);
    let frames: Vec<Vec<u8>> = vec![
        arp,
        lldp,
        udp_frame("10.0.0.1", "10.0.0.2"),
        udp_frame("2001:db8::1", "2001:db8::11"),
        tag(&udp_frame("10.0.0.1", "203.0.113.10"), 0x8100, 5),
        vec![0u8; 14],
    ];
    for f in &frames {
        // No socket is bound in a test run: the redirect falls back to XDP_PASS.
        let before = monotonic_ns();
        let (ret, out) = p.test_run(f).unwrap();
        let after = monotonic_ns();
        assert_eq!(ret, pass);
        assert!(
            unstamp("steer all", &out, f, before, after).is_some(),
            "every steered frame is stamped"
        );
    }
    let s = r.stats().unwrap();
    assert_eq!(
        s,
        xsk::XskStats {
            no_socket: frames.len() as u64,
            ..Default::default()
        },
        "every frame went to the redirect, none was parsed as IP or VIP"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Whatever the bytes, the program returns XDP_PASS (no socket bound), never writes the frame,
    /// and counts every frame exactly once.
    #[test]
    fn xsk_program_total_on_random_frames(frames in prop::collection::vec(
        (prop::collection::vec(any::<u8>(), 14..120), 0usize..5), 1..8)) {
        need_root();
        let r = XskRedirect::load(4, 1).unwrap();
        r.set_vips(&["10.1.2.3".parse().unwrap()]).unwrap();
        let mut stamped = 0u64;
        for (mut f, kind) in frames.clone() {
            // Steer some frames into the interesting ethertypes.
            match kind {
                1 => { f[12] = 0x08; f[13] = 0x00; }
                2 => { f[12] = 0x86; f[13] = 0xdd; }
                3 => { f[12] = 0x81; f[13] = 0x00; }
                // IPv4 to the VIP when the header fits (steered, so stamped).
                4 => {
                    f[12] = 0x08; f[13] = 0x00;
                    if let Some(d) = f.get_mut(30..34) { d.copy_from_slice(&[10, 1, 2, 3]); }
                }
                _ => {}
            }
            let (ret, out) = r.program().test_run(&f).unwrap();
            prop_assert_eq!(ret, fp_ebpf::helper::xdp::PASS as u32);
            // A frame to the VIP comes back behind its receive stamp; any other, as it was.
            let body = if out.len() == f.len() + xsk::META_LEN { &out[xsk::META_LEN..] } else { &out[..] };
            prop_assert_eq!(body, &f[..]);
            stamped += u64::from(out.len() != f.len());
        }
        let s = r.stats().unwrap();
        prop_assert_eq!(s.not_ip + s.not_vip + s.to_socket + s.no_socket + s.malformed,
                        frames.len() as u64);
        prop_assert_eq!(stamped, s.to_socket + s.no_socket, "exactly the steered frames are stamped");
    }
}

// ---------- tc VIP shield (AF_PACKET) ----------

/// The shield drops frames to a destination in its map (v4 and v6, untagged and with in-band
/// tags), lets everything else go on to the next tc program (`TCX_NEXT`), never changes a frame,
/// and passes truncated frames; the map follows `set_vips`.
#[test]
fn shield_program_outcomes() {
    need_root();
    use fp_ebpf::helper::tcx;
    use fp_ebpf::shield::{self, VipShield};
    let sh = VipShield::load(16).unwrap();
    let vip4: IpAddr = "203.0.113.10".parse().unwrap();
    let vip6: IpAddr = "2001:db8::10".parse().unwrap();
    assert_eq!(sh.set_vips(&[vip6, vip4]).unwrap(), (2, 0));
    assert_eq!(sh.vips().unwrap(), vec![vip4, vip6]);
    assert_eq!(sh.attachment(), None);
    let (next, drop) = (tcx::NEXT as u32, tcx::DROP as u32);

    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.extend_from_slice(&[0u8; 28]);
    let mut lldp = vec![0x01, 0x80, 0xc2, 0, 0, 0x0e, 2, 0, 0, 0, 0, 1, 0x88, 0xcc];
    lldp.extend_from_slice(&[0u8; 46]);
    let tcp4 = craft::tcp(&Endpoints::new("10.0.0.1", 4000, "203.0.113.10", 80), true);
    let tcp6 = craft::tcp(
        &Endpoints::new("2001:db8::1", 4000, "2001:db8::10", 80),
        true,
    );
    let dot1q = tag(&udp_frame("10.0.0.1", "203.0.113.10"), 0x8100, 5);
    let qinq = tag(
        &tag(&udp_frame("2001:db8::1", "2001:db8::10"), 0x8100, 5),
        0x88a8,
        7,
    );
    let cases: Vec<(&str, Vec<u8>, u32)> = vec![
        ("v4 vip udp", udp_frame("10.0.0.1", "203.0.113.10"), drop),
        ("v4 vip tcp", tcp4, drop),
        ("v6 vip udp", udp_frame("2001:db8::1", "2001:db8::10"), drop),
        ("v6 vip tcp", tcp6, drop),
        ("dot1q v4 vip", dot1q.clone(), drop),
        ("qinq v6 vip", qinq.clone(), drop),
        ("v4 other", udp_frame("10.0.0.1", "10.0.0.2"), next),
        (
            "v4 from the vip",
            udp_frame("203.0.113.10", "10.0.0.2"),
            next,
        ),
        ("v6 other", udp_frame("2001:db8::1", "2001:db8::11"), next),
        ("arp", arp, next),
        ("lldp", lldp, next),
        (
            "dot1q truncated in the ip header",
            dot1q[..30].to_vec(),
            next,
        ),
        ("qinq truncated in the inner tag", qinq[..20].to_vec(), next),
        (
            "qinq truncated in the ipv6 header",
            qinq[..60].to_vec(),
            next,
        ),
    ];
    for (name, f, want) in &cases {
        let (ret, out) = sh.program().test_run(f).unwrap();
        assert_eq!(ret, *want, "{name}");
        assert_eq!(&out, f, "{name}: the program never writes the frame");
    }
    assert_eq!(
        sh.stats().unwrap(),
        shield::ShieldStats {
            not_ip: 2,
            not_vip: 3,
            dropped: 6,
            malformed: 3,
        }
    );
    // A frame whose ethertype promises IPv4 but that ends inside the Ethernet payload: the
    // kernel's test run may refuse to build it; if it runs, the frame passes.
    let short = udp_frame("10.0.0.1", "203.0.113.10")[..20].to_vec();
    match sh.program().test_run(&short) {
        Ok((ret, _)) => assert_eq!(ret, next),
        Err(e) => assert_eq!(e.errno(), Some(libc_einval()), "{e}"),
    }

    // Replacing the set: the removed VIP's frames go on to the stack, the kept one's are dropped.
    assert_eq!(sh.set_vips(&[vip4]).unwrap(), (0, 1));
    let f6 = udp_frame("2001:db8::1", "2001:db8::10");
    assert_eq!(sh.program().test_run(&f6).unwrap().0, next);
    let f4 = udp_frame("10.0.0.1", "203.0.113.10");
    assert_eq!(sh.program().test_run(&f4).unwrap().0, drop);
    assert_eq!(sh.set_vips(&[]).unwrap(), (0, 1));
    assert_eq!(sh.program().test_run(&f4).unwrap().0, next);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, ..ProptestConfig::default() })]

    /// Whatever the bytes, the shield returns NEXT or DROP, never writes the frame, drops exactly
    /// the frames whose IPv4/IPv6 destination (after up to two tags) is in the map, and counts
    /// every frame once.
    #[test]
    fn shield_program_matches_model(frames in prop::collection::vec(
        (prop::collection::vec(any::<u8>(), 14..120), 0usize..6), 1..8)) {
        need_root();
        use fp_ebpf::helper::tcx;
        thread_local! {
            static SHIELD: fp_ebpf::shield::VipShield = {
                let s = fp_ebpf::shield::VipShield::load(4).unwrap();
                s.set_vips(&["10.1.2.3".parse().unwrap(), "2001:db8::7".parse().unwrap()]).unwrap();
                s
            };
        }
        let v6: [u8; 16] = "2001:db8::7".parse::<std::net::Ipv6Addr>().unwrap().octets();
        let mut run = 0u64;
        let before = SHIELD.with(|s| s.stats().unwrap());
        for (mut f, kind) in frames {
            match kind {
                1 => { f[12] = 0x08; f[13] = 0x00; if let Some(d) = f.get_mut(30..34) { d.copy_from_slice(&[10, 1, 2, 3]); } }
                2 => { f[12] = 0x86; f[13] = 0xdd; if let Some(d) = f.get_mut(38..54) { d.copy_from_slice(&v6); } }
                3 => { f[12] = 0x81; f[13] = 0x00; if f.len() > 17 { f[16] = 0x08; f[17] = 0x00; }
                       if let Some(d) = f.get_mut(34..38) { d.copy_from_slice(&[10, 1, 2, 3]); } }
                4 => { f[12] = 0x86; f[13] = 0xdd; }
                _ => {}
            }
            let want = shield_model(&f, &v6);
            let r = SHIELD.with(|s| s.program().test_run(&f));
            let l3_min = match (f[12], f[13]) { (0x08, 0x00) => 20, (0x86, 0xdd) => 40, _ => 0 };
            if f.len() < 14 + l3_min {
                // The kernel refuses to build an skb shorter than its ethertype's fixed header.
                prop_assert!(matches!(r, Err(ref e) if e.errno() == Some(libc_einval())), "{:?}", r);
                continue;
            }
            let (ret, out) = r.unwrap();
            run += 1;
            prop_assert_eq!(&out, &f);
            prop_assert_eq!(ret, if want { tcx::DROP as u32 } else { tcx::NEXT as u32 }, "{:02x?}", f);
        }
        let after = SHIELD.with(|s| s.stats().unwrap());
        let counted = (after.not_ip + after.not_vip + after.dropped + after.malformed)
            - (before.not_ip + before.not_vip + before.dropped + before.malformed);
        prop_assert_eq!(counted, run);
    }
}

/// The shield's rule, written independently of the program: drop when the destination address
/// after up to two 802.1Q/802.1ad tags is 10.1.2.3 or `v6`.
fn shield_model(f: &[u8], v6: &[u8; 16]) -> bool {
    let mut at = 12;
    for _ in 0..3 {
        let Some(t) = f.get(at..at + 2) else {
            return false;
        };
        match (t[0], t[1]) {
            (0x81, 0x00) | (0x88, 0xa8) if at < 20 => at += 4,
            (0x08, 0x00) => {
                return f
                    .get(at + 2..at + 22)
                    .is_some_and(|ip| ip[16..20] == [10, 1, 2, 3])
            }
            (0x86, 0xdd) => return f.get(at + 2..at + 42).is_some_and(|ip| &ip[24..40] == v6),
            _ => return false,
        }
    }
    false
}

/// Attaching to an interface that does not exist fails with an error naming it, through both
/// attachment kinds, and leaves the shield detached.
#[test]
fn shield_attach_to_a_missing_interface_is_refused_cleanly() {
    need_root();
    use fp_ebpf::shield::{AttachChoice, VipShield};
    let mut sh = VipShield::load(4).unwrap();
    for how in [AttachChoice::Auto, AttachChoice::Tcx, AttachChoice::Filter] {
        let e = sh.attach(999_999, how).unwrap_err();
        assert!(e.to_string().contains("ifindex 999999"), "{how:?}: {e}");
        assert_eq!(sh.attachment(), None);
    }
    sh.detach().unwrap();
}

// ---------- tc decapsulation program ----------

const SRC_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);

/// An encapsulated TCP SYN (destination MAC zero: in a test run the skb comes from the loopback
/// device, whose address is zero, so the frame counts as PACKET_HOST) and the frame the backend
/// should see after decapsulation.
fn tunnel_frame(inner_v6: bool, outer_v6: bool, tunnel: Tunnel) -> (Vec<u8>, Vec<u8>) {
    let e = if inner_v6 {
        Endpoints::new("2001:db8:c::1", 40000, "2001:db8::10", 80)
    } else {
        Endpoints::new("192.0.2.1", 40000, "203.0.113.10", 80)
    };
    let inner = craft::tcp(&e, true);
    let ip = &inner[14..];
    let (buf, start) = encapsulated(ip, outer_v6, tunnel);
    let frame = buf[start..].to_vec();
    let mut want = frame[..12].to_vec();
    want.extend_from_slice(if inner_v6 {
        &[0x86, 0xdd]
    } else {
        &[0x08, 0x00]
    });
    want.extend_from_slice(ip);
    (frame, want)
}

/// The IP packet `ip` encapsulated toward a test backend (destination MAC zero), in a buffer
/// with headroom to spare: the buffer and where the frame starts.
fn encapsulated(ip: &[u8], outer_v6: bool, tunnel: Tunnel) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; 256 + ip.len()];
    buf[256..].copy_from_slice(ip);
    let enc = Encap {
        l2: OuterL2 {
            src: SRC_MAC,
            dst: MacAddr::ZERO,
            vlan: None,
        },
        ip: if outer_v6 {
            OuterIp::V6 {
                src: "2001:db8:1::1".parse().unwrap(),
                dst: "2001:db8:1::2".parse().unwrap(),
                hop_limit: 64,
            }
        } else {
            OuterIp::V4 {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                ttl: 64,
            }
        },
        tunnel,
    };
    let end = buf.len();
    let start = enc.encapsulate(&mut buf, 256..end, 0x1234, 9).unwrap();
    (buf, start)
}

fn gre(key: Option<u32>, sequence: Option<u32>, checksum: bool, recursion: u8) -> Tunnel {
    Tunnel::Gre {
        key,
        sequence,
        checksum,
        recursion,
    }
}

#[test]
fn decap_strips_gre_and_ipip() {
    need_root();
    let d = TcDecap::load(DecapConfig::ALL).unwrap();
    let p = d.program();
    let mut n = 0;
    for inner_v6 in [false, true] {
        for outer_v6 in [false, true] {
            for t in [
                Tunnel::Ipip,
                Tunnel::GRE,
                gre(Some(0xdead_beef), None, false, 0),
                gre(Some(1), Some(2), false, 0),
                gre(None, None, false, 1), // a redirected fragment's recursion mark
            ] {
                let (frame, want) = tunnel_frame(inner_v6, outer_v6, t);
                let (ret, out) = p.test_run(&frame).unwrap();
                assert_eq!(ret, 0, "TC_ACT_OK");
                assert_eq!(out, want, "inner v6 {inner_v6}, outer v6 {outer_v6}, {t:?}");
                n += 1;
            }
        }
    }
    let s = d.stats().unwrap();
    assert_eq!(s.ipip + s.gre, n);
    assert_eq!(s.ipip, 4);
    assert_eq!((s.pass, s.unsupported, s.error), (0, 0, 0));
}

#[test]
fn decap_leaves_other_packets_alone() {
    need_root();
    let d = TcDecap::load(DecapConfig::ALL).unwrap();
    let p = d.program();
    let check = |name: &str, f: &[u8]| {
        let (ret, out) = p.test_run(f).unwrap();
        assert_eq!(ret, 0, "{name}");
        assert_eq!(out, f, "{name} must be untouched");
    };
    // Plain TCP to the VIP (L2 DSR), UDP, VXLAN.
    let mut plain = craft::tcp(&Endpoints::new("192.0.2.1", 1, "203.0.113.10", 80), true);
    plain[..6].fill(0);
    check("plain tcp", &plain);
    let vx = Tunnel::Vxlan {
        vni: 5,
        dst_port: 4789,
        inner_src: SRC_MAC,
        inner_dst: SRC_MAC,
        udp_checksum: false,
    };
    check("vxlan", &tunnel_frame(false, false, vx).0);
    // GRE with a checksum (not verified here, so not decapsulated).
    check(
        "gre csum",
        &tunnel_frame(false, false, gre(None, None, true, 0)).0,
    );
    // Another host's frame.
    let (mut f, _) = tunnel_frame(false, false, Tunnel::GRE);
    f[0] = 2;
    check("otherhost", &f);
    // Outer fragment (MF set).
    let (mut f, _) = tunnel_frame(false, false, Tunnel::GRE);
    f[20] |= 0x20;
    check("fragment", &f);
    // IPv4 options (IHL 6).
    let (mut f, _) = tunnel_frame(false, false, Tunnel::Ipip);
    f[14] = 0x46;
    check("ihl 6", &f);
    // GRE version 1 (PPTP), GRE carrying Ethernet (0x6558).
    let (mut f, _) = tunnel_frame(false, false, Tunnel::GRE);
    f[35] |= 1;
    check("gre v1", &f);
    let (mut f, _) = tunnel_frame(false, false, Tunnel::GRE);
    f[36..38].copy_from_slice(&[0x65, 0x58]);
    check("gre teb", &f);
    let s = d.stats().unwrap();
    assert_eq!(s.ipip + s.gre, 0);
    assert_eq!(s.unsupported, 3, "{s:?}"); // checksum, version, protocol type
                                           // Only GRE enabled: IPIP is left alone.
    let g = TcDecap::load(DecapConfig {
        gre: true,
        ipip: false,
    })
    .unwrap();
    let (f, _) = tunnel_frame(false, false, Tunnel::Ipip);
    assert_eq!(g.program().test_run(&f).unwrap().1, f);
    let (f, want) = tunnel_frame(false, false, Tunnel::GRE);
    assert_eq!(g.program().test_run(&f).unwrap().1, want);
}

/// A tunnel frame (outer IPv4, GRE or IPIP, destination MAC zero) carrying `inner` (an Ethernet
/// frame) with a second-chance option naming `named`; the outer header is IPv6 when the names
/// are.
fn marked_frame(inner: &[u8], tunnel: Tunnel, named: &[IpAddr]) -> Vec<u8> {
    let (mut buf, start) = encapsulated(&inner[14..], named[0].is_ipv6(), tunnel);
    let end = buf.len();
    let start = fp_wire::second_chance::insert(&mut buf, start, end, 14, named).unwrap();
    buf[start..].to_vec()
}

/// The inner frame a backend should see: the outer frame's MACs, the inner ethertype, the inner
/// IP packet.
fn inner_seen(outer: &[u8], inner: &[u8]) -> Vec<u8> {
    let mut want = outer[..12].to_vec();
    want.extend_from_slice(&inner[12..]);
    want
}

/// `f` as forwarded to its option's next backend: destination rewritten, `next` advanced, the
/// header checksum valid.
fn forwarded(f: &[u8]) -> Vec<u8> {
    let named = fp_wire::second_chance::find(&f[14..]).unwrap();
    let to = match named.next().unwrap() {
        IpAddr::V4(to) => to,
        IpAddr::V6(to) => {
            let mut want = f.to_vec();
            want[38..54].copy_from_slice(&to.octets());
            want[59] += 1;
            return want;
        }
    };
    let mut want = f.to_vec();
    want[30..34].copy_from_slice(&to.octets());
    want[37] += 1;
    let ihl = (want[14] & 0xF) as usize * 4;
    want[24..26].fill(0);
    let c = fp_wire::checksum::checksum(&want[14..14 + ihl]);
    want[24..26].copy_from_slice(&c.to_be_bytes());
    want
}

#[test]
fn decap_second_chance_delivers_or_forwards() {
    need_root();
    let d = TcDecap::load(DecapConfig::ALL).unwrap();
    let p = d.program();
    // A local listener and one connection to it: its tuple has an established socket here, any
    // other tuple to the port finds only the listener.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let cport = c.local_addr().unwrap().port();
    let (_server, _) = l.accept().unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let uport = udp.local_addr().unwrap().port();
    let one: [IpAddr; 1] = ["10.0.0.3".parse().unwrap()];

    let mut local = 0;
    for t in [Tunnel::GRE, Tunnel::Ipip] {
        // A SYN opens a connection here; a packet of the established connection is ours; so is a
        // datagram to a bound UDP port.
        let syn = craft::tcp(&Endpoints::new("192.0.2.1", 40000, "127.0.0.1", port), true);
        let est = craft::tcp(
            &Endpoints::new("127.0.0.1", cport, "127.0.0.1", port),
            false,
        );
        let dgram = craft::udp(&Endpoints::new("192.0.2.1", 40000, "127.0.0.1", uport), 16);
        for inner in [&syn, &est, &dgram] {
            let f = marked_frame(inner, t, &one);
            let (ret, out) = p.test_run(&f).unwrap();
            assert_eq!(ret, 0, "TC_ACT_OK for {t:?}");
            assert_eq!(out, inner_seen(&f, inner), "delivered here, {t:?}");
            local += 1;
        }
        // An ACK of a connection this host does not have (only the listener matches), and a
        // datagram to a port nobody bound: forwarded to the named backend.
        let stray = craft::tcp(
            &Endpoints::new("192.0.2.1", 40001, "127.0.0.1", port),
            false,
        );
        let lost = craft::udp(&Endpoints::new("192.0.2.1", 40000, "127.0.0.1", 9), 16);
        for inner in [&stray, &lost] {
            let f = marked_frame(inner, t, &one);
            let (ret, out) = p.test_run(&f).unwrap();
            assert_eq!(ret, 7, "TC_ACT_REDIRECT for {t:?}");
            assert_eq!(out, forwarded(&f), "forwarded, {t:?}");
            assert!(fp_wire::checksum::verify(&out[14..14 + 28]));
            // At the named backend, with no socket either, the option is used up: decapsulated
            // like any tunnel packet (the kernel resets or delivers it).
            let (ret, last) = p.test_run(&out).unwrap();
            assert_eq!(ret, 0, "TC_ACT_OK at the end of the chain, {t:?}");
            assert_eq!(last, inner_seen(&out, inner));
        }
    }
    // A chain of three: each host without a socket sends the packet one name further.
    let three: Vec<IpAddr> = ["10.0.0.3", "10.0.0.4", "10.0.0.5"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let stray = craft::tcp(
        &Endpoints::new("192.0.2.1", 40002, "127.0.0.1", port),
        false,
    );
    let mut f = marked_frame(&stray, Tunnel::GRE, &three);
    for hop in 0..3 {
        let (ret, out) = p.test_run(&f).unwrap();
        assert_eq!(ret, 7, "hop {hop}");
        assert_eq!(out, forwarded(&f), "hop {hop}");
        assert_eq!(out[30..34], [10, 0, 0, 3 + hop as u8]);
        f = out;
    }
    assert_eq!(p.test_run(&f).unwrap().0, 0, "used up after three hops");
    let s = d.stats().unwrap();
    assert_eq!(s.second_chance_local, local);
    assert_eq!(s.second_chance_forwarded, 4 + 3);
    assert_eq!(
        s.gre + s.ipip,
        4 + 1,
        "used-up options are plain tunnel packets"
    );
    assert_eq!((s.pass, s.error), (0, 0), "{s:?}");
    // An IHL-7 header whose option is not ours is left alone.
    let e = Endpoints::new("192.0.2.1", 1, "127.0.0.1", port);
    let mut f = marked_frame(&craft::tcp(&e, false), Tunnel::GRE, &one);
    f[34] = 0x94; // router alert
    assert_eq!(p.test_run(&f).unwrap(), (0, f.clone()));
    drop(c);
}

#[test]
fn decap_second_chance_over_ipv6() {
    need_root();
    let d = TcDecap::load(DecapConfig::ALL).unwrap();
    let p = d.program();
    let l = std::net::TcpListener::bind("[::1]:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let c = std::net::TcpStream::connect(("::1", port)).unwrap();
    let cport = c.local_addr().unwrap().port();
    let (_server, _) = l.accept().unwrap();
    let two: Vec<IpAddr> = ["fd00::3", "fd00::4"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    for t in [Tunnel::GRE, Tunnel::Ipip] {
        // Inner IPv6: the established connection is delivered here, a stray ACK goes on.
        let est = craft::tcp(&Endpoints::new("::1", cport, "::1", port), false);
        let f = marked_frame(&est, t, &two);
        assert_eq!(p.test_run(&f).unwrap(), (0, inner_seen(&f, &est)), "{t:?}");
        let stray = craft::tcp(&Endpoints::new("2001:db8::7", 40000, "::1", port), false);
        let mut f = marked_frame(&stray, t, &two);
        for hop in 0..2 {
            let (ret, out) = p.test_run(&f).unwrap();
            assert_eq!(ret, 7, "hop {hop}, {t:?}");
            assert_eq!(out, forwarded(&f), "hop {hop}, {t:?}");
            f = out;
        }
        let (ret, out) = p.test_run(&f).unwrap();
        assert_eq!((ret, out), (0, inner_seen(&f, &stray)), "used up, {t:?}");
        // Inner IPv4 in an IPv6 outer header.
        let v4 = craft::tcp(&Endpoints::new("192.0.2.1", 40000, "127.0.0.1", 9), false);
        let f = marked_frame(&v4, t, &two);
        assert_eq!(p.test_run(&f).unwrap(), (7, forwarded(&f)), "{t:?}");
    }
    let s = d.stats().unwrap();
    assert_eq!(s.second_chance_local, 2);
    assert_eq!(s.second_chance_forwarded, 6);
    assert_eq!(s.gre + s.ipip, 2, "used-up options");
    drop(c);
}

/// The decapsulation rules, written independently of the program.
fn decap_model(f: &[u8]) -> Vec<u8> {
    let be16 = |i: usize| u16::from_be_bytes([f[i], f[i + 1]]);
    let untouched = f.to_vec();
    if f[..6] != [0u8; 6] {
        return untouched;
    }
    let (outer, proto) = match be16(12) {
        0x0800 if f.len() >= 34 && f[14] == 0x45 && be16(20) & 0x3fff == 0 => (20usize, f[23]),
        0x86dd if f.len() >= 54 => (40, f[20]),
        _ => return untouched,
    };
    let (strip, inner_type) = match proto {
        4 => (outer, 0x0800u16),
        41 => (outer, 0x86dd),
        47 => {
            let g = 14 + outer;
            if f.len() < g + 4 {
                return untouched;
            }
            let flags = be16(g);
            if flags & 0xc8ff != 0 {
                return untouched;
            }
            let glen = 4
                + if flags & 0x2000 != 0 { 4 } else { 0 }
                + if flags & 0x1000 != 0 { 4 } else { 0 };
            match be16(g + 2) {
                t @ (0x0800 | 0x86dd) => (outer + glen, t),
                _ => return untouched,
            }
        }
        _ => return untouched,
    };
    // bpf_skb_adjust_room refuses to leave less than the inner family's fixed header.
    let len_cur = f.len() - 14;
    let min = if inner_type == 0x0800 { 20 } else { 40 };
    if strip >= len_cur || len_cur - strip < min {
        return untouched;
    }
    let mut out = f[..12].to_vec();
    out.extend_from_slice(&inner_type.to_be_bytes());
    out.extend_from_slice(&f[14 + strip..]);
    out
}

fn tunnel_strategy() -> impl Strategy<Value = Tunnel> {
    prop_oneof![
        Just(Tunnel::Ipip),
        (
            prop::option::of(any::<u32>()),
            prop::option::of(any::<u32>()),
            any::<bool>(),
            0u8..4
        )
            .prop_map(|(k, s, c, r)| gre(k, s, c, r)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Valid tunnel frames with random corruption of their headers and random truncation: the
    /// kernel's output equals the model's, and the program always returns TC_ACT_OK.
    #[test]
    fn decap_matches_model(inner_v6 in any::<bool>(), outer_v6 in any::<bool>(), t in tunnel_strategy(),
                           edits in prop::collection::vec((0usize..80, any::<u8>()), 0..4),
                           cut in prop::option::of(14usize..120)) {
        need_root();
        thread_local! {
            static PROG: TcDecap = TcDecap::load(DecapConfig::ALL).unwrap();
        }
        let (mut f, _) = tunnel_frame(inner_v6, outer_v6, t);
        for (i, v) in edits {
            // Keep the destination MAC (PACKET_HOST) and the first byte of the ethertype in
            // range half the time, so that edits mostly hit the tunnel headers.
            if i < 6 || i >= f.len() { continue; }
            f[i] = v;
        }
        if let Some(c) = cut { f.truncate(c.min(f.len())); }
        let want = decap_model(&f);
        let r = PROG.with(|p| p.program().test_run(&f));
        let l3_min = match (f[12], f[13]) { (0x08, 0x00) => 20, (0x86, 0xdd) => 40, _ => 0 };
        if f.len() < 14 + l3_min {
            // The kernel refuses to build an skb shorter than its ethertype's fixed header.
            prop_assert!(matches!(r, Err(ref e) if e.errno() == Some(libc_einval())), "{:?}", r);
            return Ok(());
        }
        let (ret, out) = r.unwrap();
        prop_assert_eq!(ret, 0);
        prop_assert_eq!(out, want);
    }
}

/// The same comparison over many seeded cases, checking that both outcomes are well covered (a
/// model test that only ever saw untouched packets would prove little).
#[test]
fn decap_model_coverage() {
    need_root();
    use rand::{Rng, SeedableRng};
    let d = TcDecap::load(DecapConfig::ALL).unwrap();
    let mut rng = rand_pcg::Pcg64::seed_from_u64(7);
    let (mut changed, mut same, mut refused) = (0, 0, 0);
    for _ in 0..3000 {
        let t = match rng.gen_range(0..4) {
            0 => Tunnel::Ipip,
            1 => Tunnel::GRE,
            2 => gre(
                Some(rng.gen()),
                rng.gen::<bool>().then(|| rng.gen()),
                false,
                rng.gen_range(0..4),
            ),
            _ => gre(None, None, rng.gen::<bool>(), rng.gen_range(0..8)),
        };
        let (mut f, _) = tunnel_frame(rng.gen(), rng.gen(), t);
        for _ in 0..rng.gen_range(0..3) {
            let i = rng.gen_range(6..f.len().min(80));
            f[i] = if rng.gen() {
                rng.gen()
            } else {
                f[i] ^ (1 << rng.gen_range(0..8))
            };
        }
        if rng.gen_range(0..4) == 0 {
            let c = rng.gen_range(14..f.len());
            f.truncate(c);
        }
        let want = decap_model(&f);
        match d.program().test_run(&f) {
            Ok((ret, out)) => {
                assert_eq!(ret, 0);
                assert_eq!(out, want, "frame {f:02x?}");
                if out == f {
                    same += 1
                } else {
                    changed += 1
                }
            }
            Err(e) => {
                let l3 = if f[12..14] == [0x86, 0xdd] { 40 } else { 20 };
                assert!(f.len() < 14 + l3 && e.errno() == Some(22), "{e}");
                refused += 1;
            }
        }
    }
    eprintln!("decapsulated {changed}, untouched {same}, refused {refused}");
    assert!(
        changed > 600 && same > 600,
        "decapsulated {changed}, untouched {same}, refused {refused}"
    );
}

#[test]
fn decap_attach_detach_on_loopback_is_refused_cleanly() {
    need_root();
    // Attaching to a missing interface is an error naming it, not a panic.
    let d = TcDecap::load(DecapConfig::ALL).unwrap();
    let e = d.attach(999_999).unwrap_err();
    assert!(e.to_string().contains("ifindex 999999"), "{e}");
    assert!(decap::installed(999_999).is_err() || decap::installed(999_999).unwrap().is_none());
}

fn libc_einval() -> i32 {
    22
}
