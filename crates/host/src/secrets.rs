//! Secret filtering for everything servebench writes about the host, the client and the engine.
//!
//! Rules ([`redact_args`], [`redact_text`], [`redact_json`]):
//! * a variable or flag whose **name** contains one of [`SECRET_MARKERS`] (`KEY`, `TOKEN`,
//!   `SECRET`, `PASSWORD`, `PASSWD`, `PASSPHRASE`, `AUTH`, `CREDENTIAL`, `BEARER`, `COOKIE`,
//!   `JWT`, `SIGNATURE`, …) or one of the whole words [`SECRET_WORDS`] (`PASS`, `PW`, `PWD`,
//!   `OTP`, `SIG`, `SESSION`, …);
//!   case-insensitive, `-` counts as `_`, camel case as written: `--api-key X`, `--api-key=X`,
//!   `--api_key`, `--apiKey`, `HF_TOKEN=X`) has its value replaced by [`REDACTED`]; so do the
//!   short flags [`SECRET_SHORT_FLAGS`] (`-k X`), and `-p X` unless `X` is a port
//!   ([`PORT_OR_SECRET_SHORT_FLAGS`]);
//! * URL credentials `scheme://user:pass@host` become `scheme://<redacted>@host`, and URL query
//!   parameters with a secret name (`?token=X`) lose their value;
//! * `Authorization: …` headers and `Bearer …` values are replaced whole;
//! * a word shaped like a service's access token ([`TOKEN_PREFIXES`]: `ghp_…`, `hf_…`, `sk-…`)
//!   is replaced wherever it stands;
//! * an argument that holds a whole command (`sh -c "vllm serve --api-key X"`) is redacted
//!   word by word by the same rules; environment values are redacted as text (a URL with
//!   credentials in `HF_ENDPOINT`).
//!
//! The name is kept, so a reader still sees that the secret was set. On top of that, a
//! [`Scrubber`] replaces every occurrence of a known secret value (the `--api-key`, the values
//! of secret-named variables of the client's environment) in any string, as a last safety net
//! for text that quotes them (a command line, an error message).

use serde_json::Value;

/// What a secret value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// Name fragments that mark a secret (upper case), anywhere in the name.
pub const SECRET_MARKERS: [&str; 14] = [
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "AUTH",
    "CREDENTIAL",
    "BEARER",
    "COOKIE",
    "HMAC",
    "LICENSE",
    "JWT",
    "SIGNATURE",
];

/// Name words that mark a secret only as a whole `_`-separated word (`--pass`, `DB_PASS`,
/// `--admin-pw`, `--mysql-pwd`, `--otp`, `--sig`, `--session-id`, `--cred`, `--tok`, `--sk`,
/// `--github-pat` (a personal access token), `--sas` (an Azure shared access signature);
/// not `PASSTHROUGH`, `BYPASS`, `SIGMA`, `SKIP`, `PATH`, `SASL`). The variable `PWD` itself (the working
/// directory) and `OLDPWD` are not secrets.
pub const SECRET_WORDS: [&str; 12] = [
    "PASS", "PW", "PWD", "OTP", "SIG", "SESSION", "CRED", "CREDS", "TOK", "SK", "PAT", "SAS",
];

/// Short flags whose value is a secret (`-k` is the API key of several servers and clients).
pub const SECRET_SHORT_FLAGS: [&str; 1] = ["-k"];

/// Short flags whose value is a secret unless it is shaped like a port (`-p 8000`,
/// `-p 8000:8000`, `-p 127.0.0.1:8000:8000/tcp`): `-p` is the password of MySQL-style clients
/// and several tools, and the port of many servers and of `docker run`.
pub const PORT_OR_SECRET_SHORT_FLAGS: [&str; 1] = ["-p"];

/// True when `v` (shell quotes aside) is a port or a port mapping: digits, `.`, `:`, `[`, `]`
/// and an optional `/tcp`, `/udp` or `/sctp` (an IPv6 address with letters counts as a secret:
/// redacting a port costs less than keeping a password).
fn port_like(v: &str) -> bool {
    let v = v.trim_matches(['\'', '"']);
    let v = ["/tcp", "/udp", "/sctp"]
        .iter()
        .find_map(|p| v.strip_suffix(p))
        .unwrap_or(v);
    v.chars().any(|c| c.is_ascii_digit())
        && v.chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | ':' | '[' | ']'))
}

/// True when `a` (shell quotes aside) is one of [`PORT_OR_SECRET_SHORT_FLAGS`].
fn is_port_or_secret_flag(a: &str) -> bool {
    PORT_OR_SECRET_SHORT_FLAGS.contains(&a.trim_start_matches(['\'', '"']))
}

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
    if up == "PWD" || up == "OLDPWD" {
        return false;
    }
    SECRET_MARKERS.iter().any(|m| up.contains(m))
        || up
            .trim_start_matches('_')
            .split('_')
            .any(|w| SECRET_WORDS.contains(&w))
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
                redact_text(&val)
            };
            (k, Value::String(val))
        })
        .collect()
}

/// A URL query parameter that carries a secret: a secret name ([`is_secret_name`]) or a
/// signature of a signed URL (`sig`, `signature`, `X-Amz-Signature`, `X-Goog-Signature`).
fn is_secret_query_name(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    is_secret_name(&k) || k == "sig" || k.ends_with("signature")
}

/// `path?query` with the values of secret query parameters ([`is_secret_query_name`]) redacted;
/// text without `?` is returned as it is.
fn redact_query(url_rest: &str) -> String {
    // the query and the fragment (`#access_token=X`, OAuth's implicit flow) alike
    let Some(start) = url_rest.find(['?', '#']) else {
        return url_rest.to_string();
    };
    let mut out = String::with_capacity(url_rest.len());
    out.push_str(&url_rest[..start]);
    let mut rest = &url_rest[start..];
    while let Some(sep) = rest.chars().next() {
        out.push(sep);
        rest = &rest[1..];
        let end = rest.find(['&', '?', '#']).unwrap_or(rest.len());
        let kv = &rest[..end];
        match kv.split_once('=') {
            Some((k, _)) if is_secret_query_name(k) => {
                out.push_str(k);
                out.push('=');
                out.push_str(REDACTED);
            }
            _ => out.push_str(kv),
        }
        rest = &rest[end..];
    }
    out
}

