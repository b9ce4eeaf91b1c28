//! Secret hash seeds.
//!
//! The seeds that place keys in flowplane's tables and flows on backends decide which inputs
//! collide. A public seed lets anyone craft traffic that piles into one bucket of a connection
//! table or onto one backend (hash flooding); so an application that is not told a seed draws a
//! fresh one from the operating system at start. Applications whose instances must agree (the
//! balancers behind one router) take the seed from their configuration instead.

use std::io::Read;

/// A fresh secret 64-bit seed from the kernel's random source (`/dev/urandom`, which never
/// blocks once the kernel's pool is initialised at boot). Should the device be unreadable (a
/// chroot without `/dev`), the standard library's randomly keyed hasher supplies one.
pub fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)) {
        Ok(()) => u64::from_le_bytes(b),
        Err(_) => {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            h.finish()
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeds_differ() {
        let s: std::collections::HashSet<u64> = (0..64).map(|_| super::random_seed()).collect();
        assert_eq!(s.len(), 64);
    }
}
