//! `servebench registry validate | import | trust`: the local-ai-registry/v1 commands
//! (logic in `servebench-registry`; this module is flags and printing).

use servebench_results::escape_for_terminal as safe;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use servebench_registry::{import, trust, validate, Collection, Registry};

/// `servebench registry …`.
#[derive(Debug, Args)]
pub struct RegistryArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: RegistryCommand,
}

/// Registry subcommands.
#[derive(Debug, Subcommand)]
pub enum RegistryCommand {
    /// Check a registry directory: JSON Schemas, references, id grammars, sweep <-> recipe
    /// links, container and launch rules, trust-derived statuses, timestamps and unit
    /// plausibility. Prints one `path: rule: message` line per problem; exit 1 when any.
    Validate {
        /// Registry root (holds hardware/, model/, model-instance/, recipe/, speed-sweep/).
        dir: PathBuf,
    },
    /// Import API envelopes ({data, meta}) or bare records of any collection as canonical
    /// files; a sweep whose recipe is missing gets a drafted candidate recipe (and the stubs it
    /// needs) so every link resolves.
    Import {
        /// JSON files to import.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Registry root to write into (created when missing).
        #[arg(long)]
        registry: PathBuf,
    },
    /// Recompute every recipe status by the trust derivation and rewrite the ones that differ
    /// (with --check: only list them, exit 1 when any differ). A recipe whose id breaks the
    /// grammar is left as it is with a warning, the others are rewritten, and the exit is 1.
    Trust {
        /// Registry root.
        dir: PathBuf,
        /// Report only; write nothing.
        #[arg(long)]
        check: bool,
    },
    /// Serve a registry read-only: the /api/v1 JSON API and the site pages (search, record
    /// sheets with measured-speed tables and charts, hardware compare, sweep overlay).
    Serve(crate::registry_serve::ServeArgs),
}

/// Prints `problems` (one line each, paths under `dir`) and returns the exit code.
pub fn report_problems(dir: &Path, problems: &[servebench_registry::Problem]) -> ExitCode {
    for p in problems {
        println!(
            "{}/{}: {}: {}",
            crate::shown(dir),
            safe(&p.path),
            safe(&p.rule),
            safe(&p.message)
        );
    }
    if problems.is_empty() {
        eprintln!("{}: registry valid", crate::shown(dir));
        ExitCode::SUCCESS
    } else {
        let n = problems.len();
        eprintln!(
            "error: {}: {n} problem{}",
            crate::shown(dir),
            if n == 1 { "" } else { "s" }
        );
        ExitCode::FAILURE
    }
}

/// Words a refused registry write: the problems the write would have added (one
/// `path: rule: message` line each, on stderr); the caller returns the error (exit 1).
pub fn print_write_problems(dir: &Path, w: &servebench_registry::WriteError) {
    if let servebench_registry::WriteError::Invalid(problems) = w {
        for p in problems {
            eprintln!(
                "{}/{}: {}: {}",
                crate::shown(dir),
                safe(&p.path),
                safe(&p.rule),
                safe(&p.message)
            );
        }
    }
}

/// Runs a registry subcommand.
pub fn cmd_registry(a: RegistryArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        RegistryCommand::Validate { dir } => {
            let problems = validate::validate_dir(&dir).map_err(crate::args::usage)?;
            Ok(report_problems(&dir, &problems))
        }
        RegistryCommand::Import { files, registry } => {
            std::fs::create_dir_all(&registry)
                .with_context(|| format!("cannot create {}", crate::shown(&registry)))?;
            let mut reg = Registry::load(&registry)?;
            let before = validate::validate(&reg);
            let now = chrono::Utc::now();
            // Every file is staged in memory first; then all are written or none.
            let mut outcomes = Vec::new();
            for f in &files {
                let text = crate::read_input_file(f)?;
                // The cause says "nothing was written" when it is a refused write; say it once.
                let out =
                    import::stage_text(&mut reg, &text, &crate::shown(f), now).map_err(|e| {
                        let said = e.to_string().contains("nothing was written");
                        anyhow::Error::new(e).context(if said {
                            format!("{}: not imported", crate::shown(f))
                        } else {
                            format!("{}: not imported; nothing was written", crate::shown(f))
                        })
                    })?;
                outcomes.push(out);
            }
            if let Err(e) = import::commit(&reg, &before, &outcomes) {
                if let import::ImportError::Write(w) = &e {
                    print_write_problems(&registry, w);
                }
                return Err(e.into());
            }
            for out in &outcomes {
                for (c, id) in &out.imported {
                    println!("imported {c} {id}");
                }
                for (c, id) in &out.drafted {
                    println!("drafted  {c} {id} (candidate stub)");
                }
                for (c, id) in &out.updated {
                    println!("updated  {c} {id} (links the imported sweep)");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        RegistryCommand::Serve(a) => crate::registry_serve::cmd_serve(a),
        RegistryCommand::Trust { dir, check } => {
            let mut reg = Registry::load(&dir).map_err(crate::args::usage)?;
            // Files the loader could not take (unreadable, not UTF-8, a symlink out of the
            // registry) play no part in the derivation: say so rather than pass over them.
            for p in &reg.problems {
                eprintln!(
                    "{}: warning: {} skipped ({}: {})",
                    crate::shown(&dir),
                    safe(&p.path),
                    safe(&p.rule),
                    servebench_client::error::one_line(&p.message, 300)
                );
            }
            let skipped = reg.problems.len();
            // A recipe file (or the whole recipe directory) that did not load was not judged:
            // the exit says so (break-it round 10: `trust --check` passed with `recipe/` a link
            // out of the registry and nothing examined).
            let recipe_dirs: Vec<&str> = std::iter::once(Collection::Recipe.dir_name())
                .chain(Collection::Recipe.legacy_dir_names().iter().copied())
                .collect();
            let recipes_skipped = reg.problems.iter().any(|p| {
                let top = p.path.split(['/', '#']).next().unwrap_or("");
                recipe_dirs.contains(&top)
            });
            let (changes, refused) = if check {
                (trust::status_changes(&reg), Vec::new())
            } else {
                let applied =
                    trust::apply(&mut reg).inspect_err(|w| print_write_problems(&dir, w))?;
                (applied.rewritten, applied.refused)
            };
            for (c, why) in &refused {
                eprintln!(
                    "{}: warning: recipe {:?} not rewritten ({why}); its status stays {:?}",
                    crate::shown(&dir),
                    c.recipe_id,
                    c.stored
                );
            }
            for c in &changes {
                let why = if c.failures.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", c.failures.join("; "))
                };
                println!(
                    "{} recipe {}: {:?} -> {}{why}",
                    if check { "differs" } else { "rewrote" },
                    c.recipe_id,
                    c.stored,
                    c.derived.as_str()
                );
            }
            if changes.is_empty() && refused.is_empty() {
                eprintln!(
                    "{}: every recipe status matches the trust derivation{}",
                    crate::shown(&dir),
                    if skipped == 0 {
                        String::new()
                    } else {
                        format!(
                            " (of the files that loaded; {skipped} skipped, listed above; `servebench registry validate` reports them)"
                        )
                    }
                );
            }
            if recipes_skipped {
                eprintln!(
                    "{}: error: recipe files were skipped (listed above); their statuses were not judged",
                    crate::shown(&dir)
                );
            }
            Ok(
                if (check && !changes.is_empty()) || !refused.is_empty() || recipes_skipped {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                },
            )
        }
    }
}
