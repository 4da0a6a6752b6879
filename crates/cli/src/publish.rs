//! `servebench publish RESULTS.json --registry DIR --recipe ID`: one speed sweep from a run
//! (rules in `servebench_registry::publish`), then the registry is validated.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use servebench_registry::publish::{self, PublishError, PublishOptions};
use servebench_registry::{validate, Registry};

/// `servebench publish` flags.
#[derive(Debug, Args)]
pub struct PublishArgs {
    /// Results JSON written by `servebench run`.
    pub results: PathBuf,
    /// Registry root (created when missing).
    #[arg(long)]
    pub registry: PathBuf,
    /// Recipe the sweep belongs to; drafted as a candidate (with its model, model-instance
    /// and hardware) when it does not exist.
    #[arg(long)]
    pub recipe: String,
    /// Sweep id (default `<recipe>-<YYYYMMDD>-<run id>`; an existing sweep is never overwritten).
    #[arg(long = "sweep-id")]
    pub sweep_id: Option<String>,
    /// Earlier sweep to compare with: rows slower than its accepted row of the same (layer,
    /// C, context) beyond 5 % noise are `rejected-…-regression`.
    #[arg(long)]
    pub baseline: Option<String>,
    /// Existing hardware record for a drafted recipe (instead of drafting one from the run).
    #[arg(long)]
    pub hardware: Option<String>,
    /// Existing model-instance record for a drafted recipe.
    #[arg(long = "model-instance")]
    pub model_instance: Option<String>,
}

/// Runs `servebench publish`.
pub fn cmd_publish(a: PublishArgs) -> anyhow::Result<ExitCode> {
    // A regular file of bounded size (a FIFO or /dev/zero is refused, never read: break-it
    // round 9), that `servebench validate` accepts: evidence is only published from a file
    // that has the results schema and no impossible value.
    let text = crate::read_input_file(&a.results)?;
    let bytes = text.as_bytes();
    let raw: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON", crate::shown(&a.results)))?;
    if !(raw.get("metadata").is_some_and(|m| m.is_object())
        && raw.get("results").is_some_and(|r| r.is_array()))
    {
        anyhow::bail!(
            "{} is not a servebench results file: no `metadata` object and `results` list (a registry record goes in with `servebench registry import`)",
            crate::shown(&a.results)
        );
    }
    let mut found = crate::problems(&raw, false)?;
    found.impossible.extend(crate::duplicated(&text));
    if !found.is_empty() {
        let shown = crate::shown(&a.results);
        for e in found.schema.iter().take(10) {
            eprintln!("{shown}: {e}");
        }
        for p in found.impossible.iter().take(10) {
            eprintln!("{shown}: impossible value at {p}");
        }
        anyhow::bail!(
            "{shown} is not published: {} schema problem(s) and {} impossible value(s) (`servebench validate {shown}` lists them); nothing was written",
            found.schema.len(),
            found.impossible.len()
        );
    }
    std::fs::create_dir_all(&a.registry)
        .with_context(|| format!("cannot create {}", crate::shown(&a.registry)))?;
    let mut reg = Registry::load(&a.registry)?;
    let opts = PublishOptions {
        recipe_id: a.recipe.clone(),
        sweep_id: a.sweep_id.clone(),
        baseline: a.baseline.clone(),
        hardware_id: a.hardware.clone(),
        model_instance_id: a.model_instance.clone(),
        results_sha256: publish::sha256_hex(bytes),
        results_file: a
            .results
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
        command: recorded_command(std::env::args()),
        now: chrono::Utc::now(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
    };
    let out = match publish::publish(&mut reg, &raw, &opts) {
        Ok(o) => o,
        Err(PublishError::Usage(m)) => return Err(crate::args::usage(anyhow::anyhow!(m))),
        Err(PublishError::Write(w)) => {
            crate::registry_cmd::print_write_problems(&a.registry, &w);
            return Err(w.into());
        }
        Err(e) => return Err(e.into()),
    };
    for (c, id) in &out.drafted {
        println!("drafted  {c} {id} (candidate stub: unknowns marked in facts)");
    }
    println!(
        "published speed-sweep {} ({} rows) -> {}",
        out.sweep_id,
        out.statuses.values().sum::<usize>(),
        reg.path_for(servebench_registry::Collection::SpeedSweep, &out.sweep_id)
            .display()
    );
    for (s, n) in &out.statuses {
        println!("  {n:>3} × {s}");
    }
    let problems = validate::validate_dir(&a.registry)?;
    Ok(crate::registry_cmd::report_problems(&a.registry, &problems))
}

/// The command line recorded in the sweep's provenance: the program as its file name
/// (`servebench`, not the developer's or CI's build path), the arguments as given.
fn recorded_command(args: impl Iterator<Item = String>) -> Vec<String> {
    args.enumerate()
        .map(|(i, a)| {
            if i == 0 {
                std::path::Path::new(&a)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or(a)
            } else {
                a
            }
        })
        .collect()
}
