//! The engine's launch, when the server runs on this host (spec §7.2: later versions of the old
//! tool read the engine's command line from `/proc`).
//!
//! For a loopback target: the listening TCP socket on the target port is looked up in
//! `/proc/net/tcp` and `/proc/net/tcp6` (state `0A` = LISTEN; its inode), then the process
//! owning `socket:[inode]` among `/proc/<pid>/fd/*`. Recorded: pid, executable, command line,
//! working directory, engine-related environment (secrets redacted, see [`crate::secrets`]) and
//! container hints from `/proc/<pid>/cgroup` and `/proc/<pid>/root/run/.containerenv`.
//!
//! Limits (best effort, stated in the result): only this network namespace is visible, so a
//! container with its own network namespace shows the port-forwarding proxy (`docker-proxy`)
//! or nothing; other users' processes are unreadable without root; Docker does not expose the
//! image name in `/proc` (the container id is recorded; `docker inspect <id>` names the image),
//! Podman's `.containerenv` does.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::secrets::{engine_env, redact_args, Scrubber};

/// `(local port, inode)` of every listening socket in a `/proc/net/tcp{,6}` text.
pub fn parse_listeners(text: &str) -> Vec<(u16, u64)> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[3] != "0A" {
            continue;
        }
        let Some((_, port_hex)) = f[1].rsplit_once(':') else {
            continue;
        };
        let (Ok(port), Ok(inode)) = (u16::from_str_radix(port_hex, 16), f[9].parse::<u64>()) else {
            continue;
        };
        if inode != 0 {
            out.push((port, inode));
        }
    }
    out
}

/// Container hints from a `/proc/<pid>/cgroup` text: `(runtime, container id)`.
pub fn container_from_cgroup(text: &str) -> Option<(String, Option<String>)> {
    let is_id = |s: &str| s.len() >= 12 && s.chars().all(|c| c.is_ascii_hexdigit());
    for line in text.lines() {
        let path = line.splitn(3, ':').nth(2).unwrap_or(line);
        for seg in path.split('/') {
            let seg = seg.trim_end_matches(".scope");
            for (prefix, rt) in [
                ("docker-", "docker"),
                ("libpod-", "podman"),
                ("cri-containerd-", "containerd"),
                ("crio-", "cri-o"),
            ] {
                if let Some(id) = seg.strip_prefix(prefix) {
                    if is_id(id) {
                        return Some((rt.into(), Some(id.into())));
                    }
                }
            }
        }
        let segs: Vec<&str> = path.split('/').collect();
        for w in segs.windows(2) {
            if w[0] == "docker" && is_id(w[1]) {
                return Some(("docker".into(), Some(w[1].into())));
            }
        }
        if path.contains("kubepods") {
            let id = segs
                .last()
                .map(|s| s.trim_end_matches(".scope"))
                .and_then(|s| {
                    let s = s.rsplit('-').next().unwrap_or(s);
                    is_id(s).then(|| s.to_string())
                });
            return Some(("kubernetes".into(), id));
        }
    }
    None
}

/// `image="…"` from a Podman `.containerenv` text.
pub fn image_from_containerenv(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let v = l.strip_prefix("image=")?.trim().trim_matches('"');
        (!v.is_empty()).then(|| v.to_string())
    })
}

fn split_nul(raw: &[u8]) -> Vec<String> {
    raw.split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// Where the target is, for [`discover`].
#[derive(Clone, Debug)]
pub struct LaunchQuery {
    /// The target host is this machine (`localhost`, `127.0.0.0/8`, `::1`).
    pub loopback: bool,
    /// Host as given (for the reason text).
    pub host: String,
    /// The target's TCP port.
    pub port: Option<u16>,
    /// Root of `/proc` (`/`; a fixture tree in tests).
    pub root: PathBuf,
}

fn result(status: &str, reason: String) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("status".into(), json!(status));
    m.insert("reason".into(), json!(reason));
    m
}

/// Finds the engine's launch. `status`: `found`, `remote` (not on this host), `not_found` or
/// `unreadable`; `reason` explains every status but `found`. With `found`: `pid`, `exe`,
/// `cmdline` (redacted), `cwd`, `env` (engine-related variables, secrets redacted; null with
/// `env_reason` when unreadable), `container` (`{runtime, id, image, image_source, note}` or
/// null), `method` and `limits`. Every string passes through `scrubber` as well.
pub fn discover(q: &LaunchQuery, scrubber: &Scrubber) -> Map<String, Value> {
    let mut m = discover_raw(q);
    let mut v = Value::Object(std::mem::take(&mut m));
    scrubber.scrub_value(&mut v);
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn discover_raw(q: &LaunchQuery) -> Map<String, Value> {
    if !q.loopback {
        return result(
            "remote",
            format!(
                "the server ({}) is not on this host; its launch cannot be read",
                q.host
            ),
        );
    }
    let Some(port) = q.port else {
        return result("not_found", "the target has no TCP port".into());
    };
    let proc_dir = q.root.join("proc");
    let mut inodes = Vec::new();
    let mut readable = false;
    for f in ["net/tcp", "net/tcp6"] {
        if let Ok(t) = std::fs::read_to_string(proc_dir.join(f)) {
            readable = true;
            inodes.extend(
                parse_listeners(&t)
                    .into_iter()
                    .filter(|(p, _)| *p == port)
                    .map(|(_, i)| i),
            );
        }
    }
    if !readable {
        return result(
            "unreadable",
            format!("{} is not readable", proc_dir.join("net/tcp").display()),
        );
    }
    if inodes.is_empty() {
        return result(
            "not_found",
            format!(
                "no socket listens on port {port} in this network namespace (a container with its own network namespace shows no listener here)"
            ),
        );
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    let mut denied = 0usize;
    let mut found: Option<u32> = None;
    if let Ok(d) = std::fs::read_dir(&proc_dir) {
        'outer: for e in d.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let fds = match std::fs::read_dir(e.path().join("fd")) {
                Ok(f) => f,
                Err(_) => {
                    denied += 1;
                    continue;
                }
            };
            for fd in fds.flatten() {
                if let Ok(l) = std::fs::read_link(fd.path()) {
                    if wanted.iter().any(|w| l.as_os_str() == w.as_str()) {
                        found = Some(pid);
                        break 'outer;
                    }
                }
            }
        }
    }
    let Some(pid) = found else {
        return result(
            "unreadable",
            format!(
                "a socket listens on port {port} but no readable process owns it ({denied} processes not readable: another user's, or a container's; run as that user or root)"
            ),
        );
    };
    process_info(&proc_dir.join(pid.to_string()), pid, port)
}

