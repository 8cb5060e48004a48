//! A minimal plain-HTTP client, for probing `/readyz` and `/metrics` of processes under
//! test and for sending the dashboard what a browser would not.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// `GET http://host:port/path` (plain HTTP/1.0, no redirects). Returns the
/// status code and body, or a description of what went wrong (suitable for
/// [`crate::wait_for_blocking`]'s "last seen").
pub fn http_get(url: &str) -> Result<(u16, String), String> {
    http_request("GET", url, &[], None).map(|r| (r.status, r.body))
}

/// What [`http_request`] got back.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Header lines as sent, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body, lossily decoded.
    pub body: String,
}

impl HttpResponse {
    /// The first header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `METHOD http://host:port/path` with extra `headers` (a `Host` among them replaces
/// the default) and an optional body (plain HTTP/1.0, no redirects), for tests that
/// attack an HTTP server with what a browser would not send.
pub fn http_request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Result<HttpResponse, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("not an http:// URL: {url}"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = hostport
        .to_socket_addrs()
        .map_err(|e| format!("resolve {hostport}: {e}"))?
        .next()
        .ok_or_else(|| format!("resolve {hostport}: no address"))?;
    let timeout = Duration::from_secs(5);
    let mut s =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let mut head = format!("{method} {path} HTTP/1.0\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {hostport}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    head.push_str(body.unwrap_or_default());
    s.write_all(head.as_bytes())
        .map_err(|e| format!("send to {addr}: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("read from {addr}: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad HTTP response from {addr}: {head:?}"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(HttpResponse {
        status,
        headers,
        body: body.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn reads_status_and_body() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut req = String::new();
            let mut buf = [0u8; 1024];
            while !req.contains("\r\n\r\n") {
                let n = c.read(&mut buf).unwrap();
                assert!(n > 0, "client closed before finishing its request: {req:?}");
                req += &String::from_utf8_lossy(&buf[..n]);
            }
            c.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 8\r\n\r\nnot yet\n")
                .unwrap();
            req
        });
        let (status, body) = http_get(&format!("http://127.0.0.1:{port}/readyz")).unwrap();
        assert_eq!((status, body.as_str()), (503, "not yet\n"));
        assert!(server.join().unwrap().starts_with("GET /readyz HTTP/1.0"));
    }

    #[test]
    fn connection_refused_is_an_error_not_a_panic() {
        let port = crate::free_port();
        let err = http_get(&format!("http://127.0.0.1:{port}/readyz")).unwrap_err();
        assert!(err.contains("connect"), "{err}");
    }
}
