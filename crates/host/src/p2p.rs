//! NVIDIA P2P override check (seed spec §3.18, fields of §6.5).
//!
//! Reads the NVIDIA kernel module's runtime parameters (`/proc/driver/nvidia/params`, lines
//! `Key: Value`, with `RegistryDwords: "K=V;K=V"`) and the modprobe configuration
//! (`/etc/modprobe.d/*.conf`, `options nvidia NVreg_RegistryDwords="…"`), and compares the
//! P2P override keys with their expected values. Unlike the old tool, values are compared as
//! **numbers** when both sides parse as integers (`0x11` equals `17`); otherwise as trimmed,
//! case-insensitive strings.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

/// Default location of the module's runtime parameters.
pub const DEFAULT_PARAMS_PATH: &str = "/proc/driver/nvidia/params";
/// Default modprobe configuration folder.
pub const DEFAULT_MODPROBE_DIR: &str = "/etc/modprobe.d";
/// The file name the old tool looked at (reported as `modprobe_path` when no file matches).
pub const DEFAULT_MODPROBE_FILE: &str = "nvidia-p2p-override.conf";

/// Expected runtime values, in the seed's order.
pub const EXPECTED: [(&str, &str); 5] = [
    ("ForceP2P", "0x11"),
    ("RMForceP2PType", "1"),
    ("RMPcieP2PType", "2"),
    ("GrdmaPciTopoCheckOverride", "1"),
    ("EnableResizableBar", "1"),
];
/// Reported but not required.
pub const REPORTED_ONLY: &str = "DmaRemapPeerMmio";

/// Bytes of the params file read at most (the seed read 20,000 characters).
const MAX_PARAMS_BYTES: usize = 20_000;

/// Where to look (injectable for tests).
#[derive(Clone, Debug)]
pub struct P2pPaths {
    /// `/proc/driver/nvidia/params`.
    pub params: PathBuf,
    /// `/etc/modprobe.d`.
    pub modprobe_dir: PathBuf,
}

impl Default for P2pPaths {
    fn default() -> Self {
        P2pPaths {
            params: DEFAULT_PARAMS_PATH.into(),
            modprobe_dir: DEFAULT_MODPROBE_DIR.into(),
        }
    }
}

/// Parses an integer the way the NVIDIA driver writes it: `0x…` hex or decimal.
pub fn parse_number(s: &str) -> Option<u64> {
    let t = s.trim().trim_matches('"');
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else {
        t.parse().ok()
    }
}

/// True when `a` and `b` denote the same value (numbers compared as numbers).
pub fn same_value(a: &str, b: &str) -> bool {
    match (parse_number(a), parse_number(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a.trim().eq_ignore_ascii_case(b.trim()),
    }
}

/// `K=V;K=V` → pairs (empty items skipped, quotes stripped).
pub fn parse_registry_dwords(s: &str) -> Vec<(String, String)> {
    s.trim()
        .trim_matches('"')
        .split(';')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()).then(|| (k.to_string(), v.trim().trim_matches('"').to_string()))
        })
        .collect()
}

/// `Key: Value` lines of the params file (quotes stripped).
pub fn parse_params(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let k = k.trim();
            (!k.is_empty()).then(|| (k.to_string(), v.trim().trim_matches('"').to_string()))
        })
        .collect()
}

/// `K=V` settings of the nvidia module in a modprobe file: the `NVreg_RegistryDwords` pairs and
/// the other `NVreg_X=V` options (as `X`).
pub fn parse_modprobe(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        if words.next() != Some("options") {
            continue;
        }
        if !matches!(words.next(), Some("nvidia")) {
            continue;
        }
        let rest: String = words.collect::<Vec<_>>().join(" ");
        // Split options on whitespace outside quotes.
        let mut opts = Vec::new();
        let (mut cur, mut quoted) = (String::new(), false);
        for ch in rest.chars() {
            match ch {
                '"' => {
                    quoted = !quoted;
                    cur.push(ch);
                }
                c if c.is_whitespace() && !quoted => {
                    if !cur.is_empty() {
                        opts.push(std::mem::take(&mut cur));
                    }
                }
                c => cur.push(c),
            }
        }
        if !cur.is_empty() {
            opts.push(cur);
        }
        for o in opts {
            let Some((k, v)) = o.split_once('=') else {
                continue;
            };
            if k == "NVreg_RegistryDwords" {
                out.extend(parse_registry_dwords(v));
            } else if let Some(name) = k.strip_prefix("NVreg_") {
                out.push((name.to_string(), v.trim_matches('"').to_string()));
            }
        }
    }
    out
}

