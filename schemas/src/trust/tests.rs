use chrono::{DateTime, Duration, Utc};

use super::*;

fn root() -> SigningKey {
    SigningKey::from_bytes(&[7u8; 32])
}

fn keys() -> ClusterKeys {
    ClusterKeys::from_random([1u8; 32], [2u8; 32])
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn cert_for(name: &str, k: &ClusterKeys) -> ClusterCertificate {
    ClusterCertificate {
        cluster: name.to_owned(),
        signing_key: k.signing_public(),
        sealing_key: k.sealing_public(),
        not_before: t0(),
        not_after: t0() + Duration::days(365),
        serial: [9u8; 16],
    }
}

fn signed() -> SignedCertificate {
    cert_for("c1", &keys()).sign(&root())
}

#[test]
fn a_certificate_round_trips_and_verifies() {
    let s = signed();
    let text = s.encode();
    let back = SignedCertificate::decode(&format!("{text}\n")).unwrap();
    assert_eq!(back, s);
    verify(
        &back,
        &root().verifying_key(),
        "c1",
        t0() + Duration::hours(1),
    )
    .unwrap();
    assert!(keys().matches(&back.cert));
    assert_eq!(back.cert.serial_hex(), "09".repeat(16));
}

#[test]
fn another_root_is_a_bad_signature() {
    let other = SigningKey::from_bytes(&[8u8; 32]);
    let s = cert_for("c1", &keys()).sign(&other);
    let err = verify(&s, &root().verifying_key(), "c1", t0()).unwrap_err();
    assert_eq!(err, CertError::BadSignature);
}

#[test]
fn every_altered_field_breaks_the_signature() {
    let s = signed();
    let alter: [fn(&mut ClusterCertificate); 6] = [
        |c| c.cluster = "c2".into(),
        |c| c.signing_key[0] ^= 1,
        |c| c.sealing_key[0] ^= 1,
        |c| c.not_before -= Duration::seconds(1),
        |c| c.not_after += Duration::days(1000),
        |c| c.serial[15] ^= 1,
    ];
    for f in alter {
        let mut forged = s.clone();
        f(&mut forged.cert);
        // A renamed forgery must read as forged, not as "wrong cluster".
        let err = verify(&forged, &root().verifying_key(), &forged.cert.cluster, t0());
        assert_eq!(err, Err(CertError::BadSignature), "{forged:?}");
    }
    let mut flipped = s.clone();
    flipped.signature[3] ^= 1;
    let err = verify(&flipped, &root().verifying_key(), "c1", t0());
    assert_eq!(err, Err(CertError::BadSignature));
}

#[test]
fn validity_is_checked_at_both_ends() {
    let s = signed();
    let root = root().verifying_key();
    let err = verify(&s, &root, "c1", t0() - Duration::seconds(1)).unwrap_err();
    assert!(matches!(err, CertError::NotYetValid { .. }), "{err}");
    verify(&s, &root, "c1", t0()).unwrap();
    verify(&s, &root, "c1", t0() + Duration::days(365)).unwrap();
    let err = verify(
        &s,
        &root,
        "c1",
        t0() + Duration::days(365) + Duration::seconds(1),
    );
    assert!(matches!(err, Err(CertError::Expired { .. })), "{err:?}");
}

#[test]
fn a_certificate_for_another_cluster_is_refused() {
    let err = verify(&signed(), &root().verifying_key(), "c2", t0()).unwrap_err();
    assert_eq!(
        err,
        CertError::WrongCluster {
            expected: "c2".into(),
            found: "c1".into()
        }
    );
}

#[test]
fn garbage_certificates_are_malformed_never_a_panic() {
    let good = signed().to_bytes();
    let b64 = |b: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b);
    let mut cases: Vec<String> = vec![
        String::new(),
        "!!!not base64!!!".into(),
        "A".repeat(10_000),
        b64(&good[..good.len() - 1]),
        b64(&[good.as_slice(), &[0]].concat()),
        b64(&good[..40]),
    ];
    for cut in 0..good.len() {
        cases.push(b64(&good[..cut]));
    }
    let mut zero_name = good.clone();
    zero_name[32] = 0;
    cases.push(b64(&zero_name));
    let mut long_name = good.clone();
    long_name[32] = 200;
    cases.push(b64(&long_name));
    let mut magic = good.clone();
    magic[0] ^= 1;
    cases.push(b64(&magic));
    for c in &cases {
        let err = SignedCertificate::decode(c).unwrap_err();
        assert!(matches!(err, CertError::Malformed(_)), "{c:?}: {err}");
    }
}

#[test]
fn keys_round_trip_and_never_print() {
    let k = keys();
    let text = k.encode();
    let back = ClusterKeys::decode(&format!("{}\n", *text)).unwrap();
    assert_eq!(back.signing_public(), k.signing_public());
    assert_eq!(back.sealing_secret(), k.sealing_secret());
    let debug = format!("{k:?}");
    assert!(!debug.contains(&hex::encode(k.sealing_secret())), "{debug}");
    assert!(
        !debug.contains(&hex::encode(k.signing().to_bytes())),
        "{debug}"
    );
    for bad in ["", "garbage", &text[..100], &"A".repeat(128)] {
        assert!(ClusterKeys::decode(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn the_sealing_public_key_is_x25519_of_the_secret() {
    // RFC 7748 §6.1 test vector (Alice).
    let secret: [u8; 32] =
        hex::decode("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
            .unwrap()
            .try_into()
            .unwrap();
    let k = ClusterKeys::from_random([0u8; 32], secret);
    assert_eq!(
        hex::encode(k.sealing_public()),
        "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
    );
}

#[test]
fn root_pem_files_from_rcgen_parse() {
    // What `fleet init` writes (rcgen, ed25519): PKCS#8 v2 and SPKI PEM,
    // fixed here so the test needs no generator.
    let key = "-----BEGIN PRIVATE KEY-----\n\
               MC4CAQAwBQYDK2VwBCIEIAcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcH\n\
               -----END PRIVATE KEY-----\n";
    let k = parse_root_key(key).unwrap();
    assert_eq!(k.to_bytes(), [7u8; 32]);
    let pub_pem = {
        use ed25519_dalek::pkcs8::EncodePublicKey as _;
        k.verifying_key()
            .to_public_key_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
            .unwrap()
    };
    assert_eq!(parse_root_public(&pub_pem).unwrap(), k.verifying_key());
    assert!(parse_root_public(key).is_err());
    assert!(parse_root_key(&pub_pem).is_err());
    assert!(parse_root_key("garbage").is_err());
}
