//! Window accounting of a sustained cell, pure and clock-injected.
//!
//! * [`Window`]: the measured interval; it opens a margin after readiness (so every token event
//!   at or after its start is classified by a stream that already sees it,
//!   [`servebench_client::stream::WindowClock`]) and closes at its end, on Ctrl-C or at the first failure
//!   ([`Window::step`]).
//! * Per-request credit: each stream counts the tokens that *arrived* inside the window
//!   ([`servebench_client::stream::StreamOutcome::window_tokens`]; a request straddling an edge counts
//!   partially). [`WindowTally`] folds those credits and the facts of the requests whose
//!   lifetime overlaps the window (`sent_at ≤ end` and `end_at ≥ start`), which are the ones the
//!   request statistics use.

use std::time::{Duration, Instant};

use servebench_results::AggregateSource;
use servebench_sse::RequestRecord;

use servebench_client::h1::ReadDelay;
use servebench_client::stream::StreamOutcome;

/// The measured window, [start, end].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Start (token arrivals at or after it count).
    pub start: Instant,
    /// End (token arrivals after it do not count).
    pub end: Instant,
}

/// What the window loop does at one tick.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WindowStep {
    /// Before the start: wait.
    Before,
    /// Inside: `elapsed_s` since the start.
    Measuring {
        /// Seconds since the start.
        elapsed_s: f64,
    },
    /// Close now (end reached, or stopped).
    Close,
}

impl Window {
    /// The window that opens `margin` after `ready_at` and lasts `duration`.
    pub fn after(ready_at: Instant, margin: Duration, duration: Duration) -> Window {
        let start = ready_at + margin;
        Window {
            start,
            end: start + duration,
        }
    }

    /// Length, s.
    pub fn seconds(&self) -> f64 {
        self.end.duration_since(self.start).as_secs_f64()
    }

    /// A request that lived from `sent_at` to `end_at` overlaps the window.
    pub fn overlaps(&self, sent_at: Instant, end_at: Instant) -> bool {
        sent_at <= self.end && end_at >= self.start
    }

    /// A record's lifetime overlaps the window.
    pub fn holds(&self, r: &RequestRecord) -> bool {
        self.overlaps(r.sent_at, r.end_at)
    }

    /// The decision at `now`; `stopped`: Ctrl-C or a failed stream.
    pub fn step(&self, now: Instant, stopped: bool) -> WindowStep {
        if now >= self.end || stopped {
            WindowStep::Close
        } else if now < self.start {
            WindowStep::Before
        } else {
            WindowStep::Measuring {
                elapsed_s: now.duration_since(self.start).as_secs_f64(),
            }
        }
    }
}

/// The window's client-side totals, folded from every request of the cell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WindowTally {
    /// Output tokens that arrived inside the window (sum of the per-request credits).
    pub tokens: u64,
    /// Token events that arrived inside the window.
    pub token_events: u64,
    /// Requests whose lifetime overlaps the window.
    pub requests: u64,
    /// Of those, requests with at least 2 token events (the ones usage continuity is judged on).
    pub multi_event: u64,
    /// Of those, requests whose usage came on every chunk.
    pub continuous: u64,
    /// Kernel read delays of the overlapping requests.
    pub read_delay: ReadDelay,
    /// An overlapping request's cumulative usage went down.
    pub nonmonotonic_usage: bool,
    /// An overlapping request's final usage was below its token events.
    pub usage_below_count: bool,
    /// Fallback counting: tokens per timed token of the cell's finished requests whose usage
    /// came only at the end (final usage / tokens counted from their chunks), when above 1
    /// (chunks carried several tokens). See [`WindowTally::of`].
    pub fallback_tokens_per_chunk: Option<f64>,
    /// Requests cut at the window end without any usage that were credited at
    /// [`fallback_tokens_per_chunk`](Self::fallback_tokens_per_chunk), and the tokens that added.
    pub extrapolated: (u64, u64),
    /// Tokens of final usage spread into the window from requests whose chunks straddle its
    /// edges (an estimate: the share of their in-window chunks), tokens.
    pub spread: u64,
    /// An overlapping request reported `usage.completion_tokens` (none did: every token was
    /// counted one per chunk).
    pub usage_seen: bool,
}

