//! What the typed layer checks of every view it is handed, and how it keeps them alive: a
//! view's length against what the call's shape needs, its GPU against the buffer's, and, once
//! the work is enqueued, a reference the stream holds until that work has run.

use weft_gpu::{DeviceView, Stream};

use crate::buffer::Buffer;
use crate::error::EpError;

/// One view of a call with the elements the call's shape needs of it.
pub(crate) struct Need<'v> {
    /// The argument, by DeepEP's name.
    pub(crate) argument: &'static str,
    /// The view.
    pub(crate) view: &'v dyn DeviceView,
    /// Elements the call reads or writes.
    pub(crate) elements: usize,
    /// How `elements` follows from the shape, for the message (`"tokens × topk"`).
    pub(crate) of: &'static str,
}

impl Buffer {
    /// `Err` naming the first view that is on another GPU or holds fewer elements than the call
    /// needs. At least, not exactly: a tensor of no rows still has one element to have an
    /// address.
    pub(crate) fn check_views(&self, needs: &[Need<'_>]) -> Result<(), EpError> {
        let expected = self.communicator().device().ordinal();
        for need in needs {
            let found = need.view.device().ordinal();
            if found != expected {
                let detail = format!("on GPU {found}, the EP buffer on GPU {expected}");
                return Err(EpError::InvalidArgument { rank: self.rank(), argument: need.argument, detail });
            }
            if need.view.len() < need.elements {
                let detail =
                    format!("{} elements, the call needs at least {} ({})", need.view.len(), need.elements, need.of);
                return Err(EpError::InvalidArgument { rank: self.rank(), argument: need.argument, detail });
            }
        }
        Ok(())
    }

    /// Runs `enqueue` (a raw call on views checked by the caller), then has `stream` keep every
    /// view alive: after, so that a concurrent [`Stream::wait_idle`] either sees this work or
    /// leaves the references in place.
    pub(crate) fn enqueue<R>(
        &self,
        stream: &Stream,
        needs: &[Need<'_>],
        enqueue: impl FnOnce() -> Result<R, EpError>,
    ) -> Result<R, EpError> {
        let result = enqueue();
        needs.iter().for_each(|n| n.view.retain_on(stream));
        result
    }
}

/// The views of `needs` that are given (an optional tensor left out needs nothing).
pub(crate) fn given<'v>(needs: impl IntoIterator<Item = Option<Need<'v>>>) -> Vec<Need<'v>> {
    needs.into_iter().flatten().collect()
}

/// `view` of `argument`, of which the call needs `elements` (`of`: how they follow from the shape).
pub(crate) fn need<'v>(
    argument: &'static str,
    view: &'v dyn DeviceView,
    elements: usize,
    of: &'static str,
) -> Need<'v> {
    Need { argument, view, elements, of }
}
