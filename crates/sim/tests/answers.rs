//! Known answers, per-request stop lengths and reasoning phases: what the client receives matches
//! the truth the simulator records.

mod common;

use common::*;
use serde_json::{json, Value};
use servebench_sim::SimConfig;

fn cfg() -> SimConfig {
    SimConfig {
        decode_base_ms: 0.5,
        answer: Some("42".into()),
        answer_accuracy: 0.7,
        eos_after_min: Some(8),
        eos_after_max: Some(30),
        ..SimConfig::default()
    }
}

/// Last non-empty line of `s`, trimmed.
fn last_line(s: &str) -> &str {
    s.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

#[tokio::test]
async fn answers_and_stop_lengths_match_the_truth() {
    let sim = sim(cfg());
    let n = 20u64;
    let mut stated = Vec::new();
    for _ in 0..n {
        let v = post(
            sim.addr(),
            "/v1/chat/completions",
            &chat_body("What is 6 x 7?", 25, json!({})),
        )
        .await
        .json();
        let content = v["choices"][0]["message"]["content"].as_str().unwrap();
        let tokens = v["usage"]["completion_tokens"].as_u64().unwrap();
        let finish = v["choices"][0]["finish_reason"]
            .as_str()
            .unwrap()
            .to_string();
        stated.push((
            v["id"].as_str().unwrap().to_string(),
            content.to_string(),
            tokens,
            finish,
        ));
    }
    let truth = sim.truth();
    assert_eq!(truth.len(), n as usize);
    let mut correct = 0;
    let mut lengths = std::collections::BTreeSet::new();
    for (t, (id, content, tokens, finish)) in truth.iter().zip(&stated) {
        assert_eq!(&t.id, id);
        let eos = t.eos_after.expect("drawn stop length");
        assert!((8..=30).contains(&eos), "{eos}");
        lengths.insert(eos);
        assert_eq!(*tokens, t.tokens());
        assert_eq!(*tokens, eos.min(25));
        if eos < 25 {
            assert_eq!(finish, "stop");
            let line = last_line(content);
            let value = t.answer.as_deref().expect("answer stated");
            assert_eq!(line, format!("Final answer: {value}"));
            assert_eq!(t.answer_correct, Some(value == "42"));
            assert!(value == "42" || value == "43", "{value}");
        } else {
            assert_eq!(finish, "length");
            // Cut at max_tokens before the natural end (exactly at it: the line is there).
            if eos > 25 {
                assert_eq!(t.answer, None);
                assert_eq!(t.answer_correct, Some(false));
                assert!(
                    !last_line(content).starts_with("Final answer: "),
                    "{content:?}"
                );
            }
        }
        if t.answer_correct == Some(true) {
            correct += 1;
        }
    }
    assert!(lengths.len() > 5, "stop lengths vary: {lengths:?}");
    // Correctness is deterministic per request number: exactly ⌈n·P⌉ of n state "42" (before
    // truncation); every truncated request is wrong in the truth.
    let planned: u64 = (1..=n)
        .filter(|&s| sim.config().answer_correct_for(s))
        .count() as u64;
    assert_eq!(planned, 14);
    let truncated_planned_correct = truth
        .iter()
        .zip(1..=n)
        .filter(|(t, s)| t.answer.is_none() && sim.config().answer_correct_for(*s))
        .count();
    assert_eq!(correct, planned as usize - truncated_planned_correct);
}

/// Concatenated reasoning and content text of a stream.
fn stream_text(events: &[(std::time::Instant, Value)]) -> (String, String) {
    let (mut r, mut c) = (String::new(), String::new());
    for (_, v) in events {
        let d = &v["choices"][0]["delta"];
        if let Some(s) = d["reasoning_content"].as_str() {
            r.push_str(s);
        }
        if let Some(s) = d["content"].as_str() {
            c.push_str(s);
        }
    }
    (r, c)
}

#[tokio::test]
async fn reasoning_states_the_answer_but_only_the_content_line_counts() {
    let sim = sim(SimConfig {
        reasoning_tokens: 6,
        answer_accuracy: 0.0,
        ..cfg()
    });
    let s = stream(
        sim.addr(),
        "/v1/chat/completions",
        &chat_body("q", 100, json!({"stream": true})),
    )
    .await;
    let (reasoning, content) = stream_text(&s.json());
    assert!(
        reasoning.ends_with("\nSo the answer is 42."),
        "{reasoning:?}"
    );
    assert_eq!(last_line(&content), "Final answer: 43");
    let t = &sim.truth()[0];
    assert_eq!(t.answer.as_deref(), Some("43"));
    assert_eq!(t.answer_correct, Some(false));
    assert_eq!(t.finish_reason.as_deref(), Some("stop"));

    // Inline reasoning: the same text inside <think>…</think> in the content.
    let sim = sim_inline();
    let s = stream(
        sim.addr(),
        "/v1/chat/completions",
        &chat_body("q", 100, json!({"stream": true})),
    )
    .await;
    let (reasoning, content) = stream_text(&s.json());
    assert_eq!(reasoning, "");
    assert!(content.starts_with("<think>"), "{content:?}");
    assert!(
        content.contains("\nSo the answer is 42.</think>"),
        "{content:?}"
    );
    assert_eq!(last_line(&content), "Final answer: 42");
    assert_eq!(sim.truth()[0].answer_correct, Some(true));
}

fn sim_inline() -> servebench_sim::Sim {
    sim(SimConfig {
        reasoning_tokens: 6,
        reasoning_inline: true,
        ..cfg()
    })
}

#[tokio::test]
async fn ignore_eos_puts_the_answer_at_max_tokens() {
    let sim = sim(cfg());
    let v = post(
        sim.addr(),
        "/v1/chat/completions",
        &chat_body("q", 12, json!({"ignore_eos": true})),
    )
    .await
    .json();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 12);
    assert_eq!(
        last_line(v["choices"][0]["message"]["content"].as_str().unwrap()),
        "Final answer: 42"
    );
    let t = &sim.truth()[0];
    assert_eq!(t.eos_after, None);
    assert_eq!(t.answer_correct, Some(true));
}
