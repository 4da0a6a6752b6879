//! Secret filtering for everything servebench writes about the host, the client and the engine.
//!
//! Rule: a variable or flag whose **name** contains `KEY`, `TOKEN`, `SECRET`, `PASSWORD`, `AUTH`
//! or `CREDENTIAL` (case-insensitive; `-` counts as `_`) has its value replaced by
//! [`REDACTED`]. The name is kept, so a reader still sees that the variable was set. On top of
//! that, a [`Scrubber`] replaces every occurrence of a known secret value (the `--api-key`, the
//! values of secret-named variables of the client's environment) in any string, as a last
//! safety net for text that quotes them (a command line, an error message).

use serde_json::Value;

/// What a secret value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// Name fragments that mark a secret (upper case).
pub const SECRET_MARKERS: [&str; 6] = ["KEY", "TOKEN", "SECRET", "PASSWORD", "AUTH", "CREDENTIAL"];

/// Environment prefixes that matter for inference engines (recorded for the client and for the
/// engine process). `LD_LIBRARY_PATH` and `PATH`-like variables are not included.
pub const ENGINE_ENV_PREFIXES: [&str; 24] = [
    "NCCL_",
    "VLLM_",
    "SGLANG_",
    "CUDA_",
    "OMP_",
    "NVIDIA_",
    "HF_",
    "HUGGING_FACE_",
    "TRANSFORMERS_",
    "TORCH_",
    "PYTORCH_",
    "TORCHINDUCTOR_",
    "TRITON_",
    "FLASHINFER_",
    "LLAMA_",
    "GGML_",
    "OLLAMA_",
    "TGI_",
    "HIP_",
    "ROCM_",
    "HSA_",
    "MKL_",
    "TOKENIZERS_",
    "SERVEBENCH_",
];

/// True when `name` (a variable name or a flag such as `--api-key`) marks a secret.
///
/// `TOKENIZER…` and `…TOKENS` (counts, not credentials: `TOKENIZERS_PARALLELISM`,
/// `--max-num-batched-tokens`) do not count as `TOKEN`.
pub fn is_secret_name(name: &str) -> bool {
    let up = name
        .to_ascii_uppercase()
        .replace('-', "_")
        .replace("TOKENIZER", "")
        .replace("TOKENS", "");
    SECRET_MARKERS.iter().any(|m| up.contains(m))
}

/// True when `name` has one of the [`ENGINE_ENV_PREFIXES`].
pub fn is_engine_env(name: &str) -> bool {
    ENGINE_ENV_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The engine-related variables of `vars`, sorted by name, secret values redacted.
pub fn engine_env<I>(vars: I) -> serde_json::Map<String, Value>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut v: Vec<(String, String)> = vars.into_iter().filter(|(k, _)| is_engine_env(k)).collect();
    v.sort();
    v.into_iter()
        .map(|(k, val)| {
            let val = if is_secret_name(&k) {
                REDACTED.to_string()
            } else {
                val
            };
            (k, Value::String(val))
        })
        .collect()
}

/// A command line with secret values redacted: `--api-key X` → `--api-key <redacted>`,
/// `--hf-token=X` → `--hf-token=<redacted>`, `HF_TOKEN=X` (as in `env HF_TOKEN=X vllm …` or
/// `docker run -e HF_TOKEN=X`) → `HF_TOKEN=<redacted>`; also `Authorization: Bearer …` headers.
pub fn redact_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut redact_next = false;
    for a in args {
        if redact_next {
            redact_next = false;
            // `--disable-auth --port 8000`: a boolean flag, the next one is no secret.
            if !a.starts_with("--") {
                out.push(REDACTED.to_string());
                continue;
            }
        }
        if a.starts_with('-') {
            let flag = a.trim_start_matches('-');
            if let Some((name, _)) = flag.split_once('=') {
                if is_secret_name(name) {
                    let dashes = &a[..a.len() - flag.len()];
                    out.push(format!("{dashes}{name}={REDACTED}"));
                    continue;
                }
            } else if is_secret_name(flag) && !flag.is_empty() {
                out.push(a.clone());
                redact_next = true;
                continue;
            }
            out.push(a.clone());
            continue;
        }
        if let Some((name, _)) = a.split_once('=') {
            if !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
                && is_secret_name(name)
            {
                out.push(format!("{name}={REDACTED}"));
                continue;
            }
        }
        let lower = a.to_ascii_lowercase();
        if lower.starts_with("authorization:") || lower.starts_with("bearer ") {
            out.push(REDACTED.to_string());
            continue;
        }
        out.push(a.clone());
    }
    out
}

/// Replaces known secret values in strings. Values shorter than [`Scrubber::MIN_LEN`]
/// characters are ignored (replacing `1` everywhere would destroy the data, and such a value
/// is no secret).
#[derive(Clone, Debug, Default)]
pub struct Scrubber {
    secrets: Vec<String>,
}

