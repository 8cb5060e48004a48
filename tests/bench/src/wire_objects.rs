//! Realistic objects for the wire-size scenario, as an API server returns
//! them (metadata with managedFields, status, the last-applied annotation).

use serde_json::{json, Value};

fn managed_fields(manager: &str, fields: Value) -> Value {
    json!([{
        "manager": manager,
        "operation": "Update",
        "apiVersion": "apps/v1",
        "time": "2026-11-23T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }])
}

fn metadata(name: &str, ns: &str, rv: &str) -> Value {
    json!({
        "name": name,
        "namespace": ns,
        "uid": "5b0d7f64-1f4e-4f7a-9d55-7c3a9a0e2b11",
        "resourceVersion": rv,
        "generation": 7,
        "creationTimestamp": "2026-11-20T08:15:00Z",
        "labels": {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "shop", "team": "payments"},
    })
}

/// A ConfigMap with about 1 KiB of data.
pub fn configmap() -> Value {
    let mut meta = metadata("settings", "shop", "48213");
    meta["managedFields"] = managed_fields(
        "kubectl-client-side-apply",
        json!({"f:data": {".": {}, "f:app.properties": {}}}),
    );
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {
            "app.properties": (0..24).map(|i| format!("feature.flag.{i}=enabled\nretry.budget.{i}=250ms\n")).collect::<String>(),
        },
    })
}

/// A Deployment as `kubectl get -o json` shows it after `kubectl apply`.
pub fn deployment() -> Value {
    let container = |name: &str, image: &str| {
        json!({
            "name": name,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
            "env": [
                {"name": "LOG_LEVEL", "value": "info"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
            ],
            "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"}, "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
        })
    };
    let mut meta = metadata("checkout", "shop", "91735");
    meta["annotations"] = json!({
        "deployment.kubernetes.io/revision": "7",
        "kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"annotations\":{},\"name\":\"checkout\",\"namespace\":\"shop\"},\"spec\":{\"replicas\":3,\"selector\":{\"matchLabels\":{\"app\":\"checkout\"}},\"template\":{\"metadata\":{\"labels\":{\"app\":\"checkout\"}},\"spec\":{\"containers\":[{\"image\":\"registry.example.com/shop/checkout:1.42.0\",\"name\":\"checkout\"}]}}}}\n",
    });
    meta["managedFields"] = managed_fields(
        "kubectl-client-side-apply",
        json!({"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
               "f:spec": {"f:progressDeadlineSeconds": {}, "f:replicas": {}, "f:revisionHistoryLimit": {}, "f:selector": {},
                          "f:strategy": {"f:rollingUpdate": {".": {}, "f:maxSurge": {}, "f:maxUnavailable": {}}, "f:type": {}},
                          "f:template": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                                         "f:spec": {"f:containers": {"k:{\"name\":\"checkout\"}": {".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}}}}}}}),
    );
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 3,
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "selector": {"matchLabels": {"app": "checkout"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {
                "metadata": {"labels": {"app": "checkout"}},
                "spec": {
                    "containers": [container("checkout", "registry.example.com/shop/checkout:1.42.0"), container("sidecar", "registry.example.com/mesh/proxy:2.3.1")],
                    "volumes": [{"name": "config", "configMap": {"name": "settings", "defaultMode": 420}}],
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst",
                    "schedulerName": "default-scheduler",
                    "securityContext": {},
                },
            },
        },
        "status": {
            "observedGeneration": 7,
            "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3,
            "conditions": [
                {"type": "Available", "status": "True", "lastUpdateTime": "2026-11-23T10:00:00Z", "lastTransitionTime": "2026-11-23T10:00:00Z", "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability."},
                {"type": "Progressing", "status": "True", "lastUpdateTime": "2026-11-23T10:00:00Z", "lastTransitionTime": "2026-11-20T08:15:00Z", "reason": "NewReplicaSetAvailable", "message": "ReplicaSet \"checkout-7d9f8c6b5d\" has successfully progressed."},
            ],
        },
    })
}

/// A large custom resource (a PrometheusRule-like object with 400 alerting rules, ~150 KiB of JSON).
pub fn large_crd() -> Value {
    let rules: Vec<Value> = (0..400)
        .map(|i| {
            json!({
                "alert": format!("HighErrorRate{i}"),
                "expr": format!("sum(rate(http_requests_total{{job=\"svc-{i}\",code=~\"5..\"}}[5m])) / sum(rate(http_requests_total{{job=\"svc-{i}\"}}[5m])) > 0.05"),
                "for": "10m",
                "labels": {"severity": if i % 3 == 0 { "critical" } else { "warning" }, "team": format!("team-{}", i % 12)},
                "annotations": {
                    "summary": format!("Service svc-{i} returns more than 5% errors"),
                    "runbook_url": format!("https://runbooks.example.com/alerts/high-error-rate#svc-{i}"),
                },
            })
        })
        .collect();
    let mut meta = metadata("platform-alerts", "monitoring", "1203311");
    meta["managedFields"] = managed_fields("helm", json!({"f:spec": {".": {}, "f:groups": {}}}));
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": meta,
        "spec": {"groups": [{"name": "platform.rules", "interval": "30s", "rules": rules}]},
    })
}
