//! Exposition parsing: the grammar cases of brief §1 and every metrics fixture.

mod common;

use common::{close, close_some, engines_dir, fixture, scrape};
use servebench_metrics::{MetricType, ParseError, Scrape};

#[test]
fn every_metrics_fixture_parses_without_rejected_lines() {
    let dir = engines_dir();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".prom"))
        .collect();
    for f in [
        "vllm-metrics.txt",
        "vllm-metrics-under-load.txt",
        "vllm-metrics-queued.txt",
        "vllm-metrics-specdecode.txt",
        "llama-server-metrics.txt",
        "llama-server-metrics-under-load.txt",
    ] {
        files.push(format!("local-captures/{f}"));
    }
    assert_eq!(files.len(), 13 + 6, "fixture set changed: {files:?}");
    for f in files {
        let text = fixture(&f);
        let s = Scrape::parse(&text).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(s.rejected_lines(), 0, "{f}");
        let sample_lines = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .count();
        assert_eq!(
            s.samples().count() + s.created_samples().count(),
            sample_lines,
            "{f}: every sample line must be kept"
        );
    }
}

#[test]
fn names_with_colon_and_underscore_prefixes() {
    let s =
        Scrape::parse("vllm:foo 1\nsglang_foo 2\nsglang:foo 3\nllamacpp:bar_total 4\n").unwrap();
    close_some(s.sum("vllm:foo"), 1.0);
    close_some(s.sum("sglang_foo"), 2.0);
    close_some(s.sum("sglang:foo"), 3.0);
    close_some(s.sum("llamacpp:bar_total"), 4.0);
    // Exact names only: no prefix matching.
    assert_eq!(s.sum("vllm:fo"), None);
    assert_eq!(s.sum("llamacpp:bar"), None);
}

#[test]
fn label_values_with_escapes_commas_braces_and_python_dicts() {
    let text = concat!(
        r#"m{a="q\"u,o}te",b="back\\slash",c="line\nbreak",method="{'method': 'prefill'}"} 1"#,
        "\n"
    );
    let s = Scrape::parse(text).unwrap();
    let x = s.series("m").next().unwrap();
    assert_eq!(x.label("a"), Some("q\"u,o}te"));
    assert_eq!(x.label("b"), Some("back\\slash"));
    assert_eq!(x.label("c"), Some("line\nbreak"));
    assert_eq!(x.label("method"), Some("{'method': 'prefill'}"));
    assert_eq!(x.labels.len(), 4);
}

#[test]
fn special_values_exponents_integers_timestamps() {
    let s = Scrape::parse(
        "a NaN\nb +Inf\nc -Inf\nd 8.128902e+06\ne 12 1395066363000\nf -1.0\ng 1.7382173358407154e+09\n",
    )
    .unwrap();
    assert!(s.series("a").next().unwrap().value.is_nan());
    assert_eq!(s.series("b").next().unwrap().value, f64::INFINITY);
    assert_eq!(s.series("c").next().unwrap().value, f64::NEG_INFINITY);
    close_some(s.sum("d"), 8_128_902.0);
    let e = s.series("e").next().unwrap();
    close(e.value, 12.0);
    assert_eq!(e.timestamp_ms, Some(1_395_066_363_000));
    close_some(s.sum("f"), -1.0);
    close_some(s.sum("g"), 1_738_217_335.840_715_4);
}

#[test]
fn histogram_summary_untyped_and_blank_lines() {
    let text = "# HELP h A histogram.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n\n\n# TYPE s summary\ns{quantile=\"0.5\"} 1\ns_sum 2\ns_count 3\nuntyped_thing 5\n";
    let s = Scrape::parse(text).unwrap();
    assert_eq!(s.family_type("h"), Some(MetricType::Histogram));
    assert_eq!(s.family_type("s"), Some(MetricType::Summary));
    assert_eq!(s.family_type("untyped_thing"), Some(MetricType::Untyped));
    assert_eq!(s.series("h_bucket").count(), 2);
    close_some(s.sum("h_sum"), 3.0);
    close_some(s.sum("h_count"), 2.0);
    close_some(s.sum("s"), 1.0);
    close_some(s.sum("s_sum"), 2.0);
    close_some(s.sum("s_count"), 3.0);
    let inf = s
        .series("h_bucket")
        .find(|x| x.label("le") == Some("+Inf"))
        .unwrap();
    close(inf.value, 2.0);
}

#[test]
fn crlf_and_indentation_are_accepted() {
    let s = Scrape::parse("# TYPE a gauge\r\na 1\r\n  b{x=\"y\"} 2\r\n").unwrap();
    close_some(s.sum("a"), 1.0);
    close_some(s.sum("b"), 2.0);
    assert_eq!(s.rejected_lines(), 0);
}

#[test]
fn bad_lines_are_skipped_and_counted() {
    let s = Scrape::parse("good 1\nthis is not a metric line\nbad{x=unquoted} 2\nalso_good 3\n")
        .unwrap();
    assert_eq!(s.rejected_lines(), 2);
    close_some(s.sum("good"), 1.0);
    close_some(s.sum("also_good"), 3.0);
}

#[test]
fn html_error_page_is_not_an_exposition() {
    let err = Scrape::parse("<html>\n<head><title>502 Bad Gateway</title></head>\n</html>\n")
        .unwrap_err();
    match err {
        ParseError::NotExposition { rejected_lines, .. } => assert_eq!(rejected_lines, 3),
    }
    assert!(Scrape::parse("{\"error\":\"not found\"}").is_err());
}

