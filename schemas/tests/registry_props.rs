//! Registry records: JSON round trips, schema-version rejection, liveness, key round trips.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use fleetbus_schemas::crd::{Allocatable, ClusterMetadata, KubernetesApiEndpoint, Locality};
use fleetbus_schemas::registry::{
    ApiHealth, BeatRecord, ClusterRecord, FeatureRecord, InvalidRecord, KubeconfigRecord,
    MemberSet, MemberState, MembersDigest, RegistryKey,
};
use fleetbus_schemas::subject::is_valid_kv_token;
use fleetbus_schemas::time::parse_rfc3339;
use fleetbus_schemas::DecodeError;
use proptest::prelude::*;

mod common;

fn ms_time() -> impl Strategy<Value = DateTime<Utc>> {
    (0i64..4_102_444_800_000).prop_map(|ms| DateTime::from_timestamp_millis(ms).unwrap())
}

fn text() -> impl Strategy<Value = String> {
    any::<String>()
}

fn string_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(text(), text(), 0..3)
}

prop_compose! {
    fn metadata()(provider in proptest::option::of(text()), distribution in proptest::option::of(text()),
                  kubernetes_version in proptest::option::of(text()),
                  kubelet_versions in proptest::collection::vec(text(), 0..2),
                  kube_proxy_versions in proptest::collection::vec(text(), 0..2),
                  region in proptest::option::of(text()),
                  zones in proptest::collection::vec(text(), 0..3)) -> ClusterMetadata {
        let allocatable = kubernetes_version.as_ref().map(|v| Allocatable { cpu_millis: v.len() as u64 * 500, memory_bytes: 1 << 33 });
        ClusterMetadata {
            provider, distribution, kubernetes_version, kubelet_versions, kube_proxy_versions, allocatable,
            locality: region.map(|r| Locality { region: Some(r.clone()), regions: vec![r], zones }),
        }
    }
}

prop_compose! {
    fn cluster_record()(name in text(), cluster_id in text(), left in any::<bool>(),
                        labels in string_map(), metadata in metadata(),
                        endpoints in proptest::collection::vec((text(), text(), text()), 0..2),
                        features in proptest::collection::vec((text(), string_map()), 0..3),
                        agent_version in text(), protocol in any::<u32>(),
                        started_at in ms_time(), heartbeat_at in ms_time(),
                        heartbeat_interval_seconds in any::<u32>(), seq in any::<u64>(),
                        members in proptest::collection::vec(text(), 0..4),
                        digest in proptest::option::of((any::<u32>(), text())),
                        api_down in any::<bool>(), api_message in text()) -> ClusterRecord {
        ClusterRecord {
            fitness: false,
            unserved_kinds: Vec::new(),
            certificate: None,
            name, cluster_id,
            state: if left { MemberState::Left } else { MemberState::Active },
            labels,
            kubernetes_api_endpoints: endpoints.into_iter().map(|(client_network, server_address, ca_bundle)|
                KubernetesApiEndpoint { client_network, server_address, ca_bundle }).collect(),
            metadata,
            features: features.into_iter().map(|(feature_name, labels)| FeatureRecord { feature_name, labels }).collect(),
            agent_version, protocol, started_at, heartbeat_at, heartbeat_interval_seconds, seq, members,
            members_digest: digest.map(|(count, sha256)| MembersDigest { count, sha256 }),
            api: if api_down { ApiHealth::unreachable(api_message) } else { ApiHealth::reachable() },
            beats: false,
        }
    }
}

proptest! {
    #[test]
    fn cluster_record_round_trips(r in cluster_record()) {
        let bytes = r.encode().unwrap();
        let head: &[u8] = br#"{"schema":"fleetbus.io/cluster/v1","#;
        prop_assert!(bytes.starts_with(head), "schema first");
        prop_assert_eq!(ClusterRecord::decode(&bytes).unwrap(), r);
    }

    #[test]
    fn kubeconfig_record_round_trips(name in text(), cluster_id in text(), kubeconfig in text(),
                                     expires_at in proptest::option::of(ms_time())) {
        let r = KubeconfigRecord { name, cluster_id, kubeconfig, expires_at, sealed: None };
        prop_assert_eq!(KubeconfigRecord::decode(&r.encode().unwrap()).unwrap(), r);
    }

    #[test]
    fn registry_keys_round_trip_and_are_kv_valid(name in text(), id in text(), kubeconfig in any::<bool>()) {
        let k = if kubeconfig { RegistryKey::kubeconfig(&name, &id) } else { RegistryKey::cluster(&name, &id) };
        let key = k.to_key();
        prop_assert!(key.split('.').all(is_valid_kv_token), "{}", key);
        prop_assert_eq!(RegistryKey::parse(&key).unwrap(), k);
    }

    #[test]
    fn garbage_is_malformed_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Err(e) = ClusterRecord::decode(&bytes) {
            prop_assert!(matches!(e, DecodeError::Malformed { .. }), "{e:?}");
        }
    }
}

