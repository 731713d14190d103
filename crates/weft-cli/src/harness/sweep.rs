//! The sizes, element types and operators of a sweep (`weft bench`, `weft tune`, the
//! collective matrix of `weft selftest`): their parsers, whose errors name every choice, the
//! sizes between two bounds, and serde by name for the weft-types enums.

use weft_types::{DataType, ReduceOp};

/// Serde by name for the weft-types enums (which depend on nothing, serde included).
pub(crate) mod by_name {
    macro_rules! by_name {
        ($m:ident, $t:ty, $parse:path) => {
            pub(crate) mod $m {
                pub(crate) fn serialize<S: serde::Serializer>(v: &$t, s: S) -> Result<S::Ok, S::Error> {
                    s.serialize_str(v.name())
                }
                pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                    let name = <String as serde::Deserialize>::deserialize(d)?;
                    $parse(&name).map_err(serde::de::Error::custom)
                }
            }
        };
    }
    by_name!(dtype, weft_types::DataType, crate::harness::sweep::parse_dtype);
    by_name!(op, weft_types::ReduceOp, crate::harness::sweep::parse_op);
}

/// The size units [`parse_size`] reads (any case), with their shifts: the one table its parser
/// and its error message are made from.
const SIZE_UNITS: [(&str, u32); 11] = [
    ("", 0),
    ("B", 0),
    ("K", 10),
    ("KB", 10),
    ("KiB", 10),
    ("M", 20),
    ("MB", 20),
    ("MiB", 20),
    ("G", 30),
    ("GB", 30),
    ("GiB", 30),
];

/// Parses `1K`, `64M`, `1G`, `512` into bytes (units of 1024: see [`SIZE_UNITS`]).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: usize = digits.parse().map_err(|_| format!("size {s:?}: expected a whole number and a unit, e.g. 1K"))?;
    let Some(&(_, shift)) = SIZE_UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit)) else {
        let units: Vec<&str> = SIZE_UNITS.iter().map(|(u, _)| *u).filter(|u| !u.is_empty()).collect();
        return Err(format!("size {s:?}: unknown unit {unit:?} (one of {}, or none for bytes)", units.join(", ")));
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("size {s:?} overflows"))
}

/// Parses a sweep's `-b` and `-e`: both sizes, each error naming its flag, and the smallest no
/// larger than the largest.
pub fn parse_size_range(min: &str, max: &str) -> Result<(usize, usize), String> {
    let lo = parse_size(min).map_err(|e| format!("-b/--min-bytes: {e}"))?;
    let hi = parse_size(max).map_err(|e| format!("-e/--max-bytes: {e}"))?;
    if lo > hi {
        return Err(format!("-b {min} is larger than -e {max}: the sweep would have no size"));
    }
    Ok((lo, hi))
}

/// Formats bytes the way [`parse_size`] reads them: `1K`, `64M`, `1G`; one decimal when not a
/// whole unit (`1.5K`).
pub fn format_size(bytes: f64) -> String {
    for (shift, unit) in [(30, "G"), (20, "M"), (10, "K")] {
        let v = bytes / f64::from(1u32 << shift);
        if v >= 1.0 {
            return if v.fract() == 0.0 { format!("{v}{unit}") } else { format!("{v:.1}{unit}") };
        }
    }
    format!("{bytes}")
}

/// Parses a data type name; the error lists every type.
pub fn parse_dtype(s: &str) -> Result<DataType, String> {
    DataType::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = DataType::ALL.iter().map(|t| t.name()).collect();
        format!("unknown dtype {s:?} (one of {})", names.join(", "))
    })
}

/// Parses an operator name; the error lists every operator.
pub fn parse_op(s: &str) -> Result<ReduceOp, String> {
    ReduceOp::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = ReduceOp::ALL.iter().map(|o| o.name()).collect();
        format!("unknown op {s:?} (one of {})", names.join(", "))
    })
}

/// `min`, `min × factor`, ... up to `max` (just `min` when the factor is below 2).
pub fn sizes_between(min: usize, max: usize, factor: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        out.push(s);
        if factor <= 1 {
            break;
        }
        // Past usize::MAX is past any `max` (saturating here repeated usize::MAX forever).
        let Some(next) = s.checked_mul(factor) else { break };
        s = next;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_up_to_the_largest_size_ends() {
        let sizes = sizes_between(1 << 62, usize::MAX, 2);
        assert_eq!(sizes, [1 << 62, 1 << 63]);
        assert_eq!(sizes_between(usize::MAX, usize::MAX, 2), [usize::MAX]);
        assert_eq!(sizes_between(1024, 8192, 2), [1024, 2048, 4096, 8192]);
        assert_eq!(sizes_between(1024, 8192, 1), [1024]);
    }

    #[test]
    fn sizes_types_and_operators_parse_and_format() {
        assert_eq!(parse_size("1K").unwrap(), 1024);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("7").unwrap(), 7);
        assert!(parse_size("1Q").is_err());
        assert_eq!(parse_size("2gib").unwrap(), 2 << 30);
        let unit = parse_size_range("1X", "1G").unwrap_err();
        assert!(unit.starts_with("-b/--min-bytes") && unit.contains("\"X\"") && unit.contains("K, KB"), "{unit}");
        assert!(parse_size_range("1K", "x").unwrap_err().starts_with("-e/--max-bytes"));
        let inverted = parse_size_range("64K", "1K").unwrap_err();
        assert!(inverted.contains("-b 64K") && inverted.contains("-e 1K"), "{inverted}");
        assert_eq!(parse_size_range("1K", "1K").unwrap(), (1024, 1024));
        let dtype = parse_dtype("f17").unwrap_err();
        assert!(DataType::ALL.iter().all(|t| dtype.contains(t.name())), "{dtype}");
        let op = parse_op("xor").unwrap_err();
        assert!(ReduceOp::ALL.iter().all(|o| op.contains(o.name())), "{op}");
        for s in ["1K", "64M", "1G", "512"] {
            assert_eq!(format_size(parse_size(s).unwrap() as f64), s);
        }
        assert_eq!(format_size(1536.0), "1.5K");
    }
}
