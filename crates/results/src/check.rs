//! Values no measurement can have produced, found in a results JSON (beyond its schema).
//! `servebench validate` reports them and `servebench publish` refuses a file that has any.
//!
//! Rules (walked over every object of the file, at any depth):
//! * **Negative** latency, duration, rate or count: a number < 0 under a key of the TTFT / TTST
//!   / ITL / E2E / tok/s / window families ([`NON_NEGATIVE_PREFIXES`], keys ending `_tps`,
//!   `_tok_s`, `_tok_per_sec`, `_rate`, `_pct`, or holding `per_second`) or a count
//!   ([`NON_NEGATIVE_COUNTS`]).
//! * **Fractions above 1**: hit, acceptance and attainment rates and shares
//!   ([`FRACTION_SUFFIXES`]) lie in [0, 1]. Offsets such as
//!   `sent_at_window_s` (a request sent before the window opened) may be negative and are not
//!   checked.
//! * **Percentiles out of order**: `<x>_p50` ≤ `<x>_p90` ≤ `<x>_p95` ≤ `<x>_p99` for the
//!   percentiles present in one object (1e-9 relative slack for rounding).
//! * **Cells that contradict themselves** (each object of `results`, the sustained matrix):
//!   `completed_request_count` > `request_count`; status `ok` without an `aggregate_tps`;
//!   `aggregate_tps` not `client_output_tokens / measurement_seconds` (the seed spec's formula,
//!   §4.2; 1 % and 0.01 tok/s slack for rounding).
//!   An ok cell with an aggregate also has a window (`measurement_seconds` > 0), and its
//!   `per_request_avg_tps` is `aggregate_tps / concurrency` (1 % slack).
//! * **Prefill rows that contradict themselves** (`prefill`, `prefill_warm`, keyed by context):
//!   an ok row with more prompt tokens than 4 × the context + 4,096 (the bound of
//!   `prefill::check_prompt_tokens`), a row that is not ok with a tok/s.
//! * **A run state that contradicts `run_complete`**: `run_state` `complete` with `run_complete`
//!   false, or `running` / `interrupted` with `run_complete` true.
//! * **Keys given twice** in one object ([`duplicate_keys`], checked on the file's text by
//!   `servebench validate` and `publish`).
//! * **Hardware that cannot be**: GPU utilisation above 100 % (`*gpu*util*_pct`), more VRAM used than
//!   the devices have (`vram_used_max_mb` over `vram_total_mb` + 5 %), negative power or
//!   memory.
//! * **Latencies beyond a day** ([`MAX_LATENCY_S`]): a TTFT / TTST / ITL / TPOT / E2E /
//!   request latency (s, or ms for keys ending `_ms`) over a day.
//! * **Timestamps that do not parse**: `metadata.started_at` (and any other string
//!   `metadata.*_at`) must be RFC 3339 with a year in 2000–2200; `metadata.timestamp` RFC 3339 or an ISO 8601 local
//!   date-time (`2026-11-29T18:31:53.359135`, what older versions wrote).

use std::fmt;

use serde_json::Value;

/// Key prefixes whose numbers are latencies (s or ms), durations (s) or rates (tok/s, req/s):
/// never negative.
pub const NON_NEGATIVE_PREFIXES: [&str; 24] = [
    "ttft",
    "client_ttft",
    "time_to_",
    "request_latency",
    "inter_token_latency",
    "chunk_inter_token_latency",
    "latency",
    "tpot",
    "itl",
    "e2e",
    "output_tps",
    "e2e_output_tps",
    "aggregate_tps",
    "per_request_avg_tps",
    "tok_per_sec",
    "client_tok_per_sec",
    "measurement_seconds",
    "measurement_wall_seconds",
    "wall_time",
    "prefill_seconds",
    "prefill_duration",
    "warmup_duration",
    "server_gen_throughput",
    "server_window_seconds",
];

/// Count keys (requests, tokens, streams) whose numbers are never negative.
pub const NON_NEGATIVE_COUNTS: [&str; 12] = [
    "concurrency",
    "request_count",
    "completed_request_count",
    "num_completed",
    "num_errors",
    "client_output_tokens",
    "output_tokens",
    "prompt_tokens",
    "input_tokens",
    "total_tokens",
    "context_tokens",
    "samples",
];

