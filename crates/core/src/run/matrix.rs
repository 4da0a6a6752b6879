//! The decode cells: the hidden C=1 decode warmup, and the one loop over a matrix (the primary
//! one — sustained or request-count cells — and the Burst / E2E one): each cell kept from the
//! resume, skipped, or measured with its integrated prefill sample, then the stop, context and
//! cache checks, the health probe after a timed-out cell, and the checkpoint.

use std::collections::BTreeMap;
use std::time::Duration;

use servebench_results::{
    format_context, BenchmarkMode, CellResult, CellStatus, DecodeMode, FailureKind, PrefillMethod,
    PromptCache,
};
use tokio_util::sync::CancellationToken;

use super::assemble::{server_gone_result, skip_result, skipped};
use super::plan::Layer;
use super::sizing::context_checks;
use super::{Ctx, Partial, UNKNOWN_STOP};
use crate::burst::{run_burst_cell, BurstJob};
use crate::cell::{run_sustained_cell, CellJob, CellSettings};
use crate::events::{RunEvent, USER_SKIP_REASON};
use crate::host::HostRun;
use crate::plan::{CellSpec, PreSkip};
use crate::prompt::{decode_prefix, streaming_payload, warmup_prefix};
use crate::telemetry::Telemetry;

impl Ctx<'_> {
    /// The sustained-cell settings of this run (the measured window of `duration`).
    fn cell_settings(&self, duration: Duration) -> CellSettings {
        CellSettings {
            path: self.path(),
            duration,
            stable_window: self.cfg.stable_window,
            max_tokens: self.cfg.max_tokens,
            ignore_eos: self.cfg.ignore_eos,
        }
    }

    /// The hidden C=1 decode warmup at the largest runnable context (not when a resume has
    /// nothing left to measure). Its result is only logged.
    pub(super) async fn decode_warmup(&self, st: &mut Partial) {
        let nothing_to_run = self.resume.as_ref().is_some_and(|r| {
            self.plan.cells.iter().all(|(c, skip)| {
                skip.is_some()
                    || (r.cell(*c, false).is_some()
                        && (!self.plan.run_burst || r.cell(*c, true).is_some()))
            })
        });
        let Some(wctx) = self.plan.warmup_ctx.filter(|_| !nothing_to_run) else {
            return;
        };
        if self.cancel.is_cancelled() {
            return;
        }
        let Some(input) = self.input_with_prefix(wctx, &warmup_prefix(&self.run_id, wctx)) else {
            return;
        };
        let (cfg, events) = (self.cfg, self.events);
        events.log("decode warmup start");
        events.log(format!(
            "decode warmup start C=1 ctx={} {}s",
            format_context(wctx),
            cfg.decode_warmup.as_secs_f64()
        ));
        let job = CellJob {
            spec: CellSpec {
                concurrency: 1,
                context: wctx,
            },
            decode_body: streaming_payload(&self.opts(cfg.max_tokens, true), &input),
            scout_body: (wctx > 0).then(|| streaming_payload(&self.opts(1, false), &input)),
            ready_timeout: self.ready_timeout(wctx),
            index: 0,
            total: self.plan.cells.len(),
            warmup: true,
            cold_run_id: None,
            export: None,
        };
        let cell_cancel = events.skip_control().begin(self.cancel);
        let out = run_sustained_cell(
            &self.client,
            &self.cell_settings(cfg.decode_warmup),
            job,
            events,
            self.telemetry.as_ref(),
            &cell_cancel.token,
        )
        .await;
        if cell_cancel.skipped(self.cancel) {
            events.log("decode warmup skipped by the user");
        }
        drop(cell_cancel);
        if !out.interrupted {
            let r = &out.result;
            events.log(format!(
                "decode warmup done C=1 ctx={} ({}{})",
                format_context(wctx),
                r.status.as_str(),
                if r.status_reason.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.status_reason)
                }
            ));
            if r.status == CellStatus::Ok {
                st.warmup_context_done = wctx;
            }
        }
        pause(cfg.cell_pause, self.cancel).await;
    }
}

