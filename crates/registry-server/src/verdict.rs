//! Row verdicts for display: the registry crate's [`RowVerdict`] grammar
//! (`<verdict>[-<qualifier>]*`, spec §2.7) with a name and a colour for badges and chart points.

use servebench_registry::{RowVerdict, Verdict as RegistryVerdict};

/// The verdict of a row status, or `Unknown` when missing or outside the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Known(RegistryVerdict),
    Unknown,
}

impl Verdict {
    /// The verdict of a row `status` ([`RowVerdict::parse`]).
    pub fn of(status: Option<&str>) -> Verdict {
        status
            .and_then(RowVerdict::parse)
            .map_or(Verdict::Unknown, |r| Verdict::Known(r.verdict))
    }

    /// The verdict word (`accepted`, `not-run`, ...), `unknown` when unknown.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Known(v) => v.as_str(),
            Verdict::Unknown => "unknown",
        }
    }

    /// Badge and chart-point colour (CSS).
    pub fn color(self) -> &'static str {
        use RegistryVerdict::*;
        match self {
            Verdict::Known(Accepted) => "#1a7f37",
            Verdict::Known(Rejected) => "#cf222e",
            Verdict::Known(Observed) => "#0969da",
            Verdict::Known(Reported) => "#8250df",
            Verdict::Known(Candidate) => "#bf8700",
            Verdict::Known(Blocked | NotRun) => "#57606a",
            Verdict::Known(MeasurementInvalid | InfraInvalid) => "#953800",
            Verdict::Unknown => "#8c959f",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        assert_eq!(
            Verdict::of(Some("accepted-cold-prefill")),
            Verdict::Known(RegistryVerdict::Accepted)
        );
        assert_eq!(
            Verdict::of(Some("rejected-ep4-saturation-regression")).name(),
            "rejected"
        );
        assert_eq!(Verdict::of(Some("not-run")).name(), "not-run");
        assert_eq!(Verdict::of(Some("notarun")), Verdict::Unknown);
        assert_eq!(Verdict::of(None), Verdict::Unknown);
    }
}
