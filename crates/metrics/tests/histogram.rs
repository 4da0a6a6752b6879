//! Server histograms: quantiles above the last finite bucket, means, counts.

mod common;

use common::{close, close_some, scrape};
use servebench_metrics::{
    histogram_count, histogram_mean, histogram_quantile, Catalog, Engine, Histogram,
    HistogramConcept, QuantileEstimate, Scrape,
};

const TTFT: &str = "sglang:time_to_first_token_seconds";

#[test]
fn sglang_v04_ttft_p50_is_above_30_s_not_30() {
    let s = scrape("sglang-v0.4-metrics-docs.prom");
    let p50 = histogram_quantile(&s, TTFT, 0.5).unwrap();
    assert_eq!(p50, QuantileEstimate::AboveLastFiniteBucket(30.0));
    assert_eq!(p50.to_string(), ">30");
    assert_eq!(p50.value(), None);
    assert_eq!(histogram_count(&s, TTFT), Some(11_008.0));
    // 2513 of 11008 observations are ≤ 30 s (22.8 %): p22 is still inside the buckets.
    let p22 = histogram_quantile(&s, TTFT, 0.22).unwrap();
    assert!(matches!(p22, QuantileEstimate::Value(v) if v > 25.0 && v < 30.0));
}

#[test]
fn sglang_v04_means() {
    let s = scrape("sglang-v0.4-metrics-docs.prom");
    let ttft = histogram_mean(&s, TTFT).unwrap();
    close(ttft, 2.351_897_947_411_775_6e6 / 11_008.0);
    assert_eq!((ttft * 100.0).round() / 100.0, 213.65);
    let tpot = histogram_mean(&s, "sglang:time_per_output_token_seconds").unwrap();
    close(tpot, 866_964.579_154_959_8 / 7_400_757.0);
    assert_eq!((tpot * 10_000.0).round() / 10_000.0, 0.1171);
    let e2e = histogram_mean(&s, "sglang:e2e_request_latency_seconds").unwrap();
    close(e2e, 3.116_093_850_019_932e6 / 11_228.0);
    assert_eq!((e2e * 100.0).round() / 100.0, 277.53);
    // The catalog points at the same families.
    assert_eq!(
        Catalog::histograms(Engine::Sglang, HistogramConcept::Ttft)[0],
        TTFT
    );
}

#[test]
fn sglang_v04_ttft_p10_interpolates_like_prometheus() {
    let s = scrape("sglang-v0.4-metrics-docs.prom");
    // rank 1100.8 lies in (7.5, 10]: cumulative 941 → 1330.
    let p10 = histogram_quantile(&s, TTFT, 0.1).unwrap();
    close_some(p10.value(), 7.5 + 2.5 * (1100.8 - 941.0) / (1330.0 - 941.0));
    assert_eq!(p10.to_string(), format!("{}", p10.value().unwrap()));
}

#[test]
fn vllm_issue_8115_count_vs_requests() {
    let s = scrape("vllm-0.5-ttft-histogram-count-vs-requests-issue8115.prom");
    let name = Catalog::histograms(Engine::Vllm, HistogramConcept::Ttft)[0];
    assert_eq!(histogram_count(&s, name), Some(8060.0));
    let mean = histogram_mean(&s, name).unwrap();
    close(mean, 0.587_178_230_285_644_5 / 8060.0);
    assert!(mean < 1e-4, "mean ~0.07 ms");
    // Every observation in the first bucket (0, 0.1]: p50 interpolates to 0.05.
    close_some(histogram_quantile(&s, name, 0.5).unwrap().value(), 0.05);
}

