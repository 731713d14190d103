//! Prints `docs/env.md`, the reference of every environment variable weft reads, generated from
//! weft-core's table: `cargo run -q -p weft-core --example env_reference > docs/env.md`.

fn main() {
    print!("{}", weft_core::env::reference_markdown());
}