/// Share of the window's tokens above which its estimated part ([`WindowTally::estimated`])
/// is a typed `estimated_tokens` warning.
pub const ESTIMATED_SHARE_WARN: f64 = 0.05;

impl WindowTally {
    /// Folds one request with `credit` output tokens inside the window.
    fn add_credit(&mut self, w: &Window, o: &StreamOutcome, credit: u64) {
        self.tokens += credit;
        self.token_events += o.window_token_events;
        let r = &o.record;
        if !w.holds(r) {
            return;
        }
        self.requests += 1;
        self.usage_seen |= r.usage_completion_tokens.is_some();
        if r.token_events >= 2 {
            self.multi_event += 1;
            if r.continuous_usage {
                self.continuous += 1;
            }
        }
        self.read_delay.merge(&o.read_delay);
        self.nonmonotonic_usage |= r.nonmonotonic_usage;
        self.usage_below_count |= r.usage_below_count;
    }

    /// The tally of `outcomes`.
    ///
    /// **Usage only at the end** (the fallback of seed spec §4.1: tokens counted one per chunk,
    /// corrected by the final usage). Chunks that carry several tokens (speculative decoding)
    /// make both edges of the window wrong unless handled:
    /// * a finished request's correction is spread over its chunks and only the share of its
    ///   in-window chunks is credited ([`RequestRecord::tokens_between`]), not all of it at its
    ///   last token: a request that began before the window would credit its earlier tokens;
    /// * a request cut at the window end never got its usage: its in-window chunks are
    ///   credited at the tokens per chunk of the cell's finished fallback requests
    ///   ([`fallback_tokens_per_chunk`](Self::fallback_tokens_per_chunk), rounded per request),
    ///   an estimate named in the cell's warning ([`extrapolated`](Self::extrapolated)).
    ///
    /// Both are exact when every chunk carries the same number of tokens, and unbiased when
    /// the number varies independently of the window edges.
    ///
    /// **A server known to send non-cumulative usage**: when one overlapping request's usage
    /// went down (it was recounted one token per event, seed spec §4.1 fallback), the usage
    /// values of the others are no count either. A request cut at the window end after one
    /// chunk (usage 32, 31, … cut after the 32) never showed the fall, and taken as
    /// cumulative it would credit 32 tokens to one event. So in such a cell a request that was
    /// not itself recounted is credited at most one token per token event inside the window.
    pub fn of<'a>(w: &Window, outcomes: impl IntoIterator<Item = &'a StreamOutcome>) -> Self {
        let outcomes: Vec<&StreamOutcome> = outcomes.into_iter().collect();
        let noncumulative = outcomes
            .iter()
            .any(|o| o.record.nonmonotonic_usage && w.holds(&o.record));
        let mut t = WindowTally {
            fallback_tokens_per_chunk: fallback_tokens_per_chunk(&outcomes),
            ..WindowTally::default()
        };
        for o in outcomes {
            let r = &o.record;
            let credit = if noncumulative && !r.nonmonotonic_usage {
                o.window_tokens.min(o.window_token_events)
            } else if !r.continuous_usage && r.untimed_tokens > 0 && !r.timed_events.is_empty() {
                // (no timed event at all: the live credit, at the usage's arrival, stands; the
                // plausibility check judges a count no chunk carried)
                let credit = r.tokens_between(w.start, w.end);
                if credit > 0 && o.window_token_events < r.token_events {
                    // some of its chunks lie outside: its in-window share is an estimate
                    t.spread += credit.saturating_sub(o.window_token_events);
                }
                credit
            } else if let Some(ratio) = t
                .fallback_tokens_per_chunk
                .filter(|_| cut_without_usage(r) && o.window_tokens > 0)
            {
                // never more than the request's own stream can have carried (its text and
                // chunks, the plausibility bound): a server whose later requests send one-byte
                // chunks must not be credited the earlier ones' 16 tokens per chunk (break-it
                // round 8: ok at 8.8 × the true rate)
                let carried =
                    crate::plausibility::carried_tokens(o.facts.text_bytes, o.facts.delta_chunks);
                let credit = ((o.window_tokens as f64 * ratio).round() as u64)
                    .min(carried.max(o.window_tokens));
                t.extrapolated.0 += 1;
                t.extrapolated.1 += credit - o.window_tokens;
                credit
            } else {
                o.window_tokens
            };
            t.add_credit(w, o, credit);
        }
        t
    }

    /// Tokens of the window that are an estimate rather than counted: final usage spread
    /// over straddling requests' chunks plus the extrapolation of cut ones, tokens.
    pub fn estimated(&self) -> u64 {
        self.spread + self.extrapolated.1
    }

    /// Usage came on every chunk of every multi-event request (and there was one).
    pub fn all_continuous(&self) -> bool {
        self.multi_event > 0 && self.continuous == self.multi_event
    }

    /// `aggregate_source` of the cell: `none`, `openai_continuous_usage` or
    /// `openai_stream_chunks_fallback`.
    pub fn aggregate_source(&self) -> AggregateSource {
        if self.tokens == 0 {
            AggregateSource::None
        } else if self.all_continuous() {
            AggregateSource::OpenaiContinuousUsage
        } else {
            AggregateSource::OpenaiStreamChunksFallback
        }
    }
}

