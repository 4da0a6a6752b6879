//! The committed JSON Schemas of each collection (`schema/registry/<dir>.schema.json`, draft
//! 2020-12), embedded, and a compiled checker.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::Collection;

/// The schema text of `collection`.
pub fn schema_json(collection: Collection) -> &'static str {
    match collection {
        Collection::Hardware => include_str!("../../../schema/registry/hardware.schema.json"),
        Collection::Model => include_str!("../../../schema/registry/model.schema.json"),
        Collection::ModelInstance => {
            include_str!("../../../schema/registry/model-instance.schema.json")
        }
        Collection::Recipe => include_str!("../../../schema/registry/recipe.schema.json"),
        Collection::SpeedSweep => include_str!("../../../schema/registry/speed-sweep.schema.json"),
    }
}

/// Compiled validators for every collection.
pub struct Schemas {
    validators: BTreeMap<Collection, jsonschema::Validator>,
}

impl Schemas {
    /// Compiles the embedded schemas. Panics only if a committed schema is broken (a test
    /// compiles them all).
    pub fn new() -> Schemas {
        let validators = Collection::ALL
            .into_iter()
            .map(|c| {
                let v: Value = serde_json::from_str(schema_json(c))
                    .unwrap_or_else(|e| panic!("schema/registry/{c}.schema.json: {e}"));
                let compiled = jsonschema::validator_for(&v)
                    .unwrap_or_else(|e| panic!("schema/registry/{c}.schema.json: {e}"));
                (c, compiled)
            })
            .collect();
        Schemas { validators }
    }

    /// Schema violations of `record` as `(JSON pointer, message)`, empty when it conforms.
    pub fn check(&self, collection: Collection, record: &Value) -> Vec<(String, String)> {
        self.validators[&collection]
            .iter_errors(record)
            .map(|e| (e.instance_path().to_string(), e.to_string()))
            .collect()
    }
}

impl Default for Schemas {
    fn default() -> Self {
        Schemas::new()
    }
}
