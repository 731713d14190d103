//! A little-endian byte codec for weft-core's wire formats: explicit field order, length-checked
//! reads, no trailing bytes accepted.

/// Decoding failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Input ended before a field.
    #[error("truncated {what}: needed {needed} more bytes, {left} left")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        left: usize,
    },
    /// Input continued after the last field.
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
    /// A field held a value the format does not allow.
    #[error("bad {what}: {detail}")]
    Invalid {
        /// The field.
        what: &'static str,
        /// Why.
        detail: String,
    },
}

/// Appends fields to a byte vector.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }
    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes(&[v])
    }
    pub(crate) fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    /// A u16 length followed by the bytes; longer input is a caller bug caught by the check.
    pub(crate) fn short_bytes(&mut self, b: &[u8]) -> Result<&mut Self, WireError> {
        let len = u16::try_from(b.len())
            .map_err(|_| WireError::Invalid { what: "short byte string", detail: format!("{} bytes", b.len()) })?;
        Ok(self.u16(len).bytes(b))
    }
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

/// Reads fields from a byte slice.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }
    pub(crate) fn take(&mut self, what: &'static str, n: usize) -> Result<&'a [u8], WireError> {
        if self.rest.len() < n {
            return Err(WireError::Truncated { what, needed: n, left: self.rest.len() });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(what, N)?);
        Ok(out)
    }
    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn short_bytes(&mut self, what: &'static str) -> Result<&'a [u8], WireError> {
        let len = self.u16(what)?;
        self.take(what, usize::from(len))
    }
    pub(crate) fn finish(self) -> Result<(), WireError> {
        if self.rest.is_empty() { Ok(()) } else { Err(WireError::Trailing(self.rest.len())) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_trailing_bytes_are_rejected() {
        let bytes = Writer::default().u8(1).u16(2).u32(3).u64(4).short_bytes(b"ab").unwrap().finish();
        let mut r = Reader::new(&bytes);
        assert_eq!((r.u8("a").unwrap(), r.u16("b").unwrap(), r.u32("c").unwrap()), (1, 2, 3));
        assert_eq!(r.u64("d").unwrap(), 4);
        assert_eq!(r.short_bytes("e").unwrap(), b"ab");
        r.finish().unwrap();
        let mut longer = bytes.clone();
        longer.push(0);
        let mut r = Reader::new(&longer);
        r.take("all", bytes.len()).unwrap();
        assert_eq!(r.finish(), Err(WireError::Trailing(1)));
        assert!(matches!(Reader::new(&[1]).u32("x"), Err(WireError::Truncated { needed: 4, left: 1, .. })));
    }
}
