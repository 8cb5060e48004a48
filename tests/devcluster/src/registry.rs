//! The set of servable resources: the built-in table plus every established CRD.

use crate::crd::{self, CrdEntry};
use crate::resources::{builtins, ResourceDef};
use serde_json::Value;
use std::collections::BTreeMap;

/// Built-ins and CRD-derived resources.
#[derive(Debug, Clone)]
pub struct Registry {
    builtins: Vec<ResourceDef>,
    /// Keyed by CRD name (`plural.group`).
    crds: BTreeMap<String, CrdEntry>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            builtins: builtins(),
            crds: BTreeMap::new(),
        }
    }
}

impl Registry {
    /// Every servable (group, version, resource).
    pub fn all(&self) -> Vec<ResourceDef> {
        let mut v = self.builtins.clone();
        for e in self.crds.values() {
            v.extend(e.defs.iter().cloned());
        }
        v
    }

    /// The resource served at /apis/{group}/{version}/{plural}.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<ResourceDef> {
        self.builtins
            .iter()
            .chain(self.crds.values().flat_map(|e| e.defs.iter()))
            .find(|d| d.group == group && d.version == version && d.plural == plural)
            .cloned()
    }

    /// additionalPrinterColumns of a CRD version, if any.
    pub fn printer_columns(&self, def: &ResourceDef) -> Option<Vec<Value>> {
        let e = self.crds.get(&format!("{}.{}", def.plural, def.group))?;
        e.columns
            .iter()
            .find(|(v, _)| *v == def.version)
            .map(|(_, c)| c.clone())
    }

    /// Registers (or re-registers) a CRD object.
    pub fn upsert_crd(&mut self, crd_obj: &Value) {
        match crd::entry_from_crd(crd_obj) {
            Ok(entry) => {
                if let Some(name) = crd_obj
                    .get("metadata")
                    .and_then(|m| m.get("name"))
                    .and_then(Value::as_str)
                {
                    self.crds.insert(name.to_string(), entry);
                }
            }
            Err(e) => tracing::warn!(error = %e, "stored CRD is invalid; not serving it"),
        }
    }

    /// Unregisters a CRD by name.
    pub fn remove_crd(&mut self, name: &str) {
        self.crds.remove(name);
    }
}
