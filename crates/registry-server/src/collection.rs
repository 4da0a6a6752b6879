//! The collections this server serves, their names (directory, API, singular/plural aliases) and
//! their id grammars (local-ai-registry spec §2.1).
//!
//! One enum names every collection, so a singular/plural mix-up (spec §7.2 item 1) cannot 404:
//! every spelling a client or an old record uses parses to the same variant, and everything the
//! server writes uses the canonical spelling.

/// A served registry collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Collection {
    /// `hardware/`: one accelerator kind (`rtx-pro-6000-blackwell-96gb`).
    Hardware,
    /// `model/`: a canonical model (`glm-5-3-flash`).
    Model,
    /// `model-instance/`: a downloadable artifact at a pinned revision.
    ModelInstance,
    /// `recipe/`: model instance × hardware × count × engine launch.
    Recipe,
    /// `speed-sweep/` (early `speed-sweeps/`): measured evidence attached to a recipe.
    SpeedSweep,
}

/// Longest id accepted for any collection (bytes). Longer path segments are rejected before
/// any lookup.
pub const MAX_ID_LEN: usize = 200;

impl Collection {
    /// Every collection, in the order the discovery document and the index list them.
    pub const ALL: [Collection; 5] = [
        Collection::Hardware,
        Collection::Model,
        Collection::ModelInstance,
        Collection::Recipe,
        Collection::SpeedSweep,
    ];

