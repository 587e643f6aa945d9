//! Threshold judgements shared by the checks: absolute limits and the in-node outlier rule.

use crate::evidence::{Finding, Status, Subject};
use crate::suite::Limit;

/// "12.3", "396", "0.0123": a figure rounded for people.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.2}")
    } else if a == 0.0 {
        "0".into()
    } else {
        format!("{v:.3e}")
    }
}

/// A figure and the limit it is compared with, rounded so that two different numbers never read
/// the same ("51.96 is below 52" and not "52.0 is below 52.0"): `fmt_num` first, then more
/// decimals until they differ (at most 6). Equal numbers read the same.
pub fn fmt_apart(value: f64, limit: f64) -> (String, String) {
    let (a, b) = (fmt_num(value), fmt_num(limit));
    if a != b || value == limit || !value.is_finite() || !limit.is_finite() {
        return (a, b);
    }
    for d in 1..=6 {
        let (a, b) = (format!("{value:.d$}"), format!("{limit:.d$}"));
        if a != b {
            return (a, b);
        }
    }
    (format!("{value:e}"), format!("{limit:e}"))
}

/// "52.0 GB/s", or "3" for a figure without a unit.
fn with_unit(v: &str, unit: &str) -> String {
    if unit.is_empty() {
        v.to_string()
    } else {
        format!("{v} {unit}")
    }
}

/// "GPU 3", "GPUs 0, 1, 2".
pub fn gpu_list(ids: &[usize]) -> String {
    let n = ids
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if ids.len() == 1 {
        format!("GPU {n}")
    } else {
        format!("GPUs {n}")
    }
}

/// "fail < 48, warn < 52 GB/s"; "no limit" when no bound could be crossed (a floor of 0).
pub fn describe_limit(l: &Limit, unit: &str) -> String {
    let l = &l.judging();
    let mut parts = Vec::new();
    if let Some(v) = l.fail_below {
        parts.push(format!("fail < {}", fmt_num(v)));
    }
    if let Some(v) = l.warn_below {
        parts.push(format!("warn < {}", fmt_num(v)));
    }
    if let Some(v) = l.fail_above {
        parts.push(format!("fail > {}", fmt_num(v)));
    }
    if let Some(v) = l.warn_above {
        parts.push(format!("warn > {}", fmt_num(v)));
    }
    if parts.is_empty() {
        "no limit".into()
    } else {
        format!("{} {unit}", parts.join(", "))
            .trim_end()
            .to_string()
    }
}

/// Judge `value` against `limit`. None when the limit sets no bound a figure could cross (none,
/// or only a floor of 0: [`Limit::judging`]): a bound no figure could cross judges nothing.
pub fn judge(
    subject: &Subject,
    what: &str,
    value: f64,
    unit: &str,
    limit: &Limit,
) -> Option<Finding> {
    let limit = &limit.judging();
    if limit.is_empty() {
        return None;
    }
    let who = subject.describe();
    let found = format!("{} {unit}", fmt_num(value)).trim_end().to_string();
    let expected = describe_limit(limit, unit);
    let (status, reason) = if !value.is_finite() {
        (Status::Fail, format!("{who}: {what} could not be computed"))
    } else if limit.fail_below.is_some_and(|f| value < f) {
        (Status::Fail, {
            let (v, l) = fmt_apart(value, limit.fail_below.unwrap_or(0.0));
            format!(
                "{who}: {what} {} is below the floor of {}",
                with_unit(&v, unit),
                with_unit(&l, unit)
            )
        })
    } else if limit.fail_above.is_some_and(|f| value > f) {
        (Status::Fail, {
            let (v, l) = fmt_apart(value, limit.fail_above.unwrap_or(0.0));
            format!(
                "{who}: {what} {} is above the ceiling of {}",
                with_unit(&v, unit),
                with_unit(&l, unit)
            )
        })
    } else if limit.warn_below.is_some_and(|f| value < f) {
        (Status::Warn, {
            let (v, l) = fmt_apart(value, limit.warn_below.unwrap_or(0.0));
            format!(
                "{who}: {what} {} is below the warning level of {}",
                with_unit(&v, unit),
                with_unit(&l, unit)
            )
        })
    } else if limit.warn_above.is_some_and(|f| value > f) {
        (Status::Warn, {
            let (v, l) = fmt_apart(value, limit.warn_above.unwrap_or(0.0));
            format!(
                "{who}: {what} {} is above the warning level of {}",
                with_unit(&v, unit),
                with_unit(&l, unit)
            )
        })
    } else {
        (Status::Pass, format!("{who}: {what} {found} within limits"))
    };
    Some(Finding {
        status,
        subject: subject.clone(),
        found,
        expected,
        reason,
        metric: None,
        info: false,
        limit: Some(*limit),
    })
}

