//! The `/metrics` page of each personality (Prometheus text exposition 0.0.4), modelled on the
//! captures in `tests/data/engines/` (vLLM 0.32 `local-captures/vllm-metrics*.txt`, SGLang
//! `sglang-*-metrics*.prom` and the 2025-10 catalog, llama.cpp
//! `local-captures/llama-server-metrics*.txt`).
//!
//! Every value is derived from the engine's own counters ([`crate::EngineStats`]) and the
//! histograms and per-engine accumulators kept here, so a scrape before and after a load
//! differs by exactly what the engine did.

use std::fmt::Write as _;

use crate::config::Personality;
use crate::stats::EngineStats;
use crate::Shared;

// ------------------------------------------------------------------------------ histograms

/// vLLM 0.32 `time_to_first_token_seconds` buckets (seconds).
const VLLM_TTFT: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM 0.32 `inter_token_latency_seconds` / `request_time_per_output_token_seconds` buckets.
const VLLM_ITL: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM 0.32 request phase buckets (e2e, queue, prefill, decode; seconds).
const VLLM_PHASE: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// SGLang (v0.4 production-metrics docs) TTFT buckets (seconds).
const SGLANG_TTFT: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    15.0, 20.0, 25.0, 30.0,
];
/// SGLang per-token latency buckets (seconds).
const SGLANG_ITL: &[f64] = &[
    0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5,
];
/// SGLang e2e / stage latency buckets (seconds).
const SGLANG_E2E: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
];

/// A Prometheus histogram: per-bucket counts (the last bucket is `+Inf`), sum and count.
#[derive(Debug, Clone)]
pub(crate) struct Histogram {
    bounds: Vec<f64>,
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &[f64]) -> Self {
        Histogram {
            bounds: bounds.to_vec(),
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Record one observation.
    pub(crate) fn observe(&mut self, v: f64) {
        let i = self.bounds.partition_point(|&b| b < v);
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// Number of observations.
    #[cfg(test)]
    pub(crate) fn count(&self) -> u64 {
        self.count
    }
}

/// `1, 2, 5, 10, 20, 50, ...` up to `max` (vLLM's token-count histogram buckets).
fn one_two_five(max: u64) -> Vec<f64> {
    let mut v = Vec::new();
    let mut m = 1u64;
    'outer: loop {
        for k in [1, 2, 5] {
            let b = m.saturating_mul(k);
            if b > max {
                break 'outer;
            }
            v.push(b as f64);
        }
        match m.checked_mul(10) {
            Some(x) => m = x,
            None => break,
        }
    }
    v
}

/// Per-request latency histograms (engine clock, seconds) and token-count histograms.
#[derive(Debug, Clone)]
pub(crate) struct Hists {
    /// received → first token.
    pub ttft: Histogram,
    /// Gap between consecutive token events of one request (one observation per event).
    pub itl: Histogram,
    /// Per finished request: decode time / (generated − 1).
    pub tpot: Histogram,
    /// received → finished.
    pub e2e: Histogram,
    /// received → first admitted.
    pub queue: Histogram,
    /// first admitted → first token.
    pub prefill: Histogram,
    /// first token → finished.
    pub decode: Histogram,
    /// Prompt tokens per finished request.
    pub prompt_tokens: Histogram,
    /// Generated tokens per finished request.
    pub generation_tokens: Histogram,
}

impl Hists {
    fn new(p: Personality, max_model_len: u64) -> Self {
        let tokens = one_two_five(max_model_len);
        let (ttft, itl, phase) = match p {
            Personality::Sglang => (SGLANG_TTFT, SGLANG_ITL, SGLANG_E2E),
            _ => (VLLM_TTFT, VLLM_ITL, VLLM_PHASE),
        };
        Hists {
            ttft: Histogram::new(ttft),
            itl: Histogram::new(itl),
            tpot: Histogram::new(itl),
            e2e: Histogram::new(phase),
            queue: Histogram::new(phase),
            prefill: Histogram::new(phase),
            decode: Histogram::new(phase),
            prompt_tokens: Histogram::new(&tokens),
            generation_tokens: Histogram::new(&tokens),
        }
    }
}

/// llama.cpp's "since the previous /metrics request" window behind the two
/// `*_tokens_seconds` gauges (each scrape resets it, as in llama-server).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LlamaWindow {
    pub prompt_tokens: u64,
    pub prompt_seconds: f64,
    pub predicted_tokens: u64,
    pub predicted_seconds: f64,
}

