//! The canonical collection enum, id grammars and the resolver rule (`local-ai-registry/v1`
//! §2.1).
//!
//! The v1 registry spelled some names two ways (`speed-sweep/` and `speed-sweeps/`,
//! `speed_sweep_ids` and `speed_sweeps_ids`, spec §7.2.1). Here every spelling is *read* and
//! normalised to one [`Collection`]; only the canonical spelling is ever *written*.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One record collection of the registry. The canonical spelling is [`Collection::dir_name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Collection {
    /// `hardware/`: an accelerator kind (`rtx-pro-6000-blackwell-96gb`).
    Hardware,
    /// `model/`: a canonical model (`glm-5-3-flash`).
    Model,
    /// `model-instance/`: a downloadable artifact at a pinned revision.
    ModelInstance,
    /// `recipe/`: model-instance × hardware × count × engine launch.
    Recipe,
    /// `speed-sweep/` (v1-early `speed-sweeps/`): measured evidence attached to one recipe.
    SpeedSweep,
}

/// Whether a reference field names one record (`*_id`) or a list (`*_ids`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cardinality {
    /// `<field>_id`: one id (string, or null where the schema allows it).
    One,
    /// `<field>_ids`: an array of ids.
    Many,
}

impl Collection {
    /// Every collection, in dependency order (a later one references earlier ones; sweeps and
    /// recipes reference each other).
    pub const ALL: [Collection; 5] = [
        Collection::Hardware,
        Collection::Model,
        Collection::ModelInstance,
        Collection::Recipe,
        Collection::SpeedSweep,
    ];

    /// The directory under the registry root, also the canonical name: `hardware`, `model`,
    /// `model-instance`, `recipe`, `speed-sweep`.
    pub fn dir_name(self) -> &'static str {
        match self {
            Collection::Hardware => "hardware",
            Collection::Model => "model",
            Collection::ModelInstance => "model-instance",
            Collection::Recipe => "recipe",
            Collection::SpeedSweep => "speed-sweep",
        }
    }

    /// Singular name (= [`Collection::dir_name`]); the v1 API's detail path segment for sweeps.
    pub fn singular(self) -> &'static str {
        self.dir_name()
    }

    /// Plural name, the v1 API's list path segment: `hardware`, `models`, `model-instances`,
    /// `recipes`, `speed-sweeps`.
    pub fn plural(self) -> &'static str {
        match self {
            Collection::Hardware => "hardware",
            Collection::Model => "models",
            Collection::ModelInstance => "model-instances",
            Collection::Recipe => "recipes",
            Collection::SpeedSweep => "speed-sweeps",
        }
    }

    /// Older directory names that are still read (and normalised): `speed-sweeps` for sweeps.
    pub fn legacy_dir_names(self) -> &'static [&'static str] {
        match self {
            Collection::SpeedSweep => &["speed-sweeps"],
            _ => &[],
        }
    }

    /// Field prefix used by the resolver rule: `hardware`, `model`, `model_instance`,
    /// `recipe`, `speed_sweep` (the directory name with hyphens as underscores).
    pub fn field_prefix(self) -> &'static str {
        match self {
            Collection::Hardware => "hardware",
            Collection::Model => "model",
            Collection::ModelInstance => "model_instance",
            Collection::Recipe => "recipe",
            Collection::SpeedSweep => "speed_sweep",
        }
    }

    /// The single-reference field name: `hardware_id`, …, `speed_sweep_id`.
    pub fn id_field(self) -> String {
        format!("{}_id", self.field_prefix())
    }

    /// The list-reference field name: `hardware_ids`, …, `speed_sweep_ids`.
    pub fn ids_field(self) -> String {
        format!("{}_ids", self.field_prefix())
    }

    /// Parses any spelling of a collection name: the directory name, singular or plural, with
    /// hyphens or underscores (`speed-sweep`, `speed-sweeps`, `speed_sweeps`, `model_instances`,
    /// `model-instance`). Case-sensitive (the registry is lowercase). None for anything else.
    pub fn parse(name: &str) -> Option<Collection> {
        let n = name.replace('_', "-");
        Collection::ALL.into_iter().find(|c| {
            n == c.dir_name()
                || n == c.plural()
                || c.legacy_dir_names().contains(&n.as_str())
                // `hardwares` is not a spelling anyone used, but be lenient about a trailing s.
                || n.strip_suffix('s') == Some(c.dir_name())
        })
    }

    /// The resolver rule (§2.1): `<field>_id` resolves to `<field>/<id>.json`, `<field>_ids`
    /// to a list of those, underscores becoming hyphens. Returns the collection and cardinality
    /// for a field name, or None when the field does not name a known collection (`run_id`,
    /// `served_model_id`, `asset_ids`). Legacy spellings (`speed_sweeps_ids`) resolve too; use
    /// [`is_legacy_field`] to tell them apart.
    pub fn from_reference_field(field: &str) -> Option<(Collection, Cardinality)> {
        let (stem, card) = if let Some(s) = field.strip_suffix("_ids") {
            (s, Cardinality::Many)
        } else if let Some(s) = field.strip_suffix("_id") {
            (s, Cardinality::One)
        } else {
            return None;
        };
        let dir = stem.replace('_', "-");
        Collection::ALL
            .into_iter()
            .find(|c| dir == c.dir_name() || c.legacy_dir_names().contains(&dir.as_str()))
            .map(|c| (c, card))
    }

    /// Checks an id against this collection's grammar ([`is_valid_id`]).
    pub fn is_valid_id(self, id: &str) -> bool {
        is_valid_id(self, id)
    }

    /// The id grammar, as text for error messages.
    pub fn id_grammar(self) -> &'static str {
        match self {
            Collection::Hardware | Collection::Model => "kebab case [a-z0-9]+(-[a-z0-9]+)*",
            Collection::ModelInstance => "[a-z0-9][a-z0-9.-]*(--[a-z0-9][a-z0-9.-]*)*",
            Collection::Recipe => "[a-z0-9][a-z0-9.-]*",
            Collection::SpeedSweep => {
                "a file stem: [A-Za-z0-9][A-Za-z0-9._-]*, at most 200 characters"
            }
        }
    }
}

