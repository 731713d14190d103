//! A launch timed by the GPU: two events around what a [`LaunchScope`] enqueues, the bounded
//! wait for the stream, and the device's error record checked after it.

use std::time::Duration;

use weft_core::Communicator;
use weft_gpu::{Event, LaunchScope, Stream};

type BoxError = Box<dyn std::error::Error>;

/// Milliseconds between two events on `stream` around what `launch` enqueues in a launch
/// scope (which waits, bounded by `timeout`, until the stream is idle), once the device's error
/// record has been checked. `what` names the work in a timeout.
pub(crate) fn timed_scope<'env, E: Into<BoxError>>(
    comm: &Communicator,
    stream: &'env Stream,
    timeout: Duration,
    what: &str,
    launch: impl for<'scope> FnOnce(&'scope LaunchScope<'scope, 'env>) -> Result<(), E>,
) -> Result<f32, BoxError> {
    let (start, end) = (Event::new(comm.device())?, Event::new(comm.device())?);
    let (launched, idle) = stream.launch_scope(timeout, what, |scope| {
        start.record(scope.stream())?;
        launch(scope).map_err(Into::into)?;
        Ok::<_, BoxError>(end.record(scope.stream())?)
    });
    launched?;
    idle?;
    comm.check_device()?;
    Ok(start.elapsed_ms(&end)?)
}
