//! The checked-in `docs/env.md` is the text weft-core's table of variables generates, and the
//! variables the layers below weft-core declare themselves are the table's.

use weft_core::env::vars;

#[test]
fn docs_env_md_is_generated_from_the_table() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/env.md");
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        checked_in == weft_core::env::reference_markdown(),
        "docs/env.md differs from the table in crates/weft-core/src/env/vars.rs; regenerate it with\n  \
         cargo run -q -p weft-core --example env_reference > docs/env.md"
    );
}

#[test]
fn weft_bootstraps_own_names_are_the_tables() {
    assert_eq!(weft_bootstrap::ENV_TIMEOUT, vars::WEFT_BOOTSTRAP_TIMEOUT.name);
    assert_eq!(weft_bootstrap::ENV_SECRET, vars::WEFT_BOOTSTRAP_SECRET.name);
}
