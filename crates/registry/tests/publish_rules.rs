//! Verdict rules (table), publish of a results file (rows for failed cells, metrics rule,
//! baseline regression, provenance), and the seed record's import round trip.

use serde_json::{json, Value};
use servebench_registry::publish::{decide, publish, CellFacts, PublishOptions};
use servebench_registry::records::SweepRow;
use servebench_registry::{import, validate, CacheTag, Collection, Registry, Verdict};
use servebench_results::{CellResult, CellStatus, PrefillRow, RequestSample, Results};

fn ok_facts() -> CellFacts {
    CellFacts {
        status: CellStatus::Ok,
        rate: Some(100.0),
        client_tps: Some(100.0),
        server_output_tokens: Some(1000.0),
        server_window_seconds: Some(10.0),
        client_max_tick_lag_ms: Some(3.0),
        concurrency: 4,
        ..Default::default()
    }
}

#[test]
fn verdict_table() {
    type Edit = fn(&mut CellFacts);
    let cases: Vec<(&str, Edit, Option<f64>, &str, &str)> = vec![
        (
            "ok",
            |_| {},
            None,
            "accepted-warm-prefix-concurrency-sweep",
            "accepted",
        ),
        (
            "capacity-limited",
            |f| f.capacity_limited = true,
            None,
            "candidate-warm-prefix-concurrency-sweep",
            "capacity-limited",
        ),
        (
            "underfilled",
            |f| f.underfilled = true,
            None,
            "candidate-warm-prefix-concurrency-sweep",
            "capacity-limited",
        ),
        (
            "readiness timeout",
            |f| f.warmup_timed_out = true,
            None,
            "candidate-warm-prefix-concurrency-sweep",
            "capacity-limited",
        ),
        (
            "client lag",
            |f| f.client_max_tick_lag_ms = Some(80.0),
            None,
            "measurement-invalid",
            "client-lag",
        ),
        (
            "server disagrees",
            |f| f.server_output_tokens = Some(700.0),
            None,
            "measurement-invalid",
            "server-disagrees",
        ),
        (
            "server within slack",
            |f| f.server_output_tokens = Some(1080.0),
            None,
            "accepted-warm-prefix-concurrency-sweep",
            "accepted",
        ),
        (
            "server not reporting",
            |f| f.server_output_tokens = None,
            None,
            "accepted-warm-prefix-concurrency-sweep",
            "accepted",
        ),
        (
            "counter reset",
            |f| f.server_counter_reset = true,
            None,
            "measurement-invalid",
            "server-disagrees",
        ),
        (
            "regression vs baseline",
            |_| {},
            Some(120.0),
            "rejected-warm-prefix-concurrency-sweep-regression",
            "regression",
        ),
        (
            "within noise of baseline",
            |_| {},
            Some(104.0),
            "accepted-warm-prefix-concurrency-sweep",
            "accepted",
        ),
        (
            "failed cell",
            |f| {
                f.status = CellStatus::Error;
                f.rate = None;
            },
            None,
            "infra-invalid",
            "infra-invalid",
        ),
        (
            "invalid cell",
            |f| {
                f.status = CellStatus::Invalid;
                f.rate = None;
            },
            None,
            "measurement-invalid",
            "cell-invalid",
        ),
        (
            "skipped cell",
            |f| {
                f.status = CellStatus::SkippedCapacity;
                f.rate = None;
            },
            None,
            "not-run",
            "not-run",
        ),
        (
            "cold prefill hit the cache",
            |f| f.cold_cached_tokens = Some(512),
            None,
            "measurement-invalid",
            "cold-cache-hit",
        ),
        (
            "implausible numbers",
            |f| f.implausible = Some("TTFT 0.2 ms".into()),
            None,
            "measurement-invalid",
            "implausible",
        ),
        // A failed cell stays failed even against a baseline; lag beats capacity.
        (
            "failed + baseline",
            |f| {
                f.status = CellStatus::Error;
                f.rate = None;
            },
            Some(120.0),
            "infra-invalid",
            "infra-invalid",
        ),
        (
            "lag + capacity",
            |f| {
                f.client_max_tick_lag_ms = Some(99.0);
                f.capacity_limited = true;
            },
            None,
            "measurement-invalid",
            "client-lag",
        ),
    ];
    for (name, edit, base, status, rule) in cases {
        let mut f = ok_facts();
        edit(&mut f);
        let v = decide(
            &f,
            CacheTag::WarmPrefix,
            "concurrency-sweep",
            base.map(|b| ("base-sweep", b)),
        );
        assert_eq!(v.status(), status, "{name}");
        assert_eq!(v.rule.as_deref(), Some(rule), "{name}");
        if base.is_some() && v.verdict != Verdict::InfraInvalid {
            assert_eq!(v.compared_to.as_deref(), Some("base-sweep"), "{name}");
        }
        if v.verdict != Verdict::Accepted {
            assert!(
                v.reason.is_some(),
                "{name}: a non-accepted verdict says why"
            );
        }
    }
}