#[test]
fn truncated_histograms_without_inf_bucket_have_no_quantile() {
    let s = scrape("vllm-v0.7-metrics-aibrix-docs.prom");
    assert_eq!(
        histogram_quantile(&s, "vllm:iteration_tokens_total", 0.5),
        None
    );
    // _sum exists but _count was cut off by the doc.
    assert_eq!(histogram_mean(&s, "vllm:iteration_tokens_total"), None);
    let h = Histogram::from_scrape(&s, "vllm:iteration_tokens_total").unwrap();
    close_some(h.sum, 1103.0);
    assert_eq!(h.buckets.len(), 15);
    let ibm = scrape("vllm-ibm-tgis-compat-metrics-excerpt.prom");
    assert_eq!(
        histogram_quantile(&ibm, "tgi_batch_inference_duration", 0.5),
        None
    );
}

#[test]
fn local_vllm_capture_histograms() {
    let s = scrape("local-captures/vllm-metrics-under-load.txt");
    let name = "vllm:time_to_first_token_seconds";
    assert_eq!(histogram_count(&s, name), Some(38.0));
    close_some(histogram_mean(&s, name), 0.820_050_954_818_725_6 / 38.0);
    assert!(histogram_quantile(&s, name, 0.99).is_some());
    // `_created` of the histogram is never a bucket, sum or count.
    let h = Histogram::from_scrape(&s, name).unwrap();
    assert!(h.buckets.iter().all(|&(_, c)| c <= 38.0));
}

#[test]
fn quantile_edge_cases() {
    let s = Scrape::parse(concat!(
        "# TYPE h histogram\n",
        "h_bucket{le=\"0.5\"} 0\n",
        "h_bucket{le=\"1\"} 10\n",
        "h_bucket{le=\"+Inf\"} 10\n",
        "h_sum 7\n",
        "h_count 10\n",
        "# TYPE empty histogram\n",
        "empty_bucket{le=\"1\"} 0\n",
        "empty_bucket{le=\"+Inf\"} 0\n",
        "# TYPE only_inf histogram\n",
        "only_inf_bucket{le=\"+Inf\"} 4\n",
        "# TYPE neg histogram\n",
        "neg_bucket{le=\"-1\"} 2\n",
        "neg_bucket{le=\"+Inf\"} 2\n",
    ))
    .unwrap();
    close_some(histogram_quantile(&s, "h", 0.5).unwrap().value(), 0.75);
    close_some(histogram_quantile(&s, "h", 1.0).unwrap().value(), 1.0);
    close_some(histogram_quantile(&s, "h", 0.0).unwrap().value(), 0.5);
    assert_eq!(histogram_quantile(&s, "h", 1.5), None);
    assert_eq!(histogram_quantile(&s, "h", -0.1), None);
    assert_eq!(histogram_quantile(&s, "h", f64::NAN), None);
    assert_eq!(histogram_quantile(&s, "empty", 0.5), None);
    assert_eq!(histogram_mean(&s, "empty"), None);
    assert_eq!(histogram_quantile(&s, "only_inf", 0.5), None);
    close_some(histogram_quantile(&s, "neg", 0.5).unwrap().value(), -1.0);
    assert_eq!(histogram_quantile(&s, "missing", 0.5), None);
    close_some(histogram_mean(&s, "h"), 0.7);
}

#[test]
fn series_are_summed_by_le_across_engines() {
    let s = Scrape::parse(concat!(
        "# TYPE t histogram\n",
        "t_bucket{engine=\"0\",le=\"1.0\"} 1\n",
        "t_bucket{engine=\"0\",le=\"+Inf\"} 2\n",
        "t_sum{engine=\"0\"} 3\n",
        "t_count{engine=\"0\"} 2\n",
        "t_bucket{engine=\"1\",le=\"1.0\"} 3\n",
        "t_bucket{engine=\"1\",le=\"+Inf\"} 6\n",
        "t_sum{engine=\"1\"} 9\n",
        "t_count{engine=\"1\"} 6\n",
    ))
    .unwrap();
    let h = Histogram::from_scrape(&s, "t").unwrap();
    assert_eq!(h.buckets, vec![(1.0, 4.0), (f64::INFINITY, 8.0)]);
    close_some(h.mean(), 1.5);
    assert_eq!(
        histogram_quantile(&s, "t", 0.9),
        Some(QuantileEstimate::AboveLastFiniteBucket(1.0))
    );
}
