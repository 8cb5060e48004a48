//! `PodTemplateSpec`, `PodSpec`, `Container` and what they contain (core/v1).
//!
//! Covers the fields workloads commonly set. Not converted (dropped): affinity,
//! ephemeralContainers, resourceClaims, schedulingGates, os, overhead,
//! restartPolicyRules, and volume sources other than those in [`volume`].

use k8s_pb::api::core::v1 as core;
use serde_json::Value;

use super::json::{label_selector, object_meta, Obj};

/// `PodTemplateSpec`.
pub(crate) fn pod_template_spec(t: &core::PodTemplateSpec) -> Value {
    Obj::new()
        .msg("metadata", &t.metadata, object_meta)
        .msg("spec", &t.spec, pod_spec)
        .build()
}

/// `PodSpec`.
pub(crate) fn pod_spec(s: &core::PodSpec) -> Value {
    Obj::new()
        .list("volumes", &s.volumes, volume)
        .list("initContainers", &s.init_containers, container)
        .req_list("containers", &s.containers, container)
        .str("restartPolicy", &s.restart_policy)
        .ptr_int(
            "terminationGracePeriodSeconds",
            &s.termination_grace_period_seconds,
        )
        .ptr_int("activeDeadlineSeconds", &s.active_deadline_seconds)
        .str("dnsPolicy", &s.dns_policy)
        .map("nodeSelector", &s.node_selector)
        .str("serviceAccountName", &s.service_account_name)
        .str("serviceAccount", &s.service_account)
        .ptr_bool(
            "automountServiceAccountToken",
            &s.automount_service_account_token,
        )
        .str("nodeName", &s.node_name)
        .flag("hostNetwork", &s.host_network)
        .flag("hostPID", &s.host_pid)
        .flag("hostIPC", &s.host_ipc)
        .ptr_bool("shareProcessNamespace", &s.share_process_namespace)
        .msg("securityContext", &s.security_context, pod_security_context)
        .list(
            "imagePullSecrets",
            &s.image_pull_secrets,
            local_object_reference,
        )
        .str("hostname", &s.hostname)
        .str("subdomain", &s.subdomain)
        .str("schedulerName", &s.scheduler_name)
        .list("tolerations", &s.tolerations, toleration)
        .list("hostAliases", &s.host_aliases, |h| {
            Obj::new()
                .req_str("ip", &h.ip)
                .strs("hostnames", &h.hostnames)
                .build()
        })
        .str("priorityClassName", &s.priority_class_name)
        .ptr_int("priority", &s.priority)
        .msg("dnsConfig", &s.dns_config, |d| {
            Obj::new()
                .strs("nameservers", &d.nameservers)
                .strs("searches", &d.searches)
                .list("options", &d.options, |o| {
                    Obj::new()
                        .str("name", &o.name)
                        .ptr_str("value", &o.value)
                        .build()
                })
                .build()
        })
        .list("readinessGates", &s.readiness_gates, |g| {
            Obj::new()
                .req_str("conditionType", &g.condition_type)
                .build()
        })
        .ptr_str("runtimeClassName", &s.runtime_class_name)
        .ptr_bool("enableServiceLinks", &s.enable_service_links)
        .ptr_str("preemptionPolicy", &s.preemption_policy)
        .list(
            "topologySpreadConstraints",
            &s.topology_spread_constraints,
            topology_spread_constraint,
        )
        .ptr_bool("setHostnameAsFQDN", &s.set_hostname_as_fqdn)
        .ptr_bool("hostUsers", &s.host_users)
        .msg("resources", &s.resources, resource_requirements)
        .build()
}

fn toleration(t: &core::Toleration) -> Value {
    Obj::new()
        .str("key", &t.key)
        .str("operator", &t.operator)
        .str("value", &t.value)
        .str("effect", &t.effect)
        .ptr_int("tolerationSeconds", &t.toleration_seconds)
        .build()
}

