//! Engine catalog: which exposed metric names carry which engine-independent [`Concept`].
//!
//! Sources per engine (see also `tests/data/engines/INDEX.md` §E "metric-name timeline"):
//! * vLLM: V0 names (`gpu_cache_usage_perc`, `gpu_prefix_cache_hit_rate`,
//!   `avg_generation_throughput_toks_per_s`, `num_requests_swapped`), V1 names and the renames of
//!   vllm#18354 / #24245 / #29330 (`kv_cache_usage_perc`, `prefix_cache_{queries,hits}_total`),
//!   and the vLLM 0.32 surface captured in `local-captures/vllm-metrics*.txt`.
//! * SGLang: `sglang:` and `sglang_` prefixes (pitfall 33), names from
//!   `sglang-2025-10-metric-catalog.tsv` and the v0.4 production-metrics docs.
//! * llama.cpp: `llamacpp:` names of `llama-server --metrics` (`local-captures/llama-server-*`).
//! * TGI: `tgi_*`, counters without `_total` (`tgi-metric-catalog.tsv`).
//!
//! Aggregation rules (brief §1, spec §8.1(5) "first series wins" bug): among series that differ
//! only in `tp_rank` keep `tp_rank="0"`; everything else that passes the candidate's label
//! filters (data-parallel `engine` / `dp_rank`, several `model_name`s, LoRA...) is SUMMED for
//! counters and additive gauges, and AVERAGED for ratio gauges (KV usage, hit rates).

use std::fmt;

use crate::exposition::{Sample, Scrape};

/// Inference server family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Engine {
    /// vLLM (V0 and V1 engines; also forks such as NVIDIA NIM, IBM's TGIS-compatible fork).
    Vllm,
    /// SGLang.
    Sglang,
    /// llama.cpp `llama-server`.
    LlamaCpp,
    /// Hugging Face text-generation-inference.
    Tgi,
    /// Ollama (no Prometheus endpoint).
    Ollama,
    /// Any OpenAI-compatible endpoint that exposes nothing else (spec §3.2 step 4).
    OpenAiProxy,
}

impl Engine {
    /// Stable lower-case identifier (`"vllm"`, `"sglang"`, `"llamacpp"`, `"tgi"`, `"ollama"`,
    /// `"openai_proxy"`), as used in the seed tool's JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
            Engine::LlamaCpp => "llamacpp",
            Engine::Tgi => "tgi",
            Engine::Ollama => "ollama",
            Engine::OpenAiProxy => "openai_proxy",
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Engine-independent telemetry concept. Units are given per variant; "counter" concepts are
/// cumulative since server start and are meant for [`crate::counter_delta`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Concept {
    /// Requests currently in the running batch (gauge, requests).
    Running,
    /// Requests queued / waiting / deferred (gauge, requests).
    Waiting,
    /// Requests swapped to CPU (vLLM V0 only; gauge, requests).
    Swapped,
    /// Generated (output) tokens (counter, tokens).
    GenerationTokens,
    /// Prompt tokens admitted, cache hits INCLUDED (counter, tokens). On llama.cpp this is
    /// `prompt_tokens_total + prompt_tokens_cached_total` because its `prompt_tokens_total`
    /// excludes cached tokens.
    PromptTokens,
    /// Prompt tokens actually computed by prefill, cache hits EXCLUDED (counter, tokens).
    PromptTokensComputed,
    /// Prompt tokens served from the prefix cache (counter, tokens).
    PromptTokensCached,
    /// KV-cache usage fraction 0..1 (gauge; averaged over data-parallel engines).
    KvUsage,
    /// Prefix-cache lookups (counter; tokens on vLLM ≥ 0.8, BLOCKS on early V1 `gpu_` names).
    PrefixCacheQueries,
    /// Prefix-cache hits (counter, same unit as [`Concept::PrefixCacheQueries`]).
    PrefixCacheHits,
    /// Speculative-decoding verification steps (counter, drafts).
    SpecDrafts,
    /// Draft tokens proposed (counter, tokens).
    SpecDraftTokens,
    /// Draft tokens accepted (counter, tokens; never the per-position series).
    SpecAcceptedTokens,
    /// Preemptions / retractions (counter, events).
    Preemptions,
    /// Server-computed generation throughput (gauge, tokens/s; vLLM V0 and SGLang only).
    GenThroughputGauge,
    /// Server-computed prompt throughput (gauge, tokens/s; vLLM V0 only).
    PromptThroughputGauge,
    /// Requests finished normally (counter, requests). vLLM: `finished_reason` other than
    /// `abort` / `error`; SGLang: `num_requests_total`; TGI: `tgi_request_success`.
    RequestSuccess,
    /// Requests aborted (counter, requests).
    RequestAborted,
    /// Sum of per-request prefill time (counter, seconds; histogram `_sum`).
    PrefillTimeSum,
    /// Number of prefill-time observations (counter, requests; histogram `_count`).
    PrefillTimeCount,
    /// Busy time spent on prompt processing (counter, seconds; llama.cpp
    /// `prompt_seconds_total`).
    PrefillSeconds,
    /// Busy time spent generating (counter, seconds; llama.cpp `tokens_predicted_seconds_total`).
    DecodeSeconds,
    /// Decode calls (counter; llama.cpp `n_decode_total`, excludes speculative decodes).
    DecodeCalls,
    /// Server's speculative acceptance rate 0..1 (gauge).
    SpecAcceptRateGauge,
    /// Server's mean speculative acceptance length (gauge, tokens per step).
    SpecAcceptLengthGauge,
    /// Server's prefix-cache hit-rate gauge 0..1 (vLLM V0 `-1` = prefix caching disabled → the
    /// reading's value is `None`).
    CacheHitRateGauge,
    /// KV capacity exported as a gauge (tokens; SGLang 2024-11 `max_total_num_tokens`).
    KvCapacityTokens,
    /// Configured maximum running requests exported as a gauge (SGLang 2024-11).
    MaxRunningRequests,
    /// Context length exported as a gauge (tokens; SGLang 2024-11 `context_len`).
    ContextLength,
}

