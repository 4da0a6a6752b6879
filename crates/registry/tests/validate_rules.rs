//! Every validation rule: a valid registry validates clean, and for each rule a record that
//! breaks it is reported under that rule id.

use serde_json::{json, Value};
use servebench_registry::canonical::to_canonical_string;
use servebench_registry::records::SweepRow;
use servebench_registry::{metrics, validate, Collection, Problem, Registry, SCHEMA_VERSION};

const DIGEST: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const REV: &str = "99cccdf0e8741715662c383828a9ea601990c125";
const RECIPE: &str = "qwen3-0-6b-bf16-rtx4090-vllm-tp1";
const SWEEP: &str = "qwen3-0-6b-bf16-rtx4090-vllm-tp1-20260901-abcdefghijkl";

fn prov() -> Value {
    json!({"sources": [{"kind": "vendor", "url": "https://example.com/spec"}], "captured_at": "2026-09-01T00:00:00Z"})
}

fn rows() -> Value {
    json!([
        {"status": "accepted-warm-prefix-c1", "concurrency": 1, "context_tokens": 512, "output_tokens": 256,
         "prefill_tok_s": null, "decode_tok_s": 150.0, "decode_tok_s_per_stream": 151.0, "ttft_ms_p50": 40.0,
         "peak_vram_gb": 20.5, "samples": 3, "layer": "sustained_decode", "context_label_tokens": 512,
         "verdict": {"verdict": "accepted", "cache": "warm-prefix", "profile": "c1", "rule": "accepted"}},
        {"status": "accepted-cold-prefill", "concurrency": 1, "context_tokens": 4096, "output_tokens": null,
         "prefill_tok_s": 9000.0, "decode_tok_s": null, "ttft_ms_p50": 455.0, "peak_vram_gb": null, "samples": 1,
         "layer": "prefill", "context_label_tokens": 4096,
         "verdict": {"verdict": "accepted", "cache": "cold", "profile": "prefill", "rule": "accepted"}},
        {"status": "not-run", "concurrency": 64, "context_tokens": 4096, "output_tokens": 256,
         "prefill_tok_s": null, "decode_tok_s": null, "ttft_ms_p50": null, "peak_vram_gb": null, "samples": null,
         "layer": "sustained_decode", "verdict": {"verdict": "not-run", "rule": "not-run", "reason": "skipped_capacity"}}
    ])
}

fn sweep() -> Value {
    let rows = rows();
    let typed: Vec<SweepRow> = serde_json::from_value(rows.clone()).unwrap();
    let m = metrics::derive(&typed, Some("2026-09-01T10:00:00.000Z"));
    json!({
        "schema_version": SCHEMA_VERSION, "id": SWEEP, "recipe_id": RECIPE,
        "measured_at": "2026-09-01T10:00:00.000Z", "accepted_at": "2026-09-01T11:00:00.000Z",
        "source": {"kind": "servebench-run", "url": "urn:servebench:run:abcdefghijkl",
                   "tool": {"name": "servebench", "version": "0.1.0"}, "command": ["servebench", "publish"],
                   "results_sha256": DIGEST, "run_id": "abcdefghijkl", "metric_rule": metrics::METRIC_RULE,
                   "peak_generation_rate_kind": "aggregate", "captured_at": "2026-09-01T11:00:00.000Z",
                   "engine": {"name": "vllm", "version": "0.11.0"}, "model": "Qwen/Qwen3-0.6B",
                   "host": {"hostname": "bench-1", "hardware_id": "rtx-4090-24gb", "hardware_count": 1}},
        "metrics": serde_json::to_value(m).unwrap(),
        "rows": rows,
    })
}