fn example() -> ClusterRecord {
    ClusterRecord {
        fitness: false,
        unserved_kinds: Vec::new(),
        certificate: None,
        name: "east".into(),
        cluster_id: "6f1c2d3e-8a9b-4c5d-9e0f-112233445566".into(),
        state: MemberState::Active,
        labels: BTreeMap::from([("region".into(), "eu-west-1".into())]),
        kubernetes_api_endpoints: vec![KubernetesApiEndpoint {
            client_network: String::new(),
            server_address: "https://10.0.0.1:6443".into(),
            ca_bundle: String::new(),
        }],
        metadata: ClusterMetadata {
            provider: Some("kind".into()),
            distribution: Some("KIND".into()),
            kubernetes_version: Some("v1.33.1".into()),
            kubelet_versions: vec!["v1.33.1".into()],
            kube_proxy_versions: vec!["v1.33.1".into()],
            locality: Some(Locality {
                region: Some("eu-west-1".into()),
                regions: vec!["eu-west-1".into()],
                zones: vec!["eu-west-1a".into()],
            }),
            allocatable: None,
        },
        features: vec![FeatureRecord {
            feature_name: "istio".into(),
            labels: BTreeMap::from([("version".into(), "1.22".into())]),
        }],
        agent_version: "0.1.0".into(),
        protocol: fleetbus_schemas::registry::PROTOCOL_VERSION,
        started_at: parse_rfc3339("2026-11-22T04:00:00.000Z").unwrap(),
        heartbeat_at: parse_rfc3339("2026-11-22T04:30:00.250Z").unwrap(),
        heartbeat_interval_seconds: 10,
        seq: 181,
        members: vec!["east".into(), "west".into()],
        members_digest: Some(MembersDigest {
            count: 2,
            sha256: "e50f788b9e3ea6a4eb03741c16853fad7ec6d4cb11e4fc10fb8301d6d286890c".into(),
        }),
        api: ApiHealth::reachable(),
        beats: true,
    }
}

/// The example in docs/PROTOCOL.md; keep them identical.
const EXAMPLE_JSON: &str = r#"{"schema":"fleetbus.io/cluster/v1","name":"east","clusterID":"6f1c2d3e-8a9b-4c5d-9e0f-112233445566","state":"Active","labels":{"region":"eu-west-1"},"kubernetesApiEndpoints":[{"serverAddress":"https://10.0.0.1:6443"}],"metadata":{"provider":"kind","distribution":"KIND","kubernetesVersion":"v1.33.1","kubeletVersions":["v1.33.1"],"kubeProxyVersions":["v1.33.1"],"locality":{"region":"eu-west-1","regions":["eu-west-1"],"zones":["eu-west-1a"]}},"features":[{"featureName":"istio","labels":{"version":"1.22"}}],"agentVersion":"0.1.0","protocol":2,"startedAt":"2026-11-22T04:00:00.000Z","heartbeatAt":"2026-11-22T04:30:00.250Z","heartbeatIntervalSeconds":10,"seq":181,"members":["east","west"],"membersDigest":{"count":2,"sha256":"e50f788b9e3ea6a4eb03741c16853fad7ec6d4cb11e4fc10fb8301d6d286890c"},"beats":true}"#;

/// The beat example in docs/PROTOCOL.md §5.4; keep them identical.
const BEAT_JSON: &str = r#"{"schema":"fleetbus.io/beat/v1","seq":182,"startedAt":"2026-11-22T04:00:00.000Z","intervalMs":2000}"#;

