//! The version-3 compact event entry ([`TAG_EVENT_COMPACT`](super::TAG_EVENT_COMPACT)): the
//! `EventHeader` as varints and a delta against the chunk's state, the body without its
//! trailing zeros. The layout is documented in [`super`]; both sides reset at each chunk.

use std::{collections::HashMap, mem::offset_of};

use rdmatrace_common::{event::EventHeader, limits::COMM_LEN};

/// Size of the `EventHeader` every ring-buffer record starts with.
pub const HEADER_LEN: usize = size_of::<EventHeader>();
/// Longest record an entry holds (its length is a `u16`); also the limit on a rebuilt record.
pub const MAX_RECORD: usize = u16::MAX as usize;
/// Most bytes the compact form adds to a record's body: every header field as its longest
/// varint, a full comm, the zero count. A longer record is not compacted, so its compact form
/// always fits an entry.
const MAX_OVERHEAD: usize = 5 + 5 + 10 + 5 + 5 + 5 + 1 + COMM_LEN + 3;

const KIND: usize = offset_of!(EventHeader, kind);
const CPU: usize = offset_of!(EventHeader, cpu);
const TS: usize = offset_of!(EventHeader, ts_ns);
const PID: usize = offset_of!(EventHeader, pid);
const TID: usize = offset_of!(EventHeader, tid);
const COMM: usize = offset_of!(EventHeader, comm);

/// Byte order of the records (the recording header's `endian`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Little,
    Big,
}

impl Order {
    pub fn from_header(endian: &str) -> Order {
        if endian == "big" {
            Order::Big
        } else {
            Order::Little
        }
    }

    fn get32(self, b: &[u8], at: usize) -> u32 {
        let w = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        match self {
            Order::Little => u32::from_le_bytes(w),
            Order::Big => u32::from_be_bytes(w),
        }
    }

    fn get64(self, b: &[u8], at: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        match self {
            Order::Little => u64::from_le_bytes(w),
            Order::Big => u64::from_be_bytes(w),
        }
    }

    fn put32(self, b: &mut [u8], at: usize, v: u32) {
        let w = match self {
            Order::Little => v.to_le_bytes(),
            Order::Big => v.to_be_bytes(),
        };
        b[at..at + 4].copy_from_slice(&w);
    }

    fn put64(self, b: &mut [u8], at: usize, v: u64) {
        let w = match self {
            Order::Little => v.to_le_bytes(),
            Order::Big => v.to_be_bytes(),
        };
        b[at..at + 8].copy_from_slice(&w);
    }
}

/// (pid, tid, comm) of a record: what the task table holds.
type Task = (u32, u32, [u8; COMM_LEN]);

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// Bytes of `b` without its trailing zeros.
fn trim_zeros(b: &[u8]) -> &[u8] {
    let end = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
    &b[..end]
}

/// The writer's side: per-chunk state.
pub struct Encoder {
    order: Order,
    prev_ts: u64,
    tasks: HashMap<Task, u32>,
}

impl Encoder {
    pub fn new(order: Order) -> Encoder {
        Encoder {
            order,
            prev_ts: 0,
            tasks: HashMap::new(),
        }
    }

    /// A new chunk starts: forget everything.
    pub fn reset(&mut self) {
        self.prev_ts = 0;
        self.tasks.clear();
    }

    /// Appends the compact form of `record` to `out`; `false` (nothing appended, state
    /// unchanged) when it is not compacted: shorter than an `EventHeader`, or so long that its
    /// compact form might not fit an entry.
    pub fn encode(&mut self, record: &[u8], out: &mut Vec<u8>) -> bool {
        if record.len() < HEADER_LEN || record.len() > MAX_RECORD - MAX_OVERHEAD {
            return false;
        }
        let o = self.order;
        put_varint(out, u64::from(o.get32(record, KIND)));
        put_varint(out, u64::from(o.get32(record, CPU)));
        let ts = o.get64(record, TS);
        put_varint(out, zigzag(ts.wrapping_sub(self.prev_ts) as i64));
        self.prev_ts = ts;
        let mut comm = [0u8; COMM_LEN];
        comm.copy_from_slice(&record[COMM..COMM + COMM_LEN]);
        let task = (o.get32(record, PID), o.get32(record, TID), comm);
        let next = self.tasks.len() as u32;
        match self.tasks.get(&task) {
            Some(&i) => put_varint(out, u64::from(i)),
            None => {
                put_varint(out, u64::from(next));
                put_varint(out, u64::from(task.0));
                put_varint(out, u64::from(task.1));
                let name = trim_zeros(&comm);
                out.push(name.len() as u8);
                out.extend_from_slice(name);
                self.tasks.insert(task, next);
            }
        }
        let body = &record[HEADER_LEN..];
        let kept = trim_zeros(body);
        put_varint(out, (body.len() - kept.len()) as u64);
        out.extend_from_slice(kept);
        true
    }
}

