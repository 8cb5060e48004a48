//! Readiness probes: a TCP accept, a first line in a file, an HTTP 200.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// True if something accepts TCP on `addr` (e.g. `127.0.0.1:4222`).
pub async fn accepts_tcp(addr: &str) -> bool {
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

/// The first complete line of a file, trimmed, if it has one yet.
pub fn first_line(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let (line, _) = text.split_once('\n')?;
    Some(line.trim().to_string()).filter(|l| !l.is_empty())
}

/// `GET http://<host:port><path>` over plain HTTP/1.0; the status code, or
/// what went wrong.
pub async fn http_status(hostport: &str, path: &str) -> Result<u16, String> {
    let fut = async {
        let mut s = TcpStream::connect(hostport)
            .await
            .map_err(|e| format!("connect {hostport}: {e}"))?;
        let req = format!("GET {path} HTTP/1.0\r\nHost: {hostport}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
        let mut head = vec![0u8; 64];
        let n = s.read(&mut head).await.map_err(|e| format!("read: {e}"))?;
        let text = String::from_utf8_lossy(&head[..n]);
        text.split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("not an HTTP response: {text:?}"))
    };
    tokio::time::timeout(PROBE_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| Err("timed out".to_string()))
}

/// `ready` or why not, for `GET <readyz>` on `metrics_addr`.
pub async fn readyz(metrics_addr: &str) -> Result<(), String> {
    match http_status(metrics_addr, "/readyz").await? {
        200 => Ok(()),
        code => Err(format!("/readyz returned {code}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn http_status_reads_the_code() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            for code in ["503 Service Unavailable", "200 OK"] {
                let (mut c, _) = l.accept().await.unwrap();
                let mut req = Vec::new();
                let mut buf = [0u8; 512];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = c.read(&mut buf).await.unwrap();
                    assert!(n > 0, "client closed early");
                    req.extend_from_slice(&buf[..n]);
                }
                c.write_all(format!("HTTP/1.1 {code}\r\n\r\n").as_bytes())
                    .await
                    .unwrap();
            }
        });
        assert_eq!(readyz(&addr).await, Err("/readyz returned 503".to_string()));
        assert_eq!(readyz(&addr).await, Ok(()));
        server.await.unwrap();
        assert!(!accepts_tcp(&addr).await);
        assert!(readyz(&addr).await.unwrap_err().contains("connect"));
    }

    #[test]
    fn first_line_needs_a_newline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out");
        assert_eq!(first_line(&p), None);
        std::fs::write(&p, "http://127.0.0.1:1").unwrap();
        assert_eq!(first_line(&p), None, "partial line");
        std::fs::write(&p, "http://127.0.0.1:1\nmore\n").unwrap();
        assert_eq!(first_line(&p).as_deref(), Some("http://127.0.0.1:1"));
    }
}
