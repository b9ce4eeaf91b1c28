//! The peer the benchmark compares SetSep with: sux's `VFunc` (Vigna, "ε-cost sharding", 2025), a
//! modern static function built on fuse graphs (three cells XORed per key, about 1.1 bits per value
//! bit), immutable once built. It lives in the benchmark binary, so the table crate does not pull sux.
//!
//! Values are stored in a bit-field vector of exactly `value_bits` bits per cell.

use sux::bits::BitFieldVec;
use sux::func::{VBuilder, VFunc};

/// A sux `VFunc<u64, BitFieldVec>` mapping keys to values.
pub struct SuxVFunc {
    f: VFunc<u64, BitFieldVec<Box<[usize]>>>,
}

impl SuxVFunc {
    /// Build from `keys[i] → values[i]` with at most `threads` threads.
    pub fn build(keys: &[u64], values: &[u16], threads: usize) -> anyhow::Result<Self> {
        let vals: Vec<usize> = values.iter().map(|&v| v as usize).collect();
        let builder = VBuilder::default()
            .expected_num_keys(keys.len())
            .max_num_threads(threads.max(1));
        let f = <VFunc<u64, BitFieldVec<Box<[usize]>>>>::try_par_new_with_builder(
            keys,
            &vals,
            builder,
            dsi_progress_logger::no_logging![],
        )
        .map_err(|e| anyhow::anyhow!("sux VFunc build: {e}"))?;
        Ok(SuxVFunc { f })
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: u64) -> u16 {
        self.f.get(key) as u16
    }

    /// Heap bytes of the structure.
    pub fn bytes(&self) -> usize {
        mem_size(&self.f)
    }
}

fn mem_size<T: mem_dbg::MemSize>(t: &T) -> usize {
    t.mem_size(mem_dbg::SizeFlags::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_every_key() {
        let keys: Vec<u64> = (0..50_000u64).map(fp_hash::splitmix64).collect();
        let vals: Vec<u16> = keys.iter().map(|k| (k % 4) as u16).collect();
        let f = SuxVFunc::build(&keys, &vals, 1).unwrap();
        assert!(keys.iter().zip(&vals).all(|(&k, &v)| f.get(k) == v));
        let bits = f.bytes() as f64 * 8.0 / keys.len() as f64;
        assert!(bits < 4.0, "{bits} bits/key");
    }
}
