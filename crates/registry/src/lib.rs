//! servebench's local-ai-registry/v1 crate: typed records, the canonical collection enum and
//! id grammars, a loader with the resolver rule, canonical formatting, the validator
//! ([`validate`]), trust derivation ([`trust`]), import ([`import`]) and publish ([`publish`]);
//! every write goes through [`write::commit`] (ids checked, paths under the root, validated,
//! all files or none).
//!
//! Spec: `local-ai-registry-spec.md` (§2 data model, §3 metrics, §4 validation, §6.4 trust,
//! §6.6 imports, §7.2 weaknesses fixed here). One record per file, `<root>/<dir>/<id>.json`.
//!
//! Stable API used by other crates (add, don't rename): [`Collection`], [`is_valid_id`],
//! [`Registry::load`], [`Record`] (`raw` JSON + `typed`), [`references`], [`Registry::resolve`],
//! [`canonical::to_canonical_string`].

pub mod canonical;
pub mod collection;
pub mod draft;
pub mod import;
pub mod load;
pub mod metrics;
pub mod publish;
pub mod records;
pub mod schema;
pub mod trust;
pub mod validate;
pub mod verdict;
pub mod write;

pub use collection::{is_valid_id, Cardinality, Collection, UnknownCollection};
pub use load::{references, LoadOptions, Problem, Record, Reference, Registry, RegistryError};
pub use records::{TypedRecord, SCHEMA_VERSION};
pub use verdict::{CacheTag, RowVerdict, Verdict};
pub use write::WriteError;