impl Scrubber {
    /// Shortest value treated as a secret, characters.
    pub const MIN_LEN: usize = 6;

    /// A scrubber for the values of secret-named variables in `vars` plus `extra` (for example
    /// the `--api-key`).
    pub fn new<I>(vars: I, extra: impl IntoIterator<Item = String>) -> Self
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let mut s = Scrubber::default();
        for (k, v) in vars {
            if is_secret_name(&k) {
                s.add(v);
            }
        }
        for v in extra {
            s.add(v);
        }
        s
    }

    /// A scrubber for this process's environment plus `extra`.
    pub fn from_env(extra: impl IntoIterator<Item = String>) -> Self {
        Scrubber::new(std::env::vars(), extra)
    }

    /// Adds a secret value.
    pub fn add(&mut self, v: String) {
        let v = v.trim().to_string();
        if v.chars().count() >= Self::MIN_LEN && !self.secrets.contains(&v) {
            self.secrets.push(v);
            // Longest first, so a secret containing another is replaced whole.
            self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
    }

    /// Number of known secret values.
    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    /// No secret values known.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `s` with every known secret value replaced by [`REDACTED`].
    pub fn scrub_str(&self, s: &str) -> String {
        let mut out = s.to_string();
        for sec in &self.secrets {
            if out.contains(sec.as_str()) {
                out = out.replace(sec.as_str(), REDACTED);
            }
        }
        out
    }

    /// Scrubs every string (and object key) inside `v`, in place.
    pub fn scrub_value(&self, v: &mut Value) {
        if self.secrets.is_empty() {
            return;
        }
        match v {
            Value::String(s) if self.secrets.iter().any(|x| s.contains(x.as_str())) => {
                *s = self.scrub_str(s);
            }
            Value::Array(a) => a.iter_mut().for_each(|x| self.scrub_value(x)),
            Value::Object(m) => {
                let old = std::mem::take(m);
                for (k, mut x) in old {
                    self.scrub_value(&mut x);
                    m.insert(self.scrub_str(&k), x);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn names() {
        for n in [
            "HF_TOKEN",
            "OPENAI_API_KEY",
            "api-key",
            "DB_PASSWORD",
            "AWS_SECRET_ACCESS_KEY",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "authorization",
        ] {
            assert!(is_secret_name(n), "{n}");
        }
        for n in [
            "VLLM_USE_V1",
            "CUDA_VISIBLE_DEVICES",
            "NCCL_P2P_LEVEL",
            "model",
            "TOKENIZERS_PARALLELISM",
            "--max-num-batched-tokens",
        ] {
            assert!(!is_secret_name(n), "{n}");
        }
    }

    #[test]
    fn args_redacted() {
        let a = s(&[
            "vllm",
            "serve",
            "m",
            "--api-key",
            "sk-abc123",
            "--hf-token=hf_xyz",
            "--port",
            "8000",
            "HF_TOKEN=hf_q",
            "-H",
            "Authorization: Bearer sk-1",
            "--disable-auth",
            "--port",
            "1",
            "--no-api-key-check",
        ]);
        let r = redact_args(&a);
        assert_eq!(
            r,
            s(&[
                "vllm",
                "serve",
                "m",
                "--api-key",
                REDACTED,
                "--hf-token=<redacted>",
                "--port",
                "8000",
                "HF_TOKEN=<redacted>",
                "-H",
                REDACTED,
                "--disable-auth",
                "--port",
                "1",
                "--no-api-key-check",
                // the flag without a value at the end: nothing follows
            ])
        );
    }

    #[test]
    fn env_filtered() {
        let env = engine_env(vec![
            ("HF_TOKEN".into(), "hf_secret".into()),
            ("VLLM_USE_V1".into(), "1".into()),
            ("OPENAI_API_KEY".into(), "sk-x".into()),
            ("HOME".into(), "/root".into()),
        ]);
        assert_eq!(env.len(), 2);
        assert_eq!(env["HF_TOKEN"], REDACTED);
        assert_eq!(env["VLLM_USE_V1"], "1");
    }

    #[test]
    fn scrubber() {
        let sc = Scrubber::new(
            vec![
                ("MY_TOKEN".into(), "tok-123456".into()),
                ("SHORT_KEY".into(), "1".into()),
                ("PATH".into(), "/usr/bin".into()),
            ],
            vec!["sk-live-999".to_string()],
        );
        assert_eq!(sc.len(), 2);
        let mut v = serde_json::json!({"a": ["x tok-123456 y", 1], "sk-live-999": "sk-live-999", "p": "/usr/bin"});
        sc.scrub_value(&mut v);
        let t = v.to_string();
        assert!(
            !t.contains("tok-123456") && !t.contains("sk-live-999"),
            "{t}"
        );
        assert!(t.contains("/usr/bin"));
    }
}
