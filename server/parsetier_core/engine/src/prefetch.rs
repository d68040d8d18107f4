//! Cache hints for a host that steps many sessions in turn (`ParseBatch`'s packed items): with a
//! thousand open sessions no session's state stays in cache from one step to its next, and each
//! of its buffers a step reaches costs a wait on memory. Asked for while the previous session
//! steps, they arrive in the meantime. Hints only: nothing here reads or changes what they name.

/// Ask for the cache lines of `bytes` bytes from `at` (never a fault, on any address).
#[inline]
pub fn lines(at: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..bytes).step_by(64) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch reads nothing the program sees and faults on no address; SSE (which
        // it needs) is part of x86_64's baseline.
        #[allow(unused_unsafe)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(line).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (at, bytes);
}

/// Where the next bytes appended to `text` go (the line a step's append writes first).
#[inline]
pub fn text_end(text: &str) {
    lines(text.as_ptr().wrapping_add(text.len()), 1);
}

/// A buffer's first line (a step's scratch, cleared and written from its start).
#[inline]
pub fn start<T>(items: &[T]) {
    lines(items.as_ptr().cast(), 1);
}

/// Where the next item pushed to `items` goes.
#[inline]
pub fn end<T>(items: &[T]) {
    lines(items.as_ptr().wrapping_add(items.len()).cast(), 1);
}
