//! Where an example call's work goes: an eager [`LaunchScope`], which waits for its stream
//! before the borrows it lent end, or a [`Capture`] into a [`GinGraph`], which borrows the same
//! owners for as long as it can be replayed, and replays only inside a [`LaunchScope`].

use std::marker::PhantomData;

use weft_gpu::{Graph, LaunchScope, Stream};

use crate::{DevComm, GinError};

mod sealed {
    /// Only this crate's targets: each keeps what its calls borrow for `'scope` valid until
    /// their work has run.
    pub trait Sealed {}
}

/// A stream whose work may use what is borrowed for `'scope` (sealed: [`LaunchScope`] and
/// [`Capture`]).
pub trait CallTarget<'scope>: sealed::Sealed {
    /// The stream the call's copies and kernel are enqueued on.
    fn stream(&self) -> &Stream;
}

impl sealed::Sealed for LaunchScope<'_, '_> {}

impl<'scope> CallTarget<'scope> for LaunchScope<'scope, '_> {
    fn stream(&self) -> &Stream {
        LaunchScope::stream(self)
    }
}

/// A stream capturing calls into a [`GinGraph<'d>`] (see [`GinGraph::capture`]). Invariant in
/// `'d`, as [`LaunchScope`] in its lifetimes: a call cannot lend it borrows shorter than the
/// graph's.
#[derive(Debug)]
pub struct Capture<'s, 'd> {
    stream: &'s Stream,
    _graph: PhantomData<&'d mut &'d ()>,
}

impl sealed::Sealed for Capture<'_, '_> {}

impl<'d> CallTarget<'d> for Capture<'_, 'd> {
    fn stream(&self) -> &Stream {
        self.stream
    }
}

/// Example calls captured in a CUDA graph. It borrows, for `'d`, the device communicator and
/// kernels the calls were given (the input and output buffers are kept by the graph itself),
/// and replays inside a [`LaunchScope`], which waits for the replay: a replay never outlives
/// what it uses. Each replay is a new call (see `device/kernels/gin/call.cuh`).
#[derive(Debug)]
pub struct GinGraph<'d> {
    graph: Graph,
    rank: usize,
    _borrows: PhantomData<&'d mut &'d ()>,
}

impl<'d> GinGraph<'d> {
    /// Captures the calls `body` enqueues on `stream` into a graph. The capture ends, and its
    /// graph is dropped, when `body` fails. Graph instantiation may wait for the GPU: on a GPU
    /// shared by several ranks, capture before any rank launches a call.
    pub fn capture(
        dev: &'d DevComm,
        stream: &Stream,
        body: impl FnOnce(&Capture<'_, 'd>) -> Result<(), GinError>,
    ) -> Result<Self, GinError> {
        let gpu = |source| dev.gpu_error(source);
        stream.begin_capture().map_err(gpu)?;
        let captured = body(&Capture { stream, _graph: PhantomData });
        let graph = stream.end_capture();
        captured?;
        Ok(Self { graph: graph.map_err(gpu)?, rank: dev.rank(), _borrows: PhantomData })
    }

    /// Enqueues a replay on `scope`'s stream.
    pub fn replay<'scope>(&'scope self, scope: &LaunchScope<'scope, '_>) -> Result<(), GinError> {
        self.graph.launch(scope.stream()).map_err(|source| GinError::Gpu { rank: self.rank, source })
    }
}
