//! OpenSSH allowed_signers files: parsing, principal and namespace patterns, options.

use std::path::Path;

use ssh_key::PublicKey;

use super::keys::read_any_public_key;
use super::*;

const MAX_TRUST_BYTES: u64 = 4 * 1024 * 1024;

/// True when `identity` can stand as a principal in an allowed_signers line.
pub fn is_valid_identity(identity: &str) -> bool {
    check_identity(identity).is_ok()
}

#[derive(Debug, Clone)]
pub(super) struct AllowedSigner {
    pub(super) line: usize,
    pub(super) principals: String,
    pub(super) cert_authority: bool,
    pub(super) namespaces: Option<String>,
    pub(super) valid_after: Option<chrono::DateTime<chrono::Utc>>,
    pub(super) valid_before: Option<chrono::DateTime<chrono::Utc>>,
    pub(super) key: PublicKey,
}

/// Byte offset of the first character of `s` outside double quotes for which `sep` holds.
fn find_unquoted(s: &str, sep: impl Fn(char) -> bool) -> Option<usize> {
    let mut in_quote = false;
    for (i, c) in s.char_indices() {
        if c == '"' {
            in_quote = !in_quote;
        } else if !in_quote && sep(c) {
            return Some(i);
        }
    }
    None
}

/// Split off the next white-space-delimited token, honouring double quotes.
fn next_token(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start_matches([' ', '\t']);
    if s.is_empty() {
        return None;
    }
    Some(match find_unquoted(s, |c| c == ' ' || c == '\t') {
        Some(i) => s.split_at(i),
        None => (s, ""),
    })
}

/// OpenSSH `match_pattern` (`*` and `?` wildcards).
fn match_pattern(s: &str, pat: &str) -> bool {
    // Iterative, remembering only the last '*': at most len(s) * len(pat) steps and no
    // recursion, whatever the pattern (a million '*', or 80 of them before a literal).
    let s: Vec<char> = s.chars().collect();
    let p: Vec<char> = pat.chars().collect();
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        match p.get(j) {
            Some('*') => {
                star = Some((j, i));
                j += 1;
            }
            Some(&c) if c == '?' || c == s[i] => {
                i += 1;
                j += 1;
            }
            _ => match star {
                Some((sj, si)) => {
                    j = sj + 1;
                    i = si + 1;
                    star = Some((sj, si + 1));
                }
                None => return false,
            },
        }
    }
    p[j..].iter().all(|c| *c == '*')
}

/// OpenSSH `match_pattern_list`: comma-separated, `!` negates and wins.
pub(super) fn match_pattern_list(s: &str, list: &str) -> bool {
    let mut matched = false;
    for pat in list.split(',') {
        if let Some(neg) = pat.strip_prefix('!') {
            if match_pattern(s, neg) {
                return false;
            }
        } else if match_pattern(s, pat) {
            matched = true;
        }
    }
    matched
}

fn parse_signer_time(v: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    use chrono::{NaiveDate, NaiveDateTime, TimeZone};
    let (digits, utc) = match v.strip_suffix(['Z', 'z']) {
        Some(d) => (d, true),
        None => (v, false),
    };
    if !digits.bytes().all(|b| b.is_ascii_digit()) || ![8, 12, 14].contains(&digits.len()) {
        return Err(format!("invalid time {v:?} (want YYYYMMDD[HHMM[SS]][Z])"));
    }
    let num =
        |r: std::ops::Range<usize>| digits.get(r).map_or(0, |x| x.parse::<u32>().unwrap_or(0));
    let date = NaiveDate::from_ymd_opt(num(0..4) as i32, num(4..6), num(6..8))
        .ok_or_else(|| format!("invalid date {v:?}"))?;
    let naive: NaiveDateTime = date
        .and_hms_opt(num(8..10), num(10..12), num(12..14))
        .ok_or_else(|| format!("invalid time {v:?}"))?;
    if utc {
        Ok(chrono::Utc.from_utc_datetime(&naive))
    } else {
        chrono::Local
            .from_local_datetime(&naive)
            .earliest()
            .map(|t| t.with_timezone(&chrono::Utc))
            .ok_or_else(|| format!("invalid local time {v:?}"))
    }
}

