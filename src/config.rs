//! Strict TOML loading with errors that name file, line and column.
//!
//! A document may `extends` another: the chain is merged table by table (the child wins), then
//! deserialized strictly (unknown keys are errors). Any error, from the TOML parser, from serde
//! or from semantic validation, carries a key path; that path is looked up in the files of the
//! chain (the child first) to say where the offending value was written.

use crate::error::{InputError, Location};
use serde::de::DeserializeOwned;

/// One source file of a document chain.
#[derive(Debug, Clone)]
pub struct Source {
    /// What to call it in messages: a path, or "embedded:NAME".
    pub name: String,
    pub text: String,
}

/// A step in a key path: `checks.collective.all_reduce.sizes[2]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

pub type KeyPath = Vec<Seg>;

/// Build a key path from dotted text, with `[n]` for indices: `key_path("a.b[2].c")`.
pub fn key_path(s: &str) -> KeyPath {
    let mut out = Vec::new();
    for part in s.split('.').filter(|p| !p.is_empty()) {
        let mut rest = part;
        if let Some(i) = rest.find('[') {
            out.push(Seg::Key(rest[..i].to_string()));
            rest = &rest[i..];
            while let Some(end) = rest.find(']') {
                if let Ok(n) = rest[1..end].parse() {
                    out.push(Seg::Index(n));
                }
                rest = &rest[end + 1..];
            }
        } else {
            out.push(Seg::Key(rest.to_string()));
        }
    }
    out
}

pub fn display_path(p: &[Seg]) -> String {
    let mut s = String::new();
    for seg in p {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit_once('\n')
        .map(|(_, l)| l)
        .unwrap_or(before)
        .chars()
        .count()
        + 1;
    (line, col)
}

/// Parse one file into a table, with a located error on bad TOML.
pub fn parse_table(src: &Source) -> Result<toml::Table, InputError> {
    toml::from_str::<toml::Table>(&src.text).map_err(|e| {
        let (line, column) = e
            .span()
            .map(|s| line_col(&src.text, s.start))
            .unwrap_or((1, 1));
        InputError::Located {
            location: Location {
                file: src.name.clone(),
                line,
                column,
            },
            message: first_line(e.message()),
        }
    })
}

fn first_line(s: &str) -> String {
    s.trim().lines().next().unwrap_or("").to_string()
}

/// Merge `child` over `base`: tables merge key by key, anything else is replaced.
pub fn merge(base: &mut toml::Table, child: toml::Table) {
    for (k, v) in child {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(c)) => merge(b, c),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Where a key path was written: the deepest match, searching the chain child first.
pub fn locate(chain: &[Source], path: &[Seg]) -> Location {
    let mut best: Option<(usize, Location)> = None;
    for src in chain {
        let Ok(doc) = toml_edit::Document::parse(src.text.as_str()) else {
            continue;
        };
        let (depth, span) = walk(doc.as_item(), path);
        if let Some(off) = span {
            if best.as_ref().is_none_or(|(d, _)| depth > *d) {
                let (line, column) = line_col(&src.text, off);
                best = Some((
                    depth,
                    Location {
                        file: src.name.clone(),
                        line,
                        column,
                    },
                ));
            }
        }
        if best.as_ref().is_some_and(|(d, _)| *d == path.len()) {
            break;
        }
    }
    best.map(|(_, l)| l).unwrap_or_else(|| Location {
        file: chain.first().map(|s| s.name.clone()).unwrap_or_default(),
        line: 1,
        column: 1,
    })
}

/// Of `paths` (the first preferred on a tie), the one written by the most derived file of the
/// chain (the chain lists the child first): the key the user who wrote that file can change.
pub fn most_derived<const N: usize>(chain: &[Source], paths: [KeyPath; N]) -> KeyPath {
    let written_in = |path: &KeyPath| {
        chain.iter().position(|src| {
            toml_edit::Document::parse(src.text.as_str())
                .is_ok_and(|d| walk(d.as_item(), path).0 == path.len())
        })
    };
    let mut best: Option<(usize, KeyPath)> = None;
    for p in paths {
        let at = written_in(&p).unwrap_or(usize::MAX);
        if best.as_ref().is_none_or(|(b, _)| at < *b) {
            best = Some((at, p));
        }
    }
    best.map(|(_, p)| p).unwrap_or_default()
}

/// Follow a path; returns how deep it got and the span start of the deepest item found
/// (the key when the last step is a key, so that the caret lands on the key's name).
fn walk(root: &toml_edit::Item, path: &[Seg]) -> (usize, Option<usize>) {
    let mut item = root;
    let mut found: Option<usize> = None;
    for (depth, seg) in path.iter().enumerate() {
        match seg {
            Seg::Key(k) => {
                let Some(t) = item.as_table_like() else {
                    return (depth, found);
                };
                let Some((key, next)) = t.get_key_value(k) else {
                    return (depth, found);
                };
                found = key
                    .span()
                    .or_else(|| next.span())
                    .map(|s| s.start)
                    .or(found);
                item = next;
            }
            Seg::Index(i) => {
                if let Some(a) = item.as_array() {
                    let Some(v) = a.get(*i) else {
                        return (depth, found);
                    };
                    found = v.span().map(|s| s.start).or(found);
                    // Values inside arrays: continue through inline tables and arrays.
                    return match v {
                        toml_edit::Value::InlineTable(_) | toml_edit::Value::Array(_) => {
                            let rest = &path[depth + 1..];
                            let tmp = toml_edit::Item::Value(v.clone());
                            let (d, f) = walk(&tmp, rest);
                            // Spans of the clone are preserved, so `f` is in the same file.
                            (depth + 1 + d, f.or(found))
                        }
                        _ => (depth + 1, found),
                    };
                } else if let Some(a) = item.as_array_of_tables() {
                    let Some(t) = a.get(*i) else {
                        return (depth, found);
                    };
                    found = t.span().map(|s| s.start).or(found);
                    let tmp = toml_edit::Item::Table(t.clone());
                    let (d, f) = walk(&tmp, &path[depth + 1..]);
                    return (depth + 1 + d, f.or(found));
                } else {
                    return (depth, found);
                }
            }
        }
    }
    (path.len(), found)
}

/// A located error for `path` in the chain.
pub fn error_at(chain: &[Source], path: &[Seg], message: impl Into<String>) -> InputError {
    let mut message = message.into();
    if !path.is_empty() && !message.contains('`') {
        message = format!("{}: {message}", display_path(path));
    }
    InputError::Located {
        location: locate(chain, path),
        message,
    }
}

/// Deserialize a merged table strictly; serde errors come back located.
pub fn deserialize<T: DeserializeOwned>(
    chain: &[Source],
    table: toml::Table,
) -> Result<T, InputError> {
    let value = toml::Value::Table(table);
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let mut path: KeyPath = e
            .path()
            .iter()
            .filter_map(|s| match s {
                serde_path_to_error::Segment::Seq { index } => Some(Seg::Index(*index)),
                serde_path_to_error::Segment::Map { key } => Some(Seg::Key(key.clone())),
                serde_path_to_error::Segment::Enum { .. }
                | serde_path_to_error::Segment::Unknown => None,
            })
            .collect();
        let msg = first_line(&e.inner().to_string());
        // serde names an unknown key in the message, not in the path: point at the key itself.
        for marker in ["unknown field `", "unknown variant `"] {
            if let Some(rest) = msg.split(marker).nth(1) {
                if let Some(name) = rest.split('`').next() {
                    let mut p = path.clone();
                    p.push(Seg::Key(name.to_string()));
                    if locate_depth(chain, &p) == p.len() {
                        path = p;
                    }
                }
            }
        }
        let where_ = display_path(&path);
        let message = if where_.is_empty() {
            msg
        } else {
            format!("{where_}: {msg}")
        };
        InputError::Located {
            location: locate(chain, &path),
            message,
        }
    })
}

