//! Helpers shared by the proxy integration tests.

use std::sync::{Arc, mpsc};
use std::time::Duration;

use weft_net::fifo::{FifoReader, HostFifo};
use weft_net::proxy::{ProxyConfig, ProxyService, Transport};

/// Starts a proxy service reading `fifos` over `transport`.
pub(crate) fn start_service(transport: Arc<dyn Transport>, fifos: &[HostFifo], config: ProxyConfig) -> ProxyService {
    let mut b = ProxyService::builder(config).transport(transport);
    for f in fifos {
        b = b.fifo(FifoReader::new(f.clone()).unwrap());
    }
    b.start().unwrap()
}

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
