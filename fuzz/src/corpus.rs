//! The committed seed corpus: `fuzz/corpus/<target>/<seed>`, exactly the targets' seeds.

use std::path::{Path, PathBuf};

use crate::Target;

/// Where `target`'s committed corpus lives.
pub fn dir(target: &Target) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target.name)
}

/// Writes `target`'s seeds into its corpus folder, replacing what was there.
pub fn write(target: &Target) -> std::io::Result<()> {
    let dir = dir(target);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    for (name, bytes) in (target.seeds)() {
        std::fs::write(dir.join(name), bytes)?;
    }
    Ok(())
}

/// How `target`'s committed corpus differs from its seeds (`None`: it does not).
pub fn difference(target: &Target) -> std::io::Result<Option<String>> {
    let dir = dir(target);
    let mut committed: Vec<String> = Vec::new();
    if dir.exists() {
        for entry in std::fs::read_dir(&dir)? {
            committed.push(entry?.file_name().to_string_lossy().into_owned());
        }
    }
    committed.sort();
    let seeds = (target.seeds)();
    let mut expected: Vec<String> = seeds.iter().map(|(name, _)| (*name).to_owned()).collect();
    expected.sort();
    if committed != expected {
        return Ok(Some(format!("{}: files {committed:?}, seeds {expected:?}", dir.display())));
    }
    for (name, bytes) in seeds {
        if std::fs::read(dir.join(name))? != bytes {
            return Ok(Some(format!("{}: differs from its seed", dir.join(name).display())));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

    use crate::TARGETS;

    /// The committed corpus is what the encoders make today (run with `WEFT_FUZZ_BLESS=1` to
    /// rewrite it), so the fuzzers start from valid inputs.
    #[test]
    fn the_committed_corpus_is_the_seeds() {
        let bless = std::env::var_os("WEFT_FUZZ_BLESS").is_some_and(|v| v == "1");
        for target in &TARGETS {
            if bless {
                super::write(target).unwrap();
            }
            if let Some(difference) = super::difference(target).unwrap() {
                panic!("{difference}; rerun with WEFT_FUZZ_BLESS=1 to rewrite the corpus");
            }
        }
    }

    /// Every seed decodes and passes its target's check (its round trips included).
    #[test]
    fn every_seed_passes_its_check() {
        for target in &TARGETS {
            for (name, bytes) in (target.seeds)() {
                assert!((target.check)(&bytes), "{}/{name} does not decode", target.name);
            }
        }
    }
}
