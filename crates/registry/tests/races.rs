//! A collection directory swapped for a symbolic link out of the registry while a write or a
//! load is going on (break-it round 9: the checks and the writes went through path strings, so
//! a swap between them wrote sweeps outside and served an outside record). The writes and reads
//! go through directory handles opened from the root's: whatever the timing, nothing outside is
//! written or read.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use servebench_registry::{import, Collection, Registry};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

fn example_registry(into: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/registry");
    let root = into.join("reg");
    copy_dir(&src, &root);
    root
}

/// Swaps `<root>/<name>` with a link to `outside` and back until `stop`, resting `rest` with
/// the real directory in place after each swap.
fn swapper(
    root: PathBuf,
    name: &str,
    outside: PathBuf,
    stop: Arc<AtomicBool>,
    rest: Duration,
) -> std::thread::JoinHandle<u64> {
    let name = name.to_string();
    std::thread::spawn(move || {
        let (dir, aside) = (root.join(&name), root.join(format!("{name}.aside")));
        let mut swaps = 0;
        while !stop.load(Ordering::Relaxed) {
            if std::fs::rename(&dir, &aside).is_ok() {
                if std::os::unix::fs::symlink(&outside, &dir).is_ok() {
                    std::thread::yield_now();
                    let _ = std::fs::remove_file(&dir);
                    swaps += 1;
                }
                // A write may have created a fresh directory meanwhile: keep the original.
                if std::fs::rename(&aside, &dir).is_err() {
                    let _ = std::fs::remove_dir_all(&aside);
                }
            }
            // The real directory is in place most of the time, so writes also get through.
            if !rest.is_zero() {
                std::thread::sleep(rest);
            }
        }
        swaps
    })
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

#[test]
fn a_write_never_lands_outside_while_its_directory_is_swapped_for_a_link() {
    let tmp = tempfile::tempdir().unwrap();
    let root = example_registry(tmp.path());
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let template: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("hardware/unknown-host-vm.json")).unwrap(),
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = swapper(
        root.clone(),
        "hardware",
        outside.clone(),
        stop.clone(),
        Duration::from_micros(200),
    );
    let (mut written, mut refused) = (0, 0);
    let t0 = Instant::now();
    let mut i = 0;
    while t0.elapsed() < Duration::from_secs(3) && i < 400 {
        i += 1;
        let Ok(mut reg) = Registry::load(&root) else {
            continue;
        };
        let mut rec = template.clone();
        rec["id"] = Value::from(format!("race-{i}"));
        match import::import_text(
            &mut reg,
            &rec.to_string(),
            "race.json",
            "2026-12-04T12:00:00Z".parse().unwrap(),
        ) {
            Ok(_) => written += 1,
            Err(e) => {
                if refused == 0 {
                    eprintln!("first refusal: {e}");
                }
                refused += 1
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swaps.join().unwrap();
    assert!(
        files_under(&outside).is_empty(),
        "written outside the registry: {:?} ({written} written, {refused} refused, {swaps} swaps)",
        files_under(&outside)
    );
    assert!(
        written > 0,
        "no import got through ({refused} refused, {swaps} swaps)"
    );
    // What was written is in the registry.
    let reg = Registry::load(&root).unwrap();
    assert!(reg.get(Collection::Hardware, "unknown-host-vm").is_some());
}

#[test]
fn a_load_never_reads_outside_while_a_directory_is_swapped_for_a_link() {
    let tmp = tempfile::tempdir().unwrap();
    let root = example_registry(tmp.path());
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let mut secret: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("hardware/unknown-host-vm.json")).unwrap(),
    )
    .unwrap();
    secret["id"] = Value::from("outside-secret");
    std::fs::write(outside.join("outside-secret.json"), secret.to_string()).unwrap();
    // And one under the name of a record inside, read by name after the listing.
    secret["id"] = Value::from("unknown-host-vm");
    secret["marker"] = Value::from("OUTSIDE");
    std::fs::write(outside.join("unknown-host-vm.json"), secret.to_string()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = swapper(
        root.clone(),
        "hardware",
        outside.clone(),
        stop.clone(),
        Duration::ZERO,
    );
    let t0 = Instant::now();
    let (mut loads, mut seen) = (0, 0);
    while t0.elapsed() < Duration::from_secs(3) && loads < 2000 {
        if let Ok(reg) = Registry::load(&root) {
            loads += 1;
            let inside_copy = reg.get(Collection::Hardware, "unknown-host-vm");
            if reg.get(Collection::Hardware, "outside-secret").is_some()
                || inside_copy.is_some_and(|r| r.raw.get("marker").is_some())
            {
                seen += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swaps.join().unwrap();
    assert_eq!(
        seen, 0,
        "an outside record was read in {seen} of {loads} loads ({swaps} swaps)"
    );
    assert!(loads > 10 && swaps > 10, "{loads} loads, {swaps} swaps");
}
