use std::os::unix::fs::PermissionsExt;

use fleetbus_schemas::trust::{parse_root_public, verify, ClusterKeys, SignedCertificate};

use super::*;

fn new_fleet() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    match init(&dir, "test", &Prefix::default(), &DEFAULT_JS_LIMITS, false).unwrap() {
        InitOutcome::Created(_) => {}
        other => panic!("{other:?}"),
    }
    (tmp, dir)
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn init_writes_every_file_secrets_0600() {
    let (_tmp, dir) = new_fleet();
    for f in INIT_FILES {
        assert!(dir.join(f).exists(), "{f}");
    }
    for f in [
        OPERATOR_SEED,
        SYSTEM_SEED,
        ACCOUNT_SEED,
        SIGNING_SEED,
        MEMBERS_SEED,
        MEMBERS_SIGNING_SEED,
        ADMIN_CREDS,
        ROOT_KEY,
    ] {
        assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
    }
    assert_eq!(mode(&dir), 0o700);
    let conf = read(&dir.join(SERVER_CONF)).unwrap();
    let info = load_info(&dir).unwrap();
    assert!(conf.contains(&format!("system_account: {}", info.system_account)));
    assert!(conf.contains("resolver: MEMORY"));
    // The streams account has JetStream, exports it, and issues no user.
    let claims = account_claims(&dir, &info.account);
    assert_eq!(claims["iss"], info.operator);
    assert_eq!(
        claims["nats"]["limits"]["disk_storage"], -1,
        "unlimited: the server bounds it"
    );
    assert_eq!(claims["nats"]["limits"]["consumer"], 10_000);
    assert_eq!(claims["nats"]["limits"]["streams"], 64);
    assert_eq!(claims["nats"]["signing_keys"], serde_json::json!([]));
    let exported = claims["nats"]["exports"].as_array().unwrap();
    let api = exported
        .iter()
        .find(|e| e["subject"] == "$JS.API.>")
        .unwrap();
    assert_eq!(api["type"], "service");
    assert_eq!(api["response_type"], "Stream", "a pull has many replies");
    // The members account: no JetStream of its own, imports every export of
    // the streams account, issues the users.
    let members = info.members_account.clone().unwrap();
    let m = account_claims(&dir, &members);
    assert!(m["nats"]["limits"].get("disk_storage").is_none(), "{m}");
    let imported = m["nats"]["imports"].as_array().unwrap();
    assert_eq!(imported.len(), exported.len());
    for (i, e) in imported.iter().zip(exported) {
        assert_eq!((&i["subject"], &i["type"]), (&e["subject"], &e["type"]));
        assert_eq!(i["account"], info.account);
    }
    let signing = info.members_signing_key.clone().unwrap();
    assert_eq!(m["nats"]["signing_keys"], serde_json::json!([signing]));
    let (admin, _) = jwt::parse_creds(&read(&dir.join(ADMIN_CREDS)).unwrap()).unwrap();
    assert_eq!(admin["iss"], signing);
    assert_eq!(admin["nats"]["issuer_account"], members);
    assert!(read(&dir.join(ROOT_PUB))
        .unwrap()
        .starts_with("-----BEGIN PUBLIC KEY-----"));
}