/// One impossible value: JSON pointer into the file and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImpossibleValue {
    /// JSON pointer (`/results/0/ttft_p50`).
    pub pointer: String,
    /// One line.
    pub message: String,
}

impl fmt::Display for ImpossibleValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.pointer, self.message)
    }
}

fn must_be_non_negative(key: &str) -> bool {
    NON_NEGATIVE_COUNTS.contains(&key)
        || NON_NEGATIVE_PREFIXES.iter().any(|p| key.starts_with(p))
        || key.ends_with("_tps")
        || key.ends_with("_tok_s")
        || key.ends_with("_tok_per_sec")
        || key.contains("per_second")
        || key.ends_with("_rate")
        || key.ends_with("_pct")
        || key.ends_with("_tokens")
        || key.ends_with("_reqs")
        || key.ends_with("_count")
        || key.starts_with("server_kv_usage")
        || key.starts_with("energy")
        || key.starts_with("power_")
        || key.starts_with("vram_")
        || key.starts_with("gpu_util")
        || key.starts_with("mem_util")
        || key == "effective_concurrency"
        || key == "server_samples"
}

/// Key suffixes whose numbers are fractions in [0, 1]: prefix-cache hit rates, speculative
/// acceptance rates (seed spec §3.9: clamped to [0, 1]) and time shares.
pub const FRACTION_SUFFIXES: [&str; 5] = [
    "cache_hit_rate",
    "accept_rate",
    "acceptance_rate",
    "_fraction",
    "attainment",
];

/// Longest latency a results file can hold, s (1 day): TTFT, TTST, ITL, TPOT, E2E and request
/// latency of one request. No request is waited on that long (break-it round 9: a TTFT p99
/// of 1e300 s validated and published as accepted).
pub const MAX_LATENCY_S: f64 = 86_400.0;

/// Key prefixes whose numbers are one request's latency in seconds (keys ending `_ms` are ms).
const LATENCY_PREFIXES: [&str; 11] = [
    "ttft",
    "client_ttft",
    "ttst",
    "time_to_",
    "latency",
    "request_latency",
    "inter_token_latency",
    "chunk_inter_token_latency",
    "tpot",
    "itl",
    "e2e_latency",
];

/// The key's value in seconds when it is a request latency (`None` for rates, counts and
/// anything else).
fn latency_seconds(key: &str, x: f64) -> Option<f64> {
    let rate = key.ends_with("_tps")
        || key.contains("tok_s")
        || key.contains("per_sec")
        || key.ends_with("_rate")
        || key.ends_with("_count");
    if rate || !LATENCY_PREFIXES.iter().any(|p| key.starts_with(p)) {
        return None;
    }
    Some(if key.ends_with("_ms") || key.contains("_ms_") {
        x / 1000.0
    } else {
        x
    })
}

fn must_be_fraction(key: &str) -> bool {
    FRACTION_SUFFIXES.iter().any(|s| key.ends_with(s))
}

