//! `--answer-key FILE`: the expected answers of a task dataset, so the simulator can answer its
//! prompts (a stated fraction correctly, the rest wrong) and `servebench task --dataset` has
//! something to score. The simulator does not solve anything: it looks the prompt up.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context as _;

/// Reads a JSONL dataset (`servebench task --dataset` format: one object per line with a string
/// `prompt` and an `answer` string or number; blank lines and lines without both are skipped) into
/// prompt (trimmed) → answer (trimmed).
///
/// Errors: the file cannot be read, a line is not JSON, an answer spans several lines, or no line
/// has both fields.
pub fn load(path: &Path) -> anyhow::Result<HashMap<String, String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--answer-key {}: cannot read it", path.display()))?;
    let mut key = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line).with_context(|| {
            format!(
                "--answer-key {}: line {} is not JSON",
                path.display(),
                i + 1
            )
        })?;
        let prompt = v.get("prompt").and_then(|p| p.as_str());
        let answer = match v.get("answer") {
            Some(serde_json::Value::String(s)) => Some(s.trim().to_string()),
            Some(serde_json::Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        if let (Some(p), Some(a)) = (prompt, answer) {
            anyhow::ensure!(
                !a.is_empty() && !a.contains(['\n', '\r']),
                "--answer-key {}: line {}: the answer must be one non-empty line",
                path.display(),
                i + 1
            );
            key.insert(p.trim().to_string(), a);
        }
    }
    anyhow::ensure!(
        !key.is_empty(),
        "--answer-key {}: no line has both a `prompt` and an `answer`",
        path.display()
    );
    Ok(key)
}
