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

/// Split off the next white-space-delimited token, honouring double quotes.
fn next_token(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start_matches([' ', '\t']);
    if s.is_empty() {
        return None;
    }
    let mut in_quote = false;
    for (i, c) in s.char_indices() {
        match c {
            '"' => in_quote = !in_quote,
            ' ' | '\t' if !in_quote => return Some((&s[..i], &s[i..])),
            _ => {}
        }
    }
    Some((s, ""))
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
    // Split on commas outside quotes.
    let mut parts = Vec::new();
    let mut start = 0;
    let mut in_quote = false;
    for (i, c) in opts.char_indices() {
        match c {
            '"' => in_quote = !in_quote,
            ',' if !in_quote => {
                parts.push(&opts[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if in_quote {
        return Err("unbalanced quotes in options".into());
    }
    parts.push(&opts[start..]);
    for part in parts {
        let (name, value) = match part.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (part, None),
        };
        match (name.to_ascii_lowercase().as_str(), value) {
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
            .map_err(|e| err(format!("invalid public key: {}", lower(&e).to_lowercase())))?;
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
}
