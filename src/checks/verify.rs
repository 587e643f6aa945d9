//! Copy verification, shared by the copy checks: every copy measurement records whether the
//! data arrived intact, and the check judges it for the GPU or the pair it was measured on. A
//! fast copy of wrong data fails; a copy nobody checked is not counted as intact.

use super::judge::finding;
use super::Measured;
use crate::evidence::{CopyData, Fact, FactValue, Finding, Status, Subject};

/// The fact name for `metric`'s data check: "p2p_read_data".
pub fn fact_name(metric: &str) -> String {
    format!("{metric}_data")
}

/// Record the data check of one copy measurement of `metric` about `subject` (a GPU, or the
/// pair the copy ran between).
pub fn record(m: &mut Measured, metric: &str, subject: Subject, verified: Option<bool>) {
    m.facts.push(Fact::new(
        fact_name(metric),
        subject,
        FactValue::Copy(match verified {
            Some(true) => CopyData::Intact,
            Some(false) => CopyData::Wrong,
            None => CopyData::NotChecked,
        }),
    ));
}

/// The data judgements of a check whose figures are `figures` (metric, human name): a failure
/// for each copy that returned wrong data, about the GPU or the pair it ran on, one pass when
/// every checked copy was intact, and one "not available here" when some copy was not checked
/// (or its record is not a copy check at all).
pub fn findings(m: &Measured, figures: &[(&str, &str)]) -> Vec<Finding> {
    let mut out = Vec::new();
    let (mut intact, mut unchecked) = (0usize, 0usize);
    for (metric, human) in figures {
        let name = fact_name(metric);
        for f in m.facts.iter().filter(|f| f.name == name) {
            match f.value {
                FactValue::Copy(CopyData::Intact) => intact += 1,
                FactValue::Copy(CopyData::Wrong) => {
                    let w = f.subject.of_metric(metric);
                    let reason = format!("{}: {human} copy returned wrong data", w.describe());
                    out.push(
                        finding(Status::Fail, w, "wrong data", "copied data intact", reason)
                            .on(metric),
                    );
                }
                _ => unchecked += 1,
            }
        }
    }
    if out.is_empty() && intact > 0 {
        out.push(finding(
            Status::Pass,
            Subject::node(),
            format!("{intact} copies intact"),
            "copied data intact",
            format!("data intact after all {intact} copy measurements"),
        ));
    }
    if unchecked > 0 {
        out.push(finding(
            Status::Skip,
            Subject::node(),
            "not available here",
            "copied data intact",
            format!(
                "not available here: the data of {unchecked} copy measurements was not checked"
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIGS: [(&str, &str); 2] = [("p2p_read", "peer read"), ("p2p_write", "peer write")];

    fn judged(checks: &[(&str, Subject, Option<bool>)]) -> Vec<Finding> {
        let mut m = Measured::default();
        for (metric, s, v) in checks {
            record(&mut m, metric, s.clone(), *v);
        }
        findings(&m, &FIGS)
    }

    #[test]
    fn intact_copies_pass_once() {
        let f = judged(&[
            ("p2p_read", Subject::pair(0, 1), Some(true)),
            ("p2p_write", Subject::pair(1, 0), Some(true)),
        ]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, Status::Pass);
        assert_eq!(f[0].reason, "data intact after all 2 copy measurements");
    }

    #[test]
    fn wrong_data_fails_against_the_pair_it_was_copied_between() {
        let f = judged(&[
            ("p2p_read", Subject::pair(0, 1), Some(true)),
            ("p2p_write", Subject::pair(1, 3), Some(false)),
        ]);
        assert_eq!(f.len(), 1, "no pass beside a failure: {f:?}");
        assert_eq!(f[0].status, Status::Fail);
        assert_eq!(f[0].subject, Subject::pair(1, 3));
        assert_eq!(f[0].metric.as_deref(), Some("p2p_write"));
        assert_eq!(
            f[0].reason,
            "GPU 1 -> GPU 3: peer write copy returned wrong data"
        );
    }

    #[test]
    fn an_unchecked_copy_is_not_intact() {
        let f = judged(&[("p2p_read", Subject::pair(0, 1), None)]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, Status::Skip);
        let f = judged(&[
            ("p2p_read", Subject::pair(0, 1), None),
            ("p2p_read", Subject::pair(1, 0), Some(true)),
        ]);
        let st: Vec<Status> = f.iter().map(|x| x.status).collect();
        assert_eq!(st, vec![Status::Pass, Status::Skip]);
        // A metric the check does not judge is not counted.
        assert!(judged(&[("h2d", Subject::gpu(0), Some(false))]).is_empty());
    }
}