/// True when `field` is a legacy spelling of a reference field (`speed_sweeps_ids`,
/// `speed_sweeps_id`) that is read but never written.
pub fn is_legacy_field(field: &str) -> bool {
    match Collection::from_reference_field(field) {
        Some((c, Cardinality::One)) => field != c.id_field(),
        Some((c, Cardinality::Many)) => field != c.ids_field(),
        None => false,
    }
}

/// The canonical spelling of a reference field (`speed_sweeps_ids` → `speed_sweep_ids`); the
/// field itself when it is not a reference field.
pub fn canonical_field(field: &str) -> String {
    match Collection::from_reference_field(field) {
        Some((c, Cardinality::One)) => c.id_field(),
        Some((c, Cardinality::Many)) => c.ids_field(),
        None => field.to_string(),
    }
}

/// Id grammar check of §2.1:
///
/// | collection | grammar |
/// |---|---|
/// | hardware, model | kebab `[a-z0-9]+(-[a-z0-9]+)*` (no dots) |
/// | model-instance | `[a-z0-9][a-z0-9.-]*(--[a-z0-9][a-z0-9.-]*)*` |
/// | recipe | `[a-z0-9][a-z0-9.-]*` |
/// | speed-sweep | "free string" in v1; here a safe file stem `[A-Za-z0-9][A-Za-z0-9._-]*` |
///
/// Every id is also a file stem, so at most 200 characters and never `.`/`..`-like.
pub fn is_valid_id(collection: Collection, id: &str) -> bool {
    if id.is_empty() || id.len() > 200 {
        return false;
    }
    let b = id.as_bytes();
    let lower_alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match collection {
        Collection::Hardware | Collection::Model => id
            .split('-')
            .all(|part| !part.is_empty() && part.bytes().all(lower_alnum)),
        Collection::ModelInstance | Collection::Recipe => {
            // `(--[a-z0-9][a-z0-9.-]*)*` adds nothing over `[a-z0-9.-]*`: a segment after `--`
            // must start with [a-z0-9], but `---x` also matches as `-` + `--x`.
            lower_alnum(b[0])
                && b[1..]
                    .iter()
                    .all(|&c| lower_alnum(c) || c == b'.' || c == b'-')
        }
        Collection::SpeedSweep => {
            b[0].is_ascii_alphanumeric()
                && b[1..]
                    .iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        }
    }
}