#[test]
fn empty_and_comment_only_bodies_are_empty_scrapes() {
    assert!(Scrape::parse("").unwrap().is_empty());
    assert!(
        Scrape::parse("\n\n# just a comment\n# HELP x y\n# TYPE x gauge\n")
            .unwrap()
            .is_empty()
    );
}

#[test]
fn created_series_are_set_apart() {
    // vllm-0.10.0 excerpt: `_created` gauges next to `_total` counters.
    let s = scrape("vllm-0.10.0-metrics-excerpt-glm45.prom");
    assert!(s.samples().all(|x| !x.name.ends_with("_created")));
    assert!(s.family_names().all(|f| !f.ends_with("_created")));
    assert_eq!(s.created_samples().count(), 2);
    assert_eq!(s.sum("vllm:gpu_prefix_cache_queries_created"), None);
    close_some(s.sum("vllm:prefix_cache_queries_total"), 32.0);
    close(
        s.created_samples()
            .find(|c| c.name == "vllm:gpu_prefix_cache_hits_created")
            .unwrap()
            .value,
        1.753_795_326_935_312_3e9,
    );
}

#[test]
fn truncated_type_line_without_samples_keeps_the_rest() {
    // vllm-0.7-v1engine excerpt ends with a TYPE line whose samples were cut off.
    let s = scrape("vllm-0.7-v1engine-metrics-excerpt.prom");
    assert_eq!(s.rejected_lines(), 0);
    assert!(!s.has_series("vllm:gpu_prefix_cache_queries_total"));
    close_some(s.sum("process_max_fds"), 1_048_576.0);
    close_some(s.process_start_time(), 1.742_624_005_57e9);
    close_some(s.sum("process_cpu_seconds_total"), 439.719_999_999_999_97);
}

#[test]
fn tp_rank_replicas_keep_rank_zero_only() {
    let s = Scrape::parse(concat!(
        "sglang:num_running_reqs{tp_rank=\"1\",model_name=\"m\"} 7\n",
        "sglang:num_running_reqs{tp_rank=\"0\",model_name=\"m\"} 5\n",
        "sglang:num_running_reqs{tp_rank=\"2\",model_name=\"m\"} 9\n",
        "only_rank_one{tp_rank=\"1\"} 4\n",
    ))
    .unwrap();
    close_some(s.sum("sglang:num_running_reqs"), 5.0);
    // With rank 0 missing, the lowest rank stands for the group.
    close_some(s.sum("only_rank_one"), 4.0);
}

#[test]
fn families_and_types_of_the_vllm_capture_match_the_name_list() {
    // local-captures/vllm-metric-names.txt lists the 43 vllm:* families with their TYPE.
    let s = scrape("local-captures/vllm-metrics-specdecode.txt");
    let list = fixture("local-captures/vllm-metric-names.txt");
    let mut n = 0;
    for line in list.lines().filter(|l| !l.trim().is_empty()) {
        let (name, ty) = line.split_once(" (").unwrap();
        let ty = ty.trim_end_matches(')');
        let expected = match ty {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            other => panic!("unexpected type {other}"),
        };
        assert_eq!(s.family_type(name), Some(expected), "{name}");
        n += 1;
    }
    assert_eq!(n, 43);
    assert_eq!(
        s.family_names().filter(|f| f.starts_with("vllm:")).count(),
        43
    );
}

#[test]
fn families_and_types_of_the_llama_server_captures_match_the_name_list() {
    let list = fixture("local-captures/llama-server-metric-names.txt");
    for capture in [
        "local-captures/llama-server-metrics.txt",
        "local-captures/llama-server-metrics-under-load.txt",
    ] {
        let s = scrape(capture);
        let mut n = 0;
        for line in list.lines().filter(|l| !l.trim().is_empty()) {
            let (name, ty) = line.split_once(" (").unwrap();
            let expected = if ty.starts_with("counter") {
                MetricType::Counter
            } else {
                MetricType::Gauge
            };
            assert_eq!(s.family_type(name), Some(expected), "{capture}: {name}");
            n += 1;
        }
        assert_eq!(n, 15);
        assert_eq!(s.family_names().count(), 15, "{capture}");
        // No labels, no histograms.
        assert!(s.samples().all(|x| x.labels.is_empty()));
    }
}

#[test]
fn nim_cache_config_label_values_stay_strings() {
    let s = scrape("vllm-nim-qwen3vl-cache-config-info.prom");
    let info = s.series("vllm:cache_config_info").next().unwrap();
    // INDEX.md says "30 labels"; the line carries 29 (the 30th distinct label name in the file,
    // `model_name`, belongs to the kv_cache_usage_perc line).
    assert_eq!(info.labels.len(), 29);
    assert_eq!(info.label("kv_cache_size_tokens"), Some("551520"));
    assert_eq!(
        info.label("kv_cache_max_concurrency"),
        Some("16.8310546875")
    );
    assert_eq!(info.label("num_gpu_blocks"), Some("34470"));
    assert_eq!(info.label("kv_cache_memory_bytes"), Some("None"));
    assert_eq!(info.label("kv_cache_dtype_skip_layers"), Some("[]"));
    close(info.value, 1.0);
}

#[test]
fn ibm_tgis_label_value_is_a_stringified_dict() {
    let s = scrape("vllm-ibm-tgis-compat-metrics-excerpt.prom");
    let b: Vec<_> = s.series("tgi_batch_inference_duration_bucket").collect();
    assert_eq!(b.len(), 13);
    assert!(b
        .iter()
        .all(|x| x.label("method") == Some("{'method': 'prefill'}")));
    assert_eq!(s.family_type("tgi_queue_size"), Some(MetricType::Gauge));
}
