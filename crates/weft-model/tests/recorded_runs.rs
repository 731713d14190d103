//! The rounds model against AllReduces measured across virtual nodes: 2 ranks on a 2×H100
//! machine, one per virtual node, over the emulated NIC (α 2 µs, 50 GB/s), CUDA-graph medians
//! (`docs/perf/data/2xh100-2026-11-28-model/callN/`). The parameters come from the same call's
//! point-to-point and GIN benchmarks, as `weft model calibrate` derives them; the AllReduce rows
//! only judge the model. `cargo test -p weft-model --test recorded_runs -- --nocapture` prints
//! the table `docs/multinode.md` shows.

#![allow(clippy::unwrap_used)] // tests may panic on failure

use serde_json::Value;
use weft_core::LinkModel;
use weft_model::calibrate::{link_from_p2p, proxy_one_way_us_from_gin, proxy_us_from_gin_stream};
use weft_model::rounds::{GinCall, NVRAR_MAX_PUTS, nvrar_us, port_allpairs_us, port_ring_us};

const RUN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/perf/data/2xh100-2026-11-28-model/callN/");
/// The run's round sizes: `WEFT_CHUNK_BYTES`'s default (port_ring), port_allpairs' slot, nvrar's
/// round; its nvrar launch had 33 blocks, so 4 groups.
const RING_ROUND: u64 = 32 << 20;
const PAIRS_ROUND: u64 = 1 << 20;
const NVRAR_ROUND: u64 = 4 << 20;

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{RUN}{name}")).unwrap()
}

/// (bytes, median µs) of every row of a `weft bench allreduce` table.
fn measured(name: &str) -> Vec<(u64, f64)> {
    read(name)
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let bytes = fields.next()?.parse().ok()?;
            let _count: u64 = fields.next()?.parse().ok()?;
            let _algorithm = fields.next()?;
            (fields.next()? == "|").then_some(())?;
            Some((bytes, fields.next()?.parse().ok()?))
        })
        .collect()
}

struct Calibrated {
    /// The network as GIN's puts see it (NVRAR).
    net: LinkModel,
    /// The network as a PortChannel step sees it.
    port: LinkModel,
    proxy_us: f64,
}

fn calibrated() -> Calibrated {
    let json = |name: &str| serde_json::from_str::<Value>(&read(name)).unwrap();
    let port = link_from_p2p("p2p-port-emu.json", &json("p2p-port-emu.json")).unwrap();
    let gin = json("gin.json");
    let alpha = proxy_one_way_us_from_gin("gin.json", &gin).unwrap();
    Calibrated {
        net: LinkModel::new(alpha, Some(port.gbps)),
        port: port.link,
        proxy_us: proxy_us_from_gin_stream("gin.json", &gin).unwrap(),
    }
}

/// measured / model for every row of one algorithm's table, printed.
fn ratios(name: &str, model: impl Fn(u64) -> f64) -> Vec<(u64, f64)> {
    println!("{name}\n{:>12} {:>10} {:>10} {:>8}", "size", "weft us", "model us", "ratio");
    measured(name)
        .into_iter()
        .map(|(bytes, us)| {
            let m = model(bytes);
            println!("{bytes:>12} {us:>10.2} {m:>10.2} {:>8.2}", us / m);
            (bytes, us / m)
        })
        .collect()
}

#[test]
fn the_rounds_model_predicts_the_recorded_allreduces() {
    let c = calibrated();
    println!("net α {:?}, port α {:?}, proxy {:.2} µs per put", c.net.latency, c.port.latency, c.proxy_us);
    let ring = ratios("model-emu-port_ring.txt", |b| port_ring_us(b, 2, RING_ROUND, &c.port));
    let pairs = ratios("model-emu-port_allpairs.txt", |b| port_allpairs_us(b, 1, PAIRS_ROUND, &c.port));
    let call = GinCall { nodes: 2, gpus_per_node: 1, round_bytes: NVRAR_ROUND, groups: NVRAR_MAX_PUTS };
    let nvrar = ratios("model-emu-nvrar.txt", |b| nvrar_us(b, call, &c.net, c.proxy_us));
    for rows in [&ring, &pairs, &nvrar] {
        assert_eq!(rows.len(), 10, "1 KB to 256 MB, factor 4");
    }
    let within = |rows: &[(u64, f64)], from: u64, low: f64, high: f64| {
        for &(bytes, ratio) in rows.iter().filter(|(b, _)| *b >= from) {
            assert!((low..=high).contains(&ratio), "{bytes} B: measured / model {ratio:.3}");
        }
    };
    // The PortChannel algorithms within 20% at every size but port_allpairs' smallest, where
    // a step in a graph replay undercuts the point-to-point benchmark's lone put (its launch
    // and flush) by up to a fifth.
    within(&ring, 0, 0.8, 1.2);
    within(&pairs, 256 << 10, 0.8, 1.2);
    within(&pairs, 0, 0.78, 1.2);
    // NVRAR within 20% from 256 KB; below, the kernel's own time (its launch in the graph, the
    // packing and polling of the packets) adds up to 5 µs that no benchmark parameter holds.
    within(&nvrar, 256 << 10, 0.8, 1.25);
    within(&nvrar, 0, 0.8, 1.35);
}
