//! KV-cache budget detection (seed spec §3.3) from already-fetched `/metrics` scrapes.
//!
//! vLLM publishes its cache configuration as the LABELS of the info gauge
//! `vllm:cache_config_info` (value always 1). Label values are strings; `"None"` means absent.
//! Modern vLLM has `kv_cache_size_tokens`, which is preferred over
//! `num_gpu_blocks × block_size` (pitfall 38: hybrid models make the product wrong).

use std::collections::BTreeMap;

use crate::exposition::{Sample, Scrape};

/// Resolved KV-cache budget of a server, in tokens.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KvBudget {
    /// Budget used for capacity decisions: `local_tokens × cp`.
    pub tokens: u64,
    /// KV tokens the server reports for itself (one context-parallel rank on vLLM).
    pub local_tokens: u64,
    /// Context-parallel multiplier (1 when none).
    pub cp: u64,
    /// How `local_tokens` was obtained, e.g. `"87 blocks x 3456"` or `"kv_cache_size_tokens"`.
    pub detail: String,
    /// Where `cp` came from: `"argument"`, a metric label description, `"local process"` or
    /// `"default"` (vLLM); `"DCP argument"` / `"default"` for SGLang.
    pub source: String,
}

/// Why no vLLM KV budget could be set (spec §3.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvBudgetError {
    /// `vllm:cache_config_info` is missing or has neither `kv_cache_size_tokens` nor
    /// `num_gpu_blocks` + `block_size`.
    NoCacheConfig,
    /// The CP size is unknown and the local KV is smaller than the model context: the server
    /// probably reports only one context-parallel rank, so the budget is left unset (do not
    /// assume CP = 1; spec §3.3 step 4).
    LocalOnly {
        /// Local KV tokens reported.
        local_tokens: u64,
        /// Model context length.
        model_len: u64,
    },
}

impl KvBudgetError {
    /// The warning text for the event log, in plain words (no servebench flag names: the CLI
    /// documents `--kv-budget` and `--dcp-size` for these settings).
    pub fn warning(&self) -> String {
        match self {
            KvBudgetError::NoCacheConfig => {
                "KV cache budget not available from metrics; set the KV cache budget explicitly".to_string()
            }
            KvBudgetError::LocalOnly {
                local_tokens,
                model_len,
            } => format!(
                "vLLM reports only local KV ({} tokens) below the model context ({} tokens) and the \
                 context-parallel size is unknown; KV budget left unset (set the decode context-parallel size or the KV cache budget explicitly)",
                format_thousands(*local_tokens),
                format_thousands(*model_len)
            ),
        }
    }
}

/// Parse a label value as a positive integer: `"4096"`, `"4096.0"`; `"None"`, `""`, `"0"`,
/// negative, fractional or non-numeric values → `None`.
pub(crate) fn label_u64(v: &str) -> Option<u64> {
    let v = v.trim();
    if let Ok(n) = v.parse::<u64>() {
        return (n > 0).then_some(n);
    }
    let f: f64 = v.parse().ok()?;
    // 2^53: beyond that an f64 no longer holds every integer.
    if f.is_finite() && f >= 1.0 && f.fract() == 0.0 && f <= 9_007_199_254_740_992.0 {
        Some(f as u64)
    } else {
        None
    }
}

fn labels_u64(s: &Sample, key: &str) -> Option<u64> {
    s.label(key).and_then(label_u64)
}

/// Local KV tokens of one `cache_config_info` series, with its detail string.
fn kv_from_labels(s: &Sample) -> Option<(u64, String)> {
    let size = labels_u64(s, "kv_cache_size_tokens");
    let blocks = labels_u64(s, "num_gpu_blocks");
    let block_size = labels_u64(s, "block_size");
    let product = match (blocks, block_size) {
        (Some(b), Some(bs)) => b.checked_mul(bs).map(|p| (p, format!("{b} blocks x {bs}"))),
        _ => None,
    };
    match (size, product) {
        (Some(t), Some((p, d))) if p == t => Some((t, d)),
        (Some(t), Some((p, d))) => Some((
            t,
            format!("kv_cache_size_tokens; {d} = {}", format_thousands(p)),
        )),
        (Some(t), None) => Some((t, "kv_cache_size_tokens".to_string())),
        (None, Some((p, d))) => Some((p, d)),
        (None, None) => None,
    }
}

/// Local KV tokens from the labels of `vllm:cache_config_info` (spec §3.3): prefer
/// `kv_cache_size_tokens`, else `num_gpu_blocks × block_size`.
///
/// One series per data-parallel engine (`engine` label) is summed. The unverified KServe prefix
/// `kserve_vllm:cache_config_info` is used only when `vllm:cache_config_info` is absent.
/// Returns `(local_tokens, detail)`, e.g. `(524288, "4096 blocks x 128")`.
pub fn vllm_kv_from_cache_config(s: &Scrape) -> Option<(u64, String)> {
    let name = ["vllm:cache_config_info", "kserve_vllm:cache_config_info"]
        .into_iter()
        .find(|n| s.has_series(n))?;
    // Identical label sets are one series; distinct `engine` labels are distinct engines.
    let mut per_engine: BTreeMap<String, (u64, String)> = BTreeMap::new();
    for sample in s.series(name) {
        let engine = sample.label("engine").unwrap_or("").to_string();
        if per_engine.contains_key(&engine) {
            continue;
        }
        if let Some(kv) = kv_from_labels(sample) {
            per_engine.insert(engine, kv);
        }
    }
    match per_engine.len() {
        0 => None,
        1 => per_engine.into_values().next(),
        n => {
            let mut total = 0u64;
            let mut parts = Vec::with_capacity(n);
            for (engine, (t, d)) in per_engine {
                total = total.checked_add(t)?;
                parts.push(format!("engine {engine}: {d}"));
            }
            Some((total, parts.join(" + ")))
        }
    }
}