fn lookup<'a>(
    primary: &'a [(String, String)],
    secondary: &'a [(String, String)],
    key: &str,
) -> Option<&'a str> {
    primary
        .iter()
        .chain(secondary.iter())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The seed's suggested modprobe line.
pub fn suggested_modprobe_line() -> String {
    let kv: Vec<String> = EXPECTED.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("options nvidia NVreg_RegistryDwords=\"{}\"", kv.join(";"))
}

/// Runs the check. Returns the seed's object (§6.5) plus `status` (`effective`,
/// `not_effective` or `unknown`) and `summary` (the event-log text), and `modprobe_files`
/// (every `*.conf` read).
pub fn check(paths: &P2pPaths) -> Map<String, Value> {
    let params_text = read_limited(&paths.params);
    let params_available = params_text.is_some();
    let params = params_text.as_deref().map(parse_params).unwrap_or_default();
    let registry_dwords = params
        .iter()
        .find(|(k, _)| k == "RegistryDwords")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let dwords = parse_registry_dwords(&registry_dwords);
    let rt = compare_runtime(&dwords, &params);
    let effective = params_available && rt.missing.is_empty() && rt.mismatched.is_empty();
    let mp = scan_modprobe(&paths.modprobe_dir);
    let (status, summary) = status_and_summary(paths, params_available, effective, &rt);

    let v = json!({
        "status": status,
        "effective": effective,
        "configured": mp.configured,
        "params_path": paths.params.display().to_string(),
        "params_available": params_available,
        "modprobe_path": mp.path.display().to_string(),
        "modprobe_available": mp.available,
        "modprobe_files": mp.files,
        "runtime": rt.runtime,
        "expected": rt.expected,
        "missing": rt.missing,
        "mismatched": rt.mismatched,
        "registry_dwords": registry_dwords,
        "comparison": "numeric when both values parse as integers (0x11 == 17), else case-insensitive text",
        "suggested_modprobe_line": suggested_modprobe_line(),
        "suggested_reload": "stop GPU workloads, then reload NVIDIA modules or reboot; the modprobe file alone is not enough until the nvidia module is reloaded",
        "summary": summary,
    });
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The runtime parameters against [`EXPECTED`] (the `check` object's `runtime`, `expected`,
/// `missing` and `mismatched`).
struct RuntimeCheck {
    /// Every expected key and [`REPORTED_ONLY`] → its runtime value (null when absent).
    runtime: Map<String, Value>,
    /// Expected key → expected value.
    expected: Map<String, Value>,
    /// Expected keys the runtime does not set.
    missing: Vec<Value>,
    /// Key → `{expected, actual}` where the runtime value differs.
    mismatched: Map<String, Value>,
}

/// Compares the runtime values (RegistryDwords first, then the plain params) with
/// [`EXPECTED`].
fn compare_runtime(dwords: &[(String, String)], params: &[(String, String)]) -> RuntimeCheck {
    let mut rt = RuntimeCheck {
        runtime: Map::new(),
        expected: Map::new(),
        missing: Vec::new(),
        mismatched: Map::new(),
    };
    for (k, want) in EXPECTED {
        rt.expected.insert(k.into(), want.into());
        match lookup(dwords, params, k) {
            Some(v) => {
                rt.runtime.insert(k.into(), v.into());
                if !same_value(v, want) {
                    rt.mismatched
                        .insert(k.into(), json!({"expected": want, "actual": v}));
                }
            }
            None => {
                rt.runtime.insert(k.into(), Value::Null);
                rt.missing.push(k.into());
            }
        }
    }
    rt.runtime.insert(
        REPORTED_ONLY.into(),
        lookup(dwords, params, REPORTED_ONLY)
            .map(|v| Value::String(v.into()))
            .unwrap_or(Value::Null),
    );
    rt
}

/// What the modprobe folder says (the `check` object's `modprobe_*` and `configured`).
struct ModprobeScan {
    /// The file that sets `ForceP2P`, else the first with nvidia settings, else
    /// [`DEFAULT_MODPROBE_FILE`] in the folder.
    path: PathBuf,
    /// Some file has nvidia settings.
    available: bool,
    /// The settings, later files overriding earlier ones, set every expected key.
    configured: bool,
    /// Every `*.conf` read, as display strings.
    files: Vec<Value>,
}

/// Reads every `*.conf` in `dir`, sorted; configured = the merged settings set every key.
fn scan_modprobe(dir: &Path) -> ModprobeScan {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "conf"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut scan = ModprobeScan {
        path: dir.join(DEFAULT_MODPROBE_FILE),
        available: false,
        configured: false,
        files: Vec::new(),
    };
    let mut all_settings: Vec<(String, String)> = Vec::new();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        scan.files.push(Value::String(f.display().to_string()));
        let settings = parse_modprobe(&text);
        if settings.is_empty() {
            continue;
        }
        all_settings.extend(settings);
        if !scan.available {
            scan.path = f.clone();
            scan.available = true;
        }
    }
    if !all_settings.is_empty() {
        // Later files override earlier ones, as modprobe reads them in order.
        let last = |key: &str| {
            all_settings
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        scan.configured = EXPECTED
            .iter()
            .all(|(k, want)| last(k).is_some_and(|v| same_value(&v, want)));
        if let Some(f) = files.iter().find(|f| {
            std::fs::read_to_string(f)
                .map(|t| parse_modprobe(&t).iter().any(|(k, _)| k == "ForceP2P"))
                .unwrap_or(false)
        }) {
            scan.path = f.clone();
        }
    }
    scan
}

/// `status` and `summary`: `unknown` when the params are not readable, `effective`, or
/// `not_effective` listing the missing and mismatched keys.
fn status_and_summary(
    paths: &P2pPaths,
    params_available: bool,
    effective: bool,
    rt: &RuntimeCheck,
) -> (&'static str, String) {
    if !params_available {
        return (
            "unknown",
            format!("unknown: {} is not readable", paths.params.display()),
        );
    }
    if effective {
        return (
            "effective",
            "enabled: runtime NVIDIA P2P override matches expected RegistryDwords".to_string(),
        );
    }
    let miss: Vec<&str> = rt.missing.iter().filter_map(|v| v.as_str()).collect();
    let mis: Vec<String> = rt
        .mismatched
        .iter()
        .map(|(k, v)| {
            format!(
                "{k}={} (expected {})",
                v["actual"].as_str().unwrap_or(""),
                v["expected"].as_str().unwrap_or("")
            )
        })
        .collect();
    (
        "not_effective",
        format!(
            "not effective: missing={}; mismatched={}",
            if miss.is_empty() {
                "none".into()
            } else {
                miss.join(",")
            },
            if mis.is_empty() {
                "none".into()
            } else {
                mis.join(",")
            }
        ),
    )
}

fn read_limited(p: &Path) -> Option<String> {
    let b = std::fs::read(p).ok()?;
    let b = &b[..b.len().min(MAX_PARAMS_BYTES)];
    Some(String::from_utf8_lossy(b).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert!(same_value("0x11", "17"));
        assert!(same_value("17", "0x11"));
        assert!(!same_value("0x10", "17"));
        assert!(same_value(" 1", "1"));
        assert!(same_value("abc", "ABC"));
        assert_eq!(parse_number("0XfF"), Some(255));
    }

    #[test]
    fn modprobe_line() {
        let s = parse_modprobe(
            "# comment\noptions nvidia NVreg_RegistryDwords=\"ForceP2P=17;RMForceP2PType=1\" NVreg_EnableResizableBar=1\noptions snd x=1\n",
        );
        assert_eq!(
            s,
            vec![
                ("ForceP2P".into(), "17".into()),
                ("RMForceP2PType".into(), "1".into()),
                ("EnableResizableBar".into(), "1".into())
            ]
        );
        assert!(suggested_modprobe_line()
            .starts_with("options nvidia NVreg_RegistryDwords=\"ForceP2P=0x11;"));
    }
}