/// The reader's side: per-chunk state and the buffer a record is rebuilt in.
pub struct Decoder {
    order: Order,
    prev_ts: u64,
    tasks: Vec<Task>,
    /// 8-byte words, so the rebuilt record is aligned for the event structs (the decoder
    /// then reads them in place instead of copying them out).
    buf: Vec<u64>,
}

/// Reads compact fields off the front of an entry.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// A LEB128 varint. Most fields fit one byte: that case is inlined at every call, the rest
    /// is [`Cursor::varint_long`].
    #[inline(always)]
    fn varint(&mut self, what: &str) -> Result<u64, String> {
        if let Some(&byte) = self.b.get(self.at) {
            if byte & 0x80 == 0 {
                self.at += 1;
                return Ok(u64::from(byte));
            }
        }
        self.varint_long(what)
    }

    #[inline(never)]
    fn varint_long(&mut self, what: &str) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self
                .b
                .get(self.at)
                .ok_or_else(|| format!("compact event cut inside {what}"))?;
            self.at += 1;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(format!("compact event: {what} overflows 64 bits"));
            }
            v |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!("compact event: {what} overflows 64 bits"))
    }

    fn varint32(&mut self, what: &str) -> Result<u32, String> {
        let v = self.varint(what)?;
        u32::try_from(v).map_err(|_| format!("compact event: {what} {v} overflows 32 bits"))
    }

    fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .ok_or_else(|| format!("compact event cut inside {what}"))?;
        self.at += n;
        Ok(s)
    }
}

impl Decoder {
    pub fn new(order: Order) -> Decoder {
        Decoder {
            order,
            prev_ts: 0,
            tasks: Vec::new(),
            buf: vec![0; 32],
        }
    }

    /// A new chunk starts: forget everything.
    pub fn reset(&mut self) {
        self.prev_ts = 0;
        self.tasks.clear();
    }

