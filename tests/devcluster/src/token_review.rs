//! authentication.k8s.io/v1 TokenReview: create-only, never stored. The token is
//! looked up the way requests are authenticated ([`crate::auth::Auth::token_user`]:
//! the `--token`, and the JWTs minted through `serviceaccounts/{name}/token` while
//! their ServiceAccount exists), so a review and a request always agree.

use crate::auth::UserInfo;
use crate::decode::check_type;
use crate::resources::ResourceDef;
use serde_json::{json, Map, Value};

/// The review with `status` filled in (POST answers it with 201). `user` is who
/// the token proves, if this server accepts it.
pub fn answer(
    def: &ResourceDef,
    mut obj: Value,
    user: Option<UserInfo>,
) -> Result<Value, crate::status::ApiError> {
    check_type(def, &mut obj)?;
    let audiences = obj
        .get("spec")
        .and_then(|s| s.get("audiences"))
        .filter(|a| a.as_array().is_some_and(|a| !a.is_empty()))
        .cloned()
        .unwrap_or_else(|| json!(["https://kubernetes.default.svc.cluster.local"]));
    let status = match user {
        // kube-apiserver's answer for a token no authenticator accepts.
        None => json!({"user": {}, "error": "invalid bearer token"}),
        Some(user) => {
            let mut u = Map::new();
            u.insert("username".into(), json!(user.username));
            if !user.uid.is_empty() {
                u.insert("uid".into(), json!(user.uid));
            }
            u.insert("groups".into(), json!(user.groups));
            json!({"authenticated": true, "user": u, "audiences": audiences})
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

    fn def() -> ResourceDef {
        crate::resources::builtins()
            .into_iter()
            .find(|d| d.kind == "TokenReview")
            .unwrap()
    }

    fn request() -> Value {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": "x", "audiences": ["api"]}})
    }

    #[test]
    fn unknown_tokens_are_not_authenticated() {
        let out = answer(&def(), request(), None).unwrap();
        assert_eq!(out["status"]["error"], "invalid bearer token");
        assert!(out["status"].get("authenticated").is_none());
    }

    #[test]
    fn known_tokens_name_their_user_and_audiences() {
        let sa = UserInfo::service_account("default", "robot", "u-1");
        let out = answer(&def(), request(), Some(sa)).unwrap();
        assert_eq!(out["status"]["authenticated"], true);
        assert_eq!(out["status"]["audiences"], json!(["api"]));
        assert_eq!(
            out["status"]["user"]["username"],
            "system:serviceaccount:default:robot"
        );
        assert_eq!(out["status"]["user"]["uid"], "u-1");
        assert_eq!(
            out["status"]["user"]["groups"],
            json!([
                "system:serviceaccounts",
                "system:serviceaccounts:default",
                "system:authenticated"
            ])
        );
        let admin = answer(&def(), request(), Some(UserInfo::admin())).unwrap();
        assert!(admin["status"]["user"].get("uid").is_none());
    }
}
