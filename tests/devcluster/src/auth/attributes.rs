//! Request → authorization attributes (kube's RequestInfoFactory, for the routes this server has).

use super::rbac::Target;
use crate::api::ResPath;
use http::Method;

/// The verb and target of a request on a resource path (`rp`) or any other
/// path, as kube's RequestInfo computes them.
pub fn request_attributes(
    method: &Method,
    path: &str,
    rp: Option<&ResPath>,
    watch: bool,
) -> (String, Target) {
    let Some(rp) = rp else {
        let verb = match *method {
            Method::HEAD => "get".to_string(),
            ref m => m.as_str().to_ascii_lowercase(),
        };
        return (
            verb,
            Target::NonResource {
                path: path.to_string(),
            },
        );
    };
    let name = rp.name.clone().unwrap_or_default();
    let verb = match *method {
        Method::GET | Method::HEAD if watch => "watch",
        Method::GET | Method::HEAD if name.is_empty() => "list",
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if name.is_empty() => "deletecollection",
        Method::DELETE => "delete",
        ref m => {
            return (
                m.as_str().to_ascii_lowercase(),
                Target::NonResource {
                    path: path.to_string(),
                },
            )
        }
    };
    // kube: a namespace's own requests are "in" that namespace.
    let namespace = if rp.group.is_empty() && rp.plural == "namespaces" && rp.namespace.is_none() {
        name.clone()
    } else {
        rp.namespace.clone().unwrap_or_default()
    };
    (
        verb.to_string(),
        Target::Resource {
            group: rp.group.clone(),
            resource: rp.plural.clone(),
            subresource: rp.sub.clone().unwrap_or_default(),
            namespace,
            name,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp(
        group: &str,
        plural: &str,
        ns: Option<&str>,
        name: Option<&str>,
        sub: Option<&str>,
    ) -> ResPath {
        ResPath {
            group: group.into(),
            version: "v1".into(),
            plural: plural.into(),
            namespace: ns.map(String::from),
            name: name.map(String::from),
            sub: sub.map(String::from),
        }
    }

    #[test]
    fn verbs_follow_request_info() {
        let p = rp("", "pods", Some("a"), None, None);
        assert_eq!(
            request_attributes(&Method::GET, "", Some(&p), false).0,
            "list"
        );
        assert_eq!(
            request_attributes(&Method::GET, "", Some(&p), true).0,
            "watch"
        );
        assert_eq!(
            request_attributes(&Method::DELETE, "", Some(&p), false).0,
            "deletecollection"
        );
        let t = rp("", "serviceaccounts", Some("a"), Some("sa"), Some("token"));
        let (verb, target) = request_attributes(&Method::POST, "", Some(&t), false);
        assert_eq!(verb, "create");
        assert!(
            matches!(target, Target::Resource { ref subresource, ref namespace, .. } if subresource == "token" && namespace == "a")
        );
        let ns = rp("", "namespaces", None, Some("kube-system"), None);
        assert!(
            matches!(request_attributes(&Method::GET, "", Some(&ns), false).1, Target::Resource { ref namespace, .. } if namespace == "kube-system")
        );
        assert_eq!(
            request_attributes(&Method::GET, "/apis", None, false),
            (
                "get".to_string(),
                Target::NonResource {
                    path: "/apis".into()
                }
            )
        );
    }
}
