//! The OS calls: anonymous mappings with huge page flags, and a heap fallback for small arrays.
#![allow(unsafe_code)]

use crate::{MemError, PageKind, PagePolicy};
use std::alloc::Layout;

const HUGE_2M: usize = 2 << 20;

pub(crate) enum Mapping {
    Mapped {
        ptr: *mut u8,
        reserved: usize,
        kind: PageKind,
    },
    Heap {
        ptr: *mut u8,
        layout: Layout,
    },
}

// SAFETY: the mapping is plain memory owned exclusively by this value; sharing `&Mapping` only hands
// out `&[T]` for `T: ZeroInit`, whose own Sync/Send bounds govern cross-thread use (see HugeArray).
unsafe impl Send for Mapping {}
// SAFETY: as above; `Mapping` itself has no interior mutability.
unsafe impl Sync for Mapping {}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

impl Mapping {
    pub(crate) fn heap(bytes: usize, align: usize) -> Mapping {
        let layout = Layout::from_size_align(bytes.max(1), align).expect("valid layout");
        // SAFETY: `layout` has non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Mapping::Heap { ptr, layout }
    }

    #[cfg(target_os = "linux")]
    pub(crate) fn map(bytes: usize, policy: PagePolicy) -> Result<Mapping, MemError> {
        let reserved = round_up(bytes, HUGE_2M);
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        if policy == PagePolicy::Auto {
            // No MAP_NORESERVE here: with it the kernel grants a huge page mapping even when the pool
            // is empty and the first touch of a missing page raises SIGBUS. Without it, mmap fails up
            // front (ENOMEM) and we fall back.
            // SAFETY: anonymous mapping request with no address hint; the result is checked.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    reserved,
                    prot,
                    flags | libc::MAP_HUGETLB,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                return Ok(Mapping::Mapped {
                    ptr: p.cast(),
                    reserved,
                    kind: PageKind::HugeTlb,
                });
            }
        }
        // SAFETY: as above.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserved,
                prot,
                flags | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MemError::Map {
                bytes: reserved,
                errno: errno(),
            });
        }
        let advice = if policy == PagePolicy::Normal {
            libc::MADV_NOHUGEPAGE
        } else {
            libc::MADV_HUGEPAGE
        };
        // SAFETY: `p..p+reserved` is the mapping just created; madvise only changes paging policy.
        let rc = unsafe { libc::madvise(p, reserved, advice) };
        let kind = if policy != PagePolicy::Normal && rc == 0 && thp_enabled() {
            PageKind::Transparent
        } else {
            PageKind::Normal
        };
        Ok(Mapping::Mapped {
            ptr: p.cast(),
            reserved,
            kind,
        })
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn map(bytes: usize, _policy: PagePolicy) -> Result<Mapping, MemError> {
        Ok(Mapping::heap(bytes, 4096))
    }

    pub(crate) fn reserved(&self) -> usize {
        match self {
            Mapping::Mapped { reserved, .. } => *reserved,
            Mapping::Heap { layout, .. } => layout.size(),
        }
    }

    pub(crate) fn kind(&self) -> PageKind {
        match self {
            Mapping::Mapped { kind, .. } => *kind,
            Mapping::Heap { .. } => PageKind::Heap,
        }
    }
}

/// A typed view of the first `len` elements of a [`Mapping`]: the pointer and length, cached so that
/// indexing costs no more than indexing a slice.
pub(crate) struct View<T> {
    ptr: *const T,
    len: usize,
}

// SAFETY: a View is only reachable through a HugeArray<T>, which hands out `&[T]`; sending or sharing
// it is exactly as safe as sending or sharing `&[T]`, i.e. requires `T: Sync`.
unsafe impl<T: Sync> Send for View<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for View<T> {}

impl<T: crate::ZeroInit> View<T> {
    /// `mem` must hold at least `len * size_of::<T>()` bytes aligned for `T` (HugeArray::new ensures
    /// it), and must outlive the view (HugeArray owns both and drops the view first).
    pub(crate) fn new(mem: &Mapping, len: usize) -> Self {
        let ptr = match mem {
            Mapping::Mapped { ptr, .. } | Mapping::Heap { ptr, .. } => *ptr as *const T,
        };
        View { ptr, len }
    }

    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` is non-null (mmap succeeded, or the heap allocation of at least one byte did).
        // HugeArray::new reserved at least `len * size_of::<T>()` bytes at `ptr`, aligned to at
        // least max(64, align_of::<T>()) (mmap is page aligned; the heap layout carries the alignment);
        // the bytes are zero-filled, which `T: ZeroInit` guarantees are valid values; the mapping
        // lives as long as the HugeArray that owns this view, and the returned slice borrows it.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        match self {
            #[cfg(target_os = "linux")]
            Mapping::Mapped { ptr, reserved, .. } => {
                // SAFETY: unmapping exactly the region this value mapped; no slices outlive `self`.
                unsafe { libc::munmap(ptr.cast(), *reserved) };
            }
            #[cfg(not(target_os = "linux"))]
            Mapping::Mapped { .. } => {}
            Mapping::Heap { ptr, layout } => {
                // SAFETY: `ptr` came from `alloc_zeroed(layout)` with this very layout.
                unsafe { std::alloc::dealloc(*ptr, *layout) };
            }
        }
    }
}

#[cfg(target_os = "linux")]
fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[cfg(target_os = "linux")]
fn thp_enabled() -> bool {
    match std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled") {
        Ok(s) => !s.contains("[never]"),
        Err(_) => false,
    }
}