fn topology_spread_constraint(t: &core::TopologySpreadConstraint) -> Value {
    Obj::new()
        .ptr_int("maxSkew", &t.max_skew)
        .req_str("topologyKey", &t.topology_key)
        .req_str("whenUnsatisfiable", &t.when_unsatisfiable)
        .msg("labelSelector", &t.label_selector, label_selector)
        .ptr_int("minDomains", &t.min_domains)
        .ptr_str("nodeAffinityPolicy", &t.node_affinity_policy)
        .ptr_str("nodeTaintsPolicy", &t.node_taints_policy)
        .strs("matchLabelKeys", &t.match_label_keys)
        .build()
}

/// `LocalObjectReference` (`{name}`), also inlined into key selectors and sources.
pub(crate) fn local_object_reference(r: &core::LocalObjectReference) -> Value {
    Obj::new().str("name", &r.name).build()
}

/// `Container`.
pub(crate) fn container(c: &core::Container) -> Value {
    Obj::new()
        .req_str("name", &c.name)
        .str("image", &c.image)
        .strs("command", &c.command)
        .strs("args", &c.args)
        .str("workingDir", &c.working_dir)
        .list("ports", &c.ports, container_port)
        .list("envFrom", &c.env_from, env_from_source)
        .list("env", &c.env, env_var)
        .msg("resources", &c.resources, resource_requirements)
        .list("resizePolicy", &c.resize_policy, |p| {
            Obj::new()
                .req_str("resourceName", &p.resource_name)
                .req_str("restartPolicy", &p.restart_policy)
                .build()
        })
        .ptr_str("restartPolicy", &c.restart_policy)
        .list("volumeMounts", &c.volume_mounts, volume_mount)
        .list("volumeDevices", &c.volume_devices, |d| {
            Obj::new()
                .req_str("name", &d.name)
                .req_str("devicePath", &d.device_path)
                .build()
        })
        .msg("livenessProbe", &c.liveness_probe, probe)
        .msg("readinessProbe", &c.readiness_probe, probe)
        .msg("startupProbe", &c.startup_probe, probe)
        .msg("lifecycle", &c.lifecycle, lifecycle)
        .str("terminationMessagePath", &c.termination_message_path)
        .str("terminationMessagePolicy", &c.termination_message_policy)
        .str("imagePullPolicy", &c.image_pull_policy)
        .msg("securityContext", &c.security_context, security_context)
        .flag("stdin", &c.stdin)
        .flag("stdinOnce", &c.stdin_once)
        .flag("tty", &c.tty)
        .build()
}

fn container_port(p: &core::ContainerPort) -> Value {
    Obj::new()
        .str("name", &p.name)
        .int("hostPort", &p.host_port)
        .ptr_int("containerPort", &p.container_port)
        .str("protocol", &p.protocol)
        .str("hostIP", &p.host_ip)
        .build()
}

fn env_from_source(e: &core::EnvFromSource) -> Value {
    Obj::new()
        .str("prefix", &e.prefix)
        .msg("configMapRef", &e.config_map_ref, |r| {
            Obj::new()
                .inline(&r.local_object_reference, local_object_reference)
                .ptr_bool("optional", &r.optional)
                .build()
        })
        .msg("secretRef", &e.secret_ref, |r| {
            Obj::new()
                .inline(&r.local_object_reference, local_object_reference)
                .ptr_bool("optional", &r.optional)
                .build()
        })
        .build()
}

fn env_var(e: &core::EnvVar) -> Value {
    Obj::new()
        .req_str("name", &e.name)
        .str("value", &e.value)
        .msg("valueFrom", &e.value_from, env_var_source)
        .build()
}

