//! Generated registries for tests and the load test: deterministic, clearly synthetic records
//! (`gen-` ids, "Generated" names, `recipe_source: "generated"`) in the v1 layout. Never
//! published; they exist to exercise pagination, filters and the load path at scale.

use std::path::Path;

use serde_json::{json, Value};

/// Record counts of a generated registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenCounts {
    pub hardware: usize,
    pub models: usize,
    pub instances: usize,
    pub recipes: usize,
    pub sweeps: usize,
}

impl GenCounts {
    /// About `total` records in the proportions of the anchor's 2026-09 snapshot (hardware
    /// 0.5 %, models 2.5 %, instances 12 %, recipes 40 %, sweeps the rest), each at least 1.
    pub fn about(total: usize) -> GenCounts {
        let part = |f: f64| ((total as f64 * f).round() as usize).max(1);
        let (hardware, models, instances, recipes) =
            (part(0.005), part(0.025), part(0.12), part(0.40));
        let sweeps = total
            .saturating_sub(hardware + models + instances + recipes)
            .max(1);
        GenCounts {
            hardware,
            models,
            instances,
            recipes,
            sweeps,
        }
    }

    /// Sum of the counts.
    pub fn total(&self) -> usize {
        self.hardware + self.models + self.instances + self.recipes + self.sweeps
    }
}

const VENDORS: [(&str, &str); 4] = [
    ("nvidia", "nvidia"),
    ("amd", "amd-rocm"),
    ("intel", "intel-xpu"),
    ("apple", "metal"),
];
const ENGINES: [&str; 5] = ["vllm", "sglang", "llama.cpp", "tabbyapi", "ollama"];
const LAUNCH: [&str; 4] = ["docker", "reference", "script", "docker-compose"];
const PRECISION: [&str; 4] = ["bf16", "fp8", "q4_k_m", "exl3-4bpw"];

fn write(dir: &Path, col: &str, v: &Value) -> std::io::Result<()> {
    let d = dir.join(col);
    std::fs::create_dir_all(&d)?;
    let id = v["id"].as_str().unwrap_or("x");
    let mut s = serde_json::to_string_pretty(v).map_err(std::io::Error::other)?;
    s.push('\n');
    std::fs::write(d.join(format!("{id}.json")), s)
}

fn tri(i: usize) -> Value {
    match i % 3 {
        0 => Value::Bool(true),
        1 => Value::Bool(false),
        _ => Value::Null,
    }
}

