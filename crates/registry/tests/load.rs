//! Loader, resolver rule, legacy names and schemas compile.

use serde_json::{json, Value};
use servebench_registry::{references, schema::Schemas, Collection, Registry, TypedRecord};

fn seed_sweep() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/registry/seed-001-speed-sweep-envelope.json"
    ))
    .unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let mut data = v["data"].take();
    data.as_object_mut().unwrap().remove("relationships");
    data
}

#[test]
fn schemas_compile() {
    let _ = Schemas::new();
}

#[test]
fn loads_legacy_dir_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = seed_sweep();
    let id = sweep["id"].as_str().unwrap().to_string();
    std::fs::create_dir_all(dir.path().join("speed-sweeps")).unwrap();
    std::fs::write(
        dir.path().join(format!("speed-sweeps/{id}.json")),
        serde_json::to_string(&sweep).unwrap(),
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("recipe")).unwrap();
    std::fs::write(
        dir.path().join("recipe/r.json"),
        json!({"id": "r", "speed_sweeps_ids": [id]}).to_string(),
    )
    .unwrap();
    std::fs::write(dir.path().join("recipe/bad.json"), "{").unwrap();
    std::fs::write(dir.path().join("recipe/other.json"), r#"{"id":"x"}"#).unwrap();

    let reg = Registry::load(dir.path()).unwrap();
    let rec = reg
        .get(Collection::SpeedSweep, &id)
        .expect("legacy dir read");
    assert!(
        matches!(rec.typed, Some(TypedRecord::SpeedSweep(_))),
        "{:?}",
        rec.parse_error
    );
    assert_eq!(rec.canonical_rel_path(), format!("speed-sweep/{id}.json"));
    assert!(!rec.canonical);
    let r = reg.get(Collection::Recipe, "r").unwrap();
    assert_eq!(r.raw["speed_sweep_ids"][0], id);
    assert!(r.raw.get("speed_sweeps_ids").is_none());
    let refs = references(&r.raw);
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].collection, Collection::SpeedSweep);
    assert!(reg.resolve(&refs[0].field, &refs[0].id).is_some());
    let rules: Vec<&str> = reg.problems.iter().map(|p| p.rule.as_str()).collect();
    assert_eq!(
        rules,
        ["invalid-json", "id-matches-file"],
        "{:?}",
        reg.problems
    );
    assert_eq!(
        reg.sweeps_of_recipe("glm53-flash-exl3-q4-rtxpro6000-sglang-tp4")
            .len(),
        1
    );
}

#[test]
fn missing_dir_is_an_error() {
    assert!(Registry::load("/nonexistent/registry").is_err());
}

#[test]
fn closed_records_refuse_unknown_keys() {
    use servebench_registry::records::{Capabilities, SpeedSweep};
    let e = serde_json::from_value::<Capabilities>(
        json!({"chat": true, "reasoning": null, "tools": null, "vision": null, "speed": 1}),
    )
    .unwrap_err();
    assert!(e.to_string().contains("unknown field"), "{e}");
    let mut sweep = seed_sweep();
    sweep["relationships"] = json!({});
    assert!(serde_json::from_value::<SpeedSweep>(sweep.clone()).is_err());
    sweep.as_object_mut().unwrap().remove("relationships");
    let s: SpeedSweep = serde_json::from_value(sweep).unwrap();
    // Rows are open: unknown row keys are kept, not dropped.
    assert!(s.rows[0].extra.contains_key("expert_parallel"));
}

/// Many files (over the two-thread threshold): the same records, problems and order as a
/// one-by-one reading would give; `raw_only` keeps the JSON and skips the typed parse.
#[test]
fn many_files_load_in_order_and_raw_only_keeps_the_json() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("model")).unwrap();
    for i in 0..300 {
        let text = if i % 50 == 7 {
            "{".to_string()
        } else {
            servebench_registry::canonical::to_canonical_string(&json!({"id": format!("m{i:03}")}))
        };
        std::fs::write(dir.path().join(format!("model/m{i:03}.json")), text).unwrap();
    }
    let full = Registry::load(dir.path()).unwrap();
    let raw =
        Registry::load_with(dir.path(), servebench_registry::LoadOptions::raw_only()).unwrap();
    let paths: Vec<&str> = full.problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "model/m007.json",
            "model/m057.json",
            "model/m107.json",
            "model/m157.json",
            "model/m207.json",
            "model/m257.json"
        ]
    );
    assert_eq!(full.problems, raw.problems);
    assert_eq!(full.count(Collection::Model), 294);
    let ids: Vec<&str> = full.ids(Collection::Model);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(ids, raw.ids(Collection::Model));
    for (a, b) in full.all().zip(raw.all()) {
        assert_eq!(a.raw, b.raw);
        assert!(a.canonical && b.canonical);
        assert!(b.typed.is_none() && b.parse_error.is_none());
        assert!(a.typed.is_some() || a.parse_error.is_some());
    }
    let taken: Vec<String> = full.into_records().map(|r| r.id).collect();
    assert_eq!(taken.len(), 294);
}

