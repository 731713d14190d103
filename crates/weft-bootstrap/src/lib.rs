//! Rendezvous for weft ranks: how N processes (or N threads) that will drive GPUs find each
//! other and swap the few bytes a communicator needs before any GPU memory is shared.
//!
//! # Charter
//!
//! **Owns**
//! - [`UniqueId`]: 128 bytes holding a random 32-byte secret and the rendezvous address,
//!   passed between processes as bytes or hex.
//! - [`TcpBootstrap`]: TCP rendezvous hosted by rank 0, then a lazily built mesh of one
//!   authenticated TCP connection per ordered pair of ranks. It offers `all_gather`,
//!   `broadcast`, `barrier` and tagged `send`/`recv` of byte strings.
//! - [`InProcessBootstrap`]: the same operations for one process that drives several GPUs from
//!   threads.
//! - [`TorchrunEnv`]: the torchrun-style launch variables (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//!   `MASTER_ADDR`, `MASTER_PORT`).
//! - [`codec`]: the versioned wire format. Every byte that crosses a socket is a frame of it.
//!
//! **Must not**
//! - contain `unsafe` (the crate is `#![forbid(unsafe_code)]`), touch a GPU or know what the
//!   bytes it carries mean;
//! - hang: every wait is bounded by the configured timeout, and a timeout names the ranks that
//!   never arrived;
//! - panic on bad input: malformed frames, strangers, oversized lengths and dead peers are
//!   errors ([`BootstrapError`]);
//! - allocate what a peer announces before checking it against the frame limit;
//! - accept a connection that has not proved it knows the job's secret.
//!
//! **Depends on** `std`, `thiserror`, `tracing`, `rand` (secrets and nonces), `sha2`
//! (HMAC-SHA-256 for the connection handshake). No other weft crate.
//!
//! # Protocol in one paragraph
//!
//! Rank 0 hosts the rendezvous root on [`UniqueId::address`]. Every rank (rank 0 included)
//! connects to it, runs the handshake below, and registers its world size and the address of
//! its own peer listener. The root checks that world sizes agree and ranks are unique, then
//! sends everyone the table of listener addresses; if a rank does not arrive in time the root
//! tells everyone which ranks are missing, and if a registered rank disconnects it tells everyone
//! which one left. Afterwards rank `a` opens one connection to rank `b` the first time it sends to
//! `b`; a reader thread on `b` drains it into a mailbox keyed by `(sender, tag)`, so `send` never
//! waits for the matching `recv`. Collectives are direct exchanges over the same connections,
//! numbered by a per-rank sequence counter so that consecutive collectives never mix. There is
//! no flow control: messages wait in the receiver's memory until it takes them.
//!
//! Handshake (every connection): the connector sends `Hello {purpose, rank, nonce_c}`, the
//! acceptor answers `Challenge {nonce_a, HMAC(secret, "acceptor" ‖ purpose ‖ rank ‖ nonce_c ‖
//! nonce_a)}`, and the connector, after checking it, sends `Proof {HMAC(secret, "connector" ‖
//! ...)}`. Both sides prove they know the secret; the secret itself never crosses the wire.
//!
//! # Configuration
//!
//! | environment variable | meaning | default |
//! | --- | --- | --- |
//! | `WEFT_BOOTSTRAP_TIMEOUT` ([`ENV_TIMEOUT`]) | seconds every bootstrap wait may take (decimal allowed) | 30 |
//! | `WEFT_BOOTSTRAP_SECRET` ([`ENV_SECRET`]) | hex secret (64 digits) for [`TcpBootstrapBuilder::from_env`] | derived from `MASTER_ADDR:MASTER_PORT` |
//!
//! Values set on a builder win over the environment.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use weft_bootstrap::{Bootstrap, TcpBootstrap, UniqueId};
//!
//! // Port 0: the id binds a free port now and keeps it for rank 0 in this process.
//! let id = UniqueId::new("127.0.0.1:0".parse()?)?;
//! let world = 2;
//! let handles: Vec<_> = (0..world)
//!     .map(|rank| {
//!         std::thread::spawn(move || -> Result<Vec<Vec<u8>>, weft_bootstrap::BootstrapError> {
//!             let bs = TcpBootstrap::builder()
//!                 .timeout(Duration::from_secs(10))
//!                 .connect(&id, rank, world)?;
//!             bs.all_gather(&[rank as u8])
//!         })
//!     })
//!     .collect();
//! for handle in handles {
//!     let gathered = handle.join().expect("rank thread panicked")?;
//!     assert_eq!(gathered, vec![vec![0], vec![1]]);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