impl Concept {
    /// Every concept, in declaration order.
    pub const ALL: &'static [Concept] = &[
        Concept::Running,
        Concept::Waiting,
        Concept::Swapped,
        Concept::GenerationTokens,
        Concept::PromptTokens,
        Concept::PromptTokensComputed,
        Concept::PromptTokensCached,
        Concept::KvUsage,
        Concept::PrefixCacheQueries,
        Concept::PrefixCacheHits,
        Concept::SpecDrafts,
        Concept::SpecDraftTokens,
        Concept::SpecAcceptedTokens,
        Concept::Preemptions,
        Concept::GenThroughputGauge,
        Concept::PromptThroughputGauge,
        Concept::RequestSuccess,
        Concept::RequestAborted,
        Concept::PrefillTimeSum,
        Concept::PrefillTimeCount,
        Concept::PrefillSeconds,
        Concept::DecodeSeconds,
        Concept::DecodeCalls,
        Concept::SpecAcceptRateGauge,
        Concept::SpecAcceptLengthGauge,
        Concept::CacheHitRateGauge,
        Concept::KvCapacityTokens,
        Concept::MaxRunningRequests,
        Concept::ContextLength,
    ];
}

/// Whether a metric is cumulative (delta it between scrapes) or instantaneous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Kind {
    /// Monotonic since server start (also histogram `_sum` / `_count`, and cumulative values an
    /// engine happens to export with `# TYPE gauge`).
    Counter,
    /// Instantaneous value.
    Gauge,
}

/// How the selected series of one metric are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Aggregation {
    /// Sum (counters, request counts, throughputs, capacities).
    Sum,
    /// Arithmetic mean (ratios such as KV usage or hit rates across data-parallel engines).
    Mean,
    /// Minimum (limits such as a context length).
    Min,
}