    /// The record an entry's bytes stand for (valid until the next call).
    pub fn decode(&mut self, entry: &[u8]) -> Result<&[u8], String> {
        let mut c = Cursor { b: entry, at: 0 };
        let kind = c.varint32("kind")?;
        let cpu = c.varint32("cpu")?;
        let ts = self
            .prev_ts
            .wrapping_add(unzigzag(c.varint("ts_ns delta")?) as u64);
        let task_ix = c.varint("task")?;
        let task = match usize::try_from(task_ix) {
            Ok(i) if i < self.tasks.len() => self.tasks[i],
            Ok(i) if i == self.tasks.len() => {
                let pid = c.varint32("pid")?;
                let tid = c.varint32("tid")?;
                let n = usize::from(c.bytes(1, "comm length")?[0]);
                if n > COMM_LEN {
                    return Err(format!(
                        "compact event: comm of {n} bytes (at most {COMM_LEN})"
                    ));
                }
                let mut comm = [0u8; COMM_LEN];
                comm[..n].copy_from_slice(c.bytes(n, "comm")?);
                self.tasks.push((pid, tid, comm));
                (pid, tid, comm)
            }
            _ => {
                return Err(format!(
                    "compact event: task {task_ix} not in the chunk's table of {}",
                    self.tasks.len()
                ))
            }
        };
        let zeros = c.varint("zero count")?;
        let body = &entry[c.at..];
        let len = usize::try_from(zeros)
            .ok()
            .and_then(|z| z.checked_add(HEADER_LEN + body.len()))
            .filter(|&l| l <= MAX_RECORD)
            .ok_or_else(|| {
                format!(
                    "compact event: {zeros} trailing zeros make a record over {MAX_RECORD} bytes"
                )
            })?;
        self.prev_ts = ts;
        let o = self.order;
        let words = len.div_ceil(8);
        if self.buf.len() < words {
            self.buf.resize(words, 0);
        }
        // SAFETY: the u64 storage is viewed as its bytes (alignment 1 <= 8, same length in
        // bytes); the view borrows `self.buf` mutably, so nothing else reads or writes it.
        let buf: &mut [u8] = unsafe {
            std::slice::from_raw_parts_mut(self.buf.as_mut_ptr().cast::<u8>(), words * 8)
        };
        let buf = &mut buf[..len];
        o.put32(buf, KIND, kind);
        o.put32(buf, CPU, cpu);
        o.put64(buf, TS, ts);
        o.put32(buf, PID, task.0);
        o.put32(buf, TID, task.1);
        buf[COMM..COMM + COMM_LEN].copy_from_slice(&task.2);
        let end = HEADER_LEN + body.len();
        buf[HEADER_LEN..end].copy_from_slice(body);
        buf[end..].fill(0);
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, cpu: u32, ts: u64, pid: u32, comm: &[u8], body: &[u8]) -> Vec<u8> {
        let mut r = vec![0u8; HEADER_LEN];
        let o = Order::Little;
        o.put32(&mut r, KIND, kind);
        o.put32(&mut r, CPU, cpu);
        o.put64(&mut r, TS, ts);
        o.put32(&mut r, PID, pid);
        o.put32(&mut r, TID, pid.wrapping_add(1));
        r[COMM..COMM + comm.len()].copy_from_slice(comm);
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn records_round_trip_byte_for_byte_in_both_orders() {
        for order in [Order::Little, Order::Big] {
            let recs = [
                record(1, 0, 1_000_000, 7, b"ib_write_bw", &[1, 2, 0, 0, 0]),
                record(6, 3, 999_000, 7, b"ib_write_bw", &[0; 128]),
                record(7, 1, u64::MAX, 8, b"exactly16bytes!!", &[9; 3]),
                record(2, u32::MAX, 0, u32::MAX, b"", &[]),
                // Bytes after the comm's NUL are kept too.
                record(3, 2, 5, 7, b"a\0b", &[0, 0, 1]),
            ];
            let mut enc = Encoder::new(order);
            let mut dec = Decoder::new(order);
            for r in &recs {
                let mut out = Vec::new();
                assert!(enc.encode(r, &mut out));
                assert!(out.len() < r.len() || r.len() <= HEADER_LEN + 3, "{out:?}");
                assert_eq!(dec.decode(&out).expect("decodes"), &r[..]);
            }
        }
    }

    #[test]
    fn a_repeated_task_is_a_one_byte_reference() {
        let mut enc = Encoder::new(Order::Little);
        let r = record(6, 1, 10, 42, b"rt-storm", &[5; 8]);
        let mut first = Vec::new();
        enc.encode(&r, &mut first);
        let mut again = Vec::new();
        enc.encode(&r, &mut again);
        // kind, cpu, dts 0, task 0, zeros 0, then the 8-byte body.
        assert_eq!(again, [6, 1, 0, 0, 0, 5, 5, 5, 5, 5, 5, 5, 5]);
        assert!(first.len() > again.len());
    }

    #[test]
    fn short_and_oversized_records_are_left_alone() {
        let mut enc = Encoder::new(Order::Little);
        let mut out = Vec::new();
        assert!(!enc.encode(&[1; HEADER_LEN - 1], &mut out));
        assert!(!enc.encode(&vec![1; MAX_RECORD + 1], &mut out));
        assert!(out.is_empty());
    }

    #[test]
    fn damaged_entries_are_errors_not_panics() {
        let mut dec = Decoder::new(Order::Little);
        for bad in [
            &[][..],
            &[1, 0, 0, 5][..],                         // task 5 of an empty table
            &[0x80; 11][..],                           // varint never ends
            &[0xff, 0xff, 0xff, 0xff, 0x7f][..],       // kind over 32 bits
            &[1, 0, 0, 0, 1, 1, 17][..],               // comm too long
            &[1, 0, 0, 0, 1, 1, 0, 0xff, 0xff, 4][..], // too many zeros
        ] {
            assert!(dec.decode(bad).is_err(), "{bad:?}");
        }
        // The first literal of a fresh table is accepted.
        let mut dec = Decoder::new(Order::Little);
        assert_eq!(
            dec.decode(&[1, 0, 0, 0, 1, 1, 0, 0]).map(<[u8]>::len),
            Ok(HEADER_LEN)
        );
    }
}