fn sample(cached: u64, input: u64) -> RequestSample {
    RequestSample {
        cached_tokens: Some(cached),
        input_tokens: Some(input),
        output_tokens: 64,
        completed: true,
        sent_at_window_s: Some(0.1),
        ..Default::default()
    }
}

fn cell(c: u64, ctx: u64, tps: f64) -> CellResult {
    CellResult {
        concurrency: c,
        context_tokens: ctx,
        status: CellStatus::Ok,
        benchmark_mode: servebench_results::BenchmarkMode::Duration,
        measurement_seconds: Some(10.0),
        client_output_tokens: Some((tps * 10.0) as u64),
        aggregate_tps: Some(tps),
        ttft_p50: Some(0.05),
        output_tps_per_user_p50: Some(tps / c as f64),
        request_count: c,
        prompt_tokens: Some(ctx + 2),
        client_max_tick_lag_ms: Some(2.0),
        request_samples: (0..c).map(|_| sample(ctx, ctx + 2)).collect(),
        ..Default::default()
    }
}

fn results() -> Value {
    let mut r = Results {
        schema_version: "1.0".into(),
        ..Default::default()
    };
    r.metadata.tool = "servebench".into();
    r.metadata.version = "0.1.0".into();
    r.metadata.engine = "vllm".into();
    r.metadata.engine_version = Some("0.11.0".into());
    r.metadata.model = "Qwen/Qwen3-0.6B".into();
    r.metadata.run_id = "abcdefghijkl".into();
    r.metadata.max_tokens = 64;
    r.metadata.timestamp = "2026-09-01T12:00:00.000000".into();
    r.metadata.started_at = Some("2026-09-01T10:00:00.000Z".into());
    r.metadata.max_model_len = Some(4096);
    r.startup_diagnostics
        .insert("hostname".into(), json!("bench-1"));
    r.hardware_run_summary.insert("gpu_count".into(), json!(1));
    r.hardware_run_summary
        .insert("vram_total_mb".into(), json!(24564));
    // The host monitor's shape (crates/host): per-GPU identities and memory.
    r.hardware_run_summary.insert(
        "gpus".into(),
        json!([{"index": 0, "name": "NVIDIA GeForce RTX 4090", "uuid": "GPU-1234", "vram_total_mb": 24564}]),
    );
    r.prefill.insert(
        "4096".into(),
        PrefillRow {
            ttft_seconds: Some(0.45),
            tok_per_sec: Some(9100.0),
            prompt_tokens: Some(4098),
            samples: 1,
            method: servebench_results::PrefillMethod::Client,
            status: Some(CellStatus::Ok),
            ..Default::default()
        },
    );
    r.prefill_warm.insert(
        "4096".into(),
        PrefillRow {
            ttft_seconds: Some(0.02),
            tok_per_sec: Some(200_000.0),
            prompt_tokens: Some(4098),
            samples: 1,
            cached_tokens: Some(4096),
            computed_tokens: Some(2),
            cache_hit_rate: Some(0.9995),
            method: servebench_results::PrefillMethod::WarmPrefix,
            ..Default::default()
        },
    );
    let mut capped = cell(8, 512, 600.0);
    capped.capacity_limited = true;
    let mut failed = cell(16, 512, 0.0);
    failed.status = CellStatus::Error;
    failed.status_reason = "scout request failed: HTTP 500".into();
    failed.aggregate_tps = None;
    let mut skipped = CellResult {
        concurrency: 64,
        context_tokens: 4096,
        status: CellStatus::SkippedCapacity,
        status_reason: "C x (ctx + max_tokens) exceeds the KV budget".into(),
        ..Default::default()
    };
    skipped.benchmark_mode = servebench_results::BenchmarkMode::Duration;
    r.results = vec![
        cell(1, 512, 100.0),
        cell(4, 512, 380.0),
        capped,
        failed,
        skipped,
    ];
    r.burst_results = vec![cell(2, 512, 190.0)];
    r.rate_results = vec![rate_row(512, 2.0, 95.0)];
    serde_json::to_value(&r).unwrap()
}

