//! The proxy service: threads that poll FIFOs and run a handler per command.
//!
//! Each thread owns some FIFOs and visits them round-robin. For a FIFO it first finishes the
//! command it is waiting on, if any (a flush), then handles up to [`BATCH`] new commands:
//! [`CommandHandler::handle`] either finishes a command ([`Handled::Done`]: pop it), refuses it
//! for now ([`Handled::Backpressure`]: leave it, try again on the next round), or starts it and
//! returns a [`Pending`] the thread polls until it is complete (then pops). Commands of one FIFO
//! are therefore popped in order, and a flush holds back the commands behind it in its FIFO only.
//!
//! **Never blocking.** Handlers and transports never block and never make a CUDA call that can
//! wait behind a running kernel; a thread with nothing to do spins briefly, then sleeps in short
//! naps. The only waits are on the stop flag, so shutdown is bounded.
//!
//! **Failure.** The first error of any handler or transport stops the service: it is recorded,
//! every FIFO's stop word is set to `FifoStopCode::Failed` (device waits give up with
//! `ProxyStopped` instead of hanging), and the threads exit. [`ProxyService::shutdown`] returns
//! the error.
//!
//! **Shutdown.** [`ProxyService::shutdown`] sets every stop word to `FifoStopCode::Shutdown`
//! (new device pushes fail), lets the threads drain for up to `drain_timeout` (the commands
//! already pushed, and then the work of popped commands the handlers still have under way:
//! a put popped without a flush is only queued on its transport), then joins them and shuts the
//! transports down. It reports how many commands were executed and how many were left: still in
//! a FIFO, or popped but not complete when the deadline passed.

use std::convert::Infallible;
use std::fmt;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weft_types::{FifoCommand, FifoOp, FifoStopCode};

use super::transport::{ConnectionId, MAX_CONNECTIONS, Op, Submitted, Transport, TransportError};
use crate::fifo::{FifoMemory, FifoReader};

/// Commands handled per FIFO per round before the thread moves on.
pub const BATCH: usize = 64;

/// The proxy failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// A command carried an op number no handler is registered for.
    #[error("FIFO {fifo}: command at position {position} has op {op}, which has no handler")]
    UnknownOp {
        /// Index of the FIFO in the service.
        fifo: usize,
        /// Position of the command.
        position: u64,
        /// The op number.
        op: u8,
    },
    /// A transport failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// A handler failed for another reason.
    #[error("handler for op {op}: {detail}")]
    Handler {
        /// The op number.
        op: u8,
        /// What went wrong.
        detail: String,
    },
    /// The configuration is unusable.
    #[error("invalid proxy configuration: {0}")]
    Config(String),
    /// A thread could not be started or panicked.
    #[error("proxy thread: {0}")]
    Thread(String),
}

/// A started command the proxy polls until it is complete.
pub struct Pending(Box<dyn FnMut() -> Result<bool, ProxyError> + Send>);

impl Pending {
    /// Wraps a completion check: `Ok(true)` once complete.
    pub fn new(check: impl FnMut() -> Result<bool, ProxyError> + Send + 'static) -> Self {
        Self(Box::new(check))
    }

    pub(crate) fn poll(&mut self) -> Result<bool, ProxyError> {
        (self.0)()
    }
}

impl fmt::Debug for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Pending")
    }
}

/// What a handler did with a command.
#[derive(Debug)]
pub enum Handled {
    /// Finished: pop it.
    Done,
    /// Nothing done (no flow-control credit): leave it in the FIFO and try again later.
    Backpressure,
    /// Started; pop it once the check reports completion.
    Pending(Pending),
}

/// Executes the commands of one or more op numbers. Must not block.
pub trait CommandHandler: Send + Sync + fmt::Debug {
    /// Handles `command` (valid bit cleared).
    fn handle(&self, command: &FifoCommand) -> Result<Handled, ProxyError>;
    /// Called once per round on each thread; advances work the handler drives itself.
    fn progress(&self) -> Result<(), ProxyError> {
        Ok(())
    }
    /// Commands it finished ([`Handled::Done`]: popped, counted as executed) whose work is still
    /// under way; a draining service waits for them. An error once some never will be done.
    fn unfinished(&self) -> Result<u64, ProxyError> {
        Ok(0)
    }
    /// Called once at shutdown, after the threads are joined. Returns how many of the commands
    /// it finished are left undone for good (reported as abandoned, not executed).
    fn shutdown(&self) -> u64 {
        0
    }
}

