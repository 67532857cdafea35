//! The process's allocator: mimalloc, asked for a plain block whenever a plain
//! block is aligned enough.
//!
//! A run makes a few thousand small, short-lived allocations (JSON values, SQL
//! rows, HTTP headers). mimalloc's aligned entry points, which a general-purpose
//! binding calls for every allocation, check the alignment again on each call;
//! counted per C-102 run that check was a fifth of the allocator's own cost.
//! Every mimalloc block is aligned to at least a machine word — block sizes are
//! whole words and pages start aligned — so a request for no more than that takes
//! the plain path, and only the rare stricter one (a cache-padded task cell) takes
//! the aligned path.

use std::alloc::{GlobalAlloc, Layout};

use libmimalloc_sys as mi;

/// The alignment every mimalloc block has.
const WORD: usize = std::mem::size_of::<usize>();

pub struct Allocator;

// SAFETY: each method forwards to the mimalloc function with the contract
// `GlobalAlloc` asks for: blocks of at least `layout.size()` bytes aligned to
// `layout.align()` (directly, or because every block is word-aligned and the
// alignment asked is at most a word), freed by `mi_free` whatever their alignment.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe {
            if layout.align() <= WORD {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe {
            if layout.align() <= WORD {
                mi::mi_zalloc(layout.size()).cast()
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from one of the functions above.
        unsafe { mi::mi_free(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: see the impl; the block keeps the alignment it was allocated with.
        unsafe {
            if layout.align() <= WORD {
                mi::mi_realloc(ptr.cast(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_has_the_alignment_and_size_asked_for() {
        let a = Allocator;
        for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
            for size in [1, 7, 8, 9, 24, 40, 100, 1000, 70_000] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: a non-zero size; each block is freed with its layout.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "alloc {size} bytes at {align}");
                    p.write_bytes(0xAB, size);
                    let p = a.realloc(p, layout, size * 3);
                    assert_eq!(p as usize % align, 0, "realloc {size} bytes at {align}");
                    assert_eq!(*p.add(size - 1), 0xAB, "kept the contents");
                    a.dealloc(p, Layout::from_size_align(size * 3, align).unwrap());
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0, "zalloc {size} bytes at {align}");
                    assert!((0..size).all(|i| *z.add(i) == 0), "zeroed");
                    a.dealloc(z, layout);
                }
            }
        }
    }
}