/// One llama.cpp slot as shown by `/slots`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SlotView {
    /// Request sequence number being served (`id_task`), `None` when idle.
    pub task: Option<u64>,
    /// Tokens generated so far for that request.
    pub n_decoded: u64,
}

/// Everything the `/metrics` page needs beyond the atomic [`EngineStats`] counters. Written by
/// the scheduler (once per step), read by the HTTP handlers.
#[derive(Debug)]
pub(crate) struct MetricsState {
    /// Unix time (s, fractional) the simulator started: the value of every `*_created` series.
    pub created_unix: f64,
    pub hist: Hists,
    /// Accepted draft tokens per draft position.
    pub accepted_per_pos: Vec<u64>,
    /// llama.cpp: prompt processing seconds (admitted → first token), summed over requests.
    pub prompt_seconds_total: f64,
    /// llama.cpp: tokens generated by requests that have left their slot (llama-server adds a
    /// request's tokens when it finishes).
    pub predicted_tokens_total: u64,
    /// llama.cpp: generation seconds (first token → end) of requests that left their slot.
    pub predicted_seconds_total: f64,
    /// llama.cpp: largest prompt + generated tokens of any request.
    pub n_tokens_max: u64,
    /// llama.cpp: Σ running requests over decode steps (for `n_busy_slots_per_decode`).
    pub busy_slots_total: u64,
    pub window: LlamaWindow,
    /// llama.cpp slots (`max_batch` of them); empty for other personalities.
    pub slots: Vec<SlotView>,
    /// SGLang `gen_throughput`: generated tokens / s over the last 40 decode steps.
    pub gen_throughput: f64,
}

impl MetricsState {
    pub(crate) fn new(cfg: &crate::SimConfig, created_unix: f64) -> Self {
        let slots = if cfg.personality == Personality::Llamacpp {
            vec![SlotView::default(); cfg.max_batch]
        } else {
            Vec::new()
        };
        MetricsState {
            created_unix,
            hist: Hists::new(cfg.personality, cfg.max_model_len),
            accepted_per_pos: vec![0; cfg.spec_tokens as usize],
            prompt_seconds_total: 0.0,
            predicted_tokens_total: 0,
            predicted_seconds_total: 0.0,
            n_tokens_max: 0,
            busy_slots_total: 0,
            window: LlamaWindow::default(),
            slots,
            gen_throughput: 0.0,
        }
    }
}

// ------------------------------------------------------------------------------ number formats

/// Python `prometheus_client`'s `floatToGoString`: `repr(float)`, but values with more than 6
/// digits before the point in Go exponent style (`8.128902e+06`, `1.7959752991296065e+09`).
pub(crate) fn py_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let mut s = format!("{v:?}");
    if let Some(e) = s.find('e') {
        // Rust `1e-7` / `1e16` → Python `1e-07` / `1e+16`.
        let (m, x) = s.split_at(e);
        let x = &x[1..];
        let (sign, digits) = match x.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', x),
        };
        s = format!("{m}e{sign}{digits:0>2}");
    }
    if v > 0.0 {
        if let Some(dot) = s.find('.') {
            if dot > 6 && !s.contains('e') {
                let mantissa = format!("{}.{}{}", &s[..1], &s[1..dot], &s[dot + 1..]);
                let mantissa = mantissa.trim_end_matches(['0', '.']);
                return format!("{mantissa}e+0{}", dot - 1);
            }
        }
    }
    s
}

/// C++ `ostream << double` (`%g`, 6 significant digits), as llama-server prints its values.
pub(crate) fn c_float(v: f64) -> String {
    if !v.is_finite() {
        return if v.is_nan() {
            "nan".into()
        } else if v > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    if v == 0.0 {
        return "0".into();
    }
    let exp = v.abs().log10().floor() as i32;
    let strip = |s: String| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if !(-4..6).contains(&exp) {
        let s = format!("{v:.5e}");
        let (m, x) = s.split_once('e').unwrap_or((&s, "0"));
        let x: i32 = x.parse().unwrap_or(0);
        let sign = if x < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip(m.to_string()), x.abs())
    } else {
        let decimals = (5 - exp).max(0) as usize;
        strip(format!("{v:.decimals$}"))
    }
}

