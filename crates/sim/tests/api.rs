//! HTTP surface: response shapes, validation, auth, /tokenize, fault injection.

mod common;

use common::*;
use serde_json::{json, Value};
use servebench_sim::SimConfig;

fn fast() -> SimConfig {
    SimConfig {
        decode_base_ms: 1.0,
        ..SimConfig::default()
    }
}

#[tokio::test]
async fn chat_stream_shape_with_continuous_usage() {
    let sim = sim(SimConfig {
        tokens_per_chunk: 3,
        ..fast()
    });
    let body = chat_body("Hello there, world!", 10, stream_opts(true));
    let s = stream(sim.addr(), "/v1/chat/completions", &body).await;
    assert_eq!(s.status, 200);
    assert!(s
        .content_type
        .as_deref()
        .is_some_and(|c| c.starts_with("text/event-stream")));
    assert_eq!(s.events.last().map(|e| e.1.as_str()), Some("[DONE]"));
    let ev = s.json();
    // role chunk + 4 token chunks (3,3,3,1) + usage chunk
    assert_eq!(ev.len(), 6, "{:?}", s.events);
    let id = ev[0].1["id"].as_str().expect("id").to_string();
    assert!(id.starts_with("chatcmpl-sim-"), "{id}");
    for (_, v) in &ev {
        assert_eq!(v["id"], id.as_str());
        assert_eq!(v["object"], "chat.completion.chunk");
        assert_eq!(v["model"], "servebench-sim");
        assert!(v["created"].as_u64().is_some());
    }
    let prompt = 5 + 5 + 3; // Hello there , world !  + template
    let role = &ev[0].1;
    assert_eq!(
        role["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(role["usage"]["completion_tokens"], 0);
    assert_eq!(role["usage"]["prompt_tokens"], prompt);
    let expect = [(3, 3), (3, 6), (3, 9), (1, 10)];
    for (i, (n, cum)) in expect.iter().enumerate() {
        let v = &ev[1 + i].1;
        assert_eq!(chunk_tokens(v), *n, "{v}");
        assert_eq!(v["usage"]["completion_tokens"], *cum);
        assert_eq!(v["usage"]["total_tokens"], prompt + cum);
        let fin = &v["choices"][0]["finish_reason"];
        if i == 3 {
            assert_eq!(fin, "length");
        } else {
            assert!(fin.is_null());
        }
    }
    assert_eq!(
        ev[1].1["choices"][0]["delta"]["content"],
        " lorem ipsum dolor"
    );
    let usage = &ev[5].1;
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["prompt_tokens"], prompt);
    assert_eq!(usage["usage"]["completion_tokens"], 10);
    assert_eq!(usage["usage"]["total_tokens"], prompt + 10);
    assert_eq!(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

#[tokio::test]
async fn raw_sse_framing_is_vllm_like() {
    let sim = sim(fast());
    let body = json!({"prompt": "x", "max_tokens": 2, "stream": true});
    let mut c = Conn::open(
        sim.addr(),
        "POST",
        "/v1/completions",
        &[],
        Some(&body.to_string()),
    )
    .await;
    let raw = String::from_utf8(c.read_to_end().await).expect("utf8");
    let parts: Vec<&str> = raw.split("\n\n").collect();
    assert_eq!(parts.len(), 4, "{raw:?}"); // 2 chunks, [DONE], trailing ""
    assert!(parts[0].starts_with("data: {\"id\":\"cmpl-sim-"));
    assert_eq!(parts[2], "data: [DONE]");
    assert_eq!(parts[3], "");
}

#[tokio::test]
async fn completions_stream_shape_final_usage_only() {
    let sim = sim(fast());
    let body = json!({
        "model": "servebench-sim", "prompt": "a b c", "max_tokens": 4, "stream": true,
        "stream_options": {"include_usage": true},
    });
    let s = stream(sim.addr(), "/v1/completions", &body).await;
    assert_eq!(s.status, 200);
    let ev = s.json();
    assert_eq!(ev.len(), 5);
    for (i, (_, v)) in ev[..4].iter().enumerate() {
        assert!(v["id"].as_str().is_some_and(|x| x.starts_with("cmpl-sim-")));
        assert_eq!(v["object"], "text_completion");
        assert_eq!(chunk_tokens(v), 1);
        assert!(v.get("usage").is_none(), "no continuous usage requested");
        assert_eq!(
            v["choices"][0]["finish_reason"],
            if i == 3 { json!("length") } else { Value::Null }
        );
    }
    assert_eq!(ev[0].1["choices"][0]["text"], " lorem");
    assert_eq!(ev[4].1["usage"]["prompt_tokens"], 3);
    assert_eq!(ev[4].1["usage"]["completion_tokens"], 4);
}

#[tokio::test]
async fn non_streaming_shapes() {
    let sim = sim(SimConfig {
        reasoning_tokens: 2,
        ..fast()
    });
    let r = post(
        sim.addr(),
        "/v1/chat/completions",
        &chat_body("hi", 5, json!({})),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    assert!(v["id"]
        .as_str()
        .is_some_and(|x| x.starts_with("chatcmpl-sim-")));
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(
        v["choices"][0]["message"]["reasoning_content"],
        " lorem ipsum"
    );
    assert_eq!(v["choices"][0]["message"]["content"], " dolor sit amet");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 5);
    assert_eq!(v["usage"]["prompt_tokens"], 5 + 1 + 3);
    assert_eq!(v["usage"]["total_tokens"], 14);
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

    let r = post(
        sim.addr(),
        "/v1/completions",
        &json!({"prompt": "one two", "max_completion_tokens": 3}),
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert!(v["id"].as_str().is_some_and(|x| x.starts_with("cmpl-sim-")));
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"], " lorem ipsum dolor");
    assert_eq!(v["usage"]["prompt_tokens"], 2);
    assert_eq!(v["usage"]["completion_tokens"], 3);

    // token-id prompt
    let r = post(
        sim.addr(),
        "/v1/completions",
        &json!({"prompt": [1, 2, 3, 4], "max_tokens": 1}),
    )
    .await;
    assert_eq!(r.json()["usage"]["prompt_tokens"], 4);
}

#[tokio::test]
async fn reasoning_then_content_in_stream() {
    let sim = sim(SimConfig {
        reasoning_tokens: 3,
        tokens_per_chunk: 2,
        role_chunk: false,
        ..fast()
    });
    let s = stream(
        sim.addr(),
        "/v1/chat/completions",
        &chat_body("q", 6, json!({"stream": true})),
    )
    .await;
    let ev = s.json();
    assert_eq!(ev.len(), 3, "no role chunk, no usage: {:?}", s.events);
    let d: Vec<&Value> = ev.iter().map(|(_, v)| &v["choices"][0]["delta"]).collect();
    assert_eq!(d[0], &json!({"reasoning_content": " lorem ipsum"}));
    assert_eq!(
        d[1],
        &json!({"reasoning_content": " dolor", "content": " sit"})
    );
    assert_eq!(d[2], &json!({"content": " amet consectetur"}));
}

#[tokio::test]
async fn eos_and_ignore_eos() {
    let sim = sim(SimConfig {
        eos_after: Some(4),
        ..fast()
    });
    let r = post(
        sim.addr(),
        "/v1/chat/completions",
        &chat_body("x", 10, json!({})),
    )
    .await;
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["completion_tokens"], 4);
    let r = post(
        sim.addr(),
        "/v1/chat/completions",
        &chat_body("x", 10, json!({"ignore_eos": true})),
    )
    .await;
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 10);
    let s = stream(
        sim.addr(),
        "/v1/chat/completions",
        &chat_body("x", 10, json!({"stream": true})),
    )
    .await;
    let ev = s.json();
    let last = &ev[ev.len() - 1].1;
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    let truth = sim.truth();
    assert_eq!(
        truth.last().and_then(|t| t.finish_reason.as_deref()),
        Some("stop")
    );
}

#[tokio::test]
async fn continuous_usage_can_be_disabled() {
    let sim = sim(SimConfig {
        continuous_usage: false,
        ..fast()
    });
    let s = stream(
        sim.addr(),
        "/v1/chat/completions",
        &chat_body("x", 3, stream_opts(true)),
    )
    .await;
    let ev = s.json();
    assert_eq!(ev.len(), 5); // role + 3 tokens + usage
    for (_, v) in &ev[..4] {
        assert!(v.get("usage").is_none(), "{v}");
    }
    assert_eq!(ev[4].1["usage"]["completion_tokens"], 3);
}

#[tokio::test]
async fn tokenize_matches_usage() {
    let sim = sim(fast());
    let messages = json!([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Count: 1, 2, 3!"}, {"type": "text", "text": " ok?"}]},
    ]);
    let t = post(
        sim.addr(),
        "/tokenize",
        &json!({"model": "servebench-sim", "messages": messages}),
    )
    .await;
    assert_eq!(t.status, 200);
    let tv = t.json();
    let count = tv["count"].as_u64().expect("count");
    assert_eq!(tv["max_model_len"], 32768);
    assert_eq!(tv["tokens"].as_array().map(Vec::len), Some(count as usize));
    let r = post(
        sim.addr(),
        "/v1/chat/completions",
        &json!({"messages": messages, "max_tokens": 1}),
    )
    .await;
    assert_eq!(r.json()["usage"]["prompt_tokens"], count);
    let s = stream(
        sim.addr(),
        "/v1/chat/completions",
        &json!({"messages": messages, "max_tokens": 1, "stream": true, "stream_options": {"include_usage": true}}),
    )
    .await;
    let ev = s.json();
    assert_eq!(ev[ev.len() - 1].1["usage"]["prompt_tokens"], count);

    let t = post(sim.addr(), "/tokenize", &json!({"prompt": "a, b"})).await;
    assert_eq!(t.json()["count"], 3);
    let r = post(
        sim.addr(),
        "/v1/completions",
        &json!({"prompt": "a, b", "max_tokens": 1}),
    )
    .await;
    assert_eq!(r.json()["usage"]["prompt_tokens"], 3);

    let t = post(
        sim.addr(),
        "/tokenize",
        &json!({"model": "nope", "prompt": "a"}),
    )
    .await;
    assert_eq!(t.status, 404);

    let off = common::sim(SimConfig {
        tokenize_endpoint: false,
        ..fast()
    });
    let t = post(off.addr(), "/tokenize", &json!({"prompt": "a"})).await;
    assert_eq!(t.status, 404);
}

#[tokio::test]
async fn validation_errors() {
    let sim = sim(SimConfig {
        max_model_len: 100,
        ..fast()
    });
    let r = post(
        sim.addr(),
        "/v1/chat/completions",
        &json!({"model": "x", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json(),
        json!({"object": "error", "message": "The model `x` does not exist.", "type": "NotFoundError", "param": null, "code": 404})
    );

    // prompt 9 tokens + 95 > 100
    let r = post(
        sim.addr(),
        "/v1/chat/completions",
        &chat_body("hi", 95, json!({})),
    )
    .await;
    assert_eq!(r.status, 400);
    let v = r.json();
    assert_eq!(v["type"], "BadRequestError");
    assert_eq!(v["code"], 400);
    let msg = v["message"].as_str().expect("message");
    assert!(
        msg.contains("maximum context length is 100 tokens"),
        "{msg}"
    );
    assert!(
        msg.contains("104 tokens (9 in the messages, 95 in the completion)"),
        "{msg}"
    );

    // exactly at the limit is fine; no max_tokens -> fills the context
    let r = post(
        sim.addr(),
        "/v1/chat/completions",
        &chat_body("hi", 91, json!({})),
    )
    .await;
    assert_eq!(r.status, 200);
    let r = post(sim.addr(), "/v1/completions", &json!({"prompt": "a b c d"})).await;
    assert_eq!(r.json()["usage"]["completion_tokens"], 96);
    let long = "w ".repeat(100);
    let r = post(sim.addr(), "/v1/completions", &json!({"prompt": long})).await;
    assert_eq!(r.status, 400);

    for bad in ["{not json", "", "[1,2]", "{\"messages\": 5}"] {
        let r = call(sim.addr(), "POST", "/v1/chat/completions", &[], Some(bad)).await;
        assert_eq!(r.status, 400, "{bad:?}");
        assert_eq!(r.json()["type"], "BadRequestError");
    }
    let r = post(
        sim.addr(),
        "/v1/chat/completions",
        &chat_body("hi", 0, json!({})),
    )
    .await;
    assert_eq!(r.status, 400);
    let r = post(sim.addr(), "/v1/completions", &json!({"max_tokens": 1})).await;
    assert_eq!(r.status, 400);
    let r = post(
        sim.addr(),
        "/v1/completions",
        &json!({"prompt": ["a", "b"]}),
    )
    .await;
    assert_eq!(r.status, 400);
    let r = get(sim.addr(), "/nope").await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn api_key_required_except_health() {
    let sim = sim(SimConfig {
        api_key: Some("secret".into()),
        ..fast()
    });
    let body = chat_body("hi", 1, json!({})).to_string();
    let r = call(sim.addr(), "POST", "/v1/chat/completions", &[], Some(&body)).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["message"], "Unauthorized");
    let r = call(
        sim.addr(),
        "POST",
        "/v1/chat/completions",
        &[("Authorization", "Bearer wrong")],
        Some(&body),
    )
    .await;
    assert_eq!(r.status, 401);
    let r = call(
        sim.addr(),
        "POST",
        "/v1/chat/completions",
        &[("Authorization", "Bearer secret")],
        Some(&body),
    )
    .await;
    assert_eq!(r.status, 200);
    for path in ["/v1/models", "/version"] {
        assert_eq!(get(sim.addr(), path).await.status, 401, "{path}");
    }
    let r = call(
        sim.addr(),
        "POST",
        "/tokenize",
        &[],
        Some("{\"prompt\":\"a\"}"),
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(get(sim.addr(), "/health").await.status, 200);
}

#[tokio::test]
async fn models_version_health() {
    let sim = sim(SimConfig {
        model: "my-model".into(),
        max_model_len: 4096,
        ..fast()
    });
    let v = get(sim.addr(), "/v1/models").await.json();
    assert_eq!(v["object"], "list");
    let m = &v["data"][0];
    assert_eq!(m["id"], "my-model");
    assert_eq!(m["object"], "model");
    assert_eq!(m["owned_by"], "servebench-sim");
    assert_eq!(m["root"], "my-model");
    assert_eq!(m["max_model_len"], 4096);
    assert!(m["created"].as_u64().is_some_and(|c| c > 1_600_000_000));
    let v = get(sim.addr(), "/version").await.json();
    assert_eq!(
        v["version"],
        format!("servebench-sim {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(get(sim.addr(), "/health").await.status, 200);
    assert!(sim.base_url().starts_with("http://127.0.0.1:"));
    assert_eq!(sim.config().model, "my-model");
}

#[tokio::test]
async fn http_fault_every_nth() {
    let sim = sim(SimConfig {
        fault_http_status: Some(429),
        fault_every: 2,
        ..fast()
    });
    let body = chat_body("hi", 1, json!({}));
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let r = post(sim.addr(), "/v1/chat/completions", &body).await;
        if r.status == 429 {
            assert_eq!(r.header("retry-after"), Some("1"));
            let v = r.json();
            assert_eq!(v["error"]["code"], 429);
            assert_eq!(v["error"]["type"], "RateLimitError");
            assert!(v["error"]["message"].as_str().is_some());
        }
        statuses.push(r.status);
    }
    assert_eq!(statuses, [200, 429, 200, 429]);
    assert_eq!(sim.stats().requests_faulted_total, 2);

    let sim = common::sim(SimConfig {
        fault_http_status: Some(503),
        fault_every: 1,
        ..fast()
    });
    let r = post(sim.addr(), "/v1/completions", &json!({"prompt": "a"})).await;
    assert_eq!(r.status, 503);
    assert!(r.header("retry-after").is_none());
}

#[tokio::test]
async fn midstream_fault() {
    let sim = sim(SimConfig {
        fault_midstream_every: 2,
        ..fast()
    });
    let body = chat_body("hi", 5, stream_opts(true));
    let ok = stream(sim.addr(), "/v1/chat/completions", &body).await;
    assert_eq!(ok.token_events().len(), 5);
    let bad = stream(sim.addr(), "/v1/chat/completions", &body).await;
    assert_eq!(bad.status, 200);
    let ev: Vec<&str> = bad.events.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(ev.len(), 4, "{ev:?}"); // role, token, error, [DONE]
    assert_eq!(bad.token_events().len(), 1);
    let err: Value = serde_json::from_str(ev[2]).expect("json");
    assert_eq!(
        err,
        json!({"error": {"message": "simulated failure", "type": "InternalServerError", "code": 500}})
    );
    assert_eq!(ev[3], "[DONE]");
    let truth = sim.truth();
    let t = truth.iter().find(|t| t.id == bad.id()).expect("truth");
    assert_eq!(t.finish_reason.as_deref(), Some("error"));
    assert_eq!(t.emissions.len(), 1);
    assert_eq!(sim.stats().requests_finished_error_total, 1);
}
