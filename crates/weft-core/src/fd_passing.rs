//! Passing VMM file descriptors between processes of one host: each process runs a small server
//! on an abstract Unix socket; an importer sends `{secret, export id}` and receives a duplicate
//! of the descriptor through `SCM_RIGHTS`. The secret travels only inside descriptors sent over
//! the (authenticated) bootstrap, so strangers on the host cannot fetch GPU memory.

use std::collections::HashMap;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

const STATUS_OK: u8 = 0;
const STATUS_REFUSED: u8 = 1;
/// How long a connected client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const IDLE_POLL: Duration = Duration::from_millis(5);

type Exports = Arc<Mutex<HashMap<u64, OwnedFd>>>;

/// This process's fd server.
#[derive(Debug)]
pub(crate) struct FdServer {
    name: Vec<u8>,
    secret: u64,
    exports: Exports,
    next_id: AtomicU64,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FdServer {
    /// Binds a fresh abstract socket and starts serving.
    pub(crate) fn start() -> std::io::Result<Self> {
        let secret: u64 = rand::random();
        let name = format!("weft-fd-{}-{:016x}", std::process::id(), rand::random::<u64>()).into_bytes();
        let listener = UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name)?)?;
        listener.set_nonblocking(true)?;
        let exports: Exports = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (exports, stop) = (Arc::clone(&exports), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("weft-fd-server".into())
                .spawn(move || serve(listener, secret, exports, stop))?
        };
        Ok(Self { name, secret, exports, next_id: AtomicU64::new(1), stop, thread: Some(thread) })
    }

    /// Socket name peers connect to.
    pub(crate) fn name(&self) -> &[u8] {
        &self.name
    }

    /// Secret peers must present.
    pub(crate) fn secret(&self) -> u64 {
        self.secret
    }

    /// Keeps `fd` available to peers; returns its export id.
    pub(crate) fn export(&self, fd: OwnedFd) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.exports).insert(id, fd);
        id
    }

    /// Stops offering export `id`.
    pub(crate) fn withdraw(&self, id: u64) {
        lock(&self.exports).remove(&id);
    }
}

impl Drop for FdServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock(exports: &Exports) -> std::sync::MutexGuard<'_, HashMap<u64, OwnedFd>> {
    // A panic while holding this lock cannot leave the map inconsistent (single inserts and
    // removes), so a poisoned lock is still usable.
    exports.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn serve(listener: UnixListener, secret: u64, exports: Exports, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = answer(stream, secret, &exports) {
                    tracing::debug!("fd server: request failed: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(IDLE_POLL),
            Err(e) => {
                tracing::warn!("fd server: accept failed: {e}");
                std::thread::sleep(IDLE_POLL);
            }
        }
    }
}

fn answer(mut stream: UnixStream, secret: u64, exports: &Exports) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let mut request = [0u8; 16];
    stream.read_exact(&mut request)?;
    let (their_secret, id) = split_request(&request);
    let guard = lock(exports);
    let fd = guard.get(&id).filter(|_| their_secret == secret);
    match fd {
        Some(fd) => {
            let fds: [RawFd; 1] = [fd.as_raw_fd()];
            sendmsg::<()>(
                stream.as_raw_fd(),
                &[IoSlice::new(&[STATUS_OK])],
                &[ControlMessage::ScmRights(&fds)],
                MsgFlags::empty(),
                None,
            )?;
        }
        None => stream.write_all(&[STATUS_REFUSED])?,
    }
    Ok(())
}

fn split_request(request: &[u8; 16]) -> (u64, u64) {
    let mut secret = [0u8; 8];
    let mut id = [0u8; 8];
    secret.copy_from_slice(&request[..8]);
    id.copy_from_slice(&request[8..]);
    (u64::from_le_bytes(secret), u64::from_le_bytes(id))
}

