//! Issue 17 items 1–3: registry writes stay inside the registry, are validated before they
//! happen and change all files or none; `registry validate` and the server's loader survive
//! bad files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_servebench");

fn sb(args: &[&str], cwd: &Path) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run servebench");
    eprintln!(
        "$ servebench {}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn seed() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/registry/seed-001-speed-sweep-envelope.json"
    )
    .to_string()
}

/// Every file under `d` (following nothing) with its bytes.
fn files(d: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(d) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(files(&p));
        } else if t.is_file() {
            out.insert(p.clone(), std::fs::read(&p).unwrap());
        }
    }
    out
}

fn write_json(p: &Path, v: &Value) {
    std::fs::write(p, serde_json::to_string(v).unwrap()).unwrap();
}

#[test]
fn import_refuses_ids_that_leave_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("a/b");
    std::fs::create_dir_all(&d).unwrap();
    let hw = json!({"schema_version": "local-ai-registry/v1", "id": "../../pwned-hw",
        "memory": {"vram_gb": 1}, "vendor": "x", "kind": "gpu", "accelerator_backend": "cuda"});
    write_json(&d.join("hw.json"), &hw);
    // A sweep whose recipe_id climbs out: its drafted recipe would land outside.
    let mut sweep: Value = serde_json::from_str(&std::fs::read_to_string(seed()).unwrap()).unwrap();
    sweep["data"]["recipe_id"] = json!("../../../pwned-recipe");
    write_json(&d.join("sweep.json"), &sweep);
    for f in ["hw.json", "sweep.json"] {
        let out = sb(&["registry", "import", f, "--registry", "reg"], &d);
        assert_eq!(out.status.code(), Some(1), "{f}: refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is not valid"), "{err}");
        assert_eq!(
            err.matches("nothing was written").count(),
            1,
            "said once: {err}"
        );
    }
    let all = files(dir.path());
    assert!(
        all.keys().all(|p| !p.to_string_lossy().contains("pwned")),
        "{:?}",
        all.keys()
    );
    assert!(
        files(&d.join("reg")).is_empty(),
        "nothing written inside either"
    );
}

#[test]
fn import_of_schema_invalid_records_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(sb(&["registry", "import", &seed(), "--registry", "reg"], d)
        .status
        .success());
    assert!(sb(&["registry", "validate", "reg"], d).status.success());
    let before = files(&d.join("reg"));
    // A second sweep for the same recipe, schema-invalid (rows is not a list, an unknown
    // top-level key in a closed record): the recipe would be edited to link it.
    let mut bad: Value = serde_json::from_str(&std::fs::read_to_string(seed()).unwrap()).unwrap();
    bad["data"]["id"] = json!("second-sweep");
    bad["data"]["rows"] = json!("not rows");
    bad["data"]["surprise"] = json!(1);
    write_json(&d.join("bad.json"), &bad);
    // Two files in one import: the good one is not written either (all or none).
    let hw = json!({"schema_version": "local-ai-registry/v1", "id": "ok-hw", "name": "x",
        "memory": {"vram_gb": 24}, "vendor": "nvidia", "kind": "gpu", "accelerator_backend": "cuda"});
    write_json(&d.join("hw.json"), &hw);
    let out = sb(
        &[
            "registry",
            "import",
            "hw.json",
            "bad.json",
            "--registry",
            "reg",
        ],
        d,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(": schema: "), "{err}");
    assert!(err.contains("would leave the registry invalid"), "{err}");
    assert_eq!(files(&d.join("reg")), before, "every file as it was");
    assert!(sb(&["registry", "validate", "reg"], d).status.success());
}

/// Break-it round 8: an import that is valid itself but breaks another file (a recipe that
/// drops its sweep's link, hardware with 0.001 GB of VRAM under an untouched sweep) exited 0
/// and left the registry invalid.
#[test]
fn an_import_that_breaks_an_untouched_file_is_refused() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/registry");
    let recipe = format!("{examples}/recipe/servebench-sim-builtin-tp1.json");
    let hw = format!("{examples}/hardware/rtx-pro-6000-blackwell-96gb.json");
    type Edit<'a> = (&'a str, &'a str, fn(&mut Value));
    let edits: [Edit<'_>; 2] = [
        (&recipe, "recipe.json", |v| v["speed_sweep_ids"] = json!([])),
        (&hw, "hw.json", |v| v["memory"]["vram_gb"] = json!(0.001)),
    ];
    for (src, name, edit) in edits {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let reg = d.join("reg");
        let cp = Command::new("cp")
            .args(["-r", examples, reg.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(cp.success());
        assert!(sb(&["registry", "validate", "reg"], d).status.success());
        let before = files(&reg);
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(src).unwrap()).unwrap();
        edit(&mut v);
        write_json(&d.join(name), &v);
        let out = sb(&["registry", "import", name, "--registry", "reg"], d);
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("would leave the registry invalid"),
            "{name}"
        );
        assert_eq!(files(&reg), before, "{name}: every file as it was");
        assert!(sb(&["registry", "validate", "reg"], d).status.success());
    }
}

