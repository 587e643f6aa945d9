//! The report's account of the re-measure policy: for each check that was measured more than
//! once, or that a miss could not send back to measure, every attempt and which one decided.

use crate::evidence::{Evidence, Status};
use crate::report::view::class;
use serde::Serialize;

/// A check under the re-measure policy whose first attempt did not simply decide.
#[derive(Debug, Serialize, PartialEq)]
pub struct RemeasuredCheck {
    pub id: String,
    pub title: String,
    /// Attempts allowed in all.
    pub allowed: u32,
    /// The attempt that decided (1-based).
    pub decided_by: u32,
    /// Why a miss was not measured again although attempts remained.
    pub stopped: Option<String>,
    pub attempts: Vec<AttemptRow>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct AttemptRow {
    pub attempt: u32,
    pub status: String,
    pub class: String,
    pub summary: String,
    /// This attempt decided the check.
    pub decided: bool,
}

/// The checks that took more than one attempt, or stopped after a miss with attempts left.
pub fn build(ev: &Evidence) -> Vec<RemeasuredCheck> {
    ev.checks
        .iter()
        .filter_map(|c| {
            let r = c.remeasure.as_ref()?;
            if r.earlier.is_empty() && r.stopped.is_none() {
                return None;
            }
            let row = |attempt: u32, status: Status, summary: &str, decided: bool| AttemptRow {
                attempt,
                status: status.label().into(),
                class: class(status),
                summary: summary.to_string(),
                decided,
            };
            let mut attempts: Vec<AttemptRow> = r
                .earlier
                .iter()
                .map(|a| row(a.attempt, a.status, &a.summary, false))
                .collect();
            attempts.push(row(r.decided_by, c.status, &c.summary, true));
            Some(RemeasuredCheck {
                id: c.id.clone(),
                title: c.title.clone(),
                allowed: r.allowed,
                decided_by: r.decided_by,
                stopped: r.stopped.clone(),
                attempts,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{Attempt, Remeasure};

    #[test]
    fn every_attempt_is_listed_and_the_last_one_decides() {
        let mut ev = crate::testutil::simulated("l40s-pcie-4", &[]);
        assert!(build(&ev).is_empty(), "no check was re-measured");
        let c = ev
            .checks
            .iter_mut()
            .find(|c| c.id == "p2p_bandwidth")
            .unwrap();
        let miss = |attempt| Attempt {
            attempt,
            status: Status::Fail,
            summary: format!("miss {attempt}"),
            metrics: vec![],
            facts: vec![],
            findings: vec![],
            duration_s: 0.0,
        };
        c.remeasure = Some(Remeasure {
            allowed: 3,
            decided_by: 3,
            stopped: None,
            earlier: vec![miss(1), miss(2)],
        });
        let rows = build(&ev);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(
            (r.id.as_str(), r.allowed, r.decided_by),
            ("p2p_bandwidth", 3, 3)
        );
        let seen: Vec<(u32, &str, bool)> = r
            .attempts
            .iter()
            .map(|a| (a.attempt, a.status.as_str(), a.decided))
            .collect();
        assert_eq!(
            seen,
            [(1, "FAIL", false), (2, "FAIL", false), (3, "PASS", true)]
        );
        assert_eq!(r.attempts[0].summary, "miss 1");
    }

    #[test]
    fn a_first_attempt_that_decided_alone_is_not_listed_unless_it_stopped() {
        let mut ev = crate::testutil::simulated("l40s-pcie-4", &[]);
        let c = ev
            .checks
            .iter_mut()
            .find(|c| c.id == "p2p_bandwidth")
            .unwrap();
        c.remeasure = Some(Remeasure {
            allowed: 2,
            decided_by: 1,
            stopped: None,
            earlier: vec![],
        });
        assert!(build(&ev).is_empty());
        let c = ev
            .checks
            .iter_mut()
            .find(|c| c.id == "p2p_bandwidth")
            .unwrap();
        c.remeasure.as_mut().unwrap().stopped = Some("wrong data".into());
        let rows = build(&ev);
        assert_eq!(rows[0].stopped.as_deref(), Some("wrong data"));
        assert_eq!(rows[0].attempts.len(), 1);
    }
}
