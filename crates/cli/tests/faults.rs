//! `servebench run` against misbehaving servers (issue 7): every fault ends in bounded time
//! with a typed reason, and no impossible number passes as `ok`.
//!
//! The server is [`faulty`], in this test process on 127.0.0.1. Each test sets short timeouts by
//! flag so it is fast, and asserts the elapsed time, the exit code, the cell status and its
//! typed `error_kind`. One test uses the default timeouts (a server that never answers).

mod faulty;

use std::process::{Command, Stdio};
use std::time::Duration;

use faulty::{Config, Fault};
use serde_json::Value;

mod common;

use common::BIN;

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
    json: Option<Value>,
}

impl Run {
    fn cell(&self) -> &Value {
        &self.json.as_ref().expect("results file")["results"][0]
    }

    fn dump(&self) -> String {
        format!(
            "exit {:?} after {:.1}s\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code,
            self.elapsed.as_secs_f64(),
            self.stdout,
            self.stderr
        )
    }
}

/// Runs `servebench run` against `url` with one C=1 context-0 cell and short settings, plus
/// `extra`; kills it after `limit`.
fn run(url: &str, extra: &[&str], limit: Duration) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let mut args: Vec<String> = [
        "run",
        "--url",
        url,
        "--concurrency",
        "1",
        "--contexts",
        "0",
        "--skip-prefill",
        "--duration",
        "1",
        "--stable-seconds",
        "0.3",
        "--decode-warmup-seconds",
        "0",
        "--cell-pause-seconds",
        "0",
        "--max-tokens",
        "32",
        "--no-calibration-cache",
        "-q",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // `extra` replaces a default flag of the same name
    for f in extra {
        if f.starts_with("--") {
            if let Some(j) = args.iter().position(|a| a.as_str() == *f) {
                let takes_value = args.get(j + 1).is_some_and(|v| !v.starts_with('-'));
                args.drain(j..j + 1 + usize::from(takes_value));
            }
        }
    }
    if extra.contains(&"--request-rate") {
        // the rate sets the load: no fixed concurrency
        if let Some(j) = args.iter().position(|a| a == "--concurrency") {
            args.drain(j..j + 2);
        }
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push("-o".into());
    args.push(out.display().to_string());
    let child = Command::new(BIN)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn servebench");
    let e = common::wait_for(child, limit);
    let Some(status) = e.status else {
        panic!(
            "servebench still running after {limit:?} (it must end in bounded time)\n--- stdout ---\n{}\n--- stderr ---\n{}",
            e.stdout, e.stderr
        );
    };
    let json = std::fs::read_to_string(&out)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    Run {
        code: status.code(),
        stdout: e.stdout,
        stderr: e.stderr,
        elapsed: e.elapsed,
        json,
    }
}

/// Asserts exit 3 and the first cell `invalid` with `kind`; returns the cell.
#[track_caller]
fn invalid_with(r: &Run, kind: &str) -> Value {
    assert_eq!(r.code, Some(3), "{}", r.dump());
    let c = r.cell().clone();
    assert_eq!(
        (c["status"].as_str(), c["error_kind"].as_str()),
        (Some("invalid"), Some(kind)),
        "{}\n{}",
        c["status_reason"],
        r.dump()
    );
    validate(r.json.as_ref().unwrap());
    c
}

#[track_caller]
fn validate(v: &Value) {
    common::assert_schema_valid(v);
}

const SHORT_LIMIT: Duration = Duration::from_secs(30);

#[test]
fn healthy_server_has_no_fault_findings() {
    let s = faulty::start(Config::new(Fault::Healthy, 0));
    let r = run(&s.url(), &[], SHORT_LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let c = r.cell();
    assert_eq!(c["status"], "ok", "{c:#}");
    assert_eq!(c["rejected_requests"], 0);
    assert_eq!(c["stall_count"], 0);
    assert!(c["error_kind"].is_null());
    assert_eq!(c["warning_kinds"], serde_json::json!([]), "{c:#}");
    validate(r.json.as_ref().unwrap());
}

/// Break-it round 7: a `103 Early Hints` before the 200 made the cell invalid ("HTTP 103").
#[test]
fn interim_responses_before_the_final_head_are_skipped() {
    let s = faulty::start(Config::new(Fault::InterimHeads, 0));
    let r = run(&s.url(), &[], SHORT_LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let c = r.cell();
    assert_eq!(c["status"], "ok", "{c:#}");
    assert!(c["aggregate_tps"].as_f64().unwrap() > 0.0, "{c:#}");
    validate(r.json.as_ref().unwrap());
}

#[test]
fn never_answering_server_ends_the_run_with_default_timeouts() {
    // Accepts every completion request and never answers: the startup JIT probe times out after
    // the default --probe-timeout (30 s) and the run ends with exit 1.
    let s = faulty::start(Config::new(Fault::HangBeforeHeaders, 0));
    let r = run(&s.url(), &[], Duration::from_secs(120));
    assert_eq!(r.code, Some(1), "{}", r.dump());
    assert!(r.elapsed < Duration::from_secs(60), "{}", r.dump());
    let err = r
        .stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(
        err.contains("first_byte_timeout") && err.contains("--probe-timeout"),
        "{}",
        r.dump()
    );
}

#[test]
fn hang_before_headers_fails_the_cell() {
    let s = faulty::start(Config::new(Fault::HangBeforeHeaders, 1));
    let r = run(&s.url(), &["--first-byte-timeout", "1"], SHORT_LIMIT);
    let c = invalid_with(&r, "first_byte_timeout");
    assert!(c["status_reason"]
        .as_str()
        .unwrap()
        .contains("(first-byte timeout)"));
    assert!(r.elapsed < Duration::from_secs(15), "{}", r.dump());
}

#[test]
fn hang_after_headers_fails_on_the_first_token_deadline() {
    let s = faulty::start(Config::new(Fault::HangAfterHeaders, 1));
    let r = run(
        &s.url(),
        &[
            "--first-token-timeout",
            "1",
            "--first-token-timeout-per-1k",
            "0",
        ],
        SHORT_LIMIT,
    );
    let c = invalid_with(&r, "first_token_timeout");
    assert!(c["status_reason"]
        .as_str()
        .unwrap()
        .contains("(first-token timeout;"));
    assert!(r.elapsed < Duration::from_secs(15), "{}", r.dump());
}

#[test]
fn hang_after_headers_in_request_count_mode() {
    let s = faulty::start(Config::new(Fault::HangAfterHeaders, 1));
    let r = run(
        &s.url(),
        &[
            "--request-count",
            "2",
            "--first-token-timeout",
            "1",
            "--first-token-timeout-per-1k",
            "0",
        ],
        SHORT_LIMIT,
    );
    invalid_with(&r, "first_token_timeout");
    assert!(r.elapsed < Duration::from_secs(15), "{}", r.dump());
}

#[test]
fn stall_mid_stream_hits_the_idle_timeout() {
    let s = faulty::start(Config::new(Fault::StallAfter { tokens: 3 }, 1));
    let r = run(&s.url(), &["--stream-idle-timeout", "1"], SHORT_LIMIT);
    let c = invalid_with(&r, "stream_stalled");
    assert!(c["status_reason"]
        .as_str()
        .unwrap()
        .contains("(stream idle timeout)"));
    assert!(r.elapsed < Duration::from_secs(15), "{}", r.dump());
}

#[test]
fn stall_mid_stream_in_request_count_mode() {
    let s = faulty::start(Config::new(Fault::StallAfter { tokens: 3 }, 1));
    let r = run(
        &s.url(),
        &["--request-count", "2", "--stream-idle-timeout", "1"],
        SHORT_LIMIT,
    );
    invalid_with(&r, "stream_stalled");
    assert!(r.elapsed < Duration::from_secs(15), "{}", r.dump());
}

#[test]
fn pings_after_the_first_token_end_the_request_in_bounded_time() {
    // one token, then only keep-alive comments: the pings keep the idle timer alive, but no
    // output token for 2 × the stream idle timeout ends the request (break-it round 3: the
    // default flags waited forever in the probe, the scout and request-count cells)
    let s = faulty::start(Config::new(Fault::PingsAfterFirstToken, 1));
    let r = run(
        &s.url(),
        &["--request-count", "2", "--stream-idle-timeout", "1"],
        SHORT_LIMIT,
    );
    let c = invalid_with(&r, "stream_stalled");
    assert!(
        c["status_reason"]
            .as_str()
            .unwrap()
            .contains("no output token for 2 s"),
        "{c:#}"
    );
    assert!(r.elapsed < Duration::from_secs(15), "{}", r.dump());
    // the startup probe too: the run ends with exit 1
    let s = faulty::start(Config::new(Fault::PingsAfterFirstToken, 0));
    let r = run(
        &s.url(),
        &["--probe-timeout", "2", "--stream-idle-timeout", "1"],
        SHORT_LIMIT,
    );
    assert_eq!(r.code, Some(1), "{}", r.dump());
    assert!(r.elapsed < Duration::from_secs(15), "{}", r.dump());
}

#[test]
fn a_request_count_cell_ends_at_its_batch_deadline() {
    // every request pauses 20 s after 2 tokens, inside the 30 s stream idle timeout: only the
    // cell's wall-clock deadline ends the batch (break-it round 7: a server that trickles just
    // inside the per-request deadlines held request-count and Burst cells for hours)
    let s = faulty::start(Config::new(
        Fault::PauseMidStream {
            burst: 2,
            pause_ms: 20_000,
        },
        1,
    ));
    let r = run(
        &s.url(),
        &[
            "--request-count",
            "3",
            "--stream-idle-timeout",
            "30",
            "--batch-timeout",
            "2",
        ],
        SHORT_LIMIT,
    );
    let c = invalid_with(&r, "batch_timeout");
    let reason = c["status_reason"].as_str().unwrap();
    assert!(
        reason.contains("deadline (2 s for its batches) passed during the measured batch")
            && reason.contains("1 in flight were cut, 2 never sent"),
        "{reason}"
    );
    assert!(r.elapsed < Duration::from_secs(12), "{}", r.dump());
    // a warmup batch is held to the same deadline
    let s = faulty::start(Config::new(
        Fault::PauseMidStream {
            burst: 2,
            pause_ms: 20_000,
        },
        1,
    ));
    let r = run(
        &s.url(),
        &[
            "--request-count",
            "3",
            "--warmup-request-count",
            "1",
            "--stream-idle-timeout",
            "30",
            "--batch-timeout",
            "2",
        ],
        SHORT_LIMIT,
    );
    let c = invalid_with(&r, "batch_timeout");
    assert!(
        c["status_reason"]
            .as_str()
            .unwrap()
            .contains("during the warmup batch"),
        "{c:#}"
    );
    assert!(r.elapsed < Duration::from_secs(12), "{}", r.dump());
}

#[test]
fn a_burst_without_usage_is_labelled_the_chunk_fallback_and_fails_the_exit_code() {
    // 8 tokens per chunk and no usage (break-it round 8: request-count and Burst cells said
    // `openai_completed_usage` at 1/8 of the true count, without a word)
    let s = faulty::start(Config::new(Fault::NoUsageMultiToken { per_chunk: 8 }, 1));
    let r = run(&s.url(), &["--request-count", "2"], SHORT_LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let c = r.cell();
    assert_eq!(
        c["aggregate_source"], "openai_stream_chunks_fallback",
        "{c:#}"
    );
    let warnings = c["warnings"].to_string();
    assert!(
        warnings.contains("2 of 2 completed requests sent no usage")
            && !warnings.contains("stopped before max_tokens"),
        "{c:#}"
    );
    assert_eq!(
        c["warning_kinds"],
        serde_json::json!(["estimated_tokens"]),
        "{c:#}"
    );
    validate(r.json.as_ref().unwrap());
    // an invalid Burst / E2E cell makes the exit code 3, like a sustained one (round 8: 0)
    let s = faulty::start(Config::new(
        Fault::PauseMidStream {
            burst: 2,
            pause_ms: 20_000,
        },
        3,
    ));
    let r = run(
        &s.url(),
        &[
            "--run-burst",
            "--burst-request-count",
            "1",
            "--burst-warmup-request-count",
            "1",
            "--batch-timeout",
            "1",
            "--stream-idle-timeout",
            "30",
        ],
        Duration::from_secs(60),
    );
    let v = r.json.as_ref().expect("results");
    assert_eq!(
        v["burst_results"][0]["error_kind"],
        "batch_timeout",
        "{}",
        r.dump()
    );
    assert_eq!(r.code, Some(3), "{}", r.dump());
    assert!(
        r.stderr.contains("1 of 1 Burst / E2E cells failed"),
        "{}",
        r.dump()
    );
}

#[test]
fn a_trickling_scout_ends_one_idle_timeout_after_its_first_token() {
    // max_tokens 1 ignored, a token every 300 ms, inside the 1 s idle timeout (break-it round
    // 8: each scout ran to the 2 × 1 + 16 token cut, 19 minutes at one token a minute)
    let s = faulty::start(Config::new(Fault::Trickle { every_ms: 300 }, 1));
    let r = run(
        &s.url(),
        &["--contexts", "1k", "--stream-idle-timeout", "1"],
        SHORT_LIMIT,
    );
    let c = r.cell();
    assert_eq!(c["error_kind"], "max_tokens_ignored", "{}", r.dump());
    assert!(
        c["status_reason"]
            .as_str()
            .unwrap()
            .contains("a max_tokens = 1 request was still streaming 1 s after its first token"),
        "{c:#}"
    );
    assert!(r.elapsed < Duration::from_secs(12), "{}", r.dump());
}

#[test]
fn endless_text_with_usage_stuck_is_cut_as_ignoring_max_tokens() {
    // usage says 1 for ever while text keeps coming: the token events pass the endless bound
    let s = faulty::start(Config::new(Fault::EndlessUsageStuck, 1));
    let r = run(
        &s.url(),
        &["--request-count", "2", "--max-tokens", "16"],
        SHORT_LIMIT,
    );
    invalid_with(&r, "max_tokens_ignored");
    assert!(r.elapsed < Duration::from_secs(15), "{}", r.dump());
}

#[test]
fn endless_stream_is_cut_as_ignoring_max_tokens() {
    let s = faulty::start(Config::new(Fault::Endless, 1));
    let r = run(
        &s.url(),
        &["--request-count", "2", "--max-tokens", "16"],
        SHORT_LIMIT,
    );
    invalid_with(&r, "max_tokens_ignored");
    assert!(r.elapsed < Duration::from_secs(15), "{}", r.dump());
}

#[test]
fn absurd_usage_is_never_ok() {
    // usage.completion_tokens jumps to 1e6 with max_tokens 32 (issue case 3)
    let s = faulty::start(Config::new(Fault::AbsurdUsage, 1));
    let r = run(&s.url(), &[], SHORT_LIMIT);
    invalid_with(&r, "usage_implausible");
    let s = faulty::start(Config::new(Fault::AbsurdUsage, 1));
    let r = run(&s.url(), &["--request-count", "2"], SHORT_LIMIT);
    invalid_with(&r, "usage_implausible");
}

#[test]
fn truncated_prompt_is_flagged_with_the_real_size() {
    // the server reports prompt_tokens 10 for a 1k context (issue case 4)
    let s = faulty::start(Config::new(Fault::PromptTokens(10), 1));
    let r = run(&s.url(), &["--contexts", "1k"], SHORT_LIMIT);
    let c = invalid_with(&r, "prompt_truncated");
    assert_eq!(c["measured_prompt_tokens"], 10, "{c:#}");
    assert_eq!(c["requested_context_tokens"], 1024);
    let sent = c["sent_prompt_tokens"].as_u64().unwrap();
    assert!((1000..=1024).contains(&sent), "{c:#}");
    assert!(r.stdout.contains("prompt_truncated"), "{}", r.dump());
}

#[test]
fn base_prompt_larger_than_the_context_is_reported() {
    // every prompt really has 354 tokens for context 64 (issue case 6)
    let s = faulty::start(Config {
        min_prompt_tokens: 354,
        ..Config::new(Fault::Healthy, 0)
    });
    let r = run(&s.url(), &["--contexts", "64"], SHORT_LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let v = r.json.as_ref().unwrap();
    let c = r.cell();
    assert_eq!(c["status"], "ok");
    assert_eq!(c["requested_context_tokens"], 64);
    assert_eq!(c["measured_prompt_tokens"], 354);
    assert_eq!(c["warning_kinds"], serde_json::json!(["context_mismatch"]));
    let log = v["event_log"].to_string();
    assert!(
        log.contains("startup warning: context 64: the base prompt alone has 354 tokens"),
        "{log}"
    );
    assert!(
        r.stdout.contains("context 64") && r.stdout.contains("354"),
        "{}",
        r.dump()
    );
    validate(v);
}

#[test]
fn plain_json_answer_to_a_stream_request() {
    let s = faulty::start(Config::new(Fault::PlainJson, 1));
    let r = run(&s.url(), &[], SHORT_LIMIT);
    invalid_with(&r, "not_streaming");
}

#[test]
fn http_429_without_retries_fails_the_cell_and_is_counted() {
    let s = faulty::start(Config::new(
        Fault::TooMany {
            times: 1000,
            retry_after: None,
        },
        1,
    ));
    let r = run(&s.url(), &[], SHORT_LIMIT);
    let c = invalid_with(&r, "rate_limited");
    assert!(c["rejected_requests"].as_u64().unwrap() >= 1, "{c:#}");
    assert_eq!(c["retried_requests"], 0);
    assert!(r.stdout.contains("429"), "{}", r.dump());
}

#[test]
fn http_429_with_retry_after_is_retried_and_recorded() {
    let s = faulty::start(Config::new(
        Fault::TooMany {
            times: 2,
            retry_after: Some(1),
        },
        1,
    ));
    let r = run(&s.url(), &["--max-retries", "3"], SHORT_LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let c = r.cell();
    assert_eq!(c["status"], "ok", "{c:#}");
    assert_eq!(c["rejected_requests"], 2, "{c:#}");
    assert_eq!(c["retried_requests"], 2, "{c:#}");
    // two Retry-After waits of 1 s
    assert!(r.elapsed >= Duration::from_secs(2), "{}", r.dump());
    // the JIT probe, two 429s, then the healthy stream(s)
    assert!(
        s.completions.load(std::sync::atomic::Ordering::SeqCst) >= 4,
        "{}",
        r.dump()
    );
    assert!(r.stdout.contains("429"), "{}", r.dump());
    validate(r.json.as_ref().unwrap());
}

#[test]
fn http_429_without_retry_after_backs_off() {
    let s = faulty::start(Config::new(
        Fault::TooMany {
            times: 1,
            retry_after: None,
        },
        1,
    ));
    let r = run(&s.url(), &["--max-retries", "1"], SHORT_LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert_eq!(r.cell()["retried_requests"], 1);
    assert!(r.elapsed >= Duration::from_secs(1), "{}", r.dump());
}

#[test]
fn stream_silent_for_most_of_the_window_is_invalid() {
    // issue case 5: a C=1 stream that is silent for most of the window (2.5 s pauses) while
    // the idle timeout is not reached
    let s = faulty::start(Config::new(
        Fault::PauseMidStream {
            burst: 10,
            pause_ms: 2500,
        },
        1,
    ));
    let r = run(
        &s.url(),
        &[
            "--duration",
            "3",
            "--max-tokens",
            "40",
            "--stream-idle-timeout",
            "30",
        ],
        SHORT_LIMIT,
    );
    let c = invalid_with(&r, "stream_stalls");
    assert!(c["stall_count"].as_u64().unwrap() >= 1, "{c:#}");
    let longest = c["stall_longest_s"].as_f64().unwrap();
    assert!((2.0..3.5).contains(&longest), "{c:#}");
    assert!(c["stall_fraction"].as_f64().unwrap() > 0.5, "{c:#}");
}

#[test]
fn sse_comment_pings_count_as_bytes_for_the_idle_timeout() {
    // 1.6 s without tokens but with a ping every 200 ms: the 1 s idle timeout does not fire
    let s = faulty::start(Config::new(
        Fault::PingPause {
            burst: 5,
            pause_ms: 1600,
        },
        1,
    ));
    let r = run(
        &s.url(),
        &["--request-count", "1", "--stream-idle-timeout", "1"],
        SHORT_LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert_eq!(r.cell()["status"], "ok", "{}", r.dump());
    // without the pings the same pause is a stalled stream
    let s = faulty::start(Config::new(
        Fault::PauseMidStream {
            burst: 5,
            pause_ms: 1600,
        },
        1,
    ));
    let r = run(
        &s.url(),
        &["--request-count", "1", "--stream-idle-timeout", "1"],
        SHORT_LIMIT,
    );
    invalid_with(&r, "stream_stalled");
}

#[test]
fn completion_tokens_above_max_tokens_are_invalid() {
    let s = faulty::start(Config::new(Fault::ExtraTokens(8), 1));
    let r = run(&s.url(), &[], SHORT_LIMIT);
    invalid_with(&r, "completion_above_max_tokens");
}

#[test]
fn calibration_that_never_answers_ends_the_run() {
    // no /tokenize: prompts are sized by calibration requests, which hang
    let s = faulty::start(Config {
        no_tokenize: true,
        ..Config::new(Fault::HangBeforeHeaders, 0)
    });
    let r = run(
        &s.url(),
        &["--contexts", "1k", "--probe-timeout", "1"],
        SHORT_LIMIT,
    );
    assert_eq!(r.code, Some(1), "{}", r.dump());
    assert!(r.elapsed < Duration::from_secs(15), "{}", r.dump());
    let err = r
        .stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(
        err.contains("calibration") && err.contains("--probe-timeout"),
        "{}",
        r.dump()
    );
}

#[test]
fn a_server_that_dies_mid_run_ends_the_matrix() {
    // answers the JIT probe, then hangs: the first cell times out, the health probe gets no
    // answer, and the remaining cells are reported as not run instead of timing out one by one
    let s = faulty::start(Config::new(Fault::HangAfterHeaders, 1));
    let r = run(
        &s.url(),
        &[
            "--concurrency",
            "1,2,4",
            "--first-token-timeout",
            "1",
            "--first-token-timeout-per-1k",
            "0",
            "--probe-timeout",
            "1",
        ],
        SHORT_LIMIT,
    );
    let c = invalid_with(&r, "first_token_timeout");
    let _ = c;
    let cells = r.json.as_ref().unwrap()["results"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(cells.len(), 3);
    for c in &cells[1..] {
        assert_eq!(c["status"], "error", "{c:#}");
        assert_eq!(c["error_kind"], "probe_timeout");
        assert!(c["status_reason"]
            .as_str()
            .unwrap()
            .contains("stopped answering"));
    }
    assert!(r.elapsed < Duration::from_secs(15), "{}", r.dump());
}

// ---- issue 17: the stream ends where the protocol says; SSE as specified ----

#[test]
fn body_held_open_after_done_ends_the_request_at_done() {
    // every stream (the JIT probe too) holds its body open after `data: [DONE]`: before the
    // fix each request waited for the 60 s idle timeout and the run aborted
    let s = faulty::start(Config::new(Fault::HoldAfterDone, 0));
    let r = run(&s.url(), &[], SHORT_LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let c = r.cell();
    assert_eq!(c["status"], "ok", "{c:#}");
    assert!(c["error_kind"].is_null(), "{c:#}");
    assert!(r.elapsed < Duration::from_secs(20), "{}", r.dump());
    validate(r.json.as_ref().unwrap());
}

#[test]
fn a_body_that_ends_late_after_done_does_not_lower_the_rate() {
    // the body ends 1 s after `[DONE]`: the request ended at `[DONE]`, so the stream slot
    // sends its next request at once and the rate is the healthy one (before the fix the slot
    // idled 1 s per request: a fraction of the rate, blamed on the server's decode)
    let healthy = faulty::start(Config::new(Fault::Healthy, 0));
    let h = run(&healthy.url(), &["--duration", "2"], SHORT_LIMIT);
    assert_eq!(h.code, Some(0), "{}", h.dump());
    let late = faulty::start(Config::new(Fault::EndLateAfterDone { ms: 1000 }, 0));
    let r = run(&late.url(), &["--duration", "2"], SHORT_LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert_eq!(r.cell()["status"], "ok", "{}", r.dump());
    let rate = |r: &Run| r.cell()["aggregate_tps"].as_f64().unwrap();
    assert!(
        rate(&r) > 0.6 * rate(&h),
        "late end {:.0} tok/s vs healthy {:.0} tok/s\n{}",
        rate(&r),
        rate(&h),
        r.dump()
    );
    // the requests end at `[DONE]`: none lasts the extra second
    let p50 = r.cell()["request_latency_p50"].as_f64().unwrap();
    assert!(p50 < 0.8, "request latency p50 {p50} s\n{}", r.dump());
}

#[test]
fn data_after_done_is_not_counted() {
    // 20 more tokens after `[DONE]`, with usage past max_tokens: before the fix they were
    // counted (completion_above_max_tokens, invalid)
    let s = faulty::start(Config::new(Fault::DataAfterDone { extra: 20 }, 0));
    let r = run(&s.url(), &["--request-count", "2"], SHORT_LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let c = r.cell();
    assert_eq!(c["status"], "ok", "{c:#}");
    let tokens = c["client_output_tokens"].as_u64().unwrap();
    assert_eq!(tokens % 32, 0, "whole 32-token answers only: {c:#}");
    validate(r.json.as_ref().unwrap());
}

#[test]
fn unrequested_content_encoding_is_a_clear_error() {
    // before the fix: `no_output` ("stream ended without any output token")
    let s = faulty::start(Config::new(Fault::Gzip, 1));
    let r = run(&s.url(), &[], SHORT_LIMIT);
    let c = invalid_with(&r, "malformed_stream");
    let reason = c["status_reason"].as_str().unwrap();
    assert!(
        reason.contains("Content-Encoding \"gzip\"") && reason.contains("did not ask for"),
        "{reason}"
    );
    assert!(r.elapsed < Duration::from_secs(15), "{}", r.dump());
}

#[test]
fn multi_line_data_fields_are_one_event() {
    // pretty-printed JSON over several `data:` lines (WHATWG joins them with "\n"): before the
    // fix the framer cut the event at an inner line ending in `}` (malformed_stream)
    let s = faulty::start(Config::new(Fault::MultiLineData, 0));
    let r = run(&s.url(), &[], SHORT_LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let c = r.cell();
    assert_eq!(c["status"], "ok", "{c:#}");
    assert!(c["aggregate_tps"].as_f64().unwrap() > 0.0, "{c:#}");
    validate(r.json.as_ref().unwrap());
}

#[test]
fn usage_that_counts_down_is_recounted_one_token_per_event() {
    // usage 32, 31, …, 1: not cumulative, so it says nothing about when tokens arrived; taken
    // as cumulative it credits all 32 tokens to a stream's first chunk (break-it round 2)
    let s = faulty::start(Config::new(Fault::UsageCountsDown, 1));
    let r = run(&s.url(), &[], SHORT_LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let c = r.cell();
    assert_eq!(c["status"], "ok", "{c:#}");
    let (tokens, events) = (
        c["client_output_tokens"].as_u64().unwrap(),
        c["client_token_events"].as_u64().unwrap(),
    );
    assert!(events > 32, "{c:#}");
    assert_eq!(tokens, events, "one token per token event: {c:#}");
    assert_eq!(
        c["aggregate_source"], "openai_stream_chunks_fallback",
        "{c:#}"
    );
    let warned = c["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("not cumulative"));
    assert!(warned, "{c:#}");
    validate(r.json.as_ref().unwrap());
}

#[test]
fn a_negative_completion_count_is_implausible_usage() {
    // it was dropped as if usage had not been sent (break-it round 2)
    let s = faulty::start(Config::new(Fault::UsageNegative, 1));
    let r = run(&s.url(), &[], SHORT_LIMIT);
    let c = invalid_with(&r, "usage_implausible");
    assert!(
        c["status_reason"]
            .as_str()
            .unwrap()
            .contains("not a token count"),
        "{c:#}"
    );
}

#[test]
fn usage_the_text_cannot_carry_makes_the_cell_invalid() {
    // 60 tokens claimed per one-byte chunk, under the live usage bound (break-it round 3: `ok`
    // at 2,922 tok/s as exact continuous usage; round 6: a warning on an ok cell): far more
    // than the text and chunks can carry, so the cell is invalid and has no headline
    let s = faulty::start(Config::new(Fault::InflatedUsage, 1));
    let r = run(&s.url(), &["--max-tokens", "4096"], SHORT_LIMIT);
    let c = invalid_with(&r, "usage_implausible");
    assert!(
        c["status_reason"]
            .as_str()
            .unwrap()
            .contains("for 40 bytes of text in"),
        "{c:#}"
    );
    // no text at all: ten role-only chunks and a usage of 640 (round 6: ok at 11,200 tok/s)
    let s = faulty::start(Config::new(Fault::RoleChunksThenUsage, 1));
    let r = run(&s.url(), &["--max-tokens", "640"], SHORT_LIMIT);
    let c = invalid_with(&r, "usage_implausible");
    assert!(
        c["status_reason"]
            .as_str()
            .unwrap()
            .contains("640 tokens after 1 delta chunks"),
        "{c:#}"
    );
}

#[test]
fn a_final_usage_above_the_continuous_count_is_flagged_in_every_mode() {
    // usage 1, 2, 3, 4 on the chunks, then 32 on the finish chunk (break-it round 3: `ok` at
    // 398 tok/s where the cell's 1-s peak was 49); the burst and request-rate modes ran no
    // stream checks at all
    let s = faulty::start(Config::new(Fault::UsageJumpAtEnd, 1));
    let flagged = |v: &Value| {
        v["warning_kinds"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "usage_implausible"))
    };
    for extra in [&[][..], &["--request-count", "3"][..]] {
        let r = run(&s.url(), extra, SHORT_LIMIT);
        assert_eq!(r.code, Some(0), "{extra:?}: {}", r.dump());
        let c = r.cell();
        assert!(flagged(c), "{extra:?}: {c:#}");
        assert!(
            c["warnings"].to_string().contains("28 of 32 tokens"),
            "{extra:?}: {c:#}"
        );
        validate(r.json.as_ref().unwrap());
    }
    let r = run(
        &s.url(),
        &[
            "--request-rate",
            "4",
            "--arrival",
            "constant",
            "--duration",
            "1",
        ],
        SHORT_LIMIT,
    );
    let Some(json) = r.json.as_ref() else {
        panic!("no results file: {}", r.dump())
    };
    let row = &json["rate_results"][0];
    assert!(flagged(row), "{row:#}\n{}", r.dump());
    validate(r.json.as_ref().unwrap());
}

#[test]
fn tokens_with_usage_stuck_at_zero_are_not_no_output() {
    let s = faulty::start(Config::new(Fault::UsageZero, 1));
    let r = run(&s.url(), &[], SHORT_LIMIT);
    let c = invalid_with(&r, "usage_implausible");
    assert!(
        c["status_reason"].as_str().unwrap().contains("usage"),
        "{c:#}"
    );
}

#[test]
fn http_401_or_404_on_the_first_post_exits_1() {
    for code in [401u16, 404] {
        let s = faulty::start(Config::new(Fault::Status(code), 0));
        let r = run(&s.url(), &[], SHORT_LIMIT);
        assert_eq!(r.code, Some(1), "HTTP {code}: {}", r.dump());
        let err = r
            .stderr
            .lines()
            .find(|l| l.starts_with("error:"))
            .unwrap_or_default();
        assert!(err.contains(&code.to_string()), "{}", r.dump());
        assert!(r.elapsed < Duration::from_secs(15), "{}", r.dump());
    }
}

// ---- issue 17: bounded bodies, hostile strings, impossible numbers ----

#[test]
fn endless_metrics_page_is_capped_and_named() {
    // an endless /metrics page: read up to the 16 MiB cap (before: until the info timeout, the
    // whole page in memory), server metrics disabled with a warning naming /metrics
    let s = faulty::start(Config {
        endless_metrics: true,
        ..Config::new(Fault::Healthy, 0)
    });
    let r = run(&s.url(), &[], SHORT_LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let log = r.json.as_ref().unwrap()["event_log"].to_string();
    assert!(
        log.contains("/metrics") && log.contains("larger than 16 MiB"),
        "{log}"
    );
    assert!(r.elapsed < Duration::from_secs(20), "{}", r.dump());
}

#[test]
fn hostile_and_huge_model_lists_are_summarised_without_control_characters() {
    // 200,000 model ids, the first one with terminal escapes
    let mut ids: Vec<String> = vec!["evil\u{1b}[2J\u{1b}]0;pwned\u{7}model".into()];
    ids.extend((1..200_000).map(|i| format!("model-{i:06}")));
    let s = faulty::start(Config {
        model_ids: Some(std::sync::Arc::new(ids)),
        ..Config::new(Fault::Healthy, 0)
    });
    let r = run(&s.url(), &[], Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.dump());
    for (what, text) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{what} has control characters: {text:?}"
        );
    }
    let v = r.json.as_ref().unwrap();
    let lines: Vec<String> = v["event_log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect();
    for l in &lines {
        assert!(!l.chars().any(char::is_control), "{l:?}");
        assert!(l.len() < 4000, "a log line of {} bytes", l.len());
    }
    let models = lines.iter().find(|l| l.contains("models=")).unwrap();
    assert!(models.contains("(200000 in all)"), "{models}");
    // The results keep the id as the server sent it (JSON escapes it); every report rendered
    // from them has no control characters (issue 17, second break-it round: `servebench report`
    // and the Markdown / HTML files carried the escapes raw).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.json");
    std::fs::write(&file, serde_json::to_string(v).unwrap()).unwrap();
    for format in ["text", "md", "html", "csv"] {
        let out = Command::new(BIN)
            .args(["report", "-f", format])
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{format}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        // (CSV has one row per cell and no model column)
        assert!(
            format == "csv" || text.contains("evil"),
            "{format}: the model id is shown"
        );
        assert!(
            !text
                .chars()
                .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t')),
            "{format} has control characters: {text:?}"
        );
    }
    // an unknown model among them: a one-line error with the list summarised
    let r = run(&s.url(), &["--model", "nope"], Duration::from_secs(60));
    assert_eq!(r.code, Some(1), "{}", r.dump());
    let err = r.stderr.lines().find(|l| l.starts_with("error:")).unwrap();
    assert!(err.len() < 2000 && err.contains("(200000 in all)"), "{err}");
    assert!(!err.chars().any(char::is_control), "{err:?}");
}

#[test]
fn tokens_in_one_write_are_flagged_and_not_accepted_at_publish() {
    let s = faulty::start(Config::new(Fault::SingleWrite, 0));
    let r = run(&s.url(), &["--duration", "2"], SHORT_LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let c = r.cell();
    let kinds = c["warning_kinds"].as_array().unwrap();
    assert!(kinds.contains(&Value::from("single_write")), "{c:#}");
    assert!(
        kinds.contains(&Value::from("implausible_speed")) || c["inter_token_latency_p50"].is_null(),
        "{c:#}"
    );
    validate(r.json.as_ref().unwrap());
    assert!(r.stdout.contains("single_write"), "{}", r.dump());
}

#[test]
fn an_api_key_spelled_out_in_a_task_answer_is_never_shown() {
    // break-it round 3: the task table printed the final answer, the key in clear, on stdout
    const KEY: &str = "sk-CANARY-task-9pLm2";
    let s = faulty::start(Config::new(Fault::EchoKeyInAnswer, 0));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("task.json");
    let child = Command::new(BIN)
        .args([
            "task",
            "--url",
            &s.url(),
            "--prompt",
            "hi",
            "--answer",
            "42",
        ])
        .args(["--runs", "2", "--max-tokens", "64", "--save-text", "-o"])
        .arg(&out)
        .env("SERVEBENCH_API_KEY", KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn servebench task");
    let e = common::wait_for(child, SHORT_LIMIT);
    assert!(e.status.is_some(), "task still running");
    let file = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        file.contains("<redacted>"),
        "the answer was recorded: {file}"
    );
    for (what, text) in [
        ("stdout", &e.stdout),
        ("stderr", &e.stderr),
        ("task.json", &file),
    ] {
        assert!(!text.contains(KEY), "{what} shows the key:\n{text}");
    }
}

#[test]
fn an_api_key_the_server_echoes_is_never_written_or_shown() {
    // Issue 17 (break-it round): a server that quotes the Authorization header in its errors
    // (an HTTP 500 body, an in-stream error event) put the key into the results JSON, every
    // export, the request rows, stdout and stderr.
    const KEY: &str = "sk-CANARY-echo-5u7Qx";
    for (in_stream, said) in [
        (false, "backend refused header Bearer <redacted>"),
        (true, "stream aborted for Bearer <redacted>"),
    ] {
        let s = faulty::start(Config::new(Fault::EchoKey { in_stream }, 1));
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str| dir.path().join(name).display().to_string();
        let (csv, md, html, rows) = (
            file("r.csv"),
            file("r.md"),
            file("r.html"),
            file("rows.jsonl"),
        );
        let r = run(
            &s.url(),
            &[
                "--api-key",
                KEY,
                "--export-csv",
                &csv,
                "--export-md",
                &md,
                "--export-html",
                &html,
                "--export-requests",
                &rows,
            ],
            SHORT_LIMIT,
        );
        let json = r.json.as_ref().unwrap_or_else(|| panic!("{}", r.dump()));
        let results = json.to_string();
        let rows_text = std::fs::read_to_string(&rows).unwrap_or_default();
        // The echo path was taken, and what the server said is kept with the key replaced.
        assert!(
            results.contains(said) && rows_text.contains(said) && r.stdout.contains(said),
            "{said:?} is recorded:\n{results}\n{rows_text}\n{}",
            r.dump()
        );
        for (what, text) in [
            ("results JSON", results),
            ("stdout", r.stdout.clone()),
            ("stderr", r.stderr.clone()),
            ("CSV", std::fs::read_to_string(&csv).unwrap_or_default()),
            ("Markdown", std::fs::read_to_string(&md).unwrap_or_default()),
            ("HTML", std::fs::read_to_string(&html).unwrap_or_default()),
            ("request rows", rows_text),
        ] {
            assert!(!text.is_empty(), "{what} is empty\n{}", r.dump());
            assert!(!text.contains(KEY), "the key reached the {what}:\n{text}");
        }
        validate(json);
    }
}