/// llama-server values: integers as integers (its counters), anything else as `%g`.
pub(crate) fn llama_num(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e15 {
        format!("{}", v as i64)
    } else {
        c_float(v)
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

// ------------------------------------------------------------------------------ writer

/// Exposition writer: base labels on every sample, labels sorted by name (as
/// `prometheus_client` prints them), `*_created` companions when `created` is set.
struct Writer {
    out: String,
    base: Vec<(&'static str, String)>,
    created: Option<f64>,
    num: fn(f64) -> String,
}

type Labels<'a> = &'a [(&'a str, &'a str)];

impl Writer {
    fn labels(&self, extra: Labels<'_>) -> String {
        let mut all: Vec<(&str, &str)> = self
            .base
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .chain(extra.iter().copied())
            .collect();
        if all.is_empty() {
            return String::new();
        }
        all.sort_by(|a, b| a.0.cmp(b.0));
        let inner: Vec<String> = all
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
            .collect();
        format!("{{{}}}", inner.join(","))
    }

    fn header(&mut self, name: &str, help: &str, typ: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {typ}");
    }

    fn sample(&mut self, name: &str, extra: Labels<'_>, value: &str) {
        let labels = self.labels(extra);
        let _ = writeln!(self.out, "{name}{labels} {value}");
    }

    fn created_family(&mut self, base: &str, help: &str, series: &[Labels<'_>]) {
        if let Some(t) = self.created {
            let name = format!("{base}_created");
            self.header(&name, help, "gauge");
            let v = py_float(t);
            for l in series {
                self.sample(&name, l, &v);
            }
        }
    }

    fn gauge(&mut self, name: &str, help: &str, v: f64) {
        self.gauge_series(name, help, &[(&[], v)]);
    }

    fn gauge_series(&mut self, name: &str, help: &str, series: &[(Labels<'_>, f64)]) {
        self.header(name, help, "gauge");
        for (l, v) in series {
            let v = (self.num)(*v);
            self.sample(name, l, &v);
        }
    }

    /// A counter family `base_total` (TYPE line with `_total`, as vLLM 0.32 prints it) plus
    /// `base_created` when enabled. Counter values are integers here, printed as floats in
    /// Python style or as integers (llama.cpp).
    fn counter(&mut self, base: &str, help: &str, v: f64) {
        self.counter_series(base, help, &[(&[], v)]);
    }

    fn counter_series(&mut self, base: &str, help: &str, series: &[(Labels<'_>, f64)]) {
        let name = format!("{base}_total");
        self.header(&name, help, "counter");
        for (l, v) in series {
            let v = (self.num)(*v);
            self.sample(&name, l, &v);
        }
        let labels: Vec<Labels<'_>> = series.iter().map(|(l, _)| *l).collect();
        self.created_family(base, help, &labels);
    }

    fn histogram(&mut self, name: &str, help: &str, h: &Histogram, extra: Labels<'_>) {
        self.header(name, help, "histogram");
        let bucket = format!("{name}_bucket");
        let mut cum = 0u64;
        for (i, c) in h.counts.iter().enumerate() {
            cum += c;
            let le = match h.bounds.get(i) {
                Some(b) => py_float(*b),
                None => "+Inf".to_string(),
            };
            let mut l: Vec<(&str, &str)> = extra.to_vec();
            l.push(("le", &le));
            self.sample(&bucket, &l, &py_float(cum as f64));
        }
        self.sample(&format!("{name}_count"), extra, &py_float(h.count as f64));
        self.sample(&format!("{name}_sum"), extra, &py_float(h.sum));
        self.created_family(name, help, &[extra]);
    }
}

// ------------------------------------------------------------------------------ pages

/// The `/metrics` body of the configured personality (`None` for the neutral one).
pub(crate) fn render(shared: &Shared) -> Option<String> {
    let st = shared.stats.snapshot();
    let cfg = &shared.cfg;
    let mut m = shared.metrics_state();
    let page = match cfg.personality {
        Personality::Neutral => None,
        Personality::Vllm => Some(vllm(cfg, &st, &m)),
        Personality::Sglang => Some(sglang(cfg, &st, &m)),
        Personality::Llamacpp => {
            let page = llamacpp(&st, &m);
            // llama-server resets the window of its two throughput gauges on every scrape.
            m.window = LlamaWindow::default();
            Some(page)
        }
    };
    if cfg.metrics_without_running {
        page.map(|p| without_scheduler_gauges(&p))
    } else {
        page
    }
}

/// `page` without the running / waiting request gauges of any personality
/// (`--metrics-without-running`): every sample, HELP and TYPE line of those families goes.
fn without_scheduler_gauges(page: &str) -> String {
    const FAMILIES: &[&str] = &[
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:num_requests_waiting_by_reason",
        "num_running_reqs",
        "num_queue_reqs",
        "num_requests_running",
        "num_requests_waiting",
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
    ];
    let family_of = |line: &str| -> String {
        let rest = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
            .unwrap_or(line);
        let end = rest.find(['{', ' ']).unwrap_or(rest.len());
        let name = &rest[..end];
        // SGLang's families carry a `sglang:` / `sglang_` prefix.
        name.strip_prefix("sglang:")
            .or_else(|| name.strip_prefix("sglang_"))
            .unwrap_or(name)
            .to_owned()
    };
    let mut out = String::with_capacity(page.len());
    for line in page.lines() {
        if !FAMILIES.contains(&family_of(line).as_str()) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn ratio(num: u64, den: u64) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

fn vllm(cfg: &crate::SimConfig, st: &EngineStats, m: &MetricsState) -> String {
    let mut w = Writer {
        out: String::with_capacity(32 * 1024),
        base: vec![("engine", "0".into()), ("model_name", cfg.model.clone())],
        created: Some(m.created_unix),
        num: py_float,
    };
    vllm_scheduler(&mut w, st);
    vllm_tokens(&mut w, st);
    vllm_request_success(&mut w, st);
    if cfg.spec_tokens > 0 {
        vllm_spec_decode(&mut w, st, m);
    }
    vllm_histograms(&mut w, &m.hist);
    vllm_cache_config_info(&mut w, cfg, st);
    w.out
}

/// vLLM scheduler gauges: running and waiting requests (waiting by reason, all `capacity`)
/// and KV-cache usage (a fraction, 1 = full).
fn vllm_scheduler(w: &mut Writer, st: &EngineStats) {
    let f = |v: u64| v as f64;
    w.gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        f(st.running),
    );
    w.gauge(
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        f(st.waiting),
    );
    w.gauge_series(
        "vllm:num_requests_waiting_by_reason",
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
        &[
            (&[("reason", "capacity")], f(st.waiting)),
            (&[("reason", "deferred")], 0.0),
        ],
    );
    w.gauge(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        ratio(st.kv_blocks_used, st.kv_blocks_total),
    );
}

/// vLLM token counters: prefix-cache queries and hits, preemptions, prompt tokens (by
/// source, cached) and generation tokens (tokens).
fn vllm_tokens(w: &mut Writer, st: &EngineStats) {
    let f = |v: u64| v as f64;
    w.counter(
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        f(st.prefix_cache_queries_total),
    );
    w.counter(
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        f(st.prefix_cache_hits_total),
    );
    w.counter(
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        f(st.preemptions_total),
    );
    w.counter(
        "vllm:prompt_tokens",
        "Number of prefill tokens processed.",
        f(st.prompt_tokens_total),
    );
    w.counter_series(
        "vllm:prompt_tokens_by_source",
        "Number of prompt tokens by source.",
        &[
            (&[("source", "local_compute")], f(st.prefill_tokens_total)),
            (
                &[("source", "local_cache_hit")],
                f(st.prefix_cache_hits_total),
            ),
            (&[("source", "external_kv_transfer")], 0.0),
        ],
    );
    w.counter(
        "vllm:prompt_tokens_cached",
        "Number of cached prompt tokens (local + external).",
        f(st.prefix_cache_hits_total),
    );
    w.counter(
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        f(st.generation_tokens_total),
    );
}

/// `vllm:request_success` by finished reason (stop, length, abort = cancelled, error,
/// repetition = 0).
fn vllm_request_success(w: &mut Writer, st: &EngineStats) {
    let f = |v: u64| v as f64;
    w.counter_series(
        "vllm:request_success",
        "Count of successfully processed requests.",
        &[
            (
                &[("finished_reason", "stop")],
                f(st.requests_finished_stop_total),
            ),
            (
                &[("finished_reason", "length")],
                f(st.requests_finished_length_total),
            ),
            (
                &[("finished_reason", "abort")],
                f(st.requests_cancelled_total),
            ),
            (
                &[("finished_reason", "error")],
                f(st.requests_finished_error_total),
            ),
            (&[("finished_reason", "repetition")], 0.0),
        ],
    );
}

/// vLLM speculative-decoding counters (drafts, draft and accepted tokens, accepted tokens per
/// draft position); written only when speculative decoding is on.
fn vllm_spec_decode(w: &mut Writer, st: &EngineStats, m: &MetricsState) {
    let f = |v: u64| v as f64;
    w.counter(
        "vllm:spec_decode_num_drafts",
        "Number of spec decoding drafts.",
        f(st.spec_drafts_total),
    );
    w.counter(
        "vllm:spec_decode_num_draft_tokens",
        "Number of draft tokens.",
        f(st.spec_draft_tokens_total),
    );
    w.counter(
        "vllm:spec_decode_num_accepted_tokens",
        "Number of accepted tokens.",
        f(st.spec_accepted_tokens_total),
    );
    let positions: Vec<String> = (0..m.accepted_per_pos.len())
        .map(|i| i.to_string())
        .collect();
    let labels: Vec<[(&str, &str); 1]> = positions
        .iter()
        .map(|p| [("position", p.as_str())])
        .collect();
    let series: Vec<(Labels<'_>, f64)> = labels
        .iter()
        .zip(&m.accepted_per_pos)
        .map(|(l, &v)| (&l[..], f(v)))
        .collect();
    w.counter_series(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        &series,
    );
}

/// vLLM request histograms: prompt and generation tokens, and TTFT, ITL, TPOT, E2E, queue,
/// prefill and decode times (seconds).
fn vllm_histograms(w: &mut Writer, h: &Hists) {
    w.histogram(
        "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.",
        &h.prompt_tokens,
        &[],
    );
    w.histogram(
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        &h.generation_tokens,
        &[],
    );
    w.histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        &h.ttft,
        &[],
    );
    w.histogram(
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        &h.itl,
        &[],
    );
    w.histogram(
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        &h.tpot,
        &[],
    );
    w.histogram(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        &h.e2e,
        &[],
    );
    w.histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        &h.queue,
        &[],
    );
    w.histogram(
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        &h.prefill,
        &[],
    );
    w.histogram(
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        &h.decode,
        &[],
    );
}

/// `vllm:cache_config_info`: an info gauge (value 1.0) with the KV-cache configuration in its
/// labels and no base labels besides `engine`.
fn vllm_cache_config_info(w: &mut Writer, cfg: &crate::SimConfig, st: &EngineStats) {
    // Info gauge: the configuration is in the labels (string values), engine label only.
    let blocks = st.kv_blocks_total.to_string();
    let block_size = cfg.block_size.to_string();
    let kv_tokens = cfg.kv_tokens_total().to_string();
    let concurrency = format!(
        "{:?}",
        cfg.kv_tokens_total() as f64 / cfg.max_model_len as f64
    );
    let prefix = if cfg.prefix_cache { "True" } else { "False" };
    let labels: Vec<(&str, &str)> = vec![
        ("block_size", &block_size),
        ("cache_dtype", "auto"),
        ("enable_prefix_caching", prefix),
        ("engine", "0"),
        ("gpu_memory_utilization", "0.9"),
        ("is_attention_free", "False"),
        ("kv_cache_max_concurrency", &concurrency),
        ("kv_cache_size_tokens", &kv_tokens),
        ("num_cpu_blocks", "None"),
        ("num_gpu_blocks", &blocks),
        ("num_gpu_blocks_override", "None"),
        ("prefix_caching_hash_algo", "sha256"),
        ("sliding_window", "None"),
        ("user_specified_block_size", "True"),
    ];
    w.base.clear();
    w.header(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        "gauge",
    );
    w.sample("vllm:cache_config_info", &labels, "1.0");
}

fn sglang(cfg: &crate::SimConfig, st: &EngineStats, m: &MetricsState) -> String {
    let p = if cfg.sglang_underscore_prefix {
        "sglang_"
    } else {
        "sglang:"
    };
    let n = |s: &str| format!("{p}{s}");
    let mut w = Writer {
        out: String::with_capacity(16 * 1024),
        base: vec![
            ("engine_type", "unified".into()),
            ("model_name", cfg.model.clone()),
            ("pp_rank", "0".into()),
            ("tp_rank", "0".into()),
        ],
        created: Some(m.created_unix),
        num: py_float,
    };
    let f = |v: u64| v as f64;
    let (running, queue) = if cfg.sglang_old_gauge_names {
        ("num_requests_running", "num_requests_waiting")
    } else {
        ("num_running_reqs", "num_queue_reqs")
    };
    w.gauge(
        &n(running),
        "The number of running requests.",
        f(st.running),
    );
    w.gauge(
        &n("num_used_tokens"),
        "The number of used tokens.",
        f(st.kv_blocks_used.saturating_mul(cfg.block_size)),
    );
    w.gauge(
        &n("token_usage"),
        "The token usage.",
        ratio(st.kv_blocks_used, st.kv_blocks_total),
    );
    w.gauge(
        &n("gen_throughput"),
        "The generation throughput (token/s).",
        m.gen_throughput,
    );
    w.gauge(
        &n(queue),
        "The number of requests in the waiting queue.",
        f(st.waiting),
    );
    w.gauge(
        &n("cache_hit_rate"),
        "The prefix cache hit rate.",
        ratio(st.prefix_cache_hits_total, st.prefix_cache_queries_total),
    );
    w.gauge(
        &n("total_retracted_reqs"),
        "The total number of retracted requests due to kv cache full.",
        f(st.preemptions_total),
    );
    if cfg.spec_tokens > 0 {
        let len = if st.spec_drafts_total > 0 {
            1.0 + ratio(st.spec_accepted_tokens_total, st.spec_drafts_total)
        } else {
            0.0
        };
        w.gauge(
            &n("spec_accept_length"),
            "The average acceptance length of speculative decoding.",
            len,
        );
        w.gauge(
            &n("spec_accept_rate"),
            "The average acceptance rate of speculative decoding (`accepted tokens / total draft tokens` in batch).",
            ratio(st.spec_accepted_tokens_total, st.spec_draft_tokens_total),
        );
    }
    w.counter(
        &n("prompt_tokens"),
        "Number of prefill tokens processed.",
        f(st.prompt_tokens_total),
    );
    w.counter(
        &n("generation_tokens"),
        "Number of generation tokens processed.",
        f(st.generation_tokens_total),
    );
    w.counter(
        &n("cached_tokens"),
        "Number of cached prompt tokens.",
        f(st.prefix_cache_hits_total),
    );
    w.counter(
        &n("num_requests"),
        "Number of requests processed.",
        f(st.requests_finished_length_total
            + st.requests_finished_stop_total
            + st.requests_finished_error_total),
    );
    w.counter(
        &n("num_aborted_requests"),
        "Number of requests aborted.",
        f(st.requests_cancelled_total),
    );
    w.counter_series(
        &n("realtime_tokens"),
        "Total number of tokens processed (updated on each log interval).",
        &[
            (&[("mode", "prefill_compute")], f(st.prefill_tokens_total)),
            (&[("mode", "prefill_cache")], f(st.prefix_cache_hits_total)),
            (&[("mode", "decode")], f(st.generation_tokens_total)),
        ],
    );
    let h = &m.hist;
    w.histogram(
        &n("time_to_first_token_seconds"),
        "Histogram of time to first token in seconds.",
        &h.ttft,
        &[],
    );
    w.histogram(
        &n("inter_token_latency_seconds"),
        "Histogram of inter-token latency in seconds.",
        &h.itl,
        &[],
    );
    w.histogram(
        &n("e2e_request_latency_seconds"),
        "Histogram of End-to-end request latency in seconds",
        &h.e2e,
        &[],
    );
    w.histogram(
        &n("per_stage_req_latency_seconds"),
        "The latency of each stage of requests.",
        &h.prefill,
        &[("stage", "prefill_forward")],
    );
    w.out
}

fn llamacpp(st: &EngineStats, m: &MetricsState) -> String {
    let mut w = Writer {
        out: String::with_capacity(4 * 1024),
        base: Vec::new(),
        created: None,
        num: llama_num,
    };
    let f = |v: u64| v as f64;
    w.counter(
        "llamacpp:prompt_tokens",
        "Number of prompt tokens processed, excluding cached tokens",
        f(st.prefill_tokens_total),
    );
    w.counter(
        "llamacpp:prompt_tokens_cached",
        "Number of prompt tokens reused from the cache",
        f(st.prefix_cache_hits_total),
    );
    w.counter(
        "llamacpp:prompt_seconds",
        "Total time spent processing prompts",
        m.prompt_seconds_total,
    );
    w.counter(
        "llamacpp:tokens_predicted",
        "Number of generation tokens processed",
        f(m.predicted_tokens_total),
    );
    w.counter(
        "llamacpp:tokens_predicted_seconds",
        "Total time spent generating tokens",
        m.predicted_seconds_total,
    );
    w.counter(
        "llamacpp:n_decode",
        "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
        f(st.steps_total),
    );
    w.header(
        "llamacpp:n_tokens_max",
        "Largest observed sequence length (prompt + generation)",
        "counter",
    );
    w.sample("llamacpp:n_tokens_max", &[], &m.n_tokens_max.to_string());
    w.counter(
        "llamacpp:spec_decode_num_draft_tokens",
        "Speculative: Total draft tokens generated",
        f(st.spec_draft_tokens_total),
    );
    w.counter(
        "llamacpp:spec_decode_num_accepted_tokens",
        "Speculative: Total draft tokens accepted by the target model",
        f(st.spec_accepted_tokens_total),
    );
    w.counter(
        "llamacpp:spec_decode_num_drafts",
        "Speculative: Total speculative decoding verification steps",
        f(st.spec_drafts_total),
    );
    let per_s = |n: u64, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
    w.gauge(
        "llamacpp:prompt_tokens_seconds",
        "Average prompt throughput in tokens/s",
        per_s(m.window.prompt_tokens, m.window.prompt_seconds),
    );
    w.gauge(
        "llamacpp:predicted_tokens_seconds",
        "Average generation throughput in tokens/s",
        per_s(m.window.predicted_tokens, m.window.predicted_seconds),
    );
    w.gauge(
        "llamacpp:requests_processing",
        "Number of requests processing",
        f(st.running),
    );
    w.gauge(
        "llamacpp:requests_deferred",
        "Number of requests deferred",
        f(st.waiting),
    );
    w.gauge(
        "llamacpp:n_busy_slots_per_decode",
        "Average number of busy slots per llama_decode() call",
        m.busy_slots_total as f64 / (st.steps_total.max(1)) as f64,
    );
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_format() {
        assert_eq!(py_float(584.0), "584.0");
        assert_eq!(py_float(0.0), "0.0");
        assert_eq!(py_float(8128902.0), "8.128902e+06");
        assert_eq!(py_float(1795975299.1296065), "1.7959752991296065e+09");
        assert_eq!(py_float(4859109376.0), "4.859109376e+09");
        assert_eq!(py_float(10_000_000.0), "1e+07");
        assert_eq!(py_float(0.022118664365077874), "0.022118664365077874");
        assert_eq!(py_float(9.75e-06), "9.75e-06");
        assert_eq!(py_float(f64::INFINITY), "+Inf");
        assert_eq!(py_float(123456.5), "123456.5");
    }

    #[test]
    fn c_float_format() {
        assert_eq!(c_float(0.123526), "0.123526");
        assert_eq!(c_float(37.90721), "37.9072");
        assert_eq!(c_float(8233.9), "8233.9");
        assert_eq!(c_float(4.219), "4.219");
        assert_eq!(c_float(1000.0), "1000");
        assert_eq!(c_float(0.0), "0");
        assert_eq!(c_float(1234567.0), "1.23457e+06");
        assert_eq!(c_float(0.00001234), "1.234e-05");
        assert_eq!(llama_num(1234567.0), "1234567");
        assert_eq!(llama_num(3.68), "3.68");
    }

    #[test]
    fn histogram_buckets() {
        let mut h = Histogram::new(&[1.0, 2.0]);
        for v in [0.5, 1.0, 1.5, 3.0] {
            h.observe(v);
        }
        assert_eq!(h.counts, vec![2, 1, 1]);
        assert_eq!(h.count(), 4);
        assert!((h.sum - 6.0).abs() < 1e-12);
        assert_eq!(
            one_two_five(2048),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0]
        );
    }
}
