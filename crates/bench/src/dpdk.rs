//! DPDK's `rte_hash` as a peer of the FIB lookup benchmark (cargo feature `dpdk` of this binary
//! only; Debian's `libdpdk-dev`, found with `pkg-config libdpdk`): the cuckoo hash of DPDK's
//! packet-processing library, with its bulk lookup `rte_hash_lookup_bulk_data` (the function its
//! examples and DPDK's own benchmarks use for batches), as DPDK applications use it.
//!
//! The EAL starts once per process without devices (`--no-pci --in-memory --no-telemetry`) on
//! 2 MiB huge pages, which must be reserved beforehand (`/proc/sys/vm/nr_hugepages`); its memory
//! comes from them. Without huge pages the peer is not run (a 4 KiB-page DPDK table would not be
//! on equal footing with flowplane's). Default table flags: no reader-writer concurrency — DPDK's
//! fastest lookups (flowplane's readers, by contrast, stay consistent under a concurrent writer).
//! The key is the 8-byte key the benchmark uses, the data the entry's value.
#![allow(unsafe_code)]

use anyhow::{bail, Result};
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::OnceLock;

/// `struct rte_hash_parameters` of DPDK 22.11 (`rte_hash.h`).
#[repr(C)]
struct Params {
    name: *const c_char,
    entries: u32,
    reserved: u32,
    key_len: u32,
    /// `rte_hash_function`; null: DPDK's default (CRC32-based on x86).
    hash_func: *const c_void,
    hash_func_init_val: u32,
    socket_id: c_int,
    extra_flag: u8,
}

/// `RTE_HASH_EXTRA_FLAGS_EXT_TABLE`: extendable buckets, so a table can be filled to its size.
const EXT_TABLE: u8 = 0x08;
/// `SOCKET_ID_ANY`.
const SOCKET_ANY: c_int = -1;
/// `RTE_HASH_LOOKUP_BULK_MAX`.
pub const BULK_MAX: usize = 64;

extern "C" {
    fn rte_eal_init(argc: c_int, argv: *mut *mut c_char) -> c_int;
    fn rte_hash_create(p: *const Params) -> *mut c_void;
    fn rte_hash_free(h: *mut c_void);
    fn rte_hash_add_key_data(h: *const c_void, key: *const c_void, data: *mut c_void) -> c_int;
    fn rte_hash_lookup_bulk_data(
        h: *const c_void,
        keys: *mut *const c_void,
        num_keys: u32,
        hit_mask: *mut u64,
        data: *mut *mut c_void,
    ) -> c_int;
}

static EAL: OnceLock<Result<(), String>> = OnceLock::new();

/// Start the EAL once (no devices, huge pages, one lcore).
fn eal() -> Result<()> {
    let r =
        EAL.get_or_init(|| {
            let args = [
                "flowplane-bench",
                "--no-pci",
                "--no-telemetry",
                "--in-memory",
                "-l",
                "0",
                "--log-level",
                "lib.eal:error",
            ];
            let owned: Vec<CString> = args
                .iter()
                .map(|a| CString::new(*a).expect("no NUL in literals"))
                .collect();
            // The EAL keeps argv pointers; leak them for the life of the process.
            let mut ptrs: Vec<*mut c_char> = owned.into_iter().map(CString::into_raw).collect();
            let argc = ptrs.len() as c_int;
            let argv = ptrs.as_mut_ptr();
            std::mem::forget(ptrs);
            // SAFETY: argv holds argc valid NUL-terminated strings that live for the rest of the
            // process (leaked above); rte_eal_init is called once (OnceLock).
            let rc = unsafe { rte_eal_init(argc, argv) };
            if rc < 0 {
                Err("rte_eal_init failed (are 2 MiB huge pages reserved? /proc/sys/vm/nr_hugepages)"
                .to_string())
            } else {
                Ok(())
            }
        });
    match r {
        Ok(()) => Ok(()),
        Err(e) => bail!("{e}"),
    }
}