fn sim_run(d: &Path) {
    let run = sb(
        &[
            "run",
            "--concurrency",
            "1",
            "--contexts",
            "256",
            "--duration",
            "1",
            "--stable-seconds",
            "0.5",
            "--decode-warmup-seconds",
            "0",
            "--cell-pause-seconds",
            "0",
            "--max-tokens",
            "32",
            "-q",
            "-o",
            "run.json",
        ],
        d,
    );
    assert!(run.status.success());
}

#[cfg(unix)]
#[test]
fn publish_refuses_impossible_results_and_paths_out_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    sim_run(d);
    let good: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("run.json")).unwrap()).unwrap();
    for (name, ptr, v) in [
        ("neg-ttft.json", "/results/0/ttft_p50", json!(-0.004)),
        (
            "bad-start.json",
            "/metadata/started_at",
            json!("2026-13-45 nope"),
        ),
        ("neg-tps.json", "/results/0/aggregate_tps", json!(-12.5)),
        ("p50-over-p99.json", "/results/0/ttft_p50", json!(99.0)),
        // break-it round 9: in order and positive, but beyond any request's latency
        ("huge-ttft.json", "/results/0/ttft_p99", json!(1e300)),
        (
            "year-0.json",
            "/metadata/started_at",
            json!("0000-01-01T00:00:00Z"),
        ),
    ] {
        let mut bad = good.clone();
        *bad.pointer_mut(ptr).unwrap() = v;
        write_json(&d.join(name), &bad);
        let val = sb(&["validate", name], d);
        assert_eq!(val.status.code(), Some(1), "{name}: validate refuses it");
        assert!(String::from_utf8_lossy(&val.stderr).contains("impossible value"));
        let out = sb(&["publish", name, "--registry", "reg", "--recipe", "r1"], d);
        assert_eq!(out.status.code(), Some(1), "{name}: publish refuses it");
        assert!(
            files(&d.join("reg")).is_empty(),
            "{name}: nothing written before the refusal"
        );
    }
    // Files `validate` refuses on their schema are not published either (break-it round 9: a
    // schema_version 999 and a C of 0 were).
    for (name, ptr, v) in [
        ("schema-999.json", "/schema_version", json!("999")),
        ("c0.json", "/results/0/concurrency", json!(0)),
    ] {
        let mut bad = good.clone();
        *bad.pointer_mut(ptr).unwrap() = v;
        write_json(&d.join(name), &bad);
        assert_eq!(sb(&["validate", name], d).status.code(), Some(1), "{name}");
        let out = sb(&["publish", name, "--registry", "reg", "--recipe", "r1"], d);
        assert_eq!(out.status.code(), Some(1), "{name}: publish refuses it");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("is not published"),
            "{name}"
        );
        assert!(files(&d.join("reg")).is_empty(), "{name}");
    }
    // A key given twice (break-it round 9: `-100` then `100` validated and published).
    let text = std::fs::read_to_string(d.join("run.json")).unwrap();
    let twice = text.replacen('{', r#"{"run_complete": false, "#, 1);
    std::fs::write(d.join("twice.json"), twice).unwrap();
    let val = sb(&["validate", "twice.json"], d);
    assert_eq!(val.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&val.stderr).contains("more than once"));
    let out = sb(
        &[
            "publish",
            "twice.json",
            "--registry",
            "reg",
            "--recipe",
            "r1",
        ],
        d,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(files(&d.join("reg")).is_empty());
    // A device or a FIFO is refused at once, never read (break-it round 9: `publish /dev/zero`
    // read until memory ran out).
    let fifo = d.join("fifo.json");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for input in ["/dev/zero", "fifo.json"] {
        let t0 = std::time::Instant::now();
        let out = sb(
            &["publish", input, "--registry", "reg", "--recipe", "r1"],
            d,
        );
        assert_eq!(out.status.code(), Some(1), "{input}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("not a regular file"),
            "{input}"
        );
        assert!(t0.elapsed() < std::time::Duration::from_secs(20), "{input}");
    }
    assert!(sb(&["validate", "run.json"], d).status.success());
    // Flag ids that are no ids: exit 2, nothing written.
    for (flag, id) in [
        ("--recipe", "../../x"),
        ("--sweep-id", "../x"),
        ("--hardware", "../x"),
        ("--model-instance", "a/../../b"),
    ] {
        let mut args = vec!["publish", "run.json", "--registry", "reg"];
        if flag != "--recipe" {
            args.extend(["--recipe", "r1"]);
        }
        args.extend([flag, id]);
        let out = sb(&args, d);
        assert_eq!(out.status.code(), Some(2), "{flag} {id}");
    }
    assert!(files(&d.join("reg")).is_empty());
    // A collection directory that is a link out of the registry: refused, nothing outside.
    let outside = d.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(d.join("reg")).unwrap();
    std::os::unix::fs::symlink(&outside, d.join("reg/speed-sweep")).unwrap();
    let out = sb(
        &["publish", "run.json", "--registry", "reg", "--recipe", "r1"],
        d,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not inside the registry"),
        "refused with the reason"
    );
    assert!(files(&outside).is_empty(), "nothing written outside");
    assert!(files(&d.join("reg")).is_empty(), "nor inside");
    // Without the link the same publish works and validates.
    std::fs::remove_file(d.join("reg/speed-sweep")).unwrap();
    let out = sb(
        &["publish", "run.json", "--registry", "reg", "--recipe", "r1"],
        d,
    );
    assert!(out.status.success());
    // A recipe file that exists but could not be read is not replaced by a fresh draft
    // (break-it round 11: one read during a directory swap overwrote the real recipe).
    std::fs::create_dir_all(d.join("reg3/recipe")).unwrap();
    std::fs::write(d.join("reg3/recipe/r1.json"), "{ broken").unwrap();
    let out = sb(
        &[
            "publish",
            "run.json",
            "--registry",
            "reg3",
            "--recipe",
            "r1",
        ],
        d,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("was not read"),
        "refused with the reason"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("reg3/recipe/r1.json")).unwrap(),
        "{ broken"
    );
    assert!(!d.join("reg3/speed-sweep").exists() || files(&d.join("reg3/speed-sweep")).is_empty());
    // New files get the mode `File::create` gives (0644 under umask 022), not a temporary
    // file's 0600 (issue 17 break-it round: a web server or another user could not read them).
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    std::fs::File::create(d.join("reference")).unwrap();
    let want = mode(&d.join("reference"));
    let written = files(&d.join("reg"));
    assert!(!written.is_empty());
    for p in written.keys() {
        assert_eq!(mode(p), want, "{}", p.display());
    }
}

