//! SPDY/3.1 framing (pure): the frames Kubernetes' streaming clients send
//! through `k8s.io/apimachinery/pkg/util/httpstream/spdy` (moby/spdystream)
//! and the header blocks' compression.
//!
//! A frame starts with 8 bytes. Control frames: the control bit, a 15-bit
//! version (3), a 16-bit type, 8 bits of flags and a 24-bit length. Data
//! frames: a clear control bit, a 31-bit stream id, flags and length. The
//! name/value header blocks of SYN_STREAM, SYN_REPLY and HEADERS are a count
//! and length-prefixed names and values (32 bits each), compressed as one
//! zlib stream per direction with SPDY/3's preset dictionary, each block
//! ending with a sync flush.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The SPDY/3 header dictionary (draft 3, section 2.6.10.1; 1423 bytes, as
/// spdystream's `headerDictionary`).
pub const DICTIONARY: &[u8] = DICT_BYTES;

const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// The FIN flag (data frames, SYN_STREAM, SYN_REPLY, HEADERS).
pub const FLAG_FIN: u8 = 0x01;
/// SYN_STREAM's UNIDIRECTIONAL flag.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;
/// The largest frame payload the 24-bit length allows.
pub const MAX_LENGTH: usize = (1 << 24) - 1;
/// The largest payload this node accepts (a header block or data): bigger
/// frames are a protocol error, so a peer cannot make it buffer without end.
pub const MAX_ACCEPTED: usize = 1 << 20;

/// RST_STREAM's PROTOCOL_ERROR.
pub const RST_PROTOCOL_ERROR: u32 = 1;
/// RST_STREAM's REFUSED_STREAM.
pub const RST_REFUSED_STREAM: u32 = 3;

/// Header names and values in order (names lowercase, as SPDY/3 requires;
/// a value with several parts has them NUL-separated).
pub type Headers = Vec<(String, String)>;

/// One SPDY/3 frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Data on a stream.
    Data {
        /// Stream id.
        stream: u32,
        /// Flags (FIN).
        flags: u8,
        /// Payload.
        data: Bytes,
    },
    /// A new stream.
    SynStream {
        /// Stream id.
        stream: u32,
        /// The stream it belongs to (0: none).
        associated: u32,
        /// Priority (3 bits).
        priority: u8,
        /// Flags (FIN, UNIDIRECTIONAL).
        flags: u8,
        /// Headers.
        headers: Headers,
    },
    /// The answer to a SYN_STREAM.
    SynReply {
        /// Stream id.
        stream: u32,
        /// Flags (FIN).
        flags: u8,
        /// Headers.
        headers: Headers,
    },
    /// A stream ends abnormally.
    RstStream {
        /// Stream id.
        stream: u32,
        /// Status code.
        status: u32,
    },
    /// Settings: `(flags, id, value)`.
    Settings {
        /// Flags of the frame.
        flags: u8,
        /// Entries.
        entries: Vec<(u8, u32, u32)>,
    },
    /// A ping, answered with the same id.
    Ping {
        /// Id.
        id: u32,
    },
    /// The session ends.
    GoAway {
        /// The last stream the sender accepted.
        last_good: u32,
        /// Status code.
        status: u32,
    },
    /// More headers on a stream.
    Headers {
        /// Stream id.
        stream: u32,
        /// Flags (FIN).
        flags: u8,
        /// Headers.
        headers: Headers,
    },
    /// Flow control.
    WindowUpdate {
        /// Stream id.
        stream: u32,
        /// Bytes added to the window.
        delta: u32,
    },
    /// A control frame of a type this codec does not know (skipped).
    Unknown {
        /// Its type.
        kind: u16,
    },
}

/// What can go wrong reading or writing frames.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpdyError {
    /// A control frame of another SPDY version.
    #[error("unsupported SPDY version {0}")]
    Version(u16),
    /// A frame too short for its type, or a bad header block.
    #[error("invalid {0} frame")]
    Invalid(&'static str),
    /// A frame bigger than this node accepts.
    #[error("frame of {0} bytes is too large")]
    TooLarge(usize),
    /// zlib failed.
    #[error("header compression: {0}")]
    Zlib(String),
}

/// Reads frames from bytes, keeping the session's header decompressor.
pub struct Decoder {
    inflate: Decompress,
}

impl Default for Decoder {
    fn default() -> Self {
        Self {
            inflate: Decompress::new(true),
        }
    }
}

