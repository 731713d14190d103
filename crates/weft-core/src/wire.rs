//! weft's setup wire formats (weft-core's descriptors, weft-net's channel offers) use the
//! bootstrap's codec (explicit little-endian fields, length-checked reads, trailing bytes
//! rejected); this adds the one field shape it lacks.

use weft_bootstrap::codec::{CodecError, Reader, Writer};

/// Writes a `u16` length and the bytes.
pub fn put_short_bytes(w: &mut Writer, bytes: &[u8]) -> Result<(), CodecError> {
    let len = u16::try_from(bytes.len())
        .map_err(|_| CodecError::InvalidValue { field: "short byte string length", value: bytes.len() as u64 })?;
    w.put_u16(len);
    w.put_bytes(bytes);
    Ok(())
}

/// Reads what [`put_short_bytes`] wrote.
pub fn short_bytes<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], CodecError> {
    let len = r.u16()?;
    r.take(usize::from(len))
}

/// A `usize` that must fit the `u32` of the wire.
pub fn to_u32(field: &'static str, value: usize) -> Result<u32, CodecError> {
    u32::try_from(value).map_err(|_| CodecError::InvalidValue { field, value: value as u64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_bytes_round_trip_and_reject_truncation_and_overlong_input() {
        let mut w = Writer::new();
        put_short_bytes(&mut w, b"ab").unwrap();
        let bytes = w.into_inner();
        let mut r = Reader::new(&bytes);
        assert_eq!(short_bytes(&mut r).unwrap(), b"ab");
        r.finish().unwrap();
        assert!(short_bytes(&mut Reader::new(&bytes[..3])).is_err());
        assert!(put_short_bytes(&mut Writer::new(), &vec![0; 70_000]).is_err());
    }
}
