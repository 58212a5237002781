//! User-space samples in the kernel records' wire format: a sample is an `EventHeader` and a
//! body from `rdmatrace-common`, as bytes, so it decodes, correlates and records like a kernel
//! record. Used by every sampler (`sample`, `netlink`).

use rdmatrace_common::event::{EventHeader, EventKind};

/// Bytes of a Pod value, for feeding samples through the same path as kernel records.
pub fn pod_bytes<T: aya::Pod>(v: &T) -> Vec<u8> {
    // SAFETY: T is Pod: every byte is initialised and may be viewed as u8.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
}

/// The header of a user-space sample (no CPU, tid = pid).
pub fn header(kind: EventKind, ts_ns: u64, pid: u32, comm: [u8; 16]) -> EventHeader {
    EventHeader {
        kind: kind as u32,
        cpu: 0,
        ts_ns,
        pid,
        tid: pid,
        comm,
    }
}

/// `s` NUL padded (and cut) into a fixed C string field.
pub fn fixed<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let n = s.len().min(N - 1);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}