/// An explicit label condition on a candidate series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelFilter {
    /// Label `.0` must exist and equal `.1`.
    Equals(&'static str, &'static str),
    /// Label `.0` must not be one of `.1` (a missing label passes).
    NotIn(&'static str, &'static [&'static str]),
}

impl LabelFilter {
    /// Whether `sample` passes this filter.
    pub fn matches(&self, sample: &Sample) -> bool {
        match *self {
            LabelFilter::Equals(k, v) => sample.label(k) == Some(v),
            LabelFilter::NotIn(k, vs) => sample.label(k).is_none_or(|x| !vs.contains(&x)),
        }
    }
}

/// One way to read a concept: a metric name (plus optional extra metrics that are added to it),
/// its kind, label filters and aggregation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Human-readable source, reported in [`Reading::source`]; equals `metric` for simple
    /// candidates.
    pub source: &'static str,
    /// Exact series name (never a prefix).
    pub metric: &'static str,
    /// Further series names whose value is ADDED (all must be present).
    pub plus: &'static [&'static str],
    /// Label filters applied to every term.
    pub filters: &'static [LabelFilter],
    /// Counter or gauge.
    pub kind: Kind,
    /// How several series are combined.
    pub aggregation: Aggregation,
    /// A negative value means "feature disabled" (vLLM V0 hit-rate gauges report `-1`).
    pub negative_is_disabled: bool,
}

impl Candidate {
    const fn new(metric: &'static str, kind: Kind, aggregation: Aggregation) -> Candidate {
        Candidate {
            source: metric,
            metric,
            plus: &[],
            filters: &[],
            kind,
            aggregation,
            negative_is_disabled: false,
        }
    }
    const fn counter(metric: &'static str) -> Candidate {
        Candidate::new(metric, Kind::Counter, Aggregation::Sum)
    }
    const fn gauge_sum(metric: &'static str) -> Candidate {
        Candidate::new(metric, Kind::Gauge, Aggregation::Sum)
    }
    const fn gauge_mean(metric: &'static str) -> Candidate {
        Candidate::new(metric, Kind::Gauge, Aggregation::Mean)
    }
    const fn gauge_min(metric: &'static str) -> Candidate {
        Candidate::new(metric, Kind::Gauge, Aggregation::Min)
    }
    const fn filtered(self, filters: &'static [LabelFilter]) -> Candidate {
        let mut c = self;
        c.filters = filters;
        c
    }
    const fn disabled_if_negative(self) -> Candidate {
        let mut c = self;
        c.negative_is_disabled = true;
        c
    }
    const fn plus(self, source: &'static str, plus: &'static [&'static str]) -> Candidate {
        let mut c = self;
        c.source = source;
        c.plus = plus;
        c
    }

    /// Aggregate one term over the selected series; `None` when no series is present.
    fn aggregate(&self, s: &Scrape, metric: &str) -> Option<f64> {
        let selected = s.select(metric, self.filters);
        if selected.is_empty() {
            return None;
        }
        let values = selected.iter().map(|x| x.value);
        Some(match self.aggregation {
            Aggregation::Sum => values.sum(),
            Aggregation::Mean => values.sum::<f64>() / selected.len() as f64,
            Aggregation::Min => values.fold(f64::INFINITY, f64::min),
        })
    }

    /// Read this candidate from a scrape. `None` = a required series is absent.
    /// `Some(Reading { value: None, .. })` = present but not a usable number (NaN, ±inf, or a
    /// negative "disabled" sentinel).
    pub fn read(&self, s: &Scrape) -> Option<Reading> {
        let mut total = self.aggregate(s, self.metric)?;
        for extra in self.plus {
            total += self.aggregate(s, extra)?;
        }
        let usable = total.is_finite() && !(self.negative_is_disabled && total < 0.0);
        Some(Reading {
            value: usable.then_some(total),
            source: self.source,
        })
    }

    /// All series names this candidate reads (`metric` then `plus`).
    pub fn metrics(&self) -> impl Iterator<Item = &'static str> {
        std::iter::once(self.metric).chain(self.plus.iter().copied())
    }
}

/// A concept value read from a scrape, with the metric it came from.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Reading {
    /// The value; `None` when the series exists but says "not available" (e.g. vLLM V0
    /// `gpu_prefix_cache_hit_rate = -1` = prefix caching disabled, or NaN).
    pub value: Option<f64>,
    /// Metric name used (or `a + b` for a composite candidate).
    pub source: &'static str,
}

/// Histogram concepts for [`Catalog::histograms`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum HistogramConcept {
    /// Time to first token (seconds).
    Ttft,
    /// Inter-token latency (seconds).
    Itl,
    /// Per-request mean time per output token (seconds).
    Tpot,
    /// End-to-end request latency (seconds).
    E2e,
    /// Queue time (seconds).
    Queue,
    /// Prefill time per request (seconds).
    Prefill,
}

