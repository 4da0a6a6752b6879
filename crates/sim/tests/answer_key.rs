//! `--answer-key FILE`: the simulator answers a task dataset's prompts with the item's answer in
//! the `--answer-accuracy` fraction of the requests, a wrong value otherwise, and leaves other
//! prompts as filler text.

mod common;

use common::*;
use serde_json::json;
use servebench_sim::SimConfig;

fn last_line(s: &str) -> &str {
    s.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

fn key_file(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let p = dir.path().join("items.jsonl");
    std::fs::write(
        &p,
        concat!(
            r#"{"id": "a", "prompt": "What is 17 + 25?", "answer": "42"}"#,
            "\n\n",
            r#"{"id": "b", "prompt": "  Is 91 prime?  ", "answer": "no"}"#,
            "\n",
            r#"{"id": "c", "prompt": "What is 2 x 3?", "answer": 6}"#,
            "\n",
        ),
    )
    .unwrap();
    p
}

async fn answer(sim: &servebench_sim::Sim, prompt: &str) -> String {
    let v = post(
        sim.addr(),
        "/v1/chat/completions",
        &chat_body(prompt, 20, json!({})),
    )
    .await
    .json();
    last_line(v["choices"][0]["message"]["content"].as_str().unwrap()).to_string()
}

#[tokio::test]
async fn dataset_prompts_get_their_answers_in_the_stated_fraction() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(&dir);
    let base = SimConfig {
        decode_base_ms: 0.2,
        eos_after: Some(10),
        answer_key: Some(key.clone()),
        ..SimConfig::default()
    };
    let all = sim(SimConfig {
        answer_accuracy: 1.0,
        ..base.clone()
    });
    assert_eq!(answer(&all, "What is 17 + 25?").await, "Final answer: 42");
    assert_eq!(answer(&all, "Is 91 prime?").await, "Final answer: no");
    assert_eq!(answer(&all, "What is 2 x 3?").await, "Final answer: 6");
    assert!(!answer(&all, "Something else")
        .await
        .contains("Final answer"));

    let none = sim(SimConfig {
        answer_accuracy: 0.0,
        ..base.clone()
    });
    assert_eq!(answer(&none, "What is 17 + 25?").await, "Final answer: 43");
    assert_eq!(answer(&none, "Is 91 prime?").await, "Final answer: unknown");

    let part = sim(SimConfig {
        answer_accuracy: 0.7,
        ..base
    });
    let mut right = 0;
    for _ in 0..20 {
        if answer(&part, "What is 17 + 25?").await == "Final answer: 42" {
            right += 1;
        }
    }
    assert_eq!(right, 14, "70 % of 20 consecutive requests");
}

#[test]
fn bad_answer_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"prompt\": \"x\"}\n").unwrap();
    for (path, words) in [
        (dir.path().join("missing.jsonl"), "cannot read"),
        (bad, "no line has both"),
    ] {
        let e = SimConfig {
            answer_key: Some(path),
            ..SimConfig::default()
        }
        .validate()
        .unwrap_err();
        assert!(format!("{e:#}").contains(words), "{e:#}");
    }
    let dir2 = tempfile::tempdir().unwrap();
    let e = SimConfig {
        answer_key: Some(key_file(&dir2)),
        answer: Some("1".into()),
        ..SimConfig::default()
    }
    .validate()
    .unwrap_err();
    assert!(e.to_string().contains("cannot be combined"));
}