fn env_var_source(s: &core::EnvVarSource) -> Value {
    Obj::new()
        .msg("fieldRef", &s.field_ref, object_field_selector)
        .msg(
            "resourceFieldRef",
            &s.resource_field_ref,
            resource_field_selector,
        )
        .msg("configMapKeyRef", &s.config_map_key_ref, |r| {
            Obj::new()
                .inline(&r.local_object_reference, local_object_reference)
                .req_str("key", &r.key)
                .ptr_bool("optional", &r.optional)
                .build()
        })
        .msg("secretKeyRef", &s.secret_key_ref, |r| {
            Obj::new()
                .inline(&r.local_object_reference, local_object_reference)
                .req_str("key", &r.key)
                .ptr_bool("optional", &r.optional)
                .build()
        })
        .msg("fileKeyRef", &s.file_key_ref, |r| {
            Obj::new()
                .req_str("volumeName", &r.volume_name)
                .req_str("path", &r.path)
                .req_str("key", &r.key)
                .ptr_bool("optional", &r.optional)
                .build()
        })
        .build()
}

fn object_field_selector(f: &core::ObjectFieldSelector) -> Value {
    Obj::new()
        .str("apiVersion", &f.api_version)
        .req_str("fieldPath", &f.field_path)
        .build()
}

fn resource_field_selector(f: &core::ResourceFieldSelector) -> Value {
    Obj::new()
        .str("containerName", &f.container_name)
        .req_str("resource", &f.resource)
        .quantity("divisor", &f.divisor)
        .build()
}

/// `ResourceRequirements`.
pub(crate) fn resource_requirements(r: &core::ResourceRequirements) -> Value {
    Obj::new()
        .quantities("limits", &r.limits)
        .quantities("requests", &r.requests)
        .list("claims", &r.claims, |c| {
            Obj::new()
                .req_str("name", &c.name)
                .str("request", &c.request)
                .build()
        })
        .build()
}

fn volume_mount(m: &core::VolumeMount) -> Value {
    Obj::new()
        .req_str("name", &m.name)
        .flag("readOnly", &m.read_only)
        .ptr_str("recursiveReadOnly", &m.recursive_read_only)
        .req_str("mountPath", &m.mount_path)
        .str("subPath", &m.sub_path)
        .ptr_str("mountPropagation", &m.mount_propagation)
        .str("subPathExpr", &m.sub_path_expr)
        .build()
}

fn probe(p: &core::Probe) -> Value {
    Obj::new()
        .inline(&p.handler, probe_handler)
        .int("initialDelaySeconds", &p.initial_delay_seconds)
        .int("timeoutSeconds", &p.timeout_seconds)
        .int("periodSeconds", &p.period_seconds)
        .int("successThreshold", &p.success_threshold)
        .int("failureThreshold", &p.failure_threshold)
        .ptr_int(
            "terminationGracePeriodSeconds",
            &p.termination_grace_period_seconds,
        )
        .build()
}

fn probe_handler(h: &core::ProbeHandler) -> Value {
    Obj::new()
        .msg("exec", &h.exec, exec_action)
        .msg("httpGet", &h.http_get, http_get_action)
        .msg("tcpSocket", &h.tcp_socket, tcp_socket_action)
        .msg("grpc", &h.grpc, |g| {
            Obj::new()
                .ptr_int("port", &g.port)
                .ptr_str("service", &g.service)
                .build()
        })
        .build()
}

fn exec_action(e: &core::ExecAction) -> Value {
    Obj::new().strs("command", &e.command).build()
}

fn http_get_action(h: &core::HttpGetAction) -> Value {
    Obj::new()
        .str("path", &h.path)
        .int_or_str("port", &h.port)
        .str("host", &h.host)
        .str("scheme", &h.scheme)
        .list("httpHeaders", &h.http_headers, |x| {
            Obj::new()
                .req_str("name", &x.name)
                .req_str("value", &x.value)
                .build()
        })
        .build()
}

fn tcp_socket_action(t: &core::TcpSocketAction) -> Value {
    Obj::new()
        .int_or_str("port", &t.port)
        .str("host", &t.host)
        .build()
}

fn lifecycle(l: &core::Lifecycle) -> Value {
    Obj::new()
        .msg("postStart", &l.post_start, lifecycle_handler)
        .msg("preStop", &l.pre_stop, lifecycle_handler)
        .ptr_str("stopSignal", &l.stop_signal)
        .build()
}