/// Issue 17 item 3: one non-UTF-8 record, a link to a binary outside the registry, a linked
/// collection directory outside it and a `.json` directory are problems among others; the
/// rest is read, and nothing outside the root is followed.
#[cfg(unix)]
#[test]
fn bad_files_and_links_out_are_problems_not_failures() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("reg");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(root.join("recipe")).unwrap();
    std::fs::create_dir_all(root.join("model")).unwrap();
    std::fs::create_dir_all(outside.join("hw")).unwrap();
    std::fs::write(
        root.join("recipe/good.json"),
        json!({"id": "good"}).to_string(),
    )
    .unwrap();
    std::fs::write(
        root.join("recipe/latin1.json"),
        b"{\"id\": \"latin1\", \"n\": \"\xe9\"}",
    )
    .unwrap();
    // A binary outside the registry, reached through a link.
    std::fs::write(outside.join("blob.bin"), [0u8, 159, 146, 150, 255]).unwrap();
    symlink(outside.join("blob.bin"), root.join("recipe/binary.json")).unwrap();
    // A well-formed record outside, reached through a link: still not read.
    std::fs::write(
        outside.join("secret.json"),
        json!({"id": "secret"}).to_string(),
    )
    .unwrap();
    symlink(outside.join("secret.json"), root.join("recipe/secret.json")).unwrap();
    // A link that stays inside is followed.
    std::fs::write(root.join("model/m.json"), json!({"id": "m"}).to_string()).unwrap();
    symlink(root.join("model/m.json"), root.join("model/alias.json")).unwrap();
    symlink("/nonexistent/x.json", root.join("model/dangling.json")).unwrap();
    std::fs::create_dir_all(root.join("model/folder.json")).unwrap();
    // A whole collection directory that leads outside.
    std::fs::write(outside.join("hw/h.json"), json!({"id": "h"}).to_string()).unwrap();
    symlink(outside.join("hw"), root.join("hardware")).unwrap();
    // A collection's place taken by a plain file, and a record file over the size cap (sparse:
    // it costs no disk; it is refused from its size, never read).
    std::fs::write(root.join("speed-sweep"), "not a directory").unwrap();
    // A key given twice: readers disagree on which one counts.
    std::fs::write(
        root.join("recipe/twice.json"),
        r#"{"id": "../../outside/x", "id": "twice"}"#,
    )
    .unwrap();
    let huge = std::fs::File::create(root.join("model/huge.json")).unwrap();
    huge.set_len(servebench_registry::load::MAX_RECORD_BYTES + 1)
        .unwrap();

    let reg = Registry::load(&root).expect("bad files do not stop the loader");
    assert!(reg.get(Collection::Recipe, "good").is_some());
    assert!(reg.get(Collection::Model, "m").is_some());
    assert!(
        reg.get(Collection::Recipe, "secret").is_none(),
        "not followed"
    );
    assert_eq!(
        reg.count(Collection::Hardware),
        0,
        "linked-out directory not read"
    );
    let got: Vec<(String, String)> = reg
        .problems
        .iter()
        .map(|p| (p.path.clone(), p.rule.clone()))
        .collect();
    for (path, rule) in [
        ("recipe/latin1.json", "invalid-utf8"),
        ("recipe/binary.json", "symlink-outside"),
        ("recipe/secret.json", "symlink-outside"),
        ("model/dangling.json", "symlink-outside"),
        ("model/folder.json", "not-a-file"),
        ("model/alias.json", "id-matches-file"),
        ("hardware", "symlink-outside"),
        ("speed-sweep", "not-a-directory"),
        ("model/huge.json", "too-large"),
        ("recipe/twice.json", "duplicate-key"),
    ] {
        assert!(
            got.contains(&(path.to_string(), rule.to_string())),
            "{path}: {rule} missing from {got:?}"
        );
    }
    // The validator lists them with the rest.
    let problems = servebench_registry::validate::validate(&reg);
    assert!(problems.iter().any(|p| p.rule == "invalid-utf8"));
    assert!(problems
        .iter()
        .any(|p| p.path.starts_with("recipe/good.json")));
    // The server's loader mode too.
    let raw = Registry::load_with(&root, servebench_registry::LoadOptions::raw_only()).unwrap();
    assert!(raw.get(Collection::Recipe, "good").is_some());
}
