use super::*;
use crate::subject::Prefix;
use crate::time::parse_rfc3339;

fn h(c: char) -> String {
    c.to_string().repeat(64)
}

fn at(s: &str) -> DateTime<Utc> {
    parse_rfc3339(s).unwrap()
}

/// The example of PROTOCOL §6.9.
fn example() -> RolloutRecord {
    RolloutRecord {
        origin: "hub".into(),
        rule: "web".into(),
        source: ObjectRef {
            uid: Some("u-1".into()),
            ..ObjectRef::new("apps/v1", "Deployment", Some("apps"), "web")
        },
        revision: 4,
        stable: Some(h('a')),
        target: Some(h('b')),
        phase: RolloutPhase::Progressing,
        admitted: [(h('b'), ["c1".to_owned(), "c2".to_owned()].into())].into(),
        admitted_at: [
            ("c1".to_owned(), at("2026-11-27T05:00:01.000Z")),
            ("c2".to_owned(), at("2026-11-27T05:00:09.000Z")),
        ]
        .into(),
        failed: BTreeMap::new(),
        step: 1,
        steps: 2,
        paused_by: None,
        reason: "WaitingForReady".into(),
        message: "waiting for c2 to be Current for 3s".into(),
        updated_at: at("2026-11-27T05:00:09.000Z"),
    }
}

fn protocol_doc() -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/PROTOCOL.md"),
    )
    .unwrap()
}

#[test]
fn record_round_trips_and_is_the_documented_example() {
    let r = example();
    let bytes = r.encode().unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(
        protocol_doc().contains(&text),
        "docs/PROTOCOL.md must show:\n{text}"
    );
    assert_eq!(RolloutRecord::decode(&bytes).unwrap(), r);
    assert_eq!(
        r.subject_key().to_subject(&Prefix::default()),
        "fleetbus.rollout.hub.web.apps.v1.Deployment.apps.web"
    );
    assert_eq!(r.validate(&r.subject_key()), Ok(()));
    assert_eq!(r.version_of("c1"), Some(h('b').as_str()));
    assert_eq!(r.version_of("c3"), Some(h('a').as_str()));
    let new_object = RolloutRecord {
        stable: None,
        ..example()
    };
    assert_eq!(new_object.version_of("c3"), None);
    assert!(matches!(
        RolloutRecord::decode(br#"{"schema":"fleetbus.io/rollout/v2"}"#),
        Err(DecodeError::UnsupportedVersion { .. })
    ));
}

#[test]
fn commands_round_trip_and_are_documented() {
    let req = RolloutRequest {
        rule: "web".into(),
        action: RolloutAction::Pause,
        object: None,
    };
    let text = String::from_utf8(req.encode().unwrap()).unwrap();
    assert!(
        protocol_doc().contains(&text),
        "PROTOCOL must show:\n{text}"
    );
    assert_eq!(RolloutRequest::decode(text.as_bytes()).unwrap(), req);
    let reply = RolloutReply {
        cluster: "hub".into(),
        matched: 1,
        changed: vec![ObjectRef::new("apps/v1", "Deployment", Some("apps"), "web")],
        error: None,
        retry_after_ms: None,
    };
    let text = String::from_utf8(reply.encode().unwrap()).unwrap();
    assert!(
        protocol_doc().contains(&text),
        "PROTOCOL must show:\n{text}"
    );
    assert_eq!(RolloutReply::decode(text.as_bytes()).unwrap(), reply);
    assert!(RolloutRequest::decode(
        br#"{"schema":"fleetbus.io/rollout-request/v1","rule":"web","action":"Explode"}"#
    )
    .is_err());
}

#[test]
fn forged_or_broken_records_are_refused() {
    let key = example().subject_key();
    let check = |r: RolloutRecord| r.validate(&key);
    // Another origin, rule or object than the subject names.
    for r in [
        RolloutRecord {
            origin: "evil".into(),
            ..example()
        },
        RolloutRecord {
            rule: "other".into(),
            ..example()
        },
        RolloutRecord {
            source: ObjectRef::new("apps/v1", "Deployment", Some("apps"), "db"),
            ..example()
        },
    ] {
        assert!(matches!(check(r), Err(InvalidRecord::Subject { .. })));
    }
    let with_key = |r: RolloutRecord| {
        let k = r.subject_key();
        r.validate(&k)
    };
    assert_eq!(
        with_key(RolloutRecord {
            origin: "Not.A.Label".into(),
            ..example()
        }),
        Err(InvalidRecord::ClusterName("Not.A.Label".into()))
    );
    assert_eq!(
        with_key(RolloutRecord {
            rule: "Bad Rule".into(),
            ..example()
        }),
        Err(InvalidRecord::RuleName("Bad Rule".into()))
    );
    for bad in ["ABC".repeat(21) + "A", "a".repeat(63), "g".repeat(64)] {
        assert_eq!(
            check(RolloutRecord {
                stable: Some(bad.clone()),
                ..example()
            }),
            Err(InvalidRecord::Hash(bad))
        );
    }
    let mut twice = example();
    twice.admitted.insert(h('c'), ["c1".to_owned()].into());
    assert_eq!(check(twice), Err(InvalidRecord::AdmittedTwice("c1".into())));
    let mut bad_name = example();
    bad_name.failed.insert("c*".into(), "x".into());
    assert_eq!(
        check(bad_name),
        Err(InvalidRecord::ClusterName("c*".into()))
    );
    let mut many = example();
    many.admitted.insert(
        h('c'),
        (0..MAX_RECORD_NAMES).map(|i| format!("m{i}")).collect(),
    );
    assert!(matches!(check(many), Err(InvalidRecord::TooManyNames(_))));
    assert_eq!(
        check(RolloutRecord {
            message: "x".repeat(MAX_RECORD_MESSAGE + 1),
            ..example()
        }),
        Err(InvalidRecord::MessageTooLong(MAX_RECORD_MESSAGE + 1))
    );
    for (phase, target) in [
        (RolloutPhase::Gone, Some(h('b'))),
        (RolloutPhase::Progressing, None),
        (RolloutPhase::Complete, Some(h('b'))),
    ] {
        assert!(matches!(
            check(RolloutRecord {
                phase,
                target,
                ..example()
            }),
            Err(InvalidRecord::Phase { .. })
        ));
    }
    let gone = RolloutRecord {
        phase: RolloutPhase::Gone,
        target: None,
        admitted: BTreeMap::new(),
        ..example()
    };
    assert_eq!(check(gone), Ok(()));
}

#[test]
fn messages_are_cut_on_char_boundaries() {
    let cut = cut_message("é".repeat(MAX_RECORD_MESSAGE));
    assert!(cut.len() <= MAX_RECORD_MESSAGE && cut.chars().all(|c| c == 'é'));
    assert_eq!(cut_message("short".into()), "short");
    assert!(is_content_hash(&h('0')) && !is_content_hash("0"));
}
