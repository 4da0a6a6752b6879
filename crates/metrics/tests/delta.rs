//! Counter deltas and window statistics (pitfalls 27, 35, 36, 38; spec §3.9).

mod common;

use common::{close, close_some, scrape};
use servebench_metrics::{
    counter_delta, window_stats, window_stats_since_start, Concept, Delta, Engine, Histogram,
    Scrape,
};

fn parse(t: &str) -> Scrape {
    Scrape::parse(t).unwrap()
}

#[test]
fn pitfall_27_prefix_cache_hit_rate_over_a_run() {
    let before = parse(concat!(
        "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 1000000.0\n",
        "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 20000.0\n",
    ));
    let after = parse(concat!(
        "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 2048576.0\n",
        "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 1058090.0\n",
    ));
    let w = window_stats(&before, &after, Engine::Vllm);
    close_some(w.prefix_cache_queries, 1_048_576.0);
    close_some(w.prefix_cache_hits, 1_038_090.0);
    close_some(w.prefix_cache_hit_rate, 1_038_090.0 / 1_048_576.0);
    assert_eq!(
        (w.prefix_cache_hit_rate.unwrap() * 10_000.0).round() / 10_000.0,
        0.99
    );
    close_some(w.prefix_cache_misses, 10_486.0);
    assert!(!w.any_reset);
    // A counter going down: "counter reset — hit rate unavailable".
    let w = window_stats(&after, &before, Engine::Vllm);
    assert!(w.any_reset);
    assert_eq!(w.prefix_cache_hit_rate, None);
    assert_eq!(w.prefix_cache_misses, None);
}

#[test]
fn pitfall_35_llamacpp_decode_rate_from_counters_not_the_window_gauge() {
    let a = parse(concat!(
        "llamacpp:tokens_predicted_total 200\n",
        "llamacpp:tokens_predicted_seconds_total 39.8\n",
    ));
    let b = parse(concat!(
        "llamacpp:tokens_predicted_total 700\n",
        "llamacpp:tokens_predicted_seconds_total 139.8\n",
        "llamacpp:predicted_tokens_seconds 0\n",
    ));
    let w = window_stats(&a, &b, Engine::LlamaCpp);
    close_some(w.generation_tokens, 500.0);
    close_some(w.decode_seconds, 100.0);
    close_some(w.decode_rate, 5.0);
    assert_eq!(
        b.concept(Engine::LlamaCpp, Concept::GenThroughputGauge),
        None
    );
}

#[test]
fn pitfall_36_counter_reset_uses_post_reset_values() {
    let before = parse("vllm:prompt_tokens_total 1000\nvllm:generation_tokens_total 500\n");
    let after = parse("vllm:prompt_tokens_total 200\nvllm:generation_tokens_total 100\n");
    let p = counter_delta(&before, &after, Engine::Vllm, Concept::PromptTokens);
    assert_eq!(
        p,
        Delta {
            value: Some(200.0),
            reset: true
        }
    );
    let g = counter_delta(&before, &after, Engine::Vllm, Concept::GenerationTokens);
    assert_eq!(
        g,
        Delta {
            value: Some(100.0),
            reset: true
        }
    );
    let w = window_stats(&before, &after, Engine::Vllm);
    assert!(w.any_reset);
    close_some(w.prompt_tokens, 200.0);
    close_some(w.generation_tokens, 100.0);
    // An empty end snapshot is "absent", not −1000 / −500 and not 0.
    let empty = parse("");
    let d = counter_delta(&before, &empty, Engine::Vllm, Concept::PromptTokens);
    assert_eq!(d, Delta::default());
    assert_eq!(d.value, None);
    assert_eq!(
        window_stats(&before, &empty, Engine::Vllm).prompt_tokens,
        None
    );
    // Absent before, too.
    assert_eq!(
        counter_delta(&empty, &after, Engine::Vllm, Concept::PromptTokens).value,
        None
    );
}

#[test]
fn pitfall_36_reset_detected_by_created_timestamp_even_when_value_grew() {
    let before = parse(concat!(
        "vllm:generation_tokens_total{engine=\"0\"} 500\n",
        "vllm:generation_tokens_created{engine=\"0\"} 1.7000000000e9\n",
        "process_start_time_seconds 1.69999e9\n",
    ));
    let after = parse(concat!(
        "vllm:generation_tokens_total{engine=\"0\"} 800\n",
        "vllm:generation_tokens_created{engine=\"0\"} 1.7000009000e9\n",
        "process_start_time_seconds 1.7000008e9\n",
    ));
    let d = counter_delta(&before, &after, Engine::Vllm, Concept::GenerationTokens);
    assert_eq!(
        d,
        Delta {
            value: Some(800.0),
            reset: true
        }
    );
    let w = window_stats(&before, &after, Engine::Vllm);
    assert!(w.process_restarted);
    assert!(w.any_reset);
}