fn process_info(dir: &Path, pid: u32, port: u16) -> Map<String, Value> {
    let mut m = result("found", String::new());
    m.remove("reason");
    m.insert("pid".into(), json!(pid));
    m.insert("port".into(), json!(port));
    m.insert("self".into(), json!(pid == std::process::id()));
    let link = |p: &str| {
        std::fs::read_link(dir.join(p))
            .ok()
            .map(|l| l.display().to_string())
    };
    m.insert("exe".into(), json!(link("exe")));
    let cmdline = std::fs::read(dir.join("cmdline"))
        .ok()
        .map(|raw| redact_args(&split_nul(&raw)));
    m.insert("cmdline".into(), json!(cmdline));
    m.insert(
        "cmdline_text".into(),
        json!(cmdline.as_ref().map(|c| c.join(" "))),
    );
    m.insert("cwd".into(), json!(link("cwd")));
    let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
    };
    m.insert("name".into(), json!(field("Name:")));
    m.insert(
        "ppid".into(),
        json!(field("PPid:").and_then(|v| v.parse::<u32>().ok())),
    );
    match std::fs::read(dir.join("environ")) {
        Ok(raw) => {
            let vars: Vec<(String, String)> = split_nul(&raw)
                .into_iter()
                .filter_map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                })
                .collect();
            let container_env = vars
                .iter()
                .find(|(k, _)| k == "container")
                .map(|(_, v)| v.clone());
            m.insert("env".into(), Value::Object(engine_env(vars)));
            if let Some(c) = container_env {
                m.insert("env_container".into(), json!(c));
            }
        }
        Err(e) => {
            m.insert("env".into(), Value::Null);
            m.insert(
                "env_reason".into(),
                json!(format!(
                    "{} not readable: {e}",
                    dir.join("environ").display()
                )),
            );
        }
    }
    let cgroup = std::fs::read_to_string(dir.join("cgroup")).unwrap_or_default();
    let container = container_from_cgroup(&cgroup).map(|(runtime, id)| {
        let image = std::fs::read_to_string(dir.join("root/run/.containerenv"))
            .ok()
            .and_then(|t| image_from_containerenv(&t));
        json!({
            "runtime": runtime,
            "id": id,
            "image": image,
            "image_source": image.as_ref().map(|_| "/proc/<pid>/root/run/.containerenv"),
            "note": if image.is_some() {
                "image name from the container's .containerenv (best effort)"
            } else {
                "the image name is not visible in /proc (Docker does not expose it); `docker inspect <id>` gives it (best effort)"
            },
        })
    });
    m.insert("container".into(), container.unwrap_or(Value::Null));
    m.insert(
        "method".into(),
        json!("listening socket inode in /proc/net/tcp{,6} -> /proc/<pid>/fd"),
    );
    m.insert(
        "limits".into(),
        json!("best effort: this network namespace only; other users' processes need root; secrets in the command line and environment are redacted"),
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:1F91 0100007F:D000 01 00000000:00000000 00:00000000 00000000  1000        0 777 1\n";
        assert_eq!(parse_listeners(t), vec![(8080, 4242)]);
    }

    #[test]
    fn containers() {
        let id = "a".repeat(64);
        assert_eq!(
            container_from_cgroup(&format!("0::/system.slice/docker-{id}.scope\n")),
            Some(("docker".into(), Some(id.clone())))
        );
        assert_eq!(
            container_from_cgroup(&format!("12:memory:/docker/{id}\n")),
            Some(("docker".into(), Some(id.clone())))
        );
        assert_eq!(
            container_from_cgroup(&format!("0::/machine.slice/libpod-{id}.scope\n")).map(|c| c.0),
            Some("podman".into())
        );
        assert_eq!(
            container_from_cgroup("0::/user.slice/user-1000.slice/session-2.scope\n"),
            None
        );
        assert_eq!(
            image_from_containerenv(
                "engine=\"podman-4\"\nimage=\"docker.io/vllm/vllm-openai:v0.9\"\n"
            ),
            Some("docker.io/vllm/vllm-openai:v0.9".into())
        );
    }

    #[test]
    fn remote_and_missing() {
        let sc = Scrubber::default();
        let q = LaunchQuery {
            loopback: false,
            host: "api.example.com".into(),
            port: Some(443),
            root: "/".into(),
        };
        assert_eq!(discover(&q, &sc)["status"], "remote");
        let dir = tempfile::tempdir().unwrap();
        let q = LaunchQuery {
            loopback: true,
            host: "127.0.0.1".into(),
            port: Some(1),
            root: dir.path().into(),
        };
        assert_eq!(discover(&q, &sc)["status"], "unreadable");
    }
}