/// The per-engine metric tables.
#[derive(Debug, Clone, Copy, Default)]
pub struct Catalog;

use Candidate as C;

const NO_ABORT_ERROR: &[LabelFilter] =
    &[LabelFilter::NotIn("finished_reason", &["abort", "error"])];

// ---------------------------------------------------------------- vLLM (V0 + V1)
const VLLM_RUNNING: &[C] = &[
    C::gauge_sum("vllm:num_requests_running"),
    // IBM vLLM fork with TGIS-compatible names (vllm-ibm-tgis-compat fixture).
    C::gauge_sum("tgi_batch_current_size"),
];
const VLLM_WAITING: &[C] = &[
    C::gauge_sum("vllm:num_requests_waiting"),
    C::gauge_sum("tgi_queue_size"),
];
const VLLM_SWAPPED: &[C] = &[C::gauge_sum("vllm:num_requests_swapped")];
const VLLM_GEN: &[C] = &[C::counter("vllm:generation_tokens_total")];
const VLLM_PROMPT: &[C] = &[C::counter("vllm:prompt_tokens_total")];
const VLLM_PROMPT_COMPUTED: &[C] = &[C::counter("vllm:prompt_tokens_by_source_total")
    .filtered(&[LabelFilter::Equals("source", "local_compute")])];
const VLLM_PROMPT_CACHED: &[C] = &[
    C::counter("vllm:prompt_tokens_cached_total"),
    C::counter("vllm:prompt_tokens_by_source_total")
        .filtered(&[LabelFilter::Equals("source", "local_cache_hit")]),
];
const VLLM_KV: &[C] = &[
    C::gauge_mean("vllm:kv_cache_usage_perc"),
    C::gauge_mean("vllm:gpu_cache_usage_perc"),
];
const VLLM_PC_Q: &[C] = &[
    C::counter("vllm:prefix_cache_queries_total"),
    C::counter("vllm:gpu_prefix_cache_queries_total"),
];
const VLLM_PC_H: &[C] = &[
    C::counter("vllm:prefix_cache_hits_total"),
    C::counter("vllm:gpu_prefix_cache_hits_total"),
];
const VLLM_SPEC_DRAFTS: &[C] = &[C::counter("vllm:spec_decode_num_drafts_total")];
const VLLM_SPEC_DRAFT_TOKENS: &[C] = &[C::counter("vllm:spec_decode_num_draft_tokens_total")];
const VLLM_SPEC_ACCEPTED: &[C] = &[C::counter("vllm:spec_decode_num_accepted_tokens_total")];
const VLLM_PREEMPT: &[C] = &[C::counter("vllm:num_preemptions_total")];
const VLLM_GEN_TPUT: &[C] = &[C::gauge_sum("vllm:avg_generation_throughput_toks_per_s")];
const VLLM_PROMPT_TPUT: &[C] = &[C::gauge_sum("vllm:avg_prompt_throughput_toks_per_s")];
const VLLM_SUCCESS: &[C] = &[C::counter("vllm:request_success_total").filtered(NO_ABORT_ERROR)];
const VLLM_ABORTED: &[C] = &[C::counter("vllm:request_success_total")
    .filtered(&[LabelFilter::Equals("finished_reason", "abort")])];
const VLLM_PREFILL_SUM: &[C] = &[C::counter("vllm:request_prefill_time_seconds_sum")];
const VLLM_PREFILL_COUNT: &[C] = &[C::counter("vllm:request_prefill_time_seconds_count")];
const VLLM_SPEC_RATE: &[C] = &[C::gauge_mean("vllm:spec_decode_draft_acceptance_rate")];
const VLLM_HIT_RATE: &[C] =
    &[C::gauge_mean("vllm:gpu_prefix_cache_hit_rate").disabled_if_negative()];

