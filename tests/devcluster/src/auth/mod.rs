//! Who is calling (bearer tokens: the admin `--token`, signed ServiceAccount
//! JWTs) and whether they may (`--authorization rbac`).
//!
//! Start at [`Auth::authenticate`] and [`Auth::authorize`]; tokens are made by
//! [`Auth::mint`] (the TokenRequest subresource).

mod attributes;
mod jwt;
pub mod rbac;

pub use attributes::request_attributes;
pub use jwt::{Claims, JwtError, SigningKey, ISSUER};

use crate::meta::meta_str;
use crate::status::ApiError;
use crate::store::{Inner, ObjKey};
use rbac::{Attributes, Decision, Target};
use serde_json::json;
use std::path::Path;

/// How requests are authorized (`--authorization`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Mode {
    /// Every authenticated request is allowed (the default: existing meshes).
    #[default]
    AlwaysAllow,
    /// ServiceAccounts are held to the Roles, ClusterRoles and bindings stored here.
    Rbac,
}

/// An authenticated user, as kube's user.Info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// `system:serviceaccount:<ns>:<name>`, or `admin`.
    pub username: String,
    /// The ServiceAccount's uid ("" for admin).
    pub uid: String,
    /// Groups, `system:authenticated` included.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// The cluster administrator (the `--token` holder, or any caller when no
    /// `--token` is set): member of system:masters, never subject to RBAC.
    pub fn admin() -> Self {
        UserInfo {
            username: "admin".into(),
            uid: String::new(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        }
    }

    /// A ServiceAccount, with the groups kube-apiserver gives it.
    pub fn service_account(namespace: &str, name: &str, uid: &str) -> Self {
        UserInfo {
            username: format!("system:serviceaccount:{namespace}:{name}"),
            uid: uid.into(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == "system:masters")
    }
}

/// Authentication and authorization state of the server.
#[derive(Debug)]
pub struct Auth {
    /// The admin bearer token (`--token`), if any.
    pub admin_token: Option<String>,
    /// How requests are authorized.
    pub mode: Mode,
    key: SigningKey,
}

impl Auth {
    /// Loads (or creates, in `data_dir`) the token signing key.
    pub fn new(
        admin_token: Option<String>,
        mode: Mode,
        data_dir: Option<&Path>,
    ) -> Result<Self, JwtError> {
        Ok(Auth {
            admin_token,
            mode,
            key: SigningKey::load_or_create(data_dir)?,
        })
    }

    /// The user `token` proves, or None if this server does not accept it:
    /// the admin `--token`; a JWT of ours, unexpired, for a ServiceAccount
    /// that still exists with the same uid (as kube-apiserver checks); or an
    /// opaque token minted by an older version (the admin). What a
    /// TokenReview answers, and what requests are authenticated with.
    pub fn token_user(&self, inner: &Inner, token: &str, now: i64) -> Option<UserInfo> {
        if self.admin_token.as_deref() == Some(token) {
            return Some(UserInfo::admin());
        }
        if !jwt::looks_like_jwt(token) {
            return inner.has_token(token).then(UserInfo::admin);
        }
        let claims = match self.key.verify(token, now) {
            Ok(c) => c,
            Err(e) => {
                tracing::info!(error = %e, "bearer token refused");
                return None;
            }
        };
        let sa = &claims.kubernetes_io.serviceaccount;
        let ns = &claims.kubernetes_io.namespace;
        let key = ObjKey::new("", "serviceaccounts", ns, &sa.name);
        let live_uid = inner.objects.get(&key).and_then(|o| meta_str(o, "uid"));
        if live_uid != Some(sa.uid.as_str()) {
            tracing::info!(sa = %claims.sub, "token of a deleted or recreated ServiceAccount refused");
            return None;
        }
        Some(UserInfo::service_account(ns, &sa.name, &sa.uid))
    }

    /// Who presents `bearer` (None: no Authorization header): see
    /// [`Auth::token_user`]. Without `--token`, a caller with no token or an
    /// opaque one is the admin (as before RBAC existed); a JWT must verify.
    pub fn authenticate(
        &self,
        inner: &Inner,
        bearer: Option<&str>,
        now: i64,
    ) -> Result<UserInfo, ApiError> {
        let open = self.admin_token.is_none();
        match bearer {
            Some(t) => match self.token_user(inner, t, now) {
                Some(user) => Ok(user),
                None if open && !jwt::looks_like_jwt(t) => Ok(UserInfo::admin()),
                None => Err(ApiError::unauthorized()),
            },
            None if open => Ok(UserInfo::admin()),
            None => Err(ApiError::unauthorized()),
        }
    }

    /// Allowed, or the 403 Forbidden Status kube-apiserver answers with.
    pub fn authorize(&self, inner: &Inner, attrs: &Attributes<'_>) -> Result<(), ApiError> {
        match self.decide(inner, attrs) {
            Decision::Allow(_) => Ok(()),
            Decision::Deny => Err(forbidden(attrs)),
        }
    }

    /// The decision for `attrs` (also what SelfSubjectAccessReview answers).
    pub fn decide(&self, inner: &Inner, attrs: &Attributes<'_>) -> Decision {
        if self.mode == Mode::AlwaysAllow || attrs.user.is_master() {
            return Decision::Allow(String::new());
        }
        rbac::authorize(inner, attrs)
    }

    /// The caller's rules in `namespace` for a SelfSubjectRulesReview; None when nothing is enforced for
    /// them (no RBAC, or system:masters): everything is allowed.
    pub fn rules(&self, inner: &Inner, user: &UserInfo, namespace: &str) -> Option<rbac::RuleSet> {
        if self.mode == Mode::AlwaysAllow || user.is_master() {
            return None;
        }
        Some(rbac::rules_for(inner, user, namespace))
    }

    /// A signed token for ServiceAccount `namespace/name` (uid `uid`).
    pub fn mint(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        audiences: Vec<String>,
        now: i64,
        lifetime: i64,
    ) -> Result<String, ApiError> {
        self.key
            .sign(&Claims::new(namespace, name, uid, audiences, now, lifetime))
            .map_err(|e| ApiError::internal(format!("failed to sign token: {e}")))
    }
}

/// kube-apiserver's Forbidden message and details.
fn forbidden(attrs: &Attributes<'_>) -> ApiError {
    let user = &attrs.user.username;
    let verb = &attrs.verb;
    match &attrs.target {
        Target::Resource {
            group,
            resource,
            subresource,
            namespace,
            name,
        } => {
            let full = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            let qualified = if group.is_empty() {
                resource.clone()
            } else {
                format!("{resource}.{group}")
            };
            let scope = if namespace.is_empty() {
                "at the cluster scope".to_string()
            } else {
                format!("in the namespace \"{namespace}\"")
            };
            let subject = if name.is_empty() {
                qualified
            } else {
                format!("{qualified} \"{name}\"")
            };
            let mut e = ApiError::other(
                403,
                "Forbidden",
                format!("{subject} is forbidden: User \"{user}\" cannot {verb} resource \"{full}\" in API group \"{group}\" {scope}"),
            );
            let mut details = json!({"group": group, "kind": resource});
            if !name.is_empty() {
                details["name"] = json!(name);
            }
            e.details = Some(details);
            e
        }
        Target::NonResource { path } => ApiError::other(
            403,
            "Forbidden",
            format!("forbidden: User \"{user}\" cannot {verb} path \"{path}\""),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn with_sa(uid: &str) -> Store {
        let store = Store::open(None, 10).unwrap();
        store
            .write(false, |tx| {
                let key = ObjKey::new("", "serviceaccounts", "fb", "agent");
                tx.put(
                    &key,
                    json!({"metadata": {"name": "agent", "namespace": "fb", "uid": uid}}),
                );
                Ok(())
            })
            .unwrap();
        store
    }

    #[test]
    fn tokens_prove_who_minted_them_for() {
        let store = with_sa("u1");
        let auth = Auth::new(Some("admin".into()), Mode::Rbac, None).unwrap();
        let jwt = auth
            .mint("fb", "agent", "u1", vec![ISSUER.into()], 1000, 600)
            .unwrap();
        let user = store.read(|i| auth.token_user(i, &jwt, 1001)).unwrap();
        assert_eq!(user.username, "system:serviceaccount:fb:agent");
        assert!(user
            .groups
            .contains(&"system:serviceaccounts:fb".to_string()));
        assert_eq!(
            store.read(|i| auth.token_user(i, "admin", 0)),
            Some(UserInfo::admin())
        );
        assert_eq!(
            store.read(|i| auth.token_user(i, &jwt, 1600)),
            None,
            "expired"
        );
        assert_eq!(store.read(|i| auth.token_user(i, "opaque", 0)), None);
        // The ServiceAccount recreated (new uid): its old tokens are void.
        let recreated = with_sa("u2");
        assert_eq!(recreated.read(|i| auth.token_user(i, &jwt, 1001)), None);
        // A closed server refuses what it does not know, and no token at all.
        let err = store
            .read(|i| auth.authenticate(i, Some("opaque"), 0))
            .unwrap_err();
        assert_eq!(err.code, 401);
        assert_eq!(
            store
                .read(|i| auth.authenticate(i, None, 0))
                .unwrap_err()
                .code,
            401
        );
    }

    #[test]
    fn an_open_server_still_refuses_a_bad_jwt() {
        let store = with_sa("u1");
        let open = Auth::new(None, Mode::AlwaysAllow, None).unwrap();
        assert_eq!(
            store.read(|i| open.authenticate(i, None, 0)).unwrap(),
            UserInfo::admin()
        );
        assert_eq!(
            store
                .read(|i| open.authenticate(i, Some("opaque"), 0))
                .unwrap(),
            UserInfo::admin()
        );
        let foreign = Auth::new(None, Mode::AlwaysAllow, None)
            .unwrap()
            .mint("fb", "agent", "u1", vec![], 1000, 600)
            .unwrap();
        assert_eq!(
            store
                .read(|i| open.authenticate(i, Some(&foreign), 1001))
                .unwrap_err()
                .code,
            401
        );
    }
}
