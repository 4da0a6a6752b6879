//! The run plan: which cells run, in which order, and which are skipped before any request.
//!
//! Matrix order follows the seed tool (`llm-decode-bench-spec.md` §3.7 step 6): first the column
//! C = first level for every context (baseline), then the row ctx = first context for the
//! remaining levels (scaling), then the remaining cells row by row.

use crate::error::ConfigError;

/// One planned cell of the decode matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CellSpec {
    /// Concurrency C: streams kept in flight.
    pub concurrency: u64,
    /// Context label: target prompt tokens (template included).
    pub context: u64,
}

/// Parses a context list such as `0,16k,1.5k,4096` (`k` = ×1024) into tokens.
///
/// Errors: an empty list, an empty item, a negative or non-numeric value, a value over 2^31.
pub fn parse_contexts(s: &str) -> Result<Vec<u64>, ConfigError> {
    let mut out = Vec::new();
    for item in s.split(',') {
        out.push(parse_context(item)?);
    }
    if out.is_empty() {
        return Err(ConfigError::new("empty context list"));
    }
    Ok(out)
}

/// Parses one context value (`16k` = 16384, `1.5k` = 1536, `512`).
pub fn parse_context(item: &str) -> Result<u64, ConfigError> {
    let t = item.trim();
    if t.is_empty() {
        return Err(ConfigError::new("empty context value in list"));
    }
    let (num, mult) = match t.strip_suffix(['k', 'K']) {
        Some(n) => (n, 1024.0),
        None => (t, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| {
        ConfigError::new(format!(
            "invalid context value {t:?} (expected e.g. 0, 512, 16k)"
        ))
    })?;
    if !v.is_finite() || v < 0.0 {
        return Err(ConfigError::new(format!(
            "invalid context value {t:?} (must be ≥ 0)"
        )));
    }
    let tokens = (v * mult).round();
    if tokens > (1u64 << 31) as f64 {
        return Err(ConfigError::new(format!("context {t:?} is too large")));
    }
    Ok(tokens as u64)
}

/// Parses a concurrency list such as `1,2,4,8` (each ≥ 1).
pub fn parse_concurrency(s: &str) -> Result<Vec<u64>, ConfigError> {
    let mut out = Vec::new();
    for item in s.split(',') {
        let t = item.trim();
        let v: u64 = t.parse().map_err(|_| {
            ConfigError::new(format!(
                "invalid concurrency value {t:?} (expected integers ≥ 1, e.g. 1,2,4)"
            ))
        })?;
        if v == 0 {
            return Err(ConfigError::new("concurrency values must be ≥ 1"));
        }
        if v > 100_000 {
            return Err(ConfigError::new(format!(
                "concurrency {v} is too large (max 100000)"
            )));
        }
        out.push(v);
    }
    Ok(out)
}

/// Removes duplicates while keeping the first occurrence's position.
pub fn dedup_keep_order(v: &[u64]) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::with_capacity(v.len());
    for &x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// Cells in the seed tool's order (see the module docs).
pub fn matrix_order(concurrency: &[u64], contexts: &[u64]) -> Vec<CellSpec> {
    let cs = dedup_keep_order(concurrency);
    let xs = dedup_keep_order(contexts);
    let mut out = Vec::with_capacity(cs.len() * xs.len());
    let (Some(&c0), Some(&x0)) = (cs.first(), xs.first()) else {
        return out;
    };
    for &x in &xs {
        out.push(CellSpec {
            concurrency: c0,
            context: x,
        });
    }
    for &c in cs.iter().skip(1) {
        out.push(CellSpec {
            concurrency: c,
            context: x0,
        });
    }
    for &x in xs.iter().skip(1) {
        for &c in cs.iter().skip(1) {
            out.push(CellSpec {
                concurrency: c,
                context: x,
            });
        }
    }
    out
}

/// Automatic readiness timeout for a context (seed §3.9 step 5, policy string
/// [`TIMEOUT_POLICY`]): ≥ 128k → 180 s, ≥ 64k → 120 s, otherwise 60 s. The clock starts after the
/// cell's scout request has finished (servebench fixes the seed's bug 8.2.8).
pub fn auto_ready_timeout_s(context: u64) -> f64 {
    if context >= 128 * 1024 {
        180.0
    } else if context >= 64 * 1024 {
        120.0
    } else {
        60.0
    }
}

/// The readiness-timeout policy text recorded in `metadata.cell_warmup_timeout_policy`.
pub const TIMEOUT_POLICY: &str = "<=32k:60s,64k:120s,>=128k:180s when override is 0";

/// Why a cell is skipped before any request is sent, if it is.
#[derive(Clone, Debug, PartialEq)]
pub enum PreSkip {
    /// ctx + max_tokens exceeds the model length.
    Context {
        /// Human-readable reason.
        reason: String,
    },
    /// C × (ctx + max_tokens) exceeds the KV budget.
    Capacity {
        /// Human-readable reason.
        reason: String,
        /// Tokens the cell would need, C × (ctx + max_tokens).
        needed: u64,
        /// Deficit in the seed's compact format (`12k`, `1.50M`).
        deficit: String,
    },
}

/// Decides whether a cell must be skipped before it runs.
///
/// * `max_model_len`: the server's maximum sequence length (prompt + output), when known.
/// * `kv_budget`: KV-cache capacity in tokens, when known (0 = unknown).
pub fn pre_skip(
    cell: CellSpec,
    max_tokens: u64,
    max_model_len: Option<u64>,
    kv_budget: u64,
) -> Option<PreSkip> {
    let per_request = cell.context + max_tokens;
    if let Some(len) = max_model_len {
        if per_request > len {
            return Some(PreSkip::Context {
                reason: format!(
                    "context {} + max_tokens {} = {} exceeds the model's max_model_len {}",
                    cell.context, max_tokens, per_request, len
                ),
            });
        }
    }
    if kv_budget > 0 {
        let needed = cell.concurrency.saturating_mul(per_request);
        if needed > kv_budget {
            let deficit = compact_tokens(needed - kv_budget);
            return Some(PreSkip::Capacity {
                reason: format!(
                    "C={} × (ctx {} + max_tokens {}) = {} tokens exceeds the KV budget {} by {}",
                    cell.concurrency, cell.context, max_tokens, needed, kv_budget, deficit
                ),
                needed,
                deficit,
            });
        }
    }
    None
}

/// Compact token count as the seed prints deficits: `950`, `12k`, `1.50M`.
pub fn compact_tokens(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{:.2}M", n as f64 / 1e6)
    } else if n >= 1_000 {
        format!("{}k", (n as f64 / 1e3).round() as u64)
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_with_k_suffix() {
        assert_eq!(
            parse_contexts("0,16k,32K,1.5k,4096").unwrap(),
            vec![0, 16384, 32768, 1536, 4096]
        );
        assert!(parse_contexts("0,,1").is_err());
        assert!(parse_contexts("-1").is_err());
        assert!(parse_contexts("abc").is_err());
        assert!(parse_contexts("nan").is_err());
    }

    #[test]
    fn concurrency_list() {
        assert_eq!(parse_concurrency("1, 2,4").unwrap(), vec![1, 2, 4]);
        assert!(parse_concurrency("0").is_err());
        assert!(parse_concurrency("1,x").is_err());
    }

    #[test]
    fn seed_matrix_order() {
        let cells = matrix_order(&[1, 2, 4], &[0, 512, 1024]);
        let got: Vec<(u64, u64)> = cells.iter().map(|c| (c.concurrency, c.context)).collect();
        assert_eq!(
            got,
            vec![
                (1, 0),
                (1, 512),
                (1, 1024),
                (2, 0),
                (4, 0),
                (2, 512),
                (4, 512),
                (2, 1024),
                (4, 1024)
            ]
        );
        assert_eq!(matrix_order(&[1, 1], &[0]).len(), 1);
    }

    #[test]
    fn skip_rules() {
        let c = CellSpec {
            concurrency: 4,
            context: 2000,
        };
        assert!(matches!(
            pre_skip(c, 100, Some(2048), 0),
            Some(PreSkip::Context { .. })
        ));
        assert_eq!(pre_skip(c, 48, Some(2048), 0), None);
        match pre_skip(c, 48, Some(2048), 8000) {
            Some(PreSkip::Capacity {
                needed, deficit, ..
            }) => {
                assert_eq!(needed, 8192);
                assert_eq!(deficit, "192");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(compact_tokens(12_345), "12k");
        assert_eq!(compact_tokens(1_500_000), "1.50M");
    }

    #[test]
    fn timeouts() {
        assert_eq!(auto_ready_timeout_s(32768), 60.0);
        assert_eq!(auto_ready_timeout_s(65536), 120.0);
        assert_eq!(auto_ready_timeout_s(131072), 180.0);
    }
}