// ---------------------------------------------------------------- SGLang (`sglang:` and `sglang_`)
// Older SGLang builds named the two scheduler gauges `num_requests_running` /
// `num_requests_waiting` (issue 8); the current names come first.
const SG_RUNNING: &[C] = &[
    C::gauge_sum("sglang:num_running_reqs"),
    C::gauge_sum("sglang_num_running_reqs"),
    C::gauge_sum("sglang:num_requests_running"),
    C::gauge_sum("sglang_num_requests_running"),
];
const SG_WAITING: &[C] = &[
    C::gauge_sum("sglang:num_queue_reqs"),
    C::gauge_sum("sglang_num_queue_reqs"),
    C::gauge_sum("sglang:num_requests_waiting"),
    C::gauge_sum("sglang_num_requests_waiting"),
];
const SG_GEN: &[C] = &[
    C::counter("sglang:generation_tokens_total"),
    C::counter("sglang_generation_tokens_total"),
];
const SG_PROMPT: &[C] = &[
    C::counter("sglang:prompt_tokens_total"),
    C::counter("sglang_prompt_tokens_total"),
];
const MODE_PREFILL_COMPUTE: &[LabelFilter] = &[LabelFilter::Equals("mode", "prefill_compute")];
const MODE_PREFILL_CACHE: &[LabelFilter] = &[LabelFilter::Equals("mode", "prefill_cache")];
const SG_PROMPT_COMPUTED: &[C] = &[
    C::counter("sglang:realtime_tokens_total").filtered(MODE_PREFILL_COMPUTE),
    C::counter("sglang_realtime_tokens_total").filtered(MODE_PREFILL_COMPUTE),
];
const SG_PROMPT_CACHED: &[C] = &[
    C::counter("sglang:cached_tokens_total"),
    C::counter("sglang_cached_tokens_total"),
    C::counter("sglang:realtime_tokens_total").filtered(MODE_PREFILL_CACHE),
    C::counter("sglang_realtime_tokens_total").filtered(MODE_PREFILL_CACHE),
];
const SG_KV: &[C] = &[
    C::gauge_mean("sglang:token_usage"),
    C::gauge_mean("sglang_token_usage"),
];
const SG_PREEMPT: &[C] = &[
    // Exported with `# TYPE gauge` but cumulative ("retracted due to kv cache full").
    C::counter("sglang:total_retracted_reqs"),
    C::counter("sglang_total_retracted_reqs"),
];
const SG_GEN_TPUT: &[C] = &[
    C::gauge_sum("sglang:gen_throughput"),
    C::gauge_sum("sglang_gen_throughput"),
];
const SG_SUCCESS: &[C] = &[
    C::counter("sglang:num_requests_total"),
    C::counter("sglang_num_requests_total"),
];
const SG_ABORTED: &[C] = &[
    C::counter("sglang:num_aborted_requests_total"),
    C::counter("sglang_num_aborted_requests_total"),
];
const STAGE_PREFILL: &[LabelFilter] = &[LabelFilter::Equals("stage", "prefill_forward")];
const SG_PREFILL_SUM: &[C] = &[
    C::counter("sglang:per_stage_req_latency_seconds_sum").filtered(STAGE_PREFILL),
    C::counter("sglang_per_stage_req_latency_seconds_sum").filtered(STAGE_PREFILL),
];
const SG_PREFILL_COUNT: &[C] = &[
    C::counter("sglang:per_stage_req_latency_seconds_count").filtered(STAGE_PREFILL),
    C::counter("sglang_per_stage_req_latency_seconds_count").filtered(STAGE_PREFILL),
];
const SG_SPEC_RATE: &[C] = &[
    C::gauge_mean("sglang:spec_accept_rate"),
    C::gauge_mean("sglang_spec_accept_rate"),
];
const SG_SPEC_LEN: &[C] = &[
    C::gauge_mean("sglang:spec_accept_length"),
    C::gauge_mean("sglang_spec_accept_length"),
];
const SG_HIT_RATE: &[C] = &[
    C::gauge_mean("sglang:cache_hit_rate"),
    C::gauge_mean("sglang_cache_hit_rate"),
];
const SG_KV_CAP: &[C] = &[
    C::gauge_sum("sglang:max_total_num_tokens"),
    C::gauge_sum("sglang_max_total_num_tokens"),
];
const SG_MAX_RUNNING: &[C] = &[
    C::gauge_sum("sglang:max_running_requests"),
    C::gauge_sum("sglang_max_running_requests"),
];
const SG_CTX: &[C] = &[
    C::gauge_min("sglang:context_len"),
    C::gauge_min("sglang_context_len"),
];