impl Decoder {
    /// The next whole frame at the start of `buf` (consumed), or `None` if
    /// more bytes are needed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, SpdyError> {
        if buf.len() < 8 {
            return Ok(None);
        }
        let length = (usize::from(buf[5]) << 16) | (usize::from(buf[6]) << 8) | usize::from(buf[7]);
        if length > MAX_ACCEPTED {
            return Err(SpdyError::TooLarge(length));
        }
        if buf.len() < 8 + length {
            return Ok(None);
        }
        let head = buf.split_to(8);
        let mut body = buf.split_to(length).freeze();
        let flags = head[4];
        if head[0] & 0x80 == 0 {
            let stream = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            return Ok(Some(Frame::Data {
                stream,
                flags,
                data: body,
            }));
        }
        let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
        if version != VERSION {
            return Err(SpdyError::Version(version));
        }
        let kind = u16::from_be_bytes([head[2], head[3]]);
        let need = |b: &Bytes, n: usize, what: &'static str| {
            if b.len() < n {
                Err(SpdyError::Invalid(what))
            } else {
                Ok(())
            }
        };
        let frame = match kind {
            SYN_STREAM => {
                need(&body, 10, "SYN_STREAM")?;
                let stream = body.get_u32() & 0x7fff_ffff;
                let associated = body.get_u32() & 0x7fff_ffff;
                let priority = body.get_u8() >> 5;
                let _slot = body.get_u8();
                let headers = self.headers(&body)?;
                Frame::SynStream {
                    stream,
                    associated,
                    priority,
                    flags,
                    headers,
                }
            }
            SYN_REPLY | HEADERS => {
                need(&body, 4, "SYN_REPLY")?;
                let stream = body.get_u32() & 0x7fff_ffff;
                let headers = self.headers(&body)?;
                if kind == SYN_REPLY {
                    Frame::SynReply {
                        stream,
                        flags,
                        headers,
                    }
                } else {
                    Frame::Headers {
                        stream,
                        flags,
                        headers,
                    }
                }
            }
            RST_STREAM => {
                need(&body, 8, "RST_STREAM")?;
                Frame::RstStream {
                    stream: body.get_u32() & 0x7fff_ffff,
                    status: body.get_u32(),
                }
            }
            SETTINGS => {
                need(&body, 4, "SETTINGS")?;
                let n = body.get_u32() as usize;
                if body.len() != n.saturating_mul(8) {
                    return Err(SpdyError::Invalid("SETTINGS"));
                }
                let entries = (0..n)
                    .map(|_| {
                        let id = body.get_u32();
                        ((id >> 24) as u8, id & 0x00ff_ffff, body.get_u32())
                    })
                    .collect();
                Frame::Settings { flags, entries }
            }
            PING => {
                need(&body, 4, "PING")?;
                Frame::Ping { id: body.get_u32() }
            }
            GOAWAY => {
                need(&body, 4, "GOAWAY")?;
                let last_good = body.get_u32() & 0x7fff_ffff;
                // SPDY/2 peers send no status.
                let status = if body.len() >= 4 { body.get_u32() } else { 0 };
                Frame::GoAway { last_good, status }
            }
            WINDOW_UPDATE => {
                need(&body, 8, "WINDOW_UPDATE")?;
                Frame::WindowUpdate {
                    stream: body.get_u32() & 0x7fff_ffff,
                    delta: body.get_u32() & 0x7fff_ffff,
                }
            }
            kind => Frame::Unknown { kind },
        };
        Ok(Some(frame))
    }

    fn headers(&mut self, compressed: &[u8]) -> Result<Headers, SpdyError> {
        let plain = self.inflate(compressed)?;
        parse_block(&plain)
    }

    fn inflate(&mut self, input: &[u8]) -> Result<Vec<u8>, SpdyError> {
        let mut out = Vec::with_capacity(input.len() * 4 + 64);
        let mut pos = 0usize;
        loop {
            if out.len() == out.capacity() {
                out.reserve(out.capacity().max(256));
            }
            let (before, out_before) = (self.inflate.total_in(), out.len());
            let r = self
                .inflate
                .decompress_vec(&input[pos..], &mut out, FlushDecompress::Sync);
            pos += usize::try_from(self.inflate.total_in() - before).unwrap_or(0);
            match r {
                Ok(_) => {}
                Err(e) => match e.needs_dictionary() {
                    Some(_) => {
                        self.inflate
                            .set_dictionary(DICTIONARY)
                            .map_err(|e| SpdyError::Zlib(e.to_string()))?;
                        continue;
                    }
                    None => return Err(SpdyError::Zlib(e.to_string())),
                },
            }
            if out.len() > MAX_ACCEPTED {
                return Err(SpdyError::TooLarge(out.len()));
            }
            // All input taken and room left over: the block is out.
            if pos >= input.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            if self.inflate.total_in() == before
                && out.len() == out_before
                && out.len() < out.capacity()
            {
                return Err(SpdyError::Zlib(
                    "trailing bytes after the header stream".into(),
                ));
            }
        }
    }
}