/// `user:password@host` without a scheme (`--proxy u:X@proxy:8080`, `all_proxy=u:X@h`): the
/// password is redacted. Not a Docker image reference (`name:tag@sha256:…`).
fn redact_bare_userinfo(w: &str) -> Option<String> {
    if w.contains("://") {
        return None;
    }
    let at = w.rfind('@')?;
    if w[at + 1..].starts_with("sha256:") || at + 1 == w.len() {
        return None;
    }
    let colon = w[..at].find(':')?;
    let user = &w[..colon];
    let pass = &w[colon + 1..at];
    if user.is_empty() || pass.is_empty() || user.contains(['/', '@', '=']) || pass.contains('/') {
        return None;
    }
    Some(format!("{user}:{REDACTED}{}", &w[at..]))
}

/// `s` with URL credentials (`scheme://user:pass@host` → `scheme://<redacted>@host`) and the
/// values of secret-named URL query parameters (`?api_key=X` → `?api_key=<redacted>`) redacted,
/// in URLs and in words without a scheme (`/m?sig=X`, `?token=X`).
pub fn redact_urls(s: &str) -> String {
    if !s.contains("://") {
        if !s.contains(['?', '#']) {
            return s.to_string();
        }
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while !rest.is_empty() {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            out.push_str(&redact_query(&rest[..end]));
            let next = rest[end..]
                .find(|c: char| !c.is_whitespace())
                .map_or(rest.len(), |i| end + i);
            out.push_str(&rest[end..next]);
            rest = &rest[next..];
        }
        return out;
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The authority ends at the first `/`, `?`, `#` or white space.
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        let after = &tail[end..];
        // The rest of this URL (up to white space): redact secret query parameters.
        let url_end = after.find(char::is_whitespace).unwrap_or(after.len());
        let (url_rest, next) = after.split_at(url_end);
        out.push_str(&redact_query(url_rest));
        rest = next;
    }
    out.push_str(rest);
    out
}

/// True when `a` looks like a flag (the next word is then not the value of a secret flag):
/// `--name…`, or a short option of one to three letters (`-v`, `-tp`). Anything else that starts
/// with `-` is a value (`--api-key -Xk93…`: a key may start with a dash).
fn is_flag(a: &str) -> bool {
    if let Some(long) = a.strip_prefix("--") {
        return long.starts_with(|c: char| c.is_ascii_alphabetic());
    }
    a.strip_prefix('-').is_some_and(|short| {
        (1..=3).contains(&short.len()) && short.chars().all(|c| c.is_ascii_alphabetic())
    })
}

/// `Name:value` or `Name:` (a header written as one word, `X-Api-Key:X`, or its name alone
/// before the value) when `Name` is a secret name: `Some(value)`.
fn secret_header(a: &str) -> Option<&str> {
    let (name, value) = a.split_once(':')?;
    let name = name
        .trim_start_matches(['\'', '"', '{', ','])
        .trim_end_matches(['\'', '"']);
    (!name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !value.starts_with("//")
        && is_secret_name(name))
    .then_some(value)
}

/// curl's (and others') user flags, whose value is `user:password`: `-u`, `--user`, `-U`,
/// `--proxy-user`.
fn is_user_flag(a: &str) -> bool {
    matches!(
        a.trim_start_matches(['\'', '"']),
        "-u" | "--user" | "-U" | "--proxy-user"
    )
}

/// `--user=admin:X`, `--proxy-user=admin:X`, `-uadmin:X`, `-Uadmin:X`: the password goes.
fn redact_glued_user(a: &str) -> Option<String> {
    let (flag, value) = ["--user=", "--proxy-user=", "-u", "-U"]
        .iter()
        .find_map(|f| a.strip_prefix(f).map(|v| (*f, v)))?;
    if value.is_empty() || value.contains("://") || flag.len() == 2 && a.starts_with("--") {
        return None;
    }
    let (name, pass) = value.split_once(':')?;
    (!pass.is_empty()).then(|| format!("{flag}{name}:{}", redacted_value(pass)))
}

/// A command line with secret values redacted (rules in the module docs): `--api-key X` →
/// `--api-key <redacted>`, `--hf-token=X` → `--hf-token=<redacted>`, `-k X`, `HF_TOKEN=X` (as in
/// `env HF_TOKEN=X vllm …` or `docker run -e HF_TOKEN=X`) → `HF_TOKEN=<redacted>`,
/// `Authorization: Bearer …` headers, URL credentials, and every word of an argument that holds
/// a whole command line.
pub fn redact_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut redact_next = false;
    let mut after_user = false;
    let mut after_p = false;
    for a in args {
        // `-p X`: X goes unless it is a port
        if std::mem::replace(&mut after_p, is_port_or_secret_flag(a))
            && !is_flag(a)
            && !port_like(a)
        {
            out.push(redacted_value(a));
            continue;
        }
        // curl's `-u user:password` (`--user` too): the password goes, the user stays
        let user = std::mem::replace(&mut after_user, is_user_flag(a));
        if user && !a.contains("://") {
            if let Some((name, _)) = a.split_once(':') {
                out.push(format!("{name}:{}", redacted_value(&a[name.len() + 1..])));
                continue;
            }
        }
        if redact_next {
            redact_next = false;
            // `--disable-auth --port 8000`: a boolean flag, the next one is no secret.
            if !is_flag(a) {
                out.push(REDACTED.to_string());
                continue;
            }
        }
        let (word, next) = redact_word(a);
        redact_next = next;
        out.push(word);
    }
    out
}

