//! Canonical record formatting (§2.1, `format_registry.py`): 2-space indent, keys sorted at
//! every level, raw UTF-8 (no `\u` escapes for non-ASCII), one trailing newline.

use std::path::Path;

use serde_json::{Map, Value};

/// Returns `v` with the keys of every object sorted (byte order of the UTF-8 key, as Python's
/// `sort_keys=True` for the ASCII keys the registry uses). Arrays keep their order.
pub fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                out.insert(k.clone(), sorted(&m[k]));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// `v` with the keys of every object serialized in sorted order, without copying it (the same
/// output as serializing [`sorted`]`(v)`).
struct Sorted<'a>(&'a Value);

impl serde::Serialize for Sorted<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap as _, SerializeSeq as _};
        match self.0 {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                let mut map = s.serialize_map(Some(keys.len()))?;
                for k in keys {
                    map.serialize_entry(k, &Sorted(&m[k]))?;
                }
                map.end()
            }
            Value::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for x in a {
                    seq.serialize_element(&Sorted(x))?;
                }
                seq.end()
            }
            other => other.serialize(s),
        }
    }
}

/// The canonical text of a record. serde_json's pretty printer writes 2-space indents and raw
/// UTF-8; keys are sorted here explicitly (so the result does not depend on whether some crate
/// in the build enables serde_json's `preserve_order`).
pub fn to_canonical_string(v: &Value) -> String {
    let mut text = serde_json::to_string_pretty(&Sorted(v)).expect("a Value always serialises");
    text.push('\n');
    text
}

/// True when `text` is exactly the canonical form of the JSON it contains.
pub fn is_canonical(text: &str) -> bool {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => is_canonical_text_of(&v, text),
        Err(_) => false,
    }
}

/// True when `text` equals [`to_canonical_string`]`(v)`, where `v` is what `text` parsed to.
/// Compares while serializing: nothing is allocated for the text, and the first differing
/// byte stops the comparison (the loader checks every file with this, see `Registry::load`).
pub fn is_canonical_text_of(v: &Value, text: &str) -> bool {
    /// A writer that accepts only the bytes of `rest`, in order.
    struct Expect<'a> {
        rest: &'a [u8],
    }
    impl std::io::Write for Expect<'_> {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            match self.rest.strip_prefix(b) {
                Some(r) => {
                    self.rest = r;
                    Ok(b.len())
                }
                None => Err(std::io::Error::other("differs from the canonical text")),
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = Expect {
        rest: text.as_bytes(),
    };
    serde_json::to_writer_pretty(&mut w, &Sorted(v)).is_ok() && w.rest == b"\n"
}

/// Writes `v` canonically to `path` (creating its folder), through a temporary file in the same
/// folder and a rename, so a reader never sees half a record.
///
/// Errors: the folder cannot be created or the file cannot be written.
pub fn write_canonical(path: &Path, v: &Value) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, to_canonical_string(v).as_bytes())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_indented_utf8_newline() {
        let v: Value = serde_json::from_str(r#"{"b":1,"a":{"z":"é","c":[2,1]}}"#).unwrap();
        let s = to_canonical_string(&v);
        assert_eq!(
            s,
            "{\n  \"a\": {\n    \"c\": [\n      2,\n      1\n    ],\n    \"z\": \"é\"\n  },\n  \"b\": 1\n}\n"
        );
        assert!(is_canonical(&s));
        assert!(!is_canonical(r#"{"b":1,"a":2}"#));
        assert!(!is_canonical(&s[..s.len() - 1]));
        assert!(!is_canonical(&format!("{s}\n")));
        assert!(is_canonical_text_of(&v, &s));
        assert_eq!(to_canonical_string(&v), to_canonical_string(&sorted(&v)));
    }
}
