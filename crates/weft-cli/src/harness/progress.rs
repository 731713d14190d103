//! Progress of a sweep. Rank 0 appends one line per finished size to a file in the launcher's
//! report folder; the launcher counts the lines and draws a bar on stderr (only when stderr is
//! a terminal). Under torchrun, rank 0 moves its own bar ([`Bar::show`]). Progress is cosmetic:
//! failing to record or read it never fails a run.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The progress file's name inside the report folder.
const FILE: &str = "progress";

/// The bar's layout.
const TEMPLATE: &str = "{spinner} [{elapsed_precise}] {wide_bar} {msg} (eta {eta})";

/// Each size's share of the bar: a fixed cost (setup, barriers, graph capture, host check) plus
/// one proportional to its bytes, so the estimate is not dominated by the many small sizes.
fn weight(bytes: usize) -> u64 {
    (bytes as u64 >> 10) + 1024
}

/// In rank 0 of a worker: records that the size `bytes` is done.
pub(crate) fn record(bytes: usize) {
    let append = || -> Result<(), String> {
        let path = super::launch::report_dir()?.join(FILE);
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(|e| e.to_string())?;
        // One write of a whole line: the reader never sees half a line as done.
        f.write_all(format!("{bytes}\n").as_bytes()).map_err(|e| e.to_string())
    };
    if let Err(e) = append() {
        tracing::debug!("bench progress not recorded: {e}");
    }
}

/// Number of sizes rank 0 has finished, read from the report folder `dir`.
fn finished(dir: &Path) -> usize {
    std::fs::read(dir.join(FILE)).map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count())
}

/// The launcher's bar over a sweep of `sizes`.
#[derive(Debug)]
pub(crate) struct Bar {
    bar: ProgressBar,
    sizes: Vec<usize>,
    seen: usize,
}

impl Bar {
    /// A bar on stderr (hidden when stderr is not a terminal).
    pub(crate) fn new(sizes: &[usize]) -> Self {
        let total = sizes.iter().map(|&b| weight(b)).sum();
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(TEMPLATE) {
            bar.set_style(style);
        }
        bar.set_message("setting up");
        bar.enable_steady_tick(Duration::from_millis(200));
        Self { bar, sizes: sizes.to_vec(), seen: 0 }
    }

    /// Moves the bar to what rank 0 has recorded in `dir`.
    pub(crate) fn update(&mut self, dir: &Path) {
        let done = finished(dir);
        if done != self.seen {
            self.seen = done;
            self.show(done);
        }
    }

    /// Moves the bar to `done` finished sizes.
    pub(crate) fn show(&self, done: usize) {
        let done = done.min(self.sizes.len());
        self.bar.set_position(self.sizes[..done].iter().map(|&b| weight(b)).sum());
        let next =
            self.sizes.get(done).map_or_else(|| "finishing".to_string(), |&b| super::sweep::format_size(b as f64));
        self.bar.set_message(format!("{done}/{} sizes, now {next}", self.sizes.len()));
    }

    /// Removes the bar (before the table is printed).
    pub(crate) fn finish(self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_follows_the_recorded_lines() {
        assert!(ProgressStyle::with_template(TEMPLATE).is_ok());
        let dir = std::env::temp_dir().join(format!("weft-progress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sizes = [1024, 4096, 1 << 20];
        let mut bar = Bar::new(&sizes);
        bar.update(&dir);
        assert_eq!((bar.seen, bar.bar.position()), (0, 0));
        std::fs::write(dir.join(FILE), "1024\n4096\n104").unwrap(); // a third line half written
        bar.update(&dir);
        assert_eq!((bar.seen, bar.bar.position()), (2, weight(1024) + weight(4096)));
        std::fs::write(dir.join(FILE), "1024\n4096\n1048576\n").unwrap();
        bar.update(&dir);
        assert_eq!(bar.bar.position(), bar.bar.length().unwrap());
        bar.finish();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
