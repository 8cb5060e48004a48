//! Property tests: every name Kubernetes accepts maps to a valid subject token and back.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use fleetbus_schemas::subject::{
    decode_token, encode_token, is_valid_kv_token, is_valid_subject_token, owned_subtrees,
    CommandKey, ConflictKey, DriftKey, ObjectFilter, ObjectKey, Prefix, RolloutKey, StatusKey,
    SubjectError, VersionKey,
};
use proptest::option;
use proptest::prelude::*;

fn dns_label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
}

fn dns_subdomain() -> impl Strategy<Value = String> {
    proptest::collection::vec(dns_label(), 1..5)
        .prop_map(|v| v.join("."))
        .prop_filter("at most 253 chars", |s| s.len() <= 253)
}

/// RBAC-style path-segment names (Role, ClusterRole and their bindings, ...): Kubernetes
/// accepts anything but '/', '%', "." and "..", so this covers ':' '@' '*' '>' '.' '=',
/// whitespace, upper case and non-ASCII, plus arbitrary strings.
fn path_segment() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z:@*> .\t=~_-]{1,30}",
        "system:[a-z:-]{1,20}",
        "[a-z]{1,8}@[a-z]{1,8}\\.[a-z]{2,4}",
        "[=_.-]?[a-z0-9]{0,8}",
        "\\PC{1,20}",
        any::<String>(),
    ]
    .prop_filter("valid path segment", |s| {
        !s.is_empty() && !s.contains('/') && !s.contains('%') && s != "." && s != ".."
    })
}

fn group() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("core".to_owned()),
        dns_subdomain()
    ]
}

/// API versions are DNS-1035 labels (CRD `spec.versions[].name`).
fn version() -> impl Strategy<Value = String> {
    prop_oneof![
        "v[0-9]{1,2}((alpha|beta)[0-9]{1,2})?",
        "[a-z]([a-z0-9-]{0,61}[a-z0-9])?",
        Just("core".to_owned()),
    ]
}

/// Kinds: the API server requires `lowercase(kind)` to be a DNS-1035 label, so upper and
/// lower case letters, digits and '-' (e.g. `ConfigMap`, `My-Kind`, `core`, `x`).
fn kind() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Z][A-Za-z0-9]{0,30}",
        "[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?",
        Just("core".to_owned()),
    ]
}

fn cluster() -> impl Strategy<Value = String> {
    prop_oneof![
        dns_subdomain(),
        Just("core".to_owned()),
        Just("_".to_owned())
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        dns_subdomain(),
        path_segment(),
        Just("_".to_owned()),
        Just("core".to_owned())
    ]
}

/// Namespaces are DNS-1123 labels (no dots); `core` is a legal namespace name.
fn namespace() -> impl Strategy<Value = Option<String>> {
    option::of(prop_oneof![dns_label(), Just("core".to_owned())])
}

fn prefix() -> impl Strategy<Value = Prefix> {
    prop_oneof![
        Just(Prefix::default()),
        "[a-z0-9-]{1,8}(\\.[a-z0-9-]{1,8}){0,2}".prop_map(|s| Prefix::new(s).unwrap()),
    ]
}

prop_compose! {
    fn object_key()(origin in cluster(), group in group(), version in version(), kind in kind(),
                    namespace in namespace(), name in name()) -> ObjectKey {
        ObjectKey { origin, group, version, kind, namespace, name }
    }
}

fn assert_tokens_valid(prefix: &Prefix, subject: &str, n: usize) -> Result<(), TestCaseError> {
    let rest = subject.strip_prefix(&format!("{prefix}.")).unwrap();
    let tokens: Vec<_> = rest.split('.').collect();
    prop_assert_eq!(tokens.len(), n, "{}", subject);
    for t in tokens {
        prop_assert!(is_valid_subject_token(t), "{t:?} in {subject:?}");
        prop_assert!(is_valid_kv_token(t), "{t:?} in {subject:?}");
    }
    Ok(())
}