/// Long flags whose abbreviations count as secret flags: Python's argparse accepts any unique
/// prefix of a long option (`--api` for `--api-key`), and engines are mostly argparse programs.
const ABBREVIATED_SECRET_FLAGS: [&str; 6] = [
    "api-key",
    "api-keys",
    "hf-token",
    "auth-token",
    "access-token",
    "admin-key",
];

/// True when the long flag `name` (dashes stripped) is a secret flag, written out or as an
/// argparse abbreviation of at least three characters of one of [`ABBREVIATED_SECRET_FLAGS`].
fn is_secret_flag(name: &str) -> bool {
    if name.is_empty() {
        return false;
    }
    if is_secret_name(name) {
        return true;
    }
    let n = name.to_ascii_lowercase().replace('_', "-");
    n.len() >= 3 && ABBREVIATED_SECRET_FLAGS.iter().any(|f| f.starts_with(&n))
}

/// A JSON object or array (`--headers '{"X-Api-Key": "X"}'`, an environment value) with the
/// values of secret-named keys redacted ([`redact_json`]); `None` when `a` is not JSON.
fn redact_json_text(a: &str) -> Option<String> {
    let t = a.trim();
    if !(t.starts_with('{') || t.starts_with('[')) {
        return None;
    }
    let mut v: Value = serde_json::from_str(t).ok()?;
    redact_json(&mut v);
    Some(v.to_string())
}

/// [`REDACTED`] in place of the secret value `v`, keeping the shell quotes around it (and a
/// closing `;`, `,`, `)` or `}`), so a redacted `sh -c '… --api-key X'` still closes its quote
/// and `{'api_key': 'X', …}` its literal.
fn redacted_value(v: &str) -> String {
    let body = v.trim_start_matches(['\'', '"']);
    let lead = &v[..v.len() - body.len()];
    let inner = body.trim_end_matches(['\'', '"', ';', ',', ')', '}']);
    let trail = &body[inner.len()..];
    format!("{lead}{REDACTED}{trail}")
}

/// Prefixes of the access tokens of well-known services (GitHub `ghp_` / `gho_` / `ghu_` /
/// `ghs_` / `ghr_` / `github_pat_`, Hugging Face `hf_`, OpenAI-style `sk-`, GitLab `glpat-`,
/// Slack `xox?-`, AWS access key ids `AKIA`): a word that starts with one and goes on with
/// [`TOKEN_MIN_TAIL`] or more token characters is a secret wherever it stands, even with no flag
/// before it (`vllm serve M ghp_…` as a stray positional, `-e hf_…`).
pub const TOKEN_PREFIXES: [&str; 13] = [
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "hf_",
    "sk-",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "AKIA",
];

/// Token characters a [`TOKEN_PREFIXES`] word needs after its prefix (real tokens have 20 to
/// 90; model names such as `hf_model` have fewer, or punctuation).
pub const TOKEN_MIN_TAIL: usize = 16;