/// The in-node outlier rule: each item must be within `pct` percent of the node's median, on
/// the bad side only (`higher_is_better`: bandwidth; otherwise latency). Catches the slow but
/// otherwise healthy GPU that passes every absolute floor. Returns a failure per item out of
/// line (a figure that is not a number, NaN or infinite, or that is 0 or less, cannot be within
/// anything and fails too) and the node's line: a pass where every item is within, information
/// where some failed (they are the judgements). Where one figure was measured there is nothing
/// to compare it with, and that is said (information, not a judgement).
pub fn outliers(
    items: &[(Subject, f64)],
    pct: f64,
    higher_is_better: bool,
    what: &str,
    unit: &str,
) -> Vec<Finding> {
    outliers_among(items, pct, higher_is_better, what, unit, "the node median")
}

/// The outlier rule within each class of like items (GPU pairs of one path class: NV18, NODE,
/// SYS...): a pair is compared with pairs that travel the same way, so that the slower but
/// healthy cross-socket pairs of a PCIe box are not taken for faulty ones. A class of one item
/// has nothing to be compared with (said, as information).
pub fn outliers_by_class(
    items: &[(Subject, String, f64)],
    pct: f64,
    higher_is_better: bool,
    what: &str,
    unit: &str,
) -> Vec<Finding> {
    let mut classes: Vec<&str> = items.iter().map(|(_, c, _)| c.as_str()).collect();
    classes.sort_unstable();
    classes.dedup();
    let single = classes.len() == 1;
    let mut out = Vec::new();
    for class in classes {
        let of: Vec<(Subject, f64)> = items
            .iter()
            .filter(|(_, c, _)| c == class)
            .map(|(s, _, v)| (s.clone(), *v))
            .collect();
        let population = if single {
            "the node median".to_string()
        } else {
            format!("the median of {class} pairs")
        };
        out.extend(outliers_among(
            &of,
            pct,
            higher_is_better,
            what,
            unit,
            &population,
        ));
    }
    out
}

/// The node as a whole against what a healthy node typically measures: its median under
/// `typical_fraction` of `limit.typical` (over `typical / fraction` for a latency) is a warning.
/// None when the limit states no typical value or nothing was measured.
pub fn typical(
    values: &[f64],
    limit: &Limit,
    higher_is_better: bool,
    what: &str,
    unit: &str,
) -> Option<Finding> {
    let t = limit.typical?;
    let frac = limit
        .typical_fraction
        .unwrap_or(crate::suite::DEFAULT_TYPICAL_FRACTION);
    let vals: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if vals.is_empty() {
        return None;
    }
    let med = crate::evidence::median(&vals);
    let share = med / t;
    let (bad, bound) = if higher_is_better {
        (
            share < frac,
            format!(
                ">= {} of typical {}",
                fmt_num(frac),
                with_unit(&fmt_num(t), unit)
            ),
        )
    } else {
        (
            share > 1.0 / frac,
            format!(
                "<= typical {} / {}",
                with_unit(&fmt_num(t), unit),
                fmt_num(frac)
            ),
        )
    };
    let found = with_unit(&fmt_num(med), unit);
    Some(Finding {
        status: if bad { Status::Warn } else { Status::Pass },
        subject: Subject::node(),
        found: found.clone(),
        expected: bound,
        reason: if bad {
            format!(
                "node: median {what} {found} is {:.0}% of the typical {} (warned under {:.0}%{}): \
                 every figure may agree with the others and still be slow",
                share * 100.0,
                with_unit(&fmt_num(t), unit),
                frac * 100.0,
                if higher_is_better { "" } else { " in speed" }
            )
        } else {
            format!(
                "node: median {what} {found} is {:.0}% of the typical {}",
                share * 100.0,
                with_unit(&fmt_num(t), unit)
            )
        },
        metric: None,
        info: false,
        limit: None,
    })
}

