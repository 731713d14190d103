//! Launches whose arguments borrow host-side owners: a [`LaunchScope`] lends its launches
//! everything that outlives the scope, and the scope ends only after the stream was waited for.
//!
//! The model is `std::thread::scope`: the body gets a `&'scope LaunchScope<'scope, 'env>` for a
//! lifetime it cannot name, between the call and `'env`, so an argument borrowed for `'scope`
//! (what the safe launchers of the kernels' owners take) must be owned outside the body, and
//! lives until the wait at its end.

use std::marker::PhantomData;
use std::time::Duration;

use crate::error::GpuError;
use crate::kernel_params::KernelParams;
use crate::module::{Kernel, LaunchConfig};
use crate::stream::Stream;

/// A stream lent to launches whose device addresses stay valid for `'scope`.
#[derive(Debug)]
pub struct LaunchScope<'scope, 'env: 'scope> {
    stream: &'env Stream,
    /// Invariant in both lifetimes, as `std::thread::Scope`: a borrow cannot be shortened to fit.
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl<'scope, 'env> LaunchScope<'scope, 'env> {
    /// The stream the launches go to (for events around them).
    pub fn stream(&self) -> &'env Stream {
        self.stream
    }

    /// Enqueues `kernel` with `params` (see [`Kernel::launch`]).
    ///
    /// # Safety
    /// Every device address among `params` must be valid for the accesses the kernel makes for
    /// `'scope`: owned by something borrowed for `'scope`, as the safe launchers built on this
    /// take their arguments.
    pub unsafe fn launch<P: KernelParams>(
        &self,
        kernel: &Kernel,
        config: LaunchConfig,
        params: &P,
    ) -> Result<(), GpuError> {
        // SAFETY: the caller's contract, for as long as the scope, which waits for the stream.
        unsafe { kernel.launch(self.stream, config, params) }
    }
}

impl Stream {
    /// Runs `body` with a [`LaunchScope`] on this stream, then waits until the stream is idle.
    /// Returns what `body` returned and the outcome of the first `timeout` of the wait (`what`
    /// names the work in the error). A stream still busy then is waited for further, warning
    /// every `timeout`, since the scope's borrows end with the call: the scope returns once its
    /// kernels have ended or the context has failed.
    pub fn launch_scope<'env, R>(
        &'env self,
        timeout: Duration,
        what: &str,
        body: impl for<'scope> FnOnce(&'scope LaunchScope<'scope, 'env>) -> R,
    ) -> (R, Result<(), GpuError>) {
        let scope = LaunchScope { stream: self, _scope: PhantomData, _env: PhantomData };
        let result = body(&scope);
        let waited = self.wait_idle(timeout, what);
        if matches!(waited, Err(GpuError::StreamTimeout { .. })) {
            while let Err(GpuError::StreamTimeout { .. }) = self.wait_idle(timeout, what) {
                tracing::warn!(
                    "{what}: still running after {timeout:?} more; its arguments stay borrowed until it ends"
                );
            }
        }
        (result, waited)
    }
}
