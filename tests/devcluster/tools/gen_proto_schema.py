#!/usr/bin/env python3
"""Generates src/protobuf/schema_gen.rs: field tables for decoding Kubernetes protobuf
request bodies into JSON.

Tags and nesting come from the k8s-pb crate's prost structs; JSON field names from
k8s-openapi's serde field tables. Usage (paths default to the cargo registry):
    python3 tools/gen_proto_schema.py > src/protobuf/schema_gen.rs
"""
import glob, os, re, sys
from collections import defaultdict

REG = glob.glob(os.path.expanduser("~/.cargo/registry/src/*/"))[0]
PB = os.path.join(REG, "k8s-pb-0.9.0/src")
OA = os.path.join(REG, "k8s-openapi-0.29.0/src/v1_33")

# (group, version, kind) served by the devcluster -> k8s-pb module.
ROOT_MODULES = {
    "": "api/core/v1", "apps": "api/apps/v1", "batch": "api/batch/v1",
    "rbac.authorization.k8s.io": "api/rbac/v1", "networking.k8s.io": "api/networking/v1",
    "coordination.k8s.io": "api/coordination/v1", "policy": "api/policy/v1",
    "events.k8s.io": "api/events/v1", "authentication.k8s.io": "api/authentication/v1",
}
ROOTS = [
    ("", "Namespace"), ("", "ConfigMap"), ("", "Secret"), ("", "ServiceAccount"), ("", "Service"),
    ("", "Event"), ("", "Pod"), ("", "Node"), ("", "Endpoints"),
    ("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet"), ("apps", "ReplicaSet"),
    ("batch", "Job"), ("batch", "CronJob"),
    ("rbac.authorization.k8s.io", "Role"), ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"), ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("networking.k8s.io", "Ingress"), ("networking.k8s.io", "NetworkPolicy"),
    ("coordination.k8s.io", "Lease"), ("policy", "PodDisruptionBudget"), ("events.k8s.io", "Event"),
    ("authentication.k8s.io", "TokenRequest"),
]
# Go structs embedded with `json:",inline"` (their fields appear in the parent).
INLINE = {"localObjectReference", "volumeSource", "ingressRuleValue", "ephemeralContainerCommon",
          "handler", "probeHandler", "persistentVolumeSource"}
SPECIAL = {
    "apimachinery/pkg/apis/meta/v1::Time": "Time",
    "apimachinery/pkg/apis/meta/v1::MicroTime": "MicroTime",
    "apimachinery/pkg/apis/meta/v1::Duration": "Duration",
    "apimachinery/pkg/apis/meta/v1::FieldsV1": "RawJson",
    "apimachinery/pkg/runtime::RawExtension": "RawJson",
    "apimachinery/pkg/util/intstr::IntOrString": "IntOrString",
    "apimachinery/pkg/api/resource::Quantity": "Quantity",
}

# JSON names from k8s-openapi.
json_by_key = defaultdict(set)
for path in glob.glob(OA + "/**/*.rs", recursive=True):
    for js, key in re.findall(r'"(\w+)" => Field::Key_(\w+)', open(path).read()):
        json_by_key[key].add(js)

def json_name(snake, strict=False):
    cands = json_by_key.get(snake, set()) | json_by_key.get(snake + "_", set())
    if strict and not cands:
        return None
    flat = snake.replace("_", "")
    good = [c for c in cands if c.lower() == flat]
    if len(good) == 1:
        return good[0]
    if len(cands) == 1:
        return next(iter(cands))
    parts = snake.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])

# Parse prost structs.
structs = {}
for path in glob.glob(PB + "/**/mod.rs", recursive=True):
    mod = os.path.relpath(os.path.dirname(path), PB)
    src = open(path).read()
    for name, body in re.findall(r"pub struct (\w+) \{(.*?)\n\}", src, re.S):
        body = "\n".join(l for l in body.split("\n") if not l.strip().startswith("///"))
        fields = []
        for chunk in body.split("#[prost(")[1:]:
            attr, rest = chunk.split(")]", 1)
            m = re.match(r"\s*pub (?:r#)?(\w+):\s*(.*)", rest, re.S)
            if not m:
                continue
            fname, ty = m.group(1), re.sub(r"\s+", "", m.group(2)).rstrip(",")
            fields.append((attr, fname, ty))
        structs[f"{mod}::{name}"] = (mod, fields)