fn escape(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

/// The contradictions of one sustained cell (`at`: its pointer).
fn check_cell(c: &serde_json::Map<String, Value>, at: &str, out: &mut Vec<ImpossibleValue>) {
    let num = |k: &str| c.get(k).and_then(Value::as_f64);
    let mut push = |k: &str, message: String| {
        out.push(ImpossibleValue {
            pointer: format!("{at}/{k}"),
            message,
        })
    };
    if let (Some(done), Some(all)) = (num("completed_request_count"), num("request_count")) {
        if done > all {
            push(
                "completed_request_count",
                format!("{done} completed requests of {all} sent"),
            );
        }
    }
    let agg = num("aggregate_tps");
    if c.get("status").and_then(Value::as_str) == Some("ok") && agg.is_none() {
        push(
            "aggregate_tps",
            "an ok cell without an aggregate tok/s (its headline)".into(),
        );
    }
    if c.get("status").and_then(Value::as_str) == Some("ok")
        && agg.is_some()
        && !num("measurement_seconds").is_some_and(|w| w > 0.0)
    {
        push(
            "measurement_seconds",
            "an ok cell with an aggregate tok/s but no window (measurement_seconds 0 or missing): tokens over no time".into(),
        );
    }
    if let (Some(a), Some(p), Some(n)) = (
        agg,
        num("per_request_avg_tps"),
        num("concurrency").filter(|&n| n >= 1.0),
    ) {
        let want = a / n;
        if (p - want).abs() > (0.01 * want.abs()).max(0.01) {
            push(
                "per_request_avg_tps",
                format!("{p} is not aggregate_tps / concurrency = {a} / {n} = {want:.3}"),
            );
        }
    }
    if let (Some(a), Some(t), Some(w)) = (
        agg,
        num("client_output_tokens"),
        num("measurement_seconds").filter(|&w| w > 0.0),
    ) {
        let want = t / w;
        if (a - want).abs() > (0.01 * want.abs()).max(0.01) {
            push(
                "aggregate_tps",
                format!(
                    "{a} is not client_output_tokens / measurement_seconds = {t} / {w} = {want:.3}"
                ),
            );
        }
    }
}

/// Prompt tokens above this many times the context (plus [`PROMPT_SLACK_TOKENS`]) are no count
/// of a prompt of that context (servebench-core's `prefill::check_prompt_tokens` makes such a
/// row `invalid`; the same bound).
pub const PROMPT_RATIO: f64 = 4.0;

/// Slack of the prompt-count bound, tokens (chat template, system prompt).
pub const PROMPT_SLACK_TOKENS: f64 = 4096.0;

/// The contradictions of one prefill row (`ctx`: its key, the context in tokens).
fn check_prefill_row(row: &Value, ctx: &str, at: &str, out: &mut Vec<ImpossibleValue>) {
    let ok = match row.get("status") {
        None | Some(Value::Null) => true,
        Some(s) => s.as_str() == Some("ok"),
    };
    let (Ok(ctx), Some(p)) = (
        ctx.parse::<f64>(),
        row.get("prompt_tokens").and_then(Value::as_f64),
    ) else {
        return;
    };
    if ok && p > PROMPT_RATIO * ctx + PROMPT_SLACK_TOKENS {
        out.push(ImpossibleValue {
            pointer: format!("{at}/prompt_tokens"),
            message: format!(
                "an ok prefill row with {p} prompt tokens for a {ctx}-token context: no count of that prompt"
            ),
        });
    }
    if !ok && row.get("tok_per_sec").and_then(Value::as_f64).is_some() {
        let status = row.get("status").and_then(Value::as_str).unwrap_or("?");
        out.push(ImpossibleValue {
            pointer: format!("{at}/tok_per_sec"),
            message: format!("a prefill row with status {status} and a tok/s"),
        });
    }
}

/// JSON pointers of the object keys that appear more than once in one object of the JSON
/// `text`, in document order (each repeat once per extra occurrence). JSON parsers disagree on
/// which one counts (serde_json and Python take the last), so a file with one says two things
/// (break-it round 9: `"aggregate_tps": -100, "aggregate_tps": 100` validated). Text that is
/// not JSON, or nested beyond the parser's depth limit, gives what was found before the error.
pub fn duplicate_keys(text: &str) -> Vec<String> {
    use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use std::borrow::Cow;

    /// One step of the path to the value being read (built into a pointer only for a repeat).
    enum Seg<'de> {
        Key(Cow<'de, str>),
        Index(usize),
    }

    fn pointer(path: &[Seg<'_>]) -> String {
        let mut p = String::new();
        for s in path {
            p.push('/');
            match s {
                Seg::Key(k) => p.push_str(&escape(k)),
                Seg::Index(i) => p.push_str(&i.to_string()),
            }
        }
        p
    }

    struct Walk<'a, 'de> {
        path: &'a mut Vec<Seg<'de>>,
        out: &'a mut Vec<String>,
    }

    impl<'de> DeserializeSeed<'de> for Walk<'_, 'de> {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Walk<'_, 'de> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_none<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let Walk { path, out } = self;
            let mut i = 0usize;
            loop {
                path.push(Seg::Index(i));
                let more = seq.next_element_seed(Walk {
                    path: &mut *path,
                    out: &mut *out,
                });
                path.pop();
                if more?.is_none() {
                    return Ok(());
                }
                i += 1;
            }
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let Walk { path, out } = self;
            // Most objects have few keys: a list is cheaper than a hash set, which takes over
            // past 32 keys (an object of 100,000 keys stays linear).
            let mut seen: Vec<Cow<'de, str>> = Vec::new();
            let mut many: Option<std::collections::HashSet<Cow<'de, str>>> = None;
            while let Some(k) = map.next_key::<Cow<'de, str>>()? {
                let repeat = match &mut many {
                    Some(set) => !set.insert(k.clone()),
                    None => {
                        let r = seen.contains(&k);
                        if !r {
                            seen.push(k.clone());
                            if seen.len() > 32 {
                                many = Some(seen.drain(..).collect());
                            }
                        }
                        r
                    }
                };
                path.push(Seg::Key(k));
                if repeat {
                    out.push(pointer(path));
                }
                let r = map.next_value_seed(Walk {
                    path: &mut *path,
                    out: &mut *out,
                });
                path.pop();
                r?;
            }
            Ok(())
        }
    }

    let mut out = Vec::new();
    let mut path = Vec::new();
    let mut de = serde_json::Deserializer::from_str(text);
    let _ = Walk {
        path: &mut path,
        out: &mut out,
    }
    .deserialize(&mut de);
    out
}

