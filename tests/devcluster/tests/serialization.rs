//! Response bytes as kube-apiserver writes them (field order, zero structs,
//! omitempty, trailing newline), checked over raw HTTP against a real process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use fleetbus_testsupport::{DevCluster, DevClusterOpts};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One plain HTTP/1.0 request; returns the status code and the raw body.
fn request(dc: &DevCluster, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", dc.port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: localhost\r\nAccept: application/json\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, body.to_string())
}

fn start(name: &str) -> DevCluster {
    DevCluster::start(DevClusterOpts::new(name)).expect("start devcluster")
}

#[test]
fn status_bodies_match_kube_byte_for_byte() {
    let dc = start("ser-status");
    let (code, body) = request(
        &dc,
        "GET",
        "/api/v1/namespaces/default/configmaps/missing",
        "",
    );
    assert_eq!(code, 404);
    assert_eq!(
        body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
         \"message\":\"configmaps \\\"missing\\\" not found\",\"reason\":\"NotFound\",\
         \"details\":{\"name\":\"missing\",\"kind\":\"configmaps\"},\"code\":404}\n"
    );
    let (code, body) = request(
        &dc,
        "GET",
        "/apis/apps/v1/namespaces/default/deployments/missing",
        "",
    );
    assert_eq!(code, 404);
    assert_eq!(
        body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
         \"message\":\"deployments.apps \\\"missing\\\" not found\",\"reason\":\"NotFound\",\
         \"details\":{\"name\":\"missing\",\"group\":\"apps\",\"kind\":\"deployments\"},\"code\":404}\n"
    );
}

#[test]
fn builtin_objects_come_back_in_struct_order_with_zero_statuses() {
    let dc = start("ser-objects");
    let (code, body) = request(
        &dc,
        "POST",
        "/api/v1/namespaces/default/services",
        r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","labels":{"app":"web"}},
            "spec":{"ports":[{"port":80}]}}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert!(
        body.starts_with(
            "{\"kind\":\"Service\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"web\",\"namespace\":\"default\",\"uid\":\""
        ),
        "{body}"
    );
    let meta_order = [
        "\"uid\"",
        "\"resourceVersion\"",
        "\"creationTimestamp\"",
        "\"labels\"",
        "\"managedFields\"",
        "\"spec\"",
    ];
    let at: Vec<usize> = meta_order.iter().map(|k| body.find(k).unwrap()).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{body}");
    assert!(
        body.ends_with(",\"status\":{\"loadBalancer\":{}}}\n"),
        "{body}"
    );

    let (code, body) = request(
        &dc,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},
            "spec":{"replicas":2,"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}}"#,
    );
    assert_eq!(code, 201, "{body}");
    assert!(
        body.starts_with(
            "{\"kind\":\"Deployment\",\"apiVersion\":\"apps/v1\",\"metadata\":{\"name\":\"d\","
        ),
        "{body}"
    );
    assert!(body.ends_with("},\"status\":{}}\n"), "{body}");

    // The list and a get read the same way.
    let (_, list) = request(
        &dc,
        "GET",
        "/apis/apps/v1/namespaces/default/deployments",
        "",
    );
    assert!(
        list.starts_with("{\"kind\":\"DeploymentList\",\"apiVersion\":\"apps/v1\",\"metadata\":{\"resourceVersion\":"),
        "{list}"
    );
    // Items of a typed list carry no kind/apiVersion, as kube-apiserver writes them.
    assert!(
        list.contains(
            "\"items\":[{\"metadata\":{\"name\":\"d\",\"namespace\":\"default\",\"uid\":"
        ),
        "{list}"
    );
    assert!(list.ends_with("}]}\n"), "{list}");

    // A Scale of a workload without a selector omits it (omitempty).
    let (code, scale) = request(
        &dc,
        "GET",
        "/apis/apps/v1/namespaces/default/deployments/d/scale",
        "",
    );
    assert_eq!(code, 200, "{scale}");
    assert!(
        scale.starts_with("{\"kind\":\"Scale\",\"apiVersion\":\"autoscaling/v1\","),
        "{scale}"
    );
    assert!(
        scale.ends_with("\"spec\":{\"replicas\":2},\"status\":{\"replicas\":0}}\n"),
        "{scale}"
    );
}