def resolve(mod, ty):
    for w in ["::core::option::Option<", "::prost::alloc::vec::Vec<",
              "::prost::alloc::collections::BTreeMap<::prost::alloc::string::String,"]:
        ty = ty.replace(w, "")
    ty = ty.rstrip(">,")
    segs = mod.split("/")
    parts = ty.split("::")
    while parts and parts[0] == "super":
        segs.pop(); parts.pop(0)
    name = parts[-1]
    return "/".join(segs + parts[:-1]) + "::" + name

order, index = [], {}
def visit(key):
    if key in index:
        return index[key]
    index[key] = len(order)
    order.append(key)
    if key in SPECIAL:
        return index[key]
    mod, fields = structs[key]
    for attr, fname, ty in fields:
        if "message" in attr:
            visit(resolve(mod, ty))
    return index[key]

roots = []
for g, kind in ROOTS:
    key = f"{ROOT_MODULES[g]}::{kind}"
    if key not in structs:
        sys.exit(f"missing root {key}")
    roots.append((g, kind, visit(key)))

def kind_of(attr, mod, ty, fname):
    tag = int(re.search(r'tag = "(\d+)"', attr).group(1))
    rep = "repeated" in attr
    if attr.startswith("btree_map"):
        vt = re.search(r'btree_map = "string, (\w+)"', attr).group(1)
        k = {"string": "K::MapString", "bytes": "K::MapBytes"}.get(vt)
        if k is None:
            k = f"K::MapMsg({index[resolve(mod, ty)]})"
        return tag, k, False
    base = attr.split(",")[0].strip()
    if base == "message":
        if json_name(fname) in INLINE and not rep:
            # Embedded Go structs (`json:",inline"`) have no JSON key of their own.
            return tag, f"K::Inline({index[resolve(mod, ty)]})", rep
        return tag, f"K::Msg({index[resolve(mod, ty)]})", rep
    k = {"string": "K::Str", "int64": "K::Int", "int32": "K::Int", "uint64": "K::Int", "uint32": "K::Int",
         "bool": "K::Bool", "double": "K::F64", "float": "K::F32"}.get(base)
    if base.startswith("bytes"):
        k = "K::Bytes"
    if k is None:
        sys.exit(f"unknown prost type {attr}")
    return tag, k, rep

out = ["// @generated by tools/gen_proto_schema.py from k8s-pb 0.9.0 (tags) and",
       "// k8s-openapi 0.29.0 (JSON names). Do not edit by hand.",
       "use super::schema::{Field as F, Kind as K, Msg, Special as S};", "",
       "/// Every message reachable from the decodable root kinds.",
       "pub static MESSAGES: &[Msg] = &["]
for key in order:
    special = SPECIAL.get(key)
    if special:
        out.append(f'    Msg {{ name: "{key}", special: S::{special}, fields: &[] }},')
        continue
    mod, fields = structs[key]
    fs = []
    for attr, fname, ty in fields:
        tag, k, rep = kind_of(attr, mod, ty, fname)
        fs.append(f'F({tag}, "{json_name(fname)}", {k}, {"true" if rep else "false"})')
    out.append(f'    Msg {{ name: "{key}", special: S::None, fields: &[{", ".join(fs)}] }},')
out.append("];")
out.append("")
out.append("/// (group, kind, index into MESSAGES) of the kinds a protobuf body may carry.")
out.append("pub static ROOTS: &[(&str, &str, usize)] = &[")
for g, kind, i in roots:
    out.append(f'    ("{g}", "{kind}", {i}),')
out.append("];")
print("\n".join(out))
