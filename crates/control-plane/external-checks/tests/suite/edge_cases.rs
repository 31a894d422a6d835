//! Protocol edge cases no real server on our machines produces on demand, played by small
//! listeners on 127.0.0.1 (the real servers are in real_servers.rs).

use std::collections::BTreeMap;
use std::time::Duration;

use external_checks::{ServiceKind, Target, check};
use secrecy::SecretString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Reads one request head (the checks send no bodies).
async fn read_head(s: &mut tokio::net::TcpStream) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut b).await.expect("read");
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&b[..n]);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[tokio::test]
async fn s3_server_closing_after_each_answer_gets_a_new_connection() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        for _ in 0..2 {
            let (mut s, _) = l.accept().await.expect("accept");
            let head = read_head(&mut s).await;
            let line = head.lines().next().unwrap_or_default().to_string();
            let answer = if line.starts_with("GET / ") {
                let body = "<ListAllMyBucketsResult><Buckets><Bucket><Name>b</Name></Bucket></Buckets></ListAllMyBucketsResult>";
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
            } else {
                "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
            };
            s.write_all(answer.as_bytes()).await.expect("write");
            seen.push(line);
        }
        seen
    });
    let t = Target {
        kind: ServiceKind::ObjectStorage,
        endpoints: vec![format!("http://{addr}")],
        username: Some("AKID".into()),
        password: Some(SecretString::from("secret".to_string())),
        tls: None,
        extra: BTreeMap::from([("bucket".to_string(), "b".to_string())]),
    };
    let r = check(&t, Duration::from_secs(10)).await;
    assert!(r.is_ready(), "{r:#?}");
    let seen = server.await.expect("server");
    assert_eq!(seen[0].split(' ').take(2).collect::<Vec<_>>(), ["GET", "/"]);
    assert_eq!(
        seen[1].split(' ').take(2).collect::<Vec<_>>(),
        ["HEAD", "/b"]
    );
}
