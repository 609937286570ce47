//! The bytes the server's own code holds on the heap, counted as it
//! allocates and frees: the figure a soak judges for leaks.
//!
//! glibc's `mallinfo2` in-use figure (`fjord_heap_allocated_bytes`) is not
//! that: it also counts chunk headers and the chunks each thread's cache
//! (tcache) keeps after a free, which fill slowly, size class by size
//! class, over hours. Written here, a handful of lines, because the crates
//! that count allocations are one-off, unmaintained wrappers.
//!
//! The binary installs [`Counting`] as its global allocator; the count is
//! one relaxed atomic add per allocation, and the engine allocates nothing
//! per packet.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicIsize, Ordering::Relaxed},
};

static LIVE: AtomicIsize = AtomicIsize::new(0);

/// The system allocator, counting the bytes it hands out and gets back.
pub struct Counting;

// SAFETY: every method forwards to `System` with its caller's arguments
// unchanged and returns its result; the count is a static atomic, so
// counting cannot allocate or re-enter.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see above).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        }
        p
    }
}

/// Bytes held now; none when [`Counting`] is not the global allocator
/// (nothing was ever counted).
pub fn live_bytes() -> Option<u64> {
    let n = LIVE.load(Relaxed);
    (n > 0).then_some(n as u64)
}