/// The outlier rule against `median` ("the node median", "the median of SYS pairs").
fn outliers_among(
    items: &[(Subject, f64)],
    pct: f64,
    higher_is_better: bool,
    what: &str,
    unit: &str,
    median: &str,
) -> Vec<Finding> {
    let mut out: Vec<Finding> = items
        .iter()
        .filter(|(_, v)| !v.is_finite())
        .map(|(subject, v)| Finding {
            status: Status::Fail,
            subject: subject.clone(),
            found: format!("{} {unit}", fmt_num(*v)).trim_end().to_string(),
            expected: format!("within {}% of {median}", fmt_num(pct)),
            reason: format!("{}: {what} could not be computed", subject.describe()),
            metric: None,
            info: false,
            limit: None,
        })
        .collect();
    let vals: Vec<f64> = items
        .iter()
        .map(|x| x.1)
        .filter(|v| v.is_finite())
        .collect();
    if vals.len() < 2 {
        if let ([(subject, v)], true) = (items, out.is_empty()) {
            out.push(Finding {
                status: Status::Pass,
                subject: subject.clone(),
                found: format!("{} {unit}", fmt_num(*v)).trim_end().to_string(),
                expected: format!("within {}% of {median}", fmt_num(pct)),
                reason: format!(
                    "{}: {what} is the only figure, so the outlier rule ({}% of {median}) has \
                     nothing to compare it with",
                    subject.describe(),
                    fmt_num(pct)
                ),
                metric: None,
                info: true,
                limit: None,
            });
        }
        return out;
    }
    let med = crate::evidence::median(&vals);
    let within = format!(
        "within {}% of {median} {}",
        fmt_num(pct),
        with_unit(&fmt_num(med), unit)
    );
    if med <= 0.0 {
        // Half the figures or more are 0 (or less): no bandwidth, and no latency, is; each
        // such figure fails, as one below a positive median would.
        out.extend(
            items
                .iter()
                .filter(|(_, v)| v.is_finite() && *v <= 0.0)
                .map(|(subject, v)| Finding {
                    status: Status::Fail,
                    subject: subject.clone(),
                    found: with_unit(&fmt_num(*v), unit),
                    expected: within.clone(),
                    reason: format!(
                        "{}: {what} is {}, which leaves {median} at {} (outlier rule: nothing \
                         to compare with)",
                        subject.describe(),
                        with_unit(&fmt_num(*v), unit),
                        with_unit(&fmt_num(med), unit)
                    ),
                    metric: None,
                    info: false,
                    limit: None,
                }),
        );
    } else {
        out.extend(
            items
                .iter()
                .filter(|(_, v)| v.is_finite())
                .filter_map(|(subject, v)| {
                    let dev = (v - med) / med * 100.0;
                    let bad = if higher_is_better {
                        dev < -pct
                    } else {
                        dev > pct
                    };
                    bad.then(|| Finding {
                        status: Status::Fail,
                        subject: subject.clone(),
                        found: format!("{} {unit}", fmt_num(*v)),
                        expected: format!(
                            "within {}% of {median} {} {unit}",
                            fmt_num(pct),
                            fmt_num(med)
                        ),
                        reason: format!(
                    "{}: {what} {} {unit} is {:.1}% {} {median} of {} {unit} (outlier rule: {}%)",
                    subject.describe(),
                    fmt_num(*v),
                    dev.abs(),
                    if dev < 0.0 { "below" } else { "above" },
                    fmt_num(med),
                    fmt_num(pct)
                ),
                        metric: None,
                        info: false,
                        limit: None,
                    })
                }),
        );
    }
    // The node's judgement of the rule: a pass where every figure is within; where some are
    // not, those fail and the node's line is information, so that the rule is seen to have
    // been applied either way (and `diff` finds the same finding in both runs).
    let out_of_line = out.len();
    out.push(Finding {
        status: Status::Pass,
        subject: Subject::node(),
        found: format!("{} of {} within", items.len() - out_of_line, items.len()),
        expected: within.clone(),
        reason: if out_of_line == 0 {
            format!("node: {what}: all {} {within} (outlier rule)", items.len())
        } else {
            format!(
                "node: {what}: {out_of_line} of {} not {within} (outlier rule: they fail)",
                items.len()
            )
        },
        metric: None,
        info: out_of_line > 0,
        limit: None,
    });
    out
}