/// Cells that contradict the run or each other (break-it round 11: each made an `accepted`
/// row with a false headline): two cells of one layer with the same (C, context); prompt tokens
/// above the run's `max_model_len`; average output above `max_tokens` (1 % + 1 token slack);
/// an ok cell whose `wall_time` is shorter than its window, or that sent no request.
fn check_plan(v: &Value, out: &mut Vec<ImpossibleValue>) {
    let md = v.get("metadata");
    let positive = |k: &str| {
        md.and_then(|m| m.get(k))
            .and_then(Value::as_f64)
            .filter(|x| *x > 0.0)
    };
    let (max_len, max_tokens) = (positive("max_model_len"), positive("max_tokens"));
    for layer in ["results", "burst_results"] {
        let Some(cells) = v.get(layer).and_then(Value::as_array) else {
            continue;
        };
        let mut seen: Vec<(u64, u64)> = Vec::new();
        // (cells without both keys, hand-made fragments, are not compared)
        for (i, c) in cells.iter().enumerate() {
            let at = format!("/{layer}/{i}");
            let f = |k: &str| c.get(k).and_then(Value::as_f64);
            let key = c
                .get("concurrency")
                .and_then(Value::as_u64)
                .zip(c.get("context_tokens").and_then(Value::as_u64));
            if let Some(key) = key.filter(|k| seen.contains(k)) {
                out.push(ImpossibleValue {
                    pointer: format!("{at}/concurrency"),
                    message: format!(
                        "a second cell at C = {}, context {} in {layer} (one cell per point)",
                        key.0, key.1
                    ),
                });
            } else if let Some(key) = key {
                seen.push(key);
            }
            if let (Some(p), Some(m)) = (f("prompt_tokens"), max_len) {
                if p > m {
                    out.push(ImpossibleValue {
                        pointer: format!("{at}/prompt_tokens"),
                        message: format!("{p} prompt tokens, above the run's max_model_len {m}"),
                    });
                }
            }
            if let (Some(o), Some(m)) = (f("output_seq_len_avg"), max_tokens) {
                if o > m * 1.01 + 1.0 {
                    out.push(ImpossibleValue {
                        pointer: format!("{at}/output_seq_len_avg"),
                        message: format!("{o} output tokens per request, above max_tokens {m}"),
                    });
                }
            }
            if c.get("status").and_then(Value::as_str) != Some("ok") {
                continue;
            }
            if let (Some(wall), Some(win)) = (f("wall_time"), f("measurement_seconds")) {
                if wall > 0.0 && wall + 1e-6 < win {
                    out.push(ImpossibleValue {
                        pointer: format!("{at}/wall_time"),
                        message: format!("the cell took {wall} s, less than its {win} s window"),
                    });
                }
            }
            if c.get("request_count").and_then(Value::as_u64) == Some(0) {
                out.push(ImpossibleValue {
                    pointer: format!("{at}/request_count"),
                    message: "an ok cell that sent no request".into(),
                });
            }
        }
    }
}

