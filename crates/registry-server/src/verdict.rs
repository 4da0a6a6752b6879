//! The row `status` grammar of speed sweeps: `<verdict>[-<qualifier>]*` (spec §2.7), e.g.
//! `accepted-cold-prefill`, `rejected-ep4-saturation-regression`, `not-run`.

/// The verdict part of a row status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    Rejected,
    Observed,
    Reported,
    Candidate,
    Blocked,
    NotRun,
    MeasurementInvalid,
    InfraInvalid,
    /// Missing, or a verdict outside the vocabulary.
    Unknown,
}

impl Verdict {
    /// Splits a row status into its verdict and its qualifiers (`accepted-cold-c1` →
    /// (Accepted, ["cold", "c1"])). Hyphenated verdicts (`not-run`, `measurement-invalid`,
    /// `infra-invalid`) are matched first.
    pub fn parse(status: Option<&str>) -> (Verdict, Vec<&str>) {
        let Some(s) = status else {
            return (Verdict::Unknown, Vec::new());
        };
        for (prefix, v) in [
            ("measurement-invalid", Verdict::MeasurementInvalid),
            ("infra-invalid", Verdict::InfraInvalid),
            ("not-run", Verdict::NotRun),
        ] {
            if let Some(rest) = s.strip_prefix(prefix) {
                if rest.is_empty() || rest.starts_with('-') {
                    return (v, rest.split('-').filter(|q| !q.is_empty()).collect());
                }
            }
        }
        let mut parts = s.split('-');
        let v = match parts.next().unwrap_or("") {
            "accepted" => Verdict::Accepted,
            "rejected" => Verdict::Rejected,
            "observed" => Verdict::Observed,
            "reported" => Verdict::Reported,
            "candidate" => Verdict::Candidate,
            "blocked" => Verdict::Blocked,
            _ => return (Verdict::Unknown, Vec::new()),
        };
        (v, parts.filter(|q| !q.is_empty()).collect())
    }

    /// The verdict's name as written in statuses.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::Rejected => "rejected",
            Verdict::Observed => "observed",
            Verdict::Reported => "reported",
            Verdict::Candidate => "candidate",
            Verdict::Blocked => "blocked",
            Verdict::NotRun => "not-run",
            Verdict::MeasurementInvalid => "measurement-invalid",
            Verdict::InfraInvalid => "infra-invalid",
            Verdict::Unknown => "unknown",
        }
    }

    /// The chart and badge colour of the verdict (CSS colour).
    pub fn color(self) -> &'static str {
        match self {
            Verdict::Accepted => "#1a7f37",
            Verdict::Rejected => "#cf222e",
            Verdict::Observed => "#0969da",
            Verdict::Reported => "#8250df",
            Verdict::Candidate => "#bf8700",
            Verdict::Blocked | Verdict::NotRun => "#57606a",
            Verdict::MeasurementInvalid | Verdict::InfraInvalid => "#953800",
            Verdict::Unknown => "#8c959f",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Verdict;

    #[test]
    fn grammar() {
        assert_eq!(
            Verdict::parse(Some("accepted-cold-prefill")),
            (Verdict::Accepted, vec!["cold", "prefill"])
        );
        assert_eq!(
            Verdict::parse(Some("rejected-ep4-saturation-regression")).0,
            Verdict::Rejected
        );
        assert_eq!(Verdict::parse(Some("not-run")), (Verdict::NotRun, vec![]));
        assert_eq!(
            Verdict::parse(Some("measurement-invalid")).0,
            Verdict::MeasurementInvalid
        );
        assert_eq!(Verdict::parse(Some("notarun")).0, Verdict::Unknown);
        assert_eq!(Verdict::parse(Some("")).0, Verdict::Unknown);
        assert_eq!(Verdict::parse(None).0, Verdict::Unknown);
    }
}
