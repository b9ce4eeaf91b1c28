//! Large, zero-initialised, fixed-size arrays for flowplane's tables, backed by huge pages when the
//! system allows it.
//!
//! Layer: **tables** (the only piece of that layer that talks to the OS, once, at construction).
//!
//! CuckooSwitch §3.5: a table of hundreds of MiB to GiB touched at random costs a TLB miss per lookup
//! on 4 KiB pages; 2 MiB pages cut the page-table footprint 512-fold. On this project's VM (nested
//! paging) that is worth up to 2x for random reads (docs/platform.md, "Memory").
//!
//! [`HugeArray::new`] tries, in order (for [`PagePolicy::Auto`]):
//! 1. `mmap(MAP_HUGETLB)`: explicit 2 MiB pages, if the administrator reserved them
//!    (`/proc/sys/vm/nr_hugepages`);
//! 2. anonymous `mmap` + `madvise(MADV_HUGEPAGE)`: transparent huge pages, which need no reservation
//!    when THP is in `madvise` or `always` mode;
//! 3. plain anonymous pages.
//!
//! Which one was obtained is reported by [`HugeArray::pages`] so callers can print it. Memory from
//! `mmap` is zero-filled by the kernel, so only element types for which all-zero bytes are a valid
//! value may be stored ([`ZeroInit`]).
//!
//! ```
//! use fp_mem::{HugeArray, PagePolicy};
//! use std::sync::atomic::{AtomicU64, Ordering};
//! let a: HugeArray<AtomicU64> = HugeArray::new(1 << 20, PagePolicy::Auto).unwrap();
//! a[12345].store(7, Ordering::Relaxed);
//! assert_eq!(a[12345].load(Ordering::Relaxed), 7);
//! println!("{} bytes in {}", a.bytes(), a.pages());
//! ```
#![deny(unsafe_code)]

mod sys;

#[allow(unsafe_code)]
mod zero {
    /// Types for which the all-zero bit pattern is a valid value, so freshly mapped memory holds valid
    /// elements.
    ///
    /// # Safety
    /// Implementors guarantee that a value of all zero bytes is a valid, initialised `Self`, and that
    /// `Self` has no `Drop` glue that must run (the array never runs destructors).
    pub unsafe trait ZeroInit: Sized {}

    macro_rules! zero_init {
    ($($t:ty),*) => { $(
        // SAFETY: integers and atomics of integers are valid at all-zero bits and have no drop glue.
        unsafe impl ZeroInit for $t {}
    )* };
}
    zero_init!(
        u8,
        u16,
        u32,
        u64,
        u128,
        usize,
        i8,
        i16,
        i32,
        i64,
        std::sync::atomic::AtomicU8,
        std::sync::atomic::AtomicU16,
        std::sync::atomic::AtomicU32,
        std::sync::atomic::AtomicU64,
        std::sync::atomic::AtomicUsize
    );
    // SAFETY: an array of zero-valid elements is zero-valid, and has no drop glue if its elements have none.
    unsafe impl<T: ZeroInit, const N: usize> ZeroInit for [T; N] {}
}

use std::fmt;
use std::ops::Deref;

/// Which pages to ask the system for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PagePolicy {
    /// Explicit huge pages, else transparent huge pages, else normal pages.
    #[default]
    Auto,
    /// Transparent huge pages (madvise) or normal pages; never MAP_HUGETLB.
    Transparent,
    /// Normal 4 KiB pages, with transparent huge pages explicitly refused (for comparisons).
    Normal,
}

/// Which pages a [`HugeArray`] actually got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// Explicit 2 MiB pages from the huge page pool (MAP_HUGETLB).
    HugeTlb,
    /// Normal mapping advised for transparent huge pages (MADV_HUGEPAGE accepted).
    Transparent,
    /// Normal pages.
    Normal,
    /// A small array on the ordinary heap (below one huge page, mapping it is not worth it).
    Heap,
}

impl fmt::Display for PageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PageKind::HugeTlb => "hugetlb-2M",
            PageKind::Transparent => "thp",
            PageKind::Normal => "4K",
            PageKind::Heap => "heap",
        })
    }
}