/// Every impossible value in `v` (a results JSON), in document order (rules in the module docs).
pub fn impossible_values(v: &Value) -> Vec<ImpossibleValue> {
    let mut out = Vec::new();
    walk(v, "", &mut out);
    if let Some(cells) = v.get("results").and_then(Value::as_array) {
        for (i, c) in cells.iter().enumerate() {
            if let Some(c) = c.as_object() {
                check_cell(c, &format!("/results/{i}"), &mut out);
            }
        }
    }
    check_plan(v, &mut out);
    for layer in ["prefill", "prefill_warm"] {
        let Some(rows) = v.get(layer).and_then(Value::as_object) else {
            continue;
        };
        for (ctx, row) in rows {
            check_prefill_row(row, ctx, &format!("/{layer}/{}", escape(ctx)), &mut out);
        }
    }
    let state = v.get("run_state").and_then(Value::as_str);
    if let (Some(state), Some(complete)) = (state, v.get("run_complete").and_then(Value::as_bool)) {
        if (state == "complete") != complete {
            out.push(ImpossibleValue {
                pointer: "/run_state".into(),
                message: format!("run_state {state:?} with run_complete {complete}"),
            });
        }
    }
    if let Some(md) = v.get("metadata").and_then(Value::as_object) {
        for (k, x) in md {
            let Some(s) = x.as_str() else { continue };
            let ok = if k == "timestamp" {
                chrono::DateTime::parse_from_rfc3339(s).is_ok()
                    || chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").is_ok()
            } else if k.ends_with("_at") {
                // A run's own clock: a year outside 2000–2200 is no measurement's time.
                chrono::DateTime::parse_from_rfc3339(s)
                    .is_ok_and(|t| (2000..=2200).contains(&chrono::Datelike::year(&t.naive_utc())))
            } else {
                true
            };
            if !ok {
                out.push(ImpossibleValue {
                    pointer: format!("/metadata/{}", escape(k)),
                    message: format!("{s:?} is not an RFC 3339 timestamp (of a year in 2000–2200)"),
                });
            }
        }
    }
    out
}

