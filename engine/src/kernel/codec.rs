//! Little-endian, fixed-width field encoding shared by the log and checkpoint formats.
//!
//! The decoder never panics: every read is bounds-checked and every length is checked
//! against the bytes remaining before anything is allocated.

#![deny(clippy::unwrap_used, clippy::indexing_slicing)]

/// Appends fields to a buffer.
#[derive(Debug)]
pub(crate) struct Encoder<'a> {
    buf: &'a mut Vec<u8>,
}

impl<'a> Encoder<'a> {
    pub(crate) fn new(buf: &'a mut Vec<u8>) -> Encoder<'a> {
        Encoder { buf }
    }
    pub(crate) fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub(crate) fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn f32(&mut self, v: f32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn bytes(&mut self, v: &[u8]) {
        self.buf.extend_from_slice(v);
    }
    /// `u32` length, then the bytes.
    pub(crate) fn str(&mut self, v: &str) {
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.bytes(v.as_bytes());
    }
    pub(crate) fn opt_str(&mut self, v: Option<&str>) {
        match v {
            None => self.u8(0),
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
        }
    }
}

/// Why a decode failed, and where (relative to the start of the decoded bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError {
    /// Byte offset of the field that failed.
    pub offset: usize,
    /// Which check failed.
    pub reason: &'static str,
}

/// Reads fields from a byte slice.
#[derive(Debug)]
pub(crate) struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Decoder<'a> {
        Decoder { buf, pos: 0 }
    }
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub(crate) fn fail<T>(&self, reason: &'static str) -> Result<T, DecodeError> {
        Err(DecodeError {
            offset: self.pos,
            reason,
        })
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end.and_then(|e| self.buf.get(self.pos..e)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => self.fail("truncated field"),
        }
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let at = self.pos;
        self.take(N)?.try_into().map_err(|_| DecodeError {
            offset: at,
            reason: "truncated field",
        })
    }
    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        self.array().map(u16::from_le_bytes)
    }
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_le_bytes)
    }
    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }
    pub(crate) fn i64(&mut self) -> Result<i64, DecodeError> {
        self.array().map(i64::from_le_bytes)
    }
    pub(crate) fn f32(&mut self) -> Result<f32, DecodeError> {
        self.array().map(f32::from_le_bytes)
    }
    pub(crate) fn hash(&mut self) -> Result<[u8; 32], DecodeError> {
        self.array()
    }
    /// A `u32`-length-prefixed UTF-8 string of at most `max_bytes` bytes.
    pub(crate) fn str(&mut self, max_bytes: usize) -> Result<String, DecodeError> {
        let len = self.u32()? as usize;
        if len > max_bytes || len > self.remaining() {
            return self.fail("string length out of bounds");
        }
        let at = self.pos;
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| DecodeError {
                offset: at,
                reason: "invalid UTF-8",
            })
    }
    pub(crate) fn opt_str(&mut self, max_bytes: usize) -> Result<Option<String>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => self.str(max_bytes).map(Some),
            _ => self.fail("bad option tag"),
        }
    }
}
