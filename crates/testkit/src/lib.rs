//! Helpers shared by the workspace's tests (a dev-dependency only).
//!
//! * [`missing_tool`]: what a test does when a tool it drives (Chromium, tmux) is not installed:
//!   it says `SKIPPED` in its output and passes on a developer's machine, and fails with a clear
//!   message where the tools are required (`SERVEBENCH_REQUIRE_TOOLS=1`, set by `.ci/run`, which
//!   installs them), so a browser or terminal check can never pass in CI without running.

use std::io::Write as _;

/// The environment variable that makes a missing tool a test failure (`1` = required).
pub const REQUIRE_TOOLS_ENV: &str = "SERVEBENCH_REQUIRE_TOOLS";

/// Tools are required here: `SERVEBENCH_REQUIRE_TOOLS` is `1` (or `true`/`yes`).
pub fn tools_required() -> bool {
    std::env::var(REQUIRE_TOOLS_ENV)
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// The test `test` cannot run because `tool` is missing (`hint`: how to install it). Prints
/// `SKIPPED: …` (to stdout, and to the process's stderr past the test harness's capture) and
/// returns, so the caller returns too; panics instead when
/// [`tools_required`].
///
/// # Panics
/// When tools are required, with `"<test>: <tool> is required (SERVEBENCH_REQUIRE_TOOLS=1) but
/// not installed (<hint>)"`.
#[track_caller]
pub fn missing_tool(test: &str, tool: &str, hint: &str) {
    if tools_required() {
        panic!("{test}: {tool} is required ({REQUIRE_TOOLS_ENV}=1) but not installed ({hint})");
    }
    let line = format!("SKIPPED: {test}: {tool} is not installed ({hint})");
    println!("{line}");
    // straight to the process's stderr as well: the test harness captures `print!`/`eprint!`
    // of a passing test, and a skip must be visible in a plain `cargo test`
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_fails_only_where_tools_are_required() {
        // one test touches the variable (tests in this crate run in one process)
        std::env::remove_var(REQUIRE_TOOLS_ENV);
        missing_tool("t", "tmux", "apt-get install tmux");
        std::env::set_var(REQUIRE_TOOLS_ENV, "1");
        let r = std::panic::catch_unwind(|| missing_tool("t", "tmux", "apt-get install tmux"));
        std::env::remove_var(REQUIRE_TOOLS_ENV);
        let msg = r.unwrap_err();
        let msg = msg
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        assert!(
            msg.contains("tmux is required (SERVEBENCH_REQUIRE_TOOLS=1)"),
            "{msg}"
        );
    }
}