/// An ok open-loop row at `rate` req/s on context `ctx` with `tps` output tok/s, as
/// `servebench run --request-rate` writes it.
fn rate_row(ctx: u64, rate: f64, tps: f64) -> servebench_results::RateRow {
    let summary = |p50: f64| servebench_results::RateSummary {
        count: 120,
        avg: p50,
        p50,
        p90: p50 * 1.3,
        p99: p50 * 1.8,
        ..Default::default()
    };
    servebench_results::RateRow {
        context_tokens: ctx,
        offered_rate: rate,
        arrival: servebench_results::ArrivalProcess::Poisson,
        burstiness: Some(1.0),
        duration: 60.0,
        seed: 7,
        requests_scheduled: 120,
        requests_sent: 120,
        requests_completed: 120,
        schedule_rate: Some(rate),
        achieved_rate: Some(rate),
        completed_rate: Some(rate * 0.95),
        ttft: Some(summary(0.030)),
        ttft_from_intended: Some(summary(0.031)),
        itl: Some(summary(0.012)),
        tpot: Some(summary(0.012)),
        e2e: Some(summary(0.8)),
        e2e_from_intended: Some(summary(0.8)),
        output_tokens: 7680,
        output_tps: Some(tps),
        status: Some(CellStatus::Ok),
        ..Default::default()
    }
}

fn opts(recipe: &str) -> PublishOptions {
    PublishOptions {
        recipe_id: recipe.into(),
        sweep_id: None,
        baseline: None,
        hardware_id: None,
        model_instance_id: None,
        results_sha256: "a".repeat(64),
        results_file: "run.json".into(),
        command: vec!["servebench".into(), "publish".into(), "run.json".into()],
        now: "2026-09-02T08:00:00Z".parse().unwrap(),
        tool_version: "0.1.0".into(),
    }
}