#[test]
fn real_restart_between_local_vllm_captures() {
    // Four captures from four vLLM processes (process_start_time and every `_created` differ).
    let idle = scrape("local-captures/vllm-metrics.txt");
    let load = scrape("local-captures/vllm-metrics-under-load.txt");
    let queued = scrape("local-captures/vllm-metrics-queued.txt");
    // idle → queued: 36 → 5752 grew, but `_created` changed: a reset, post-reset value.
    let d = counter_delta(&idle, &queued, Engine::Vllm, Concept::GenerationTokens);
    assert_eq!(
        d,
        Delta {
            value: Some(5752.0),
            reset: true
        }
    );
    // under load → queued: 10770 → 5752 went down.
    let d = counter_delta(&load, &queued, Engine::Vllm, Concept::GenerationTokens);
    assert_eq!(
        d,
        Delta {
            value: Some(5752.0),
            reset: true
        }
    );
    let w = window_stats(&load, &queued, Engine::Vllm);
    assert!(w.any_reset && w.process_restarted);
    assert_eq!(w.prefix_cache_hit_rate, None);
    close_some(w.prompt_tokens, 360.0);
    close_some(w.requests_succeeded, 8.0);
    // Same scrape twice: zero increase, no reset.
    let w = window_stats(&load, &load, Engine::Vllm);
    close_some(w.generation_tokens, 0.0);
    assert!(!w.any_reset && !w.process_restarted);
    assert_eq!(w.prefix_cache_hit_rate, None, "0 queries in the window");
}

#[test]
fn pitfall_38_spec_decode_acceptance_from_counters() {
    let s = scrape("local-captures/vllm-metrics-specdecode.txt");
    let w = window_stats_since_start(&s, Engine::Vllm);
    close_some(w.spec_drafts, 160.0);
    close_some(w.spec_draft_tokens, 432.0);
    close_some(w.spec_accepted_tokens, 328.0);
    // 328 / 432 = 0.7592…; 1 + 328 / 160 = 3.05.
    close_some(w.spec_accept_rate, 328.0 / 432.0);
    close_some(w.spec_accept_length, 3.05);
    close_some(w.generation_tokens, 512.0);
    assert!(!w.any_reset);
    // A window between two synthetic later scrapes of the same process.
    let text = common::fixture("local-captures/vllm-metrics-specdecode.txt");
    let later = text
        .replace(
            "vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"tiny-llama\"} 160.0",
            "vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"tiny-llama\"} 260.0",
        )
        .replace(
            "vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"tiny-llama\"} 432.0",
            "vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"tiny-llama\"} 732.0",
        )
        .replace(
            "vllm:spec_decode_num_accepted_tokens_total{engine=\"0\",model_name=\"tiny-llama\"} 328.0",
            "vllm:spec_decode_num_accepted_tokens_total{engine=\"0\",model_name=\"tiny-llama\"} 538.0",
        );
    let later = Scrape::parse(&later).unwrap();
    let w = window_stats(&s, &later, Engine::Vllm);
    close_some(w.spec_accept_rate, 210.0 / 300.0);
    close_some(w.spec_accept_length, 1.0 + 210.0 / 100.0);
    assert!(!w.any_reset);
}

#[test]
fn data_parallel_restart_of_one_engine_is_not_hidden() {
    let before = parse(concat!(
        "vllm:generation_tokens_total{engine=\"0\"} 1000\n",
        "vllm:generation_tokens_total{engine=\"1\"} 1000\n",
    ));
    // Engine 1 restarted (1000 → 50) while engine 0 went on (1000 → 3000). The summed counter
    // still grew (2000 → 3050); per-series increase is 2000 + 50.
    let after = parse(concat!(
        "vllm:generation_tokens_total{engine=\"0\"} 3000\n",
        "vllm:generation_tokens_total{engine=\"1\"} 50\n",
    ));
    let d = counter_delta(&before, &after, Engine::Vllm, Concept::GenerationTokens);
    assert_eq!(
        d,
        Delta {
            value: Some(2050.0),
            reset: true
        }
    );
}

