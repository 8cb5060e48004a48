//! TLS: a generated CA (persisted in --data-dir) and a server certificate for
//! loopback and the --tls-san names.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::path::Path;
use std::sync::Arc;

/// TLS setup failures.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Certificate generation failed.
    #[error("failed to generate a certificate")]
    Rcgen(#[from] rcgen::Error),
    /// rustls rejected the configuration.
    #[error("failed to build the TLS configuration")]
    Rustls(#[from] rustls::Error),
    /// Reading or writing the CA files failed.
    #[error("failed to read or write the CA in the data directory")]
    Io(#[from] std::io::Error),
}

/// What the server and the kubeconfig need.
pub struct TlsMaterial {
    /// CA certificate (PEM) for certificate-authority-data.
    pub ca_pem: String,
    /// Server configuration.
    pub config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsMaterial")
    }
}

fn ca_params() -> Result<CertificateParams, rcgen::Error> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name
        .push(DnType::CommonName, "fleetbus-devcluster-ca");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(p)
}

/// Loads the CA from `data_dir` (creating and saving it if missing) and issues a
/// fresh server certificate for localhost / 127.0.0.1 / ::1 and `extra_names`.
pub fn load_or_create(
    data_dir: Option<&Path>,
    extra_names: &[String],
) -> Result<TlsMaterial, TlsError> {
    let files = data_dir.map(|d| (d.join("ca.crt"), d.join("ca.key")));
    let existing = match &files {
        Some((crt, key)) if crt.exists() && key.exists() => {
            Some((std::fs::read_to_string(crt)?, std::fs::read_to_string(key)?))
        }
        _ => None,
    };
    let (ca_pem, ca_key) = match existing {
        Some((pem, key_pem)) => (pem, KeyPair::from_pem(&key_pem)?),
        None => {
            let key = KeyPair::generate()?;
            let cert = ca_params()?.self_signed(&key)?;
            let pem = cert.pem();
            if let Some((crt, keyf)) = &files {
                std::fs::write(crt, &pem)?;
                std::fs::write(keyf, key.serialize_pem())?;
            }
            (pem, key)
        }
    };
    let issuer = Issuer::new(ca_params()?, ca_key);
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    names.extend(extra_names.iter().cloned());
    let mut sp = CertificateParams::new(names)?;
    sp.distinguished_name
        .push(DnType::CommonName, "fleetbus-devcluster");
    let server_key = KeyPair::generate()?;
    let server_cert = sp.signed_by(&server_key, &issuer)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(server_cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
        )?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsMaterial {
        ca_pem,
        config: Arc::new(config),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_is_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let a = load_or_create(Some(dir.path()), &[]).unwrap();
        let b = load_or_create(Some(dir.path()), &[]).unwrap();
        assert_eq!(a.ca_pem, b.ca_pem);
        assert!(a.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    }
}