fn unquote(v: &str) -> Result<&str, String> {
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .filter(|v| !v.contains('"'))
        .ok_or_else(|| format!("option value {v} must be in double quotes"))
}

fn parse_signer_options(opts: &str, s: &mut AllowedSigner) -> Result<(), String> {
    if opts.matches('"').count() % 2 == 1 {
        return Err("unbalanced quotes in options".into());
    }
    // Split on commas outside quotes.
    let mut parts = Vec::new();
    let mut rest = opts;
    while let Some(i) = find_unquoted(rest, |c| c == ',') {
        parts.push(&rest[..i]);
        rest = &rest[i + 1..];
    }
    parts.push(rest);
    for part in parts {
        let (name, value) = match part.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (part, None),
        };
        let key = name.to_ascii_lowercase();
        // As OpenSSH: an option given twice is an error, not its last value (a second
        // valid-before would otherwise extend an expired key).
        let twice = match key.as_str() {
            "namespaces" => s.namespaces.is_some(),
            "valid-after" => s.valid_after.is_some(),
            "valid-before" => s.valid_before.is_some(),
            _ => false,
        };
        if twice {
            return Err(format!("multiple {key:?} clauses"));
        }
        match (key.as_str(), value) {
            ("cert-authority", None) => s.cert_authority = true,
            ("namespaces", Some(v)) => s.namespaces = Some(unquote(v)?.to_string()),
            ("valid-after", Some(v)) => s.valid_after = Some(parse_signer_time(unquote(v)?)?),
            ("valid-before", Some(v)) => s.valid_before = Some(parse_signer_time(unquote(v)?)?),
            _ => return Err(format!("unknown option {part:?}")),
        }
    }
    Ok(())
}

fn looks_like_key_type(tok: &str) -> bool {
    tok.starts_with("ssh-")
        || tok.starts_with("ecdsa-")
        || tok.starts_with("sk-")
        || tok.starts_with("rsa-")
}

pub(super) fn parse_allowed_signers(path: &Path) -> Result<Vec<AllowedSigner>, SignError> {
    let bytes = read_limited(path, MAX_TRUST_BYTES, "read allowed signers file")?;
    let text = String::from_utf8(bytes).map_err(|_| SignError::AllowedSigners {
        path: path.to_path_buf(),
        line: 0,
        reason: "not utf-8 text".into(),
    })?;
    parse_allowed_signers_text(path, &text)
}

/// The entries of an allowed_signers file's `text`; errors name `path` and the line.
fn parse_allowed_signers_text(path: &Path, text: &str) -> Result<Vec<AllowedSigner>, SignError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |reason: String| SignError::AllowedSigners {
            path: path.to_path_buf(),
            line: line_no,
            reason,
        };
        let line = raw.trim_matches([' ', '\t', '\r']);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (principals, rest) = next_token(line).ok_or_else(|| err("empty line".into()))?;
        let principals = principals
            .strip_prefix('"')
            .and_then(|p| p.strip_suffix('"'))
            .unwrap_or(principals);
        let mut signer = AllowedSigner {
            line: line_no,
            principals: principals.to_string(),
            cert_authority: false,
            namespaces: None,
            valid_after: None,
            valid_before: None,
            key: PublicKey::from(ssh_key::public::KeyData::Ed25519(
                ssh_key::public::Ed25519PublicKey([0; 32]),
            )),
        };
        let (tok, after) = next_token(rest).ok_or_else(|| err("missing key".into()))?;
        let key_text = if looks_like_key_type(tok) {
            rest
        } else {
            parse_signer_options(tok, &mut signer).map_err(err)?;
            if next_token(after).is_none() {
                return Err(err("missing key".into()));
            }
            after
        };
        signer.key = PublicKey::from_openssh(key_text.trim())
            .map_err(|e| err(format!("invalid public key: {}", lowercase(&e))))?;
        out.push(signer);
    }
    Ok(out)
}

