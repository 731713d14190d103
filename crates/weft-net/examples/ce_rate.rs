//! Host cost of the copy-engine transport, as a proxy thread pays it: puts with a signal
//! submitted back to back on one connection whose "peer" is a second buffer on the same GPU
//! (so no second GPU is needed), completion polled as the proxy does. Prints, per size, the
//! host time of one submission (the proxy thread's cost per command) and the rate at which
//! operations complete.
//!
//! `cargo run --release -p weft-core --example ce_rate [puts]` on a GPU machine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_gpu::{AllocKind, Device, DeviceMemory};
use weft_net::proxy::transport::ce::{CopyEngineConfig, CopyEngineTransport, PeerLink};
use weft_net::proxy::transport::cuda_queue::CudaCopyQueue;
use weft_net::proxy::{Op, Submitted, Transport};

const BUFFER: usize = 64 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let puts: u64 = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(20_000);
    let device = Device::new(0)?;
    let src = Arc::new(DeviceMemory::alloc(&device, BUFFER, AllocKind::Legacy)?);
    let dst = Arc::new(DeviceMemory::alloc(&device, BUFFER, AllocKind::Legacy)?);
    let token = Arc::new(DeviceMemory::alloc(&device, 8, AllocKind::Legacy)?);
    token.fill(0, 8, 0)?;
    let config = CopyEngineConfig { max_in_flight: 512, timeout: Duration::from_secs(10), link: None, chaos: None };
    let transport = CopyEngineTransport::new(config)?;
    transport.register_local(src.ptr(), BUFFER as u64, src.clone())?;
    let link = PeerLink {
        peer: "this GPU".into(),
        queue: CudaCopyQueue::new(&device)?,
        token: token.ptr(),
        remote: vec![(0, dst.ptr(), BUFFER as u64)],
        keep: Arc::new((dst.clone(), token.clone())),
        paced: false,
    };
    transport.connect(0, link)?;
    println!("# copy-engine transport on {}, one connection, put + signal per command", device.name()?);
    println!("{:>10} {:>8} {:>16} {:>14} {:>10}", "bytes", "puts", "host us/submit", "puts/s", "GB/s");
    let mut done = 0u64;
    for len in [8u64, 4 << 10, 64 << 10, 1 << 20, 8 << 20] {
        let n = if len >= 1 << 20 { puts / 20 } else { puts };
        let ops = [Op::Put { src_memory: 0, src_offset: 0, dst_memory: 0, dst_offset: 0, len }, Op::Signal];
        let start = Instant::now();
        let mut submitting = Duration::ZERO;
        for _ in 0..n {
            loop {
                let t = Instant::now();
                let outcome = transport.submit(0, &ops)?;
                submitting += t.elapsed();
                if outcome != Submitted::Full {
                    break;
                }
                transport.progress()?;
            }
            transport.progress()?;
        }
        done += 2 * n;
        while transport.completed(0)? < done {
            if start.elapsed() > Duration::from_secs(60) {
                return Err("the copies did not complete within 60 s".into());
            }
            std::hint::spin_loop();
        }
        let total = start.elapsed().as_secs_f64();
        let per_submit = submitting.as_secs_f64() * 1e6 / n as f64;
        let rate = n as f64 / total;
        println!("{len:>10} {n:>8} {per_submit:>16.2} {rate:>14.0} {:>10.2}", rate * len as f64 / 1e9);
    }
    transport.shutdown();
    Ok(())
}