/// The handler of ops 1–7 ([`FifoOp`]): puts and signals through a [`Transport`], flushes by
/// waiting (without blocking) until the transport reports the connection's operations applied.
/// A command without a flush is popped once queued; the handler keeps its last ticket until the
/// transport completes it, so a drain can wait for it and shutdown can tell it was not done.
#[derive(Debug)]
pub struct TransportHandler {
    transport: Arc<dyn Transport>,
    /// Per connection, the commands popped before their operations completed.
    unconfirmed: Box<[Mutex<Unconfirmed>]>,
}

/// Lists shorter than this are not pruned on `record`.
const PRUNE_MIN: usize = 64;

/// Commands of one connection popped before their operations completed.
#[derive(Debug, Default)]
struct Unconfirmed {
    /// Each command's end ticket (its last ticket + 1); in no particular order when several
    /// threads submit on the connection.
    ends: Vec<u64>,
    /// The connection's completed count when last asked.
    completed: u64,
    /// Length at which `record` next prunes.
    prune_at: usize,
}

impl Unconfirmed {
    /// Drops the commands complete once `completed` operations are; returns how many remain.
    fn prune(&mut self, completed: u64) -> u64 {
        self.completed = self.completed.max(completed);
        let done = self.completed;
        self.ends.retain(|&end| end > done);
        self.ends.len() as u64
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Holders leave the list whole; a panicking one leaves a usable list.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl TransportHandler {
    /// A handler over `transport`.
    pub fn new(transport: Arc<dyn Transport>) -> Self {
        Self { transport, unconfirmed: (0..MAX_CONNECTIONS).map(|_| Mutex::default()).collect() }
    }

    /// Keeps the end ticket of a popped command until its operations complete.
    fn record(&self, connection: ConnectionId, end: u64) {
        let Some(list) = self.unconfirmed.get(usize::from(connection)) else { return };
        let mut list = lock(list);
        list.ends.push(end);
        // Pruned once it doubled since the last prune: at most one `completed` call per
        // PRUNE_MIN / 2 commands, and a list of at most twice the commands in flight (or
        // PRUNE_MIN).
        if list.ends.len() >= list.prune_at {
            if let Ok(done) = self.transport.completed(connection) {
                list.prune(done);
            }
            list.prune_at = (2 * list.ends.len()).max(PRUNE_MIN);
        }
    }

    /// Prunes every connection's list with `completed` (the connection's count, `None` to keep
    /// the last one seen) and returns the commands left.
    fn count_unconfirmed<E>(
        &self,
        mut completed: impl FnMut(ConnectionId) -> Result<Option<u64>, E>,
    ) -> Result<u64, E> {
        let mut left = 0;
        for (connection, list) in (0..).zip(self.unconfirmed.iter()) {
            let mut list = lock(list);
            if list.ends.is_empty() {
                continue;
            }
            let last = list.completed;
            left += list.prune(completed(connection)?.unwrap_or(last));
        }
        Ok(left)
    }
}

impl TransportHandler {
    /// Submits `ops` on `connection`: `None` when the transport is out of credit (nothing was
    /// queued), else the end ticket of the operations (the connection's submitted count when
    /// `ops` is empty).
    pub(crate) fn submit(&self, connection: ConnectionId, ops: &[Op]) -> Result<Option<u64>, ProxyError> {
        if ops.is_empty() {
            return Ok(Some(self.transport.submitted(connection)?));
        }
        Ok(match self.transport.submit(connection, ops)? {
            Submitted::Full => None,
            Submitted::Accepted { last } => Some(last + 1),
        })
    }

    /// What becomes of a command whose operations on `connection` end at ticket `end`: without
    /// `flush` it is done (its end kept until the transport completes it, for the drain); with
    /// `flush` it is pending until every operation of the connection before `end` is applied.
    pub(crate) fn finish(&self, connection: ConnectionId, end: u64, flush: bool) -> Result<Handled, ProxyError> {
        if !flush {
            self.record(connection, end);
            return Ok(Handled::Done);
        }
        if self.transport.completed(connection)? >= end {
            return Ok(Handled::Done);
        }
        let transport = self.transport.clone();
        Ok(Handled::Pending(Pending::new(move || Ok(transport.completed(connection)? >= end))))
    }

    /// The transport.
    pub(crate) fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }
}

impl CommandHandler for TransportHandler {
    fn handle(&self, command: &FifoCommand) -> Result<Handled, ProxyError> {
        let f = command.fields();
        let op = u32::from(f.op);
        let mut ops = Vec::with_capacity(2);
        if op & FifoOp::Put as u32 != 0 {
            ops.push(Op::Put {
                src_memory: f.src_memory,
                src_offset: u64::from(f.src_offset),
                dst_memory: f.dst_memory,
                dst_offset: u64::from(f.dst_offset),
                len: u64::from(f.size),
            });
        }
        if op & FifoOp::Signal as u32 != 0 {
            ops.push(Op::Signal);
        }
        match self.submit(f.connection, &ops)? {
            None => Ok(Handled::Backpressure),
            Some(end) => self.finish(f.connection, end, op & FifoOp::Flush as u32 != 0),
        }
    }

