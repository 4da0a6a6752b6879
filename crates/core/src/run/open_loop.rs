//! The open-loop request-rate layer of a run (`--request-rate` / `--rate-search`, instead of
//! the matrix): the request body of each context handed to [`crate::rate`], each finished row
//! checkpointed.

use super::{Ctx, Partial};
use crate::host::HostRun;
use crate::prompt::streaming_payload;

impl Ctx<'_> {
    /// The open-loop request-rate rows (`--request-rate`, instead of the matrix), each
    /// checkpointed.
    pub(super) async fn rate_layer(&self, st: &mut Partial, host: &HostRun) {
        let (Some(ol), false) = (&self.cfg.open_loop, self.cancel.is_cancelled()) else {
            return;
        };
        let bodies = self.rate_bodies();
        let job = crate::rate::job_from_run(
            &self.client,
            self.path(),
            self.cfg,
            &self.run_id,
            &bodies,
            self.events,
            self.cancel,
        )
        .keeping(self.resume.as_ref());
        let on_row = &mut |p: &crate::rate::RateProgress| {
            st.rate = p.clone();
            self.checkpoint(st, host);
        };
        crate::rate::run_rate_layer(ol, &job, on_row).await;
    }

    /// The open-loop rows' request body per context (`--contexts`), or why it cannot run.
    fn rate_bodies(&self) -> Vec<(u64, Result<bytes::Bytes, String>)> {
        let opts = self.opts(self.cfg.max_tokens, true);
        crate::plan::dedup_keep_order(&self.cfg.contexts)
            .into_iter()
            .map(|x| match (self.prompts.get(&x), self.info.max_model_len) {
                (_, Some(m)) if x >= m => (
                    x,
                    Err(format!(
                        "context {x} does not fit the model's max_model_len {m}"
                    )),
                ),
                (Some(p), _) => (x, Ok(streaming_payload(&opts, &p.input))),
                (None, _) => (x, Err("no prompt could be built for this context".into())),
            })
            .collect()
    }
}
