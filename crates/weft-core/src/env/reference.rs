//! `docs/env.md`, generated from the table of [`super::vars`].

use std::fmt::Write;

use super::vars::{ALL, Scope, Variable};

/// The crates in layer order, lowest first: the reference lists each one's variables together.
const LAYERS: &[&str] =
    &["weft-gpu", "weft-bootstrap", "weft-core", "weft-net", "weft-coll", "weft-nccl", "weft-cli", "weft"];

/// The text of `docs/env.md`: every variable of the table, configuration by owning crate (lowest
/// layer first), then the test suites' variables, then the `weft` command's internal ones.
pub fn reference_markdown() -> String {
    let mut out = String::from(
        "# Environment variables\n\n\
         Generated from `crates/weft-core/src/env/vars.rs` (the one table of every variable weft \
         reads); do not edit by hand. After changing the table, regenerate with\n\
         `cargo run -q -p weft-core --example env_reference > docs/env.md`.\n\n\
         weft-core's `Env` reads the process environment once; the layers above look their \
         variables up in it by their entry in the table. weft-gpu and weft-bootstrap, below \
         weft-core, read their own (where CUDA is, torchrun's launch variables).\n",
    );
    for owner in LAYERS {
        section(&mut out, &format!("## {owner}\n\n"), |v| v.scope == Scope::Config && v.owner == *owner);
    }
    section(
        &mut out,
        "## Tests and CI\n\nRead by the test suites (`scripts/test.sh` sets them), never by the library.\n\n",
        |v| v.scope == Scope::Test,
    );
    section(
        &mut out,
        "## Internal\n\nSet by the `weft` command for the worker processes it starts; never set them by hand.\n\n",
        |v| v.scope == Scope::Internal,
    );
    out
}

fn section(out: &mut String, heading: &str, keep: impl Fn(&Variable) -> bool) {
    let rows: Vec<&Variable> = ALL.iter().filter(|v| keep(v)).collect();
    if rows.is_empty() {
        return;
    }
    out.push('\n');
    out.push_str(heading);
    out.push_str("| variable | type | default | meaning | read by |\n| --- | --- | --- | --- | --- |\n");
    for v in rows {
        // Writing to a String cannot fail.
        let _ = writeln!(out, "| `{}` | {} | {} | {} | {} |", v.name, v.ty.describe(), v.default, v.meaning, v.owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_is_listed_once_under_a_known_owner() {
        let text = reference_markdown();
        for v in ALL {
            assert!(LAYERS.contains(&v.owner), "{} is owned by unknown crate {}", v.name, v.owner);
            assert_eq!(text.matches(&format!("| `{}` |", v.name)).count(), 1, "{}", v.name);
            assert_eq!(ALL.iter().filter(|w| w.name == v.name).count(), 1, "{} is declared twice", v.name);
            assert!(!v.meaning.contains('|') && !v.default.contains('|'), "{} would break the table", v.name);
        }
    }
}
