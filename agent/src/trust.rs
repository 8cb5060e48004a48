//! This cluster's place in the fleet's root of trust (issue 21): the fleet
//! root's public key, this cluster's signing and sealing keys, and its
//! certificate, loaded once at start-up from `--fleet-root`,
//! `--cluster-key` and `--cluster-cert`.
//!
//! With all three the agent runs in the secure mode: it signs what it
//! publishes and (as later slices land) trusts only what chains to the root.
//! With none it runs in the insecure mode of earlier versions: nothing is
//! signed or verified (README, SECURITY.md). Any other combination, or files
//! that do not verify, stop start-up with exit 2: an agent that believes it
//! is secure and is not would be worse than one that says it is not.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use fleetbus_schemas::trust::{
    parse_root_public, verify, CertError, ClusterKeys, KeyError, SignedCertificate, SigningKey,
    VerifyingKey,
};
use zeroize::Zeroizing;

/// Why the trust files were refused.
#[derive(Debug, thiserror::Error)]
pub enum TrustLoadError {
    /// Some but not all of the three flags.
    #[error(
        "{given} needs {missing}: the secure mode takes --fleet-root, --cluster-key and \
         --cluster-cert together (none of them: the insecure mode)"
    )]
    Incomplete {
        /// A flag that was given.
        given: &'static str,
        /// A flag that is missing.
        missing: &'static str,
    },
    /// A file cannot be read.
    #[error("{flag} {}: cannot read the file", path.display())]
    Unreadable {
        /// The flag naming the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A key file does not parse.
    #[error("{flag} {}: {source}", path.display())]
    Key {
        /// The flag naming the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong (never key material).
        #[source]
        source: KeyError,
    },
    /// The certificate does not parse, is not the root's, names another
    /// cluster, or is outside its validity.
    #[error("--cluster-cert {}: {source}", path.display())]
    Cert {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: CertError,
    },
    /// The certificate certifies other keys than `--cluster-key` holds.
    #[error(
        "--cluster-key {} is not the key --cluster-cert certifies (issued by different \
         `fleetbus join` runs? run it again and use both files it writes)",
        .0.display()
    )]
    KeyMismatch(PathBuf),
}

/// This cluster's keys and certificate, verified against the fleet root.
#[derive(Debug)]
pub struct Identity {
    root: VerifyingKey,
    keys: ClusterKeys,
    cert: SignedCertificate,
    cert_text: String,
}

impl Identity {
    /// The fleet root's public key: every certificate must verify against it.
    pub fn root(&self) -> &VerifyingKey {
        &self.root
    }

    /// This cluster's signing key.
    pub fn signing_key(&self) -> &SigningKey {
        self.keys.signing()
    }

    /// This cluster's X25519 secret key (sealed Secrets are opened with it).
    pub fn sealing_secret(&self) -> &[u8; 32] {
        self.keys.sealing_secret()
    }

    /// This cluster's certificate.
    pub fn certificate(&self) -> &SignedCertificate {
        &self.cert
    }

    /// The certificate as the ClusterRecord carries it (base64).
    pub fn certificate_text(&self) -> &str {
        &self.cert_text
    }