    /// Position in [`Collection::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The registry directory name (singular, hyphenated): `model-instance`.
    pub fn dir(self) -> &'static str {
        match self {
            Collection::Hardware => "hardware",
            Collection::Model => "model",
            Collection::ModelInstance => "model-instance",
            Collection::Recipe => "recipe",
            Collection::SpeedSweep => "speed-sweep",
        }
    }

    /// Older directory names still read (v1-early `speed-sweeps/`).
    pub fn legacy_dirs(self) -> &'static [&'static str] {
        match self {
            Collection::SpeedSweep => &["speed-sweeps"],
            _ => &[],
        }
    }

    /// The canonical API and site path segment (plural): `/api/v1/model-instances`.
    pub fn plural(self) -> &'static str {
        match self {
            Collection::Hardware => "hardware",
            Collection::Model => "models",
            Collection::ModelInstance => "model-instances",
            Collection::Recipe => "recipes",
            Collection::SpeedSweep => "speed-sweeps",
        }
    }

    /// The key in `meta.counts` and the discovery routes (underscored): `model_instance`.
    pub fn count_key(self) -> &'static str {
        match self {
            Collection::Hardware => "hardware",
            Collection::Model => "model",
            Collection::ModelInstance => "model_instance",
            Collection::Recipe => "recipe",
            Collection::SpeedSweep => "speed_sweep",
        }
    }

    /// Human title of the collection (site breadcrumbs).
    pub fn title(self) -> &'static str {
        match self {
            Collection::Hardware => "Hardware",
            Collection::Model => "Models",
            Collection::ModelInstance => "Model instances",
            Collection::Recipe => "Recipes",
            Collection::SpeedSweep => "Speed sweeps",
        }
    }

    /// Parses any accepted spelling of a collection in a URL path: singular or plural,
    /// hyphenated or underscored (`speed-sweep`, `speed-sweeps`, `speed_sweeps`), and
    /// `compatibility` for recipes. Case-sensitive (URLs are); `None` for anything else.
    pub fn from_path_segment(s: &str) -> Option<Collection> {
        Some(match s {
            "hardware" => Collection::Hardware,
            "model" | "models" => Collection::Model,
            "model-instance" | "model-instances" | "model_instance" | "model_instances" => {
                Collection::ModelInstance
            }
            "recipe" | "recipes" | "compatibility" => Collection::Recipe,
            "speed-sweep" | "speed-sweeps" | "speed_sweep" | "speed_sweeps" => {
                Collection::SpeedSweep
            }
            _ => return None,
        })
    }

    /// True when `id` matches this collection's id grammar (spec §2.1), at most
    /// [`MAX_ID_LEN`] bytes:
    /// - hardware, model: kebab `[a-z0-9]+(-[a-z0-9]+)*`;
    /// - model-instance: `[a-z0-9][a-z0-9.-]*(--[a-z0-9][a-z0-9.-]*)*`;
    /// - recipe: `[a-z0-9][a-z0-9.-]*`;
    /// - speed-sweep (a free string in the schema; here it must also be a safe file stem):
    ///   `[A-Za-z0-9][A-Za-z0-9._-]*`.
    ///
    /// Request ids are checked with this before any lookup, and no path is ever built from one.
    pub fn id_is_valid(self, id: &str) -> bool {
        if id.is_empty() || id.len() > MAX_ID_LEN {
            return false;
        }
        let b = id.as_bytes();
        let lower_digit = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        match self {
            Collection::Hardware | Collection::Model => {
                lower_digit(b[0])
                    && lower_digit(b[b.len() - 1])
                    && b.iter().all(|&c| lower_digit(c) || c == b'-')
                    && !id.contains("--")
            }
            // The model-instance grammar's `--` groups use characters the first group already
            // allows, so it is the recipe grammar with a check that every group starts well.
            Collection::ModelInstance => id
                .split("--")
                .all(|g| !g.is_empty() && lower_digit(g.as_bytes()[0]))
                && b.iter().all(|&c| lower_digit(c) || c == b'.' || c == b'-'),
            Collection::Recipe => {
                lower_digit(b[0]) && b.iter().all(|&c| lower_digit(c) || c == b'.' || c == b'-')
            }
            Collection::SpeedSweep => {
                b[0].is_ascii_alphanumeric()
                    && b.iter()
                        .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Collection::ALL {
            assert_eq!(Collection::from_path_segment(c.plural()), Some(c));
            assert_eq!(Collection::from_path_segment(c.dir()), Some(c));
            assert_eq!(Collection::ALL[c.index()], c);
        }
        assert_eq!(
            Collection::from_path_segment("compatibility"),
            Some(Collection::Recipe)
        );
        assert_eq!(Collection::from_path_segment("Models"), None);
        assert_eq!(Collection::from_path_segment("index"), None);
    }

    #[test]
    fn id_grammars() {
        use Collection::*;
        assert!(Hardware.id_is_valid("rtx-pro-6000-blackwell-96gb"));
        assert!(!Hardware.id_is_valid("rtx--pro"));
        assert!(!Hardware.id_is_valid("-rtx"));
        assert!(!Hardware.id_is_valid("rtx-"));
        assert!(!Model.id_is_valid("glm-5.3"));
        assert!(ModelInstance.id_is_valid(
            "0xsero-glm-5-3-flash-exl3-q4--selective-exl3-q4"
        ));
        assert!(ModelInstance.id_is_valid("unsloth-qwen3-5-9b-gguf--q4-k-m"));
        assert!(!ModelInstance.id_is_valid("a--.b"));
        assert!(!ModelInstance.id_is_valid("../etc/passwd"));
        assert!(Recipe.id_is_valid("glm53-flash-exl3-q4-rtxpro6000-sglang-tp4"));
        assert!(Recipe.id_is_valid("qwen3.5-9b-tp1-2jgt4q0j"));
        assert!(!Recipe.id_is_valid(".hidden"));
        assert!(!Recipe.id_is_valid("UPPER"));
        assert!(SpeedSweep.id_is_valid("glm53-flash-exl3-q4-rtxpro6000-sglang-tp4-sweep"));
        assert!(!SpeedSweep.id_is_valid("a/b"));
        assert!(!SpeedSweep.id_is_valid("a b"));
        assert!(!SpeedSweep.id_is_valid(""));
        assert!(!SpeedSweep.id_is_valid(&"a".repeat(MAX_ID_LEN + 1)));
    }
}
