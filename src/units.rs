//! Byte sizes and rates: parsing what people write in suites, formatting what they read.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A size in bytes, written in suites as an integer or a string such as "256MiB", "8 GiB", "1KB".
///
/// ```
/// use nodecert::units::ByteSize;
/// assert_eq!(ByteSize::parse("512MiB").unwrap().0, 512 << 20);
/// assert_eq!(ByteSize::parse("8 GiB").unwrap().to_string(), "8 GiB");
/// assert!(ByteSize::parse("12 parsecs").is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let num = num.replace('_', "");
        if num.is_empty() {
            return Err(format!(
                "'{s}' is not a size (expected e.g. 512MiB, 8GiB, 1048576)"
            ));
        }
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            "t" | "tib" => 1 << 40,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            other => {
                return Err(format!(
                    "unknown size unit '{other}' in '{s}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB)"
                ))
            }
        };
        let v: f64 = num
            .parse()
            .map_err(|_| format!("'{s}' is not a size (expected e.g. 512MiB, 8GiB, 1048576)"))?;
        let bytes = v * mult as f64;
        if !(0.0..1.8e19).contains(&bytes) || bytes.fract() != 0.0 {
            return Err(format!("'{s}' is not a whole number of bytes"));
        }
        Ok(ByteSize(bytes as u64))
    }
}

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_bytes(self.0))
    }
}

/// A number as given, for messages about it: exact, in scientific notation when very large or
/// very small ("1e30", not thirty zeros), "NaN" and "inf" as Rust writes them.
pub fn exact(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && a.is_finite() && !(1e-6..1e15).contains(&a) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// "8 B", "4 KiB", "1.5 MiB", "16 GiB": binary units, at most one decimal.
pub fn format_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if v.fract() == 0.0 {
        format!("{} {}", v as u64, UNITS[i])
    } else {
        format!("{:.1} {}", v, UNITS[i])
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a size in bytes: an integer, or a string such as \"512MiB\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("a size cannot be negative ({v})")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// Sizes from `min` to `max` (inclusive) multiplying by `factor`, as nccl-tests' -b/-e/-f.
pub fn size_sweep(min: u64, max: u64, factor: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        out.push(s);
        match s.checked_mul(factor.max(2)) {
            Some(n) => s = n,
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_numbers_stay_short() {
        assert_eq!(exact(1e300), "1e300");
        assert_eq!(exact(-1e-9), "-1e-9");
        assert_eq!(exact(48.5), "48.5");
        assert_eq!(exact(f64::NAN), "NaN");
        assert_eq!(exact(f64::NEG_INFINITY), "-inf");
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(ByteSize::parse("8").unwrap().0, 8);
        assert_eq!(ByteSize::parse("512MiB").unwrap().0, 512 << 20);
        assert_eq!(ByteSize::parse("8 GiB").unwrap().0, 8 << 30);
        assert_eq!(ByteSize::parse("1.5KiB").unwrap().0, 1536);
        assert_eq!(ByteSize::parse("2GB").unwrap().0, 2_000_000_000);
        assert!(ByteSize::parse("12 parsecs").is_err());
        assert!(ByteSize::parse("MiB").is_err());
        assert!(ByteSize::parse("0.3B").is_err());
    }

    #[test]
    fn formats_sizes() {
        assert_eq!(format_bytes(8), "8 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(16 << 30), "16 GiB");
    }

    #[test]
    fn sweeps() {
        assert_eq!(size_sweep(8, 64, 2), vec![8, 16, 32, 64]);
        assert_eq!(size_sweep(1 << 20, 1 << 30, 4).len(), 6);
        assert!(size_sweep(64, 8, 2).is_empty());
    }
}
