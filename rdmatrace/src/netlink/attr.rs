//! Netlink attributes (`struct nlattr`, TLV aligned to 4 bytes): parsing and building. Pure.

use super::NetlinkError;

const NLA_HDRLEN: usize = 4;
/// `NLA_F_NESTED | NLA_F_NET_BYTEORDER`: flags carried in the type field.
const NLA_TYPE_MASK: u16 = !(0x8000 | 0x4000);

pub const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// One attribute: its type (flags stripped) and payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr<'a> {
    pub kind: u16,
    pub payload: &'a [u8],
}

impl<'a> Attr<'a> {
    pub fn u8(&self) -> Result<u8, NetlinkError> {
        self.payload
            .first()
            .copied()
            .ok_or(NetlinkError::Malformed("u8 attribute too short"))
    }

    pub fn u32(&self) -> Result<u32, NetlinkError> {
        let b: [u8; 4] = self
            .payload
            .get(..4)
            .and_then(|s| s.try_into().ok())
            .ok_or(NetlinkError::Malformed("u32 attribute too short"))?;
        Ok(u32::from_ne_bytes(b))
    }

    pub fn u64(&self) -> Result<u64, NetlinkError> {
        let b: [u8; 8] = self
            .payload
            .get(..8)
            .and_then(|s| s.try_into().ok())
            .ok_or(NetlinkError::Malformed("u64 attribute too short"))?;
        Ok(u64::from_ne_bytes(b))
    }

    /// A NUL-terminated string (the terminator and anything after it dropped).
    pub fn str(&self) -> String {
        let end = self
            .payload
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.payload.len());
        String::from_utf8_lossy(&self.payload[..end]).into_owned()
    }

    /// The attributes nested in this one.
    pub fn nested(&self) -> Attrs<'a> {
        Attrs::new(self.payload)
    }
}

/// Iterator over a run of attributes; a truncated or malformed one ends it with an error.
#[derive(Clone, Debug)]
pub struct Attrs<'a> {
    rest: &'a [u8],
}

impl<'a> Attrs<'a> {
    pub fn new(bytes: &'a [u8]) -> Attrs<'a> {
        Attrs { rest: bytes }
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<Attr<'a>, NetlinkError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.len() < NLA_HDRLEN {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([self.rest[0], self.rest[1]]));
        let kind = u16::from_ne_bytes([self.rest[2], self.rest[3]]) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || len > self.rest.len() {
            self.rest = &[];
            return Some(Err(NetlinkError::Malformed(
                "attribute length out of bounds",
            )));
        }
        let payload = &self.rest[NLA_HDRLEN..len];
        self.rest = self.rest.get(align4(len)..).unwrap_or(&[]);
        Some(Ok(Attr { kind, payload }))
    }
}

/// Appends attributes to a message body.
#[derive(Default, Debug)]
pub struct AttrWriter {
    pub buf: Vec<u8>,
}

impl AttrWriter {
    pub fn put(&mut self, kind: u16, payload: &[u8]) -> &mut Self {
        let len = NLA_HDRLEN + payload.len();
        // Attribute payloads we build are a few bytes; u16 cannot overflow.
        self.buf
            .extend_from_slice(&(len.min(usize::from(u16::MAX)) as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        self.buf.resize(align4(self.buf.len()), 0);
        self
    }

    pub fn u32(&mut self, kind: u16, v: u32) -> &mut Self {
        self.put(kind, &v.to_ne_bytes())
    }

    pub fn u64(&mut self, kind: u16, v: u64) -> &mut Self {
        self.put(kind, &v.to_ne_bytes())
    }

    pub fn str(&mut self, kind: u16, s: &str) -> &mut Self {
        let mut b = s.as_bytes().to_vec();
        b.push(0);
        self.put(kind, &b)
    }

    /// A nested attribute holding what `f` writes.
    pub fn nest(&mut self, kind: u16, f: impl FnOnce(&mut AttrWriter)) -> &mut Self {
        let mut inner = AttrWriter::default();
        f(&mut inner);
        self.put(kind | 0x8000, &inner.buf)
    }
}