/// Error from [`HugeArray::new`].
#[derive(Debug)]
pub enum MemError {
    /// `len * size_of::<T>()` overflows `usize`.
    TooLarge { len: usize, elem: usize },
    /// The system refused the mapping even with normal pages.
    Map { bytes: usize, errno: i32 },
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemError::TooLarge { len, elem } => {
                write!(
                    f,
                    "array of {len} elements of {elem} bytes overflows the address space"
                )
            }
            MemError::Map { bytes, errno } => write!(
                f,
                "could not map {bytes} bytes ({:.2} GiB): errno {errno} ({})",
                *bytes as f64 / (1u64 << 30) as f64,
                std::io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

impl std::error::Error for MemError {}

pub use zero::ZeroInit;

/// A fixed-length array of zero-initialised `T` in (possibly huge) pages. Dereferences to `[T]`.
pub struct HugeArray<T: ZeroInit> {
    /// The elements, borrowed from `mem` (kept beside it so `Deref` is two loads, no branch).
    view: sys::View<T>,
    mem: sys::Mapping,
}

/// Arrays smaller than this are put on the heap: a huge page for them would waste memory.
const HEAP_LIMIT: usize = 1 << 20;

impl<T: ZeroInit> HugeArray<T> {
    /// Allocate `len` zeroed elements with the given page policy.
    pub fn new(len: usize, policy: PagePolicy) -> Result<Self, MemError> {
        let elem = std::mem::size_of::<T>();
        let bytes = len
            .checked_mul(elem)
            .ok_or(MemError::TooLarge { len, elem })?;
        let align = std::mem::align_of::<T>().max(64);
        let mem = if bytes < HEAP_LIMIT {
            sys::Mapping::heap(bytes, align)
        } else {
            sys::Mapping::map(bytes, policy)?
        };
        let view = sys::View::new(&mem, len);
        Ok(HugeArray { view, mem })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.view.len()
    }

    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.view.len() == 0
    }

    /// Bytes of memory reserved for the array (rounded up to the page size used).
    pub fn bytes(&self) -> usize {
        self.mem.reserved()
    }

    /// Which kind of pages backs the array.
    pub fn pages(&self) -> PageKind {
        self.mem.kind()
    }
}

impl<T: ZeroInit> Deref for HugeArray<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        self.view.as_slice()
    }
}

impl<T: ZeroInit + fmt::Debug> fmt::Debug for HugeArray<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HugeArray")
            .field("len", &self.len())
            .field("pages", &self.pages())
            .finish()
    }
}

/// How many 2 MiB huge pages are free in the pool, if the system reports it.
pub fn free_hugetlb_pages() -> Option<u64> {
    let s =
        std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages").ok()?;
    s.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn zeroed_and_writable_every_policy() {
        for policy in [
            PagePolicy::Auto,
            PagePolicy::Transparent,
            PagePolicy::Normal,
        ] {
            let a: HugeArray<AtomicU32> = HugeArray::new(3 << 20, policy).unwrap();
            assert_eq!(a.len(), 3 << 20);
            assert!(a.bytes() >= (3 << 20) * 4);
            assert!(a
                .iter()
                .step_by(4097)
                .all(|x| x.load(Ordering::Relaxed) == 0));
            a[(3 << 20) - 1].store(9, Ordering::Relaxed);
            assert_eq!(a[(3 << 20) - 1].load(Ordering::Relaxed), 9);
            if policy == PagePolicy::Normal {
                assert_eq!(a.pages(), PageKind::Normal);
            }
        }
    }

    #[test]
    fn small_arrays_use_the_heap_and_are_aligned() {
        let a: HugeArray<u64> = HugeArray::new(100, PagePolicy::Auto).unwrap();
        assert_eq!(a.pages(), PageKind::Heap);
        assert_eq!(a.as_ptr() as usize % 64, 0);
        assert!(a.iter().all(|&x| x == 0));
        let e: HugeArray<u64> = HugeArray::new(0, PagePolicy::Auto).unwrap();
        assert!(e.is_empty());
    }

    #[test]
    fn overflow_is_an_error() {
        let r: Result<HugeArray<u64>, _> = HugeArray::new(usize::MAX / 4, PagePolicy::Auto);
        assert!(matches!(r, Err(MemError::TooLarge { .. })));
    }
}