// ---------------------------------------------------------------- llama.cpp
// `llamacpp:prompt_tokens_seconds` / `llamacpp:predicted_tokens_seconds` are deliberately NOT
// mapped: they average over the window since the previous /metrics request and every scrape
// resets that window (pitfall 35). Rates come from the `*_seconds_total` counters instead.
const LC_RUNNING: &[C] = &[C::gauge_sum("llamacpp:requests_processing")];
const LC_WAITING: &[C] = &[C::gauge_sum("llamacpp:requests_deferred")];
const LC_GEN: &[C] = &[C::counter("llamacpp:tokens_predicted_total")];
const LC_PROMPT: &[C] = &[C::counter("llamacpp:prompt_tokens_total").plus(
    "llamacpp:prompt_tokens_total + llamacpp:prompt_tokens_cached_total",
    &["llamacpp:prompt_tokens_cached_total"],
)];
const LC_PROMPT_COMPUTED: &[C] = &[C::counter("llamacpp:prompt_tokens_total")];
const LC_PROMPT_CACHED: &[C] = &[C::counter("llamacpp:prompt_tokens_cached_total")];
const LC_KV: &[C] = &[
    // Removed by llama.cpp #13660; older builds only.
    C::gauge_mean("llamacpp:kv_cache_usage_ratio"),
];
const LC_SPEC_DRAFTS: &[C] = &[C::counter("llamacpp:spec_decode_num_drafts_total")];
const LC_SPEC_DRAFT_TOKENS: &[C] = &[C::counter("llamacpp:spec_decode_num_draft_tokens_total")];
const LC_SPEC_ACCEPTED: &[C] = &[C::counter("llamacpp:spec_decode_num_accepted_tokens_total")];
const LC_PREFILL_SECONDS: &[C] = &[C::counter("llamacpp:prompt_seconds_total")];
const LC_DECODE_SECONDS: &[C] = &[C::counter("llamacpp:tokens_predicted_seconds_total")];
const LC_DECODE_CALLS: &[C] = &[C::counter("llamacpp:n_decode_total")];

// ---------------------------------------------------------------- TGI (counters without _total)
const TGI_RUNNING: &[C] = &[C::gauge_sum("tgi_batch_current_size")];
const TGI_WAITING: &[C] = &[C::gauge_sum("tgi_queue_size")];
const TGI_GEN: &[C] = &[C::counter("tgi_request_generated_tokens_sum")];
const TGI_PROMPT: &[C] = &[C::counter("tgi_request_input_length_sum")];
const TGI_SUCCESS: &[C] = &[C::counter("tgi_request_success")];