fn records() -> Vec<(Collection, Value)> {
    vec![
        (
            Collection::Hardware,
            json!({
                "schema_version": SCHEMA_VERSION, "id": "rtx-4090-24gb", "vendor": "nvidia", "name": "GeForce RTX 4090",
                "kind": "discrete", "accelerator_backend": "nvidia",
                "memory": {"vram_gb": 24, "vram_type": "GDDR6X"},
                "sources": [{"kind": "vendor", "url": "https://www.nvidia.com/"}],
            }),
        ),
        (
            Collection::Model,
            json!({
                "schema_version": SCHEMA_VERSION, "id": "qwen3-0-6b", "family": "qwen3", "name": "Qwen3 0.6B",
                "params": 0.6, "active_params": null, "architecture": "dense", "url": null,
                "huggingface": {"repository": "Qwen/Qwen3-0.6B", "url": "https://huggingface.co/Qwen/Qwen3-0.6B",
                    "status": "known", "link_type": "repository", "reason": "checked",
                    "provenance": {"sources": [{"kind": "huggingface-api", "url": "https://huggingface.co/api/models/Qwen/Qwen3-0.6B"}],
                                   "captured_at": "2026-09-01T00:00:00Z"}},
                "provenance": prov(), "facts": {},
            }),
        ),
        (
            Collection::ModelInstance,
            json!({
                "schema_version": SCHEMA_VERSION, "id": "qwen-qwen3-0-6b--bf16", "model_id": "qwen3-0-6b",
                "repository": "Qwen/Qwen3-0.6B", "revision": REV, "served_name": "Qwen/Qwen3-0.6B",
                "weights": {"format": "safetensors", "precision": "bf16", "size_gb": 1.4}, "kind": "base",
                "huggingface": {"repository": null, "url": "https://huggingface.co/models?search=qwen3", "status": "unknown",
                    "link_type": "search", "reason": "not checked", "provenance": prov()},
                "provenance": prov(), "facts": {},
            }),
        ),
        (
            Collection::Recipe,
            json!({
                "schema_version": SCHEMA_VERSION, "id": RECIPE, "recipe_source": "servebench", "status": "validated",
                "model_instance_id": "qwen-qwen3-0-6b--bf16", "hardware_id": "rtx-4090-24gb", "hardware_count": 1,
                "engine": {"name": "vllm", "version": "0.11.0", "graph_mode": null},
                "launch": {"kind": "docker", "image": format!("vllm/vllm-openai@sha256:{DIGEST}"),
                    "arguments": ["--model", "Qwen/Qwen3-0.6B", "--max-model-len", "4096"],
                    "host_port": 8000, "container_port": 8000, "accelerator_backend": "nvidia",
                    "mounts": [{"source": "~/.cache/huggingface", "target": "/root/.cache/huggingface"}],
                    "container": {"state": "digest-pinned", "runtime": "docker", "image": format!("vllm/vllm-openai@sha256:{DIGEST}"),
                        "digest": format!("sha256:{DIGEST}"), "compose_file": null,
                        "source": [{"kind": "oci-image", "url": "https://hub.docker.com/r/vllm/vllm-openai"}],
                        "captured_at": "2026-09-01T00:00:00Z", "reason": "image-reference-in-launch"}},
                "serving": {"max_context_tokens": 4096}, "capabilities": {"chat": true, "reasoning": null, "tools": null, "vision": false},
                "speed_sweep_ids": [SWEEP], "metadata": {}, "provenance": prov(), "facts": {},
            }),
        ),
        (Collection::SpeedSweep, sweep()),
    ]
}

