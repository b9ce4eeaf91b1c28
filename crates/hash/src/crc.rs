//! CRC-32C (Castagnoli polynomial, reflected 0x82F63B78), hardware and portable.
//!
//! The value matches RFC 3720 / iSCSI: `crc32c(0, b"123456789") == 0xE3069283`. The `crc` argument
//! lets callers chain calls over several pieces; pass 0 to start.

const POLY: u32 = 0x82F6_3B78;

const fn make_table() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut s = 1;
    while s < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[s - 1][i];
            t[s][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            i += 1;
        }
        s += 1;
    }
    t
}

static TABLE: [[u32; 256]; 8] = make_table();

/// Portable slicing-by-8 CRC-32C. The oracle for the hardware path.
pub fn crc32c_portable(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    let mut chunks = data.chunks_exact(8);
    for ch in &mut chunks {
        let lo = u32::from_le_bytes([ch[0], ch[1], ch[2], ch[3]]) ^ c;
        let hi = u32::from_le_bytes([ch[4], ch[5], ch[6], ch[7]]);
        c = TABLE[7][(lo & 0xFF) as usize]
            ^ TABLE[6][((lo >> 8) & 0xFF) as usize]
            ^ TABLE[5][((lo >> 16) & 0xFF) as usize]
            ^ TABLE[4][(lo >> 24) as usize]
            ^ TABLE[3][(hi & 0xFF) as usize]
            ^ TABLE[2][((hi >> 8) & 0xFF) as usize]
            ^ TABLE[1][((hi >> 16) & 0xFF) as usize]
            ^ TABLE[0][(hi >> 24) as usize];
    }
    for &b in chunks.remainder() {
        c = (c >> 8) ^ TABLE[0][((c ^ b as u32) & 0xFF) as usize];
    }
    !c
}

/// CRC-32C of `data`, continuing from `crc` (0 to start). Uses SSE4.2 when the CPU has it.
#[inline]
pub fn crc32c(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::arch::has_sse42() {
            return crate::arch::crc32c_sse42(crc, data);
        }
    }
    crc32c_portable(crc, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3720_check_value() {
        assert_eq!(crc32c_portable(0, b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(0, b"123456789"), 0xE306_9283);
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c(0, &[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(0, &[0xFFu8; 32]), 0x62A8_AB43);
    }

    #[test]
    fn chaining() {
        let data = b"the quick brown fox jumps over the lazy dog";
        let whole = crc32c(0, data);
        let part = crc32c(crc32c(0, &data[..13]), &data[13..]);
        assert_eq!(whole, part);
    }

    proptest::proptest! {
        #[test]
        fn hardware_equals_portable(data in proptest::collection::vec(proptest::num::u8::ANY, 0..200), seed: u32) {
            proptest::prop_assert_eq!(crc32c(seed, &data), crc32c_portable(seed, &data));
        }
    }
}
