//! servebench-metrics: pure parsing of inference-server telemetry into engine-independent
//! concepts.
//!
//! * [`Scrape`]: a Prometheus text exposition (`GET /metrics`) parsed with a real grammar
//!   (`prom_text_format_parser`), `*_created` series set apart, label values unescaped.
//! * [`Catalog`] / [`Scrape::concept`]: per-engine tables (vLLM V0/V1, SGLang `sglang:` and
//!   `sglang_`, llama.cpp, TGI) mapping exact metric names to [`Concept`]s; `tp_rank` replicas
//!   collapsed to rank 0, data-parallel engines summed (or averaged for ratios). Absent is `None`,
//!   never 0.
//! * [`counter_delta`] / [`window_stats`]: reset-aware counter increases between two scrapes
//!   (Prometheus `increase()` semantics) and the derived window ratios (prefix-cache hit rate,
//!   speculative acceptance, llama.cpp decode rate).
//! * [`vllm_kv_from_cache_config`], [`vllm_cp_size`], [`resolve_vllm_kv_budget`],
//!   [`format_kv_event`]: KV budget detection of seed spec §3.3.
//! * [`parse_v1_models`] and the other `parse_*` functions: engine info JSON bodies.
//! * [`histogram_quantile`] / [`histogram_mean`]: server histograms, reporting a quantile above
//!   the last finite bucket as such instead of clamping.
//!
//! Nothing here does I/O, reads a clock or prints: callers fetch bodies and pass them in.
#![deny(missing_docs)]

mod catalog;
mod delta;
mod exposition;
mod histogram;
mod info;
mod kv;

pub use catalog::{
    detect_engine_from_metrics, Aggregation, Candidate, Catalog, Concept, Engine, HistogramConcept,
    Kind, LabelFilter, Reading,
};
pub use delta::{counter_delta, window_stats, window_stats_since_start, Delta, WindowStats};
pub use exposition::{MetricType, ParseError, Sample, Scrape};
pub use histogram::{
    histogram_count, histogram_mean, histogram_quantile, Histogram, QuantileEstimate,
};
pub use info::{
    parse_llamacpp_props, parse_llamacpp_slots, parse_ollama_version, parse_sglang_model_info,
    parse_sglang_server_info, parse_tgi_info, parse_v1_models, parse_v1_models_keeping,
    parse_vllm_version, EngineInfo, LlamaCppProps, LlamaCppSlot, ModelEntry, ModelsInfo,
    SglangModelInfo, SglangServerInfo, TgiInfo, MAX_KEPT_MODELS,
};
pub use kv::{
    format_kv_event, format_sglang_kv_event, format_thousands, resolve_vllm_kv_budget,
    sglang_kv_budget, vllm_cp_size, vllm_kv_from_cache_config, KvBudget, KvBudgetError,
};