#[test]
fn publish_rows_metrics_provenance() {
    let dir = tempfile::tempdir().unwrap();
    let mut reg = Registry::load(dir.path()).unwrap();
    let out = publish(&mut reg, &results(), &opts("qwen3-0-6b-rtx4090-vllm")).unwrap();
    assert_eq!(
        out.sweep_id,
        "qwen3-0-6b-rtx4090-vllm-20260901-abcdefghijkl"
    );
    let reg = Registry::load(dir.path()).unwrap();
    let problems = validate::validate(&reg);
    assert!(problems.is_empty(), "{problems:#?}");
    let s = reg.sweep(&out.sweep_id).unwrap();
    let statuses: Vec<&str> = s.rows.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(
        statuses,
        [
            "accepted-cold-prefill",
            "accepted-warm-prefix-prefill",
            "accepted-warm-prefix-c1",
            "accepted-warm-prefix-concurrency-sweep",
            "candidate-warm-prefix-concurrency-sweep",
            "infra-invalid",
            "not-run",
            "accepted-warm-prefix-burst-e2e",
            "accepted-warm-prefix-request-rate",
        ]
    );
    let m = s.metrics.as_ref().unwrap();
    assert_eq!(m.point_count, Some(6), "accepted rows only");
    assert_eq!(
        m.peak_generation_tps,
        Some(380.0),
        "sustained accepted rows only (not the capacity-limited 600)"
    );
    assert_eq!(
        m.peak_prompt_tps,
        Some(9100.0),
        "cold prefill only, never the warm 200k"
    );
    assert_eq!(
        s.measured_at.as_deref(),
        Some("2026-09-01T10:00:00.000Z"),
        "from the run"
    );
    assert_eq!(s.accepted_at.as_deref(), Some("2026-09-02T08:00:00.000Z"));
    let src = s.source.as_ref().unwrap();
    assert_eq!(src["tool"]["name"], "servebench");
    assert_eq!(src["results_sha256"], "a".repeat(64));
    assert_eq!(src["run_id"], "abcdefghijkl");
    assert_eq!(src["peak_generation_rate_kind"], "aggregate");
    assert!(src["method"]
        .as_str()
        .unwrap()
        .contains("servebench-accepted-rows/v1"));
    assert_eq!(src["host"]["hardware_id"], "rtx-4090-24gb");
    assert_eq!(src["host"]["gpus"][0]["uuid"], "GPU-1234");
    assert_eq!(src["engine"]["name"], "vllm");
    let failed: &SweepRow = &s.rows[5];
    assert_eq!(
        failed.extra["cell_status_reason"],
        "scout request failed: HTTP 500"
    );
    assert_eq!(s.rows[8].extra["request_rate_per_s"], 2.0);
    // Drafted records, linked and candidate.
    let r = reg.recipe("qwen3-0-6b-rtx4090-vllm").unwrap();
    assert_eq!(r.status.as_str(), "candidate");
    assert_eq!(r.speed_sweep_ids, vec![out.sweep_id.clone()]);
    assert_eq!(r.hardware_id, "rtx-4090-24gb");
    assert_eq!(r.engine.name, "vllm");
    assert_eq!(r.serving["max_context_tokens"], 4096);
    let hw = reg.get(Collection::Hardware, "rtx-4090-24gb").unwrap();
    assert_eq!(hw.raw["vendor"], "nvidia");
    assert_eq!(hw.raw["memory"]["vram_gb"], 24.0);
    assert!(reg
        .get(Collection::ModelInstance, "qwen-qwen3-0-6b--unpinned")
        .is_some());
    // Every written file is canonical.
    assert!(reg.all().all(|r| r.canonical));

    // Never overwrite evidence.
    let mut reg2 = Registry::load(dir.path()).unwrap();
    let err = publish(&mut reg2, &results(), &opts("qwen3-0-6b-rtx4090-vllm")).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");

    // A second run against the first as baseline: slower rows are regressions.
    let mut slower = results();
    slower["metadata"]["run_id"] = json!("mnopqrstuvwx");
    slower["results"][1]["aggregate_tps"] = json!(300.0);
    slower["results"][1]["client_output_tokens"] = json!(3000);
    let mut o = opts("qwen3-0-6b-rtx4090-vllm");
    o.baseline = Some(out.sweep_id.clone());
    let out2 = publish(&mut reg2, &slower, &o).unwrap();
    let reg = Registry::load(dir.path()).unwrap();
    assert!(
        validate::validate(&reg).is_empty(),
        "{:#?}",
        validate::validate(&reg)
    );
    let s2 = reg.sweep(&out2.sweep_id).unwrap();
    assert_eq!(
        s2.rows[3].status,
        "rejected-warm-prefix-concurrency-sweep-regression"
    );
    assert_eq!(
        s2.rows[3].verdict.as_ref().unwrap().compared_to.as_deref(),
        Some(out.sweep_id.as_str())
    );
    assert_eq!(s2.rows[2].status, "accepted-warm-prefix-c1");
    assert_eq!(
        reg.recipe("qwen3-0-6b-rtx4090-vllm")
            .unwrap()
            .speed_sweep_ids
            .len(),
        2
    );
}

