//! The prefill layer before decode (seed spec §2.4): the standalone cold profile, or (integrated
//! mode) the decode JIT probe, the prefill warmup and the scout-only contexts; one measured
//! prefill request and a context's cold and warm rows; and the unmeasured startup requests (the
//! decode JIT probe, also the health probe after a timed-out cell, and the warmups).

use std::time::Instant;

use serde_json::{json, Value};
use servebench_client::stream::{run_probe, run_single};
use servebench_client::timeouts::RequestClass;
use servebench_client::Endpoint;
use servebench_results::{FailureKind, PrefillMethod, PrefillRow};

use super::{Ctx, Partial, RunError};
use crate::host::HostRun;
use crate::prefill::{
    check_prompt_tokens, cold_row, measure_prefill_once, warm_row, PrefillMetric, PrefillSample,
};
use crate::prompt::{decode_prefix, streaming_payload, PromptInput, RequestOptions};

/// Prompt of the decode JIT probe (a short streaming request before anything is measured).
const JIT_PROBE_PROMPT: &str = "Count from 1 to 20.";

impl Ctx<'_> {
    /// The prefill layer before decode: the standalone profile, or (integrated mode) the decode
    /// JIT probe, the prefill warmup and the scout-only contexts. Fails only when the JIT probe
    /// times out.
    pub(super) async fn prefill_layer(
        &self,
        st: &mut Partial,
        host: &HostRun,
    ) -> Result<(), RunError> {
        if self.cancel.is_cancelled() {
            return Ok(());
        }
        if self.plan.standalone && !self.plan.prefill.requested.is_empty() {
            return self.standalone_prefill(st, host).await;
        }
        if self.cfg.prefill.only {
            return Ok(());
        }
        self.jit_probe(
            "decode warm-up request (unmeasured; lets the server compile its decode path first)",
        )
        .await?;
        let p = &self.plan.prefill;
        if let Some(smallest) = p
            .integrated
            .iter()
            .chain(p.scout_only.iter())
            .copied()
            .min()
        {
            let wctx = smallest.min(8192);
            let wctx = if self.prompts.contains_key(&wctx) {
                wctx
            } else {
                smallest
            };
            let prefix = format!("[WARMUP_{}_PREFILL]", self.run_id);
            if let Some(input) = self.input_with_prefix(wctx, &prefix) {
                let body = streaming_payload(&self.opts(1, false), &input);
                self.unrecorded("prefill warmup", body).await;
            }
        }
        for &x in &p.scout_only {
            if self.cancel.is_cancelled() {
                break;
            }
            if self.kept_prefill(x) {
                continue;
            }
            let prefix = decode_prefix(&self.run_id, x);
            let (cold, warm) = self.scout_rows(x, &prefix, PrefillMethod::ScoutOnly).await;
            st.record_prefill(self.events, x, cold, Some(warm));
            self.checkpoint(st, host);
        }
        Ok(())
    }

    /// The standalone prefill profile: warmups, then repeated cold samples per context for the
    /// prefill duration (at least one), each context's row checkpointed.
    async fn standalone_prefill(&self, st: &mut Partial, host: &HostRun) -> Result<(), RunError> {
        let requested = &self.plan.prefill.requested;
        self.jit_probe("prefill warmup A (short decode)").await?;
        let smallest = requested.iter().copied().min().unwrap_or(0);
        let prefix = format!("[WARMUP_{}]", self.run_id);
        if let Some(input) = self.input_with_prefix(smallest, &prefix) {
            let body = streaming_payload(&self.opts(1, false), &input);
            self.unrecorded("prefill warmup B (prefill)", body).await;
        }
        for &x in requested {
            if self.cancel.is_cancelled() {
                break;
            }
            if self.kept_prefill(x) {
                continue;
            }
            let Some((cold, warm)) = self.standalone_context(x).await else {
                break;
            };
            st.record_prefill(self.events, x, cold, Some(warm));
            self.checkpoint(st, host);
        }
        Ok(())
    }

    /// The cold and warm rows of one standalone context; `None` when the run was stopped.
    async fn standalone_context(&self, x: u64) -> Option<(PrefillRow, PrefillRow)> {
        let t0 = Instant::now();
        let (mut samples, mut failures) = (Vec::new(), Vec::new());
        let mut r = 0u64;
        let prefix = |r: u64| format!("[BENCH_{}_CTX_{x}_R{r:04}]", self.run_id);
        while !self.cancel.is_cancelled() && (r == 0 || t0.elapsed() < self.cfg.prefill.duration) {
            r += 1;
            match self.prefill_sample(x, &prefix(r)).await {
                Ok(s) => samples.push(s),
                Err(e) if !self.cancel.is_cancelled() => failures.push(e),
                Err(_) => {}
            }
        }
        if self.cancel.is_cancelled() {
            return None;
        }
        let metric = self.cfg.prefill.metric;
        let method = if metric == PrefillMetric::Prometheus {
            PrefillMethod::Prometheus
        } else {
            PrefillMethod::Client
        };
        let mut cold = cold_row(&samples, &failures, method, metric);
        let mut warm = match samples.last() {
            Some(_) => warm_row(self.prefill_sample(x, &prefix(r)).await.as_ref()),
            None => warm_row(Err(&"every cold sample failed".to_string())),
        };
        let bytes = self.input_bytes(x, &prefix(r));
        check_prompt_tokens(&mut cold, x, self.info.max_model_len, bytes);
        check_prompt_tokens(&mut warm, x, self.info.max_model_len, bytes);
        Some((cold, warm))
    }

    /// Bytes of the input (the JSON of its `messages` or `prompt`) a prefill request for `ctx`
    /// with `prefix` sends.
    fn input_bytes(&self, ctx: u64, prefix: &str) -> Option<u64> {
        self.input_with_prefix(ctx, prefix)
            .map(|input| input.value.to_string().len() as u64)
    }

    /// A measured prefill request for `ctx` with `prefix`.
    async fn prefill_sample(&self, ctx: u64, prefix: &str) -> Result<PrefillSample, String> {
        let input = self
            .input_with_prefix(ctx, prefix)
            .ok_or_else(|| "no prompt for this context".to_string())?;
        let body = streaming_payload(&self.opts(1, false), &input);
        let validate = self.cfg.prefill.metric.validates() && self.telemetry.is_some();
        measure_prefill_once(
            &self.client,
            self.path(),
            body,
            self.telemetry.as_ref(),
            validate,
            self.cancel,
        )
        .await
    }

    /// Cold row + warm row for one context from one cold request (`prefix`) and its repeat.
    pub(super) async fn scout_rows(
        &self,
        ctx: u64,
        prefix: &str,
        method: PrefillMethod,
    ) -> (PrefillRow, PrefillRow) {
        let cold = self.prefill_sample(ctx, prefix).await;
        let (samples, failures): (Vec<PrefillSample>, Vec<String>) = match cold {
            Ok(s) => (vec![s], vec![]),
            Err(e) => (vec![], vec![e]),
        };
        let mut row = cold_row(&samples, &failures, method, self.cfg.prefill.metric);
        let mut warm = if samples.is_empty() {
            warm_row(Err(&"the cold request failed".to_string()))
        } else {
            let w = self.prefill_sample(ctx, prefix).await;
            warm_row(w.as_ref())
        };
        let bytes = self.input_bytes(ctx, prefix);
        check_prompt_tokens(&mut row, ctx, self.info.max_model_len, bytes);
        check_prompt_tokens(&mut warm, ctx, self.info.max_model_len, bytes);
        (row, warm)
    }

    /// The body of the decode JIT probe (64 tokens, the model's own stop).
    fn jit_body(&self) -> bytes::Bytes {
        let input = match self.cfg.target.endpoint {
            Endpoint::Chat => PromptInput {
                value: json!([{"role": "user", "content": JIT_PROBE_PROMPT}]),
                padding_chars: 0,
            },
            Endpoint::Completions => PromptInput {
                value: Value::String(format!("{JIT_PROBE_PROMPT}\n")),
                padding_chars: 0,
            },
        };
        let opts = RequestOptions {
            ignore_eos: false,
            ..self.opts(64, false)
        };
        streaming_payload(&opts, &input)
    }

    /// The decode JIT probe (a startup probe: first byte and first token within the probe
    /// timeout). A timeout is fatal: a server that cannot answer a 64-token request would only
    /// make every cell wait; other failures are logged (the cells report them).
    pub(super) async fn jit_probe(&self, what: &str) -> Result<(), RunError> {
        let out = run_probe(&self.client, self.path(), self.jit_body(), self.cancel).await;
        let status = out.facts.http_status;
        match (out.record.error, out.facts.kind) {
            // A refused completion request (no or wrong key, wrong path or endpoint): a
            // startup error (exit 1), not a cell to fail (issue 17; README, exit codes).
            (Some(e), Some(FailureKind::HttpStatus))
                if matches!(status, Some(401 | 403 | 404)) && !self.cancel.is_cancelled() =>
            {
                self.events.log(format!("{what} failed: {e}"));
                let has_key = self
                    .client
                    .target()
                    .api_key
                    .as_deref()
                    .is_some_and(|k| !k.is_empty());
                let p = match status {
                    Some(404) => crate::probe::ProbeError::hinted(
                        format!("the server refused the {what}: {e}"),
                        crate::probe::Hint::UrlPath,
                    ),
                    _ if has_key => crate::probe::ProbeError::new(format!(
                        "the server rejected the API key for the {what}: {e}"
                    )),
                    _ => crate::probe::ProbeError::hinted(
                        format!("the server requires an API key for the {what}: {e}"),
                        crate::probe::Hint::ApiKey,
                    ),
                };
                Err(RunError::Probe(p))
            }
            (Some(e), Some(k)) if k.is_timeout() && !self.cancel.is_cancelled() => {
                self.events.log(format!("{what} failed: {e}"));
                let limits = self.client.policy().limits(RequestClass::Probe, 0, 1);
                match limits.limit_of(k) {
                    Some(limit) => Err(RunError::ProbeUnanswered {
                        what: what.to_string(),
                        limit,
                        detail: e,
                    }),
                    None => Err(RunError::Startup(format!(
                        "the server accepted the {what} but did not answer it: {e}"
                    ))),
                }
            }
            (Some(e), _) if !self.cancel.is_cancelled() => {
                self.events.log(format!("warning: {what} failed: {e}"));
                Ok(())
            }
            _ => {
                self.events.log(format!("{what} done"));
                Ok(())
            }
        }
    }

    /// One unrecorded streaming request (warmups). Errors are logged, not fatal.
    async fn unrecorded(&self, what: &str, body: bytes::Bytes) {
        let out = run_single(&self.client, self.path(), body, self.cancel).await;
        match out.record.error {
            Some(e) if !self.cancel.is_cancelled() => {
                self.events.log(format!("{what} failed: {e}"))
            }
            _ => self.events.log(format!("{what} done")),
        }
    }
}