#[test]
fn example_beat_matches_protocol_doc() {
    let beat = BeatRecord {
        seq: 182,
        started_at: parse_rfc3339("2026-11-22T04:00:00.000Z").unwrap(),
        interval_ms: 2000,
    };
    assert_eq!(
        String::from_utf8(beat.encode().unwrap()).unwrap(),
        BEAT_JSON
    );
    common::assert_doc_contains(BEAT_JSON);
    // An agent before beats wrote no `beats`: it reads as false.
    let old = EXAMPLE_JSON.replace(r#","beats":true"#, "");
    assert!(!ClusterRecord::decode(old.as_bytes()).unwrap().beats);
}

#[test]
fn example_record_matches_protocol_doc() {
    assert_eq!(
        String::from_utf8(example().encode().unwrap()).unwrap(),
        EXAMPLE_JSON
    );
    common::assert_doc_contains(&common::pretty(EXAMPLE_JSON));
    // The digest is the members' (PROTOCOL §5.1).
    let r = example();
    assert!(MemberSet::new(["west", "east"]).agrees_with(&r));
    assert_eq!(
        Some(MemberSet::new(["east", "west"]).digest()),
        r.members_digest.as_ref()
    );
    // An agent before digests wrote only the names (PROTOCOL §7): read, and
    // compared by its names.
    let start = EXAMPLE_JSON.find(r#","membersDigest""#).unwrap();
    let end = EXAMPLE_JSON.find(r#","beats""#).unwrap();
    let older = format!("{}{}", &EXAMPLE_JSON[..start], &EXAMPLE_JSON[end..]);
    let r = ClusterRecord::decode(older.as_bytes()).unwrap();
    assert_eq!(r.members_digest, None);
    assert_eq!(r.member_count(), 2);
    assert!(MemberSet::new(["west", "east"]).agrees_with(&r));
    assert!(!MemberSet::new(["east"]).agrees_with(&r));
}

#[test]
fn other_schema_versions_are_rejected_with_a_typed_error() {
    let v2 = EXAMPLE_JSON.replace("fleetbus.io/cluster/v1", "fleetbus.io/cluster/v2");
    match ClusterRecord::decode(v2.as_bytes()) {
        Err(DecodeError::UnsupportedVersion { found }) => {
            assert_eq!(found, "fleetbus.io/cluster/v2")
        }
        other => panic!("{other:?}"),
    }
    let kubeconfig = KubeconfigRecord {
        name: "east".into(),
        cluster_id: "x".into(),
        kubeconfig: "apiVersion: v1".into(),
        expires_at: None,
        sealed: None,
    };
    assert!(matches!(
        ClusterRecord::decode(&kubeconfig.encode().unwrap()),
        Err(DecodeError::UnsupportedVersion { .. })
    ));
    let no_schema = EXAMPLE_JSON.replace(r#""schema":"fleetbus.io/cluster/v1","#, "");
    assert!(matches!(
        ClusterRecord::decode(no_schema.as_bytes()),
        Err(DecodeError::Malformed { .. })
    ));
    let missing_field = EXAMPLE_JSON.replace(r#""seq":181,"#, "");
    assert!(matches!(
        ClusterRecord::decode(missing_field.as_bytes()),
        Err(DecodeError::Malformed { .. })
    ));
}

#[test]
fn unknown_fields_are_ignored_within_v1() {
    let extended = EXAMPLE_JSON.replace(r#""seq":181,"#, r#""seq":181,"futureField":{"a":1},"#);
    assert_eq!(
        ClusterRecord::decode(extended.as_bytes()).unwrap(),
        example()
    );
}

#[test]
fn api_health_is_omitted_while_reachable_and_missing_means_reachable() {
    assert_eq!(
        example().api,
        ApiHealth::reachable(),
        "EXAMPLE_JSON has no api"
    );
    let mut down = example();
    down.api = ApiHealth::unreachable("GET /readyz timed out");
    let json = String::from_utf8(down.encode().unwrap()).unwrap();
    assert!(
        json.contains(r#""api":{"reachable":false,"message":"GET /readyz timed out"}"#),
        "{json}"
    );
    assert_eq!(ClusterRecord::decode(json.as_bytes()).unwrap(), down);
}

fn label_name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9]([a-zA-Z0-9._-]{0,61}[a-zA-Z0-9])?"
}

proptest! {
    #[test]
    fn kubernetes_valid_labels_validate(labels in proptest::collection::btree_map(
        (proptest::option::of("[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?(\\.[a-z]{1,10}){0,2}"), label_name()),
        proptest::option::of(label_name()), 0..20)) {
        let mut r = example();
        r.labels = labels.into_iter().map(|((prefix, name), value)| {
            let key = match prefix { Some(p) => format!("{p}/{name}"), None => name };
            (key, value.unwrap_or_default())
        }).collect();
        prop_assert_eq!(r.validate(), Ok(()));
    }

    #[test]
    fn a_label_value_with_a_character_kubernetes_refuses_is_invalid(
        good in label_name(), bad in "[^a-zA-Z0-9._-]", at in any::<proptest::sample::Index>()) {
        let mut value = good.clone();
        value.insert_str(value.char_indices().nth(at.index(good.chars().count())).map_or(0, |(i, _)| i), &bad);
        let mut r = example();
        r.labels.insert("env".into(), value);
        prop_assert_eq!(r.validate(), Err(InvalidRecord::LabelValue { key: "env".into() }));
    }

    #[test]
    fn validation_never_panics(r in cluster_record()) {
        let _ = r.validate();
    }
}

#[test]
fn liveness_follows_heartbeat_interval() {
    let r = example();
    let t = r.heartbeat_at;
    assert!(r.is_alive(t));
    assert!(r.is_alive(t + Duration::seconds(30)));
    assert!(!r.is_alive(t + Duration::seconds(31)));
    // Clock skew: a heartbeat from the future is alive.
    assert!(r.is_alive(t - Duration::seconds(5)));
    let left = ClusterRecord {
        certificate: None,
        state: MemberState::Left,
        ..r
    };
    assert!(!left.is_alive(t));
}
