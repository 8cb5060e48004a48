//! The SIG Multicluster CRDs `mesh up` installs into every devcluster: the
//! files published upstream, pinned unchanged beside the checkout
//! (`../shared/reference/crds`, what the tests install), so a local mesh
//! serves the standards fleetbus speaks as a platform team's clusters do.
//!
//! Each file is server-side applied (`fieldManager=fleetbus-mesh`, `force`), as
//! every agent applies the fleetbus CRDs at start (`--install-crds`); the CLI
//! has no Kubernetes client, and a devcluster of the mesh is plain HTTP on
//! loopback without credentials, so one PATCH per file does it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Beside the checkout, as `mesh up` finds `.tools` (run from the checkout,
/// or `target/<profile>/fleetbus` two levels below it).
pub const DEFAULT_DIR: &str = "../shared/reference/crds";

/// What stays inactive in a mesh without them.
pub const STANDARDS: &str = "ClusterProfile (cluster inventory, KEP-4322), ClusterProperty \
     (About API, KEP-2149), ServiceExport/ServiceImport (multi-cluster Services, KEP-1645) \
     and PlacementDecision (KEP-5313)";

/// The field manager of the apply.
const FIELD_MANAGER: &str = "fleetbus-mesh";

/// How long one apply may take.
const APPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// The directory to install from: `flag` (`--upstream-crds`, or
/// `$FLEETBUS_UPSTREAM_CRDS` through clap) if given, else the first of
/// [`DEFAULT_DIR`] from the working directory and from the checkout of the
/// running `fleetbus` (`exe_dir/../..`) that exists. `Err` names where it looked.
pub fn locate(flag: Option<&Path>, exe_dir: &Path) -> Result<PathBuf, Vec<PathBuf>> {
    let candidates = match flag {
        Some(dir) => vec![dir.to_path_buf()],
        None => vec![
            PathBuf::from(DEFAULT_DIR),
            exe_dir.join("../..").join(DEFAULT_DIR),
        ],
    };
    candidates
        .iter()
        .find(|d| d.is_dir())
        .cloned()
        .ok_or(candidates)
}

/// The one-line warning for a mesh without the upstream CRDs.
pub fn missing_warning(looked: &[PathBuf]) -> String {
    let looked: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
    format!(
        "warning: no upstream SIG Multicluster CRDs at {} (--upstream-crds DIR or \
         FLEETBUS_UPSTREAM_CRDS): {STANDARDS} stay inactive in this mesh",
        looked.join(" or ")
    )
}

/// Every `*.yaml` in `dir`, by name.
pub fn files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "yaml") {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// A CRD file read for applying: its name and its body as JSON.
#[derive(Debug, Clone)]
pub struct CrdFile {
    pub path: PathBuf,
    pub name: String,
    body: Bytes,
}

/// Reads `path`: one YAML document, a CustomResourceDefinition with a name.
pub fn read(path: &Path) -> Result<CrdFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    let doc: serde_json::Value =
        fleetbus_schemas::yaml::from_str(&text).map_err(|e| format!("not YAML: {e}"))?;
    let kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    if kind != "CustomResourceDefinition" {
        return Err(format!("not a CustomResourceDefinition (kind {kind:?})"));
    }
    let name = doc
        .pointer("/metadata/name")
        .and_then(|n| n.as_str())
        .filter(|n| !n.is_empty())
        .ok_or("the CustomResourceDefinition has no metadata.name")?
        .to_owned();
    let body = serde_json::to_vec(&doc).map_err(|e| e.to_string())?;
    Ok(CrdFile {
        path: path.to_path_buf(),
        name,
        body: Bytes::from(body),
    })
}

/// Server-side applies `crd` on the API server at `url` (`http://127.0.0.1:PORT`).
pub async fn apply(url: &str, crd: &CrdFile) -> Result<(), String> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let uri = format!(
        "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{}?fieldManager={FIELD_MANAGER}&force=true",
        url.trim_end_matches('/'),
        crd.name
    );
    let req = http::Request::patch(&uri)
        .header(http::header::CONTENT_TYPE, "application/apply-patch+yaml")
        .header(http::header::ACCEPT, "application/json")
        .body(Full::new(crd.body.clone()))
        .map_err(|e| format!("PATCH {uri}: {e}"))?;
    let answer = async {
        let resp = client
            .request(req)
            .await
            .map_err(|e| format!("PATCH {uri}: {e}"))?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("PATCH {uri}: reading the answer: {e}"))?
            .to_bytes();
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("PATCH {uri}: {status}: {}", status_message(&body)))
        }
    };
    tokio::time::timeout(APPLY_TIMEOUT, answer)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "PATCH {uri}: no answer in {}s",
                APPLY_TIMEOUT.as_secs()
            ))
        })
}

/// The `message` of a Status body, else the body as text.
fn status_message(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_else_beside_the_checkout_from_cwd_or_the_binary() {
        let tmp = tempfile::tempdir().unwrap();
        // <tmp>/repo/target/debug/fleetbus, and <tmp>/shared/reference/crds beside the repo.
        let exe_dir = tmp.path().join("repo/target/debug");
        std::fs::create_dir_all(&exe_dir).unwrap();
        let beside = exe_dir.join("../..").join(DEFAULT_DIR);
        // Nothing there yet: both places are named.
        let looked = locate(None, &exe_dir).unwrap_err();
        assert_eq!(looked, vec![PathBuf::from(DEFAULT_DIR), beside.clone()]);
        let warning = missing_warning(&looked);
        for part in [
            DEFAULT_DIR,
            "--upstream-crds",
            "ServiceExport",
            "ClusterProfile",
        ] {
            assert!(warning.contains(part), "{part}: {warning}");
        }
        std::fs::create_dir_all(tmp.path().join("shared/reference/crds")).unwrap();
        assert_eq!(locate(None, &exe_dir).unwrap(), beside);
        let mine = tmp.path().join("mine");
        assert_eq!(
            locate(Some(&mine), &exe_dir).unwrap_err(),
            vec![mine.clone()]
        );
        std::fs::create_dir(&mine).unwrap();
        assert_eq!(locate(Some(&mine), &exe_dir).unwrap(), mine);
    }

    #[test]
    fn files_are_the_yaml_ones_by_name_and_each_must_be_a_named_crd() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::write(d.join("b.yaml"), "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: bs.example.com\n").unwrap();
        std::fs::write(d.join("a.yaml"), "kind: ConfigMap\nmetadata:\n  name: x\n").unwrap();
        std::fs::write(d.join("README.md"), "not a CRD").unwrap();
        let found = files(d).unwrap();
        assert_eq!(found, vec![d.join("a.yaml"), d.join("b.yaml")]);
        let crd = read(&found[1]).unwrap();
        assert_eq!(crd.name, "bs.example.com");
        let body: serde_json::Value = serde_json::from_slice(&crd.body).unwrap();
        assert_eq!(body["kind"], "CustomResourceDefinition");
        let err = read(&found[0]).unwrap_err();
        assert!(err.contains("not a CustomResourceDefinition"), "{err}");
    }

    #[test]
    fn a_refusal_says_the_servers_message() {
        let status = br#"{"kind":"Status","message":"CustomResourceDefinition.apiextensions.k8s.io \"x\" is invalid: spec.group: Required value"}"#;
        assert_eq!(
            status_message(status),
            "CustomResourceDefinition.apiextensions.k8s.io \"x\" is invalid: spec.group: Required value"
        );
        assert_eq!(status_message(b"oops\n"), "oops");
    }
}
