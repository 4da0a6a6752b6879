//! `servebench registry serve examples/registry`: the binary serves the seed record back in
//! the seed's shape over real HTTP on 127.0.0.1, and stops on SIGTERM.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::{Command, Stdio};

#[test]
fn serves_the_example_registry() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut child = Command::new(env!("CARGO_BIN_EXE_servebench"))
        .args(["registry", "serve", "examples/registry", "--port", "0"])
        .current_dir(&root)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut addr = None;
    let mut lines = Vec::new();
    for _ in 0..10 {
        let mut l = String::new();
        if err.read_line(&mut l).unwrap() == 0 {
            break;
        }
        if let Some(rest) = l.split("site http://").nth(1) {
            addr = rest.split('/').next().map(str::to_string);
            break;
        }
        lines.push(l);
    }
    let addr = addr.unwrap_or_else(|| panic!("no address printed: {lines:?}"));
    assert!(
        addr.starts_with("127.0.0.1:"),
        "binds loopback by default: {addr}"
    );
    let sweep = "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4-sweep";
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "GET /api/v1/speed-sweep/{sweep} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let seed: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            root.join("crates/registry-server/tests/data/seed-001-speed-sweep-envelope.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let got: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(got, seed);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}
