//! No panics on any input: random garbage, exposition-shaped noise and mutated fixtures go
//! through every public function.

mod common;

use common::{fixture, Rng};
use servebench_metrics::*;

const ENGINES: [Engine; 6] = [
    Engine::Vllm,
    Engine::Sglang,
    Engine::LlamaCpp,
    Engine::Tgi,
    Engine::Ollama,
    Engine::OpenAiProxy,
];

fn exercise_metrics(text: &str, prev: &Scrape) -> Scrape {
    let s = match Scrape::parse(text) {
        Ok(s) => s,
        Err(e) => {
            let _ = e.to_string();
            return Scrape::default();
        }
    };
    let _ = detect_engine_from_metrics(&s);
    for e in ENGINES {
        for &c in Concept::ALL {
            let _ = s.reading(e, c);
            let _ = counter_delta(prev, &s, e, c);
        }
        let _ = window_stats(prev, &s, e);
        let _ = window_stats_since_start(&s, e);
    }
    let _ = vllm_kv_from_cache_config(&s);
    let _ = vllm_cp_size(&s);
    if let Ok(b) = resolve_vllm_kv_budget(&s, None, None, Some(1 << 20)) {
        let _ = format_kv_event(&b);
    }
    let names: Vec<String> = s
        .samples()
        .map(|x| {
            x.name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count")
                .to_string()
        })
        .collect();
    for n in names.iter().take(20) {
        for q in [0.0, 0.5, 0.99, 1.0] {
            let _ = histogram_quantile(&s, n, q).map(|x| x.to_string());
        }
        let _ = histogram_mean(&s, n);
        let _ = Histogram::window(prev, &s, n);
    }
    s
}

fn exercise_json(body: &str) {
    let _ = parse_v1_models(body);
    let _ = parse_sglang_server_info(body);
    let _ = parse_sglang_model_info(body);
    let _ = parse_llamacpp_props(body);
    let _ = parse_llamacpp_slots(body);
    let _ = parse_tgi_info(body);
    let _ = parse_vllm_version(body);
    let _ = parse_ollama_version(body);
}

const TOKENS: &[&str] = &[
    "vllm:",
    "sglang_",
    "llamacpp:",
    "tgi_",
    "_total",
    "_created",
    "_bucket",
    "_sum",
    "_count",
    "{",
    "}",
    "=",
    "\"",
    ",",
    "\\",
    "le",
    "+Inf",
    "-Inf",
    "NaN",
    "1e308",
    "-1",
    "0",
    "3.5",
    "9999999999999999999999",
    " ",
    "\t",
    "\n",
    "\r\n",
    "# HELP ",
    "# TYPE ",
    "counter",
    "gauge",
    "histogram",
    "summary",
    "untyped",
    "engine",
    "tp_rank",
    "\"0\"",
    "\"1\"",
    "cache_config_info",
    "num_gpu_blocks",
    "block_size",
    "kv_cache_size_tokens",
    "\"None\"",
    "é",
    "\u{0}",
    "{'a': 'b'}",
];

#[test]
fn random_bytes_and_tokens_never_panic() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut prev = Scrape::default();
    for round in 0..2000 {
        let len = rng.below(300);
        let text: String = if round % 2 == 0 {
            (0..len)
                .map(|_| char::from_u32((rng.next() % 0x250) as u32).unwrap_or('?'))
                .collect()
        } else {
            (0..len / 4 + 1)
                .map(|_| TOKENS[rng.below(TOKENS.len())])
                .collect()
        };
        prev = exercise_metrics(&text, &prev);
        exercise_json(&text);
    }
}

#[test]
fn mutated_fixtures_never_panic() {
    let files = [
        "sglang-v0.4-metrics-docs.prom",
        "vllm-v0.7-metrics-aibrix-docs.prom",
        "vllm-nim-qwen3vl-cache-config-info.prom",
        "vllm-ibm-tgis-compat-metrics-excerpt.prom",
        "llamacpp-b10380-metrics.prom",
        "local-captures/vllm-metrics-specdecode.txt",
        "local-captures/llama-server-metrics-under-load.txt",
    ];
    let json_files = [
        "sglang-2025-10-get_model_info.json",
        "llamacpp-props-readme.json",
        "llamacpp-slots-readme.json",
        "llamacpp-v1-models-readme.json",
    ];
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    for f in files.iter().chain(json_files.iter()) {
        let original = fixture(f);
        let base = exercise_metrics(&original, &Scrape::default());
        exercise_json(&original);
        let bytes = original.as_bytes();
        for _ in 0..25 {
            let mut m = bytes.to_vec();
            match rng.below(4) {
                0 => m.truncate(rng.below(bytes.len() + 1)),
                1 => {
                    for _ in 0..8 {
                        let i = rng.below(m.len());
                        m[i] = TOKENS[rng.below(TOKENS.len())].as_bytes()[0];
                    }
                }
                2 => {
                    let i = rng.below(m.len());
                    let tok = TOKENS[rng.below(TOKENS.len())].as_bytes();
                    m.splice(i..i, tok.iter().copied());
                }
                _ => {
                    let i = rng.below(m.len());
                    let j = (i + rng.below(200)).min(m.len());
                    m.drain(i..j);
                }
            }
            let text = String::from_utf8_lossy(&m);
            exercise_metrics(&text, &base);
            exercise_json(&text);
        }
    }
}

#[test]
fn deeply_nested_json_is_an_error_not_a_stack_overflow() {
    let deep = "[".repeat(100_000);
    exercise_json(&deep);
    let deep_obj = format!("{{\"data\":{}", "[".repeat(10_000));
    assert!(parse_v1_models(&deep_obj).is_err());
}

#[test]
fn huge_and_odd_numbers() {
    let s = Scrape::parse(concat!(
        "vllm:cache_config_info{block_size=\"18446744073709551615\",num_gpu_blocks=\"2\"} 1\n",
        "vllm:generation_tokens_total 1e308\n",
        "vllm:prompt_tokens_total -5\n",
    ))
    .unwrap();
    // Overflowing product: no budget rather than a wrap or a panic.
    assert_eq!(vllm_kv_from_cache_config(&s), None);
    let w = window_stats_since_start(&s, Engine::Vllm);
    assert_eq!(w.prompt_tokens, Some(0.0), "never negative");
    assert_eq!(w.generation_tokens, Some(1e308));
    let before = Scrape::parse("vllm:generation_tokens_total -1e308\n").unwrap();
    let after = Scrape::parse("vllm:generation_tokens_total 1e308\n").unwrap();
    // The difference overflows to +inf: reported as unknown.
    assert_eq!(
        counter_delta(&before, &after, Engine::Vllm, Concept::GenerationTokens).value,
        None
    );
}