#[test]
fn init_again_changes_nothing_and_never_overwrites_a_root() {
    let (_tmp, dir) = new_fleet();
    let before = read(&dir.join(ROOT_KEY)).unwrap();
    let info = load_info(&dir).unwrap();
    for force in [false, true] {
        match init(&dir, "other", &Prefix::default(), &DEFAULT_JS_LIMITS, force).unwrap() {
            InitOutcome::AlreadyInitialised(i, false) => assert_eq!(i, info),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(read(&dir.join(ROOT_KEY)).unwrap(), before);
    // A fleet made before the notify bridge's credentials gets them, once.
    let notify = read(&dir.join(NOTIFY_CREDS)).unwrap();
    std::fs::remove_file(dir.join(NOTIFY_CREDS)).unwrap();
    let added = init(&dir, "test", &Prefix::default(), &DEFAULT_JS_LIMITS, false).unwrap();
    assert!(
        matches!(added, InitOutcome::AlreadyInitialised(_, true)),
        "{added:?}"
    );
    let (claims, _) = jwt::parse_creds(&read(&dir.join(NOTIFY_CREDS)).unwrap()).unwrap();
    assert_ne!(read(&dir.join(NOTIFY_CREDS)).unwrap(), notify);
    assert_eq!(claims["iss"], info.members_signing_key.clone().unwrap());
    let allowed = claims["nats"]["pub"]["allow"].as_array().unwrap();
    assert!(
        allowed
            .iter()
            .any(|s| s == "$JS.API.CONSUMER.MSG.NEXT.FLEETBUS_DRIFT.fleetbus-notify"),
        "{allowed:?}"
    );
    assert!(
        !allowed
            .iter()
            .any(|s| s.as_str().unwrap().starts_with("fleetbus.")),
        "{allowed:?}"
    );
    assert_eq!(
        claims["nats"]["sub"]["allow"],
        serde_json::json!(["_INBOX_notify.>"])
    );
    // A fleet that lost fleet.json is partial: refused even with --force.
    std::fs::remove_file(dir.join(FLEET_JSON)).unwrap();
    let err = init(&dir, "test", &Prefix::default(), &DEFAULT_JS_LIMITS, true).unwrap_err();
    assert!(matches!(err, TrustError::PartialFleet { .. }), "{err}");
    assert!(err.to_string().contains("root.key"), "{err}");
    assert_eq!(read(&dir.join(ROOT_KEY)).unwrap(), before);
}

#[test]
fn init_refuses_a_non_empty_directory_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), "mine").unwrap();
    let err = init(
        tmp.path(),
        "test",
        &Prefix::default(),
        &DEFAULT_JS_LIMITS,
        false,
    )
    .unwrap_err();
    assert!(matches!(err, TrustError::NotEmpty(_)), "{err}");
    assert!(err.to_string().contains("--force"), "{err}");
    assert!(!tmp.path().join(FLEET_JSON).exists());
    assert!(matches!(
        init(
            tmp.path(),
            "test",
            &Prefix::default(),
            &DEFAULT_JS_LIMITS,
            true
        )
        .unwrap(),
        InitOutcome::Created(_)
    ));
    assert_eq!(read(&tmp.path().join("notes.txt")).unwrap(), "mine");
}

#[test]
fn join_is_idempotent_rotate_issues_new_and_permissions_are_the_agents() {
    let (_tmp, dir) = new_fleet();
    let first = join(&dir, "c1", false).unwrap();
    assert!(first.issued);
    assert_eq!(mode(&first.path), 0o600);
    assert_eq!(first.path, dir.join("clusters/c1/nats.creds"));
    let again = join(&dir, "c1", false).unwrap();
    assert!(!again.issued);
    assert_eq!(again.creds, first.creds);
    let rotated = join(&dir, "c1", true).unwrap();
    assert!(rotated.issued);
    assert_ne!(rotated.creds, first.creds);
    assert_eq!(read(&rotated.path).unwrap(), rotated.creds);
    assert_eq!(mode(&rotated.path), 0o600);

    let (claims, _) = jwt::parse_creds(&rotated.creds).unwrap();
    let want = agent_permissions("c1", &Prefix::default()).unwrap();
    assert_eq!(
        claims["nats"]["pub"]["allow"],
        serde_json::json!(want.publish_allow)
    );
    assert_eq!(
        claims["nats"]["sub"]["allow"],
        serde_json::json!(want.subscribe_allow)
    );
    assert_eq!(
        claims["nats"]["resp"],
        serde_json::json!({"max": 1, "ttl": 0})
    );
    assert_eq!(claims["name"], "c1");
}