/// Writes `recs` canonically (with `edit` applied to the JSON first) and validates.
fn check(edit: impl FnOnce(&mut Vec<(Collection, Value)>)) -> (Vec<Problem>, tempfile::TempDir) {
    let mut recs = records();
    edit(&mut recs);
    let dir = tempfile::tempdir().unwrap();
    for (c, v) in &recs {
        let id = v["id"].as_str().unwrap();
        let p = dir.path().join(c.dir_name()).join(format!("{id}.json"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, to_canonical_string(v)).unwrap();
    }
    (
        validate::validate(&Registry::load(dir.path()).unwrap()),
        dir,
    )
}

fn get(recs: &mut [(Collection, Value)], c: Collection) -> &mut Value {
    &mut recs.iter_mut().find(|(x, _)| *x == c).unwrap().1
}

fn expect_rule(problems: &[Problem], rule: &str, path_part: &str) {
    assert!(
        problems
            .iter()
            .any(|p| p.rule == rule && p.path.contains(path_part)),
        "want rule {rule} at {path_part}; got:\n{}",
        problems
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn valid_registry_is_clean_and_validated() {
    let (p, dir) = check(|_| {});
    assert!(p.is_empty(), "{p:#?}");
    let reg = Registry::load(dir.path()).unwrap();
    assert!(servebench_registry::trust::status_changes(&reg).is_empty());
}

/// (rule, path fragment, edit) for every rule that one record can break.
type Case = (
    &'static str,
    &'static str,
    Box<dyn FnOnce(&mut Vec<(Collection, Value)>)>,
);

#[test]
fn every_rule_sees_its_breakage() {
    use Collection::*;
    let cases: Vec<Case> = vec![
        (
            "schema",
            "recipe/",
            Box::new(|r| {
                get(r, Recipe)["bogus"] = json!(1);
            }),
        ),
        (
            "schema",
            "#/capabilities",
            Box::new(|r| {
                get(r, Recipe)["capabilities"]["speed"] = json!(true);
            }),
        ),
        (
            "schema",
            "#/metrics",
            Box::new(|r| {
                get(r, SpeedSweep)["metrics"]["fastest"] = json!(1);
            }),
        ),
        (
            "reference-resolves",
            "#/hardware_id",
            Box::new(|r| {
                get(r, Recipe)["hardware_id"] = json!("rtx-5090-32gb");
            }),
        ),
        (
            "reference-resolves",
            "#/model_id",
            Box::new(|r| {
                get(r, ModelInstance)["model_id"] = json!("nope");
            }),
        ),
        (
            "reference-resolves",
            "#/speed_sweep_ids/1",
            Box::new(|r| {
                get(r, Recipe)["speed_sweep_ids"] = json!([SWEEP, "missing-sweep"]);
            }),
        ),
        (
            "sweep-recipe-link",
            "speed-sweep/",
            Box::new(|r| {
                get(r, Recipe)["speed_sweep_ids"] = json!([]);
                get(r, Recipe)["status"] = json!("candidate");
            }),
        ),
        (
            "unknown-needs-fact",
            "#/vendor",
            Box::new(|r| {
                get(r, Hardware)["vendor"] = Value::Null;
            }),
        ),
        (
            "timestamp",
            "#/provenance/captured_at",
            Box::new(|r| {
                get(r, Model)["provenance"]["captured_at"] = json!("2026-09-01 00:00");
            }),
        ),
        (
            "timestamp",
            "#/measured_at",
            Box::new(|r| {
                get(r, SpeedSweep)["measured_at"] = json!("last tuesday");
            }),
        ),
        (
            "accepted-after-measured",
            "#/accepted_at",
            Box::new(|r| {
                get(r, SpeedSweep)["accepted_at"] = json!("2026-09-01T09:00:00Z");
            }),
        ),
        (
            "hf-identity",
            "#/huggingface/url",
            Box::new(|r| {
                get(r, Model)["huggingface"]["url"] = json!("https://huggingface.co/Qwen/Other");
            }),
        ),
        (
            "hf-identity",
            "#/huggingface/status",
            Box::new(|r| {
                get(r, Model)["huggingface"]["provenance"]["sources"][0]["kind"] = json!("vendor");
            }),
        ),
        (
            "positive-vram",
            "#/memory/vram_gb",
            Box::new(|r| {
                get(r, Hardware)["memory"]["vram_gb"] = json!(0);
            }),
        ),
        (
            "model-params",
            "#/params",
            Box::new(|r| {
                get(r, Model)["params"] = json!(-1);
            }),
        ),
        (
            "recipe-source",
            "#/recipe_source",
            Box::new(|r| {
                get(r, Recipe)["recipe_source"] = json!("omlx");
            }),
        ),
        (
            "launch-tokens",
            "#/launch/arguments/1",
            Box::new(|r| {
                get(r, Recipe)["launch"]["arguments"][1] = json!("x && rm -rf /");
            }),
        ),
        (
            "launch-tokens",
            "#/launch",
            Box::new(|r| {
                get(r, Recipe)["launch"]["command_snippet"] = json!("vllm serve");
            }),
        ),
        (
            "reference-launch",
            "#/launch/image",
            Box::new(|r| {
                let l = &mut get(r, Recipe)["launch"];
                l["kind"] = json!("reference");
                l["container"] = json!({"state": "none", "runtime": null, "image": null, "digest": null, "compose_file": null,
                "source": [{"kind": "x", "url": "urn:x"}], "captured_at": "2026-09-01T00:00:00Z", "reason": "r"});
            }),
        ),
        (
            "container",
            "#/launch/container/state",
            Box::new(|r| {
                get(r, Recipe)["launch"]["container"]["state"] = json!("mutable");
            }),
        ),
        (
            "container",
            "#/launch/container/digest",
            Box::new(|r| {
                get(r, Recipe)["launch"]["container"]["digest"] =
                    json!(format!("sha256:{}", "f".repeat(64)));
            }),
        ),
        (
            "container",
            "#/launch",
            Box::new(|r| {
                get(r, Recipe)["launch"]
                    .as_object_mut()
                    .unwrap()
                    .remove("container");
            }),
        ),
        (
            "validated-launch",
            "#/launch",
            Box::new(|r| {
                get(r, Recipe)["launch"]["arguments"][3] = json!("--enforce-eager");
            }),
        ),
        (
            "validated-launch",
            "#/launch/mounts/0/source",
            Box::new(|r| {
                get(r, Recipe)["launch"]["mounts"][0]["source"] = json!("asset/missing.yml");
            }),
        ),
        (
            "validated-launch",
            "#/serving/max_context_tokens",
            Box::new(|r| {
                get(r, Recipe)["serving"] = json!({});
            }),
        ),
        (
            "draft-launch",
            "#/draft_launch",
            Box::new(|r| {
                get(r, Recipe)["draft_launch"] = json!({"kind": "docker", "image": "x:latest"});
            }),
        ),
        (
            "trust-status",
            "#/status",
            Box::new(|r| {
                get(r, SpeedSweep)["source"]
                    .as_object_mut()
                    .unwrap()
                    .remove("results_sha256");
            }),
        ),
        (
            "trust-status",
            "#/status",
            Box::new(|r| {
                get(r, ModelInstance)["revision"] = json!("main");
            }),
        ),
        (
            "trust-status",
            "#/status",
            Box::new(|r| {
                get(r, SpeedSweep)["accepted_at"] = Value::Null;
            }),
        ),
        (
            "row-status",
            "#/rows/0/status",
            Box::new(|r| {
                get(r, SpeedSweep)["rows"][0]["status"] = json!("accepted-warm-prefix-c2");
            }),
        ),
        (
            "row-status",
            "#/rows/2/status",
            Box::new(|r| {
                get(r, SpeedSweep)["rows"][2]["status"] = json!("fine");
                get(r, SpeedSweep)["rows"][2]
                    .as_object_mut()
                    .unwrap()
                    .remove("verdict");
            }),
        ),
        (
            "schema",
            "#/source/results_sha256",
            Box::new(|r| {
                get(r, SpeedSweep)["source"]["results_sha256"] = json!("not-a-hash");
            }),
        ),
        (
            "metrics-rule",
            "#/metrics",
            Box::new(|r| {
                get(r, SpeedSweep)["metrics"]["point_count"] = json!(3);
            }),
        ),
        (
            "plausibility",
            "#/rows/0/ttft_ms_p50",
            Box::new(|r| {
                get(r, SpeedSweep)["rows"][0]["ttft_ms_p50"] = json!(0.2);
            }),
        ),
        (
            "plausibility",
            "#/rows/1/prefill_tok_s",
            Box::new(|r| {
                get(r, SpeedSweep)["rows"][1]["prefill_tok_s"] = json!(1_495_084.0);
            }),
        ),
        (
            "plausibility",
            "#/rows/0/decode_tok_s_per_stream",
            Box::new(|r| {
                get(r, SpeedSweep)["rows"][0]["decode_tok_s_per_stream"] = json!(12_000.0);
            }),
        ),
        (
            "plausibility",
            "#/rows/0/decode_tok_s",
            Box::new(|r| {
                get(r, SpeedSweep)["rows"][0]["decode_tok_s"] = json!(400.0);
            }),
        ),
        (
            "plausibility",
            "#/rows/0/peak_vram_gb",
            Box::new(|r| {
                get(r, SpeedSweep)["rows"][0]["peak_vram_gb"] = json!(23_691.0);
            }),
        ),
        (
            "plausibility",
            "#/rows/0/context_tokens",
            Box::new(|r| {
                get(r, SpeedSweep)["rows"][0]["context_tokens"] = json!(40_960_000u64);
            }),
        ),
        (
            "plausibility",
            "#/serving/max_context_tokens",
            Box::new(|r| {
                get(r, Recipe)["serving"]["max_context_tokens"] = json!(40_960_000u64);
            }),
        ),
    ];
    for (rule, path, edit) in cases {
        let (p, _dir) = check(edit);
        expect_rule(&p, rule, path);
    }
}

#[test]
fn loading_rules() {
    let (_, dir) = check(|_| {});
    let root = dir.path();
    std::fs::write(root.join("model/broken.json"), "{not json").unwrap();
    std::fs::write(
        root.join("model/renamed.json"),
        to_canonical_string(&json!({"id": "other"})),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("speed-sweeps")).unwrap();
    std::fs::copy(
        root.join(format!("speed-sweep/{SWEEP}.json")),
        root.join(format!("speed-sweeps/{SWEEP}.json")),
    )
    .unwrap();
    std::fs::write(
        root.join("hardware/rtx-4090-24gb.json"),
        serde_json::to_string(&records()[0].1).unwrap(),
    )
    .unwrap();
    let bad_id = json!({"id": "Bad_Recipe"});
    std::fs::write(
        root.join("recipe/Bad_Recipe.json"),
        to_canonical_string(&bad_id),
    )
    .unwrap();
    let p = validate::validate(&Registry::load(root).unwrap());
    expect_rule(&p, "invalid-json", "model/broken.json");
    expect_rule(&p, "id-matches-file", "model/renamed.json");
    expect_rule(&p, "duplicate-id", "speed-sweeps/");
    expect_rule(&p, "canonical-format", "hardware/rtx-4090-24gb.json");
    expect_rule(&p, "id-grammar", "recipe/Bad_Recipe.json#/id");
    // One line per problem: `path: rule: message`.
    for x in &p {
        let line = x.to_string();
        assert!(!line.contains('\n'));
        assert_eq!(line.splitn(3, ": ").count(), 3, "{line}");
    }
}

#[test]
fn trust_rewrites_stored_status() {
    let (_, dir) = check(|r| {
        // v1's acceptance-run source (a registry URL, no tool, hash or host) is not evidence.
        get(r, Collection::SpeedSweep)["source"] =
            json!({"kind": "acceptance-run", "url": "https://github.com/0xSero/local-ai-registry"});
    });
    let mut reg = Registry::load(dir.path()).unwrap();
    let applied = servebench_registry::trust::apply(&mut reg).unwrap();
    let changes = applied.rewritten;
    assert_eq!(changes.len(), 1);
    assert!(applied.refused.is_empty());
    assert!(changes[0]
        .failures
        .iter()
        .any(|f| f.contains("acceptance evidence")));
    let reg = Registry::load(dir.path()).unwrap();
    assert_eq!(reg.recipe(RECIPE).unwrap().status.as_str(), "candidate");
    assert!(validate::validate(&reg).is_empty());
}

/// Issue 17 break-it round 3: one recipe file whose id breaks the grammar (`recipe/Evil Id.json`,
/// placed by hand) made `registry trust` refuse to rewrite any recipe.
#[test]
fn a_recipe_with_a_bad_id_is_refused_alone_by_trust() {
    let (_, dir) = check(|r| {
        get(r, Collection::SpeedSweep)["source"] =
            json!({"kind": "acceptance-run", "url": "https://github.com/0xSero/local-ai-registry"});
    });
    let good = dir.path().join("recipe").join(format!("{RECIPE}.json"));
    let mut evil: Value = serde_json::from_str(&std::fs::read_to_string(&good).unwrap()).unwrap();
    evil["id"] = json!("Evil Id");
    let evil_path = dir.path().join("recipe").join("Evil Id.json");
    std::fs::write(&evil_path, to_canonical_string(&evil)).unwrap();
    let evil_before = std::fs::read(&evil_path).unwrap();
    let mut reg = Registry::load(dir.path()).unwrap();
    let applied = servebench_registry::trust::apply(&mut reg).unwrap();
    assert_eq!(applied.rewritten.len(), 1, "{applied:?}");
    assert_eq!(applied.rewritten[0].recipe_id, RECIPE);
    assert_eq!(applied.refused.len(), 1, "{applied:?}");
    assert_eq!(applied.refused[0].0.recipe_id, "Evil Id");
    assert!(applied.refused[0].1.contains("Evil Id"), "{applied:?}");
    let reg = Registry::load(dir.path()).unwrap();
    assert_eq!(reg.recipe(RECIPE).unwrap().status.as_str(), "candidate");
    assert_eq!(std::fs::read(&evil_path).unwrap(), evil_before);
}
