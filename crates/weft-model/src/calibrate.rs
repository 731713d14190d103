//! Model parameters from the JSON weft's benchmarks write, so no GPU is needed to calibrate.
//!
//! - A point-to-point benchmark (`weft bench p2p --json`: `rows` of `bytes` and `us`, a put's
//!   share of a stream of puts and their completion) gives a link: α is the time of the
//!   smallest message, β the largest message's bytes over its time less that. (A least-squares
//!   line is dominated by the largest rows, whose spread is larger than α itself.) Where the
//!   rows also time one put alone (`latency_us`, the PortChannel benchmark: its kernel's
//!   launch, the FIFO, the proxy's pickup, the transport and the completion), α is the
//!   smallest message's latency instead: a stream overlaps its puts' latencies, and a step of
//!   an algorithm pays one whole.
//! - The GIN benchmark (`weft bench gin --json`: `latency` lines of `what` and `median_us`)
//!   gives the one-way latency of an 8-byte put and its signal through the proxy, half a
//!   ping-pong's round trip: what a step of an algorithm whose receiver polls for the data
//!   pays per crossing (the FIFO push, the proxy's pickup, the network's α, the copy and the
//!   signal), without a launch or a flush in it. It replaces the point-to-point α.
//!   Its `bandwidth` lines through the proxy (a stream of puts with a signal each) give the
//!   proxy's cost per put: the smallest message's time per message, where no link is the
//!   bottleneck but the proxy's posting (the FIFO pop, the transport's calls, the signal).
//! - The FIFO benchmark (`weft bench fifo --json`: `lines` of `threads` and `max_rate`
//!   pushes per second) gives the proxy's cost per message: one proxy thread's best rate,
//!   inverted. Its handler only pops, so this is the floor of a proxy's cost per message.

use serde_json::Value;
use weft_core::LinkModel;

use crate::ModelError;

/// A link fitted from point-to-point rows, and the rows' range.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkFit {
    /// The fitted α-β link.
    pub link: LinkModel,
    /// α in µs.
    pub alpha_us: f64,
    /// β in GB/s.
    pub gbps: f64,
    /// Smallest and largest message of the rows, bytes.
    pub bytes: (u64, u64),
}

fn bad(path: &str, detail: impl Into<String>) -> ModelError {
    ModelError::Measurement { path: path.to_string(), detail: detail.into() }
}

/// Fits a link to the `rows` (`bytes`, `us`) of a `weft bench p2p --json` document read from
/// `path` (named in errors).
pub fn link_from_p2p(path: &str, document: &Value) -> Result<LinkFit, ModelError> {
    let rows = document.get("rows").and_then(Value::as_array).ok_or_else(|| bad(path, "no `rows` array"))?;
    let mut points: Vec<(u64, f64)> = rows
        .iter()
        .map(|row| match (row.get("bytes").and_then(Value::as_u64), row.get("us").and_then(Value::as_f64)) {
            (Some(b), Some(us)) if us.is_finite() && us > 0.0 => Ok((b, us)),
            _ => Err(bad(path, format!("a row without `bytes` and a positive `us`: {row}"))),
        })
        .collect::<Result<_, _>>()?;
    points.sort_by_key(|&(b, _)| b);
    let (&(small, alpha), &(large, large_us)) = match (points.first(), points.last()) {
        (Some(first), Some(last)) if last.0 > first.0 && last.1 > first.1 => (first, last),
        _ => return Err(bad(path, "needs rows of at least two sizes, the larger taking longer")),
    };
    let gbps = large as f64 / ((large_us - alpha) * 1e-6) / 1e9;
    // The smallest row's put alone, where the benchmark timed it.
    let latency = rows
        .iter()
        .filter(|row| row.get("bytes").and_then(Value::as_u64) == Some(small))
        .find_map(|row| row.get("latency_us").and_then(Value::as_f64));
    let alpha = match latency {
        Some(us) if us.is_finite() && us > 0.0 => us,
        Some(us) => return Err(bad(path, format!("a `latency_us` of {us} at {small} bytes"))),
        None => alpha,
    };
    Ok(LinkFit { link: LinkModel::new(alpha, Some(gbps)), alpha_us: alpha, gbps, bytes: (small, large) })
}