/// A request the window end cut before any usage came (usage only at the end).
fn cut_without_usage(r: &RequestRecord) -> bool {
    r.cancelled && !r.completed && r.usage_completion_tokens.is_none() && !r.continuous_usage
}

/// Tokens per timed token of the finished requests whose usage came only at the end: Σ final
/// usage / Σ tokens counted from their timed events (one per chunk), when above 1. Requests
/// with non-cumulative usage (recounted) or usage on their chunks say nothing about it.
fn fallback_tokens_per_chunk(outcomes: &[&StreamOutcome]) -> Option<f64> {
    let (mut total, mut timed) = (0u64, 0u64);
    for o in outcomes {
        let r = &o.record;
        if r.completed
            && r.usage_token_events == 0
            && !r.nonmonotonic_usage
            && r.usage_completion_tokens.is_some()
        {
            total += r.output_tokens;
            timed += r.output_tokens - r.untimed_tokens.min(r.output_tokens);
        }
    }
    (timed > 0 && total > timed).then(|| total as f64 / timed as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_sse::RequestTracker;

    fn at(t0: Instant, s: f64) -> Instant {
        t0 + Duration::from_secs_f64(s)
    }

    #[test]
    fn the_window_opens_after_the_margin_and_closes_at_its_end() {
        let t0 = Instant::now();
        let w = Window::after(t0, Duration::from_millis(20), Duration::from_secs(10));
        assert_eq!(w.start, at(t0, 0.02));
        assert!((w.seconds() - 10.0).abs() < 1e-9);
        let table = [
            (0.0, false, WindowStep::Before),
            (0.019, false, WindowStep::Before),
            (0.02, false, WindowStep::Measuring { elapsed_s: 0.0 }),
            (5.02, false, WindowStep::Measuring { elapsed_s: 5.0 }),
            (5.02, true, WindowStep::Close),
            (0.0, true, WindowStep::Close),
            (10.02, false, WindowStep::Close),
            (11.0, false, WindowStep::Close),
        ];
        for (s, stopped, want) in table {
            match (w.step(at(t0, s), stopped), want) {
                (
                    WindowStep::Measuring { elapsed_s: a },
                    WindowStep::Measuring { elapsed_s: b },
                ) => assert!((a - b).abs() < 1e-6, "{s}: {a} vs {b}"),
                (got, want) => assert_eq!(got, want, "{s} {stopped}"),
            }
        }
    }

    #[test]
    fn overlap_rule_includes_both_edges() {
        let t0 = Instant::now();
        let w = Window {
            start: at(t0, 10.0),
            end: at(t0, 20.0),
        };
        let table = [
            ((0.0, 9.9), false),
            ((0.0, 10.0), true),
            ((5.0, 25.0), true),
            ((12.0, 13.0), true),
            ((20.0, 30.0), true),
            ((20.1, 30.0), false),
        ];
        for ((a, b), want) in table {
            assert_eq!(w.overlaps(at(t0, a), at(t0, b)), want, "{a}..{b}");
        }
    }

    fn outcome(
        t0: Instant,
        span: (f64, f64),
        window_tokens: u64,
        events: u64,
        continuous: bool,
    ) -> StreamOutcome {
        let mut record = RequestTracker::new(at(t0, span.0)).finish(at(t0, span.1), false, true);
        record.token_events = events;
        record.continuous_usage = continuous;
        StreamOutcome {
            record,
            window_tokens,
            window_token_events: window_tokens,
            text: None,
            read_delay: ReadDelay::default(),
            facts: Default::default(),
        }
    }

    #[test]
    fn the_tally_sums_credits_and_judges_overlapping_requests() {
        let t0 = Instant::now();
        let w = Window {
            start: at(t0, 10.0),
            end: at(t0, 20.0),
        };
        let outs = [
            // ramp-up request: no credit, not in the window
            outcome(t0, (0.0, 5.0), 0, 50, false),
            // straddles the start: partial credit
            outcome(t0, (8.0, 12.0), 20, 40, true),
            // inside
            outcome(t0, (12.0, 18.0), 60, 60, true),
            // one event only: not judged for continuity
            outcome(t0, (18.0, 19.0), 1, 1, false),
        ];
        let t = WindowTally::of(&w, &outs);
        assert_eq!((t.tokens, t.token_events), (81, 81));
        assert_eq!((t.requests, t.multi_event, t.continuous), (3, 2, 2));
        assert!(!t.usage_seen && !t.usage_below_count && !t.nonmonotonic_usage);
        // one overlapping request with a usage count, one whose usage fell short of its
        // events: each flag is raised by one request and not lowered by the others
        let mut outs = outs;
        outs[1].record.usage_completion_tokens = Some(40);
        outs[2].record.usage_below_count = true;
        let t = WindowTally::of(&w, &outs);
        assert!(t.usage_seen && t.usage_below_count);
        // outside the window they say nothing
        outs[1].record.usage_completion_tokens = None;
        outs[2].record.usage_below_count = false;
        outs[0].record.usage_completion_tokens = Some(50);
        outs[0].record.usage_below_count = true;
        let t = WindowTally::of(&w, &outs);
        assert!(!t.usage_seen && !t.usage_below_count);
        outs[0].record.usage_completion_tokens = None;
        outs[0].record.usage_below_count = false;
        assert!(t.all_continuous());
        assert_eq!(t.aggregate_source().as_str(), "openai_continuous_usage");

        outs[2].record.continuous_usage = false;
        let t = WindowTally::of(&w, &outs);
        assert_eq!(
            t.aggregate_source().as_str(),
            "openai_stream_chunks_fallback"
        );
        assert_eq!(WindowTally::default().aggregate_source().as_str(), "none");
        // no multi-event request: nothing shows usage came on every chunk
        assert!(!WindowTally::default().all_continuous());
    }

    #[test]
    fn a_cell_with_non_cumulative_usage_credits_unjudged_requests_one_token_per_event() {
        // usage 32, 31, …: the cut request saw only its first chunk (usage 32) and could not
        // tell its usage was per-delta; before the fix it added 31 tokens (CI flake of
        // faults::usage_that_counts_down_is_recounted_one_token_per_event)
        let t0 = Instant::now();
        let w = Window {
            start: at(t0, 10.0),
            end: at(t0, 20.0),
        };
        let mut recounted = outcome(t0, (11.0, 12.0), 32, 32, false);
        recounted.record.nonmonotonic_usage = true;
        let mut cut = outcome(t0, (19.9, 20.1), 32, 1, false);
        cut.window_token_events = 1;
        let t = WindowTally::of(&w, [&recounted, &cut]);
        assert_eq!((t.tokens, t.token_events), (33, 33));
        assert!(t.nonmonotonic_usage);
        // without a recounted request the same cut request keeps its usage credit
        let t = WindowTally::of(&w, [&cut]);
        assert_eq!((t.tokens, t.token_events), (32, 1));
        // a recounted request outside the window says nothing about this cell's window
        let mut early = outcome(t0, (1.0, 2.0), 0, 32, false);
        early.record.nonmonotonic_usage = true;
        let t = WindowTally::of(&w, [&early, &cut]);
        assert_eq!(t.tokens, 32);
    }

    /// A request whose usage came only at the end: `chunks` token chunks of `per_chunk` tokens
    /// each from `from` s, one every `dt` s; `usage` sent after them unless cut at `cut` s.
    fn fallback_request(
        t0: Instant,
        from: f64,
        chunks: usize,
        dt: f64,
        per_chunk: usize,
        cut: Option<f64>,
        w: &Window,
    ) -> StreamOutcome {
        use servebench_sse::SseFramer;
        let mut framer = SseFramer::new();
        let mut t = RequestTracker::new(at(t0, from));
        let text = "tok ".repeat(per_chunk);
        let chunk = format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":null}}]}}\n\n"
        );
        let (mut events_in, mut sent) = (0u64, 0u64);
        let mut end = from;
        for i in 0..chunks {
            let s = from + (i + 1) as f64 * dt;
            if cut.is_some_and(|c| s > c) {
                break;
            }
            end = s;
            sent += 1;
            framer.push(chunk.as_bytes(), at(t0, s), |ev| {
                t.apply_event(ev);
            });
            if at(t0, s) >= w.start && at(t0, s) <= w.end {
                events_in += 1;
            }
        }
        let cancelled = cut.is_some();
        if !cancelled {
            let usage = format!(
                "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":5,\"completion_tokens\":{}}}}}\n\ndata: [DONE]\n\n",
                chunks * per_chunk
            );
            end += 0.001;
            framer.push(usage.as_bytes(), at(t0, end), |ev| {
                t.apply_event(ev);
            });
        }
        let record = t.finish(at(t0, end), !cancelled, cancelled);
        // the live credit of the stream: one token per chunk inside, plus the whole final
        // correction when the last chunk is inside (the rule before the fix)
        let live = events_in
            + if !cancelled && at(t0, end - 0.001) >= w.start && at(t0, end - 0.001) <= w.end {
                record.untimed_tokens
            } else {
                0
            };
        StreamOutcome {
            record,
            window_tokens: live,
            window_token_events: events_in,
            text: None,
            read_delay: ReadDelay::default(),
            facts: servebench_client::stream::StreamFacts {
                text_bytes: sent * text.len() as u64,
                delta_chunks: sent,
                ..Default::default()
            },
        }
    }

    /// The cell's tokens per chunk come only from finished requests whose usage came at the
    /// end alone (each condition of `fallback_tokens_per_chunk` on its own), never from a
    /// request with no timed token; only a request the load cut (not one that failed) is
    /// extrapolated (core-window survivors).
    #[test]
    fn the_fallback_ratio_uses_only_finished_end_usage_requests() {
        let t0 = Instant::now();
        let finished = |output: u64, untimed: u64| {
            let mut o = outcome(t0, (1.0, 2.0), 0, output - untimed, false);
            o.record.output_tokens = output;
            o.record.untimed_tokens = untimed;
            o.record.usage_completion_tokens = Some(output);
            o.record.completed = true;
            o.record.cancelled = false;
            o.record.usage_token_events = 0;
            o
        };
        let base = finished(80, 70); // 10 chunks carried 80 tokens
        assert!(base.record.completed && base.record.usage_token_events == 0);
        assert_eq!(fallback_tokens_per_chunk(&[&base]), Some(8.0));
        type Edit = fn(&mut StreamOutcome);
        let excluded: [(&str, Edit); 4] = [
            ("not finished", |o| o.record.completed = false),
            ("usage on its chunks", |o| o.record.usage_token_events = 5),
            ("recounted", |o| o.record.nonmonotonic_usage = true),
            ("no usage", |o| o.record.usage_completion_tokens = None),
        ];
        for (what, edit) in excluded {
            let mut other = finished(1000, 0);
            edit(&mut other);
            assert_eq!(
                fallback_tokens_per_chunk(&[&base, &other]),
                Some(8.0),
                "{what}"
            );
        }
        // no timed token at all: no ratio (not infinity)
        assert_eq!(fallback_tokens_per_chunk(&[&finished(50, 50)]), None);
        // one token per chunk: no ratio above 1
        assert_eq!(fallback_tokens_per_chunk(&[&finished(50, 0)]), None);

        // a request that failed (neither finished nor cut) is not extrapolated
        let w = Window {
            start: at(t0, 10.0),
            end: at(t0, 20.0),
        };
        let inside = fallback_request(t0, 14.0, 20, 0.2, 8, None, &w);
        let mut failed = fallback_request(t0, 18.1, 40, 0.2, 8, Some(20.05), &w);
        failed.record.cancelled = false;
        let t = WindowTally::of(&w, [&inside, &failed]);
        assert_eq!((t.tokens, t.extrapolated), (20 * 8 + 9, (0, 0)));
        assert!(cut_without_usage(
            &fallback_request(t0, 18.1, 40, 0.2, 8, Some(20.05), &w).record
        ));
    }

    #[test]
    fn final_usage_is_spread_over_the_chunks_and_cut_requests_take_the_cells_ratio() {
        // 8 tokens per chunk, usage only at the end (break-it round 7, bigtext_fb): one request
        // straddles the start, one lies inside, one is cut at the end
        let t0 = Instant::now();
        let w = Window {
            start: at(t0, 10.0),
            end: at(t0, 20.0),
        };
        let straddler = fallback_request(t0, 6.1, 40, 0.2, 8, None, &w); // chunks 6.3..14.1
        let inside = fallback_request(t0, 14.0, 20, 0.2, 8, None, &w); // 14.2..18.0
        let cut = fallback_request(t0, 18.1, 40, 0.2, 8, Some(20.05), &w); // 18.3..19.9
        assert_eq!(straddler.record.untimed_tokens, 40 * 7);
        assert!(cut.record.cancelled && cut.record.usage_completion_tokens.is_none());
        let t = WindowTally::of(&w, [&straddler, &inside, &cut]);
        // the rule before: the straddler's whole correction inside, the cut one 1 per chunk
        let before: u64 = [&straddler, &inside, &cut]
            .iter()
            .map(|o| o.window_tokens)
            .sum();
        assert_eq!(before, (21 + 280) + 160 + 9);
        // truth: chunks inside the window × 8: 21 + 20 + 9 = 50 chunks
        assert_eq!(t.tokens, 50 * 8, "{t:?}");
        assert_eq!(t.token_events, 50);
        assert_eq!(t.fallback_tokens_per_chunk, Some(8.0));
        assert_eq!(t.extrapolated, (1, 9 * 7));
        // the straddler's in-window share of its final usage is an estimate (21 chunks × 8 −
        // the 21 counted); the inside request's chunks all lie inside: nothing estimated
        assert_eq!(t.spread, 21 * 8 - 21);
        assert_eq!(t.estimated(), 21 * 8 - 21 + 9 * 7);
        // a request cut before the window opened adds nothing and is no extrapolation
        let early_cut = fallback_request(t0, 1.0, 40, 0.2, 8, Some(3.0), &w);
        assert_eq!(early_cut.window_tokens, 0);
        let t = WindowTally::of(&w, [&straddler, &inside, &early_cut]);
        assert_eq!((t.tokens, t.extrapolated), (21 * 8 + 20 * 8, (0, 0)));
        // without finished requests there is no ratio: the cut request counts its chunks
        let t = WindowTally::of(&w, [&cut]);
        assert_eq!((t.tokens, t.extrapolated), (9, (0, 0)));
        assert_eq!(t.fallback_tokens_per_chunk, None);
        // a cut request whose one-byte chunks cannot carry the cell's 8 tokens per chunk is
        // credited at most what its text and chunks carry (1 per byte + 1 per chunk + 8)
        let mut thin = fallback_request(t0, 18.1, 40, 0.2, 8, Some(20.05), &w);
        thin.facts.text_bytes = 9;
        let t = WindowTally::of(&w, [&straddler, &inside, &thin]);
        assert_eq!(t.tokens, 21 * 8 + 20 * 8 + (9 + 9 + 8), "{t:?}");
        // one token per chunk: usage agrees with the chunks, nothing is estimated
        let one = fallback_request(t0, 14.0, 20, 0.2, 1, None, &w);
        let cut1 = fallback_request(t0, 18.1, 40, 0.2, 1, Some(20.05), &w);
        let t = WindowTally::of(&w, [&one, &cut1]);
        assert_eq!((t.tokens, t.fallback_tokens_per_chunk), (29, None));
    }
}
