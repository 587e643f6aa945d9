//! Copy verification, shared by the copy checks: every copy measurement records whether the
//! data arrived intact, and the check judges it for the GPU or the pair it was measured on. A
//! fast copy of wrong data fails; a copy nobody checked is not counted as intact.

use super::judge::finding;
use super::Measured;
use crate::evidence::{Fact, Finding, Status, Subject};

/// What a copy measurement's data check found, as its fact records it.
pub const INTACT: &str = "intact";
pub const WRONG: &str = "wrong data";
pub const NOT_CHECKED: &str = "not checked";

/// The fact name for `metric`'s data check: "p2p_read_data".
pub fn fact_name(metric: &str) -> String {
    format!("{metric}_data")
}

/// Record the data check of one copy measurement of `metric` about `subject` (a GPU, or the
/// pair the copy ran between).
pub fn record(m: &mut Measured, metric: &str, subject: Subject, verified: Option<bool>) {
    m.facts.push(Fact {
        name: fact_name(metric),
        subject,
        value: match verified {
            Some(true) => INTACT,
            Some(false) => WRONG,
            None => NOT_CHECKED,
        }
        .into(),
    });
}

/// The data judgements of a check whose figures are `figures` (metric, human name): a failure
/// for each copy that returned wrong data, named by `who` (the GPU or the pair), one pass when
/// every checked copy was intact, and one "not available here" when some copy was not checked.
pub fn findings(
    m: &Measured,
    figures: &[(&str, &str)],
    who: impl Fn(&str, &Subject) -> String,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let (mut intact, mut unchecked) = (0usize, 0usize);
    for (metric, human) in figures {
        let name = fact_name(metric);
        for f in m.facts.iter().filter(|f| f.name == name) {
            match f.value.as_str() {
                INTACT => intact += 1,
                NOT_CHECKED => unchecked += 1,
                _ => {
                    let w = who(metric, &f.subject);
                    out.push(
                        finding(
                            Status::Fail,
                            &w,
                            "wrong data",
                            "copied data intact",
                            format!("{w}: {human} copy returned wrong data"),
                        )
                        .on(metric),
                    );
                }
            }
        }
    }
    if out.is_empty() && intact > 0 {
        out.push(finding(
            Status::Pass,
            "node",
            format!("{intact} copies intact"),
            "copied data intact",
            format!("data intact after all {intact} copy measurements"),
        ));
    }
    if unchecked > 0 {
        out.push(finding(
            Status::Skip,
            "node",
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
        findings(&m, &FIGS, |_, s| s.describe())
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
        assert_eq!(f[0].subject, "GPU 1 -> GPU 3");
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
