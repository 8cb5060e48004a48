//! Raw HTTP/1.1 requests against a devcluster: exact bytes, headers and bodies,
//! the way a hostile or unusual client sends them.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use fleetbus_testsupport::{DevCluster, DevClusterOpts};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A devcluster for one test.
pub fn start(name: &str) -> DevCluster {
    DevCluster::start(DevClusterOpts::new(name)).expect("start devcluster")
}

/// A response: status code and body.
#[derive(Debug)]
pub struct Resp {
    pub code: u16,
    pub body: Vec<u8>,
}

impl Resp {
    /// The body as JSON (panics with the body if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends one request (`Connection: close`) and reads the whole response.
pub fn request(dc: &DevCluster, method: &str, path: &str, ct: Option<&str>, body: &[u8]) -> Resp {
    let mut s = TcpStream::connect(("127.0.0.1", dc.port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(ct) = ct {
        head += &format!("Content-Type: {ct}\r\n");
    }
    head += "\r\n";
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Resp { code, body }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(nl) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let len = usize::from_str_radix(String::from_utf8_lossy(&b[..nl]).trim(), 16).unwrap_or(0);
        if len == 0 {
            return out;
        }
        out.extend_from_slice(&b[nl + 2..nl + 2 + len]);
        b = &b[nl + 2 + len + 2..];
    }
}

/// Sends `body` as JSON text to `path` with content type `ct`.
pub fn send(dc: &DevCluster, method: &str, path: &str, ct: &str, body: &Value) -> Resp {
    request(dc, method, path, Some(ct), body.to_string().as_bytes())
}

/// GET returning JSON (asserts 200).
pub fn get_json(dc: &DevCluster, path: &str) -> Value {
    let r = request(dc, "GET", path, None, b"");
    assert_eq!(r.code, 200, "GET {path}: {}", r.text());
    r.json()
}

pub const CMS: &str = "/api/v1/namespaces/default/configmaps";

/// Creates ConfigMap `name` with `data` (asserts 201) and returns it.
pub fn create_cm(dc: &DevCluster, name: &str, data: Value) -> Value {
    let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name}, "data": data});
    let r = request(
        dc,
        "POST",
        CMS,
        Some("application/json"),
        body.to_string().as_bytes(),
    );
    assert_eq!(r.code, 201, "create {name}: {}", r.text());
    r.json()
}

/// (resourceVersion of `path`, `/debug/writes`): what must not change after a refused request.
pub fn snapshot(dc: &DevCluster, path: &str) -> (Value, Value) {
    (get_json(dc, path), get_json(dc, "/debug/writes"))
}

/// The `gadgets.example.com` CRD (namespaced, kind `Gadget`) serving and storing
/// the one version `v1`; `version` is merged into that version's entry (its
/// schema, subresources).
pub fn gadget_crd(version: Value) -> Value {
    let mut v1 = json!({"name": "v1", "served": true, "storage": true});
    v1.as_object_mut()
        .unwrap()
        .extend(version.as_object().unwrap().clone());
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [v1]
        }
    })
}