impl fmt::Display for Collection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.dir_name())
    }
}

impl std::str::FromStr for Collection {
    type Err = UnknownCollection;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Collection::parse(s).ok_or_else(|| UnknownCollection(s.to_string()))
    }
}

/// A name that is not a spelling of any [`Collection`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown collection {0:?} (known: hardware, model, model-instance, recipe, speed-sweep)")]
pub struct UnknownCollection(pub String);

impl Serialize for Collection {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.dir_name())
    }
}

impl<'de> Deserialize<'de> for Collection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Collection::parse(&s).ok_or_else(|| serde::de::Error::custom(UnknownCollection(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_normalise() {
        for s in ["speed-sweep", "speed-sweeps", "speed_sweeps", "speed_sweep"] {
            assert_eq!(Collection::parse(s), Some(Collection::SpeedSweep), "{s}");
        }
        assert_eq!(
            Collection::parse("model-instances"),
            Some(Collection::ModelInstance)
        );
        assert_eq!(Collection::parse("models"), Some(Collection::Model));
        assert_eq!(Collection::parse("benchmarks"), None);
        let c: Collection = serde_json::from_str("\"speed-sweeps\"").unwrap();
        assert_eq!(serde_json::to_string(&c).unwrap(), "\"speed-sweep\"");
    }

    #[test]
    fn resolver_rule() {
        use Cardinality::*;
        assert_eq!(
            Collection::from_reference_field("model_instance_id"),
            Some((Collection::ModelInstance, One))
        );
        assert_eq!(
            Collection::from_reference_field("speed_sweeps_ids"),
            Some((Collection::SpeedSweep, Many))
        );
        assert_eq!(
            Collection::from_reference_field("speed_sweep_ids"),
            Some((Collection::SpeedSweep, Many))
        );
        assert_eq!(Collection::from_reference_field("run_id"), None);
        assert_eq!(Collection::from_reference_field("served_model_id"), None);
        assert_eq!(Collection::from_reference_field("asset_ids"), None);
        assert!(is_legacy_field("speed_sweeps_ids"));
        assert!(!is_legacy_field("speed_sweep_ids"));
        assert_eq!(canonical_field("speed_sweeps_ids"), "speed_sweep_ids");
    }

    #[test]
    fn id_grammars() {
        use Collection::*;
        assert!(is_valid_id(Hardware, "rtx-pro-6000-blackwell-96gb"));
        assert!(!is_valid_id(Hardware, "RTX-4090"));
        assert!(!is_valid_id(Hardware, "rtx--4090"));
        assert!(!is_valid_id(Hardware, "-rtx"));
        assert!(!is_valid_id(Model, "glm-5.3-flash"));
        assert!(is_valid_id(
            ModelInstance,
            "0xsero-glm-5-3-flash-exl3-q4--selective-exl3-q4"
        ));
        assert!(!is_valid_id(ModelInstance, ".hidden"));
        assert!(is_valid_id(
            Recipe,
            "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4"
        ));
        assert!(!is_valid_id(Recipe, "a/b"));
        assert!(is_valid_id(SpeedSweep, "glm53-x-20260827-abcdefghijkl"));
        assert!(!is_valid_id(SpeedSweep, "../x"));
        assert!(!is_valid_id(SpeedSweep, ""));
        assert!(!is_valid_id(SpeedSweep, &"a".repeat(201)));
    }
}