/// An `rte_hash` table of 8-byte keys.
pub struct RteHash {
    h: *mut c_void,
    /// Whether extendable buckets were needed to hold every key.
    pub ext_table: bool,
}

// SAFETY: after it is built the table is only read (rte_hash lookups are thread-safe among
// readers); it is freed once, by Drop, when no reader is left (the benchmark's scoped threads
// have ended).
unsafe impl Send for RteHash {}
// SAFETY: see Send: concurrent lookups without writers are what rte_hash supports by default.
unsafe impl Sync for RteHash {}

impl RteHash {
    /// A table sized for `entries` (at least the key count) holding `keys[i] → value(i)`.
    /// Without extendable buckets first (DPDK's fastest lookups); if the cuckoo table cannot
    /// place every key at that size, again with extendable buckets (how DPDK fills a table to
    /// its size).
    pub fn build_sized(
        keys: &[u64],
        entries: usize,
        value: impl Fn(usize) -> u64,
    ) -> Result<RteHash> {
        eal()?;
        let entries = entries.max(keys.len());
        for flags in [0u8, EXT_TABLE] {
            let name = CString::new(format!("fp_bench_{entries}_{flags}")).expect("no NUL");
            let p = Params {
                name: name.as_ptr(),
                entries: u32::try_from(entries)?.max(8),
                reserved: 0,
                key_len: 8,
                hash_func: std::ptr::null(),
                hash_func_init_val: 0,
                socket_id: SOCKET_ANY,
                extra_flag: flags,
            };
            // SAFETY: p is a valid parameter block whose name outlives the call (DPDK copies
            // it).
            let h = unsafe { rte_hash_create(&p) };
            if h.is_null() {
                bail!("rte_hash_create failed for {entries} entries (out of huge pages?)");
            }
            let t = RteHash {
                h,
                ext_table: flags == EXT_TABLE,
            };
            let mut ok = true;
            for (i, k) in keys.iter().enumerate() {
                // SAFETY: h is a live table with 8-byte keys; the key pointer is valid for 8
                // bytes during the call (DPDK copies the key); the data is stored as a value.
                let rc = unsafe {
                    rte_hash_add_key_data(t.h, (k as *const u64).cast(), value(i) as *mut c_void)
                };
                if rc < 0 {
                    ok = false;
                    break;
                }
            }
            if ok {
                return Ok(t);
            }
        }
        bail!(
            "rte_hash could not hold {} keys even with extendable buckets",
            keys.len()
        )
    }

    /// Look up `keys` (at most [`BULK_MAX`]); returns the number found.
    #[inline]
    pub fn lookup_bulk(&self, keys: &[u64]) -> u32 {
        debug_assert!(keys.len() <= BULK_MAX);
        let mut ptrs = [std::ptr::null::<c_void>(); BULK_MAX];
        for (p, k) in ptrs.iter_mut().zip(keys) {
            *p = (k as *const u64).cast();
        }
        let mut data = [std::ptr::null_mut::<c_void>(); BULK_MAX];
        let mut hits = 0u64;
        // SAFETY: h is a live table; ptrs holds keys.len() pointers to 8-byte keys alive during
        // the call; hits and data have room for that many results.
        let rc = unsafe {
            rte_hash_lookup_bulk_data(
                self.h,
                ptrs.as_mut_ptr(),
                keys.len() as u32,
                &mut hits,
                data.as_mut_ptr(),
            )
        };
        std::hint::black_box(&data);
        if rc < 0 {
            0
        } else {
            hits.count_ones()
        }
    }
}

impl Drop for RteHash {
    fn drop(&mut self) {
        // SAFETY: h was returned by rte_hash_create and is freed once, here, with no lookup
        // running (the benchmark's threads are joined before the table is dropped).
        unsafe { rte_hash_free(self.h) }
    }
}
