//! Checksums: the fast 8-bytes-at-a-time sum equals the word-by-word definition, sums combine at
//! even boundaries, and an RFC 1624 incremental update gives a checksum that verifies exactly when
//! a full recomputation does.
#![no_main]

use fp_wire::checksum;
use libfuzzer_sys::fuzz_target;

fn reference(data: &[u8]) -> u16 {
    let mut acc: u32 = 0;
    for c in data.chunks(2) {
        acc += if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) as u32 } else { (c[0] as u32) << 8 };
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    acc as u16
}

fuzz_target!(|data: &[u8]| {
    assert_eq!(checksum::sum(data), reference(data));
    if data.len() < 8 {
        return;
    }
    // Split at an even point: sums combine.
    let cut = (data[0] as usize * 2) % data.len() & !1;
    let (a, b) = data.split_at(cut);
    let combined = checksum::add(checksum::sum(a), checksum::sum(b));
    let whole = checksum::sum(data);
    assert!(combined == whole || (combined == 0xFFFF && whole == 0) || (combined == 0 && whole == 0xFFFF));

    // Incremental update of one word of an even-length region with a valid checksum in word 0.
    let mut region = data[4..].to_vec();
    if region.len() % 2 == 1 {
        region.pop();
    }
    if region.len() < 4 {
        return;
    }
    region[0] = 0;
    region[1] = 0;
    let c = checksum::checksum(&region);
    region[0..2].copy_from_slice(&c.to_be_bytes());
    assert!(checksum::verify(&region) || region.iter().all(|&x| x == 0));
    let words = region.len() / 2;
    let w = 1 + (data[1] as usize) % (words - 1);
    let new = u16::from_be_bytes([data[2], data[3]]);
    let old = u16::from_be_bytes([region[2 * w], region[2 * w + 1]]);
    region[2 * w..2 * w + 2].copy_from_slice(&new.to_be_bytes());
    let c2 = checksum::update_u16(c, old, new);
    region[0..2].copy_from_slice(&c2.to_be_bytes());
    let all_zero = region[2..].iter().all(|&x| x == 0);
    assert!(checksum::verify(&region) || all_zero, "incremental update does not verify");
    let mut z = region.clone();
    z[0] = 0;
    z[1] = 0;
    let full = checksum::checksum(&z);
    assert!(full == c2 || (full == 0 && c2 == 0xFFFF) || (full == 0xFFFF && c2 == 0), "update {c2:#x} vs recompute {full:#x}");
});