    fn progress(&self) -> Result<(), ProxyError> {
        Ok(self.transport.progress()?)
    }

    fn unfinished(&self) -> Result<u64, ProxyError> {
        Ok(self.count_unconfirmed(|c| self.transport.completed(c).map(Some))?)
    }

    fn shutdown(&self) -> u64 {
        self.transport.shutdown();
        // The counts are final now. A failed connection reports its error instead: what it
        // completed before is the last count seen.
        let Ok(left) = self.count_unconfirmed::<Infallible>(|c| Ok(self.transport.completed(c).ok()));
        left
    }
}

/// Options of a [`ProxyService`].
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// Proxy threads; FIFOs are spread over them round-robin.
    pub threads: usize,
    /// CPUs the threads are pinned to (all threads share the set); `None`: not pinned. See
    /// [`cpus_near_pci_device`].
    pub cpus: Option<Vec<usize>>,
    /// How long shutdown lets the threads finish commands already pushed.
    pub drain_timeout: Duration,
    /// How long a thread keeps polling without a nap after its last command. A napping thread
    /// sees the next command up to a nap (plus the OS's wake-up) late, so this covers the gaps
    /// between the commands of a kernel and between the kernels of a step.
    pub idle_spin: Duration,
    /// Length of one nap of an idle thread.
    pub idle_nap: Duration,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            threads: 1,
            cpus: None,
            drain_timeout: Duration::from_secs(1),
            idle_spin: Duration::from_millis(50),
            idle_nap: Duration::from_micros(50),
        }
    }
}

impl ProxyConfig {
    /// This configuration with its threads pinned to the CPUs local to the PCI device `bus_id`
    /// (as `Device::pci_bus_id` returns it), unless it names CPUs already or sysfs does not say.
    pub fn near_pci_device(mut self, bus_id: &str) -> Self {
        if self.cpus.is_none() {
            self.cpus = cpus_near_pci_device(bus_id);
        }
        self
    }
}

/// What shutdown found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Commands executed over the service's life (their work complete).
    pub executed: u64,
    /// Commands that were pushed but not executed: still in a FIFO (a flush still waiting
    /// included), or popped with their work not complete when the drain ended.
    pub abandoned: u64,
}

trait AnyFifo: Send {
    fn poll(&self) -> Option<FifoCommand>;
    fn pop(&mut self);
    fn position(&self) -> u64;
    fn published(&self) -> u64;
}

impl<M: FifoMemory> AnyFifo for FifoReader<M> {
    fn poll(&self) -> Option<FifoCommand> {
        FifoReader::poll(self)
    }
    fn pop(&mut self) {
        FifoReader::pop(self);
    }
    fn position(&self) -> u64 {
        FifoReader::position(self)
    }
    fn published(&self) -> u64 {
        FifoReader::published(self)
    }
}

type StopFn = Box<dyn Fn(FifoStopCode) + Send + Sync>;

