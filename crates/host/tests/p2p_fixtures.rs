//! The NVIDIA P2P override check on fixture `/proc/driver/nvidia/params` and modprobe folders
//! (tests/data/host/p2p/{effective,missing,mismatched}).

use serde_json::json;
use servebench_host::p2p::{check, P2pPaths};

fn fixture(name: &str) -> P2pPaths {
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/host/p2p")
        .join(name);
    P2pPaths {
        params: base.join("params"),
        modprobe_dir: base.join("modprobe.d"),
    }
}

#[test]
fn effective_with_numeric_comparison() {
    // The runtime says ForceP2P=17 and RMPcieP2PType=0x2: equal to 0x11 and 2 as numbers (the
    // old tool's string comparison called this "mismatched").
    let r = check(&fixture("effective"));
    assert_eq!(r["status"], "effective");
    assert_eq!(r["effective"], true);
    assert_eq!(r["configured"], true);
    assert_eq!(r["params_available"], true);
    assert_eq!(r["modprobe_available"], true);
    assert!(r["modprobe_path"]
        .as_str()
        .unwrap()
        .ends_with("nvidia-p2p-override.conf"));
    assert_eq!(r["missing"], json!([]));
    assert_eq!(r["mismatched"], json!({}));
    assert_eq!(r["runtime"]["ForceP2P"], "17");
    assert_eq!(r["runtime"]["DmaRemapPeerMmio"], "1");
    assert_eq!(r["expected"]["ForceP2P"], "0x11");
    assert!(r["summary"].as_str().unwrap().starts_with("enabled:"));
    assert_eq!(r["modprobe_files"].as_array().unwrap().len(), 2);
}

#[test]
fn missing_settings() {
    let r = check(&fixture("missing"));
    assert_eq!(r["status"], "not_effective");
    assert_eq!(r["effective"], false);
    assert_eq!(r["configured"], false);
    assert_eq!(
        r["missing"],
        json!([
            "ForceP2P",
            "RMForceP2PType",
            "RMPcieP2PType",
            "GrdmaPciTopoCheckOverride"
        ])
    );
    // EnableResizableBar is a top-level module parameter here (0).
    assert_eq!(
        r["mismatched"],
        json!({"EnableResizableBar": {"expected": "1", "actual": "0"}})
    );
    assert_eq!(r["runtime"]["ForceP2P"], serde_json::Value::Null);
    assert!(r["summary"]
        .as_str()
        .unwrap()
        .starts_with("not effective: missing=ForceP2P,"));
}

#[test]
fn mismatched_settings() {
    let r = check(&fixture("mismatched"));
    assert_eq!(r["effective"], false);
    assert_eq!(
        r["configured"], true,
        "the modprobe file is right; the module was not reloaded"
    );
    assert_eq!(r["missing"], json!([]));
    assert_eq!(
        r["mismatched"],
        json!({
            "ForceP2P": {"expected": "0x11", "actual": "0x10"},
            "GrdmaPciTopoCheckOverride": {"expected": "1", "actual": "0"}
        })
    );
    assert!(r["suggested_modprobe_line"]
        .as_str()
        .unwrap()
        .contains("ForceP2P=0x11;RMForceP2PType=1;RMPcieP2PType=2;GrdmaPciTopoCheckOverride=1;EnableResizableBar=1"));
}

#[test]
fn unreadable_params() {
    let r = check(&P2pPaths {
        params: "/nonexistent/params".into(),
        modprobe_dir: "/nonexistent/modprobe.d".into(),
    });
    assert_eq!(r["status"], "unknown");
    assert_eq!(r["effective"], false);
    assert_eq!(r["params_available"], false);
    assert_eq!(r["modprobe_available"], false);
    assert_eq!(r["summary"], "unknown: /nonexistent/params is not readable");
}
