//! The benchmark binary's global allocator: large allocations on transparent huge pages, so the
//! peers (hashbrown, dashmap, sux, std maps), which allocate from the heap, get the same page size
//! as flowplane's tables, which map their own memory on huge pages.
//!
//! Every allocation of at least [`LARGE`] bytes (1 MiB, where flowplane's own arrays leave the
//! heap) is its own anonymous mapping, rounded up to and aligned on 2 MiB and advised with
//! `madvise(MADV_HUGEPAGE)` (transparent huge pages are in `madvise` mode on common distributions,
//! so nothing else would give them to the heap). Smaller ones go to the system
//! allocator. Whether the kernel really grants 2 MiB pages depends on free memory not being
//! fragmented, so the benchmarks compact memory before building a table and record what each
//! table got (`env::measure_pages`).
//!
//! Why not glibc's own switch (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`): glibc 2.36 (Debian 12)
//! decides whether THP is in `madvise` mode by comparing the bytes it read from
//! `/sys/kernel/mm/transparent_hugepage/enabled` with `strcmp` on a buffer it never terminates, so
//! the answer depends on leftover stack contents: on this machine the tunable took effect in about
//! half of the runs, and a peer silently got 4 KiB pages in the other half.
//!
//! [`set_plain`] turns the huge-page path off (`FLOWPLANE_BENCH_HEAP=4k`), to measure what the
//! page size is worth.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// Allocations of at least this many bytes get their own huge-page-advised mapping: the same limit
/// at which `fp_mem::HugeArray` stops using the heap and maps (huge) pages, so a peer structure
/// and one of flowplane's of the same size get the same pages (a unit test pins the two together).
pub const LARGE: usize = 1 << 20;
const HUGE: usize = 2 << 20;

static PLAIN: AtomicBool = AtomicBool::new(false);

/// Serve every allocation from the system allocator from now on (allocations already made keep
/// their kind: [`HugeHeap`] decides by size, not by this switch, when it frees them).
pub fn set_plain() {
    PLAIN.store(true, Ordering::Relaxed);
}

/// Whether large allocations are advised for huge pages.
pub fn huge() -> bool {
    !PLAIN.load(Ordering::Relaxed)
}

/// The global allocator (see the module docs).
pub struct HugeHeap;

fn round_up(n: usize) -> usize {
    n.div_ceil(HUGE) * HUGE
}

/// A mapping of `len` bytes (a multiple of 2 MiB) starting on a 2 MiB boundary, advised for huge
/// pages; null when the system has no memory.
fn map_aligned(len: usize, advise: bool) -> *mut u8 {
    let over = len + HUGE;
    // SAFETY: an anonymous private mapping at an address of the kernel's choice touches no memory
    // of ours; the result is checked against MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            over,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    let start = p as usize;
    let aligned = start.next_multiple_of(HUGE);
    let head = aligned - start;
    let tail = over - head - len;
    // SAFETY: [start, start + head) and [aligned + len, aligned + len + tail) lie inside the
    // mapping just made and nothing refers to them; unmapping them keeps [aligned, aligned + len).
    // madvise only gives the kernel a hint about the range we own.
    unsafe {
        if head > 0 {
            libc::munmap(start as *mut libc::c_void, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
        if advise {
            libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
    }
    aligned as *mut u8
}

// SAFETY: large blocks are whole private mappings of at least `layout.size()` bytes aligned to
// 2 MiB (which satisfies every alignment up to 2 MiB; larger ones go to the system allocator),
// freed with the same rounded length; small blocks and over-aligned ones are the system
// allocator's, and `dealloc` routes by the same test on the layout it is given, which the caller
// guarantees is the one the block was allocated with.
unsafe impl GlobalAlloc for HugeHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_large(layout) {
            map_aligned(round_up(layout.size()), huge())
        } else {
            // SAFETY: forwarded with the caller's layout, under the caller's guarantees.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_large(layout) {
            // A fresh anonymous mapping reads as zeros.
            map_aligned(round_up(layout.size()), huge())
        } else {
            // SAFETY: as in `alloc`.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_large(layout) {
            // SAFETY: `ptr` came from `map_aligned` with this rounded length (same layout).
            unsafe {
                libc::munmap(ptr as *mut libc::c_void, round_up(layout.size()));
            }
        } else {
            // SAFETY: `ptr` came from `System` with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` with `layout.align()` is a valid layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !is_large(layout) && !is_large(new) {
            // SAFETY: both sides are the system allocator's.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        if is_large(layout) && is_large(new) && round_up(new_size) == round_up(layout.size()) {
            return ptr;
        }
        // SAFETY: allocate, copy the smaller of both sizes, free the old block with its layout —
        // the contract of `realloc`.
        unsafe {
            let p = self.alloc(new);
            if !p.is_null() {
                std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            p
        }
    }
}

fn is_large(layout: Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= HUGE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_means_what_fp_mem_maps() {
        use fp_mem::{HugeArray, PageKind, PagePolicy};
        let below: HugeArray<u8> = HugeArray::new(LARGE - 1, PagePolicy::Transparent).unwrap();
        assert_eq!(
            below.pages(),
            PageKind::Heap,
            "below LARGE both use the heap"
        );
        let at: HugeArray<u8> = HugeArray::new(LARGE, PagePolicy::Transparent).unwrap();
        assert_ne!(at.pages(), PageKind::Heap, "from LARGE both map huge pages");
    }

    #[test]
    fn large_blocks_are_aligned_zeroed_and_keep_contents_across_growth() {
        let mut v: Vec<u64> = vec![0; (LARGE / 8) * 3];
        assert_eq!(
            v.as_ptr() as usize % HUGE,
            0,
            "large block on a 2 MiB boundary"
        );
        assert!(v.iter().all(|&x| x == 0));
        for (i, x) in v.iter_mut().enumerate() {
            *x = i as u64;
        }
        // Growth through realloc (large to larger), then shrinking below LARGE and back.
        v.reserve_exact(LARGE);
        assert_eq!(v.as_ptr() as usize % HUGE, 0);
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
        v.truncate(1000);
        v.shrink_to_fit();
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
        v.resize(LARGE, 7);
        assert_eq!(v[999], 999);
        assert_eq!(v[LARGE - 1], 7);
        // Small → large → small through one block.
        let mut s: Vec<u8> = Vec::with_capacity(16);
        s.extend_from_slice(b"kept");
        s.resize(LARGE + 1, 0);
        assert_eq!(&s[..4], b"kept");
        s.truncate(4);
        s.shrink_to_fit();
        assert_eq!(&s[..], b"kept");
    }

    #[test]
    fn over_aligned_layouts_go_to_the_system_allocator() {
        let layout = Layout::from_size_align(LARGE, 4 * HUGE).unwrap();
        // SAFETY: a non-zero layout; the block is freed with the same layout.
        unsafe {
            let p = HugeHeap.alloc(layout);
            assert!(!p.is_null());
            assert_eq!(p as usize % (4 * HUGE), 0);
            p.write(1);
            HugeHeap.dealloc(p, layout);
        }
    }
}