struct Slot {
    index: usize,
    reader: Box<dyn AnyFifo>,
    pending: Option<Pending>,
}

const RUNNING: u8 = 0;
const DRAINING: u8 = 1;
const STOPPED: u8 = 2;

struct Shared {
    state: AtomicU8,
    error: Mutex<Option<ProxyError>>,
    stops: Vec<StopFn>,
    handlers: Vec<Option<Arc<dyn CommandHandler>>>,
    distinct: Vec<Arc<dyn CommandHandler>>,
    config: ProxyConfig,
    drain_deadline: Mutex<Option<Instant>>,
    /// When the service started; `last_progress` counts from it.
    started: Instant,
    /// Nanoseconds from `started` to the last round in which any thread made progress: a thread
    /// naps only once the whole service has been idle for `idle_spin`, so with several threads
    /// one whose FIFOs carry a rare command stays as awake as a single thread serving every
    /// FIFO would.
    last_progress: AtomicU64,
}

impl Shared {
    fn progressed(&self) {
        self.last_progress.store(self.started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// Whether no thread has made progress for `idle_spin`.
    fn idle_for_spin(&self) -> bool {
        let last = Duration::from_nanos(self.last_progress.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last) > self.config.idle_spin
    }

    fn fail(&self, error: ProxyError) {
        {
            let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                tracing::error!("proxy stopped: {error}");
                *slot = Some(error);
            }
        }
        for stop in &self.stops {
            stop(FifoStopCode::Failed);
        }
        self.state.store(STOPPED, Ordering::Release);
    }
}

/// Builds a [`ProxyService`].
pub struct ProxyServiceBuilder {
    config: ProxyConfig,
    fifos: Vec<Box<dyn AnyFifo>>,
    stops: Vec<StopFn>,
    handlers: Vec<Option<Arc<dyn CommandHandler>>>,
}

impl fmt::Debug for ProxyServiceBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyServiceBuilder").field("config", &self.config).field("fifos", &self.fifos.len()).finish()
    }
}

impl ProxyServiceBuilder {
    /// Registers `handler` for op number `op` (1–15).
    pub fn handler(mut self, op: u8, handler: Arc<dyn CommandHandler>) -> Result<Self, ProxyError> {
        let slot = self
            .handlers
            .get_mut(usize::from(op))
            .filter(|_| op != 0)
            .ok_or_else(|| ProxyError::Config(format!("op {op} is outside 1..=15")))?;
        *slot = Some(handler);
        Ok(self)
    }

    /// Registers a [`TransportHandler`] over `transport` for ops 1–7.
    pub fn transport(mut self, transport: Arc<dyn Transport>) -> Self {
        let handler: Arc<dyn CommandHandler> = Arc::new(TransportHandler::new(transport));
        for op in 1..=7 {
            self.handlers[op] = Some(handler.clone());
        }
        self
    }

    /// Adds a FIFO; returns its index (FIFOs go to threads round-robin by index).
    pub fn fifo<M: FifoMemory + Clone + 'static>(mut self, reader: FifoReader<M>) -> Self {
        let memory = reader.memory().clone();
        self.stops.push(Box::new(move |code| {
            memory.stop().store(code as u64, crate::sync::Ordering::Release);
        }));
        self.fifos.push(Box::new(reader));
        self
    }

    /// Starts the threads.
    pub fn start(self) -> Result<ProxyService, ProxyError> {
        let threads = self.config.threads;
        if threads == 0 {
            return Err(ProxyError::Config("at least one thread is needed".into()));
        }
        if self.config.cpus.as_ref().is_some_and(Vec::is_empty) {
            return Err(ProxyError::Config("the CPU set to pin to is empty".into()));
        }
        let mut distinct: Vec<Arc<dyn CommandHandler>> = Vec::new();
        for h in self.handlers.iter().flatten() {
            if !distinct.iter().any(|d| Arc::ptr_eq(d, h)) {
                distinct.push(h.clone());
            }
        }
        let shared = Arc::new(Shared {
            state: AtomicU8::new(RUNNING),
            error: Mutex::new(None),
            stops: self.stops,
            handlers: self.handlers,
            distinct,
            config: self.config,
            drain_deadline: Mutex::new(None),
            started: Instant::now(),
            last_progress: AtomicU64::new(0),
        });
        let mut per_thread: Vec<Vec<Slot>> = (0..threads).map(|_| Vec::new()).collect();
        for (index, reader) in self.fifos.into_iter().enumerate() {
            per_thread[index % threads].push(Slot { index, reader, pending: None });
        }
        let mut handles = Vec::new();
        for (t, slots) in per_thread.into_iter().enumerate() {
            let s = shared.clone();
            let spawned = std::thread::Builder::new().name(format!("weft-proxy-{t}")).spawn(move || run(&s, slots));
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    shared.fail(ProxyError::Thread(e.to_string()));
                    for h in handles {
                        let _ = h.join();
                    }
                    return Err(ProxyError::Thread(e.to_string()));
                }
            }
        }
        Ok(ProxyService { shared, threads: handles, done: false })
    }
}