/// NATS subject matching (`*` one token, `>` the rest), to check filters against.
fn nats_match(filter: &str, subject: &str) -> bool {
    let f: Vec<_> = filter.split('.').collect();
    let s: Vec<_> = subject.split('.').collect();
    for (i, ft) in f.iter().enumerate() {
        match *ft {
            ">" => return s.len() > i,
            "*" if i < s.len() => {}
            t if s.get(i) == Some(&t) => {}
            _ => return false,
        }
    }
    f.len() == s.len()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_string_round_trips_as_token(raw in any::<String>()) {
        let t = encode_token(&raw);
        prop_assert!(is_valid_subject_token(&t), "{t:?}");
        prop_assert!(is_valid_kv_token(&t), "{t:?}");
        prop_assert_eq!(decode_token(&t).unwrap(), raw);
    }

    #[test]
    fn path_segment_names_round_trip(raw in path_segment()) {
        prop_assert_eq!(decode_token(&encode_token(&raw)).unwrap(), raw);
    }

    #[test]
    fn distinct_strings_give_distinct_tokens(a in any::<String>(), b in any::<String>()) {
        prop_assume!(a != b);
        prop_assert_ne!(encode_token(&a), encode_token(&b));
    }

    #[test]
    fn object_key_round_trips(p in prefix(), key in object_key()) {
        let s = key.to_subject(&p);
        assert_tokens_valid(&p, &s, 7)?;
        prop_assert_eq!(ObjectKey::parse_subject(&p, &s).unwrap(), key);
    }

    #[test]
    fn distinct_keys_give_distinct_subjects(a in object_key(), b in object_key()) {
        prop_assume!(a != b);
        let p = Prefix::default();
        prop_assert_ne!(a.to_subject(&p), b.to_subject(&p));
    }

    #[test]
    fn drift_status_command_round_trip(p in prefix(), key in object_key(), c in cluster(), verb in name()) {
        let d = key.drift_key(&c);
        let ds = d.to_subject(&p);
        assert_tokens_valid(&p, &ds, 6)?;
        prop_assert_eq!(DriftKey::parse_subject(&p, &ds).unwrap(), d.clone());
        // The drift KV key is the drift subject without `<p>.drift.`, a valid KV key.
        let kv = d.to_kv_key();
        prop_assert_eq!(ds.strip_prefix(&format!("{p}.drift.")), Some(kv.as_str()));
        prop_assert!(kv.split('.').all(fleetbus_schemas::subject::is_valid_kv_token));
        prop_assert_eq!(DriftKey::parse_kv_key(&kv).unwrap(), d.clone());
        prop_assert!(kv.starts_with(DriftKey::kv_keys_of_cluster(&d.cluster).trim_end_matches('>')));

        let st = StatusKey { cluster: c.clone(), group: key.group.clone(), version: key.version.clone(),
            kind: key.kind.clone(), namespace: key.namespace.clone(), name: key.name.clone() };
        let ss = st.to_subject(&p);
        assert_tokens_valid(&p, &ss, 7)?;
        prop_assert_eq!(StatusKey::parse_subject(&p, &ss).unwrap(), st);

        let ck = ConflictKey { cluster: c.clone(), group: key.group.clone(), version: key.version.clone(),
            kind: key.kind.clone(), namespace: key.namespace.clone(), name: key.name.clone() };
        let ks = ck.to_subject(&p);
        assert_tokens_valid(&p, &ks, 7)?;
        prop_assert_eq!(ConflictKey::parse_subject(&p, &ks).unwrap(), ck);
        // Status and conflict subjects of the same object never parse as each other.
        prop_assert!(ConflictKey::parse_subject(&p, &ss).is_err());

        let cmd = CommandKey { cluster: c, verb };
        let cs = cmd.to_subject(&p);
        assert_tokens_valid(&p, &cs, 3)?;
        prop_assert_eq!(CommandKey::parse_subject(&p, &cs).unwrap(), cmd);
    }

    #[test]
    fn filters_agree_with_nats_matching(key in object_key(), other in object_key(),
                                        mask in proptest::collection::vec(any::<bool>(), 6)) {
        // Build a filter from `key`, leaving the fields where mask is false as wildcards,
        // and check it against both keys: typed matching == NATS matching of the subjects.
        let p = Prefix::default();
        let mut f = ObjectFilter::any();
        if mask[0] { f = f.origin(&key.origin); }
        if mask[1] { f = f.gvk(&key.group, &key.version, &key.kind); }
        if mask[2] { f = f.group_kind(&key.group, &key.kind); }
        if mask[3] {
            f = match &key.namespace { Some(ns) => f.namespace(ns), None => f.cluster_scoped() };
        }
        if mask[4] { f = f.name(&key.name); }
        let fs = f.to_subject(&p);
        prop_assert!(f.matches(&key));
        prop_assert!(nats_match(&fs, &key.to_subject(&p)), "{fs} vs {}", key.to_subject(&p));
        prop_assert_eq!(f.matches(&other), nats_match(&fs, &other.to_subject(&p)));
        // A cluster's object subjects are inside the subtree it owns, and no other's.
        let owned = owned_subtrees(&p, &key.origin);
        prop_assert!(nats_match(&owned[0], &key.to_subject(&p)));
        prop_assert_eq!(nats_match(&owned[0], &other.to_subject(&p)), other.origin == key.origin);
        // ... and so are its conflict events.
        let conflict = ConflictKey { cluster: key.origin.clone(), group: key.group.clone(),
            version: key.version.clone(), kind: key.kind.clone(), namespace: key.namespace.clone(),
            name: key.name.clone() };
        prop_assert!(nats_match(&owned[3], &conflict.to_subject(&p)));
        prop_assert!(owned.iter().take(3).all(|o| !nats_match(o, &conflict.to_subject(&p))));
        // ... and its rollout records and stored versions, each in its own subtree only.
        let rollout = RolloutKey::of("web", &key).to_subject(&p);
        let version = VersionKey { object: key.clone(), hash: "0".repeat(64) }.to_subject(&p);
        prop_assert_eq!(RolloutKey::parse_subject(&p, &rollout), Ok(RolloutKey::of("web", &key)));
        for (i, o) in owned.iter().enumerate() {
            prop_assert_eq!(nats_match(o, &rollout), i == 4);
            prop_assert_eq!(nats_match(o, &version), i == 5);
        }
        let others = owned_subtrees(&p, &other.origin);
        prop_assert_eq!(nats_match(&others[4], &rollout), other.origin == key.origin);
    }
}