/// Fetching a descriptor from a peer's server failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchFdError {
    /// A socket call failed.
    #[error("{step}: {source}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// Receiving the descriptor failed.
    #[error("{step}: {source}")]
    Receive {
        /// What was being done.
        step: &'static str,
        /// The error.
        source: nix::Error,
    },
    /// The server hung up without answering.
    #[error("server closed the connection")]
    Closed,
    /// The server said yes but sent no descriptor.
    #[error("server sent no descriptor")]
    NoDescriptor,
    /// The server refused.
    #[error("server refused the request (wrong secret or unknown export)")]
    Refused,
}

/// Fetches export `id` from the server named `socket`.
pub(crate) fn fetch_fd(socket: &[u8], secret: u64, id: u64, timeout: Duration) -> Result<OwnedFd, FetchFdError> {
    let io = |step| move |source| FetchFdError::Io { step, source };
    let addr = SocketAddr::from_abstract_name(socket).map_err(io("bad socket name"))?;
    let mut stream = UnixStream::connect_addr(&addr).map_err(io("connect"))?;
    stream.set_read_timeout(Some(timeout)).map_err(io("read timeout"))?;
    stream.set_write_timeout(Some(timeout)).map_err(io("write timeout"))?;
    let mut request = [0u8; 16];
    request[..8].copy_from_slice(&secret.to_le_bytes());
    request[8..].copy_from_slice(&id.to_le_bytes());
    stream.write_all(&request).map_err(io("send request"))?;
    let mut status = [0u8; 1];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let mut iov = [IoSliceMut::new(&mut status)];
    let msg = recvmsg::<()>(stream.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(|source| FetchFdError::Receive { step: "receive", source })?;
    let mut received = None;
    for cmsg in msg.cmsgs().map_err(|source| FetchFdError::Receive { step: "control message", source })? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            for fd in fds {
                // SAFETY: the kernel installed this descriptor in our table for us to own.
                let owned = unsafe { OwnedFd::from_raw_fd(fd) };
                received.get_or_insert(owned);
            }
        }
    }
    if msg.bytes == 0 {
        return Err(FetchFdError::Closed);
    }
    match (status[0], received) {
        (STATUS_OK, Some(fd)) => Ok(fd),
        (STATUS_OK, None) => Err(FetchFdError::NoDescriptor),
        _ => Err(FetchFdError::Refused),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Seek;

    #[test]
    fn descriptors_pass_only_with_the_secret() {
        let server = FdServer::start().unwrap();
        let mut file = tempfile_with(b"weft");
        let id = server.export(OwnedFd::from(file.try_clone().unwrap()));
        let fd = fetch_fd(server.name(), server.secret(), id, Duration::from_secs(2)).unwrap();
        let mut got = std::fs::File::from(fd);
        got.seek(std::io::SeekFrom::Start(0)).unwrap();
        let mut text = String::new();
        got.read_to_string(&mut text).unwrap();
        assert_eq!(text, "weft");
        let err = fetch_fd(server.name(), server.secret() ^ 1, id, Duration::from_secs(2)).unwrap_err();
        assert!(matches!(err, FetchFdError::Refused), "{err}");
        assert!(fetch_fd(server.name(), server.secret(), id + 100, Duration::from_secs(2)).is_err());
        server.withdraw(id);
        assert!(fetch_fd(server.name(), server.secret(), id, Duration::from_secs(2)).is_err());
        file.rewind().unwrap();
    }

    #[test]
    fn a_missing_server_is_an_error_not_a_hang() {
        let err = fetch_fd(b"weft-fd-nobody-here", 1, 1, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(err, FetchFdError::Io { step: "connect", .. }), "{err}");
    }

    fn tempfile_with(bytes: &[u8]) -> std::fs::File {
        let path = std::env::temp_dir().join(format!("weft-fd-test-{}-{}", std::process::id(), rand::random::<u32>()));
        let mut f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
        f.write_all(bytes).unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }
}
