//! One-way latency of the TCP transport between host memories on loopback: two endpoints
//! bounce a put and its signal back and forth, each side waiting for the other's signal before
//! it answers, so one exchange is two one-way trips (the per-step cost of a ring over TCP).
//!
//! `cargo run --release -p weft-core --example tcp_pingpong [streams]` (default 2 sockets per
//! connection, as PortProxy uses).

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_core::proxy::transport::tcp::{TcpConfig, TcpTransport};
use weft_core::proxy::{HostInbox, HostMemory, MemoryTable, Op, Submitted, Transport, TransportError};

const MEMORY_BYTES: usize = 1 << 20;

fn endpoint(config: &TcpConfig, name: &str) -> Result<(TcpTransport, Arc<HostInbox>), TransportError> {
    let sources = MemoryTable::new();
    let destinations = MemoryTable::new();
    let table_full = |e| TransportError::Connect { transport: "tcp", peer: name.into(), detail: format!("{e}") };
    sources.register(Arc::new(HostMemory::new(MEMORY_BYTES))).map_err(table_full)?;
    destinations.register(Arc::new(HostMemory::new(MEMORY_BYTES))).map_err(table_full)?;
    let inbox = Arc::new(HostInbox::new(destinations));
    Ok((TcpTransport::bind(config.clone(), name, Arc::new(sources), inbox.clone())?, inbox))
}

/// Submits a put of `len` bytes and a signal on connection 0, retrying while the window is full.
fn put_signal(t: &TcpTransport, len: u64) -> Result<(), TransportError> {
    let put = Op::Put { src_memory: 0, src_offset: 0, dst_memory: 0, dst_offset: 0, len };
    while t.submit(0, &[put, Op::Signal])? == Submitted::Full {
        std::hint::spin_loop();
    }
    Ok(())
}

/// Spins until `inbox`'s token of connection 0 reaches `value` (bounded).
fn await_token(inbox: &HostInbox, value: u64) -> Result<(), String> {
    let start = Instant::now();
    while inbox.token(0) < value {
        if start.elapsed() > Duration::from_secs(10) {
            return Err(format!("token stuck at {} (waiting for {value})", inbox.token(0)));
        }
        std::hint::spin_loop();
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let streams = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(2);
    let config = TcpConfig { streams, ..TcpConfig::default() };
    let (a, at_a) = endpoint(&config, "a")?;
    let (b, at_b) = endpoint(&config, "b")?;
    a.connect(0, b.local_addr(), 0, "b")?;
    b.connect(0, a.local_addr(), 0, "a")?;
    println!("# TCP transport on loopback, {streams} socket(s) per connection, host memory");
    println!("{:>10} {:>8} {:>12}", "bytes", "rounds", "one-way us");
    let mut token = 0;
    for len in [8u64, 1 << 10, 64 << 10, 1 << 20] {
        let rounds = if len >= 1 << 20 { 200 } else { 2000 };
        let start = Instant::now();
        for _ in 0..rounds {
            token += 1;
            put_signal(&a, len)?;
            await_token(&at_b, token)?;
            put_signal(&b, len)?;
            await_token(&at_a, token)?;
        }
        let one_way = start.elapsed().as_secs_f64() * 1e6 / (2 * rounds) as f64;
        println!("{len:>10} {rounds:>8} {one_way:>12.1}");
    }
    Ok(())
}