fn lifecycle_handler(h: &core::LifecycleHandler) -> Value {
    Obj::new()
        .msg("exec", &h.exec, exec_action)
        .msg("httpGet", &h.http_get, http_get_action)
        .msg("tcpSocket", &h.tcp_socket, tcp_socket_action)
        .msg("sleep", &h.sleep, |s| {
            Obj::new().ptr_int("seconds", &s.seconds).build()
        })
        .build()
}

fn security_context(s: &core::SecurityContext) -> Value {
    Obj::new()
        .msg("capabilities", &s.capabilities, |c| {
            Obj::new().strs("add", &c.add).strs("drop", &c.drop).build()
        })
        .ptr_bool("privileged", &s.privileged)
        .msg("seLinuxOptions", &s.se_linux_options, se_linux_options)
        .msg("windowsOptions", &s.windows_options, windows_options)
        .ptr_int("runAsUser", &s.run_as_user)
        .ptr_int("runAsGroup", &s.run_as_group)
        .ptr_bool("runAsNonRoot", &s.run_as_non_root)
        .ptr_bool("readOnlyRootFilesystem", &s.read_only_root_filesystem)
        .ptr_bool("allowPrivilegeEscalation", &s.allow_privilege_escalation)
        .ptr_str("procMount", &s.proc_mount)
        .msg("seccompProfile", &s.seccomp_profile, |p| {
            Obj::new()
                .req_str("type", &p.r#type)
                .ptr_str("localhostProfile", &p.localhost_profile)
                .build()
        })
        .msg("appArmorProfile", &s.app_armor_profile, |p| {
            Obj::new()
                .req_str("type", &p.r#type)
                .ptr_str("localhostProfile", &p.localhost_profile)
                .build()
        })
        .build()
}

fn pod_security_context(s: &core::PodSecurityContext) -> Value {
    Obj::new()
        .msg("seLinuxOptions", &s.se_linux_options, se_linux_options)
        .msg("windowsOptions", &s.windows_options, windows_options)
        .ptr_int("runAsUser", &s.run_as_user)
        .ptr_int("runAsGroup", &s.run_as_group)
        .ptr_bool("runAsNonRoot", &s.run_as_non_root)
        .ints("supplementalGroups", &s.supplemental_groups)
        .ptr_str("supplementalGroupsPolicy", &s.supplemental_groups_policy)
        .ptr_int("fsGroup", &s.fs_group)
        .list("sysctls", &s.sysctls, |x| {
            Obj::new()
                .req_str("name", &x.name)
                .req_str("value", &x.value)
                .build()
        })
        .ptr_str("fsGroupChangePolicy", &s.fs_group_change_policy)
        .msg("seccompProfile", &s.seccomp_profile, |p| {
            Obj::new()
                .req_str("type", &p.r#type)
                .ptr_str("localhostProfile", &p.localhost_profile)
                .build()
        })
        .msg("appArmorProfile", &s.app_armor_profile, |p| {
            Obj::new()
                .req_str("type", &p.r#type)
                .ptr_str("localhostProfile", &p.localhost_profile)
                .build()
        })
        .ptr_str("seLinuxChangePolicy", &s.se_linux_change_policy)
        .build()
}

fn se_linux_options(o: &core::SeLinuxOptions) -> Value {
    Obj::new()
        .str("user", &o.user)
        .str("role", &o.role)
        .str("type", &o.r#type)
        .str("level", &o.level)
        .build()
}

fn windows_options(o: &core::WindowsSecurityContextOptions) -> Value {
    Obj::new()
        .ptr_str("gmsaCredentialSpecName", &o.gmsa_credential_spec_name)
        .ptr_str("gmsaCredentialSpec", &o.gmsa_credential_spec)
        .ptr_str("runAsUserName", &o.run_as_user_name)
        .ptr_bool("hostProcess", &o.host_process)
        .build()
}

/// `Volume` with its inlined `VolumeSource` (the common sources only).
fn volume(v: &core::Volume) -> Value {
    Obj::new()
        .req_str("name", &v.name)
        .inline(&v.volume_source, volume_source)
        .build()
}

fn volume_source(s: &core::VolumeSource) -> Value {
    Obj::new()
        .msg("hostPath", &s.host_path, |h| {
            Obj::new()
                .req_str("path", &h.path)
                .ptr_str("type", &h.r#type)
                .build()
        })
        .msg("emptyDir", &s.empty_dir, |e| {
            Obj::new()
                .str("medium", &e.medium)
                .quantity("sizeLimit", &e.size_limit)
                .build()
        })
        .msg("secret", &s.secret, |x| {
            Obj::new()
                .str("secretName", &x.secret_name)
                .list("items", &x.items, key_to_path)
                .ptr_int("defaultMode", &x.default_mode)
                .ptr_bool("optional", &x.optional)
                .build()
        })
        .msg("nfs", &s.nfs, |n| {
            Obj::new()
                .req_str("server", &n.server)
                .req_str("path", &n.path)
                .flag("readOnly", &n.read_only)
                .build()
        })
        .msg("persistentVolumeClaim", &s.persistent_volume_claim, |p| {
            Obj::new()
                .req_str("claimName", &p.claim_name)
                .flag("readOnly", &p.read_only)
                .build()
        })
        .msg("downwardAPI", &s.downward_api, |d| {
            Obj::new()
                .list("items", &d.items, downward_api_file)
                .ptr_int("defaultMode", &d.default_mode)
                .build()
        })
        .msg("configMap", &s.config_map, |c| {
            Obj::new()
                .inline(&c.local_object_reference, local_object_reference)
                .list("items", &c.items, key_to_path)
                .ptr_int("defaultMode", &c.default_mode)
                .ptr_bool("optional", &c.optional)
                .build()
        })
        .msg("projected", &s.projected, |p| {
            Obj::new()
                .list("sources", &p.sources, volume_projection)
                .ptr_int("defaultMode", &p.default_mode)
                .build()
        })
        .msg("csi", &s.csi, |c| {
            Obj::new()
                .req_str("driver", &c.driver)
                .ptr_bool("readOnly", &c.read_only)
                .ptr_str("fsType", &c.fs_type)
                .map("volumeAttributes", &c.volume_attributes)
                .msg(
                    "nodePublishSecretRef",
                    &c.node_publish_secret_ref,
                    local_object_reference,
                )
                .build()
        })
        .msg("image", &s.image, |i| {
            Obj::new()
                .str("reference", &i.reference)
                .str("pullPolicy", &i.pull_policy)
                .build()
        })
        .build()
}

fn key_to_path(k: &core::KeyToPath) -> Value {
    Obj::new()
        .req_str("key", &k.key)
        .req_str("path", &k.path)
        .ptr_int("mode", &k.mode)
        .build()
}

fn downward_api_file(f: &core::DownwardAPIVolumeFile) -> Value {
    Obj::new()
        .req_str("path", &f.path)
        .msg("fieldRef", &f.field_ref, object_field_selector)
        .msg(
            "resourceFieldRef",
            &f.resource_field_ref,
            resource_field_selector,
        )
        .ptr_int("mode", &f.mode)
        .build()
}

fn volume_projection(p: &core::VolumeProjection) -> Value {
    Obj::new()
        .msg("secret", &p.secret, |s| {
            Obj::new()
                .inline(&s.local_object_reference, local_object_reference)
                .list("items", &s.items, key_to_path)
                .ptr_bool("optional", &s.optional)
                .build()
        })
        .msg("downwardAPI", &p.downward_api, |d| {
            Obj::new()
                .list("items", &d.items, downward_api_file)
                .build()
        })
        .msg("configMap", &p.config_map, |c| {
            Obj::new()
                .inline(&c.local_object_reference, local_object_reference)
                .list("items", &c.items, key_to_path)
                .ptr_bool("optional", &c.optional)
                .build()
        })
        .msg("serviceAccountToken", &p.service_account_token, |t| {
            Obj::new()
                .str("audience", &t.audience)
                .ptr_int("expirationSeconds", &t.expiration_seconds)
                .req_str("path", &t.path)
                .build()
        })
        .build()
}