#[test]
fn publish_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let mut reg = Registry::load(dir.path()).unwrap();
    let mut o = opts("Bad Recipe");
    assert!(publish(&mut reg, &results(), &o).is_err());
    o = opts("ok-recipe");
    o.hardware_id = Some("no-such-hw".into());
    let e = publish(&mut reg, &results(), &o).unwrap_err();
    assert!(e.to_string().contains("--hardware no-such-hw"), "{e}");
    o = opts("ok-recipe");
    o.baseline = Some("no-such-sweep".into());
    assert!(publish(&mut reg, &results(), &o)
        .unwrap_err()
        .to_string()
        .contains("--baseline"));
    assert!(publish(&mut reg, &json!({"hello": 1}), &opts("ok-recipe")).is_err());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
}

#[test]
fn old_tool_results_publish() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/results/llm-decode-bench-0.4.18-vllm-cpu-tiny.json"
    ))
    .unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut reg = Registry::load(dir.path()).unwrap();
    let mut o = opts("tiny-llama-cpu-vllm");
    o.now = "2026-12-01T00:00:00Z".parse().unwrap();
    o.results_sha256 = servebench_registry::publish::sha256_hex(text.as_bytes());
    let out = publish(&mut reg, &v, &o).unwrap();
    let reg = Registry::load(dir.path()).unwrap();
    let p = validate::validate(&reg);
    assert!(p.is_empty(), "{p:#?}");
    let s = reg.sweep(&out.sweep_id).unwrap();
    // The old tool's per-token ITL of 3.6e-5 s (27,904 tok/s per stream at C=1, a known bug
    // of its chunk accounting) is refused as implausible, never accepted.
    let implausible: Vec<&str> = s
        .rows
        .iter()
        .filter(|r| r.verdict.as_ref().and_then(|v| v.rule.as_deref()) == Some("implausible"))
        .map(|r| r.status.as_str())
        .collect();
    assert_eq!(implausible, ["measurement-invalid"; 3]);
    assert_eq!(
        s.rows.len(),
        v["results"].as_array().unwrap().len() + v["prefill"].as_object().map_or(0, |m| m.len())
    );
}

#[test]
fn seed_imports_round_trips_and_validates() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/registry/seed-001-speed-sweep-envelope.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let envelope: Value = serde_json::from_str(&text).unwrap();
    let mut want = envelope["data"].clone();
    want.as_object_mut().unwrap().remove("relationships");
    let id = want["id"].as_str().unwrap().to_string();

    let dir = tempfile::tempdir().unwrap();
    let mut reg = Registry::load(dir.path()).unwrap();
    let out = import::import_text(
        &mut reg,
        &text,
        path,
        "2026-09-01T00:00:00Z".parse().unwrap(),
    )
    .unwrap();
    assert_eq!(out.imported, vec![(Collection::SpeedSweep, id.clone())]);
    let drafted: Vec<Collection> = out.drafted.iter().map(|d| d.0).collect();
    assert!(drafted.contains(&Collection::Recipe) && drafted.contains(&Collection::ModelInstance));

    let reg = Registry::load(dir.path()).unwrap();
    let p = validate::validate(&reg);
    assert!(p.is_empty(), "{p:#?}");
    let rec = reg.get(Collection::SpeedSweep, &id).unwrap();
    assert_eq!(
        rec.raw, want,
        "import -> write -> read gives the same content"
    );
    assert!(rec.canonical);
    let sweep = rec.sweep().expect("typed");
    assert_eq!(sweep.rows.len(), 19);
    // The typed record round-trips too.
    let again: servebench_registry::records::SpeedSweep =
        serde_json::from_value(serde_json::to_value(sweep).unwrap()).unwrap();
    assert_eq!(&again, sweep);
    // Imported evidence never validates a recipe.
    let recipe = reg.recipe(&sweep.recipe_id).unwrap();
    assert_eq!(recipe.status.as_str(), "candidate");
    assert_eq!(recipe.speed_sweep_ids, vec![id.clone()]);
    let inst = reg
        .get(Collection::ModelInstance, &recipe.model_instance_id)
        .unwrap();
    assert_eq!(inst.raw["repository"], "0xSero/GLM-5.3-Flash-EXL3-Q4");
    assert_eq!(
        inst.raw["revision"],
        "99cccdf0e8741715662c383828a9ea601990c125"
    );

    // Importing again (same content) is idempotent; the written file does not change.
    let before = std::fs::read(dir.path().join(format!("speed-sweep/{id}.json"))).unwrap();
    let mut reg = Registry::load(dir.path()).unwrap();
    let out = import::import_text(
        &mut reg,
        &text,
        path,
        "2026-09-02T00:00:00Z".parse().unwrap(),
    )
    .unwrap();
    assert!(out.drafted.is_empty());
    assert_eq!(
        before,
        std::fs::read(dir.path().join(format!("speed-sweep/{id}.json"))).unwrap()
    );
    assert!(validate::validate(&Registry::load(dir.path()).unwrap()).is_empty());
}

