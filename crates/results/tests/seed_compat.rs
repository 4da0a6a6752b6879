//! The results files of the tool servebench replaces must read with servebench's types:
//! the seed (`llm_decode_bench.py` 0.4.29, a web page with the JSON after it) and an 0.4.18 file
//! from the CPU vLLM. Both must validate against the committed schema, deserialise into
//! [`Results`], and keep the JSON type of every field they share with servebench's output.

use serde_json::Value;
use servebench_results::{
    extract_json_object, AggregateSource, BenchmarkMode, DecodeLayer, DecodeMode, PrefillMethod,
    Results, SCHEMA_JSON,
};

fn data(path: &str) -> String {
    let p = format!("{}/../../tests/data/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(SCHEMA_JSON).expect("schema is JSON");
    jsonschema::validator_for(&schema).expect("schema compiles")
}

fn assert_valid(v: &Value, what: &str) {
    let val = validator();
    let errors: Vec<String> = val
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} violates the schema:\n{}",
        errors.join("\n")
    );
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Every path present in both `orig` and `ours` has the same JSON kind; returns how many leaf
/// values were compared.
fn same_kinds(orig: &Value, ours: &Value, path: &str, mismatches: &mut Vec<String>) -> usize {
    match (orig, ours) {
        (Value::Object(a), Value::Object(b)) => a
            .iter()
            .filter_map(|(k, va)| b.get(k).map(|vb| (k, va, vb)))
            .map(|(k, va, vb)| same_kinds(va, vb, &format!("{path}.{k}"), mismatches))
            .sum(),
        (Value::Array(a), Value::Array(b)) => a
            .iter()
            .zip(b)
            .enumerate()
            .map(|(i, (va, vb))| same_kinds(va, vb, &format!("{path}[{i}]"), mismatches))
            .sum(),
        _ => {
            if kind(orig) != kind(ours) {
                mismatches.push(format!("{path}: {} became {}", kind(orig), kind(ours)));
            }
            1
        }
    }
}

fn check_old_file(orig: Value, what: &str, expect_cells: usize) {
    assert_valid(&orig, what);
    let parsed: Results =
        serde_json::from_value(orig.clone()).expect("reads with servebench types");
    assert_eq!(parsed.results.len(), expect_cells);
    let ours = serde_json::to_value(&parsed).unwrap();
    let mut mismatches = Vec::new();
    let compared = same_kinds(&orig, &ours, "$", &mut mismatches);
    assert!(compared > 100, "only {compared} fields compared");
    assert!(
        mismatches.is_empty(),
        "{what}: types changed:\n{}",
        mismatches.join("\n")
    );
}

#[test]
fn seed_0_4_29_reads_with_the_same_types() {
    let text = data("results/seed-000-llm-decode-bench-0.4.29.txt");
    let orig = extract_json_object(&text).expect("the seed page carries a JSON object");
    assert_eq!(orig["metadata"]["version"], "0.4.29");
    check_old_file(orig.clone(), "seed 0.4.29", 3);
    let parsed: Results = serde_json::from_value(orig).unwrap();
    let c = &parsed.results[0];
    assert_eq!(c.aggregate_source, AggregateSource::OpenaiContinuousUsage);
    assert_eq!(c.client_output_tokens, Some(1212));
    assert_eq!(c.request_samples[0].output_tokens, 1908);
    assert_eq!(parsed.metadata.max_total_tokens, 601_344);
    assert_eq!(parsed.summary_table["16384"]["1"], 120.79854757836178);
}

#[test]
fn old_0_4_18_file_reads_with_the_same_types() {
    let orig: Value =
        serde_json::from_str(&data("results/llm-decode-bench-0.4.18-vllm-cpu-tiny.json")).unwrap();
    check_old_file(orig.clone(), "0.4.18 file", 6);
    let parsed: Results = serde_json::from_value(orig).unwrap();
    assert_eq!(parsed.prefill["512"].prompt_tokens, Some(1320));
    assert_eq!(parsed.prefill["1024"].method, PrefillMethod::ScoutOnly);
}

#[test]
fn default_results_with_schema_version_validate() {
    // A servebench file must satisfy the stricter branch: a bare default does not.
    let mut r = Results {
        schema_version: servebench_results::SCHEMA_VERSION.into(),
        ..Default::default()
    };
    let v = serde_json::to_value(&r).unwrap();
    assert!(
        !validator().is_valid(&v),
        "metadata.tool etc. are required once schema_version is set"
    );
    r.metadata.tool = "servebench".into();
    r.metadata.endpoint = "chat".into();
    r.metadata.decode_mode = DecodeMode::Duration;
    r.metadata.primary_decode_layer = DecodeLayer::SustainedDecode;
    r.results.push(servebench_results::CellResult {
        concurrency: 1,
        benchmark_mode: BenchmarkMode::Duration,
        ..Default::default()
    });
    r.methodology.prefill.name = "Prefill".into();
    let v = serde_json::to_value(&r).unwrap();
    assert_valid(&v, "minimal servebench file");
}
