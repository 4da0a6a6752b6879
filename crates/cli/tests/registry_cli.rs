//! `servebench run` → `servebench publish` → `servebench registry validate` on a fresh
//! registry, the seed record imported into the same registry, `registry trust`, and the exit
//! codes of the registry commands (0 valid, 1 problems, 2 bad flags).

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use servebench_registry::schema::Schemas;
use servebench_registry::{Collection, Registry};

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

#[test]
fn simulator_run_publishes_into_a_valid_registry() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The embedded simulator (no --url), two short cells, cold + warm prefill, one burst cell.
    let run = sb(
        &[
            "run",
            "--concurrency",
            "1,2",
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
            "64",
            "--standalone-prefill",
            "--prefill-contexts",
            "256",
            "--run-burst",
            "--burst-request-count",
            "2",
            "-q",
            "-o",
            "run.json",
        ],
        d,
    );
    assert!(run.status.success());
    let publish = sb(
        &[
            "publish",
            "run.json",
            "--registry",
            "reg",
            "--recipe",
            "sim-recipe",
        ],
        d,
    );
    assert!(
        publish.status.success(),
        "publish validates the registry it wrote"
    );
    let stdout = String::from_utf8_lossy(&publish.stdout);
    assert!(
        stdout.contains("published speed-sweep sim-recipe-"),
        "{stdout}"
    );
    assert!(stdout.contains("accepted-cold-prefill"), "{stdout}");

    let validate = sb(&["registry", "validate", "reg"], d);
    assert!(validate.status.success());
    assert!(validate.stdout.is_empty());

    // Every record the project wrote conforms to its committed schema.
    let reg = Registry::load(d.join("reg")).unwrap();
    let schemas = Schemas::new();
    for c in Collection::ALL {
        assert_eq!(reg.count(c), 1, "{c}: one record (drafted or published)");
    }
    for r in reg.all() {
        assert!(
            schemas.check(r.collection, &r.raw).is_empty(),
            "{}",
            r.rel_path
        );
        assert!(r.typed.is_some(), "{}: {:?}", r.rel_path, r.parse_error);
    }
    let sweep = reg.records(Collection::SpeedSweep).next().unwrap();
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        sweep.raw["measured_at"], results["metadata"]["started_at"],
        "measured_at comes from the run"
    );
    let layers: Vec<&str> = sweep.raw["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["layer"].as_str().unwrap())
        .collect();
    assert_eq!(
        layers,
        [
            "prefill",
            "prefill_warm",
            "sustained_decode",
            "sustained_decode",
            "burst_e2e",
            "burst_e2e"
        ]
    );
    // The program is recorded by name, never the build path it ran from.
    assert_eq!(sweep.raw["source"]["command"][0], "servebench");
    let bytes = std::fs::read(d.join("run.json")).unwrap();
    assert_eq!(
        sweep.raw["source"]["results_sha256"],
        servebench_registry::publish::sha256_hex(&bytes)
    );

    // The seed record lives in the same registry.
    let import = sb(&["registry", "import", &seed(), "--registry", "reg"], d);
    assert!(import.status.success());
    let validate = sb(&["registry", "validate", "reg"], d);
    assert!(validate.status.success());
    let trust = sb(&["registry", "trust", "reg", "--check"], d);
    assert!(trust.status.success());

    // A second publish of the same run never overwrites the evidence.
    let again = sb(
        &[
            "publish",
            "run.json",
            "--registry",
            "reg",
            "--recipe",
            "sim-recipe",
        ],
        d,
    );
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    // With another sweep id and the first as baseline it publishes again.
    let first = sweep.id.clone();
    let second = sb(
        &[
            "publish",
            "run.json",
            "--registry",
            "reg",
            "--recipe",
            "sim-recipe",
            "--sweep-id",
            "sim-recipe-rerun",
            "--baseline",
            &first,
        ],
        d,
    );
    assert!(second.status.success());
    let reg = Registry::load(d.join("reg")).unwrap();
    assert_eq!(reg.recipe("sim-recipe").unwrap().speed_sweep_ids.len(), 2);
}

#[test]
fn validate_reports_problems_one_per_line_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(sb(&["registry", "import", &seed(), "--registry", "reg"], d)
        .status
        .success());
    // Break it: the recipe claims validated, a row's TTFT is 0.2 ms.
    let recipe_path = std::fs::read_dir(d.join("reg/recipe"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut recipe: Value =
        serde_json::from_str(&std::fs::read_to_string(&recipe_path).unwrap()).unwrap();
    recipe["status"] = "validated".into();
    std::fs::write(
        &recipe_path,
        servebench_registry::canonical::to_canonical_string(&recipe),
    )
    .unwrap();
    let sweep_path = std::fs::read_dir(d.join("reg/speed-sweep"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut sweep: Value =
        serde_json::from_str(&std::fs::read_to_string(&sweep_path).unwrap()).unwrap();
    sweep["rows"][0]["ttft_ms_p50"] = 0.2.into();
    std::fs::write(
        &sweep_path,
        servebench_registry::canonical::to_canonical_string(&sweep),
    )
    .unwrap();

    let out = sb(&["registry", "validate", "reg"], d);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for rule in ["trust-status", "validated-launch", "plausibility"] {
        assert!(
            stdout.lines().any(|l| l.contains(&format!(": {rule}: "))),
            "{rule}: {stdout}"
        );
    }
    for l in stdout.lines() {
        assert!(l.starts_with("reg/"), "{l}");
        assert_eq!(l.splitn(3, ": ").count(), 3, "{l}");
    }
    // trust rewrites the status; then only the TTFT remains.
    let check = sb(&["registry", "trust", "reg", "--check"], d);
    assert_eq!(check.status.code(), Some(1));
    assert!(sb(&["registry", "trust", "reg"], d).status.success());
    let out = sb(&["registry", "validate", "reg"], d);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.contains("plausibility"));

    // Bad input: clear one-line errors, no panic.
    let missing = sb(&["registry", "validate", "no-such-dir"], d);
    assert_eq!(missing.status.code(), Some(2));
    let bad_recipe = sb(
        &[
            "publish",
            &seed(),
            "--registry",
            "reg2",
            "--recipe",
            "Bad Id",
        ],
        d,
    );
    assert_ne!(bad_recipe.status.code(), Some(0));
    let not_results = sb(
        &[
            "publish",
            &seed(),
            "--registry",
            "reg2",
            "--recipe",
            "ok-id",
        ],
        d,
    );
    assert_eq!(not_results.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&not_results.stderr).contains("not a servebench results file"));
    let not_json = sb(
        &["registry", "import", "reg/recipe", "--registry", "reg"],
        d,
    );
    assert_eq!(not_json.status.code(), Some(1));
}
