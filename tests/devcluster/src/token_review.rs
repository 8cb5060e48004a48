//! authentication.k8s.io/v1 TokenReview: create-only, never stored. The token is
//! looked up the way requests are authenticated (`api::known_token`: the
//! `--token` and minted ServiceAccount tokens); the user is the admin for the
//! `--token`, the ServiceAccount for a minted token.

use crate::decode::check_type;
use crate::resources::ResourceDef;
use base64::Engine;
use serde_json::{json, Map, Value};

/// The username kube reports for the static `--token` (kind's admin user).
pub const ADMIN_USER: &str = "kubernetes-admin";

/// Who a known token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOwner {
    /// The `--token` given on the command line.
    Admin,
    /// A token minted through `serviceaccounts/{name}/token`.
    ServiceAccount {
        /// The ServiceAccount's namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its uid, when the token recorded one.
        uid: String,
    },
    /// A minted token from before tokens carried their ServiceAccount.
    Unknown,
}

/// Prefix of every minted token.
const MINTED_PREFIX: &str = "fbdc.";

/// A new minted token for a ServiceAccount: `fbdc.<base64url(ns/name/uid)>.<random>`.
/// The random part makes it unguessable; the rest lets a TokenReview name the owner.
pub fn mint(namespace: &str, name: &str, uid: &str, random: &str) -> String {
    let owner = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(format!("{namespace}/{name}/{uid}"));
    format!("{MINTED_PREFIX}{owner}.{random}")
}

/// The owner of a minted token (already known to be valid).
pub fn minted_owner(token: &str) -> TokenOwner {
    let parsed = token
        .strip_prefix(MINTED_PREFIX)
        .and_then(|rest| rest.split_once('.'))
        .and_then(|(owner, _)| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(owner)
                .ok()
        })
        .and_then(|b| String::from_utf8(b).ok());
    match parsed
        .as_deref()
        .map(|s| s.splitn(3, '/').collect::<Vec<_>>())
    {
        Some(p) if p.len() == 3 => TokenOwner::ServiceAccount {
            namespace: p[0].to_string(),
            name: p[1].to_string(),
            uid: p[2].to_string(),
        },
        _ => TokenOwner::Unknown,
    }
}

/// The review with `status` filled in (POST answers it with 201). `owner` is the
/// token's owner if the token is known.
pub fn answer(
    def: &ResourceDef,
    mut obj: Value,
    owner: Option<TokenOwner>,
) -> Result<Value, crate::status::ApiError> {
    check_type(def, &mut obj)?;
    let audiences = obj
        .get("spec")
        .and_then(|s| s.get("audiences"))
        .filter(|a| a.as_array().is_some_and(|a| !a.is_empty()))
        .cloned()
        .unwrap_or_else(|| json!(["https://kubernetes.default.svc.cluster.local"]));
    let status = match owner {
        None => json!({"user": {}, "error": "invalid bearer token"}),
        Some(owner) => {
            let user = match owner {
                TokenOwner::Admin => json!({
                    "username": ADMIN_USER,
                    "groups": ["system:masters", "system:authenticated"],
                }),
                TokenOwner::ServiceAccount {
                    namespace,
                    name,
                    uid,
                } => json!({
                    "username": format!("system:serviceaccount:{namespace}:{name}"),
                    "uid": uid,
                    "groups": ["system:serviceaccounts",
                        format!("system:serviceaccounts:{namespace}"),
                        "system:authenticated"],
                }),
                TokenOwner::Unknown => json!({
                    "username": "system:serviceaccount:unknown",
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                }),
            };
            json!({"authenticated": true, "user": user, "audiences": audiences})
        }
    };
    let mut out = Map::new();
    for k in ["apiVersion", "kind", "metadata", "spec"] {
        out.insert(k.into(), obj.get(k).cloned().unwrap_or_else(|| json!({})));
    }
    out.insert("status".into(), status);
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_name_their_service_account() {
        let t = mint("default", "fakesa", "u-1", "abc");
        assert!(t.starts_with("fbdc."));
        assert_eq!(
            minted_owner(&t),
            TokenOwner::ServiceAccount {
                namespace: "default".into(),
                name: "fakesa".into(),
                uid: "u-1".into()
            }
        );
        assert_eq!(minted_owner("fbdc.legacyrandom"), TokenOwner::Unknown);
    }

    #[test]
    fn unknown_tokens_are_not_authenticated() {
        let def = crate::resources::builtins()
            .into_iter()
            .find(|d| d.kind == "TokenReview")
            .unwrap();
        let req = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": "x", "audiences": ["api"]}});
        let out = answer(&def, req.clone(), None).unwrap();
        assert_eq!(out["status"]["error"], "invalid bearer token");
        assert!(out["status"].get("authenticated").is_none());
        let out = answer(&def, req, Some(TokenOwner::Admin)).unwrap();
        assert_eq!(out["status"]["authenticated"], true);
        assert_eq!(out["status"]["audiences"], json!(["api"]));
        assert_eq!(out["status"]["user"]["username"], ADMIN_USER);
    }
}