#[test]
fn bare_records_and_list_envelopes_import_identically() {
    // Registry A: a published run (every collection).
    let a = tempfile::tempdir().unwrap();
    let mut reg = Registry::load(a.path()).unwrap();
    publish(&mut reg, &results(), &opts("qwen3-0-6b-rtx4090-vllm")).unwrap();
    let reg_a = Registry::load(a.path()).unwrap();

    // Registry B: the hardware and model as bare files, the rest as one list envelope, in an
    // order where the sweep comes before its recipe.
    let b = tempfile::tempdir().unwrap();
    let mut reg_b = Registry::load(b.path()).unwrap();
    let now = "2026-09-03T00:00:00Z".parse().unwrap();
    let mut list = Vec::new();
    for c in [
        Collection::SpeedSweep,
        Collection::Recipe,
        Collection::ModelInstance,
    ] {
        list.extend(reg_a.records(c).map(|r| r.raw.clone()));
    }
    for c in [Collection::Hardware, Collection::Model] {
        for r in reg_a.records(c) {
            let out = import::import_text(&mut reg_b, &r.raw.to_string(), "bare", now).unwrap();
            assert_eq!(out.imported, vec![(c, r.id.clone())]);
        }
    }
    let envelope =
        json!({"data": list, "meta": {"source": "registry", "total": 3}, "links": {"next": null}});
    let out = import::import_text(&mut reg_b, &envelope.to_string(), "list", now).unwrap();
    assert!(
        out.drafted.is_empty(),
        "the recipe came with the sweep: {:?}",
        out.drafted
    );
    for r in reg_a.all() {
        let path = r.canonical_rel_path();
        assert_eq!(
            std::fs::read(a.path().join(&path)).unwrap(),
            std::fs::read(b.path().join(&path)).unwrap(),
            "{path}"
        );
    }
    assert!(validate::validate(&Registry::load(b.path()).unwrap()).is_empty());
    // Not a record: a clear error, nothing written for it.
    let e = import::import_text(&mut reg_b, r#"{"hello": 1}"#, "x.json", now).unwrap_err();
    assert!(
        e.to_string().contains("cannot tell which collection"),
        "{e}"
    );
}

#[test]
fn hardware_and_model_instance_flags_name_existing_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut reg = Registry::load(dir.path()).unwrap();
    publish(&mut reg, &results(), &opts("first-recipe")).unwrap();
    let mut r2 = results();
    r2["metadata"]["run_id"] = json!("secondrunidx");
    r2["hardware_run_summary"] = json!({});
    let mut o = opts("second-recipe");
    o.hardware_id = Some("rtx-4090-24gb".into());
    o.model_instance_id = Some("qwen-qwen3-0-6b--unpinned".into());
    let out = publish(&mut reg, &r2, &o).unwrap();
    assert_eq!(
        out.drafted,
        vec![(Collection::Recipe, "second-recipe".to_string())]
    );
    let reg = Registry::load(dir.path()).unwrap();
    let r = reg.recipe("second-recipe").unwrap();
    assert_eq!(r.hardware_id, "rtx-4090-24gb");
    assert_eq!(r.model_instance_id, "qwen-qwen3-0-6b--unpinned");
    assert!(validate::validate(&reg).is_empty());
    // An existing recipe on other hardware: refused, nothing written.
    let mut reg = Registry::load(dir.path()).unwrap();
    let mut o = opts("first-recipe");
    o.sweep_id = Some("third".into());
    o.hardware_id = Some("unknown-hardware".into());
    reg.insert(Collection::Hardware, json!({"id": "unknown-hardware"}))
        .unwrap();
    let e = publish(&mut reg, &r2, &o).unwrap_err();
    assert!(
        e.to_string().contains("contradicts recipe first-recipe"),
        "{e}"
    );
    assert!(!dir.path().join("speed-sweep/third.json").exists());
}