#[test]
fn join_refuses_bad_names_missing_fleets_and_tampered_creds() {
    let (tmp, dir) = new_fleet();
    for bad in ["*", ">", "c1.>", "a.b", "", "C1", "-x"] {
        let err = join(&dir, bad, false).unwrap_err();
        assert!(matches!(err, TrustError::Name(_)), "{bad:?}: {err}");
    }
    assert!(
        !dir.join(CLUSTERS).exists(),
        "nothing written for bad names"
    );
    let err = join(&tmp.path().join("absent"), "c1", false).unwrap_err();
    assert!(matches!(err, TrustError::NoFleet(_)), "{err}");
    assert!(err.to_string().contains("fleetbus fleet init"), "{err}");

    // Creds of another fleet put in place of c1's: not this fleet's.
    let (_tmp2, other) = new_fleet();
    let foreign = join(&other, "c1", false).unwrap();
    let path = dir.join("clusters/c1/nats.creds");
    create_dir(path.parent().unwrap()).unwrap();
    std::fs::write(&path, &foreign.creds).unwrap();
    let err = join(&dir, "c1", false).unwrap_err();
    assert!(
        err.to_string().contains("not issued by this fleet"),
        "{err}"
    );
    assert!(err.to_string().contains("--rotate"), "{err}");
    // c2's creds copied over c1's: the wrong cluster.
    let c2 = join(&dir, "c2", false).unwrap();
    std::fs::write(&path, &c2.creds).unwrap();
    let err = join(&dir, "c1", false).unwrap_err();
    assert!(err.to_string().contains("not c1"), "{err}");
    // Garbage.
    std::fs::write(&path, "garbage").unwrap();
    let err = join(&dir, "c1", false).unwrap_err();
    assert!(matches!(err, TrustError::BadCreds { .. }), "{err}");
    // --rotate recovers.
    assert!(join(&dir, "c1", true).unwrap().issued);
    assert!(!join(&dir, "c1", false).unwrap().issued);

    // A signing key that is not fleet.json's.
    let other_seed = nkeys::KeyPair::new_account().seed().unwrap();
    std::fs::write(dir.join(MEMBERS_SIGNING_SEED), other_seed).unwrap();
    let err = join(&dir, "c3", false).unwrap_err();
    assert!(err.to_string().contains("not the signing key"), "{err}");
}