/// The one-way latency of a put and its signal through the proxy, µs: the median of the
/// `latency` line of a `weft bench gin --json` document (read from `path`) that crossed the
/// proxy (its `what` names it; the other line is NVLink's).
pub fn proxy_one_way_us_from_gin(path: &str, document: &Value) -> Result<f64, ModelError> {
    let lines = document.get("latency").and_then(Value::as_array).ok_or_else(|| bad(path, "no `latency` array"))?;
    let through_proxy = lines
        .iter()
        .filter(|l| l.get("what").and_then(Value::as_str).is_some_and(|w| w.contains("proxy")))
        .filter_map(|l| l.get("median_us").and_then(Value::as_f64))
        .filter(|us| us.is_finite() && *us > 0.0)
        .collect::<Vec<_>>();
    match through_proxy[..] {
        [us] => Ok(us),
        [] => Err(bad(path, "no `latency` line through the proxy with a positive `median_us`")),
        _ => Err(bad(path, "several `latency` lines through the proxy: run it over one network")),
    }
}

/// The proxy's cost per put, µs: the `median_us` per message of the smallest message of the
/// `bandwidth` lines of a `weft bench gin --json` document (read from `path`) that crossed the
/// proxy.
pub fn proxy_us_from_gin_stream(path: &str, document: &Value) -> Result<f64, ModelError> {
    let lines = document.get("bandwidth").and_then(Value::as_array).ok_or_else(|| bad(path, "no `bandwidth` array"))?;
    lines
        .iter()
        .filter(|l| l.get("what").and_then(Value::as_str).is_some_and(|w| w.contains("proxy")))
        .filter_map(|l| Some((l.get("bytes")?.as_u64()?, l.get("median_us")?.as_f64()?)))
        .filter(|&(_, us)| us.is_finite() && us > 0.0)
        .min_by_key(|&(bytes, _)| bytes)
        .map(|(_, us)| us)
        .ok_or_else(|| bad(path, "no `bandwidth` line through the proxy with `bytes` and a positive `median_us`"))
}

