//! One [`Transport`] over several: each connection is routed, once, to the transport that
//! reaches its peer (a proxy's peers in its own node go through the copy engine, peers in other
//! nodes through TCP), so one set of FIFOs and proxy threads serves every peer while each
//! connection keeps its own transport's ordering and completion rules.

use std::fmt;
use std::sync::{Arc, OnceLock};

use super::{ConnectionId, MAX_CONNECTIONS, Op, Submitted, Transport, TransportError};

const NAME: &str = "routed";

/// Routes each connection to one of a fixed list of transports (see the module docs).
pub struct RoutedTransport {
    transports: Vec<Arc<dyn Transport>>,
    /// Index into `transports` of each connection, set once by [`RoutedTransport::route`].
    routes: Box<[OnceLock<usize>]>,
}

impl fmt::Debug for RoutedTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.transports.iter().map(|t| t.name()).collect();
        f.debug_struct("RoutedTransport").field("transports", &names).finish()
    }
}

impl RoutedTransport {
    /// Routes over `transports`; [`RoutedTransport::route`] names them by their index here.
    pub fn new(transports: Vec<Arc<dyn Transport>>) -> Self {
        Self { transports, routes: (0..MAX_CONNECTIONS).map(|_| OnceLock::new()).collect() }
    }

    /// Sends `connection`'s operations to transport `transport` from now on (once per
    /// connection; connect it on that transport before its first command).
    pub fn route(&self, connection: ConnectionId, transport: usize) -> Result<(), TransportError> {
        let refuse = |detail: String| TransportError::Connect { transport: NAME, peer: String::new(), detail };
        if transport >= self.transports.len() {
            return Err(refuse(format!("no transport {transport} (there are {})", self.transports.len())));
        }
        let slot = self
            .routes
            .get(usize::from(connection))
            .ok_or_else(|| refuse(format!("connection index {connection} is not below {MAX_CONNECTIONS}")))?;
        slot.set(transport).map_err(|_| refuse(format!("connection {connection} is already routed")))
    }

    /// The transport of `connection`.
    fn of(&self, connection: ConnectionId) -> Result<&dyn Transport, TransportError> {
        let index = self
            .routes
            .get(usize::from(connection))
            .and_then(OnceLock::get)
            .ok_or(TransportError::UnknownConnection { transport: NAME, connection })?;
        Ok(self.transports[*index].as_ref())
    }
}

impl Transport for RoutedTransport {
    fn name(&self) -> &'static str {
        NAME
    }

    fn submit(&self, connection: ConnectionId, ops: &[Op]) -> Result<Submitted, TransportError> {
        self.of(connection)?.submit(connection, ops)
    }

    fn completed(&self, connection: ConnectionId) -> Result<u64, TransportError> {
        self.of(connection)?.completed(connection)
    }

    fn submitted(&self, connection: ConnectionId) -> Result<u64, TransportError> {
        self.of(connection)?.submitted(connection)
    }

    fn progress(&self) -> Result<(), TransportError> {
        self.transports.iter().try_for_each(|t| t.progress())
    }

    fn shutdown(&self) {
        for t in &self.transports {
            t.shutdown();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Records which connections it saw; fails `progress` on demand.
    #[derive(Debug, Default)]
    struct Recorder {
        name: &'static str,
        seen: Mutex<Vec<ConnectionId>>,
        broken: AtomicBool,
        shut: AtomicBool,
    }

    impl Transport for Recorder {
        fn name(&self) -> &'static str {
            self.name
        }
        fn submit(&self, connection: ConnectionId, ops: &[Op]) -> Result<Submitted, TransportError> {
            self.seen.lock().unwrap().push(connection);
            Ok(Submitted::Accepted { last: ops.len() as u64 - 1 })
        }
        fn completed(&self, _: ConnectionId) -> Result<u64, TransportError> {
            Ok(if self.name == "a" { 1 } else { 2 })
        }
        fn submitted(&self, _: ConnectionId) -> Result<u64, TransportError> {
            Ok(0)
        }
        fn progress(&self) -> Result<(), TransportError> {
            if self.broken.load(Ordering::Relaxed) {
                return Err(TransportError::Shutdown { transport: self.name });
            }
            Ok(())
        }
        fn shutdown(&self) {
            self.shut.store(true, Ordering::Relaxed);
        }
    }

    fn two() -> (Arc<Recorder>, Arc<Recorder>, RoutedTransport) {
        let a = Arc::new(Recorder { name: "a", ..Recorder::default() });
        let b = Arc::new(Recorder { name: "b", ..Recorder::default() });
        let routed = RoutedTransport::new(vec![a.clone(), b.clone()]);
        (a, b, routed)
    }

    #[test]
    fn each_connection_reaches_its_own_transport() {
        let (a, b, routed) = two();
        routed.route(0, 1).unwrap();
        routed.route(5, 0).unwrap();
        routed.submit(0, &[Op::Signal]).unwrap();
        routed.submit(5, &[Op::Signal]).unwrap();
        routed.submit(0, &[Op::Signal]).unwrap();
        assert_eq!(*a.seen.lock().unwrap(), vec![5]);
        assert_eq!(*b.seen.lock().unwrap(), vec![0, 0]);
        assert_eq!(routed.completed(5).unwrap(), 1);
        assert_eq!(routed.completed(0).unwrap(), 2);
    }

    #[test]
    fn unrouted_rerouted_and_unknown_targets_are_errors() {
        let (_, _, routed) = two();
        assert_eq!(
            routed.submit(3, &[Op::Signal]).unwrap_err(),
            TransportError::UnknownConnection { transport: "routed", connection: 3 }
        );
        routed.route(3, 0).unwrap();
        assert!(routed.route(3, 1).unwrap_err().to_string().contains("already routed"));
        assert!(routed.route(4, 2).unwrap_err().to_string().contains("no transport 2"));
        assert!(routed.route(MAX_CONNECTIONS as u16, 0).is_err());
    }

    #[test]
    fn progress_and_shutdown_reach_every_transport() {
        let (a, b, routed) = two();
        routed.progress().unwrap();
        b.broken.store(true, Ordering::Relaxed);
        assert_eq!(routed.progress().unwrap_err(), TransportError::Shutdown { transport: "b" });
        routed.shutdown();
        assert!(a.shut.load(Ordering::Relaxed) && b.shut.load(Ordering::Relaxed));
    }
}