#[test]
fn values_and_manifest_name_the_charts_secrets() {
    let (_tmp, dir) = new_fleet();
    let joined = join(&dir, "c4", false).unwrap();
    let values: serde_json::Value = fleetbus_schemas::yaml::from_str(&render(
        &joined,
        JoinOutput::Values,
        "fleetbus-system",
        Some("tls://nats.example:4222"),
        Some("CA PEM"),
    ))
    .unwrap();
    assert_eq!(values["clusterName"].as_str(), Some("c4"));
    assert_eq!(values["subjectPrefix"].as_str(), Some("fleetbus"));
    assert_eq!(
        values["nats"]["credsSecret"].as_str(),
        Some(output::CREDS_SECRET)
    );
    assert_eq!(
        values["nats"]["url"].as_str(),
        Some("tls://nats.example:4222")
    );
    assert_eq!(values["nats"]["tls"]["enabled"].as_bool(), Some(true));
    assert_eq!(
        values["nats"]["tls"]["caSecret"].as_str(),
        Some(output::CA_SECRET)
    );

    let manifest = render(&joined, JoinOutput::Manifest, "ns1", None, Some("CA PEM"));
    let docs: Vec<serde_json::Value> = manifest
        .split("\n---\n")
        .skip(1)
        .map(|d| fleetbus_schemas::yaml::from_str(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 3, "{manifest}");
    assert_eq!(
        docs[0]["metadata"]["name"].as_str(),
        Some(output::CREDS_SECRET)
    );
    assert_eq!(docs[0]["metadata"]["namespace"].as_str(), Some("ns1"));
    assert_eq!(
        docs[0]["stringData"]["nats.creds"].as_str(),
        Some(joined.creds.as_str())
    );
    assert_eq!(
        values["trust"]["secret"].as_str(),
        Some(output::TRUST_SECRET)
    );
    let trust = &docs[1];
    assert_eq!(
        trust["metadata"]["name"].as_str(),
        Some(output::TRUST_SECRET)
    );
    let data = |k: &str| trust["stringData"][k].as_str().unwrap().to_owned();
    let root = parse_root_public(&data(output::TRUST_ROOT)).unwrap();
    let cert = SignedCertificate::decode(&data(output::TRUST_CERT)).unwrap();
    verify(&cert, &root, "c4", Utc::now()).unwrap();
    let keys = ClusterKeys::decode(&data(output::TRUST_KEY)).unwrap();
    assert!(keys.matches(&cert.cert));
    assert_eq!(docs[2]["stringData"]["ca.crt"].as_str(), Some("CA PEM"));
    // Without a CA: no TLS in the values, two Secrets.
    let values = render(&joined, JoinOutput::Values, "ns1", None, None);
    assert!(!values.contains("tls"), "{values}");
    let manifest = render(&joined, JoinOutput::Manifest, "ns1", None, None);
    assert_eq!(manifest.matches("kind: Secret").count(), 2, "{manifest}");
}

#[test]
fn join_mints_keys_and_a_certificate_from_the_root_kept_until_rotate() {
    let (_tmp, dir) = new_fleet();
    let cdir = dir.join("clusters/c1");
    let first = join(&dir, "c1", false).unwrap();
    assert!(first.identity_issued);
    assert_eq!(mode(&cdir.join(CLUSTER_KEY)), 0o600);
    assert_eq!(read(&cdir.join(CLUSTER_KEY)).unwrap(), *first.identity.key);
    assert_eq!(read(&cdir.join(CLUSTER_CERT)).unwrap(), first.identity.cert);
    // Signed by the key of root.pub, for c1, valid now and for a year.
    let root = parse_root_public(&read(&dir.join(ROOT_PUB)).unwrap()).unwrap();
    let cert = SignedCertificate::decode(&first.identity.cert).unwrap();
    let now = Utc::now();
    verify(&cert, &root, "c1", now).unwrap();
    verify(&cert, &root, "c1", now + chrono::Duration::days(364)).unwrap();
    let keys = ClusterKeys::decode(&first.identity.key).unwrap();
    assert!(keys.matches(&cert.cert));

    let again = join(&dir, "c1", false).unwrap();
    assert!(!again.identity_issued);
    assert_eq!(again.identity.cert, first.identity.cert);
    let rotated = join(&dir, "c1", true).unwrap();
    assert!(rotated.identity_issued);
    let new_cert = SignedCertificate::decode(&rotated.identity.cert).unwrap();
    verify(&new_cert, &root, "c1", now).unwrap();
    assert_ne!(new_cert.cert.signing_key, cert.cert.signing_key);
    assert_ne!(new_cert.cert.sealing_key, cert.cert.sealing_key);
    assert_ne!(new_cert.cert.serial, cert.cert.serial);
    assert_eq!(mode(&cdir.join(CLUSTER_KEY)), 0o600);
    // Another cluster's keys differ.
    let c2 = join(&dir, "c2", false).unwrap();
    assert_ne!(*c2.identity.key, *rotated.identity.key);
}

#[test]
fn join_refuses_a_stored_identity_that_is_not_the_clusters() {
    let (tmp, dir) = new_fleet();
    join(&dir, "c1", false).unwrap();
    join(&dir, "c2", false).unwrap();
    let c1 = dir.join("clusters/c1");
    let c2 = dir.join("clusters/c2");
    let copy = |from: &Path, to: &Path, f: &str| std::fs::copy(from.join(f), to.join(f)).unwrap();
    // c2's certificate in c1's place: names another cluster.
    let c1_cert = read(&c1.join(CLUSTER_CERT)).unwrap();
    copy(&c2, &c1, CLUSTER_CERT);
    let err = join(&dir, "c1", false).unwrap_err();
    assert!(matches!(err, TrustError::BadIdentity { .. }), "{err}");
    assert!(err.to_string().contains("--rotate"), "{err}");
    // c2's key under c1's certificate: not the certified key.
    std::fs::write(c1.join(CLUSTER_CERT), &c1_cert).unwrap();
    copy(&c2, &c1, CLUSTER_KEY);
    let err = join(&dir, "c1", false).unwrap_err();
    assert!(err.to_string().contains("not the key"), "{err}");
    // A certificate from another fleet's root.
    let other = tmp.path().join("other");
    init(&other, "o", &Prefix::default(), &DEFAULT_JS_LIMITS, false).unwrap();
    join(&other, "c1", false).unwrap();
    copy(&other.join("clusters/c1"), &c1, CLUSTER_CERT);
    copy(&other.join("clusters/c1"), &c1, CLUSTER_KEY);
    let err = join(&dir, "c1", false).unwrap_err();
    assert!(
        err.to_string().contains("not signed by the fleet root"),
        "{err}"
    );
    // Garbage, and a missing half.
    std::fs::write(c1.join(CLUSTER_CERT), "garbage").unwrap();
    assert!(join(&dir, "c1", false).is_err());
    std::fs::remove_file(c1.join(CLUSTER_CERT)).unwrap();
    assert!(join(&dir, "c1", false).is_err());
    // --rotate repairs all of it.
    let rotated = join(&dir, "c1", true).unwrap();
    assert!(rotated.identity_issued);
    join(&dir, "c1", false).unwrap();
}

/// The claims of `account`'s JWT in the fleet's nats-server include, checked
/// as signed by the operator.
fn account_claims(dir: &Path, account: &str) -> serde_json::Value {
    let info = load_info(dir).unwrap();
    let conf = read(&dir.join(SERVER_CONF)).unwrap();
    let account_jwt = conf
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{account}: ")))
        .unwrap();
    let claims = jwt::verify(account_jwt).unwrap();
    assert_eq!(claims["iss"], info.operator, "signed by the operator");
    claims
}

/// The users' revocations as the include's account JWTs carry them.
fn revocations_in_conf(dir: &Path) -> serde_json::Value {
    let info = load_info(dir).unwrap();
    let streams = account_claims(dir, &info.account);
    assert_eq!(
        streams["nats"]["limits"]["consumer"], DEFAULT_JS_LIMITS.consumers,
        "the limits survive a re-signing"
    );
    let members = account_claims(dir, info.members_account.as_deref().unwrap());
    assert_eq!(
        members["nats"]["signing_keys"][0],
        info.members_signing_key.clone().unwrap()
    );
    members["nats"]["revocations"].clone()
}

/// A fleet from before the members account (as `fleet init` wrote one): its
/// users issued in the streams account by its own signing key.
fn unsplit(dir: &Path) {
    let mut info = load_info(dir).unwrap();
    info.members_account = None;
    info.members_signing_key = None;
    let json = serde_json::to_string_pretty(&info).unwrap();
    std::fs::write(dir.join(FLEET_JSON), json).unwrap();
    for f in [MEMBERS_SEED, MEMBERS_SIGNING_SEED] {
        std::fs::remove_file(dir.join(f)).unwrap();
    }
    let operator = operator_key(dir, &info).unwrap();
    write_server_conf(dir, &info, &operator, &BTreeMap::new(), Utc::now(), true).unwrap();
    let signing = user_signer(dir, &info).unwrap();
    let admin = mint_user(&info, &signing, "admin", None, Utc::now())
        .unwrap()
        .0;
    std::fs::write(dir.join(ADMIN_CREDS), admin).unwrap();
}

#[test]
fn an_older_fleet_is_split_and_its_clusters_move_as_they_join_again() {
    let (_tmp, dir) = new_fleet();
    unsplit(&dir);
    let old = load_info(&dir).unwrap();
    let c1 = join(&dir, "c1", false).unwrap();
    let c2 = join(&dir, "c2", false).unwrap();
    for old_creds in [&c1.creds, &c2.creds] {
        assert_eq!(
            jwt::parse_creds(old_creds).unwrap().0["iss"],
            old.signing_key
        );
    }
    let before = account_claims(&dir, &old.account);
    assert!(before["nats"].get("exports").is_none(), "{before}");

    let info = match init(&dir, "test", &Prefix::default(), &DEFAULT_JS_LIMITS, false).unwrap() {
        InitOutcome::Split(info) => info,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        info.account, old.account,
        "the streams stay in their account"
    );
    let members = info.members_account.clone().unwrap();
    for f in [ADMIN_CREDS, NOTIFY_CREDS] {
        let (claims, _) = jwt::parse_creds(&read(&dir.join(f)).unwrap()).unwrap();
        assert_eq!(claims["nats"]["issuer_account"], members, "{f}");
    }
    // Until every cluster has joined again, their old creds keep working.
    let streams = account_claims(&dir, &info.account);
    assert_eq!(
        streams["nats"]["signing_keys"],
        serde_json::json!([old.signing_key])
    );
    assert!(streams["nats"]["exports"].is_array());

    let moved = join(&dir, "c1", false).unwrap();
    assert!(
        moved.issued && moved.moved,
        "creds from before the split are issued anew"
    );
    assert!(moved.revoked.is_empty() && !moved.old_creds_stopped);
    let streams_jwt = |dir: &Path| {
        let conf = read(&dir.join(SERVER_CONF)).unwrap();
        let line = conf
            .lines()
            .find(|l| l.trim().starts_with(&info.account))
            .unwrap();
        line.to_owned()
    };
    let before_move = streams_jwt(&dir);
    assert_eq!(
        jwt::parse_creds(&moved.creds).unwrap().0["nats"]["issuer_account"],
        members
    );
    assert!(!join(&dir, "c1", false).unwrap().issued, "once");
    let streams = account_claims(&dir, &info.account);
    assert_eq!(
        streams["nats"]["signing_keys"],
        serde_json::json!([old.signing_key]),
        "c2 has not moved"
    );

    let last = join(&dir, "c2", false).unwrap();
    assert!(last.moved && last.old_creds_stopped);
    let streams = account_claims(&dir, &info.account);
    assert_eq!(
        streams["nats"]["signing_keys"],
        serde_json::json!([]),
        "no user is left there"
    );
    let split = streams_jwt(&dir);
    assert_ne!(split, before_move);
    // From now on a revocation re-signs the members account, not the streams
    // account: nats-server then keeps the routes of the replies in flight.
    let rotated = join(&dir, "c1", true).unwrap();
    assert!(
        rotated.revoked.contains(&user_key(&moved.creds)),
        "{:?}",
        rotated.revoked
    );
    assert!(
        rotated.revoked.contains(&user_key(&c1.creds)),
        "and its key from before"
    );
    assert!(revocations_in_conf(&dir)[user_key(&moved.creds)].is_i64());
    assert_eq!(streams_jwt(&dir), split);
    match init(&dir, "test", &Prefix::default(), &DEFAULT_JS_LIMITS, false).unwrap() {
        InitOutcome::AlreadyInitialised(i, false) => assert_eq!(i, info),
        other => panic!("{other:?}"),
    }
}

fn user_key(creds: &str) -> String {
    let (claims, _) = jwt::parse_creds(creds).unwrap();
    claims["sub"].as_str().unwrap().to_owned()
}

#[test]
fn rotate_revokes_the_earlier_key_and_leave_revokes_every_key_ever_issued() {
    let (_tmp, dir) = new_fleet();
    let c2 = join(&dir, "c2", false).unwrap();
    assert!(c2.revoked.is_empty());
    assert!(revocations_in_conf(&dir).is_null(), "nothing revoked yet");
    let first = join(&dir, "c1", false).unwrap();
    let rotated = join(&dir, "c1", true).unwrap();
    let (k1, k2) = (user_key(&first.creds), user_key(&rotated.creds));
    assert_eq!(rotated.revoked, vec![k1.clone()]);
    let revs = revocations_in_conf(&dir);
    assert!(revs[&k1].as_i64().unwrap() >= user_iat(&first.creds));
    assert!(revs.get(&k2).is_none(), "the new key works");

    let left = leave(&dir, "c1").unwrap();
    let mut want = vec![k1.clone(), k2.clone()];
    want.sort();
    assert_eq!(left.keys, want);
    assert_eq!(left.newly_revoked, vec![k2.clone()]);
    let revs = revocations_in_conf(&dir);
    assert!(revs[&k2].as_i64().unwrap() >= user_iat(&rotated.creds));
    assert!(revs.get(user_key(&c2.creds)).is_none(), "c2 untouched");
    assert!(!rotated.path.exists(), "the revoked creds are removed");
    // Leaving again: nothing new, include unchanged.
    let conf = read(&dir.join(SERVER_CONF)).unwrap();
    let again = leave(&dir, "c1").unwrap();
    assert!(again.newly_revoked.is_empty());
    assert_eq!(read(&dir.join(SERVER_CONF)).unwrap(), conf);
    // Joining again issues a new key, not revoked.
    let back = join(&dir, "c1", false).unwrap();
    assert!(back.issued);
    assert!(revocations_in_conf(&dir)
        .get(user_key(&back.creds))
        .is_none());
}

fn user_iat(creds: &str) -> i64 {
    let (claims, _) = jwt::parse_creds(creds).unwrap();
    claims["iat"].as_i64().unwrap()
}

#[test]
fn leave_refuses_bad_names_strangers_and_never_revokes_another_clusters_key() {
    let (tmp, dir) = new_fleet();
    for bad in ["*", ">", "c1.>", "", "C1", "-x", "../c1"] {
        let err = leave(&dir, bad).unwrap_err();
        assert!(matches!(err, TrustError::Name(_)), "{bad:?}: {err}");
    }
    let err = leave(&dir, "c9").unwrap_err();
    assert!(matches!(err, TrustError::NotJoined { .. }), "{err}");
    assert!(err.to_string().contains("never joined"), "{err}");
    let err = leave(&tmp.path().join("absent"), "c1").unwrap_err();
    assert!(matches!(err, TrustError::NoFleet(_)), "{err}");
    assert!(!dir.join(REVOCATIONS).exists());

    // c2's creds copied over c1's: leave c1 revokes c1's key only.
    let c1 = join(&dir, "c1", false).unwrap();
    let c2 = join(&dir, "c2", false).unwrap();
    std::fs::write(&c1.path, &c2.creds).unwrap();
    let left = leave(&dir, "c1").unwrap();
    assert_eq!(left.keys, vec![user_key(&c1.creds)]);
    assert!(revocations_in_conf(&dir).get(user_key(&c2.creds)).is_none());

    // A damaged issued-keys list is an error naming the file, not a panic.
    std::fs::write(dir.join("clusters/c2").join(ISSUED_KEYS), "garbage\n").unwrap();
    let err = leave(&dir, "c2").unwrap_err();
    assert!(err.to_string().contains(ISSUED_KEYS), "{err}");
    // An operator key that is not fleet.json's: refused, nothing written.
    std::fs::write(dir.join("clusters/c2").join(ISSUED_KEYS), "").unwrap();
    let conf = read(&dir.join(SERVER_CONF)).unwrap();
    let other = nkeys::KeyPair::new_operator().seed().unwrap();
    std::fs::write(dir.join(OPERATOR_SEED), other).unwrap();
    let err = leave(&dir, "c2").unwrap_err();
    assert!(err.to_string().contains("not the operator"), "{err}");
    assert_eq!(read(&dir.join(SERVER_CONF)).unwrap(), conf);
}

#[test]
fn leaves_revocation_names_every_serial_signed_by_the_root_and_join_issues_anew() {
    use fleetbus_schemas::registry::RevokedRecord;
    let (_tmp, dir) = new_fleet();
    let serial = |j: &Joined| {
        SignedCertificate::decode(&j.identity.cert)
            .unwrap()
            .cert
            .serial_hex()
    };
    let first = join(&dir, "c1", false).unwrap();
    let rotated = join(&dir, "c1", true).unwrap();
    join(&dir, "c2", false).unwrap();
    // No certificate: nothing to revoke.
    assert!(identity::revocation(&dir, "c9").unwrap().is_none());
    leave(&dir, "c1").unwrap();
    let bytes = identity::revocation(&dir, "c1").unwrap().unwrap();
    let root = parse_root_public(&read(&dir.join(ROOT_PUB)).unwrap()).unwrap();
    RevokedRecord::verify(&bytes, &root).unwrap();
    let record = RevokedRecord::decode(&bytes).unwrap();
    assert_eq!(record.name, "c1");
    let mut want = vec![serial(&first), serial(&rotated)];
    want.sort();
    assert_eq!(record.serials, want, "the rotated-out serial too");
    record.validate().unwrap();
    // Joining again after leaving: a new certificate, not the revoked one.
    let back = join(&dir, "c1", false).unwrap();
    assert!(back.identity_issued);
    assert!(!want.contains(&serial(&back)));
    let again = join(&dir, "c1", false).unwrap();
    assert!(!again.identity_issued, "the new one is kept");
    // c2 is untouched.
    assert!(!join(&dir, "c2", false).unwrap().identity_issued);
}
