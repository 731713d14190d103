//! `ncclGroupStart`/`ncclGroupEnd`: a per-thread nesting depth and the work deferred until the
//! outermost end, as in NCCL. The state machine is generic so it can be tested alone.

use std::cell::RefCell;

use crate::error::NcclError;

/// One thread's group state: depth, the work queued since the outermost start, and the first
/// failure of a call made inside the group.
#[derive(Debug)]
pub struct Group<T> {
    depth: usize,
    queue: Vec<T>,
    failed: Option<NcclError>,
}

impl<T> Default for Group<T> {
    fn default() -> Self {
        Self { depth: 0, queue: Vec::new(), failed: None }
    }
}

/// What the outermost `ncclGroupEnd` releases.
#[derive(Debug, PartialEq)]
pub enum Released<T> {
    /// Every call of the group was accepted: run this work.
    Run(Vec<T>),
    /// A call inside the group failed (NCCL then fails the group's end with that call's code
    /// and launches nothing): the work to discard, and the first failure.
    Failed(Vec<T>, NcclError),
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

    /// Records that a call made inside the open group failed: the group's end fails too (the
    /// first failure wins). Nothing happens when no group is open.
    pub fn fail(&mut self, error: &NcclError) {
        if self.depth > 0 && self.failed.is_none() {
            self.failed = Some(error.clone());
        }
    }

    /// `ncclGroupEnd`: `ncclInvalidUsage` without a matching start; the queued work when the
    /// outermost group closes, `None` when an inner one does.
    pub fn end(&mut self) -> Result<Option<Released<T>>, NcclError> {
        match self.depth {
            0 => Err(NcclError::invalid_usage("ncclGroupEnd without a matching ncclGroupStart")),
            1 => {
                self.depth = 0;
                let queue = std::mem::take(&mut self.queue);
                Ok(Some(match self.failed.take() {
                    None => Released::Run(queue),
                    Some(e) => Released::Failed(queue, e),
                }))
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
        assert_eq!(g.end().unwrap(), Some(Released::Run(vec![1, 2, 3])));
        assert!(!g.active());
        assert!(g.end().is_err());
        g.start();
        assert_eq!(g.end().unwrap(), Some(Released::Run(vec![])));
    }

    #[test]
    fn a_call_failing_inside_a_group_fails_its_end_and_discards_the_work() {
        let mut g = Group::<u32>::default();
        g.fail(&NcclError::invalid_argument("outside any group"));
        g.start();
        g.push(1).unwrap();
        g.start();
        g.fail(&NcclError::invalid_argument("invalid datatype 12"));
        g.fail(&NcclError::invalid_usage("a later failure"));
        g.push(2).unwrap();
        assert_eq!(g.end().unwrap(), None);
        match g.end().unwrap() {
            Some(Released::Failed(work, e)) => {
                assert_eq!(work, vec![1, 2]);
                assert_eq!((e.code, e.message.as_str()), (Code::InvalidArgument, "invalid datatype 12"));
            }
            other => panic!("{other:?}"),
        }
        // The next group starts clean.
        g.start();
        assert_eq!(g.end().unwrap(), Some(Released::Run(vec![])));
    }
}