#[test]
fn a_rate_only_run_publishes_request_rate_rows_and_validates() {
    // `servebench run --request-rate 2,4 --contexts 512`: no matrix cells, no prefill rows.
    let mut v = results();
    v["results"] = json!([]);
    v["burst_results"] = json!([]);
    v["prefill"] = json!({});
    v["prefill_warm"] = json!({});
    let mut slow = rate_row(512, 4.0, 180.0);
    slow.goodput = Some(3.9);
    slow.slo_attainment = Some(0.98);
    let mut cut = rate_row(512, 8.0, 0.0);
    cut.status = Some(CellStatus::SkippedUser);
    cut.status_reason = Some("interrupted by the user (Ctrl-C)".into());
    cut.output_tps = None;
    v["rate_results"] = json!([rate_row(512, 2.0, 95.0), slow, cut]);
    let dir = tempfile::tempdir().unwrap();
    let mut reg = Registry::load(dir.path()).unwrap();
    let out = publish(&mut reg, &v, &opts("qwen3-0-6b-rtx4090-vllm")).expect("publishes");
    let reg = Registry::load(dir.path()).unwrap();
    let problems = validate::validate(&reg);
    assert!(problems.is_empty(), "{problems:#?}");
    let s = reg.sweep(&out.sweep_id).unwrap();
    let statuses: Vec<&str> = s.rows.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(
        statuses,
        [
            "accepted-warm-prefix-request-rate",
            "accepted-warm-prefix-request-rate",
            "not-run",
        ]
    );
    let row = &s.rows[1];
    assert_eq!(row.extra["layer"], "request_rate");
    assert_eq!(row.extra["request_rate_per_s"], 4.0);
    assert_eq!(row.extra["arrival"], "poisson");
    assert_eq!(row.extra["goodput_req_per_s"], 3.9);
    assert_eq!(row.decode_tok_s, Some(180.0));
    assert_eq!(row.ttft_ms_p50, Some(30.0));
    assert_eq!(row.samples, Some(120));
    assert_eq!(row.context_tokens, Some(512));
    assert_eq!(
        s.rows[2].extra["cell_status_reason"],
        "interrupted by the user (Ctrl-C)"
    );
}

/// A published row as JSON without its verdict (the verdict is pinned by `verdict_table`).
fn row_fields(row: &SweepRow) -> Value {
    let mut v = serde_json::to_value(row).unwrap();
    v.as_object_mut().unwrap().remove("verdict");
    v
}