/// Proxy threads serving FIFOs. Dropping it shuts it down (see [`ProxyService::shutdown`]).
pub struct ProxyService {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<(u64, u64)>>,
    done: bool,
}

impl fmt::Debug for ProxyService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyService").field("threads", &self.threads.len()).finish()
    }
}

impl ProxyService {
    /// A builder with `config`.
    pub fn builder(config: ProxyConfig) -> ProxyServiceBuilder {
        ProxyServiceBuilder { config, fifos: Vec::new(), stops: Vec::new(), handlers: (0..16).map(|_| None).collect() }
    }

    /// The error that stopped the service, if any.
    pub fn failure(&self) -> Option<ProxyError> {
        self.shared.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stops new pushes, drains what was pushed (bounded by `drain_timeout`), joins the threads,
    /// shuts the handlers' transports down. Returns the error that stopped the service, if one did.
    pub fn shutdown(mut self) -> Result<ShutdownReport, ProxyError> {
        self.stop()
    }

    fn stop(&mut self) -> Result<ShutdownReport, ProxyError> {
        if self.done {
            return Ok(ShutdownReport::default());
        }
        self.done = true;
        let failed = self.failure().is_some();
        if !failed {
            for stop in &self.shared.stops {
                stop(FifoStopCode::Shutdown);
            }
        }
        *self.shared.drain_deadline.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Instant::now() + self.shared.config.drain_timeout);
        let _ = self.shared.state.compare_exchange(RUNNING, DRAINING, Ordering::AcqRel, Ordering::Acquire);
        let mut report = ShutdownReport::default();
        let mut panicked = None;
        for t in self.threads.drain(..) {
            match t.join() {
                Ok((executed, abandoned)) => {
                    report.executed += executed;
                    report.abandoned += abandoned;
                }
                Err(_) => panicked = Some(ProxyError::Thread("a proxy thread panicked".into())),
            }
        }
        let undone: u64 = self.shared.distinct.iter().map(|h| h.shutdown()).sum();
        // Popped, so counted by a thread, but never done.
        report.executed = report.executed.saturating_sub(undone);
        report.abandoned += undone;
        match self.failure().or(panicked) {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }
}

impl Drop for ProxyService {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn pin(cpus: &[usize]) {
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu < libc::CPU_SETSIZE as usize {
            // SAFETY: `cpu` is below CPU_SETSIZE, inside the set.
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
    }
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        tracing::warn!("could not pin a proxy thread to CPUs {cpus:?}: {}", std::io::Error::last_os_error());
    }
}

/// One proxy thread. Returns (commands executed, commands left behind).
fn run(shared: &Shared, mut slots: Vec<Slot>) -> (u64, u64) {
    if let Some(cpus) = &shared.config.cpus {
        pin(cpus);
    }
    let mut executed = 0u64;
    let mut idle_since = Instant::now();
    let mut idle_rounds = 0u32;
    let mut napping = false;
    loop {
        let state = shared.state.load(Ordering::Acquire);
        if state == STOPPED {
            break;
        }
        let mut progressed = false;
        let mut busy = false;
        if let Err(e) = round(shared, &mut slots, &mut executed, &mut progressed, &mut busy) {
            shared.fail(e);
            break;
        }
        for h in &shared.distinct {
            if let Err(e) = h.progress() {
                shared.fail(e);
                break;
            }
        }
        if state == DRAINING && drained(shared, busy) {
            break;
        }
        if progressed {
            idle_rounds = 0;
            napping = false;
            shared.progressed();
        } else {
            if idle_rounds == 0 {
                idle_since = Instant::now();
            }
            idle_rounds = idle_rounds.saturating_add(1);
            // The clock is read every 256 idle rounds, not on every poll; a napping thread
            // wakes to spinning when another thread made progress since.
            if !napping
                && idle_rounds.is_multiple_of(256)
                && idle_since.elapsed() > shared.config.idle_spin
                && shared.idle_for_spin()
            {
                napping = true;
            } else if napping && !shared.idle_for_spin() {
                napping = false;
            }
            if napping {
                std::thread::sleep(shared.config.idle_nap);
            } else {
                std::hint::spin_loop();
            }
        }
    }
    // A pending command is still at its FIFO's tail: counted there.
    let abandoned = slots.iter().map(|s| s.reader.published()).sum();
    (executed, abandoned)
}

/// Whether a draining thread may stop: the deadline passed, or its FIFOs are empty (`busy`
/// false) and no handler has work of popped commands under way. A handler's error fails the
/// service (that work will never be done).
fn drained(shared: &Shared, busy: bool) -> bool {
    let deadline = *shared.drain_deadline.lock().unwrap_or_else(|p| p.into_inner());
    if deadline.is_some_and(|d| Instant::now() > d) {
        return true;
    }
    if busy {
        return false;
    }
    let mut unfinished = 0;
    for h in &shared.distinct {
        match h.unfinished() {
            Ok(n) => unfinished += n,
            Err(e) => {
                shared.fail(e);
                return true;
            }
        }
    }
    unfinished == 0
}

/// Visits every FIFO once. `busy`: some FIFO still has work (a command or a pending flush).
fn round(
    shared: &Shared,
    slots: &mut [Slot],
    executed: &mut u64,
    progressed: &mut bool,
    busy: &mut bool,
) -> Result<(), ProxyError> {
    for slot in slots.iter_mut() {
        if let Some(pending) = &mut slot.pending {
            if !pending.poll()? {
                *busy = true;
                continue;
            }
            slot.pending = None;
            slot.reader.pop();
            *executed += 1;
            *progressed = true;
        }
        for _ in 0..BATCH {
            let Some(command) = slot.reader.poll() else { break };
            *busy = true;
            let op = command.op();
            let handler = shared
                .handlers
                .get(usize::from(op))
                .and_then(Option::as_ref)
                .ok_or(ProxyError::UnknownOp { fifo: slot.index, position: slot.reader.position(), op })?;
            match handler.handle(&command)? {
                Handled::Done => {
                    slot.reader.pop();
                    *executed += 1;
                    *progressed = true;
                }
                Handled::Backpressure => break,
                Handled::Pending(p) => {
                    slot.pending = Some(p);
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Parses a Linux CPU list (`0-3,8,10-11`).
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b || b - a > 1 << 16 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// The CPUs local to the PCI device `bus_id` (`0000:3b:00.0`, as `Device::pci_bus_id`
/// returns it), from sysfs; `None` when sysfs does not say.
pub fn cpus_near_pci_device(bus_id: &str) -> Option<Vec<usize>> {
    let path = format!("/sys/bus/pci/devices/{}/local_cpulist", bus_id.to_ascii_lowercase());
    parse_cpu_list(&std::fs::read_to_string(path).ok()?).filter(|c| !c.is_empty())
}

#[cfg(all(test, not(weft_loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(cpus_near_pci_device("not-a-device"), None);
    }

    #[test]
    fn unconfirmed_commands_leave_once_completed_passes_their_end_in_any_order() {
        let mut list = Unconfirmed { ends: vec![4, 2, 6], ..Unconfirmed::default() };
        assert_eq!(list.prune(3), 2);
        assert_eq!(list.ends, vec![4, 6]);
        assert_eq!(list.prune(1), 2, "a count never goes back");
        assert_eq!(list.prune(6), 0);
    }
}