/// A name/value block (uncompressed) into headers.
pub fn parse_block(mut b: &[u8]) -> Result<Headers, SpdyError> {
    let bad = SpdyError::Invalid("header block");
    if b.len() < 4 {
        return Err(bad);
    }
    let n = b.get_u32() as usize;
    let mut out = Vec::with_capacity(n.min(64));
    let text = |b: &mut &[u8]| -> Result<String, SpdyError> {
        if b.len() < 4 {
            return Err(SpdyError::Invalid("header block"));
        }
        let len = b.get_u32() as usize;
        if b.len() < len {
            return Err(SpdyError::Invalid("header block"));
        }
        let s = String::from_utf8_lossy(&b[..len]).into_owned();
        b.advance(len);
        Ok(s)
    };
    for _ in 0..n {
        let name = text(&mut b)?;
        let value = text(&mut b)?;
        out.push((name, value));
    }
    Ok(out)
}

/// Headers into a name/value block (uncompressed); names are lowercased.
pub fn block(headers: &[(String, String)]) -> Vec<u8> {
    let mut b = Vec::new();
    b.put_u32(headers.len() as u32);
    for (k, v) in headers {
        b.put_u32(k.len() as u32);
        b.extend(k.to_ascii_lowercase().as_bytes());
        b.put_u32(v.len() as u32);
        b.extend(v.as_bytes());
    }
    b
}

/// The value of header `name` (case-insensitive), if present.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Writes frames, keeping the session's header compressor.
pub struct Encoder {
    deflate: Compress,
    dictionary_set: bool,
}

impl Default for Encoder {
    fn default() -> Self {
        Self {
            deflate: Compress::new(Compression::best(), true),
            dictionary_set: false,
        }
    }
}

impl Encoder {
    /// Appends `frame` to `out`.
    pub fn encode(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), SpdyError> {
        match frame {
            Frame::Data {
                stream,
                flags,
                data,
            } => {
                if data.len() > MAX_LENGTH {
                    return Err(SpdyError::TooLarge(data.len()));
                }
                out.put_u32(stream & 0x7fff_ffff);
                put_flags_length(out, *flags, data.len());
                out.extend_from_slice(data);
            }
            Frame::SynStream {
                stream,
                associated,
                priority,
                flags,
                headers,
            } => {
                let h = self.compress(headers)?;
                control(out, SYN_STREAM, *flags, 10 + h.len());
                out.put_u32(stream & 0x7fff_ffff);
                out.put_u32(associated & 0x7fff_ffff);
                out.put_u8((priority & 0x07) << 5);
                out.put_u8(0);
                out.extend_from_slice(&h);
            }
            Frame::SynReply {
                stream,
                flags,
                headers,
            }
            | Frame::Headers {
                stream,
                flags,
                headers,
            } => {
                let kind = if matches!(frame, Frame::SynReply { .. }) {
                    SYN_REPLY
                } else {
                    HEADERS
                };
                let h = self.compress(headers)?;
                control(out, kind, *flags, 4 + h.len());
                out.put_u32(stream & 0x7fff_ffff);
                out.extend_from_slice(&h);
            }
            Frame::RstStream { stream, status } => {
                control(out, RST_STREAM, 0, 8);
                out.put_u32(stream & 0x7fff_ffff);
                out.put_u32(*status);
            }
            Frame::Settings { flags, entries } => {
                control(out, SETTINGS, *flags, 4 + 8 * entries.len());
                out.put_u32(entries.len() as u32);
                for (f, id, value) in entries {
                    out.put_u32((u32::from(*f) << 24) | (id & 0x00ff_ffff));
                    out.put_u32(*value);
                }
            }
            Frame::Ping { id } => {
                control(out, PING, 0, 4);
                out.put_u32(*id);
            }
            Frame::GoAway { last_good, status } => {
                control(out, GOAWAY, 0, 8);
                out.put_u32(last_good & 0x7fff_ffff);
                out.put_u32(*status);
            }
            Frame::WindowUpdate { stream, delta } => {
                control(out, WINDOW_UPDATE, 0, 8);
                out.put_u32(stream & 0x7fff_ffff);
                out.put_u32(delta & 0x7fff_ffff);
            }
            Frame::Unknown { kind } => {
                control(out, *kind, 0, 0);
            }
        }
        Ok(())
    }

