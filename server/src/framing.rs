//! Line framing of the TCP protocol: bytes from a connection in, request lines out.
//!
//! A request is one line ending in `\n` (`docs/protocol.md`). A line longer than
//! `max_line_bytes` is not kept: it becomes [`Line::TooLong`] (answered `line_too_long`) and
//! the rest of it is discarded up to its newline, so a client that sends a huge line costs the
//! server at most `max_line_bytes` of memory and the connection goes on with the next line. At
//! the end of the stream, an unterminated last line is still a request. Nothing here reads a
//! socket or knows a command: the connection loop feeds bytes and runs what comes out.

/// A cut line: a request to run, or one that was too long (with its length so far).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// The line's bytes, without the newline.
    Request(Vec<u8>),
    /// A line over the limit, of at least this many bytes; its bytes are dropped.
    TooLong(usize),
}

/// The bytes of one connection not yet cut into lines.
#[derive(Debug)]
pub struct Framer {
    max_line_bytes: usize,
    buf: Vec<u8>,
    /// Inside a line already answered as too long: drop bytes up to its newline.
    discarding: bool,
}

impl Framer {
    /// A framer for lines of at most `max_line_bytes`.
    #[must_use]
    pub fn new(max_line_bytes: usize) -> Framer {
        Framer {
            max_line_bytes,
            buf: Vec::new(),
            discarding: false,
        }
    }

    /// Adds bytes read from the connection.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Cuts up to `max` lines off the front, appending them to `lines`. With `eof`, the bytes
    /// after the last newline are a last line. Returns whether a newline was consumed (a
    /// line arrived whole, so the client is not stalling).
    pub fn cut(&mut self, lines: &mut Vec<Line>, max: usize, eof: bool) -> bool {
        let mut start = 0;
        let mut cut = 0;
        while cut < max {
            let Some(i) = memchr::memchr(b'\n', &self.buf[start..]) else {
                break;
            };
            let line = &self.buf[start..start + i];
            start += i + 1;
            if self.discarding {
                self.discarding = false;
            } else if line.len() > self.max_line_bytes {
                lines.push(Line::TooLong(line.len()));
                cut += 1;
            } else {
                lines.push(Line::Request(line.to_vec()));
                cut += 1;
            }
        }
        self.buf.drain(..start);
        if memchr::memchr(b'\n', &self.buf).is_none() {
            if self.discarding {
                self.buf.clear();
            } else if self.buf.len() > self.max_line_bytes {
                lines.push(Line::TooLong(self.buf.len()));
                self.buf.clear();
                self.discarding = true;
            } else if eof && !self.buf.is_empty() {
                lines.push(Line::Request(std::mem::take(&mut self.buf)));
            }
        }
        start > 0
    }

    /// Whether part of a line has arrived and its newline has not (a client that stops
    /// there is stalling, not idle).
    #[must_use]
    pub fn has_partial_line(&self) -> bool {
        !self.buf.is_empty() || self.discarding
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(s: &str) -> Line {
        Line::Request(s.as_bytes().to_vec())
    }

    #[test]
    fn lines_are_cut_at_newlines_and_a_half_line_waits() {
        let mut f = Framer::new(100);
        let mut lines = Vec::new();
        f.push(b"PING\nGET {\"memory_id\": 1}\nSTO");
        assert!(f.cut(&mut lines, 64, false));
        assert_eq!(lines, vec![req("PING"), req("GET {\"memory_id\": 1}")]);
        assert!(f.has_partial_line());
        lines.clear();
        assert!(!f.cut(&mut lines, 64, false), "no newline yet");
        assert!(lines.is_empty());
        f.push(b"RE {}\n");
        f.cut(&mut lines, 64, false);
        assert_eq!(lines, vec![req("STORE {}")]);
        assert!(!f.has_partial_line());
    }

    #[test]
    fn a_batch_takes_at_most_max_lines_and_keeps_the_rest_in_order() {
        let mut f = Framer::new(100);
        f.push(b"a\nb\nc\nd\n");
        let mut lines = Vec::new();
        f.cut(&mut lines, 3, false);
        assert_eq!(lines, vec![req("a"), req("b"), req("c")]);
        lines.clear();
        f.cut(&mut lines, 3, false);
        assert_eq!(lines, vec![req("d")]);
    }

    #[test]
    fn a_line_over_the_limit_is_reported_once_and_dropped_to_its_newline() {
        // Whole in the buffer.
        let mut f = Framer::new(8);
        let mut lines = Vec::new();
        f.push(b"0123456789\nPING\n");
        f.cut(&mut lines, 64, false);
        assert_eq!(lines, vec![Line::TooLong(10), req("PING")]);

        // Arriving in pieces: reported as soon as it passes the limit, never buffered whole.
        let mut f = Framer::new(8);
        let mut lines = Vec::new();
        f.push(b"0123456789");
        f.cut(&mut lines, 64, false);
        assert_eq!(lines, vec![Line::TooLong(10)]);
        assert!(f.has_partial_line(), "still inside the long line");
        lines.clear();
        f.push(&[b'x'; 1000]);
        f.cut(&mut lines, 64, false);
        assert!(
            lines.is_empty(),
            "the rest of it is dropped, not reported again"
        );
        f.push(b"yyy\nPING\n");
        f.cut(&mut lines, 64, false);
        assert_eq!(lines, vec![req("PING")]);
        assert!(!f.has_partial_line());
    }

    #[test]
    fn at_the_end_of_the_stream_an_unterminated_line_is_a_request() {
        let mut f = Framer::new(100);
        let mut lines = Vec::new();
        f.push(b"PING\nSTATS");
        f.cut(&mut lines, 64, true);
        assert_eq!(lines, vec![req("PING"), req("STATS")]);
        lines.clear();
        f.cut(&mut lines, 64, true);
        assert!(lines.is_empty(), "nothing twice");
    }

    #[test]
    fn an_empty_line_is_a_request_the_parser_answers() {
        let mut f = Framer::new(100);
        let mut lines = Vec::new();
        f.push(b"\n\r\n");
        f.cut(&mut lines, 64, false);
        assert_eq!(lines, vec![req(""), req("\r")]);
    }
}