fn locate_depth(chain: &[Source], path: &[Seg]) -> usize {
    chain
        .iter()
        .filter_map(|s| toml_edit::Document::parse(s.text.as_str()).ok())
        .map(|d| walk(d.as_item(), path).0)
        .max()
        .unwrap_or(0)
}

/// Read `format_version` before anything else, so a file from a future nodecert says so.
pub fn check_format_version(
    src: &Source,
    table: &toml::Table,
    supported: u32,
) -> Result<(), InputError> {
    let chain = std::slice::from_ref(src);
    match table.get("format_version") {
        None => Err(InputError::Located {
            location: Location {
                file: src.name.clone(),
                line: 1,
                column: 1,
            },
            message: format!("missing `format_version` (this nodecert reads format_version = {supported})"),
        }),
        Some(toml::Value::Integer(v)) if *v == supported as i64 => Ok(()),
        Some(toml::Value::Integer(v)) => Err(error_at(
            chain,
            &key_path("format_version"),
            format!("format_version = {v} is not supported (this nodecert reads format_version = {supported})"),
        )),
        Some(_) => Err(error_at(
            chain,
            &key_path("format_version"),
            "format_version must be an integer",
        )),
    }
}

/// Deserialize a single-file document (no `extends`), strictly and with located errors.
pub fn load_single<T: DeserializeOwned>(src: &Source, version: u32) -> Result<T, InputError> {
    let table = parse_table(src)?;
    check_format_version(src, &table, version)?;
    deserialize(std::slice::from_ref(src), table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(t: &str) -> Source {
        Source {
            name: "s.toml".into(),
            text: t.into(),
        }
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }

    #[test]
    fn locates_nested_keys() {
        let s = src("a = 1\n[b]\nc = 2\n[b.d]\ne = [1, 2, 3]\n");
        let l = locate(std::slice::from_ref(&s), &key_path("b.d.e[2]"));
        assert_eq!((l.line, l.column), (5, 12));
        let l = locate(std::slice::from_ref(&s), &key_path("b.c"));
        assert_eq!((l.line, l.column), (3, 1));
    }

    #[test]
    fn locates_in_inline_tables_and_parent_files() {
        let child = src("x = { y = 1, z = 2 }\n");
        let parent = Source {
            name: "p.toml".into(),
            text: "w = 5\n".into(),
        };
        let chain = [child, parent];
        let l = locate(&chain, &key_path("x.z"));
        assert_eq!((l.file.as_str(), l.line, l.column), ("s.toml", 1, 14));
        let l = locate(&chain, &key_path("w"));
        assert_eq!((l.file.as_str(), l.line), ("p.toml", 1));
    }

    #[test]
    fn merge_is_deep() {
        let mut a: toml::Table = toml::from_str("[t]\nx = 1\ny = 2\n").unwrap();
        let b: toml::Table = toml::from_str("[t]\ny = 3\n").unwrap();
        merge(&mut a, b);
        assert_eq!(a["t"]["x"].as_integer(), Some(1));
        assert_eq!(a["t"]["y"].as_integer(), Some(3));
    }
}