impl Catalog {
    /// Candidates for `concept` on `engine`, in preference order (first present wins). Empty
    /// when the engine does not expose the concept.
    pub fn candidates(engine: Engine, concept: Concept) -> &'static [Candidate] {
        use Concept::*;
        match engine {
            Engine::Vllm => match concept {
                Running => VLLM_RUNNING,
                Waiting => VLLM_WAITING,
                Swapped => VLLM_SWAPPED,
                GenerationTokens => VLLM_GEN,
                PromptTokens => VLLM_PROMPT,
                PromptTokensComputed => VLLM_PROMPT_COMPUTED,
                PromptTokensCached => VLLM_PROMPT_CACHED,
                KvUsage => VLLM_KV,
                PrefixCacheQueries => VLLM_PC_Q,
                PrefixCacheHits => VLLM_PC_H,
                SpecDrafts => VLLM_SPEC_DRAFTS,
                SpecDraftTokens => VLLM_SPEC_DRAFT_TOKENS,
                SpecAcceptedTokens => VLLM_SPEC_ACCEPTED,
                Preemptions => VLLM_PREEMPT,
                GenThroughputGauge => VLLM_GEN_TPUT,
                PromptThroughputGauge => VLLM_PROMPT_TPUT,
                RequestSuccess => VLLM_SUCCESS,
                RequestAborted => VLLM_ABORTED,
                PrefillTimeSum => VLLM_PREFILL_SUM,
                PrefillTimeCount => VLLM_PREFILL_COUNT,
                SpecAcceptRateGauge => VLLM_SPEC_RATE,
                CacheHitRateGauge => VLLM_HIT_RATE,
                PrefillSeconds
                | DecodeSeconds
                | DecodeCalls
                | SpecAcceptLengthGauge
                | KvCapacityTokens
                | MaxRunningRequests
                | ContextLength => &[],
            },
            Engine::Sglang => match concept {
                Running => SG_RUNNING,
                Waiting => SG_WAITING,
                GenerationTokens => SG_GEN,
                PromptTokens => SG_PROMPT,
                PromptTokensComputed => SG_PROMPT_COMPUTED,
                PromptTokensCached => SG_PROMPT_CACHED,
                KvUsage => SG_KV,
                Preemptions => SG_PREEMPT,
                GenThroughputGauge => SG_GEN_TPUT,
                RequestSuccess => SG_SUCCESS,
                RequestAborted => SG_ABORTED,
                PrefillTimeSum => SG_PREFILL_SUM,
                PrefillTimeCount => SG_PREFILL_COUNT,
                SpecAcceptRateGauge => SG_SPEC_RATE,
                SpecAcceptLengthGauge => SG_SPEC_LEN,
                CacheHitRateGauge => SG_HIT_RATE,
                KvCapacityTokens => SG_KV_CAP,
                MaxRunningRequests => SG_MAX_RUNNING,
                ContextLength => SG_CTX,
                Swapped
                | PrefixCacheQueries
                | PrefixCacheHits
                | SpecDrafts
                | SpecDraftTokens
                | SpecAcceptedTokens
                | PromptThroughputGauge
                | PrefillSeconds
                | DecodeSeconds
                | DecodeCalls => &[],
            },
            Engine::LlamaCpp => match concept {
                Running => LC_RUNNING,
                Waiting => LC_WAITING,
                GenerationTokens => LC_GEN,
                PromptTokens => LC_PROMPT,
                PromptTokensComputed => LC_PROMPT_COMPUTED,
                PromptTokensCached => LC_PROMPT_CACHED,
                KvUsage => LC_KV,
                SpecDrafts => LC_SPEC_DRAFTS,
                SpecDraftTokens => LC_SPEC_DRAFT_TOKENS,
                SpecAcceptedTokens => LC_SPEC_ACCEPTED,
                PrefillSeconds => LC_PREFILL_SECONDS,
                DecodeSeconds => LC_DECODE_SECONDS,
                DecodeCalls => LC_DECODE_CALLS,
                _ => &[],
            },
            Engine::Tgi => match concept {
                Running => TGI_RUNNING,
                Waiting => TGI_WAITING,
                GenerationTokens => TGI_GEN,
                PromptTokens => TGI_PROMPT,
                RequestSuccess => TGI_SUCCESS,
                _ => &[],
            },
            Engine::Ollama | Engine::OpenAiProxy => &[],
        }
    }

    /// Histogram family names (without `_bucket`) for `h` on `engine`, in preference order.
    pub fn histograms(engine: Engine, h: HistogramConcept) -> &'static [&'static str] {
        use HistogramConcept::*;
        match (engine, h) {
            (Engine::Vllm, Ttft) => &["vllm:time_to_first_token_seconds"],
            (Engine::Vllm, Itl) => &[
                "vllm:inter_token_latency_seconds",
                "vllm:time_per_output_token_seconds",
            ],
            (Engine::Vllm, Tpot) => &["vllm:request_time_per_output_token_seconds"],
            (Engine::Vllm, E2e) => &["vllm:e2e_request_latency_seconds"],
            (Engine::Vllm, Queue) => &["vllm:request_queue_time_seconds"],
            (Engine::Vllm, Prefill) => &["vllm:request_prefill_time_seconds"],
            (Engine::Sglang, Ttft) => &[
                "sglang:time_to_first_token_seconds",
                "sglang_time_to_first_token_seconds",
            ],
            (Engine::Sglang, Itl) => &[
                "sglang:inter_token_latency_seconds",
                "sglang_inter_token_latency_seconds",
            ],
            (Engine::Sglang, Tpot) => &[
                "sglang:time_per_output_token_seconds",
                "sglang_time_per_output_token_seconds",
            ],
            (Engine::Sglang, E2e) => &[
                "sglang:e2e_request_latency_seconds",
                "sglang_e2e_request_latency_seconds",
            ],
            (Engine::Tgi, Tpot) => &["tgi_request_mean_time_per_token_duration"],
            (Engine::Tgi, E2e) => &["tgi_request_duration"],
            (Engine::Tgi, Queue) => &["tgi_request_queue_duration"],
            _ => &[],
        }
    }
}

