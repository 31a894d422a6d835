//! The framing of the kubelet's WebSocket streams (pure): the terminal-size
//! channel of exec/attach and the port-forward protocol.
//!
//! Exec and attach (`v4`/`v5.channel.k8s.io`): every binary message is one
//! channel byte and the data; channel 4 carries `{"Width":w,"Height":h}`
//! (`remotecommand.TerminalSize`).
//!
//! Port-forward (the kubelet's `portforward/websocket.go`, protocols
//! `v4.channel.k8s.io` or none): the ports come as `?port=80,8080` (or
//! repeated `port`); port `i` has the data channel `2i` (both ways) and the
//! error channel `2i + 1` (node to client). The node's first message on each
//! of the two channels is the port as two little-endian bytes; an error is
//! the text of the error channel's next message.

use serde::Deserialize;

use crate::query::QueryError;

/// The exec/attach channel of terminal sizes.
pub const RESIZE_CHANNEL: u8 = 4;

/// The WebSocket protocols of port-forward this node speaks (SPDY's
/// `portforward.k8s.io` is served by the server's SPDY sessions).
pub const PORT_FORWARD_PROTOCOLS: [&str; 1] = ["v4.channel.k8s.io"];

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TerminalSize {
    width: u16,
    height: u16,
}

/// `(width, height)` of a terminal-size message (the data after the channel
/// byte); `None` if it is not one (the kubelet ignores those).
pub fn terminal_size(data: &[u8]) -> Option<(u16, u16)> {
    let t: TerminalSize = serde_json::from_slice(data).ok()?;
    Some((t.width, t.height))
}

/// The ports of a port-forward request, in order (`port`, comma-separated or
/// repeated, each 1..=65535 and given once), as the kubelet's `NewV4Options`
/// reads them.
pub fn forward_ports(query: &str) -> Result<Vec<u16>, QueryError> {
    let err = |message: String| QueryError {
        field: "port",
        message,
    };
    let mut ports = Vec::new();
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        if k != "port" {
            continue;
        }
        if v.is_empty() {
            return Err(err("query parameter \"port\" cannot be empty".into()));
        }
        for p in v.split(',') {
            let port: u16 = p
                .trim()
                .parse()
                .map_err(|_| err(format!("unable to parse {p:?} as a port")))?;
            if port == 0 {
                return Err(err(format!("port {p:?} must be > 0")));
            }
            if ports.contains(&port) {
                return Err(err(format!("port {port} is given twice")));
            }
            ports.push(port);
        }
    }
    if ports.is_empty() {
        return Err(err("query parameter \"port\" is required".into()));
    }
    Ok(ports)
}

/// The data channel of the port at `index`.
pub fn data_channel(index: usize) -> Option<u8> {
    u8::try_from(index.checked_mul(2)?).ok()
}

/// The error channel of the port at `index`.
pub fn error_channel(index: usize) -> Option<u8> {
    u8::try_from(index.checked_mul(2)?.checked_add(1)?).ok()
}

/// The index of the port whose data channel is `channel` (`None` for error
/// channels, which clients do not write, and for channels past `ports`).
pub fn port_of_data_channel(channel: u8, ports: usize) -> Option<usize> {
    let i = usize::from(channel / 2);
    (channel.is_multiple_of(2) && i < ports).then_some(i)
}

/// A message on `channel`: the channel byte, then `data`.
pub fn frame(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    v
}

/// The first message of each of a port's channels: the port, little-endian.
pub fn port_prefix(channel: u8, port: u16) -> Vec<u8> {
    frame(channel, &port.to_le_bytes())
}

/// The error channel's text, as the kubelet words it.
pub fn forward_error(port: u16, pod: &str, uid: &str, cause: &str) -> String {
    format!("error forwarding port {port} to pod {pod}, uid {uid}: {cause}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_sizes() {
        assert_eq!(
            terminal_size(br#"{"Width":100,"Height":30}"#),
            Some((100, 30))
        );
        assert_eq!(terminal_size(b"{}"), None);
        assert_eq!(terminal_size(b"not json"), None);
        assert_eq!(terminal_size(br#"{"Width":70000,"Height":1}"#), None);
    }

    #[test]
    fn ports_from_the_query() {
        assert_eq!(forward_ports("port=80"), Ok(vec![80]));
        assert_eq!(forward_ports("port=80%2C8080"), Ok(vec![80, 8080]));
        assert_eq!(forward_ports("port=80&port=9090,1"), Ok(vec![80, 9090, 1]));
        for bad in [
            "",
            "ports=80",
            "port=",
            "port=0",
            "port=x",
            "port=70000",
            "port=80,80",
        ] {
            let e = forward_ports(bad).expect_err(bad);
            assert_eq!(e.field, "port", "{bad}");
        }
        assert_eq!(
            forward_ports("").unwrap_err().message,
            "query parameter \"port\" is required"
        );
    }

    #[test]
    fn channels_of_ports() {
        assert_eq!((data_channel(0), error_channel(0)), (Some(0), Some(1)));
        assert_eq!((data_channel(3), error_channel(3)), (Some(6), Some(7)));
        assert_eq!(error_channel(127), Some(255));
        assert_eq!(data_channel(128), None);
        assert_eq!(port_of_data_channel(6, 4), Some(3));
        assert_eq!(port_of_data_channel(7, 4), None, "an error channel");
        assert_eq!(port_of_data_channel(8, 4), None, "past the ports");
    }

    #[test]
    fn framing() {
        assert_eq!(frame(2, b"hi"), vec![2, b'h', b'i']);
        // 8080 = 0x1f90, little-endian.
        assert_eq!(port_prefix(1, 8080), vec![1, 0x90, 0x1f]);
        assert_eq!(
            forward_error(80, "web_default", "u1", "connection refused"),
            "error forwarding port 80 to pod web_default, uid u1: connection refused"
        );
    }
}
