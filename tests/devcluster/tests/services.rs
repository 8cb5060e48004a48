//! Service ClusterIPs over HTTP, as kube-apiserver allocates them from its service
//! range (10.96.0.0/12 here): what a client that creates selector-less Services and
//! reads back `spec.clusterIP` sees, across writes, deletes and a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use fleetbus_testsupport::{DevCluster, DevClusterOpts};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::net::Ipv4Addr;

fn service(name: &str, spec: serde_json::Value) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn cluster_ip(svc: &Service) -> String {
    svc.spec.as_ref().unwrap().cluster_ip.clone().unwrap()
}

fn in_service_range(ip: &str) -> bool {
    let ip: Ipv4Addr = ip.parse().unwrap();
    // 10.96.0.0/12 without its network and broadcast addresses.
    ip.to_bits() & 0xfff0_0000 == 0x0a60_0000
        && ip != Ipv4Addr::new(10, 96, 0, 0)
        && ip != Ipv4Addr::new(10, 111, 255, 255)
}

/// The 422 a write got, as kube-rs hands it over.
fn refusal<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> Box<kube::core::Status> {
    match r {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Failed before: every Service kept the `clusterIP` its client sent, or got a
/// random 10.96.x.y that could repeat; a taken address was accepted, the address
/// could be changed, and an update without it dropped it.
#[tokio::test]
async fn cluster_ips_are_allocated_kept_refused_and_freed_like_kube_apiservers() {
    let mut dc = DevCluster::start(DevClusterOpts::new("svc-ips")).unwrap();
    let svcs: Api<Service> = Api::namespaced(dc.client().await.unwrap(), "default");
    let pp = PostParams::default();
    let port = json!([{"port": 80}]);

    // Two selector-less Services: distinct addresses of the range, and the family fields.
    let a = svcs
        .create(&pp, &service("a", json!({"ports": port})))
        .await
        .unwrap();
    let b = svcs
        .create(&pp, &service("b", json!({"ports": port})))
        .await
        .unwrap();
    let (ip_a, ip_b) = (cluster_ip(&a), cluster_ip(&b));
    assert_ne!(ip_a, ip_b);
    for (svc, ip) in [(&a, &ip_a), (&b, &ip_b)] {
        assert!(in_service_range(ip), "{ip}");
        let spec = svc.spec.as_ref().unwrap();
        assert_eq!(spec.cluster_ips.as_deref(), Some(&[ip.clone()][..]));
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(spec.ip_families.as_deref(), Some(&["IPv4".to_string()][..]));
        assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));
        assert_eq!(spec.session_affinity.as_deref(), Some("None"));
        assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Cluster"));
    }
    // What a GET reads is what the create answered.
    assert_eq!(cluster_ip(&svcs.get("a").await.unwrap()), ip_a);

    // A requested address another Service holds.
    let taken = service("c", json!({"clusterIP": ip_a, "ports": port}));
    let s = refusal(svcs.create(&pp, &taken).await);
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        format!(
            "Service \"c\" is invalid: spec.clusterIPs: Invalid value: []string{{\"{ip_a}\"}}: \
             failed to allocate IP {ip_a}: provided IP is already allocated"
        )
    );
    let outside = service("c", json!({"clusterIP": "192.168.0.10", "ports": port}));
    assert_eq!(refusal(svcs.create(&pp, &outside).await).code, 422);

    // Headless: no address.
    let h = svcs
        .create(&pp, &service("h", json!({"clusterIP": "None"})))
        .await
        .unwrap();
    assert_eq!(cluster_ip(&h), "None");

    // A replace without the address (the manifest it was created from) keeps it.
    let mut again = service("a", json!({"ports": [{"port": 81}]}));
    again.metadata.resource_version = a.metadata.resource_version.clone();
    let replaced = svcs.replace("a", &pp, &again).await.unwrap();
    assert_eq!(cluster_ip(&replaced), ip_a);
    // So does server-side apply of a manifest without it.
    let ssa = PatchParams::apply("svc-test");
    let applied = svcs
        .patch(
            "a",
            &ssa,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "a"}, "spec": {"ports": [{"port": 82}]}})),
        )
        .await
        .unwrap();
    assert_eq!(cluster_ip(&applied), ip_a);

    // The address may not change.
    let moved =
        Patch::Merge(json!({"spec": {"clusterIP": "10.96.0.77", "clusterIPs": ["10.96.0.77"]}}));
    let s = refusal(svcs.patch("a", &PatchParams::default(), &moved).await);
    assert_eq!(s.code, 422);
    assert_eq!(
        s.message,
        "Service \"a\" is invalid: spec.clusterIPs[0]: Invalid value: []string{\"10.96.0.77\"}: \
         may not change once set"
    );

    // Held addresses survive a restart (they are read from the stored Services).
    dc.restart().unwrap();
    let svcs: Api<Service> = Api::namespaced(dc.client().await.unwrap(), "default");
    assert_eq!(cluster_ip(&svcs.get("a").await.unwrap()), ip_a);
    assert_eq!(refusal(svcs.create(&pp, &taken).await).code, 422);

    // Deleting the Service frees its address.
    svcs.delete("a", &DeleteParams::default()).await.unwrap();
    let c = svcs.create(&pp, &taken).await.unwrap();
    assert_eq!(cluster_ip(&c), ip_a);
}