#[test]
fn lazily_created_label_children_count_from_zero() {
    let before =
        parse("vllm:request_success_total{finished_reason=\"length\",model_name=\"m\"} 4\n");
    let after = parse(concat!(
        "vllm:request_success_total{finished_reason=\"length\",model_name=\"m\"} 6\n",
        "vllm:request_success_total{finished_reason=\"stop\",model_name=\"m\"} 3\n",
        "vllm:request_success_total{finished_reason=\"abort\",model_name=\"m\"} 9\n",
    ));
    let d = counter_delta(&before, &after, Engine::Vllm, Concept::RequestSuccess);
    assert_eq!(
        d,
        Delta {
            value: Some(5.0),
            reset: false
        }
    );
}

#[test]
fn renamed_counter_between_scrapes_is_not_a_reset() {
    // Old alias in both scrapes, new name only after an (impossible in practice) upgrade: the
    // candidate present in BOTH scrapes is used.
    let before = parse("vllm:gpu_prefix_cache_queries_total 100\n");
    let after = parse(concat!(
        "vllm:gpu_prefix_cache_queries_total 150\n",
        "vllm:prefix_cache_queries_total 150\n",
    ));
    let d = counter_delta(&before, &after, Engine::Vllm, Concept::PrefixCacheQueries);
    assert_eq!(
        d,
        Delta {
            value: Some(50.0),
            reset: false
        }
    );
}

#[test]
fn gauges_have_no_delta() {
    let s = scrape("local-captures/vllm-metrics-queued.txt");
    assert_eq!(
        counter_delta(&s, &s, Engine::Vllm, Concept::Running),
        Delta::default()
    );
}

#[test]
fn tp_replicas_are_not_double_counted_in_deltas() {
    let before = parse(concat!(
        "sglang:generation_tokens_total{tp_rank=\"0\"} 100\n",
        "sglang:generation_tokens_total{tp_rank=\"1\"} 100\n",
    ));
    let after = parse(concat!(
        "sglang:generation_tokens_total{tp_rank=\"0\"} 160\n",
        "sglang:generation_tokens_total{tp_rank=\"1\"} 160\n",
    ));
    let d = counter_delta(&before, &after, Engine::Sglang, Concept::GenerationTokens);
    assert_eq!(d.value, Some(60.0));
}

#[test]
fn llamacpp_prompt_tokens_window_includes_cached() {
    let idle = scrape("local-captures/llama-server-metrics.txt");
    let load = scrape("local-captures/llama-server-metrics-under-load.txt");
    let w = window_stats(&idle, &load, Engine::LlamaCpp);
    close_some(w.prompt_tokens_computed, 1000.0 - 16.0);
    close_some(w.prompt_tokens_cached, 1600.0);
    close_some(w.prompt_tokens, 2600.0 - 16.0);
    close_some(w.generation_tokens, 14_352.0 - 16.0);
    close_some(w.decode_rate, (14_352.0 - 16.0) / (37.9072 - 0.007094));
    close_some(w.prefill_rate, (1000.0 - 16.0) / (0.123526 - 0.00402));
    // No spec drafts in the window: ratios undefined, counts 0.
    close_some(w.spec_draft_tokens, 0.0);
    assert_eq!(w.spec_accept_rate, None);
    assert_eq!(w.spec_accept_length, None);
    assert!(!w.any_reset);
}

#[test]
fn vllm_mean_prefill_time_over_window_and_since_start() {
    let s = scrape("local-captures/vllm-metrics-under-load.txt");
    let w = window_stats_since_start(&s, Engine::Vllm);
    close_some(w.mean_prefill_time, 0.392_318_543_000_101_27 / 30.0);
    close_some(w.prefix_cache_hit_rate, 768.0 / 3056.0);
    close_some(w.prompt_tokens_cached, 768.0);
    close_some(w.requests_succeeded, 30.0);
}

#[test]
fn histogram_window_is_reset_aware() {
    let before = parse(concat!(
        "# TYPE t histogram\n",
        "t_bucket{le=\"1\"} 10\n",
        "t_bucket{le=\"+Inf\"} 20\n",
        "t_sum 30\n",
        "t_count 20\n",
    ));
    let after = parse(concat!(
        "# TYPE t histogram\n",
        "t_bucket{le=\"1\"} 14\n",
        "t_bucket{le=\"+Inf\"} 30\n",
        "t_sum 52\n",
        "t_count 30\n",
    ));
    let (h, reset) = Histogram::window(&before, &after, "t").unwrap();
    assert!(!reset);
    assert_eq!(h.buckets, vec![(1.0, 4.0), (f64::INFINITY, 10.0)]);
    close_some(h.mean(), 2.2);
    let (h, reset) = Histogram::window(&after, &before, "t").unwrap();
    assert!(reset);
    close_some(h.count, 20.0);
    close(h.buckets[1].1, 20.0);
    assert!(Histogram::window(&before, &parse(""), "t").is_none());
}
