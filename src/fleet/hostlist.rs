//! Slurm's compact host lists: `n[1-4,7],gpu-a` is n1, n2, n3, n4, n7 and gpu-a (what
//! `SLURM_JOB_NODELIST` holds and `--expect` accepts). Zero-padded ranges keep their width
//! (`n[01-03]`: n01, n02, n03).

/// The most names one list may expand to.
pub const MAX_NAMES: usize = 100_000;

/// The list as an error quotes it: its first 80 characters at most.
fn quoted(list: &str) -> String {
    match list.char_indices().nth(80) {
        Some((i, _)) => format!("{:?}...", &list[..i]),
        None => format!("{list:?}"),
    }
}

/// Expand a host list. Errors say what is wrong and where. Each name is checked as it is made
/// (a node name is at most 64 bytes), so a list's size bounds what it takes to expand.
pub fn expand(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let named = |n: String, out: &mut Vec<String>| -> Result<(), String> {
        crate::commands::check_node_name(&n).map_err(|e| format!("{}: {e}", quoted(list)))?;
        out.push(n);
        Ok(())
    };
    for item in split_top(list)? {
        if item.is_empty() {
            continue;
        }
        match item.find('[') {
            None => named(item.to_string(), &mut out)?,
            Some(open) => {
                let close = item
                    .rfind(']')
                    .filter(|&c| c > open)
                    .ok_or_else(|| format!("{item:?}: '[' without ']'"))?;
                let (prefix, suffix) = (&item[..open], &item[close + 1..]);
                if suffix.contains(['[', ']']) || item[open + 1..close].contains(['[', ']']) {
                    return Err(format!("{item:?}: one bracket range per name"));
                }
                for part in item[open + 1..close].split(',') {
                    let (a, b) = part.split_once('-').unwrap_or((part, part));
                    let parse = |s: &str| {
                        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) || s.len() > 9 {
                            Err(format!("{item:?}: {part:?} is not a number or a range"))
                        } else {
                            s.parse::<u64>().map_err(|e| e.to_string())
                        }
                    };
                    let (lo, hi) = (parse(a)?, parse(b)?);
                    if lo > hi {
                        return Err(format!("{item:?}: range {part:?} goes down"));
                    }
                    if (hi - lo) as usize >= MAX_NAMES
                        || out.len() + ((hi - lo) as usize) >= MAX_NAMES
                    {
                        return Err(format!("{}: more than {MAX_NAMES} names", quoted(list)));
                    }
                    let width = if a.len() > 1 && a.starts_with('0') {
                        a.len()
                    } else {
                        0
                    };
                    for i in lo..=hi {
                        named(format!("{prefix}{i:0width$}{suffix}"), &mut out)?;
                    }
                }
            }
        }
        if out.len() > MAX_NAMES {
            return Err(format!("{}: more than {MAX_NAMES} names", quoted(list)));
        }
    }
    Ok(out)
}

/// Split at the commas outside brackets.
fn split_top(list: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("{list:?}: unbalanced or nested brackets"));
        }
    }
    if depth != 0 {
        return Err(format!("{list:?}: '[' without ']'"));
    }
    out.push(list[start..].trim());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_host_lists_expand_as_slurm_does() {
        assert_eq!(
            expand("n[1-3,7],gpu-a").unwrap(),
            ["n1", "n2", "n3", "n7", "gpu-a"]
        );
        assert_eq!(expand("n[08-10]").unwrap(), ["n08", "n09", "n10"]);
        assert_eq!(expand("rack1-n[2]x").unwrap(), ["rack1-n2x"]);
        assert_eq!(expand("a, b").unwrap(), ["a", "b"]);
        assert_eq!(expand("").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn malformed_or_huge_lists_are_refused() {
        for bad in [
            "n[1-",
            "n[3-1]",
            "n[a-b]",
            "n[1-2]]",
            "n[[1]]",
            "n[1]m[2]",
            "bad name",
            "n[0-999999999]",
            "-n1",
        ] {
            assert!(expand(bad).is_err(), "{bad}");
        }
        // A name too long is refused at the first one made, not after making 99,991 of them
        // (20 KB of list would have taken 2 GB), and the error quotes the list's start only.
        let long = format!("{}[0-99990]", "a".repeat(20_000));
        let e = expand(&long).unwrap_err();
        assert!(e.contains("node name"), "{}", &e[..200.min(e.len())]);
        assert!(
            e.starts_with(&format!("\"{}\"...", "a".repeat(80))),
            "{e:.100}"
        );
        assert!(e.len() < 20_300, "{}", e.len());
        // Names within bounds still expand, up to the most.
        assert_eq!(expand("n[0-99998]").unwrap().len(), 99_999);
    }
}