/// Every field of the published prefill rows, a sustained C = 1 row and the host block, one by
/// one (docs/registry.md "Rows"): the rows are the evidence, so a field lost or filled from the
/// wrong source must fail here, not only the verdict. The cold row carries the server's own
/// counts, with exactly 0 cached prompt tokens: still accepted (only a cached count above 0 is
/// `cold-cache-hit`), with a hit rate of 0.
#[test]
fn published_rows_field_by_field() {
    let mut raw = results();
    let cold = &mut raw["prefill"]["4096"];
    cold["server_validation"] = json!({"cached_tokens": 0, "tok_per_sec": 9000.5});
    cold["hardware_summary"] = json!({"vram_used_max_mb": 10240.0});
    cold["prefill_seconds"] = json!(0.4503);
    cold["client_tok_per_sec"] = json!(9050.25);
    cold["cached_tokens_source"] = json!("usage");
    let dir = tempfile::tempdir().unwrap();
    let mut reg = Registry::load(dir.path()).unwrap();
    let out = publish(&mut reg, &raw, &opts("qwen3-0-6b-rtx4090-vllm")).unwrap();
    let reg = Registry::load(dir.path()).unwrap();
    assert!(validate::validate(&reg).is_empty());
    let s = reg.sweep(&out.sweep_id).unwrap();

    assert_eq!(s.rows[0].status, "accepted-cold-prefill");
    assert_eq!(
        row_fields(&s.rows[0]),
        json!({
            "status": "accepted-cold-prefill",
            "concurrency": 1,
            "context_tokens": 4098,
            "output_tokens": null,
            "prefill_tok_s": 9100.0,
            "decode_tok_s": null,
            "ttft_ms_p50": 450.0,
            "peak_vram_gb": 10.0,
            "samples": 1,
            "elapsed_s": 0.4503,
            "cache_hit_rate": 0.0,
            "device_cache_hit_tokens": 0,
            "layer": "prefill",
            "context_label_tokens": 4096,
            "cell_status": "ok",
            "prefill_method": "client",
            "client_prefill_tok_s": 9050.25,
            "server_prefill_tok_s": 9000.5,
            "cached_tokens_source": "usage",
        })
    );
    assert_eq!(
        row_fields(&s.rows[1]),
        json!({
            "status": "accepted-warm-prefix-prefill",
            "concurrency": 1,
            "context_tokens": 4098,
            "output_tokens": null,
            "prefill_tok_s": 200000.0,
            "decode_tok_s": null,
            "ttft_ms_p50": 20.0,
            "peak_vram_gb": null,
            "samples": 1,
            "elapsed_s": 0.02,
            "cache_hit_rate": 0.9995,
            "device_cache_hit_tokens": 4096,
            "prefill_compute_tokens": 2,
            "layer": "prefill_warm",
            "context_label_tokens": 4096,
            "cell_status": "ok",
            "prefill_method": "warm_prefix",
        })
    );
    // Sustained C = 1 at 100 tok/s over a 10 s window: 1,000 output tokens and one request of
    // 514 prompt tokens sent inside it (total 1,514 tokens in 10 s = 9,084 per minute), 512 of
    // them served from the cache (512 / 514 = 0.9961).
    assert_eq!(
        row_fields(&s.rows[2]),
        json!({
            "status": "accepted-warm-prefix-c1",
            "concurrency": 1,
            "context_tokens": 514,
            "output_tokens": 64,
            "prefill_tok_s": null,
            "decode_tok_s": 100.0,
            "ttft_ms_p50": 50.0,
            "peak_vram_gb": null,
            "samples": 1,
            "decode_tok_s_per_stream": 100.0,
            "elapsed_s": 10.0,
            "cache_hit_rate": 0.9961,
            "device_cache_hit_tokens": 512,
            "prefill_compute_tokens": 2,
            "output_tokens_per_minute": 6000.0,
            "total_api_tokens_per_minute": 9084.0,
            "layer": "sustained_decode",
            "context_label_tokens": 512,
            "cell_status": "ok",
            "capacity_limited": false,
            "underfilled": false,
            "benchmark_mode": "duration",
            "client_output_tokens": 1000,
            "client_max_tick_lag_ms": 2.0,
        })
    );
    let host = &s.source.as_ref().unwrap()["host"];
    assert_eq!(host["hostname"], "bench-1");
    assert_eq!(host["hardware_id"], "rtx-4090-24gb");
    assert_eq!(host["hardware_count"], 1);
    assert_eq!(host["gpu_name"], "NVIDIA GeForce RTX 4090");
}