/// An allowed_signers line trusting the public key in `public_key` (a `.pub`
/// or private key file) as `identity`, for the nodecert namespace only.
pub fn allowed_signers_line(public_key: &Path, identity: &str) -> Result<String, SignError> {
    let key = read_any_public_key(public_key)?;
    allowed_signers_line_for(&key, identity)
}

/// Like [`allowed_signers_line`], from a parsed key.
pub fn allowed_signers_line_for(key: &PublicKey, identity: &str) -> Result<String, SignError> {
    check_identity(identity)?;
    let mut key = key.clone();
    key.set_comment("");
    let k = key.to_openssh().map_err(|e| SignError::Identity {
        identity: identity.to_string(),
        reason: format!("cannot encode key: {}", lower(&e)),
    })?;
    Ok(format!("{identity} namespaces=\"{NAMESPACE}\" {k}"))
}

pub(super) fn check_identity(identity: &str) -> Result<(), SignError> {
    let bad = |reason: &str| SignError::Identity {
        identity: identity.to_string(),
        reason: reason.to_string(),
    };
    if identity.is_empty() {
        return Err(bad("empty"));
    }
    if identity.chars().any(|c| {
        c.is_whitespace() || c.is_control() || matches!(c, '"' | ',' | '*' | '?' | '!' | '\'')
    }) {
        return Err(bad(
            "must not contain white space, quotes, commas or the pattern characters * ? !",
        ));
    }
    if identity.starts_with('#') {
        return Err(bad("must not start with '#'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn patterns() {
        assert!(match_pattern_list("nodecert", "nodecert"));
        assert!(match_pattern_list("nodecert", "git,node*"));
        assert!(!match_pattern_list("nodecert", "git,file"));
        assert!(!match_pattern_list("nodecert", "*,!nodecert"));
        assert!(match_pattern_list("nodecert", "n?decert"));
    }

    #[test]
    fn allowed_signers_options() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("allowed_signers");
        let key =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKfQ5+ClaHsvpT2R5bhvRkxx5SpUiT+xTeKyRuPnH4mS";
        fs::write(
            &p,
            format!(
                "# comment\n\nalice@example.com {key} a comment\n\"bob@x,carol@y\" namespaces=\"git,nodecert\",valid-after=\"20200101\" {key}\n"
            ),
        )
        .unwrap();
        let s = parse_allowed_signers(&p).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].principals, "alice@example.com");
        assert_eq!(s[1].principals, "bob@x,carol@y");
        assert_eq!(s[1].namespaces.as_deref(), Some("git,nodecert"));
        assert!(s[1].valid_after.is_some());
        fs::write(&p, format!("alice bogus-option {key}\n")).unwrap();
        assert!(matches!(
            parse_allowed_signers(&p),
            Err(SignError::AllowedSigners { line: 1, .. })
        ));
        // An option given twice is refused on its line, as OpenSSH refuses it: a second
        // valid-before must not extend an expired key, nor a second namespaces widen a key.
        for opts in [
            "namespaces=\"git\",namespaces=\"nodecert\"",
            "valid-before=\"20200101\",valid-before=\"29990101\"",
            "VALID-AFTER=\"20200101\",valid-after=\"20210101\"",
        ] {
            fs::write(&p, format!("# x\nalice {opts} {key}\n")).unwrap();
            match parse_allowed_signers(&p) {
                Err(SignError::AllowedSigners {
                    line: 2, reason, ..
                }) => {
                    assert!(reason.contains("multiple"), "{reason}")
                }
                other => panic!("{opts}: {other:?}"),
            }
        }
        fs::write(
            &p,
            format!("alice cert-authority,namespaces=\"nodecert\" {key}\n"),
        )
        .unwrap();
        assert!(parse_allowed_signers(&p).is_ok());
    }

    #[test]
    fn patterns_match_in_bounded_time_and_without_recursion() {
        for (s, p, want) in [
            ("alice@example.com", "*@example.com", true),
            ("alice@example.com", "a?ice@*", true),
            ("alice@example.com", "*@example.org", false),
            ("", "*", true),
            ("", "?", false),
            ("abc", "abc*", true),
            ("abc", "a*c*d", false),
            ("aXbYc", "a*b*c", true),
        ] {
            assert_eq!(match_pattern(s, p), want, "{s} {p}");
        }
        let start = std::time::Instant::now();
        let many = "*".repeat(1_000_000);
        assert!(match_pattern("alice", &many));
        let s = "a".repeat(100);
        let p = format!("{}b", "*".repeat(80));
        assert!(!match_pattern(&s, &p));
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }

    /// Property tests: hostile allowed_signers text and patterns never panic, finish within
    /// a time bound, and matching agrees with a plain recursive matcher.
    mod props {
        use super::*;
        use proptest::prelude::*;
        use std::time::{Duration, Instant};

        const KEY: &str =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKfQ5+ClaHsvpT2R5bhvRkxx5SpUiT+xTeKyRuPnH4mS";
        /// Far above what any case needs (milliseconds), far below a hang or a backtracking blow-up.
        const BOUND: Duration = Duration::from_secs(2);

        /// The textbook recursive glob matcher: exponential in the worst case, so small inputs only.
        fn reference(s: &[char], p: &[char]) -> bool {
            match p.split_first() {
                None => s.is_empty(),
                Some(('*', rest)) => (0..=s.len()).any(|k| reference(&s[k..], rest)),
                Some((c, rest)) => s
                    .split_first()
                    .is_some_and(|(d, tail)| (*c == '?' || c == d) && reference(tail, rest)),
            }
        }

        fn reference_str(s: &str, p: &str) -> bool {
            let s: Vec<char> = s.chars().collect();
            let p: Vec<char> = p.chars().collect();
            reference(&s, &p)
        }

        /// OpenSSH's list rule: some plain pattern matches and no negated one does.
        fn reference_list(s: &str, list: &str) -> bool {
            let judged: Vec<(bool, bool)> = list
                .split(',')
                .map(|p| match p.strip_prefix('!') {
                    Some(n) => (true, reference_str(s, n)),
                    None => (false, reference_str(s, p)),
                })
                .collect();
            judged.iter().any(|&(neg, m)| !neg && m) && !judged.iter().any(|&(neg, m)| neg && m)
        }

        /// Runs of '*' collapsed to one: the same language.
        fn collapse_stars(p: &str) -> String {
            let mut out = String::new();
            for c in p.chars() {
                if !(c == '*' && out.ends_with('*')) {
                    out.push(c);
                }
            }
            out
        }

        fn small(chars: &'static [char], max: usize) -> impl Strategy<Value = String> {
            proptest::collection::vec(proptest::sample::select(chars), 0..max)
                .prop_map(|v| v.into_iter().collect())
        }

        const SUBJECT: &[char] = &['a', 'b', 'é', '\0', '*', '?', '!'];
        const PATTERN: &[char] = &['a', 'b', 'é', '\0', '*', '?'];

        /// Pieces of allowed_signers lines, well formed and not.
        fn piece() -> impl Strategy<Value = String> {
            prop_oneof![
                proptest::sample::select(vec![
                    "\"",
                    ",",
                    "=",
                    " ",
                    "\t",
                    "*",
                    "?",
                    "!",
                    "\0",
                    "#",
                    "é",
                    "👍",
                    "\r",
                    "\u{202e}",
                    "namespaces=",
                    "\"nodecert\"",
                    "namespaces=\"nodecert\"",
                    "namespaces=\"*,!git\"",
                    "cert-authority",
                    "valid-after=\"20200101\"",
                    "valid-before=\"99991231235959Z\"",
                    "valid-after=\"2020\"",
                    "valid-before=\"20201399\"",
                    "NAMESPACES=\"x\"",
                    KEY,
                    "ssh-ed25519",
                    "ecdsa-sha2-nistp256",
                    "sk-",
                    "rsa-",
                    "AAAA",
                    "a@example.com",
                ])
                .prop_map(str::to_string),
                (1usize..100_000).prop_map(|n| "*".repeat(n)),
                (1usize..1_000).prop_map(|n| "\"".repeat(n)),
                "\\PC{0,12}",
            ]
        }

        fn line() -> impl Strategy<Value = String> {
            proptest::collection::vec(piece(), 0..8).prop_map(|v| v.concat())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn matching_agrees_with_the_recursive_reference(
                s in small(SUBJECT, 8),
                p in small(PATTERN, 8),
            ) {
                prop_assert_eq!(match_pattern(&s, &p), reference_str(&s, &p));
            }

            #[test]
            fn list_matching_agrees_with_the_reference(
                s in small(SUBJECT, 6),
                list in proptest::collection::vec((any::<bool>(), small(PATTERN, 5)), 1..4),
            ) {
                let list: Vec<String> = list
                    .into_iter()
                    .map(|(neg, p)| if neg { format!("!{p}") } else { p })
                    .collect();
                let list = list.join(",");
                prop_assert_eq!(match_pattern_list(&s, &list), reference_list(&s, &list));
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            #[test]
            fn huge_star_runs_match_in_bounded_time_as_one_star_does(
                s in "[abc]{0,64}",
                runs in proptest::collection::vec((1usize..100_000, "[abc?]{0,3}"), 1..4),
            ) {
                let p: String = runs.iter().map(|(n, lit)| format!("{}{lit}", "*".repeat(*n))).collect();
                let start = Instant::now();
                let got = match_pattern(&s, &p);
                prop_assert!(start.elapsed() < BOUND, "{:?} for {} pattern chars", start.elapsed(), p.len());
                prop_assert_eq!(got, reference_str(&s, &collapse_stars(&p)));
                let start = Instant::now();
                match_pattern_list(NAMESPACE, &format!("{p},!{p}"));
                prop_assert!(start.elapsed() < BOUND);
            }

            #[test]
            fn hostile_lines_parse_or_fail_on_their_line_in_bounded_time(
                lines in proptest::collection::vec(line(), 0..6),
            ) {
                let text = lines.join("\n");
                let path = Path::new("allowed_signers");
                let start = Instant::now();
                let parsed = parse_allowed_signers_text(path, &text);
                prop_assert!(start.elapsed() < BOUND, "{:?}", start.elapsed());
                let count = text.lines().count();
                match parsed {
                    Ok(signers) => {
                        let mut last = 0;
                        for s in &signers {
                            prop_assert!(s.line > last && s.line <= count);
                            last = s.line;
                            // Matching its namespaces against ours is bounded too.
                            if let Some(ns) = &s.namespaces {
                                let start = Instant::now();
                                match_pattern_list(NAMESPACE, ns);
                                prop_assert!(start.elapsed() < BOUND);
                            }
                        }
                    }
                    Err(SignError::AllowedSigners { line, reason, .. }) => {
                        prop_assert!(line >= 1 && line <= count, "line {} of {}", line, count);
                        prop_assert!(!reason.is_empty());
                    }
                    Err(e) => prop_assert!(false, "unexpected error kind: {}", e),
                }
            }

            #[test]
            fn the_lines_nodecert_writes_parse_back(
                identity in "[A-Za-z0-9@._+-]{1,24}",
                comment in "\\PC{0,12}",
            ) {
                let mut key = PublicKey::from_openssh(KEY).unwrap();
                key.set_comment(comment);
                let line = allowed_signers_line_for(&key, &identity).unwrap();
                let signers = parse_allowed_signers_text(Path::new("a"), &format!("# ops\n{line}\n")).unwrap();
                prop_assert_eq!(signers.len(), 1);
                prop_assert_eq!(signers[0].line, 2);
                prop_assert_eq!(&signers[0].principals, &identity);
                prop_assert_eq!(signers[0].namespaces.as_deref(), Some(NAMESPACE));
                prop_assert!(match_pattern_list(NAMESPACE, signers[0].namespaces.as_deref().unwrap()));
                prop_assert_eq!(signers[0].key.key_data(), key.key_data());
            }
        }
    }
}
