//! Buffers sized for the worst tick, resident from the start.
//!
//! An engine thread's batch and its data path's message arrays are reserved
//! for the largest tick (thousands of packets), but a steady tick fills a
//! few pages of them. The rest would first be touched by a backlog — after
//! the machine stalled, when the engine is already late — as page faults
//! on the packet path, and the process's memory would step up then (a
//! 500-session soak: +0.3 MiB per engine thread at a 0.6 s stop). Faulted
//! in when made, that memory is in the footprint from the first minute.

/// Faults in every page of `v`'s capacity, writable, without writing a
/// byte (`MADV_POPULATE_WRITE`, Linux 5.14; on older kernels the pages stay
/// lazy, which is only slower in a backlog).
pub fn prefault<T>(v: &mut Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if bytes == 0 {
        return;
    }
    let page = fjord_storage::overlay::page_size();
    let start = v.as_mut_ptr() as usize;
    let aligned = start & !(page - 1);
    // SAFETY: the range is the vector's allocation, widened down to its
    // first page, which is mapped (the allocator's own header or heap lies
    // there); MADV_POPULATE_WRITE only faults pages in and changes no byte.
    unsafe {
        libc::madvise(
            aligned as *mut libc::c_void,
            start + bytes - aligned,
            libc::MADV_POPULATE_WRITE,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::prefault;

    /// Pages of `v`'s capacity the kernel has resident.
    fn resident_pages(v: &Vec<u8>) -> (usize, usize) {
        let page = fjord_storage::overlay::page_size();
        let start = v.as_ptr() as usize & !(page - 1);
        let len = v.as_ptr() as usize + v.capacity() - start;
        let pages = len.div_ceil(page);
        let mut map = vec![0u8; pages];
        // SAFETY: the range is mapped (the vector's allocation); `map` has
        // one byte per page.
        let rc = unsafe { libc::mincore(start as *mut _, len, map.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        (map.iter().filter(|&&b| b & 1 == 1).count(), pages)
    }

    #[test]
    fn a_reserved_buffer_is_resident_after_prefault_and_not_before() {
        // Large enough that the allocator maps it fresh: untouched pages.
        let mut v: Vec<u8> = Vec::with_capacity(8 << 20);
        let (before, pages) = resident_pages(&v);
        assert!(
            before < pages / 2,
            "fresh capacity is lazy: {before}/{pages}"
        );
        prefault(&mut v);
        let (after, pages) = resident_pages(&v);
        assert_eq!(after, pages, "every page of the capacity is resident");
        assert!(v.is_empty());
    }

    #[test]
    fn nothing_reserved_is_a_no_op() {
        prefault(&mut Vec::<u64>::new());
        prefault(&mut Vec::<()>::with_capacity(100));
    }
}