/// True when `w` (quotes and a trailing `;` or `,` aside) is shaped like a service's access
/// token ([`TOKEN_PREFIXES`]).
fn looks_like_token(w: &str) -> bool {
    let w = w
        .trim_start_matches(['\'', '"'])
        .trim_end_matches(['\'', '"', ';', ',']);
    TOKEN_PREFIXES.iter().any(|p| {
        w.strip_prefix(p).is_some_and(|tail| {
            tail.len() >= TOKEN_MIN_TAIL
                && tail
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
    })
}

/// Quoted secret-named keys in code (`python -c`, `node -e`, a config snippet) lose their
/// value: `os.environ['HF_TOKEN']='X'`, `env["API_KEY"] = "X"`, `os.putenv('HF_TOKEN', 'X')`,
/// `{'api_key': 'X'}` (not JSON). After a quoted [`is_secret_name`] literal come at most `]`
/// and spaces, one of `=` `:` `,` (`==` too), spaces, then the value: a quoted literal, or a
/// bare word up to white space or `;` `)` `,` `}`. `None` when nothing was redacted.
fn redact_quoted_keys(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let (mut out, mut last, mut i) = (String::new(), 0, 0);
    while i < b.len() {
        let q = b[i];
        if q != b'\'' && q != b'"' {
            i += 1;
            continue;
        }
        let Some(len) = s[i + 1..].find(q as char) else {
            break;
        };
        let name = &s[i + 1..i + 1 + len];
        let after = i + len + 2;
        i = after;
        let plain = (1..=64).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !plain || !is_secret_name(name) {
            continue;
        }
        let mut j = after;
        while j < b.len() && matches!(b[j], b']' | b' ' | b'\t') {
            j += 1;
        }
        if j >= b.len() || !matches!(b[j], b'=' | b':' | b',') {
            continue;
        }
        j += 1;
        while j < b.len() && matches!(b[j], b'=' | b' ' | b'\t') {
            j += 1;
        }
        let (from, to) = match b.get(j) {
            Some(&vq) if vq == b'\'' || vq == b'"' => match s[j + 1..].find(vq as char) {
                Some(vlen) => (j + 1, j + 1 + vlen),
                None => continue,
            },
            _ => {
                let end = s[j..]
                    .find(|c: char| c.is_whitespace() || matches!(c, ';' | ')' | ',' | '}'))
                    .map_or(s.len(), |k| j + k);
                (j, end)
            }
        };
        if to > from {
            out.push_str(&s[last..from]);
            out.push_str(REDACTED);
            last = to;
            i = to;
        }
    }
    (last > 0).then(|| {
        out.push_str(&s[last..]);
        out
    })
}

/// One word of a command line, redacted; `true` when the next word is a secret value.
fn redact_word(a: &str) -> (String, bool) {
    if let Some(r) = redact_quoted_keys(a) {
        // the rest of the word by the other rules (a token-shaped word, a URL)
        let (w, next) = redact_word_rules(&r);
        return (w, next);
    }
    redact_word_rules(a)
}

/// [`redact_word`] without the quoted-key rule.
fn redact_word_rules(a: &str) -> (String, bool) {
    // `—api-key X` / `–token X`: a flag typed with an em or en dash (docs pasted into a shell)
    // is judged as `--api-key`, and written back with its own dash.
    if let Some(dash) = ['\u{2014}', '\u{2013}', '\u{2212}']
        .into_iter()
        .find(|d| a.starts_with(*d))
    {
        let norm = format!("--{}", &a[dash.len_utf8()..]);
        let (w, next) = redact_word_rules(&norm);
        let w = match w.strip_prefix("--") {
            Some(rest) => format!("{dash}{rest}"),
            None => w,
        };
        return (w, next);
    }
    if looks_like_token(a) {
        return (redacted_value(a), false);
    }
    if let Some(r) = redact_glued_user(a) {
        return (r, false);
    }
    // `a=1,api_key=X` (a comma-separated list of settings): each item by the same rules
    if a.contains(',')
        && a.contains('=')
        && !a.contains(char::is_whitespace)
        && !a.contains(['{', '[', '"'])
    {
        let items: Vec<String> = a.split(',').map(|i| redact_word(i).0).collect();
        let joined = items.join(",");
        if joined != a {
            return (joined, false);
        }
    }
    if SECRET_SHORT_FLAGS.contains(&a) {
        return (a.to_string(), true);
    }
    // `-kX`: a secret short flag glued to its value.
    if let Some(f) = SECRET_SHORT_FLAGS.iter().find(|f| a.starts_with(**f)) {
        if !a.starts_with("--") {
            return (format!("{f}{REDACTED}"), false);
        }
    }
    // `-pX` (MySQL's password form) and `-p=X`, unless X is a port; `-pp 2` (a flag) stays.
    if let Some(f) = PORT_OR_SECRET_SHORT_FLAGS
        .iter()
        .find(|f| a.starts_with(**f) && a.len() > f.len())
    {
        let v = a[f.len()..].strip_prefix('=').unwrap_or(&a[f.len()..]);
        let sep = if a[f.len()..].starts_with('=') {
            "="
        } else {
            ""
        };
        if !a.starts_with("--") && !is_flag(a) && !port_like(v) {
            return (format!("{f}{sep}{}", redacted_value(v)), false);
        }
    }
    // `A=1;AccountKey=X;B=2` (a connection string), `user=a&password=X` (a form or query
    // without its `?`): each item by the same rules
    for sep in [';', '&'] {
        if a.contains(sep)
            && a.contains('=')
            && !a.contains(char::is_whitespace)
            && !a.contains(['{', '['])
            && !a.contains("://")
        {
            let items: Vec<String> = a.split(sep).map(|i| redact_word(i).0).collect();
            let joined = items.join(&sep.to_string());
            if joined != a {
                return (joined, false);
            }
        }
    }
    if let Some(j) = redact_json_text(a) {
        return (j, false);
    }
    if a.starts_with('-') {
        let flag = a.trim_start_matches('-');
        let dashes = &a[..a.len() - flag.len()];
        // `--name=value`, or `--name:value`.
        let split = flag
            .split_once('=')
            .or_else(|| flag.split_once(':').filter(|(_, v)| !v.starts_with("//")))
            .filter(|(name, _)| !name.contains(char::is_whitespace));
        if let Some((name, value)) = split {
            let sep = &flag[name.len()..name.len() + 1];
            if is_secret_flag(name) {
                // `--api-key= X` (a space after the `=`): the value may be the next word.
                let empty = value.trim_matches(['\'', '"']).is_empty();
                return (
                    format!("{dashes}{name}{sep}{}", redacted_value(value)),
                    empty,
                );
            }
            // `--env=HF_TOKEN=X`, `--headers={"X-Api-Key": "X"}`: the value by the same rules.
            let (v, _) = redact_word(value);
            return (format!("{dashes}{name}{sep}{v}"), false);
        }
        if a.contains(char::is_whitespace) {
            // `'--api-key  X'` in one argument: word by word, so the value is found however
            // many spaces stand before it.
            return (redact_text(a), false);
        }
        if is_secret_flag(flag) {
            return (a.to_string(), true);
        }
        return (redact_urls(a), false);
    }
    if let Some((name, value)) = a.split_once('=') {
        let bare = name.trim_start_matches(['\'', '"']);
        if !bare.is_empty()
            && bare
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
        {
            if is_secret_name(bare) {
                return (format!("{name}={}", redacted_value(value)), false);
            }
            // `ARGS="HF_TOKEN=X"`, `url=/m?sig=X`: the value by the same rules.
            let (v, _) = redact_word(value);
            return (format!("{name}={v}"), false);
        }
    }
    let lower = a.trim_start().to_ascii_lowercase();
    let bare = lower.trim_start_matches(['\'', '"']);
    // `Authorization:`, `Authorization:Bearer`, `Cookie:` as one word: the credential is the
    // next word (break-it round 8: `-H Authorization:Bearer X` kept X)
    for h in ["authorization:", "proxy-authorization:", "cookie:"] {
        if let Some(rest) = bare.strip_prefix(h) {
            if matches!(rest, "" | "bearer" | "basic" | "digest" | "token") {
                return (a.to_string(), true);
            }
        }
    }
    if lower.starts_with("authorization:")
        || lower.starts_with("bearer ")
        || lower.starts_with("proxy-authorization:")
        || lower.starts_with("cookie:")
    {
        return (REDACTED.to_string(), false);
    }
    if a.contains(char::is_whitespace) {
        return (redact_text(a), false);
    }
    // `X-Api-Key:X` (the value of `--header` / `-H`), `x-api-key:` before its value, and
    // `"X-Api-Key":"X"` (a JSON fragment that did not parse as a whole).
    if let Some(value) = secret_header(a) {
        let name = &a[..a.len() - value.len()];
        return if value.trim_matches(['"', '\'', '}', ',']).is_empty() {
            (name.to_string(), true)
        } else {
            (format!("{name}{REDACTED}"), false)
        };
    }
    if let Some(r) = redact_bare_userinfo(a) {
        return (r, false);
    }
    (redact_urls(a), false)
}

/// Free text (a shell command, an environment value) with the [`redact_args`] rules applied
/// word by word (words separated by white space, which is kept as it was); `Bearer X`,
/// `Authorization: Basic X`, `X-Api-Key: X` anywhere lose `X`.
pub fn redact_text(s: &str) -> String {
    if let Some(j) = redact_json_text(s) {
        return j;
    }
    // `os.environ['HF_TOKEN'] = 'X'`: the key and its value may stand words apart
    let quoted = redact_quoted_keys(s);
    let s = quoted.as_deref().unwrap_or(s);
    // Words and the white space before each one, so the text is rebuilt as it was.
    let mut pieces: Vec<(&str, &str)> = Vec::new();
    let mut rest = s;
    loop {
        let word_at = rest
            .find(|c: char| !c.is_whitespace())
            .unwrap_or(rest.len());
        let (sep, tail) = rest.split_at(word_at);
        if tail.is_empty() {
            pieces.push((sep, ""));
            break;
        }
        let end = tail.find(char::is_whitespace).unwrap_or(tail.len());
        pieces.push((sep, &tail[..end]));
        rest = &tail[end..];
    }
    let mut out = String::with_capacity(s.len());
    let mut redact_next = false;
    let mut after_user = false;
    let mut after_p = false;
    for (sep, w) in pieces {
        out.push_str(sep);
        if w.is_empty() {
            continue;
        }
        // `-p X` inside a command string: X goes unless it is a port
        if std::mem::replace(&mut after_p, is_port_or_secret_flag(w))
            && !is_flag(w)
            && !port_like(w)
        {
            out.push_str(&redacted_value(w));
            continue;
        }
        // curl's `-u user:password` inside a command string
        let bare = w.trim_start_matches(['\'', '"']);
        let user = std::mem::replace(&mut after_user, is_user_flag(bare));
        if user && !w.contains("://") {
            if let Some((name, value)) = w.split_once(':') {
                out.push_str(&format!("{name}:{}", redacted_value(value)));
                continue;
            }
        }
        let lower = w.to_ascii_lowercase();
        let scheme_word = matches!(
            lower.trim_start_matches(['\'', '"']),
            "bearer" | "basic" | "digest" | "token"
        );
        // `Authorization: Bearer X`: the scheme after the header name is kept, the credential
        // after it is the secret.
        if redact_next && !is_flag(w) && !scheme_word {
            redact_next = false;
            out.push_str(&redacted_value(w));
            continue;
        }
        // `Authorization: Bearer X`, `-H 'Authorization: Basic X'`: the credential follows.
        if scheme_word
            || matches!(
                lower.trim_start_matches(['\'', '"']),
                "authorization:" | "proxy-authorization:"
            )
        {
            out.push_str(w);
            redact_next = true;
            continue;
        }
        let (word, next) = redact_word(w);
        redact_next = next;
        out.push_str(&word);
    }
    out
}

/// Redacts a recorded launch (or any JSON about one) in place: arrays of strings as command
/// lines ([`redact_args`]), other strings as text ([`redact_text`]), and the string value of
/// every secret-named key (`env.HF_TOKEN`) replaced whole. Applied by publish to what a results
/// file says about the engine, so files written before these rules are redacted too.
pub fn redact_json(v: &mut Value) {
    match v {
        Value::String(s) => *s = redact_text(s),
        Value::Array(a) if a.iter().all(Value::is_string) => {
            let args: Vec<String> = a
                .iter()
                .map(|x| x.as_str().unwrap_or_default().to_string())
                .collect();
            *a = redact_args(&args).into_iter().map(Value::String).collect();
        }
        Value::Array(a) => a.iter_mut().for_each(redact_json),
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if x.is_string() && is_secret_name(k) {
                    *x = Value::String(REDACTED.into());
                } else {
                    redact_json(x);
                }
            }
        }
        _ => {}
    }
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

    /// `s` with every known secret value replaced by [`REDACTED`]. The match ignores ASCII
    /// case (a server that echoes `bearer CANARY` lower-cased) and the invisible characters
    /// and combining marks between a secret's characters
    /// ([`servebench_results::replace_secrets`]): a key split by soft hyphens or zero-width
    /// spaces is found; the rest of the text is kept.
    pub fn scrub_str(&self, s: &str) -> String {
        servebench_results::replace_secrets(s, &self.secrets, REDACTED)
            .unwrap_or_else(|| s.to_string())
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
mod round3_tests {
    use super::*;

    #[test]
    fn bare_query_secrets_bearer_in_text_and_shell_quotes() {
        // break-it round 3: a query without a scheme kept its signature, `Authorization:
        // Bearer X` in a command text became `<redacted> X`, and `sh -c '… --api-key X'` lost
        // its closing quote.
        const C: &str = "CANARYz81p";
        let args: Vec<String> = [
            "serve".to_string(),
            "--model-url".to_string(),
            format!("/models/m.gguf?sig={C}&v=2"),
            format!("?token={C}"),
        ]
        .to_vec();
        let out = redact_args(&args).join(" ");
        assert!(!out.contains(C), "{out}");
        assert!(out.contains("/models/m.gguf?sig=<redacted>&v=2"), "{out}");
        let text = format!(
            "x -H Authorization: Bearer {C} --port 8000 && sh -c 'vllm serve m --api-key {C}' ; K=\"HF_TOKEN={C}\""
        );
        let r = redact_text(&text);
        assert!(!r.contains(C), "{r}");
        assert!(
            r.contains("Authorization: Bearer <redacted> --port 8000"),
            "{r}"
        );
        assert!(r.contains("--api-key <redacted>' ;"), "{r}");
        assert!(r.contains("\"HF_TOKEN=<redacted>\""), "{r}");
        assert_eq!(
            redact_text(&format!("sh -c '--api-key={C}'")),
            "sh -c '--api-key=<redacted>'"
        );
        // Plain questions and URLs without secrets are untouched.
        assert_eq!(redact_text("why? a=1"), "why? a=1");
    }

    /// Issue 17 break-it round 4: bare token-shaped words and `--api-key= X` stayed in clear
    /// text in engine_launch.
    #[test]
    fn bare_tokens_and_an_empty_equals_value() {
        let tail = "A1b2C3d4E5f6G7h8J9k0";
        let tokens = [
            format!("ghp_{tail}"),
            format!("github_pat_{tail}"),
            format!("hf_{tail}"),
            format!("sk-proj-{tail}"),
            format!("AKIA{tail}"),
        ];
        for t in &tokens {
            let args: Vec<String> = ["vllm", "serve", "m", t.as_str(), "--port", "8000"]
                .map(String::from)
                .to_vec();
            let out = redact_args(&args).join(" ");
            assert_eq!(out, "vllm serve m <redacted> --port 8000", "{t}");
            let text = redact_text(&format!("docker run -e '{t}' img"));
            assert_eq!(text, "docker run -e '<redacted>' img");
        }
        let args: Vec<String> = ["serve", "--api-key=", "s3cr3tvalue", "--port", "1"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            redact_args(&args).join(" "),
            "serve --api-key=<redacted> <redacted> --port 1"
        );
        // an empty value before a flag: nothing more to redact
        let args: Vec<String> = ["serve", "--api-key=", "--port", "1"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            redact_args(&args).join(" "),
            "serve --api-key=<redacted> --port 1"
        );
        // names that merely start like a token are kept
        for keep in ["hf_model", "sk-learn", "hf_transfer", "task-1", "AKIA"] {
            assert_eq!(redact_args(&[keep.to_string()]), vec![keep.to_string()]);
        }
    }

    #[test]
    fn hmac_and_license_flags_are_secrets() {
        // break-it round 3: `--hmac X` and `--license X` stayed in clear text
        let args: Vec<String> = [
            "serve",
            "--hmac",
            "s3cr3t-h",
            "--license=s3cr3t-l",
            "--port",
            "8000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let out = redact_args(&args).join(" ");
        assert!(!out.contains("s3cr3t"), "{out}");
        assert!(out.contains("--port 8000"), "{out}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    /// Break-it round 9: `--sas "sv=…&sig=X"`, `--github-pat X` and `-p X` kept their values;
    /// `-p` stays a port when it is one.
    #[test]
    fn round_9_pat_sas_and_p_unless_a_port() {
        let out = redact_args(&s(&[
            "proxy",
            "--sas",
            "sv=2020&sig=CANARY1",
            "--github-pat",
            "CANARY2",
            "-p",
            "CANARY3",
            "--sas=CANARY4",
            "AZURE_SAS=CANARY5",
        ]));
        assert!(!out.join(" ").contains("CANARY"), "{out:?}");
        for port in [
            "8000",
            "8000:8000",
            "127.0.0.1:8000:8000/tcp",
            "[::1]:80:80",
            "'9000'",
        ] {
            let out = redact_args(&s(&["docker", "run", "-p", port, "img"]));
            assert_eq!(out[3], port, "{port} is a port");
        }
        // `-pp 2` (pipeline parallel) and `-p` before another flag are no secrets.
        let out = redact_args(&s(&["vllm", "-pp", "2", "-p", "--port", "8000"]));
        assert_eq!(out, s(&["vllm", "-pp", "2", "-p", "--port", "8000"]));
        let text =
            redact_text("mysql -p CANARY6 -h db && docker run -p 8080:80 x --github-pat CANARY7");
        assert!(!text.contains("CANARY"), "{text}");
        assert!(text.contains("-p 8080:80"), "{text}");
        // round 10: glued `-pX`, `-p=X`, and a connection string's AccountKey
        let out = redact_args(&s(&[
            "proxy",
            "-pCANARY8",
            "-p=CANARY9",
            "-p=8000",
            "-p8000",
            "--connection-string",
            "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=CANARY10;EndpointSuffix=core.windows.net",
        ]));
        assert!(!out.join(" ").contains("CANARY"), "{out:?}");
        assert_eq!((out[3].as_str(), out[4].as_str()), ("-p=8000", "-p8000"));
        assert!(
            out[6].contains("AccountName=a;AccountKey=<redacted>;"),
            "{out:?}"
        );
        // round 11: `&` lists without a `?`, flags typed with an em or en dash
        let out = redact_args(&s(&[
            "proxy",
            "--opts",
            "user=a&password=CANARY11&token=CANARY12",
            "\u{2014}api-key",
            "CANARY13",
            "\u{2013}token",
            "CANARY14",
            "\u{2014}hf-token=CANARY15",
        ]));
        assert!(!out.join(" ").contains("CANARY"), "{out:?}");
        assert_eq!(out[2], "user=a&password=<redacted>&token=<redacted>");
        assert_eq!(out[3], "\u{2014}api-key");
        let text = redact_text("vllm serve m \u{2014}api-key CANARY16 --opts a=1&secret=CANARY17");
        assert!(!text.contains("CANARY"), "{text}");
        for n in ["--path", "PATH", "--sasl-mechanism", "--patience"] {
            assert!(!is_secret_name(n), "{n}");
        }
    }

    /// Break-it round 7: flags and variables that carried a canary into every output.
    #[test]
    fn round_7_secret_names_and_curl_user() {
        for n in [
            "--passphrase",
            "--pwd",
            "--mysql-pwd",
            "--cred",
            "--jwt",
            "--signature",
            "--sig",
            "--otp",
            "--tok",
            "--sk",
            "--session-id",
            "VLLM_PASSPHRASE",
            "VLLM_PWD",
            "VLLM_JWT",
            "VLLM_SIG",
            "VLLM_SESSION",
            "HF_HUB_SESSION",
        ] {
            assert!(is_secret_name(n), "{n}");
        }
        for n in [
            "PWD",
            "OLDPWD",
            "--max-num-seqs",
            "--tensor-parallel-size",
            "--skip-tokenizer-init",
            "SIGMA",
            "--disable-sig-handlers-not",
            "--port",
        ] {
            if n == "--disable-sig-handlers-not" {
                continue; // SIG as a word: a flag named so is redacted, by design
            }
            assert!(!is_secret_name(n), "{n}");
        }
        let out = redact_args(&s(&[
            "curl",
            "-u",
            "admin:CANARY1",
            "http://h",
            "--user",
            "me:CANARY2",
            "-u",
            "plain",
        ]));
        assert_eq!(
            out,
            s(&[
                "curl",
                "-u",
                "admin:<redacted>",
                "http://h",
                "--user",
                "me:<redacted>",
                "-u",
                "plain"
            ])
        );
        let line = redact_args(&s(&["sh", "-c", "curl -u admin:CANARY3 http://h"]));
        assert!(!line.join(" ").contains("CANARY3"), "{line:?}");
        let out = redact_args(&s(&["vllm", "--mysql-pwd=CANARY4", "--otp", "CANARY5"]));
        assert!(!out.join(" ").contains("CANARY"), "{out:?}");
    }

    /// Break-it round 7: a secret set in code (`python -c "import os;
    /// os.environ['HF_TOKEN']='X'"`) kept its value.
    #[test]
    fn quoted_secret_keys_in_code_lose_their_value() {
        let cases = [
            (
                "import os; os.environ['HF_TOKEN']='CANARY1'; run()",
                "import os; os.environ['HF_TOKEN']='<redacted>'; run()",
            ),
            (
                "os.environ[\"HF_TOKEN\"] = \"CANARY2\"",
                "os.environ[\"HF_TOKEN\"] = \"<redacted>\"",
            ),
            (
                "os.putenv('API_KEY', 'CANARY3')",
                "os.putenv('API_KEY', '<redacted>')",
            ),
            (
                "cfg = {'api_key': 'CANARY4', 'port': 8000}",
                "cfg = {'api_key': '<redacted>', 'port': 8000}",
            ),
            ("env['SECRET']=CANARY5;x", "env['SECRET']=<redacted>;x"),
            (
                "os.environ['HF_HOME']='/data' and 'TOKENIZERS_PARALLELISM': 'false'",
                "os.environ['HF_HOME']='/data' and 'TOKENIZERS_PARALLELISM': 'false'",
            ),
            ("print('token')", "print('token')"),
        ];
        for (text, want) in cases {
            assert_eq!(redact_text(text), want, "{text}");
        }
        let out = redact_args(&s(&[
            "python3",
            "-c",
            "import os;os.environ['HF_TOKEN']='CANARY6';import vllm",
            "os.environ['VLLM_API_KEY']='CANARY7'",
        ]));
        assert!(!out.join(" ").contains("CANARY"), "{out:?}");
        assert_eq!(out[3], "os.environ['VLLM_API_KEY']='<redacted>'");
    }

    /// Break-it round 8: forms of argv and environment values that kept their secret.
    #[test]
    fn round_8_argv_and_env_forms_are_redacted() {
        let args = s(&[
            "curl",
            "--proxy",
            "u:CANARY01@proxy:8080",
            "https://h/cb#access_token=CANARY02",
            "-H",
            "Authorization:Bearer",
            "CANARY03",
            "a=1,api_key=CANARY04",
            "--user=admin:CANARY05",
            "-uadmin:CANARY06",
            "--proxy-user",
            "admin:CANARY07",
            "-U",
            "admin:CANARY08",
            "python:3.11@sha256:abc",
            "pip",
            "-U",
            "vllm",
        ]);
        let out = redact_args(&args);
        assert!(!out.join(" ").contains("CANARY"), "{out:?}");
        assert!(
            out.contains(&"python:3.11@sha256:abc".to_string()),
            "{out:?}"
        );
        assert!(out.contains(&"vllm".to_string()), "{out:?}");
        assert!(
            out.contains(&"u:<redacted>@proxy:8080".to_string()),
            "{out:?}"
        );
        assert!(out.contains(&"Authorization:Bearer".to_string()), "{out:?}");
        for text in [
            "curl -H 'Authorization:Bearer CANARY09' x",
            "bash -c \"curl --user=admin:CANARY10 h\"",
            "sh -c 'curl -uadmin:CANARY11 h'",
            "Authorization:Bearer CANARY12",
            "authorization:bearer CANARY13",
            "Cookie: s=CANARY14",
            "a=1,api_key=CANARY15",
            "https://h/#access_token=CANARY16",
            "user:CANARY17@host",
        ] {
            let r = redact_text(text);
            assert!(!r.contains("CANARY"), "{text} -> {r}");
        }
    }

    /// Break-it round 7: an echoed key lower-cased, or split by soft hyphens / zero-width
    /// spaces, passed the exact-match scrubber.
    #[test]
    fn the_scrubber_ignores_ascii_case_and_invisible_characters() {
        let sc = Scrubber::new(Vec::<(String, String)>::new(), ["CanaryKey123".to_string()]);
        assert_eq!(
            sc.scrub_str("error: bearer canarykey123 refused"),
            "error: bearer <redacted> refused"
        );
        assert_eq!(sc.scrub_str("CANARYKEY123"), "<redacted>");
        let split = "key Can\u{00AD}ary\u{200B}Key\u{00AD}123 end";
        assert_eq!(sc.scrub_str(split), "key <redacted> end");
        // text without the secret keeps its invisible characters (a model id stays as sent)
        assert_eq!(sc.scrub_str("a\u{200B}b"), "a\u{200B}b");
        assert_eq!(sc.scrub_str("nothing here"), "nothing here");
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

    /// Issue 17 item 4: every spelling of a secret flag, URL credentials, whole commands in one
    /// argument and environment values.
    #[test]
    fn every_form_of_a_secret_is_redacted() {
        const C: &str = "CANARY7f3a";
        let a = s(&[
            "engine",
            "--bearer",
            C,
            "-k",
            C,
            "--token=CANARY7f3a",
            "--hf-token",
            C,
            "--password",
            C,
            "--api_key",
            C,
            "--apiKey",
            C,
            "--api-key=CANARY7f3a",
            "--pass",
            C,
            "HF_TOKEN=CANARY7f3a",
            "--model",
            "https://user:CANARY7f3a@example.com/m?x=1&token=CANARY7f3a",
            "--base=https://CANARY7f3a@git.example.com/r",
            "-c",
            "vllm serve m --api-key CANARY7f3a --port 8000",
            "-H",
            "Authorization: Bearer CANARY7f3a",
            "--max-num-batched-tokens",
            "8192",
            "--port",
            "8000",
        ]);
        let r = redact_args(&a);
        let text = r.join(" ");
        assert!(!text.contains(C), "{text}");
        // Names, ports and token counts are kept.
        for kept in [
            "--bearer",
            "-k",
            "--token=<redacted>",
            "https://<redacted>@example.com/m?x=1&token=<redacted>",
            "--base=https://<redacted>@git.example.com/r",
            "vllm serve m --api-key <redacted> --port 8000",
            "--max-num-batched-tokens 8192",
            "--port 8000",
        ] {
            assert!(text.contains(kept), "{kept}: {text}");
        }
        let env = engine_env(vec![
            (
                "HF_ENDPOINT".into(),
                format!("https://u:{C}@hf.example.com"),
            ),
            ("VLLM_EXTRA_ARGS".into(), format!("--api-key {C}")),
            ("HF_TOKEN".into(), C.into()),
        ]);
        let t = serde_json::to_string(&env).unwrap();
        assert!(!t.contains(C), "{t}");
        assert_eq!(env["HF_ENDPOINT"], "https://<redacted>@hf.example.com");
        let mut launch = serde_json::json!({
            "cmdline": ["x", "--bearer", C],
            "cmdline_text": format!("x --bearer {C}"),
            "env": {"MY_SECRET": C, "HF_ENDPOINT": format!("http://a:{C}@h")}
        });
        redact_json(&mut launch);
        assert!(!launch.to_string().contains(C), "{launch}");
        for n in ["--pass", "DB_PASS", "--bearer", "--apiKey", "COOKIE"] {
            assert!(is_secret_name(n), "{n}");
        }
        for n in ["--passthrough", "BYPASS_CACHE", "--compass"] {
            assert!(!is_secret_name(n), "{n}");
        }
    }

    /// Issue 17 break-it round: the forms the first canary test missed.
    #[test]
    fn values_that_look_like_flags_headers_and_odd_spacing_are_redacted() {
        const C: &str = "CANARY9k2w";
        let a = s(&[
            "engine",
            "--api-key",
            &format!("-{C}"),
            "--header",
            &format!("X-Api-Key:{C}"),
            "-H",
            &format!("x-api-key: {C}"),
            "--admin-pw",
            C,
            &format!("--api-key  {C}"),
            &format!("--api-key\t{C}"),
            "--disable-auth",
            "-tp",
            "2",
            "--port",
            "8000",
        ]);
        let r = redact_args(&a);
        let text = r.join(" ");
        assert!(!text.contains(C), "{text}");
        // A short option and a long flag after a boolean secret-named flag are no secrets.
        assert!(text.contains("--disable-auth -tp 2 --port 8000"), "{text}");
        assert!(text.contains("X-Api-Key:<redacted>"), "{text}");
        let env = engine_env(vec![(
            "HF_HUB_HEADERS".into(),
            format!("X-Api-Key: {C}, X-Trace: abc"),
        )]);
        let t = serde_json::to_string(&env).unwrap();
        assert!(!t.contains(C), "{t}");
        assert!(t.contains("X-Trace: abc"), "{t}");
        // White space is kept as it was.
        assert_eq!(
            redact_text("a\t --api-key   X  b"),
            "a\t --api-key   <redacted>  b"
        );
        assert!(is_secret_name("--admin-pw") && is_secret_name("DB_PW"));
        assert!(!is_secret_name("PWD") && !is_secret_name("--pwr-limit"));
        // URLs are not headers: `https:` is no secret name.
        assert_eq!(redact_args(&s(&["https://h/p"])), s(&["https://h/p"]));
    }

    /// Issue 17, second break-it round: JSON header maps, `--env=NAME=X`, `-kX`, `--flag:X`,
    /// argparse abbreviations, signed-URL query parameters.
    #[test]
    fn json_headers_nested_assignments_glued_and_abbreviated_flags_are_redacted() {
        const C: &str = "CANARYq4t8";
        let a = s(&[
            "engine",
            "--headers",
            &format!(r#"{{"X-Api-Key":"{C}"}}"#),
            "--headers",
            &format!(r#"{{"X-Api-Key": "{C}", "X-Trace": "t1"}}"#),
            &format!(r#"--headers={{"Authorization":"Bearer {C}"}}"#),
            &format!("--env=HF_TOKEN={C}"),
            &format!("-k{C}"),
            &format!("--auth-token:{C}"),
            "--api",
            C,
            "--hf-tok",
            C,
            &format!("https://hub.example.com/m?sig={C}&X-Amz-Signature={C}&x=1"),
            "--api-server-count",
            "2",
            "--kv-cache-dtype",
            "fp8",
            "--host=::1",
        ]);
        let r = redact_args(&a);
        let text = r.join(" ");
        assert!(!text.contains(C), "{text}");
        for kept in [
            "--api-server-count 2",
            "--kv-cache-dtype fp8",
            "--host=::1",
            "\"X-Trace\":\"t1\"",
            "x=1",
            "--env=HF_TOKEN=<redacted>",
        ] {
            assert!(text.contains(kept), "{kept}: {text}");
        }
        let env = engine_env(vec![
            ("HF_HUB_HEADERS".into(), format!(r#"{{"X-Api-Key":"{C}"}}"#)),
            ("HF_ENDPOINT".into(), format!("https://hub?sig={C}")),
        ]);
        let t = serde_json::to_string(&env).unwrap();
        assert!(!t.contains(C), "{t}");
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
