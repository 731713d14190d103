//! `weft info`: what this machine offers weft.

use std::process::ExitCode;

use weft_core::Env;
use weft_gpu::Device;

/// Prints the CUDA installation, every GPU, the peer-access matrix and the kernel cache.
pub fn run() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let env = Env::from_process()?;
    println!("weft {}", env!("CARGO_PKG_VERSION"));
    println!("kernel cache: {}", env.cache_dir.display());
    println!("device wait bound (WEFT_TIMEOUT): {:?}", env.device_timeout);
    match weft_gpu::nvrtc_version() {
        Ok((major, minor)) => println!("NVRTC: {major}.{minor}"),
        Err(e) => println!("NVRTC: unavailable ({e})"),
    }
    match weft_gpu::loader::cuda_include_dirs() {
        Ok(dirs) => {
            println!("CUDA headers: {}", dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "))
        }
        Err(e) => println!("CUDA headers: {e}"),
    }
    let count = match Device::count() {
        Ok(n) => n,
        Err(e) => {
            println!("GPUs: none usable ({e})");
            return Ok(ExitCode::SUCCESS);
        }
    };
    println!("GPUs: {count}");
    let mut devices = Vec::new();
    for ordinal in 0..count {
        let d = Device::new(ordinal)?;
        println!("  [{ordinal}] {} {} {} SMs, bus {}", d.name()?, d.arch()?, d.sm_count()?, d.pci_bus_id()?);
        println!("      {}", rdma_line(&d)?);
        devices.push(d);
    }
    match env.ranks_per_node {
        Some(g) => {
            // One rank per GPU in ordinal order, as `weft launch`, `weft bench` and torchrun
            // place them: the same split a communicator of all these GPUs makes.
            let nodes: Vec<String> = (0..count)
                .collect::<Vec<_>>()
                .chunks(g)
                .map(|c| format!("[{}]", c.iter().map(usize::to_string).collect::<Vec<_>>().join(" ")))
                .collect();
            let network = match env.emulated_net {
                Some(link) => format!(
                    "the emulated NIC (copy engine paced at {:?} per message, {})",
                    link.latency,
                    link.bytes_per_second.map_or("no bandwidth cap".into(), |b| format!("{} GB/s", b as f64 / 1e9))
                ),
                None => match env.network {
                    weft_core::Network::Tcp => "TCP on loopback (WEFT_EMU_NET_* would emulate a NIC instead)".into(),
                    weft_core::Network::Ib => "InfiniBand verbs (WEFT_NET=ib)".into(),
                    weft_core::Network::SoftIb => {
                        "the verbs transport over the in-process software fabric (WEFT_NET=soft-ib)".into()
                    }
                },
            };
            println!("virtual nodes (WEFT_RANKS_PER_NODE={g}): {}", nodes.join(" "));
            println!(
                "  between nodes: PortChannels only, over {network}; collectives run AllReduce as port_allpairs (small) or port_ring, other collectives refuse"
            );
        }
        None => println!("nodes: this host is one node (WEFT_RANKS_PER_NODE splits it into virtual nodes)"),
    }
    if count > 1 {
        println!(
            "peer access (row can map column; V: over NVLink as NVML reports it, where the 2-rank size rules use LL128 lines; Y: another path; N: none):"
        );
        for a in &devices {
            let row: Vec<&str> = devices.iter().map(|b| peer_access(a, b)).collect();
            println!("  [{}] {}", a.ordinal(), row.join(" "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One entry of the peer-access table: `-` (itself), `V` (NVLink), `Y` (mappable another way),
/// `N` (not mappable).
fn peer_access(a: &Device, b: &Device) -> &'static str {
    if a.ordinal() == b.ordinal() {
        return "-";
    }
    if !a.can_access_peer(b).unwrap_or(false) {
        return "N";
    }
    let nvlink = a.pci_bus_id().ok().zip(b.pci_bus_id().ok()).and_then(|(x, y)| weft_gpu::nvml::nvlink_between(&x, &y));
    if nvlink == Some(true) { "V" } else { "Y" }
}

/// What an RDMA NIC (`WEFT_NET=ib`) can do with this GPU's memory.
fn rdma_line(d: &Device) -> Result<String, Box<dyn std::error::Error>> {
    let yes = |v: bool| if v { "yes" } else { "no" };
    let (vmm, dma_buf) = d.rdma_registration()?;
    let writes = match d.rdma_write_visibility()? {
        weft_gpu::RdmaWriteVisibility::Ordered => "ordered for its kernels",
        weft_gpu::RdmaWriteVisibility::HostFlush => "made visible by a host flush",
        weft_gpu::RdmaWriteVisibility::Unsupported => "neither ordered nor flushable (WEFT_NET=ib refuses)",
    };
    Ok(format!(
        "GPUDirect RDMA: VMM memory registrable {}, dma-buf export {}, NIC writes {writes}",
        yes(vmm),
        yes(dma_buf)
    ))
}