/// The proxy's cost per message, µs: one over the best `max_rate` of a single proxy thread in
/// a `weft bench fifo --json` document read from `path`.
pub fn proxy_us_from_fifo(path: &str, document: &Value) -> Result<f64, ModelError> {
    let lines = document.get("lines").and_then(Value::as_array).ok_or_else(|| bad(path, "no `lines` array"))?;
    let best = lines
        .iter()
        .filter(|l| l.get("threads").and_then(Value::as_u64) == Some(1))
        .filter_map(|l| l.get("max_rate").and_then(Value::as_f64))
        .filter(|r| r.is_finite() && *r > 0.0)
        .fold(0.0_f64, f64::max);
    if best == 0.0 {
        return Err(bad(path, "no line of one proxy thread with a positive `max_rate`"));
    }
    Ok(1e6 / best)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;

    #[test]
    fn a_p2p_document_gives_alpha_from_the_smallest_and_beta_from_the_largest_row() {
        let doc = serde_json::json!({"rows": [
            {"bytes": 1048576, "us": 5.0, "gbps": 0.0},
            {"bytes": 1024, "us": 3.0, "gbps": 0.0},
            {"bytes": 1_000_000_000u64, "us": 2503.0, "gbps": 0.0},
        ]});
        let fit = link_from_p2p("p2p.json", &doc).unwrap();
        assert_eq!((fit.alpha_us, fit.bytes), (3.0, (1024, 1_000_000_000)));
        assert!((fit.gbps - 400.0).abs() < 1e-9);
        assert!(link_from_p2p("x", &serde_json::json!({"rows": [{"bytes": 1, "us": 1.0}]})).is_err());
        assert!(link_from_p2p("x", &serde_json::json!({"lines": []})).unwrap_err().to_string().starts_with("x: "));
    }

    #[test]
    fn a_put_timed_alone_gives_alpha_and_the_stream_gives_beta() {
        let doc = serde_json::json!({"rows": [
            {"bytes": 1024, "us": 3.0, "latency_us": 17.5},
            {"bytes": 1_000_000_000u64, "us": 2503.0, "latency_us": 2600.0},
        ]});
        let fit = link_from_p2p("p2p.json", &doc).unwrap();
        assert_eq!(fit.alpha_us, 17.5);
        assert!((fit.gbps - 400.0).abs() < 1e-9);
        let bad = serde_json::json!({"rows": [
            {"bytes": 1024, "us": 3.0, "latency_us": -1.0}, {"bytes": 4096, "us": 5.0},
        ]});
        assert!(link_from_p2p("p2p.json", &bad).unwrap_err().to_string().contains("latency_us"));
    }

    #[test]
    fn a_gin_document_gives_the_one_way_latency_through_the_proxy() {
        let line = |what: &str, us: f64| serde_json::json!({"what": what, "bytes": 8, "median_us": us});
        let doc = serde_json::json!({"latency": [
            line("one-way put + signal, LSA (NVLink)", 2.9),
            line("one-way put + signal, proxy over the emulated NIC (a virtual node per rank)", 16.9),
        ]});
        assert_eq!(proxy_one_way_us_from_gin("g", &doc).unwrap(), 16.9);
        let lsa_only = serde_json::json!({"latency": [line("one-way put + signal, LSA (NVLink)", 2.9)]});
        assert!(proxy_one_way_us_from_gin("g", &lsa_only).unwrap_err().to_string().contains("through the proxy"));
        let two =
            serde_json::json!({"latency": [line("proxy over TCP", 30.0), line("proxy over the emulated NIC", 16.9)]});
        assert!(proxy_one_way_us_from_gin("g", &two).is_err());
    }

    #[test]
    fn a_gin_document_gives_the_proxy_s_cost_per_put_from_its_smallest_stream() {
        let line = |what: &str, bytes: u64, us: f64| serde_json::json!({"what": what, "bytes": bytes, "median_us": us});
        let doc = serde_json::json!({"bandwidth": [
            line("put stream, LSA (one node)", 1024, 2.7),
            line("put stream, proxy over the emulated NIC", 4096, 5.1),
            line("put stream, proxy over the emulated NIC", 1024, 5.8),
            line("put stream, proxy over the emulated NIC", 1 << 20, 21.2),
        ]});
        assert_eq!(proxy_us_from_gin_stream("g", &doc).unwrap(), 5.8);
        let lsa = serde_json::json!({"bandwidth": [line("put stream, LSA (one node)", 1024, 2.7)]});
        assert!(proxy_us_from_gin_stream("g", &lsa).unwrap_err().to_string().contains("through the proxy"));
    }

    #[test]
    fn a_fifo_document_gives_the_best_single_thread_rate() {
        let doc = serde_json::json!({"lines": [
            {"threads": 1, "max_rate": 1e6}, {"threads": 1, "max_rate": 4e6}, {"threads": 2, "max_rate": 1e9},
        ]});
        assert!((proxy_us_from_fifo("f", &doc).unwrap() - 0.25).abs() < 1e-12);
        assert!(proxy_us_from_fifo("f", &serde_json::json!({"lines": [{"threads": 2, "max_rate": 1.0}]})).is_err());
    }

    /// The files the repository keeps calibrate (the command's documented example).
    #[test]
    fn the_checked_in_measurements_calibrate() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/perf/data/");
        let read =
            |p: &str| serde_json::from_str::<Value>(&std::fs::read_to_string(format!("{root}{p}")).unwrap()).unwrap();
        let nvlink = link_from_p2p("p2p-memory.json", &read("proxy-2xh200/p2p-memory.json")).unwrap();
        assert!(nvlink.alpha_us > 1.0 && nvlink.alpha_us < 10.0, "{nvlink:?}");
        assert!(nvlink.gbps > 300.0 && nvlink.gbps < 450.0, "{nvlink:?}");
        let proxy = proxy_us_from_fifo("fifo-lane0.json", &read("proxy-h200/fifo-lane0.json")).unwrap();
        assert!(proxy > 0.0 && proxy < 1.0, "{proxy}");
    }
}