use std::time::Duration;

mod auth;
pub mod codec;
mod env;
mod error;
mod in_process;
mod mailbox;
mod ops;
mod tcp;
mod unique_id;

// The public interface is:
pub use env::{ENV_SECRET, ENV_TIMEOUT, TorchrunEnv};
pub use error::BootstrapError;
pub use in_process::{InProcessBootstrap, InProcessBuilder};
pub use tcp::{TcpBootstrap, TcpBootstrapBuilder};
pub use unique_id::{SECRET_BYTES, UNIQUE_ID_BYTES, UniqueId};

/// Largest frame body a rank accepts unless configured otherwise: 256 MiB.
///
/// The limit is checked against the length announced in a frame header before anything is
/// allocated; a longer frame ends the connection with [`BootstrapError::FrameTooLarge`].
pub const DEFAULT_MAX_FRAME_BYTES: usize = 256 << 20;

/// Smallest frame limit a builder accepts: 4 KiB (control frames must fit).
pub const MIN_MAX_FRAME_BYTES: usize = 4 << 10;

/// Default bound on every bootstrap wait: 30 seconds (see [`ENV_TIMEOUT`]).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Byte exchange between the ranks of one job: the rendezvous layer every communicator is built on.
///
/// Collectives (`all_gather`, `broadcast`, `barrier`) must be called by every rank, in the same
/// order, and by one thread at a time per rank. `send`/`recv` may be called from any thread.
/// Every call is bounded by the implementation's timeout; a timeout names the ranks that did not
/// take part.
pub trait Bootstrap: Send + Sync + std::fmt::Debug {
    /// This rank, in `0..world_size()`.
    fn rank(&self) -> usize;

    /// Number of ranks in the job.
    fn world_size(&self) -> usize;

    /// Every rank contributes `mine` (lengths may differ per rank); returns all ranks'
    /// contributions indexed by rank.
    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError>;

    /// `data` must be `Some` on `root` (it is ignored elsewhere); every rank returns root's bytes.
    /// Every rank must name the same root: the ranks agree on it first, and a rank that named
    /// another fails the call with [`BootstrapError::RootMismatch`] on the ranks that see it.
    fn broadcast(&self, root: usize, data: Option<&[u8]>) -> Result<Vec<u8>, BootstrapError>;

    /// Returns once every rank has entered the barrier.
    fn barrier(&self) -> Result<(), BootstrapError>;

    /// Sends `data` to `peer` under `tag`. Messages are ordered per `(peer, tag)`. Returns once
    /// the bytes are handed to the transport; it does not wait for the matching `recv`
    /// (messages of a few MB and more are buffered by the receiver).
    fn send(&self, peer: usize, tag: u32, data: &[u8]) -> Result<(), BootstrapError>;

    /// Receives the oldest message `peer` sent to this rank under `tag`.
    fn recv(&self, peer: usize, tag: u32) -> Result<Vec<u8>, BootstrapError>;

    /// The IP address at which ranks on other hosts reach this rank, when the bootstrap has one
    /// (a socket bootstrap: the address its listener advertises); network transports listen
    /// there. `None`: every rank runs in this process.
    fn advertised_ip(&self) -> Option<std::net::IpAddr> {
        None
    }
}

/// Lets smart pointers to a bootstrap stand wherever a bootstrap is expected.
macro_rules! forward_bootstrap {
    ($($pointer:ident)::+) => {
        impl<T: Bootstrap + ?Sized> Bootstrap for $($pointer)::+<T> {
            fn rank(&self) -> usize {
                (**self).rank()
            }

            fn world_size(&self) -> usize {
                (**self).world_size()
            }

            fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
                (**self).all_gather(mine)
            }

            fn broadcast(&self, root: usize, data: Option<&[u8]>) -> Result<Vec<u8>, BootstrapError> {
                (**self).broadcast(root, data)
            }

            fn barrier(&self) -> Result<(), BootstrapError> {
                (**self).barrier()
            }

            fn send(&self, peer: usize, tag: u32, data: &[u8]) -> Result<(), BootstrapError> {
                (**self).send(peer, tag, data)
            }

            fn recv(&self, peer: usize, tag: u32) -> Result<Vec<u8>, BootstrapError> {
                (**self).recv(peer, tag)
            }

            fn advertised_ip(&self) -> Option<std::net::IpAddr> {
                (**self).advertised_ip()
            }
        }
    };
}

forward_bootstrap!(std::sync::Arc);
forward_bootstrap!(Box);
