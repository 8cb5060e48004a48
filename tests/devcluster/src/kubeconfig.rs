//! The kubeconfig written by --kubeconfig-out.

use base64::Engine;
use serde_json::json;
use std::path::Path;

/// Renders a kubeconfig whose cluster, user and context are all named `name`.
pub fn render(
    name: &str,
    server: &str,
    ca_pem: Option<&str>,
    token: Option<&str>,
) -> Result<String, serde_saphyr::SerializeError> {
    let mut cluster = json!({"server": server});
    if let Some(ca) = ca_pem {
        cluster["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    let user = match token {
        Some(t) => json!({"token": t}),
        None => json!({}),
    };
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        "current-context": name,
    });
    crate::yaml::to_string(&doc)
}

/// Writes the kubeconfig atomically (write to a temp file, then rename).
pub fn write(path: &Path, contents: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_after_cluster() {
        let y = render("c1", "https://127.0.0.1:1", Some("PEM"), Some("t")).unwrap();
        let v: serde_json::Value = crate::yaml::from_slice(y.as_bytes()).unwrap();
        assert_eq!(v["current-context"], "c1");
        assert_eq!(v["clusters"][0]["name"], "c1");
        assert_eq!(v["users"][0]["user"]["token"], "t");
        assert_eq!(v["contexts"][0]["context"]["cluster"], "c1");
        assert!(v["clusters"][0]["cluster"]["certificate-authority-data"].is_string());
    }

    /// kubectl reads the file as YAML 1.1, where an unquoted `yes` is a bool.
    #[test]
    fn names_yaml_11_reads_otherwise_are_quoted() {
        let y = render("yes", "https://127.0.0.1:1", None, Some("0x10")).unwrap();
        assert!(y.contains("current-context: \"yes\"\n"), "{y}");
        assert!(y.contains("token: \"0x10\"\n"), "{y}");
    }
}