    fn compress(&mut self, headers: &[(String, String)]) -> Result<Vec<u8>, SpdyError> {
        if !self.dictionary_set {
            self.deflate
                .set_dictionary(DICTIONARY)
                .map_err(|e| SpdyError::Zlib(e.to_string()))?;
            self.dictionary_set = true;
        }
        let input = block(headers);
        let mut out = Vec::with_capacity(input.len() + 64);
        let mut pos = 0usize;
        loop {
            if out.len() == out.capacity() {
                out.reserve(out.capacity().max(256));
            }
            let before = self.deflate.total_in();
            let status = self
                .deflate
                .compress_vec(&input[pos..], &mut out, FlushCompress::Sync)
                .map_err(|e| SpdyError::Zlib(e.to_string()))?;
            pos += usize::try_from(self.deflate.total_in() - before).unwrap_or(0);
            // The sync flush is complete when zlib stops short of the room.
            if pos >= input.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            if matches!(status, Status::BufError) && out.len() < out.capacity() {
                return Err(SpdyError::Zlib("compression made no progress".into()));
            }
        }
    }
}

fn put_flags_length(out: &mut BytesMut, flags: u8, len: usize) {
    out.put_u8(flags);
    // Callers keep `len` within 24 bits.
    out.put_u8((len >> 16) as u8);
    out.put_u16((len & 0xffff) as u16);
}

fn control(out: &mut BytesMut, kind: u16, flags: u8, len: usize) {
    out.put_u16(0x8000 | VERSION);
    out.put_u16(kind);
    put_flags_length(out, flags, len);
}

const DICT_BYTES: &[u8] = b"\x00\x00\x00\x07options\x00\x00\x00\x04head\x00\x00\x00\x04post\x00\x00\x00\x03put\x00\x00\x00\x06delete\x00\x00\x00\x05trace\x00\x00\x00\x06accept\x00\x00\x00\x0eaccept-charset\x00\x00\x00\x0faccept-encoding\x00\x00\x00\x0faccept-language\x00\x00\x00\x0daccept-ranges\x00\x00\x00\x03age\x00\x00\x00\x05allow\x00\x00\x00\x0dauthorization\x00\x00\x00\x0dcache-control\x00\x00\x00\x0aconnection\x00\x00\x00\x0ccontent-base\x00\x00\x00\x10content-encoding\x00\x00\x00\x10content-language\x00\x00\x00\x0econtent-length\x00\x00\x00\x10content-location\x00\x00\x00\x0bcontent-md5\x00\x00\x00\x0dcontent-range\x00\x00\x00\x0ccontent-type\x00\x00\x00\x04date\x00\x00\x00\x04etag\x00\x00\x00\x06expect\x00\x00\x00\x07expires\x00\x00\x00\x04from\x00\x00\x00\x04host\x00\x00\x00\x08if-match\x00\x00\x00\x11if-modified-since\x00\x00\x00\x0dif-none-match\x00\x00\x00\x08if-range\x00\x00\x00\x13if-unmodified-since\x00\x00\x00\x0dlast-modified\x00\x00\x00\x08location\x00\x00\x00\x0cmax-forwards\x00\x00\x00\x06pragma\x00\x00\x00\x12proxy-authenticate\x00\x00\x00\x13proxy-authorization\x00\x00\x00\x05range\x00\x00\x00\x07referer\x00\x00\x00\x0bretry-after\x00\x00\x00\x06server\x00\x00\x00\x02te\x00\x00\x00\x07trailer\x00\x00\x00\x11transfer-encoding\x00\x00\x00\x07upgrade\x00\x00\x00\x0auser-agent\x00\x00\x00\x04vary\x00\x00\x00\x03via\x00\x00\x00\x07warning\x00\x00\x00\x10www-authenticate\x00\x00\x00\x06method\x00\x00\x00\x03get\x00\x00\x00\x06status\x00\x00\x00\x06200 OK\x00\x00\x00\x07version\x00\x00\x00\x08HTTP/1.1\x00\x00\x00\x03url\x00\x00\x00\x06public\x00\x00\x00\x0aset-cookie\x00\x00\x00\x0akeep-alive\x00\x00\x00\x06origin100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";

#[cfg(test)]
mod tests;