impl Scrape {
    /// Read `concept` for `engine`: the first candidate present wins; series are aggregated as
    /// described in the module docs. `None` when no candidate series is present.
    pub fn reading(&self, engine: Engine, concept: Concept) -> Option<Reading> {
        Catalog::candidates(engine, concept)
            .iter()
            .find_map(|c| c.read(self))
    }

    /// Value of `concept` for `engine`; `None` when absent (never 0 for absent) or not usable
    /// (NaN, vLLM V0 hit rate `-1` = prefix caching disabled).
    pub fn concept(&self, engine: Engine, concept: Concept) -> Option<f64> {
        self.reading(engine, concept).and_then(|r| r.value)
    }
}

/// Family-name prefixes that belong to one engine.
fn engine_of_family(name: &str) -> Option<Engine> {
    if name.starts_with("vllm:") || name.starts_with("kserve_vllm:") {
        Some(Engine::Vllm)
    } else if name.starts_with("sglang:") || name.starts_with("sglang_") {
        Some(Engine::Sglang)
    } else if name.starts_with("llamacpp:") {
        Some(Engine::LlamaCpp)
    } else if name.starts_with("tgi_") {
        Some(Engine::Tgi)
    } else {
        None
    }
}

/// Guess the engine from the families present in one scrape.
///
/// Rule (decided on several families, not one prefix):
/// 1. Count distinct non-`_created` families per engine namespace (`vllm:` / `kserve_vllm:`,
///    `sglang:` / `sglang_`, `llamacpp:`, `tgi_`).
/// 2. If any vLLM, SGLang or llama.cpp family exists, the namespace with the most families wins
///    (ties broken in that order). `tgi_*` families never outvote them: IBM's vLLM fork exports
///    TGIS-compatible `tgi_*` names next to its own.
/// 3. If only `tgi_*` families exist: when the scrape shows a Python exporter (a `python_*`
///    family, or a label value that is a stringified Python dict such as
///    `method="{'method': 'prefill'}"`), it is the IBM vLLM TGIS-compat fork → [`Engine::Vllm`]
///    (the real TGI router is Rust and exports neither). Otherwise TGI needs at least two
///    distinct `tgi_*` families.
/// 4. Anything else → `None`.
pub fn detect_engine_from_metrics(s: &Scrape) -> Option<Engine> {
    let (mut vllm, mut sglang, mut llama, mut tgi) = (0usize, 0usize, 0usize, 0usize);
    for fam in s.family_names() {
        match engine_of_family(fam) {
            Some(Engine::Vllm) => vllm += 1,
            Some(Engine::Sglang) => sglang += 1,
            Some(Engine::LlamaCpp) => llama += 1,
            Some(Engine::Tgi) => tgi += 1,
            _ => {}
        }
    }
    let best = [
        (vllm, Engine::Vllm),
        (sglang, Engine::Sglang),
        (llama, Engine::LlamaCpp),
    ]
    .into_iter()
    .fold(None::<(usize, Engine)>, |acc, (n, e)| match acc {
        Some((m, _)) if m >= n => acc,
        _ if n > 0 => Some((n, e)),
        _ => acc,
    });
    if let Some((_, e)) = best {
        return Some(e);
    }
    if tgi == 0 {
        return None;
    }
    let python_family = s.family_names().any(|f| f.starts_with("python_"));
    let python_dict_label = s
        .samples()
        .filter(|x| x.name.starts_with("tgi_"))
        .any(|x| x.labels.values().any(|v| v.trim_start().starts_with("{'")));
    if python_family || python_dict_label {
        Some(Engine::Vllm)
    } else if tgi >= 2 {
        Some(Engine::Tgi)
    } else {
        None
    }
}
