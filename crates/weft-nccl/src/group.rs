//! `ncclGroupStart`/`ncclGroupEnd`: a per-thread nesting depth and the work deferred until the
//! outermost end, as in NCCL. The state machine is generic so it can be tested alone.

use std::cell::RefCell;

use crate::error::NcclError;

/// One thread's group state: depth and the work queued since the outermost start.
#[derive(Debug)]
pub struct Group<T> {
    depth: usize,
    queue: Vec<T>,
}

impl<T> Default for Group<T> {
    fn default() -> Self {
        Self { depth: 0, queue: Vec::new() }
    }
}

impl<T> Group<T> {
    /// `ncclGroupStart`.
    pub fn start(&mut self) {
        self.depth += 1;
    }

    /// Whether a group is open (calls are queued, not run).
    pub fn active(&self) -> bool {
        self.depth > 0
    }

    /// Queues `item` for the outermost end; gives it back when no group is open.
    pub fn push(&mut self, item: T) -> Result<(), T> {
        if self.depth == 0 {
            return Err(item);
        }
        self.queue.push(item);
        Ok(())
    }

    /// `ncclGroupEnd`: `ncclInvalidUsage` without a matching start; the queued work when the
    /// outermost group closes, `None` when an inner one does.
    pub fn end(&mut self) -> Result<Option<Vec<T>>, NcclError> {
        match self.depth {
            0 => Err(NcclError::invalid_usage("ncclGroupEnd without a matching ncclGroupStart")),
            1 => {
                self.depth = 0;
                Ok(Some(std::mem::take(&mut self.queue)))
            }
            _ => {
                self.depth -= 1;
                Ok(None)
            }
        }
    }
}

thread_local! {
    static GROUP: RefCell<Group<crate::exec::Deferred>> = RefCell::default();
}

/// Runs `f` on this thread's group state.
pub fn with<R>(f: impl FnOnce(&mut Group<crate::exec::Deferred>) -> R) -> R {
    GROUP.with(|g| f(&mut g.borrow_mut()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    #[test]
    fn groups_nest_and_release_work_at_the_outermost_end() {
        let mut g = Group::<u32>::default();
        assert_eq!(g.end().unwrap_err().code, Code::InvalidUsage);
        assert_eq!(g.push(1), Err(1));
        g.start();
        g.push(1).unwrap();
        g.start();
        assert!(g.active());
        g.push(2).unwrap();
        assert_eq!(g.end().unwrap(), None);
        g.push(3).unwrap();
        assert_eq!(g.end().unwrap(), Some(vec![1, 2, 3]));
        assert!(!g.active());
        assert!(g.end().is_err());
        g.start();
        assert_eq!(g.end().unwrap(), Some(vec![]));
    }
}