/// What the matrix loops carry from cell to cell (and from the primary matrix to the burst one).
#[derive(Debug, Default)]
pub(super) struct MatrixState {
    /// Contexts whose integrated prefill sample was taken (or kept).
    pub(super) prefill_done: Vec<u64>,
    /// Set when a health probe after a timed-out cell got no answer: the remaining cells are
    /// not run (an unattended run against a dead server ends instead of timing out every cell).
    pub(super) server_gone: Option<String>,
    /// Prompt tokens of each context's cold prefill sample (for the context checks).
    pub(super) cold_prompt: BTreeMap<u64, u64>,
}

impl Ctx<'_> {
    /// One matrix (`layer`) in plan order: each cell kept from the resume, skipped (stopped run,
    /// dead server, up-front skip) or measured; each finished cell announced and checkpointed.
    pub(super) async fn run_matrix(
        &self,
        layer: Layer,
        st: &mut Partial,
        m: &mut MatrixState,
        host: &HostRun,
    ) {
        let total = self.plan.cells.len();
        for (i, (spec, skip)) in self.plan.cells.iter().enumerate() {
            let index = i + 1;
            let kept = self.kept(*spec, layer).cloned();
            let mut result = match &kept {
                Some(k) => {
                    if layer == Layer::Primary {
                        self.kept_cell_prefill(*spec, st, m, host).await;
                        self.events.log(format!(
                            "cell kept from {} C={} ctx={}: {}",
                            self.resume.as_ref().map_or("", |r| r.from.file.as_str()),
                            spec.concurrency,
                            format_context(spec.context),
                            k.status.as_str()
                        ));
                    }
                    k.clone()
                }
                None => {
                    self.cell_result(layer, index, *spec, skip.as_ref(), st, m, host)
                        .await
                }
            };
            if result.status == CellStatus::SkippedUser && result.status_reason.is_empty() {
                result.status_reason = "skipped by the user".into();
            }
            if layer == Layer::Primary {
                let more = index < total
                    || (self.cfg.burst.run_burst && self.plan.mode == DecodeMode::Duration);
                self.health_check(&result, more, m).await;
            }
            if let Some(w) = self.telemetry.as_ref().and_then(Telemetry::take_disabled) {
                self.events.warn(format!("warning: {w}"));
                result.warnings.push(w);
            }
            let ran = kept.is_none() && !result.status.is_skipped();
            self.events.emit(RunEvent::CellFinished {
                index,
                result: Box::new(result.clone()),
            });
            st.layer_mut(layer).push(result);
            self.checkpoint(st, host);
            if ran && index < total {
                let d = match layer {
                    Layer::Primary => self.cfg.cell_pause,
                    Layer::Burst => Duration::from_secs(1).min(self.cfg.cell_pause),
                };
                pause(d, self.cancel).await;
            }
        }
    }

    /// The result of a cell that was not kept: skipped (stopped run, dead server, up-front
    /// skip, no prompt) or measured.
    #[allow(clippy::too_many_arguments)]
    async fn cell_result(
        &self,
        layer: Layer,
        index: usize,
        spec: CellSpec,
        skip: Option<&PreSkip>,
        st: &mut Partial,
        m: &mut MatrixState,
        host: &HostRun,
    ) -> CellResult {
        let mode = self.plan.cell_mode(layer);
        if self.cancel.is_cancelled() {
            let why = format!(
                "not run: the run was interrupted by the user ({})",
                self.stop_words()
            );
            return skipped(spec, CellStatus::SkippedUser, why, None, mode);
        }
        if let (Some(why), None) = (&m.server_gone, skip) {
            return server_gone_result(spec, why, mode);
        }
        if let Some(s) = skip {
            let r = skip_result(spec, s, mode);
            if layer == Layer::Primary {
                self.events.log(format!(
                    "cell skipped C={} ctx={}: {}",
                    spec.concurrency,
                    format_context(spec.context),
                    r.status_reason
                ));
            }
            return r;
        }
        if !self.prompts.contains_key(&spec.context) {
            let why = "no prompt could be built for this context".to_string();
            return skipped(spec, CellStatus::Error, why, None, mode);
        }
        self.measure_cell(layer, index, spec, st, m, host).await
    }

    /// Measures one cell of `layer` (the context's prompt exists): the integrated prefill sample
    /// first when this is the context's first primary cell, then a sustained, request-count or
    /// Burst / E2E cell; then the user-skip, context and cache checks.
    async fn measure_cell(
        &self,
        layer: Layer,
        index: usize,
        spec: CellSpec,
        st: &mut Partial,
        m: &mut MatrixState,
        host: &HostRun,
    ) -> CellResult {
        let p = &self.prompts[&spec.context];
        let mut scout_body =
            (spec.context > 0).then(|| streaming_payload(&self.opts(1, false), &p.input));
        // The first cell of a context takes the measured (integrated) prefill sample itself;
        // the cell's own scout then only re-primes the cache for later cells.
        if layer == Layer::Primary {
            let sampled = self.integrated_prefill(spec.context, true, st, m, host);
            if sampled.await == Some(true) {
                scout_body = None;
            }
        }
        let cache = self.plan.cache(layer);
        let cold_run_id = (cache == PromptCache::Cold).then(|| self.run_id.clone());
        let cell_cancel = self.events.skip_control().begin(self.cancel);
        let export = self.cfg.export.as_ref().map(|x| {
            x.sink(crate::export::ExportKey {
                layer: match (layer, self.plan.cell_mode(layer)) {
                    (Layer::Burst, _) => "burst",
                    (_, BenchmarkMode::Duration) => "sustained",
                    _ => "request_count",
                },
                context_tokens: spec.context,
                concurrency: Some(spec.concurrency),
                request_rate: None,
            })
        });
        let mut r = if self.plan.cell_mode(layer) == BenchmarkMode::Duration {
            let job = CellJob {
                spec,
                decode_body: streaming_payload(&self.opts(self.cfg.max_tokens, true), &p.input),
                scout_body,
                ready_timeout: self.ready_timeout(spec.context),
                index,
                total: self.plan.cells.len(),
                warmup: false,
                cold_run_id,
                export,
            };
            let out = run_sustained_cell(
                &self.client,
                &self.cell_settings(self.cfg.duration),
                job,
                self.events,
                self.telemetry.as_ref(),
                &cell_cancel.token,
            )
            .await;
            let mut r = out.result;
            host.attach(&mut r, out.window, self.events);
            r
        } else {
            let (n, w) = self.burst_counts(layer, spec.concurrency);
            let job = BurstJob {
                spec,
                body: streaming_payload(&self.opts(self.cfg.max_tokens, false), &p.input),
                scout_body,
                request_count: n,
                warmup_count: w,
                mode: self.plan.cell_mode(layer),
                cold_run_id,
                index,
                total: self.plan.cells.len(),
                export,
                deadline: self.cfg.burst.batch_timeout,
            };
            let out = run_burst_cell(
                &self.client,
                self.path(),
                job,
                self.events,
                self.telemetry.as_ref(),
                &cell_cancel.token,
            )
            .await;
            let mut r = out.result;
            host.attach_records(&mut r, &out.records, self.events);
            if layer == Layer::Burst {
                r.request_count_target = n;
            }
            r
        };
        self.after_cell(&mut r, &cell_cancel);
        drop(cell_cancel);
        if layer == Layer::Primary && r.prompt_tokens.is_none() {
            r.prompt_tokens = p.exact_tokens;
        }
        let cold = m.cold_prompt.get(&spec.context).copied();
        context_checks(&mut r, spec.context, p, &self.targeting, cold, self.events);
        crate::cache::record(&mut r, cache);
        r
    }

    /// Requests N and discarded warmup requests W of a request-count (primary) or Burst / E2E
    /// cell at concurrency `c`.
    fn burst_counts(&self, layer: Layer, c: u64) -> (u64, u64) {
        let b = &self.cfg.burst;
        match layer {
            Layer::Primary => (b.request_count, b.warmup_request_count),
            Layer::Burst => (
                if b.burst_request_count > 0 {
                    b.burst_request_count
                } else {
                    c.max(c * b.burst_requests_per_concurrency.max(1))
                },
                if b.burst_warmup_request_count > 0 {
                    b.burst_warmup_request_count
                } else {
                    c
                },
            ),
        }
    }

    /// The integrated prefill sample of `ctx` when it is due (the context's first cell, not yet
    /// taken or kept): recorded and checkpointed; its prompt tokens go to the context checks of
    /// the cells measured after it when `for_checks`. `Some(cold row ok)` when it ran.
    async fn integrated_prefill(
        &self,
        ctx: u64,
        for_checks: bool,
        st: &mut Partial,
        m: &mut MatrixState,
        host: &HostRun,
    ) -> Option<bool> {
        if !self.plan.prefill.integrated.contains(&ctx) || m.prefill_done.contains(&ctx) {
            return None;
        }
        m.prefill_done.push(ctx);
        let prefix = decode_prefix(&self.run_id, ctx);
        let (cold, warm) = self
            .scout_rows(ctx, &prefix, PrefillMethod::IntegratedScout)
            .await;
        let ok = cold.status == Some(CellStatus::Ok);
        if let (Some(t), true) = (cold.prompt_tokens, for_checks) {
            m.cold_prompt.insert(ctx, t);
        }
        st.record_prefill(self.events, ctx, cold, Some(warm));
        self.checkpoint(st, host);
        Some(ok)
    }

    /// A kept cell whose context's prefill row was not kept (it failed): the row is measured
    /// now.
    async fn kept_cell_prefill(
        &self,
        spec: CellSpec,
        st: &mut Partial,
        m: &mut MatrixState,
        host: &HostRun,
    ) {
        if self.prompts.contains_key(&spec.context) && !self.cancel.is_cancelled() {
            self.integrated_prefill(spec.context, false, st, m, host)
                .await;
        }
    }

    /// A finished cell's stop handling: ended by the live view's skip key → `skipped_user` with
    /// [`USER_SKIP_REASON`]; ended because the run was stopped → the reason says how it was
    /// stopped.
    fn after_cell(&self, r: &mut CellResult, cell: &crate::events::CellCancel) {
        if cell.skipped(self.cancel) {
            r.status = CellStatus::SkippedUser;
            r.status_reason = format!("{USER_SKIP_REASON} while the cell was running");
            self.events.log(format!(
                "cell skipped C={} ctx={}: {}",
                r.concurrency,
                format_context(r.context_tokens),
                r.status_reason
            ));
        } else if self.cancel.is_cancelled() && r.status == CellStatus::SkippedUser {
            let words = self.stop_words();
            if words != UNKNOWN_STOP {
                r.status_reason = r.status_reason.replace(UNKNOWN_STOP, words);
            }
        }
    }

    /// After a cell that failed by a deadline, with more cells to come: a health probe; no
    /// answer marks the server gone.
    async fn health_check(&self, r: &CellResult, more: bool, m: &mut MatrixState) {
        if !more || m.server_gone.is_some() || self.cancel.is_cancelled() || !timed_out(r) {
            return;
        }
        if let Err(e) = self.jit_probe("health probe after a timed-out cell").await {
            self.events.log(format!(
                "the server stopped answering; the remaining cells are not run: {e}"
            ));
            m.server_gone = Some(e.to_string());
        }
    }
}

/// A cell that failed by a deadline (or got no output at all): worth a health probe.
fn timed_out(r: &CellResult) -> bool {
    matches!(r.status, CellStatus::Error | CellStatus::Invalid)
        && r.error_kind
            .is_some_and(|k| k == FailureKind::NoOutput || k.is_timeout())
}

/// Waits `d` (or until the run is stopped).
async fn pause(d: Duration, cancel: &CancellationToken) {
    if d.is_zero() {
        return;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = cancel.cancelled() => {}
    }
}