const CP_INFO_METRICS: [&str; 3] = [
    "vllm:parallel_config_info",
    "vllm:vllm_config_info",
    "vllm:cache_config_info",
];

fn first_label_value(s: &Scrape, metric: &str, key: &str) -> Option<u64> {
    s.series(metric).find_map(|x| labels_u64(x, key))
}

/// Context-parallel size from info-metric labels, in the order of spec §3.3 step 2: for
/// `vllm:parallel_config_info`, then `vllm:vllm_config_info`, then `vllm:cache_config_info`,
/// try `cp_world_size`, then `prefill_context_parallel_size × decode_context_parallel_size`
/// (both > 0); after all three, try `dcp_world_size` on the same three.
/// Returns `(cp, source)`, e.g. `(2, "vllm:parallel_config_info label cp_world_size")`.
pub fn vllm_cp_size(s: &Scrape) -> Option<(u64, String)> {
    for metric in CP_INFO_METRICS {
        if let Some(v) = first_label_value(s, metric, "cp_world_size") {
            return Some((v, format!("{metric} label cp_world_size")));
        }
        let product = s.series(metric).find_map(|x| {
            let p = labels_u64(x, "prefill_context_parallel_size")?;
            let d = labels_u64(x, "decode_context_parallel_size")?;
            p.checked_mul(d)
        });
        if let Some(v) = product {
            return Some((
                v,
                format!(
                    "{metric} labels prefill_context_parallel_size x decode_context_parallel_size"
                ),
            ));
        }
    }
    for metric in CP_INFO_METRICS {
        if let Some(v) = first_label_value(s, metric, "dcp_world_size") {
            return Some((v, format!("{metric} label dcp_world_size")));
        }
    }
    None
}

/// Full vLLM budget resolution of spec §3.3 (the manual `--kv-budget` / `--max-total-tokens`
/// precedence is the caller's):
/// 1. `cp_argument` (`--dcp-size`) > 0 → source `"argument"`;
/// 2. info-metric labels ([`vllm_cp_size`]);
/// 3. `local_process_cp` (the caller's `ps` inspection of a local vLLM) → `"local process"`;
/// 4. still unknown and local KV < `model_len` → [`KvBudgetError::LocalOnly`];
/// 5. otherwise CP = 1, source `"default"`.
pub fn resolve_vllm_kv_budget(
    s: &Scrape,
    cp_argument: Option<u64>,
    local_process_cp: Option<u64>,
    model_len: Option<u64>,
) -> Result<KvBudget, KvBudgetError> {
    let (local, detail) = vllm_kv_from_cache_config(s).ok_or(KvBudgetError::NoCacheConfig)?;
    let cp = match cp_argument.filter(|&c| c > 0) {
        Some(c) => Some((c, "argument".to_string())),
        None => vllm_cp_size(s).or_else(|| {
            local_process_cp
                .filter(|&c| c > 0)
                .map(|c| (c, "local process".to_string()))
        }),
    };
    let (cp, source) = match cp {
        Some(x) => x,
        None => match model_len {
            Some(m) if local < m => {
                return Err(KvBudgetError::LocalOnly {
                    local_tokens: local,
                    model_len: m,
                })
            }
            _ => (1, "default".to_string()),
        },
    };
    Ok(KvBudget {
        tokens: local.saturating_mul(cp),
        local_tokens: local,
        cp,
        detail,
        source,
    })
}

/// SGLang budget (spec §3.3): `/get_server_info.max_total_num_tokens`, multiplied by the DCP size
/// when that is > 1.
pub fn sglang_kv_budget(max_total_num_tokens: u64, dcp_size: Option<u64>) -> KvBudget {
    let (cp, source) = match dcp_size {
        Some(d) if d > 1 => (d, "DCP argument".to_string()),
        _ => (1, "default".to_string()),
    };
    KvBudget {
        tokens: max_total_num_tokens.saturating_mul(cp),
        local_tokens: max_total_num_tokens,
        cp,
        detail: "max_total_num_tokens".to_string(),
        source,
    }
}

/// `1234567` → `"1,234,567"` ([`servebench_stats::thousands`]).
pub use servebench_stats::thousands as format_thousands;

/// The seed tool's vLLM event line (spec §3.3), exactly:
/// `KV cache budget from vLLM metrics: 601,344 tokens (87 blocks x 3456; local 300,672 × CP 2; CP source: argument)`.
pub fn format_kv_event(b: &KvBudget) -> String {
    format!(
        "KV cache budget from vLLM metrics: {} tokens ({}; local {} × CP {}; CP source: {})",
        format_thousands(b.tokens),
        b.detail,
        format_thousands(b.local_tokens),
        b.cp,
        b.source
    )
}

/// The seed tool's SGLang event line (spec §3.3): `KV cache budget: N tokens (SGLang reported L x
/// DCP d)` when the DCP multiplier is > 1, else `KV cache budget: N tokens`.
pub fn format_sglang_kv_event(b: &KvBudget) -> String {
    if b.cp > 1 {
        format!(
            "KV cache budget: {} tokens (SGLang reported {} x DCP {})",
            format_thousands(b.tokens),
            format_thousands(b.local_tokens),
            b.cp
        )
    } else {
        format!("KV cache budget: {} tokens", format_thousands(b.tokens))
    }
}
