//! The collections served: [`servebench_registry::Collection`] (one enum, every v1 spelling
//! parsed to it, spec §7.2 item 1) plus what the server needs on top ([`CollectionExt`]).

pub use servebench_registry::Collection;

/// Longest id accepted for any collection (bytes), as in the registry crate's grammar.
pub const MAX_ID_LEN: usize = 200;

/// Server-side helpers on [`Collection`].
pub trait CollectionExt: Sized {
    /// Position in [`Collection::ALL`].
    fn index(self) -> usize;
    /// The registry directory name (`model-instance`).
    fn dir(self) -> &'static str;
    /// Older directory names still read (`speed-sweeps`).
    fn legacy_dirs(self) -> &'static [&'static str];
    /// The key in `meta.counts` (`model_instance`).
    fn count_key(self) -> &'static str;
    /// Human title (site navigation and breadcrumbs).
    fn title(self) -> &'static str;
    /// Any accepted URL spelling: singular or plural, hyphenated or underscored, and
    /// `compatibility` for recipes ([`Collection::parse`]).
    fn from_path_segment(s: &str) -> Option<Self>;
    /// The collection's id grammar ([`servebench_registry::is_valid_id`]): request ids are
    /// checked with it before any lookup.
    fn id_is_valid(self, id: &str) -> bool;
}

impl CollectionExt for Collection {
    fn index(self) -> usize {
        Collection::ALL.iter().position(|&c| c == self).unwrap_or(0)
    }

    fn dir(self) -> &'static str {
        self.dir_name()
    }

    fn legacy_dirs(self) -> &'static [&'static str] {
        self.legacy_dir_names()
    }

    fn count_key(self) -> &'static str {
        self.field_prefix()
    }

    fn title(self) -> &'static str {
        match self {
            Collection::Hardware => "Hardware",
            Collection::Model => "Models",
            Collection::ModelInstance => "Model instances",
            Collection::Recipe => "Recipes",
            Collection::SpeedSweep => "Speed sweeps",
        }
    }

    fn from_path_segment(s: &str) -> Option<Collection> {
        if s == "compatibility" {
            return Some(Collection::Recipe);
        }
        Collection::parse(s)
    }

    fn id_is_valid(self, id: &str) -> bool {
        servebench_registry::is_valid_id(self, id)
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
        assert_eq!(
            Collection::from_path_segment("speed_sweeps"),
            Some(Collection::SpeedSweep)
        );
        assert_eq!(Collection::from_path_segment("index"), None);
        assert_eq!(Collection::from_path_segment("facets"), None);
    }

    #[test]
    fn id_grammars() {
        use Collection::*;
        assert!(Hardware.id_is_valid("rtx-pro-6000-blackwell-96gb"));
        assert!(!Hardware.id_is_valid("rtx--pro"));
        assert!(!Model.id_is_valid("glm-5.3"));
        assert!(ModelInstance.id_is_valid("unsloth-qwen3-5-9b-gguf--q4-k-m"));
        assert!(!ModelInstance.id_is_valid("../etc/passwd"));
        assert!(Recipe.id_is_valid("qwen3.5-9b-tp1-2jgt4q0j"));
        assert!(!Recipe.id_is_valid("UPPER"));
        assert!(SpeedSweep.id_is_valid("glm53-flash-exl3-q4-rtxpro6000-sglang-tp4-sweep"));
        assert!(!SpeedSweep.id_is_valid("a/b"));
        assert!(!SpeedSweep.id_is_valid(""));
        assert!(!SpeedSweep.id_is_valid(&"a".repeat(MAX_ID_LEN + 1)));
    }
}
