//! Big-endian field access on byte slices (private). Callers guarantee the bounds: every view
//! checks its length once in `check_len`, after which these indexings cannot fail.

pub(crate) type Field = core::ops::Range<usize>;
pub(crate) type Rest = core::ops::RangeFrom<usize>;

#[inline(always)]
pub(crate) fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

#[inline(always)]
pub(crate) fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

#[inline(always)]
pub(crate) fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
pub(crate) fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
pub(crate) fn arr4(b: &[u8], off: usize) -> [u8; 4] {
    [b[off], b[off + 1], b[off + 2], b[off + 3]]
}

#[inline(always)]
pub(crate) fn arr6(b: &[u8], off: usize) -> [u8; 6] {
    [
        b[off],
        b[off + 1],
        b[off + 2],
        b[off + 3],
        b[off + 4],
        b[off + 5],
    ]
}

#[inline(always)]
pub(crate) fn arr16(b: &[u8], off: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[off..off + 16]);
    a
}