/// A reading of `sub` the platform did not give, which a judgement needed (`expected`): "not
/// available here: {reading} of {subject}", keyed by the reading. Never a pass or a failure.
pub fn not_available(
    sub: &Subject,
    r: crate::inventory::Reading,
    expected: impl Into<String>,
) -> Finding {
    finding(
        Status::Skip,
        sub.clone(),
        "not available here",
        expected,
        format!("not available here: {} of {}", r.describe(), sub.describe()),
    )
    .on(r.key())
}

pub fn finding(
    status: Status,
    subject: Subject,
    found: impl Into<String>,
    expected: impl Into<String>,
    reason: impl Into<String>,
) -> Finding {
    Finding {
        status,
        subject,
        found: found.into(),
        expected: expected.into(),
        reason: reason.into(),
        metric: None,
        info: false,
        limit: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(fb: Option<f64>, wb: Option<f64>) -> Limit {
        Limit {
            fail_below: fb,
            warn_below: wb,
            ..Default::default()
        }
    }

    /// A floor of 0 is no bound (no figure is below it): alone it makes no finding, beside a
    /// ceiling only the ceiling is judged, and the text says what was held.
    #[test]
    fn a_floor_of_zero_judges_nothing() {
        let at = |v: f64, l: &Limit| judge(&Subject::gpu(0), "x", v, "u", l);
        let zero = lim(Some(0.0), Some(0.0));
        for v in [0.0, 1.0, 1e9] {
            assert_eq!(at(v, &zero), None, "{v}");
        }
        assert_eq!(describe_limit(&zero, "u"), "no limit");
        let half = lim(Some(0.0), Some(5.0));
        let f = at(4.0, &half).unwrap();
        assert_eq!(f.status, Status::Warn);
        assert_eq!(f.expected, "warn < 5.00 u");
        assert_eq!(f.limit, Some(lim(None, Some(5.0))));
        let capped = Limit {
            fail_above: Some(10.0),
            ..lim(Some(0.0), None)
        };
        assert_eq!(at(11.0, &capped).unwrap().status, Status::Fail);
        assert_eq!(at(0.0, &capped).unwrap().status, Status::Pass);
        assert_eq!(describe_limit(&capped, "u"), "fail > 10.0 u");
        // The smallest floor that is a floor still judges.
        assert_eq!(
            at(0.0, &lim(Some(f64::MIN_POSITIVE), None)).unwrap().status,
            Status::Fail
        );
    }

    /// Each bound holds at its value exactly and breaks just past it, for floors, ceilings and
    /// both warning levels; the finding carries the limit it was held to.
    #[test]
    fn a_figure_at_its_limit_holds_and_one_just_past_it_does_not() {
        let status = |v: f64, l: &Limit| judge(&Subject::gpu(0), "x", v, "u", l).unwrap().status;
        let floors = lim(Some(48.0), Some(52.0));
        assert_eq!(status(48.0, &floors), Status::Warn);
        assert_eq!(status(47.99, &floors), Status::Fail);
        assert_eq!(status(52.0, &floors), Status::Pass);
        assert_eq!(status(51.99, &floors), Status::Warn);
        let ceilings = Limit {
            fail_above: Some(10.0),
            warn_above: Some(6.0),
            ..Default::default()
        };
        assert_eq!(status(10.0, &ceilings), Status::Warn);
        assert_eq!(status(10.01, &ceilings), Status::Fail);
        assert_eq!(status(6.0, &ceilings), Status::Pass);
        assert_eq!(status(6.01, &ceilings), Status::Warn);
        assert_eq!(status(2.0, &ceilings), Status::Pass);
        let f = judge(&Subject::gpu(0), "x", 7.0, "us", &ceilings).unwrap();
        assert_eq!(f.limit, Some(ceilings));
        assert_eq!(f.expected, "fail > 10.0, warn > 6.00 us");
        assert_eq!(
            judge(&Subject::gpu(0), "x", 50.0, "GB/s", &floors)
                .unwrap()
                .expected,
            "fail < 48.0, warn < 52.0 GB/s"
        );
        assert!(
            f.reason.contains("above the warning level of 6"),
            "{}",
            f.reason
        );
    }

    /// The failures among an outlier rule's findings.
    fn fails(f: Vec<Finding>) -> Vec<Finding> {
        f.into_iter().filter(|x| x.status == Status::Fail).collect()
    }

    /// Whether the outlier rule failed `n` items: `n` failures, then the node's line saying
    /// so, which is information (the failures are the judgements).
    fn failed(f: &[Finding], n: usize) -> bool {
        let Some((node, items)) = f.split_last() else {
            return false;
        };
        items.len() == n
            && items.iter().all(|x| x.status == Status::Fail && !x.info)
            && node.info
            && node.subject == Subject::node()
            && node.reason.ends_with("(outlier rule: they fail)")
    }

    /// Whether the outlier rule held: one judgement of the node, a pass, and no failure.
    fn held(f: &[Finding]) -> bool {
        matches!(f, [x] if x.status == Status::Pass && !x.info && x.subject == Subject::node())
    }

    /// The outlier rule: exactly `pct` from the median is within it; two figures are enough to
    /// compare; one is not (said, as information). Where it held, the node passes it (a
    /// judgement that could have failed); where it failed, nothing passes.
    #[test]
    fn the_outlier_rule_at_its_edges() {
        let items = |v: &[f64]| -> Vec<(Subject, f64)> {
            v.iter()
                .enumerate()
                .map(|(i, x)| (Subject::gpu(i), *x))
                .collect()
        };
        // Median 100: 90 and 110 are exactly 10% away.
        let f = outliers(&items(&[90.0, 100.0, 110.0]), 10.0, true, "x", "u");
        assert!(held(&f), "{f:#?}");
        assert_eq!(
            f[0].reason,
            "node: x: all 3 within 10.0% of the node median 100 u (outlier rule)"
        );
        assert!(held(&outliers(
            &items(&[90.0, 100.0, 110.0]),
            10.0,
            false,
            "x",
            "u"
        )));
        for higher_is_better in [true, false] {
            let f = outliers(
                &items(&[89.0, 100.0, 111.0]),
                10.0,
                higher_is_better,
                "x",
                "u",
            );
            assert!(failed(&f, 1), "{f:#?}");
        }
        // Two figures: median 80, 60 is 25% below.
        let two = outliers(&items(&[100.0, 60.0]), 10.0, true, "x", "u");
        assert!(failed(&two, 1), "{two:#?}");
        assert_eq!(
            two[1].reason,
            "node: x: 1 of 2 not within 10.0% of the node median 80.0 u (outlier rule: they fail)"
        );
        assert_eq!(two[0].subject, Subject::gpu(1));
        let one = outliers(&items(&[60.0]), 10.0, true, "x", "u");
        assert_eq!(one.len(), 1, "{one:#?}");
        assert!(one[0].info && one[0].status == Status::Pass, "{one:#?}");
        assert_eq!(one[0].subject, Subject::gpu(0));
        assert_eq!(
            one[0].reason,
            "GPU 0: x is the only figure, so the outlier rule (10.0% of the node median) has \
             nothing to compare it with"
        );
        assert!(outliers(&[], 10.0, true, "x", "u").is_empty());
    }

    #[test]
    fn figures_are_rounded_for_people_and_zero_is_zero() {
        assert_eq!(fmt_num(0.0), "0");
        assert_eq!(fmt_num(0.05), "5.000e-2");
        assert_eq!(fmt_num(396.4), "396");
        assert_eq!(fmt_num(52.04), "52.0");
        assert_eq!(fmt_num(2.456), "2.46");
        assert_eq!(fmt_num(f64::NAN), "n/a");
    }

    #[test]
    fn judges_levels() {
        let l = lim(Some(48.0), Some(52.0));
        assert_eq!(
            judge(&Subject::gpu(0), "h2d", 55.0, "GB/s", &l)
                .unwrap()
                .status,
            Status::Pass
        );
        assert_eq!(
            judge(&Subject::gpu(0), "h2d", 50.0, "GB/s", &l)
                .unwrap()
                .status,
            Status::Warn
        );
        let f = judge(&Subject::gpu(3), "h2d", 30.0, "GB/s", &l).unwrap();
        assert_eq!(f.status, Status::Fail);
        assert!(f.reason.contains("GPU 3"), "{}", f.reason);
        assert_eq!(
            judge(&Subject::gpu(0), "h2d", f64::NAN, "GB/s", &l)
                .unwrap()
                .status,
            Status::Fail
        );
        assert!(judge(&Subject::gpu(0), "h2d", 1.0, "GB/s", &Limit::default()).is_none());
        let ceil = Limit {
            fail_above: Some(10.0),
            ..Default::default()
        };
        assert_eq!(
            judge(&Subject::pair(0, 1), "latency", 12.0, "us", &ceil)
                .unwrap()
                .status,
            Status::Fail
        );
    }

    #[test]
    fn a_figure_and_its_limit_never_read_the_same_when_they_differ() {
        let l = lim(None, Some(52.0));
        let f = judge(&Subject::gpu(0), "device-to-host", 51.96, "GB/s", &l).unwrap();
        assert_eq!(f.status, Status::Warn);
        assert!(
            f.reason
                .contains("51.96 GB/s is below the warning level of 52.00 GB/s"),
            "{}",
            f.reason
        );
        let f = judge(
            &Subject::gpu(0),
            "h2d",
            47.999,
            "GB/s",
            &lim(Some(48.0), None),
        )
        .unwrap();
        assert!(
            f.reason
                .contains("47.999 GB/s is below the floor of 48.000"),
            "{}",
            f.reason
        );
        assert_eq!(fmt_apart(52.0, 52.0), ("52.0".into(), "52.0".into()));
        assert_eq!(fmt_apart(50.0, 52.0), ("50.0".into(), "52.0".into()));
        assert_eq!(fmt_apart(431.4, 431.0), ("431.4".into(), "431.0".into()));
        let (a, b) = fmt_apart(1.0 + 1e-9, 1.0);
        assert_ne!(a, b);
    }

    #[test]
    fn figures_that_already_read_apart_keep_their_usual_rounding() {
        // fmt_num's "500" and "520" already differ: no decimals are added to either.
        assert_eq!(fmt_apart(500.0, 520.0), ("500".into(), "520".into()));
        let f = judge(
            &Subject::gpu(0),
            "h2d",
            500.0,
            "GB/s",
            &lim(Some(520.0), None),
        )
        .unwrap();
        assert!(
            f.reason.contains("500 GB/s is below the floor of 520 GB/s"),
            "{}",
            f.reason
        );
    }

    #[test]
    fn a_node_exactly_at_the_typical_line_is_not_warned_about() {
        // "Under" the fraction warns; at it exactly (185 / 370 = 0.5) does not.
        let bw = Limit {
            typical: Some(370.0),
            typical_fraction: Some(0.5),
            ..Default::default()
        };
        let st = |v: f64| typical(&[v], &bw, true, "r", "GB/s").unwrap().status;
        assert_eq!(st(185.0), Status::Pass);
        assert_eq!(st(184.9), Status::Warn);
        // A latency: "over" typical / fraction warns; at it exactly (2.5 / 0.5 = 5) does not.
        let lat = Limit {
            typical: Some(2.5),
            typical_fraction: Some(0.5),
            ..Default::default()
        };
        let st = |v: f64| typical(&[v], &lat, false, "latency", "us").unwrap().status;
        assert_eq!(st(5.0), Status::Pass);
        assert_eq!(st(5.1), Status::Warn);
    }

    /// A PCIe box: eight near pairs at 26 GB/s, four far ones (cross-socket) 17% slower.
    fn pcie_box(slow: Option<(usize, f64)>) -> Vec<(Subject, String, f64)> {
        (0..12)
            .map(|i| {
                let (class, v) = if i < 8 { ("NODE", 26.0) } else { ("SYS", 21.6) };
                let v = match slow {
                    Some((j, f)) if j == i => v * f,
                    _ => v,
                };
                (Subject::pair(i, 12), class.to_string(), v)
            })
            .collect()
    }

    #[test]
    fn the_outlier_rule_compares_pairs_of_one_path_class() {
        // 17% apart, more than the 15% rule: healthy, because each class agrees with itself.
        let f = outliers_by_class(&pcie_box(None), 15.0, true, "peer read", "GB/s");
        assert_eq!(f.len(), 2, "{f:#?}");
        assert!(f.iter().all(|x| x.status == Status::Pass && !x.info));
        assert!(f[0]
            .reason
            .contains("all 8 within 15.0% of the median of NODE pairs 26.0 GB/s"));
        assert!(f[1]
            .reason
            .contains("all 4 within 15.0% of the median of SYS pairs 21.6 GB/s"));
        // Taken as one population, the slower class would have been called faulty.
        let flat: Vec<(Subject, f64)> =
            pcie_box(None).into_iter().map(|(s, _, v)| (s, v)).collect();
        assert!(failed(&outliers(&flat, 15.0, true, "peer read", "GB/s"), 4));
        // A slow pair in its class is still caught, against its own class's median; the other
        // class still holds.
        let all = outliers_by_class(&pcie_box(Some((9, 0.8))), 15.0, true, "peer read", "GB/s");
        assert_eq!(all.len(), 3, "{all:#?}");
        assert!(held(&all[..1]) && failed(&all[1..], 1), "{all:#?}");
        let f = fails(all);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].subject, Subject::pair(9, 12));
        assert!(
            f[0].reason
                .contains("below the median of SYS pairs of 21.6 GB/s"),
            "{}",
            f[0].reason
        );
        // With one class, the wording is the node's.
        let one: Vec<(Subject, String, f64)> = (0..4)
            .map(|i| {
                (
                    Subject::pair(i, 9),
                    "NV18".to_string(),
                    if i == 1 { 300.0 } else { 380.0 },
                )
            })
            .collect();
        let f = outliers_by_class(&one, 10.0, true, "peer read", "GB/s");
        assert!(failed(&f, 1), "{f:#?}");
        assert!(
            f[0].reason.contains("the node median of 380 GB/s"),
            "{}",
            f[0].reason
        );
        // A latency outlier is on the high side, within its class.
        let lat: Vec<(Subject, String, f64)> = pcie_box(Some((2, 0.6)))
            .into_iter()
            .map(|(s, c, v)| (s, c, 40.0 / v))
            .collect();
        let f = fails(outliers_by_class(&lat, 15.0, false, "latency", "us"));
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].subject, Subject::pair(2, 12));
        // A class of one pair has nothing to compare with: said, not judged.
        let mut lone = pcie_box(None);
        lone.truncate(9);
        let f = outliers_by_class(&lone, 15.0, true, "peer read", "GB/s");
        assert_eq!(f.len(), 2, "{f:#?}");
        assert!(held(&f[..1]), "{f:#?}");
        assert!(f[1].info && f[1].subject == Subject::pair(8, 12), "{f:#?}");
        assert!(f[1].reason.contains("(15.0% of the median of SYS pairs)"));
    }

    #[test]
    fn a_node_uniformly_below_typical_is_warned_about() {
        let lim = |t: f64, frac: Option<f64>| Limit {
            fail_below: Some(300.0),
            typical: Some(t),
            typical_fraction: frac,
            ..Default::default()
        };
        // Every pair 15% under the typical 370: above the floor and in agreement, but slow.
        let vals = vec![314.5; 56];
        let f = typical(&vals, &lim(370.0, None), true, "peer read", "GB/s").unwrap();
        assert_eq!(f.status, Status::Warn);
        assert_eq!(f.subject, Subject::node());
        assert!(
            f.reason.contains("85% of the typical 370 GB/s"),
            "{}",
            f.reason
        );
        // The same node against a 0.8 fraction, and a healthy one at 95%, pass.
        assert_eq!(
            typical(&vals, &lim(370.0, Some(0.8)), true, "peer read", "GB/s")
                .unwrap()
                .status,
            Status::Pass
        );
        assert_eq!(
            typical(&[351.5; 8], &lim(370.0, None), true, "peer read", "GB/s")
                .unwrap()
                .status,
            Status::Pass
        );
        // Just under and just over the 0.9 line.
        assert_eq!(
            typical(&[332.9], &lim(370.0, None), true, "r", "GB/s")
                .unwrap()
                .status,
            Status::Warn
        );
        assert_eq!(
            typical(&[333.1], &lim(370.0, None), true, "r", "GB/s")
                .unwrap()
                .status,
            Status::Pass
        );
        // A latency is bad on the high side: 2.5 us typical, 0.9 gives up to 2.78 us.
        let l = Limit {
            typical: Some(2.5),
            ..Default::default()
        };
        assert_eq!(
            typical(&[2.7], &l, false, "latency", "us").unwrap().status,
            Status::Pass
        );
        assert_eq!(
            typical(&[2.9], &l, false, "latency", "us").unwrap().status,
            Status::Warn
        );
        assert_eq!(
            typical(&[2.0], &l, false, "latency", "us").unwrap().status,
            Status::Pass
        );
        // No typical value, or nothing measured: no judgement.
        assert!(typical(&vals, &Limit::default(), true, "r", "GB/s").is_none());
        assert!(typical(&[f64::NAN], &lim(370.0, None), true, "r", "GB/s").is_none());
        // A typical value alone bounds no single figure.
        assert!(judge(
            &Subject::pair(0, 1),
            "r",
            1.0,
            "GB/s",
            &Limit {
                typical: Some(370.0),
                ..Default::default()
            }
        )
        .is_none());
    }

    #[test]
    fn outlier_rule_flags_only_the_slow_one() {
        let items: Vec<(Subject, f64)> = (0..8)
            .map(|i| (Subject::gpu(i), if i == 5 { 33.0 } else { 55.0 }))
            .collect();
        let f = outliers(&items, 10.0, true, "h2d", "GB/s");
        assert!(failed(&f, 1), "{f:#?}");
        assert_eq!(f[0].subject, Subject::gpu(5));
        assert_eq!(f[1].found, "7 of 8 within");
        let lat: Vec<(Subject, f64)> = (0..4)
            .map(|i| (Subject::pair(i, 9), if i == 2 { 9.0 } else { 2.5 }))
            .collect();
        assert_eq!(
            outliers(&lat, 20.0, false, "latency", "us")[0].subject,
            Subject::pair(2, 9)
        );
    }

    #[test]
    fn outlier_rule_fails_a_figure_that_is_not_a_number() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let items: Vec<(Subject, f64)> = (0..4)
                .map(|i| (Subject::gpu(i), if i == 1 { bad } else { 55.0 }))
                .collect();
            for higher in [true, false] {
                let f = outliers(&items, 10.0, higher, "h2d", "GB/s");
                assert!(failed(&f, 1), "{bad} {higher}: {f:?}");
                assert_eq!(f[0].status, Status::Fail);
                assert_eq!(f[0].subject, Subject::gpu(1));
                assert!(
                    f[0].reason.contains("could not be computed"),
                    "{}",
                    f[0].reason
                );
            }
        }
        // Even when it leaves fewer than two figures to take a median of.
        let two = vec![(Subject::gpu(0), 55.0), (Subject::gpu(1), f64::NAN)];
        assert_eq!(outliers(&two, 10.0, true, "h2d", "GB/s").len(), 1);
    }

    #[test]
    fn outlier_rule_flags_the_bad_side_only() {
        let items: Vec<(Subject, f64)> = (0..4)
            .map(|i| (Subject::gpu(i), if i == 2 { 80.0 } else { 55.0 }))
            .collect();
        // A fast GPU is no bandwidth outlier, but the same spread is one for a latency.
        assert!(held(&outliers(&items, 10.0, true, "h2d", "GB/s")));
        let f = outliers(&items, 10.0, false, "latency", "us");
        assert!(failed(&f, 1), "{f:#?}");
        assert_eq!(f[0].subject, Subject::gpu(2));
        // Just inside the rule is not an outlier.
        let near: Vec<(Subject, f64)> = (0..4)
            .map(|i| (Subject::gpu(i), if i == 0 { 50.0 } else { 55.0 }))
            .collect();
        assert!(held(&outliers(&near, 10.0, true, "h2d", "GB/s")));
        assert!(failed(&outliers(&near, 9.0, true, "h2d", "GB/s"), 1));
    }

    /// A median of 0 (or less) holds the figures to nothing: each figure of 0 or less fails
    /// (no bandwidth, and no latency, is 0), whichever side is the bad one, never a pass.
    #[test]
    fn figures_of_zero_that_make_the_median_fail() {
        let items: Vec<(Subject, f64)> = [0.0, -1.0, 50.0]
            .iter()
            .enumerate()
            .map(|(i, v)| (Subject::pair(i, 9), *v))
            .collect();
        for higher in [true, false] {
            let f = outliers(&items, 20.0, higher, "latency", "us");
            assert!(failed(&f, 2), "{f:#?}");
            assert_eq!(
                (&f[0].subject, &f[1].subject),
                (&Subject::pair(0, 9), &Subject::pair(1, 9))
            );
            assert_eq!(
                f[0].reason,
                "GPU 0 -> GPU 9: latency is 0 us, which leaves the node median at 0 us (outlier \
                 rule: nothing to compare with)"
            );
            assert_eq!(f[2].found, "1 of 3 within");
        }
    }
}