#[cfg(unix)]
#[test]
fn validate_and_the_server_loader_survive_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(sb(&["registry", "import", &seed(), "--registry", "reg"], d)
        .status
        .success());
    std::fs::write(
        d.join("reg/recipe/latin1.json"),
        b"{\"id\": \"latin1\", \"x\": \"\xe9\"}",
    )
    .unwrap();
    let bin = d.join("blob");
    std::fs::write(&bin, [0u8, 0xff, 0xfe, 0x80, 0x00]).unwrap();
    std::os::unix::fs::symlink(&bin, d.join("reg/model/binary.json")).unwrap();
    let out = sb(&["registry", "validate", "reg"], d);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("reg/recipe/latin1.json: invalid-utf8: "),
        "{stdout}"
    );
    assert!(
        stdout.contains("reg/model/binary.json: symlink-outside: "),
        "{stdout}"
    );
    // The other records were still read and checked: the seed's recipe links its sweep.
    assert_eq!(
        stdout.lines().count(),
        2,
        "only the two bad files: {stdout}"
    );
    // `registry serve` loads through the same loader: it starts and serves the rest.
    let snap = servebench_registry_server::snapshot::load(&d.join("reg")).expect("loads");
    assert_eq!(snap.problems.len(), 2, "{:?}", snap.problems);
    // `registry trust` names the files it could not take instead of passing over them.
    let out = sb(&["registry", "trust", "reg", "--check"], d);
    let err = String::from_utf8_lossy(&out.stderr);
    for f in ["recipe/latin1.json", "model/binary.json"] {
        assert!(err.contains(&format!("{f} skipped")), "{f}: {err}");
    }
}

/// Break-it round 10: `registry trust --check` passed when the recipe directory did not load
/// (a link out of the registry: nothing was judged); a write into a registry whose collection
/// place is taken by a plain file said only "File exists".
#[cfg(unix)]
#[test]
fn trust_fails_when_recipes_were_skipped_and_a_file_in_a_collections_place_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(sb(&["registry", "import", &seed(), "--registry", "reg"], d)
        .status
        .success());
    assert!(sb(&["registry", "trust", "reg", "--check"], d)
        .status
        .success());
    let outside = d.join("outside-recipes");
    std::fs::rename(d.join("reg/recipe"), &outside).unwrap();
    std::os::unix::fs::symlink(&outside, d.join("reg/recipe")).unwrap();
    for args in [
        &["registry", "trust", "reg", "--check"][..],
        &["registry", "trust", "reg"][..],
    ] {
        let out = sb(args, d);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("were not judged"),
            "{args:?}"
        );
    }
    // A plain file where `hardware/` belongs: the import names it.
    let reg2 = d.join("reg2");
    std::fs::create_dir_all(&reg2).unwrap();
    std::fs::write(reg2.join("hardware"), "x").unwrap();
    let out = sb(&["registry", "import", &seed(), "--registry", "reg2"], d);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a directory") || err.contains("takes this collection's place"),
        "{err}"
    );
}