fn walk(v: &Value, at: &str, out: &mut Vec<ImpossibleValue>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if let Some(n) = x.as_f64() {
                    if n < 0.0 && (must_be_non_negative(k) || must_be_fraction(k)) {
                        out.push(ImpossibleValue {
                            pointer: format!("{at}/{}", escape(k)),
                            message: format!("{n} is negative (a latency, rate or count)"),
                        });
                    } else if latency_seconds(k, n).is_some_and(|t| t > MAX_LATENCY_S) {
                        out.push(ImpossibleValue {
                            pointer: format!("{at}/{}", escape(k)),
                            message: format!(
                                "{n} is beyond a day (a request latency over {MAX_LATENCY_S} s)"
                            ),
                        });
                    } else if n > 1.0 + 1e-9 && must_be_fraction(k) {
                        out.push(ImpossibleValue {
                            pointer: format!("{at}/{}", escape(k)),
                            message: format!(
                                "{n} is above 1 (a fraction: hit or acceptance rate, share)"
                            ),
                        });
                    }
                }
            }
            // A GPU's utilisation is a percentage of the device: at most 100.
            for (k, x) in m {
                if let Some(n) = x.as_f64().filter(|n| *n > 100.0 + 1e-9) {
                    // (a CPU's share may pass 100 %: one core per 100)
                    if k.contains("gpu") && k.contains("util") && k.ends_with("_pct") {
                        out.push(ImpossibleValue {
                            pointer: format!("{at}/{}", escape(k)),
                            message: format!("{n} % is above 100 % (a utilisation)"),
                        });
                    }
                }
            }
            // A device cannot use more memory than it has (5 % slack for MiB vs MB rounding).
            if let (Some(used), Some(total)) = (
                m.get("vram_used_max_mb").and_then(Value::as_f64),
                m.get("vram_total_mb").and_then(Value::as_f64),
            ) {
                if total > 0.0 && used > total * 1.05 {
                    out.push(ImpossibleValue {
                        pointer: format!("{at}/vram_used_max_mb"),
                        message: format!(
                            "{used} MiB used is above the {total} MiB the devices have"
                        ),
                    });
                }
            }
            for base in m.keys().filter_map(|k| k.strip_suffix("_p50")) {
                let pct: Vec<(&str, f64)> = ["p50", "p90", "p95", "p99"]
                    .into_iter()
                    .filter_map(|p| {
                        m.get(&format!("{base}_{p}"))
                            .and_then(Value::as_f64)
                            .map(|x| (p, x))
                    })
                    .collect();
                for w in pct.windows(2) {
                    let ((pa, a), (pb, b)) = (w[0], w[1]);
                    if a > b + 1e-9 * a.abs().max(b.abs()) {
                        out.push(ImpossibleValue {
                            pointer: format!("{at}/{}", escape(&format!("{base}_{pa}"))),
                            message: format!("{base} {pa} {a} is above {pb} {b}"),
                        });
                    }
                }
            }
            for (k, x) in m {
                walk(x, &format!("{at}/{}", escape(k)), out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                walk(x, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_negative_out_of_order_and_bad_timestamps() {
        let v = json!({
            "metadata": {"started_at": "yesterday", "timestamp": "2026-11-29T18:31:53.359135"},
            "results": [{
                "ttft_p50": -0.5, "ttft_p90": 0.2, "ttft_p99": 0.1,
                "aggregate_tps": -3.0, "num_errors": 0,
                "request_samples": [{"sent_at_window_s": -0.2, "ttft": 0.1}]
            }]
        });
        let got: Vec<String> = impossible_values(&v)
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert!(
            got.iter()
                .any(|p| p.starts_with("/results/0/ttft_p50: -0.5 is negative")),
            "{got:?}"
        );
        assert!(
            got.iter()
                .any(|p| p.starts_with("/results/0/aggregate_tps")),
            "{got:?}"
        );
        assert!(
            got.iter()
                .any(|p| p.starts_with("/results/0/ttft_p90: ttft p90 0.2 is above p99 0.1")),
            "{got:?}"
        );
        assert!(
            got.iter().any(|p| p.starts_with("/metadata/started_at")),
            "{got:?}"
        );
        assert!(
            !got.iter().any(|p| p.contains("sent_at_window_s")),
            "{got:?}"
        );
        assert!(
            !got.iter().any(|p| p.starts_with("/metadata/timestamp")),
            "{got:?}"
        );
        assert_eq!(got.len(), 4, "{got:?}");
        let fine = json!({"metadata": {"started_at": "2026-12-02T05:22:56.673Z"}, "results": [{"ttft_p50": 0.1, "ttft_p90": 0.2, "ttft_p99": 0.2}]});
        assert!(impossible_values(&fine).is_empty());
    }

    /// Issue 17 break-it round 4: a cell claiming more completed requests than it sent, an ok
    /// cell without its headline, an aggregate that is not tokens / window, a running state
    /// beside run_complete true and a negative running-request average passed `validate` (and
    /// were kept by `--resume`).
    #[test]
    fn cells_that_contradict_themselves_are_found() {
        let v = json!({
            "run_state": "running", "run_complete": true,
            "results": [
                {"status": "ok", "aggregate_tps": 400.0, "client_output_tokens": 2048, "measurement_seconds": 5.12,
                 "request_count": 16, "completed_request_count": 16},
                {"status": "ok", "aggregate_tps": 900.0, "client_output_tokens": 2048, "measurement_seconds": 5.12,
                 "request_count": 16, "completed_request_count": 17, "avg_running_reqs": -5.0},
                {"status": "ok", "aggregate_tps": null},
                {"status": "skipped_capacity", "aggregate_tps": null}
            ],
            "burst_results": [{"status": "ok", "aggregate_tps": null}]
        });
        let got: Vec<String> = impossible_values(&v)
            .iter()
            .map(|p| p.to_string())
            .collect();
        for bad in [
            "/results/1/avg_running_reqs: -5 is negative",
            "/results/1/completed_request_count: 17 completed requests of 16 sent",
            "/results/1/aggregate_tps: 900 is not client_output_tokens / measurement_seconds",
            "/results/2/aggregate_tps: an ok cell without",
            "/run_state: run_state \"running\" with run_complete true",
        ] {
            assert!(got.iter().any(|p| p.starts_with(bad)), "{bad}: {got:?}");
        }
        assert_eq!(got.len(), 5, "{got:?}");
        let fine = json!({"run_state": "complete", "run_complete": true, "results": [
            {"status": "ok", "aggregate_tps": 398.1408040645716, "client_output_tokens": 2048, "measurement_seconds": 5.143909,
             "concurrency": 4, "per_request_avg_tps": 99.5352010161429}]});
        assert!(impossible_values(&fine).is_empty());
    }

    #[test]
    fn windowless_cells_per_request_speeds_and_prefill_rows_are_checked() {
        // break-it round 5: each of these passed validate and --resume
        let v = json!({
            "results": [
                {"status": "ok", "aggregate_tps": 400.0, "client_output_tokens": 2048, "measurement_seconds": 0.0},
                {"status": "ok", "aggregate_tps": 400.0, "measurement_seconds": null},
                {"status": "ok", "aggregate_tps": 400.0, "client_output_tokens": 2000, "measurement_seconds": 5.0,
                 "concurrency": 1, "per_request_avg_tps": 250.0},
                {"status": "invalid", "aggregate_tps": null, "measurement_seconds": 0.0}
            ],
            "prefill": {"1024": {"status": "ok", "prompt_tokens": 1_000_000_000_000u64, "tok_per_sec": 7.6e14},
                        "2048": {"status": "invalid", "prompt_tokens": 1_000_000_000_000u64, "tok_per_sec": null},
                        "4096": {"status": "ok", "prompt_tokens": 4200, "tok_per_sec": 9000.0}},
            "prefill_warm": {"1024": {"status": "invalid", "prompt_tokens": 1060, "tok_per_sec": 80000.0},
                             "8192": {"prompt_tokens": 36865, "tok_per_sec": 1.0}}
        });
        let got: Vec<String> = impossible_values(&v)
            .iter()
            .map(|p| p.to_string())
            .collect();
        for bad in [
            "/results/0/measurement_seconds: an ok cell with an aggregate tok/s but no window",
            "/results/1/measurement_seconds: an ok cell with an aggregate tok/s but no window",
            "/results/2/per_request_avg_tps: 250 is not aggregate_tps / concurrency",
            "/prefill/1024/prompt_tokens: an ok prefill row with 1000000000000 prompt tokens",
            "/prefill_warm/1024/tok_per_sec: a prefill row with status invalid and a tok/s",
            "/prefill_warm/8192/prompt_tokens: an ok prefill row with 36865",
        ] {
            assert!(got.iter().any(|p| p.starts_with(bad)), "{bad}: {got:?}");
        }
        assert_eq!(got.len(), 6, "{got:?}");
    }

    /// Issue 17 break-it round 3: a hit rate of 19,999.8 and a negative llama.cpp
    /// `timings_predicted_per_second_avg` passed `validate`.
    #[test]
    fn rates_fractions_and_per_second_values_are_checked() {
        let v = json!({"results": [{
            "server_prefix_cache_hit_rate": 19999.8,
            "timings_predicted_per_second_avg": -3.5,
            "server_spec_accept_rate": 1.5,
            "stall_fraction": 0.2,
            "achieved_rate": -1.0,
            "cpu_util_avg_pct": 180.0,
            "shortfall": -0.02
        }], "prefill": [{"cache_hit_rate": 0.98}]});
        let got: Vec<String> = impossible_values(&v)
            .iter()
            .map(|p| p.to_string())
            .collect();
        for bad in [
            "/results/0/server_prefix_cache_hit_rate: 19999.8 is above 1",
            "/results/0/timings_predicted_per_second_avg: -3.5 is negative",
            "/results/0/server_spec_accept_rate: 1.5 is above 1",
            "/results/0/achieved_rate: -1 is negative",
        ] {
            assert!(got.iter().any(|p| p.starts_with(bad)), "{bad}: {got:?}");
        }
        // A process may use more than one core; a shortfall is negative when the client ran
        // ahead of its schedule.
        assert_eq!(got.len(), 4, "{got:?}");
    }
}

#[cfg(test)]
mod more_tests {
    use super::*;
    use serde_json::json;

    /// Break-it round 9: latencies beyond a day, negative energy and years no run has.
    #[test]
    fn latencies_beyond_a_day_negative_energy_and_impossible_years() {
        let v = json!({
            "metadata": {"started_at": "0000-01-01T00:00:00Z", "finished_at": "2026-12-04T10:00:00Z"},
            "results": [{
                "ttft_p50": 0.05, "ttft_p99": 1e300, "request_latency_p50": 86400.0,
                "inter_token_latency_avg": 86400.001, "client_max_tick_lag_ms": 9e9,
                "ttft_ms_p99": 86_400_001.0, "e2e_output_tps_per_user_p50": 1e12,
                "energy_joules": -5.0, "time_to_second_token_p99": 1e300,
                "request_samples": [{"latency": 1e300}],
                "hardware_summary": {"vram_used_max_mb": 1e9, "vram_total_mb": 8000.0,
                    "power_total_avg_w": -3.0, "gpu_util_avg_pct": 1e300, "gpu_util_max_pct": 100.0}
            }]
        });
        let found: Vec<String> = impossible_values(&v)
            .into_iter()
            .map(|p| p.pointer)
            .collect();
        for at in [
            "/metadata/started_at",
            "/results/0/ttft_p99",
            "/results/0/inter_token_latency_avg",
            "/results/0/ttft_ms_p99",
            "/results/0/energy_joules",
            "/results/0/time_to_second_token_p99",
            "/results/0/request_samples/0/latency",
            "/results/0/hardware_summary/vram_used_max_mb",
            "/results/0/hardware_summary/power_total_avg_w",
            "/results/0/hardware_summary/gpu_util_avg_pct",
        ] {
            assert!(
                found.contains(&at.to_string()),
                "{at} missing from {found:?}"
            );
        }
        for fine in [
            "/metadata/finished_at",
            "/results/0/request_latency_p50",
            "/results/0/client_max_tick_lag_ms",
            "/results/0/e2e_output_tps_per_user_p50",
            "/results/0/hardware_summary/gpu_util_max_pct",
        ] {
            assert!(!found.contains(&fine.to_string()), "{fine} in {found:?}");
        }
    }
}

#[cfg(test)]
mod duplicate_key_tests {
    use super::duplicate_keys;

    #[test]
    fn repeated_keys_are_found_at_any_depth_and_nothing_else_is() {
        let text = r#"{"a": 1, "r": [{"t": -100, "t": 100, "x": {"k": 1}}, {"t": 1}], "a": 2, "a/b": 0, "a/b": 1}"#;
        assert_eq!(duplicate_keys(text), ["/r/0/t", "/a", "/a~1b"]);
        assert!(duplicate_keys(r#"{"a": {"a": 1}, "b": [1, 2, {"a": 3}]}"#).is_empty());
        assert!(duplicate_keys("not json").is_empty());
        assert!(
            duplicate_keys(&"[".repeat(100_000)).is_empty(),
            "deep nesting: no panic"
        );
        // a wide object (the hash set past 32 keys): the repeat is still found, in linear time
        let mut wide: Vec<String> = (0..100_000).map(|i| format!("\"k{i}\": {i}")).collect();
        wide.push("\"k7\": 0".into());
        let wide = format!("{{{}}}", wide.join(","));
        assert_eq!(duplicate_keys(&wide), ["/k7"]);
    }
}

#[cfg(test)]
mod plan_tests {
    use super::impossible_values;
    use serde_json::json;

    /// Break-it round 11: cells that contradict the run or each other.
    #[test]
    fn cells_that_contradict_the_run_or_each_other() {
        let cell = |c: u64, ctx: u64| {
            json!({"concurrency": c, "context_tokens": ctx, "status": "ok", "request_count": 4,
                   "wall_time": 9.0, "measurement_seconds": 5.0, "prompt_tokens": 100,
                   "output_seq_len_avg": 64.0, "aggregate_tps": 100.0,
                   "client_output_tokens": 500})
        };
        let good = json!({"metadata": {"max_model_len": 4096, "max_tokens": 64},
            "results": [cell(1, 0), cell(2, 0), cell(1, 512)], "burst_results": [cell(1, 0)]});
        assert!(
            impossible_values(&good).is_empty(),
            "{:?}",
            impossible_values(&good)
        );
        let mut bad = good.clone();
        bad["results"][2] = cell(1, 0);
        bad["results"][0]["prompt_tokens"] = json!(5000);
        bad["results"][1]["output_seq_len_avg"] = json!(66.0);
        bad["burst_results"][0]["wall_time"] = json!(4.9);
        let mut zero = cell(4, 0);
        zero["request_count"] = json!(0);
        bad["results"].as_array_mut().unwrap().push(zero);
        let found: Vec<String> = impossible_values(&bad)
            .into_iter()
            .map(|p| p.pointer)
            .collect();
        assert_eq!(
            found,
            [
                "/results/0/prompt_tokens",
                "/results/1/output_seq_len_avg",
                "/results/2/concurrency",
                "/results/3/request_count",
                "/burst_results/0/wall_time",
            ]
        );
        // 64.64 + 1 output tokens per request is still within max_tokens' slack
        let mut edge = good.clone();
        edge["results"][0]["output_seq_len_avg"] = json!(65.64);
        assert!(impossible_values(&edge).is_empty());
    }
}
