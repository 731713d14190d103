//! Helpers shared by the proxy integration tests.

use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on a thread and fails the test if it does not finish within `secs` seconds.
pub(crate) fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("the test hung for {secs} s"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the test body panicked (see above)"),
    }
}