/// Writes a generated registry with `n` records of each kind into `dir` (created).
pub fn generate(dir: &Path, n: GenCounts) -> std::io::Result<()> {
    let prov = json!({"captured_at": "2026-09-01T00:00:00Z", "sources": [{"kind": "registry", "url": "https://example.invalid/generated"}]});
    for h in 0..n.hardware {
        let (vendor, backend) = VENDORS[h % VENDORS.len()];
        let vram = [8, 12, 16, 24, 32, 48, 80, 96, 128][h % 9];
        write(
            dir,
            "hardware",
            &json!({
                "schema_version": "local-ai-registry/v1",
                "id": format!("gen-{vendor}-card-{h}-{vram}gb"),
                "vendor": vendor,
                "name": format!("Generated {vendor} card {h}"),
                "kind": if vendor == "apple" { "unified" } else { "discrete" },
                "accelerator_backend": backend,
                "family": format!("gen-family-{}", h % 5),
                "memory": {"vram_gb": vram, "vram_type": null, "bandwidth_gb_per_s": if h % 4 == 0 { Value::Null } else { json!(100 * (h % 10 + 1)) }},
                "compute": {"stats": {"fp16": {"dense": {"value": if h % 3 == 0 { Value::Null } else { json!(10.0 * (h % 17 + 1) as f64) }, "unit": "tflops"}}}},
                "commercial": if h % 2 == 0 { json!({"msrp": {"amount": 500 + 100 * h, "currency": "USD"}}) } else { Value::Null },
                "sources": [{"kind": "registry", "url": "https://example.invalid/generated"}],
            }),
        )?;
    }
    for m in 0..n.models {
        write(
            dir,
            "model",
            &json!({
                "schema_version": "local-ai-registry/v1",
                "id": format!("gen-model-{m}"),
                "family": format!("genfam{}", m % 7),
                "name": format!("Generated Model {m}"),
                "params": (m % 70 + 1) as f64,
                "active_params": if m % 2 == 0 { Value::Null } else { json!((m % 10 + 1) as f64) },
                "architecture": match m % 3 { 0 => json!("moe"), 1 => json!("dense"), _ => Value::Null },
                "url": null,
                "downloads": if m % 4 == 0 { Value::Null } else { json!({"last_30d": (m * 37) % 1000}) },
                "provenance": prov,
                "facts": {},
            }),
        )?;
    }
    for i in 0..n.instances {
        let model = i % n.models;
        write(
            dir,
            "model-instance",
            &json!({
                "schema_version": "local-ai-registry/v1",
                "id": format!("gen-owner-model-{model}--v{i}"),
                "model_id": format!("gen-model-{model}"),
                "repository": format!("gen-owner/model-{model}-v{i}"),
                "revision": null,
                "served_name": null,
                "kind": (["base", "quant", "fine-tune"][i % 3]),
                "weights": {"format": (["safetensors", "gguf", "exl3"][i % 3]), "precision": PRECISION[i % PRECISION.len()], "size_gb": (i % 50 + 1) as f64},
                "huggingface": {"repository": format!("gen-owner/model-{model}-v{i}"), "url": format!("https://huggingface.co/gen-owner/model-{model}-v{i}"), "status": "unknown", "link_type": "repository", "reason": "generated", "provenance": prov},
                "provenance": prov,
                "facts": {},
            }),
        )?;
    }
    for r in 0..n.recipes {
        let inst = r % n.instances;
        let model = inst % n.models;
        let hw = r % n.hardware;
        let (vendor, _) = VENDORS[hw % VENDORS.len()];
        let vram = [8, 12, 16, 24, 32, 48, 80, 96, 128][hw % 9];
        let sweep_ids: Vec<String> = if r < n.sweeps {
            vec![format!("gen-recipe-{r}-sweep")]
        } else {
            vec![]
        };
        write(
            dir,
            "recipe",
            &json!({
                "schema_version": "local-ai-registry/v1",
                "id": format!("gen-recipe-{r}"),
                "recipe_source": "generated",
                "status": if r % 5 == 0 { "validated" } else { "candidate" },
                "model_instance_id": format!("gen-owner-model-{model}--v{inst}"),
                "hardware_id": format!("gen-{vendor}-card-{hw}-{vram}gb"),
                "hardware_count": ([1, 1, 2, 4][r % 4]),
                "engine": {"name": ENGINES[r % ENGINES.len()], "version": format!("0.{}.0", r % 9), "graph_mode": null},
                "launch": {"kind": LAUNCH[r % LAUNCH.len()]},
                "serving": {"max_context_tokens": 4096 << (r % 6)},
                "capabilities": {"chat": tri(r), "reasoning": tri(r / 3), "tools": tri(r / 9), "vision": tri(r / 27)},
                "speed_sweep_ids": sweep_ids,
                "metadata": {},
                "provenance": prov,
                "facts": {},
            }),
        )?;
    }
    for s in 0..n.sweeps {
        let recipe = s % n.recipes;
        let id = if s < n.recipes {
            format!("gen-recipe-{recipe}-sweep")
        } else {
            format!("gen-recipe-{recipe}-extra-{s}")
        };
        let rows: Vec<Value> = [1u64, 4, 16, 64]
            .iter()
            .flat_map(|&c| {
                [1024u64, 16384].into_iter().map(move |ctx| {
                    let per = 80.0 / (1.0 + (c as f64).log2() * 0.2) / (1.0 + ctx as f64 / 65536.0);
                    json!({
                        "status": if c == 64 && s % 3 == 0 { "rejected-saturation-regression" } else { "accepted" },
                        "concurrency": c, "context_tokens": ctx, "output_tokens": 256,
                        "prefill_tok_s": 2000.0 + ctx as f64 / 10.0, "decode_tok_s": (per * c as f64 * 100.0).round() / 100.0,
                        "decode_tok_s_per_stream": (per * 100.0).round() / 100.0,
                        "ttft_ms_p50": 50.0 + ctx as f64 / 40.0 * c as f64, "peak_vram_gb": null, "samples": c,
                    })
                })
            })
            .collect();
        write(
            dir,
            "speed-sweep",
            &json!({
                "schema_version": "local-ai-registry/v1",
                "id": id,
                "recipe_id": format!("gen-recipe-{recipe}"),
                "measured_at": "2026-09-01",
                "accepted_at": null,
                "source": {"kind": "registry", "url": "https://example.invalid/generated"},
                "metrics": {"concurrency": 64, "point_count": rows.len(), "max_context_tokens": 16384, "peak_generation_tps": null, "peak_prompt_tps": null, "latest_point_at": "2026-09-01"},
                "rows": rows,
            }),
        )?;
    }
    Ok(())
}
