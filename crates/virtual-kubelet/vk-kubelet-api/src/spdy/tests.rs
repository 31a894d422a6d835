use super::*;

fn h(pairs: &[(&str, &str)]) -> Headers {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn the_dictionary_is_spdy3s() {
    assert_eq!(DICTIONARY.len(), 1423);
    assert!(DICTIONARY.starts_with(b"\x00\x00\x00\x07options"));
    assert!(DICTIONARY.ends_with(b"enq=0."));
    // zlib names the dictionary by its Adler-32 in the stream header; the
    // captured frame below carries e3c6a7c2.
    let mut d = Compress::new(Compression::best(), true);
    assert_eq!(d.set_dictionary(DICTIONARY).unwrap(), 0xe3c6_a7c2);
}

/// kubectl 1.32's first frame of `kubectl exec -i` (SPDY forced), captured
/// after a 101: the error stream's SYN_STREAM.
#[test]
fn decodes_kubectls_first_syn_stream() {
    let wire = hex(
        "80030001000000290000000100000000000078f9e3c6a7c26260606004a7b392a2d4c45c6851c29a0a0a6800000000ffff",
    );
    let mut buf = BytesMut::from(&wire[..]);
    let mut d = Decoder::default();
    let f = d.decode(&mut buf).unwrap().unwrap();
    assert_eq!(
        f,
        Frame::SynStream {
            stream: 1,
            associated: 0,
            priority: 0,
            flags: 0,
            headers: h(&[("streamtype", "error")]),
        }
    );
    assert!(buf.is_empty());
}

#[test]
fn frames_round_trip_with_one_compression_context() {
    let frames = vec![
        Frame::SynStream {
            stream: 1,
            associated: 0,
            priority: 2,
            flags: FLAG_FIN,
            headers: h(&[("streamtype", "error")]),
        },
        Frame::SynStream {
            stream: 3,
            associated: 0,
            priority: 0,
            flags: 0,
            headers: h(&[("streamtype", "data"), ("port", "8080"), ("requestid", "0")]),
        },
        Frame::SynReply {
            stream: 3,
            flags: 0,
            headers: Vec::new(),
        },
        Frame::Headers {
            stream: 3,
            flags: FLAG_FIN,
            headers: h(&[("x", "a\0b")]),
        },
        Frame::Data {
            stream: 3,
            flags: 0,
            data: Bytes::from_static(b"hello"),
        },
        Frame::Data {
            stream: 5,
            flags: FLAG_FIN,
            data: Bytes::new(),
        },
        Frame::RstStream {
            stream: 7,
            status: RST_REFUSED_STREAM,
        },
        Frame::Settings {
            flags: 0,
            entries: vec![(0, 7, 65536), (1, 4, 100)],
        },
        Frame::Ping { id: 1 },
        Frame::GoAway {
            last_good: 9,
            status: 0,
        },
        Frame::WindowUpdate {
            stream: 3,
            delta: 1024,
        },
    ];
    let mut enc = Encoder::default();
    let mut wire = BytesMut::new();
    for f in &frames {
        enc.encode(f, &mut wire).unwrap();
    }
    // Fed in small pieces: a frame is only whole once all its bytes are in.
    let mut dec = Decoder::default();
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for chunk in wire.chunks(7) {
        buf.extend_from_slice(chunk);
        while let Some(f) = dec.decode(&mut buf).unwrap() {
            got.push(f);
        }
    }
    assert_eq!(got, frames);
}

#[test]
fn header_blocks_are_lowercased_and_length_prefixed() {
    let b = block(&h(&[("StreamType", "stdin")]));
    assert_eq!(
        b,
        b"\x00\x00\x00\x01\x00\x00\x00\x0astreamtype\x00\x00\x00\x05stdin".to_vec()
    );
    assert_eq!(parse_block(&b).unwrap(), h(&[("streamtype", "stdin")]));
    assert!(parse_block(b"\x00\x00\x00\x02\x00\x00\x00\x01a").is_err());
    assert_eq!(header(&h(&[("port", "80")]), "Port"), Some("80"));
}

#[test]
fn refuses_other_versions_and_huge_frames() {
    let mut buf = BytesMut::from(&b"\x80\x02\x00\x06\x00\x00\x00\x04\x00\x00\x00\x01"[..]);
    assert_eq!(
        Decoder::default().decode(&mut buf),
        Err(SpdyError::Version(2))
    );
    let mut buf = BytesMut::from(&b"\x00\x00\x00\x01\x00\xff\xff\xff"[..]);
    assert!(matches!(
        Decoder::default().decode(&mut buf),
        Err(SpdyError::TooLarge(_))
    ));
    // Unknown control types are skipped whole.
    let mut buf = BytesMut::from(&b"\x80\x03\x00\x0a\x00\x00\x00\x02ab"[..]);
    assert_eq!(
        Decoder::default().decode(&mut buf),
        Ok(Some(Frame::Unknown { kind: 10 }))
    );
    assert!(buf.is_empty());
}
