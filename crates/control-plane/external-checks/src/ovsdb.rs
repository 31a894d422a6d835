//! OVN databases: OVSDB JSON-RPC `list_dbs` (RFC 7047), over `tcp:` or `ssl:`.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::net::{Io, io_failure};
use crate::reason;
use crate::steps::{Failure, Stage, Steps};

/// The OVN databases a control plane needs.
pub(crate) const NORTHBOUND: &str = "OVN_Northbound";
/// The OVN southbound database.
pub(crate) const SOUTHBOUND: &str = "OVN_Southbound";

/// Reachable when the server answers `list_dbs`; Authenticated when it serves an OVN database
/// (OVSDB has no passwords: over `ssl:` the client certificate is the identity).
pub(crate) async fn probe(mut s: Box<dyn Io>, steps: &mut Steps) -> Result<(), Failure> {
    let doing = "asking list_dbs";
    s.write_all(br#"{"method":"list_dbs","params":[],"id":0}"#)
        .await
        .map_err(|e| io_failure(Stage::Reachable, doing, &e))?;
    s.flush()
        .await
        .map_err(|e| io_failure(Stage::Reachable, doing, &e))?;
    let mut buf = Vec::new();
    let reply = loop {
        let mut b = [0u8; 4096];
        let n = s
            .read(&mut b)
            .await
            .map_err(|e| io_failure(Stage::Reachable, doing, &e))?;
        if n == 0 {
            return Err(Failure::new(
                Stage::Reachable,
                reason::PROTOCOL_ERROR,
                "the server closed the connection without answering list_dbs (is this an OVSDB port?)",
            ));
        }
        buf.extend_from_slice(&b[..n]);
        match serde_json::from_slice::<serde_json::Value>(&buf) {
            Ok(v) => break v,
            Err(e) if e.is_eof() && buf.len() < 1 << 20 => continue,
            Err(_) => {
                return Err(Failure::new(
                    Stage::Reachable,
                    reason::PROTOCOL_ERROR,
                    "the server's answer is not OVSDB JSON-RPC (is this an OVSDB port?)",
                ));
            }
        }
    };
    let dbs = reply
        .get("result")
        .and_then(|r| r.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|d| d.as_str().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .ok_or_else(|| {
            Failure::new(
                Stage::Reachable,
                reason::PROTOCOL_ERROR,
                format!(
                    "list_dbs returned no result: {}",
                    reply.get("error").cloned().unwrap_or_default()
                ),
            )
        })?;
    steps.pass(
        Stage::Reachable,
        format!("ovsdb-server answered list_dbs: {}", dbs.join(", ")),
    );
    let ovn: Vec<String> = dbs
        .into_iter()
        .filter(|d| d == NORTHBOUND || d == SOUTHBOUND)
        .collect();
    if ovn.is_empty() {
        return Err(Failure::new(
            Stage::Auth,
            reason::DATABASE_NOT_SERVED,
            format!("serves neither {NORTHBOUND} nor {SOUTHBOUND}"),
        ));
    }
    steps.pass(Stage::Auth, format!("serves {}", ovn.join(", ")));
    steps.served = ovn;
    Ok(())
}