#[test]
fn examples_from_protocol_doc() {
    let p = Prefix::default();
    let cm = ObjectKey::from_api_version("east", "v1", "ConfigMap", Some("team-a"), "settings");
    assert_eq!(
        cm.to_subject(&p),
        "fleetbus.obj.east.core.v1.ConfigMap.team-a.settings"
    );
    let np = ObjectKey::from_api_version(
        "east",
        "networking.k8s.io/v1",
        "NetworkPolicy",
        Some("team-a"),
        "deny-all",
    );
    assert_eq!(
        np.to_subject(&p),
        "fleetbus.obj.east.=bmV0d29ya2luZy5rOHMuaW8.v1.NetworkPolicy.team-a.deny-all"
    );
    let cr = ObjectKey::from_api_version(
        "prod.eu-1",
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        None,
        "system:controller:foo",
    );
    assert_eq!(
        cr.to_subject(&p),
        "fleetbus.obj.=cHJvZC5ldS0x.=cmJhYy5hdXRob3JpemF0aW9uLms4cy5pbw.v1.ClusterRole._.=c3lzdGVtOmNvbnRyb2xsZXI6Zm9v"
    );
    assert_eq!(cr.api_version(), "rbac.authorization.k8s.io/v1");
    assert_eq!(
        cm.drift_key("west").to_subject(&p),
        "fleetbus.drift.west.core.ConfigMap.team-a.settings"
    );
    assert_eq!(
        ObjectFilter::any()
            .gvk("", "v1", "ConfigMap")
            .to_subject(&p),
        "fleetbus.obj.*.core.v1.ConfigMap.*.*"
    );
}

#[test]
fn key_from_object() {
    let obj = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a"}});
    let key = ObjectKey::from_object("east", &obj).unwrap();
    assert_eq!(
        key,
        ObjectKey::from_api_version("east", "apps/v1", "Deployment", Some("team-a"), "web")
    );
    let ns =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}});
    assert_eq!(ObjectKey::from_object("east", &ns).unwrap().namespace, None);
    assert_eq!(
        ObjectKey::from_object("east", &serde_json::json!({"kind": "X"})),
        None
    );
}

#[test]
fn parse_errors_are_typed() {
    let p = Prefix::default();
    assert!(matches!(
        ObjectKey::parse_subject(&p, "other.obj.a.core.v1.K._.n"),
        Err(SubjectError::WrongPrefix { .. })
    ));
    assert!(matches!(
        ObjectKey::parse_subject(&p, "fleetbus.drift.a.core.K._.n"),
        Err(SubjectError::WrongPrefix { .. })
    ));
    assert!(matches!(
        ObjectKey::parse_subject(&p, "fleetbus.obj.a.core.v1.K._"),
        Err(SubjectError::TokenCount {
            expected: 6,
            found: 5,
            ..
        })
    ));
    assert!(matches!(
        ObjectKey::parse_subject(&p, "fleetbus.obj.a.core.v1.K._.=YXBwcw"),
        Err(SubjectError::Token { field: "name", .. })
    ));
    assert!(matches!(
        ObjectKey::parse_subject(&p, "fleetbus.obj.a.core.v1.K.core.n"),
        Err(SubjectError::Token {
            field: "namespace",
            ..
        })
    ));
}

#[test]
fn drift_kv_key_examples_and_errors() {
    let d = DriftKey::parse_kv_key("west.core.ConfigMap.team-a.settings").unwrap();
    assert_eq!(
        d,
        DriftKey {
            cluster: "west".into(),
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: Some("team-a".into()),
            name: "settings".into(),
        }
    );
    assert_eq!(
        DriftKey::parse_kv_key("west.core.ConfigMap.team-a"),
        Err(SubjectError::TokenCount {
            subject: "west.core.ConfigMap.team-a".into(),
            expected: 5,
            found: 4,
        })
    );
    assert!(matches!(
        DriftKey::parse_kv_key("west.core.ConfigMap.team-a._"),
        Err(SubjectError::Token { field: "name", .. })
    ));
    assert_eq!(DriftKey::kv_keys_of_cluster("prod.eu-1"), "=cHJvZC5ldS0x.>");
}
