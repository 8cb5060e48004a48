//! Per-kind conversions of the top-level objects `kubectl create` sends.
//!
//! Each returns the object without `apiVersion`/`kind` (the caller adds them).
//! `status` is not converted: creates and updates of the main resource ignore
//! it, and kubectl only ever sends an empty one.

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::authentication::v1 as authn;
use k8s_pb::api::authorization::v1 as authz;
use k8s_pb::api::batch::v1 as batch;
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::networking::v1 as networking;
use k8s_pb::api::policy::v1 as policy;
use k8s_pb::api::rbac::v1 as rbac;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use serde_json::{json, Value};

use super::json::{label_selector, object_meta, Obj};
use super::pod::{local_object_reference, pod_spec, pod_template_spec};

/// Every top-level object has `metadata`, `{}` when the body had none.
fn with_meta(m: &Option<meta::ObjectMeta>) -> Obj {
    Obj::new().value(
        "metadata",
        m.as_ref().map_or_else(|| json!({}), object_meta),
    )
}

pub(crate) fn namespace(n: &core::Namespace) -> Value {
    with_meta(&n.metadata)
        .msg("spec", &n.spec, |s| {
            Obj::new().strs("finalizers", &s.finalizers).build()
        })
        .build()
}

pub(crate) fn config_map(c: &core::ConfigMap) -> Value {
    with_meta(&c.metadata)
        .ptr_bool("immutable", &c.immutable)
        .map("data", &c.data)
        .bytes_map("binaryData", &c.binary_data)
        .build()
}