    /// Reads and checks the three files for cluster `cluster` at `now`.
    pub fn load(
        cluster: &str,
        root: &Path,
        key: &Path,
        cert: &Path,
        now: DateTime<Utc>,
    ) -> Result<Identity, TrustLoadError> {
        let read = |flag: &'static str, path: &Path| {
            std::fs::read_to_string(path)
                .map(Zeroizing::new)
                .map_err(|source| TrustLoadError::Unreadable {
                    flag,
                    path: path.to_owned(),
                    source,
                })
        };
        fn key_error(flag: &'static str, path: &Path) -> impl FnOnce(KeyError) -> TrustLoadError {
            let path = path.to_owned();
            move |source| TrustLoadError::Key { flag, path, source }
        }
        let root_key = parse_root_public(&read("--fleet-root", root)?)
            .map_err(key_error("--fleet-root", root))?;
        let keys = ClusterKeys::decode(&read("--cluster-key", key)?)
            .map_err(key_error("--cluster-key", key))?;
        let cert_error = |source| TrustLoadError::Cert {
            path: cert.to_owned(),
            source,
        };
        let cert_text = read("--cluster-cert", cert)?.trim().to_owned();
        let signed = SignedCertificate::decode(&cert_text).map_err(cert_error)?;
        verify(&signed, &root_key, cluster, now).map_err(cert_error)?;
        if !keys.matches(&signed.cert) {
            return Err(TrustLoadError::KeyMismatch(key.to_owned()));
        }
        Ok(Identity {
            root: root_key,
            keys,
            cert: signed,
            cert_text,
        })
    }

    /// The identity the flags name: `None` when none is given (the insecure
    /// mode), an error when only some are.
    pub fn from_flags(
        cluster: &str,
        root: Option<&Path>,
        key: Option<&Path>,
        cert: Option<&Path>,
        now: DateTime<Utc>,
    ) -> Result<Option<Identity>, TrustLoadError> {
        const FLAGS: [&str; 3] = ["--fleet-root", "--cluster-key", "--cluster-cert"];
        let given = [root, key, cert];
        match given {
            [Some(root), Some(key), Some(cert)] => {
                Identity::load(cluster, root, key, cert, now).map(Some)
            }
            [None, None, None] => Ok(None),
            _ => {
                let flag = |want: bool| {
                    given
                        .iter()
                        .zip(FLAGS)
                        .find(|(g, _)| g.is_some() == want)
                        .map_or("", |(_, f)| f)
                };
                Err(TrustLoadError::Incomplete {
                    given: flag(true),
                    missing: flag(false),
                })
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use chrono::Duration;
    use fleetbus_schemas::trust::ClusterCertificate;

    use super::*;

    struct Files {
        dir: tempfile::TempDir,
    }

    impl Files {
        fn path(&self, f: &str) -> std::path::PathBuf {
            self.dir.path().join(f)
        }
        fn write(&self, f: &str, text: &str) {
            std::fs::write(self.path(f), text).unwrap();
        }
        fn load(&self, cluster: &str, now: DateTime<Utc>) -> Result<Identity, TrustLoadError> {
            Identity::load(
                cluster,
                &self.path("root.pub"),
                &self.path("cluster.key"),
                &self.path("cluster.cert"),
                now,
            )
        }
    }

    fn root() -> SigningKey {
        SigningKey::from_bytes(&[7u8; 32])
    }

    /// The root's public key as `fleet init` writes it (SPKI PEM).
    fn root_pem(k: &SigningKey) -> String {
        let vk = k.verifying_key();
        // SPKI for ed25519 (RFC 8410): a fixed 12-byte prefix, then the key.
        let mut der = vec![
            0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
        ];
        der.extend_from_slice(vk.as_bytes());
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der);
        format!("-----BEGIN PUBLIC KEY-----\n{b64}\n-----END PUBLIC KEY-----\n")
    }

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    /// A fleet with cluster `name`'s files, certified by `root`.
    fn files(name: &str, root: &SigningKey, seed: u8) -> Files {
        let dir = tempfile::tempdir().unwrap();
        let f = Files { dir };
        let keys = ClusterKeys::from_random([seed; 32], [seed.wrapping_add(1); 32]);
        let cert = ClusterCertificate {
            cluster: name.to_owned(),
            signing_key: keys.signing_public(),
            sealing_key: keys.sealing_public(),
            not_before: now() - Duration::minutes(5),
            not_after: now() + Duration::days(365),
            serial: [seed; 16],
        }
        .sign(root);
        f.write("root.pub", &root_pem(&self::root()));
        f.write("cluster.key", &format!("{}\n", *keys.encode()));
        f.write("cluster.cert", &format!("{}\n", cert.encode()));
        f
    }

    #[test]
    fn a_certified_cluster_loads() {
        let f = files("c1", &root(), 1);
        let id = f.load("c1", now()).unwrap();
        assert_eq!(id.certificate().cert.cluster, "c1");
        assert_eq!(id.root(), &root().verifying_key());
        assert_eq!(
            id.certificate_text(),
            std::fs::read_to_string(f.path("cluster.cert"))
                .unwrap()
                .trim()
        );
        let keys = ClusterKeys::from_random([1; 32], [2; 32]);
        assert_eq!(id.sealing_secret(), keys.sealing_secret());
        assert_eq!(
            id.signing_key().verifying_key().to_bytes(),
            keys.signing_public()
        );
    }

    #[test]
    fn a_certificate_of_another_cluster_root_or_time_is_refused() {
        let f = files("c2", &root(), 1);
        let err = f.load("c1", now()).unwrap_err();
        assert!(
            matches!(
                err,
                TrustLoadError::Cert {
                    source: CertError::WrongCluster { .. },
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("names cluster \"c2\""), "{err}");
        let f = files("c1", &SigningKey::from_bytes(&[9u8; 32]), 1);
        let err = f.load("c1", now()).unwrap_err();
        assert!(
            err.to_string().contains("not signed by the fleet root"),
            "{err}"
        );
        let f = files("c1", &root(), 1);
        let err = f.load("c1", now() + Duration::days(366)).unwrap_err();
        assert!(err.to_string().contains("expired"), "{err}");
        let err = f.load("c1", now() - Duration::hours(1)).unwrap_err();
        assert!(err.to_string().contains("not valid before"), "{err}");
    }

    #[test]
    fn a_key_the_certificate_does_not_name_is_refused() {
        let f = files("c1", &root(), 1);
        let other = files("c1", &root(), 5);
        std::fs::copy(other.path("cluster.key"), f.path("cluster.key")).unwrap();
        let err = f.load("c1", now()).unwrap_err();
        assert!(matches!(err, TrustLoadError::KeyMismatch(_)), "{err}");
    }

    #[test]
    fn garbage_files_are_refused_with_the_flag_never_a_panic() {
        let f = files("c1", &root(), 1);
        let cert = std::fs::read_to_string(f.path("cluster.cert")).unwrap();
        let key = std::fs::read_to_string(f.path("cluster.key")).unwrap();
        let cases: [(&str, String, &str); 7] = [
            (
                "cluster.cert",
                cert[..cert.len() / 2].to_owned(),
                "--cluster-cert",
            ),
            ("cluster.cert", "%%%".into(), "--cluster-cert"),
            ("cluster.cert", key.clone(), "--cluster-cert"),
            ("cluster.key", cert.clone(), "--cluster-key"),
            ("cluster.key", String::new(), "--cluster-key"),
            (
                "root.pub",
                "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n".into(),
                "--fleet-root",
            ),
            ("root.pub", cert.clone(), "--fleet-root"),
        ];
        for (file, text, flag) in cases {
            let g = files("c1", &root(), 1);
            g.write(file, &text);
            let err = g.load("c1", now()).unwrap_err().to_string();
            assert!(err.starts_with(flag), "{file} {text:?}: {err}");
            assert!(!err.contains(key.trim()), "{err}");
        }
        std::fs::remove_file(f.path("cluster.key")).unwrap();
        let err = f.load("c1", now()).unwrap_err();
        assert!(
            matches!(
                err,
                TrustLoadError::Unreadable {
                    flag: "--cluster-key",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn all_three_flags_or_none() {
        let f = files("c1", &root(), 1);
        let (r, k, c) = (
            f.path("root.pub"),
            f.path("cluster.key"),
            f.path("cluster.cert"),
        );
        let load = |r: Option<&Path>, k: Option<&Path>, c: Option<&Path>| {
            Identity::from_flags("c1", r, k, c, now())
        };
        assert!(load(None, None, None).unwrap().is_none());
        assert!(load(Some(&r), Some(&k), Some(&c)).unwrap().is_some());
        for (args, given, missing) in [
            ((Some(&*r), None, None), "--fleet-root", "--cluster-key"),
            (
                (None, Some(&*k), Some(&*c)),
                "--cluster-key",
                "--fleet-root",
            ),
            (
                (Some(&*r), Some(&*k), None),
                "--fleet-root",
                "--cluster-cert",
            ),
        ] {
            let err = load(args.0, args.1, args.2).unwrap_err();
            assert!(
                matches!(err, TrustLoadError::Incomplete { given: g, missing: m } if g == given && m == missing),
                "{err}"
            );
        }
    }
}