pub(crate) fn secret(s: &core::Secret) -> Value {
    with_meta(&s.metadata)
        .ptr_bool("immutable", &s.immutable)
        .bytes_map("data", &s.data)
        .map("stringData", &s.string_data)
        .str("type", &s.r#type)
        .build()
}

pub(crate) fn service_account(s: &core::ServiceAccount) -> Value {
    with_meta(&s.metadata)
        .list("secrets", &s.secrets, object_reference)
        .list(
            "imagePullSecrets",
            &s.image_pull_secrets,
            local_object_reference,
        )
        .ptr_bool(
            "automountServiceAccountToken",
            &s.automount_service_account_token,
        )
        .build()
}

fn object_reference(r: &core::ObjectReference) -> Value {
    Obj::new()
        .str("kind", &r.kind)
        .str("namespace", &r.namespace)
        .str("name", &r.name)
        .str("uid", &r.uid)
        .str("apiVersion", &r.api_version)
        .str("resourceVersion", &r.resource_version)
        .str("fieldPath", &r.field_path)
        .build()
}

pub(crate) fn pod(p: &core::Pod) -> Value {
    with_meta(&p.metadata)
        .msg("spec", &p.spec, pod_spec)
        .build()
}

pub(crate) fn service(s: &core::Service) -> Value {
    with_meta(&s.metadata)
        .msg("spec", &s.spec, service_spec)
        .build()
}

fn service_spec(s: &core::ServiceSpec) -> Value {
    Obj::new()
        .list("ports", &s.ports, |p| {
            Obj::new()
                .str("name", &p.name)
                .str("protocol", &p.protocol)
                .ptr_str("appProtocol", &p.app_protocol)
                .ptr_int("port", &p.port)
                .int_or_str("targetPort", &p.target_port)
                .int("nodePort", &p.node_port)
                .build()
        })
        .map("selector", &s.selector)
        .str("clusterIP", &s.cluster_ip)
        .strs("clusterIPs", &s.cluster_ips)
        .str("type", &s.r#type)
        .strs("externalIPs", &s.external_ips)
        .str("sessionAffinity", &s.session_affinity)
        .str("loadBalancerIP", &s.load_balancer_ip)
        .strs("loadBalancerSourceRanges", &s.load_balancer_source_ranges)
        .str("externalName", &s.external_name)
        .str("externalTrafficPolicy", &s.external_traffic_policy)
        .int("healthCheckNodePort", &s.health_check_node_port)
        .flag("publishNotReadyAddresses", &s.publish_not_ready_addresses)
        .msg("sessionAffinityConfig", &s.session_affinity_config, |c| {
            Obj::new()
                .msg("clientIP", &c.client_ip, |ip| {
                    Obj::new()
                        .ptr_int("timeoutSeconds", &ip.timeout_seconds)
                        .build()
                })
                .build()
        })
        .strs("ipFamilies", &s.ip_families)
        .ptr_str("ipFamilyPolicy", &s.ip_family_policy)
        .ptr_bool(
            "allocateLoadBalancerNodePorts",
            &s.allocate_load_balancer_node_ports,
        )
        .ptr_str("loadBalancerClass", &s.load_balancer_class)
        .ptr_str("internalTrafficPolicy", &s.internal_traffic_policy)
        .ptr_str("trafficDistribution", &s.traffic_distribution)
        .build()
}

pub(crate) fn token_request(t: &authn::TokenRequest) -> Value {
    with_meta(&t.metadata)
        .msg("spec", &t.spec, |s| {
            Obj::new()
                .req_strs("audiences", &s.audiences)
                .ptr_int("expirationSeconds", &s.expiration_seconds)
                .msg("boundObjectRef", &s.bound_object_ref, |r| {
                    Obj::new()
                        .str("kind", &r.kind)
                        .str("apiVersion", &r.api_version)
                        .str("name", &r.name)
                        .str("uid", &r.u_id)
                        .build()
                })
                .build()
        })
        .build()
}

pub(crate) fn deployment(d: &apps::Deployment) -> Value {
    with_meta(&d.metadata)
        .msg("spec", &d.spec, |s| {
            Obj::new()
                .ptr_int("replicas", &s.replicas)
                .msg("selector", &s.selector, label_selector)
                .msg("template", &s.template, pod_template_spec)
                .msg("strategy", &s.strategy, |st| {
                    Obj::new()
                        .str("type", &st.r#type)
                        .msg("rollingUpdate", &st.rolling_update, |r| {
                            Obj::new()
                                .int_or_str("maxUnavailable", &r.max_unavailable)
                                .int_or_str("maxSurge", &r.max_surge)
                                .build()
                        })
                        .build()
                })
                .int("minReadySeconds", &s.min_ready_seconds)
                .ptr_int("revisionHistoryLimit", &s.revision_history_limit)
                .flag("paused", &s.paused)
                .ptr_int("progressDeadlineSeconds", &s.progress_deadline_seconds)
                .build()
        })
        .build()
}

pub(crate) fn job(j: &batch::Job) -> Value {
    with_meta(&j.metadata)
        .msg("spec", &j.spec, job_spec)
        .build()
}

fn job_spec(s: &batch::JobSpec) -> Value {
    Obj::new()
        .ptr_int("parallelism", &s.parallelism)
        .ptr_int("completions", &s.completions)
        .ptr_int("activeDeadlineSeconds", &s.active_deadline_seconds)
        .msg("podFailurePolicy", &s.pod_failure_policy, |p| {
            Obj::new()
                .req_list("rules", &p.rules, |r| {
                    Obj::new()
                        .req_str("action", &r.action)
                        .msg("onExitCodes", &r.on_exit_codes, |e| {
                            Obj::new()
                                .ptr_str("containerName", &e.container_name)
                                .req_str("operator", &e.operator)
                                .req_ints("values", &e.values)
                                .build()
                        })
                        .list("onPodConditions", &r.on_pod_conditions, |c| {
                            Obj::new()
                                .req_str("type", &c.r#type)
                                .req_str("status", &c.status)
                                .build()
                        })
                        .build()
                })
                .build()
        })
        .msg("successPolicy", &s.success_policy, |p| {
            Obj::new()
                .req_list("rules", &p.rules, |r| {
                    Obj::new()
                        .ptr_str("succeededIndexes", &r.succeeded_indexes)
                        .ptr_int("succeededCount", &r.succeeded_count)
                        .build()
                })
                .build()
        })
        .ptr_int("backoffLimit", &s.backoff_limit)
        .ptr_int("backoffLimitPerIndex", &s.backoff_limit_per_index)
        .ptr_int("maxFailedIndexes", &s.max_failed_indexes)
        .msg("selector", &s.selector, label_selector)
        .ptr_bool("manualSelector", &s.manual_selector)
        .msg("template", &s.template, pod_template_spec)
        .ptr_int("ttlSecondsAfterFinished", &s.ttl_seconds_after_finished)
        .ptr_str("completionMode", &s.completion_mode)
        .ptr_bool("suspend", &s.suspend)
        .ptr_str("podReplacementPolicy", &s.pod_replacement_policy)
        .ptr_str("managedBy", &s.managed_by)
        .build()
}

pub(crate) fn cron_job(c: &batch::CronJob) -> Value {
    with_meta(&c.metadata)
        .msg("spec", &c.spec, |s| {
            Obj::new()
                .req_str("schedule", &s.schedule)
                .ptr_str("timeZone", &s.time_zone)
                .ptr_int("startingDeadlineSeconds", &s.starting_deadline_seconds)
                .str("concurrencyPolicy", &s.concurrency_policy)
                .ptr_bool("suspend", &s.suspend)
                .msg("jobTemplate", &s.job_template, |t| {
                    Obj::new()
                        .msg("metadata", &t.metadata, object_meta)
                        .msg("spec", &t.spec, job_spec)
                        .build()
                })
                .ptr_int(
                    "successfulJobsHistoryLimit",
                    &s.successful_jobs_history_limit,
                )
                .ptr_int("failedJobsHistoryLimit", &s.failed_jobs_history_limit)
                .build()
        })
        .build()
}

fn policy_rule(r: &rbac::PolicyRule) -> Value {
    Obj::new()
        .req_strs("verbs", &r.verbs)
        .strs("apiGroups", &r.api_groups)
        .strs("resources", &r.resources)
        .strs("resourceNames", &r.resource_names)
        .strs("nonResourceURLs", &r.non_resource_ur_ls)
        .build()
}

fn subject(s: &rbac::Subject) -> Value {
    Obj::new()
        .req_str("kind", &s.kind)
        .str("apiGroup", &s.api_group)
        .req_str("name", &s.name)
        .str("namespace", &s.namespace)
        .build()
}

fn role_ref(r: &rbac::RoleRef) -> Value {
    Obj::new()
        .req_str("apiGroup", &r.api_group)
        .req_str("kind", &r.kind)
        .req_str("name", &r.name)
        .build()
}

pub(crate) fn role(r: &rbac::Role) -> Value {
    with_meta(&r.metadata)
        .req_list("rules", &r.rules, policy_rule)
        .build()
}

pub(crate) fn cluster_role(r: &rbac::ClusterRole) -> Value {
    with_meta(&r.metadata)
        .req_list("rules", &r.rules, policy_rule)
        .msg("aggregationRule", &r.aggregation_rule, |a| {
            Obj::new()
                .list(
                    "clusterRoleSelectors",
                    &a.cluster_role_selectors,
                    label_selector,
                )
                .build()
        })
        .build()
}

pub(crate) fn role_binding(b: &rbac::RoleBinding) -> Value {
    with_meta(&b.metadata)
        .list("subjects", &b.subjects, subject)
        .msg("roleRef", &b.role_ref, role_ref)
        .build()
}

pub(crate) fn cluster_role_binding(b: &rbac::ClusterRoleBinding) -> Value {
    with_meta(&b.metadata)
        .list("subjects", &b.subjects, subject)
        .msg("roleRef", &b.role_ref, role_ref)
        .build()
}

pub(crate) fn pod_disruption_budget(p: &policy::PodDisruptionBudget) -> Value {
    with_meta(&p.metadata)
        .msg("spec", &p.spec, |s| {
            Obj::new()
                .int_or_str("minAvailable", &s.min_available)
                .msg("selector", &s.selector, label_selector)
                .int_or_str("maxUnavailable", &s.max_unavailable)
                .ptr_str(
                    "unhealthyPodEvictionPolicy",
                    &s.unhealthy_pod_eviction_policy,
                )
                .build()
        })
        .build()
}

pub(crate) fn ingress(i: &networking::Ingress) -> Value {
    with_meta(&i.metadata)
        .msg("spec", &i.spec, |s| {
            Obj::new()
                .ptr_str("ingressClassName", &s.ingress_class_name)
                .msg("defaultBackend", &s.default_backend, ingress_backend)
                .list("tls", &s.tls, |t| {
                    Obj::new()
                        .strs("hosts", &t.hosts)
                        .str("secretName", &t.secret_name)
                        .build()
                })
                .list("rules", &s.rules, |r| {
                    Obj::new()
                        .str("host", &r.host)
                        .inline(&r.ingress_rule_value, |v| {
                            Obj::new()
                                .msg("http", &v.http, |h| {
                                    Obj::new()
                                        .req_list("paths", &h.paths, |p| {
                                            Obj::new()
                                                .str("path", &p.path)
                                                .ptr_str("pathType", &p.path_type)
                                                .msg("backend", &p.backend, ingress_backend)
                                                .build()
                                        })
                                        .build()
                                })
                                .build()
                        })
                        .build()
                })
                .build()
        })
        .build()
}

fn ingress_backend(b: &networking::IngressBackend) -> Value {
    Obj::new()
        .msg("service", &b.service, |s| {
            Obj::new()
                .req_str("name", &s.name)
                .msg("port", &s.port, |p| {
                    Obj::new()
                        .str("name", &p.name)
                        .int("number", &p.number)
                        .build()
                })
                .build()
        })
        .msg("resource", &b.resource, |r| {
            Obj::new()
                .ptr_str("apiGroup", &r.api_group)
                .req_str("kind", &r.kind)
                .req_str("name", &r.name)
                .build()
        })
        .build()
}

pub(crate) fn self_subject_access_review(r: &authz::SelfSubjectAccessReview) -> Value {
    with_meta(&r.metadata)
        .msg("spec", &r.spec, |s| {
            Obj::new()
                .msg(
                    "resourceAttributes",
                    &s.resource_attributes,
                    resource_attributes,
                )
                .msg("nonResourceAttributes", &s.non_resource_attributes, |n| {
                    Obj::new().str("path", &n.path).str("verb", &n.verb).build()
                })
                .build()
        })
        .build()
}

fn resource_attributes(a: &authz::ResourceAttributes) -> Value {
    Obj::new()
        .str("namespace", &a.namespace)
        .str("verb", &a.verb)
        .str("group", &a.group)
        .str("version", &a.version)
        .str("resource", &a.resource)
        .str("subresource", &a.subresource)
        .str("name", &a.name)
        .msg("fieldSelector", &a.field_selector, |f| {
            Obj::new()
                .str("rawSelector", &f.raw_selector)
                .list("requirements", &f.requirements, |r| {
                    selector_requirement(&r.key, &r.operator, &r.values)
                })
                .build()
        })
        .msg("labelSelector", &a.label_selector, |l| {
            Obj::new()
                .str("rawSelector", &l.raw_selector)
                .list("requirements", &l.requirements, |r| {
                    selector_requirement(&r.key, &r.operator, &r.values)
                })
                .build()
        })
        .build()
}

/// A field or label selector requirement: `key` and `operator` without
/// `omitempty`, `values` with it.
fn selector_requirement(
    key: &Option<String>,
    operator: &Option<String>,
    values: &[String],
) -> Value {
    Obj::new()
        .req_str("key", key)
        .req_str("operator", operator)
        .strs("values", values)
        .build()
}

pub(crate) fn self_subject_rules_review(r: &authz::SelfSubjectRulesReview) -> Value {
    with_meta(&r.metadata)
        .msg("spec", &r.spec, |s| {
            Obj::new().str("namespace", &s.namespace).build()
        })
        .build()
}
