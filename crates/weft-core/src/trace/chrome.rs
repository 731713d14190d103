//! Records to a Chrome trace (the JSON `traceEvents` format that Perfetto and
//! `chrome://tracing` open). One process per rank (`pid` = rank). One thread per block
//! (`tid` = 1 + 33 × block) for the block's own marks, and one per (block, warp) that marked
//! anything of its own (`tid` = 2 + 33 × block + warp), whose first span starts at the block's
//! entry. Spans run from one mark to the next and are named by the phase that ended (a span
//! named `barrier` is the wait for the barrier). Thread 0 of each rank holds one span per call
//! of each kernel, from its first entry to its last exit. Timestamps are microseconds from the
//! trace's first record.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::layout::{BLOCK_WARP, Record};
use super::table::{kernel_name, phase_name};

/// The stride of a block's thread ids: its own track and its warps' (1024 threads: 32).
const TRACKS_PER_BLOCK: u32 = 33;

/// One call's records by track: (block, warp) to that track's records.
type Tracks = BTreeMap<(u32, u16), Vec<Record>>;

/// The thread id and name of the track of `warp` of `block`.
fn track(block: u32, warp: u16) -> (u32, String) {
    if warp == BLOCK_WARP {
        (1 + block * TRACKS_PER_BLOCK, format!("block {block}"))
    } else {
        (2 + block * TRACKS_PER_BLOCK + u32::from(warp), format!("block {block} warp {warp}"))
    }
}

/// The records one rank collected, with what the ring could not keep.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankTrace {
    /// The rank (the trace's `pid`).
    pub rank: u32,
    /// The records, in any order.
    pub records: Vec<Record>,
    /// Marks dropped because a block's shared log was full.
    pub dropped: u64,
    /// Records overwritten in the ring by newer ones.
    pub overwritten: u64,
}

/// The Chrome trace of `ranks`, as one JSON document.
pub fn chrome_trace(ranks: &[RankTrace]) -> Value {
    let origin = ranks.iter().flat_map(|r| &r.records).map(|r| r.ns).min().unwrap_or(0);
    let micros = |ns: u64| (ns - origin) as f64 / 1000.0;
    let mut events = Vec::new();
    for trace in ranks {
        let pid = trace.rank;
        events.push(json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": format!("rank {pid}")}}));
        events.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "calls"}}));
        let mut calls: BTreeMap<(u16, u32), Tracks> = BTreeMap::new();
        for r in &trace.records {
            calls.entry((r.kernel, r.call)).or_default().entry((r.block, r.warp)).or_default().push(*r);
        }
        let mut threads = BTreeMap::new();
        for ((kernel, call), warps) in &calls {
            let kernel = kernel_name(*kernel);
            let all = warps.values().flatten();
            let (first, last) = (all.clone().map(|r| r.ns).min(), all.map(|r| r.ns).max());
            if let (Some(first), Some(last)) = (first, last) {
                events.push(json!({
                    "name": kernel, "cat": "call", "ph": "X", "pid": pid, "tid": 0,
                    "ts": micros(first), "dur": (last - first) as f64 / 1000.0,
                    "args": {"call": call, "blocks": warps.keys().map(|(b, _)| b).collect::<BTreeSet<_>>().len()},
                }));
            }
            for ((block, warp), records) in warps {
                let (tid, name) = track(*block, *warp);
                threads.insert(tid, name);
                let mut records = records.clone();
                if *warp != BLOCK_WARP {
                    // A warp's first span starts where its block entered.
                    let entry = warps.get(&(*block, BLOCK_WARP)).into_iter().flatten().find(|r| r.phase == 0);
                    records.extend(entry);
                }
                records.sort_by_key(|r| (r.ns, r.phase));
                for pair in records.windows(2) {
                    let (from, to) = (pair[0], pair[1]);
                    events.push(json!({
                        "name": phase_name(to.phase), "cat": kernel, "ph": "X", "pid": pid, "tid": tid,
                        "ts": micros(from.ns), "dur": (to.ns - from.ns) as f64 / 1000.0,
                        "args": {"call": call, "sm": to.sm},
                    }));
                }
            }
        }
        for (tid, name) in threads {
            events.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}));
        }
    }
    let lost: BTreeMap<String, Value> = ranks
        .iter()
        .map(|r| (format!("rank {}", r.rank), json!({"dropped": r.dropped, "overwritten": r.overwritten})))
        .collect();
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"clock": "%globaltimer", "origin_ns": origin, "lost": lost},
    })
}

/// The Chrome traces in `documents` (each a [`chrome_trace`] of some ranks) as one, for a
/// viewer that opens a single file: events concatenated, with each document's timestamps
/// moved onto the earliest origin (every rank's own `%globaltimer`: the GPUs' clocks are not
/// guaranteed to agree, so spans across ranks are aligned only as well as the clocks are).
pub fn merge(documents: &[Value]) -> Value {
    let origin = |d: &Value| d["otherData"]["origin_ns"].as_u64().unwrap_or(0);
    let earliest = documents.iter().map(origin).min().unwrap_or(0);
    let mut events = Vec::new();
    let mut lost = serde_json::Map::new();
    for d in documents {
        let shift = (origin(d) - earliest) as f64 / 1000.0;
        for e in d["traceEvents"].as_array().into_iter().flatten() {
            let mut e = e.clone();
            if let Some(ts) = e["ts"].as_f64() {
                e["ts"] = json!(ts + shift);
            }
            events.push(e);
        }
        if let Some(l) = d["otherData"]["lost"].as_object() {
            lost.extend(l.clone());
        }
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"clock": "%globaltimer", "origin_ns": earliest, "lost": lost},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ns: u64, call: u32, block: u32, warp: u16, phase: u16) -> Record {
        Record { ns, call, block, kernel: 0, warp, phase, sm: 4 + block as u16 }
    }

    #[test]
    fn records_become_spans_between_marks_and_one_span_per_call() {
        // weft_allreduce_ll, call 2: block 0 enters, begins its round, exits; block 1 enters,
        // its warp 1 sends, the block exits. Given out of order.
        let block = BLOCK_WARP;
        let send = super::super::table::PHASES.iter().position(|p| p.name == "send").unwrap() as u16;
        let trace = RankTrace {
            rank: 1,
            records: vec![
                record(10_500, 2, 0, block, 2),
                record(10_000, 2, 0, block, 0),
                record(12_000, 2, 0, block, 1),
                record(10_200, 2, 1, block, 0),
                record(10_700, 2, 1, 1, send),
                record(11_000, 2, 1, block, 1),
            ],
            dropped: 3,
            overwritten: 0,
        };
        let expected = json!({
            "displayTimeUnit": "ns",
            "otherData": {"clock": "%globaltimer", "origin_ns": 10000, "lost": {"rank 1": {"dropped": 3, "overwritten": 0}}},
            "traceEvents": [
                {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "rank 1"}},
                {"name": "thread_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "calls"}},
                {"name": "weft_allreduce_ll", "cat": "call", "ph": "X", "pid": 1, "tid": 0, "ts": 0.0, "dur": 2.0,
                 "args": {"call": 2, "blocks": 2}},
                {"name": "ll_begin", "cat": "weft_allreduce_ll", "ph": "X", "pid": 1, "tid": 1, "ts": 0.0, "dur": 0.5,
                 "args": {"call": 2, "sm": 4}},
                {"name": "exit", "cat": "weft_allreduce_ll", "ph": "X", "pid": 1, "tid": 1, "ts": 0.5, "dur": 1.5,
                 "args": {"call": 2, "sm": 4}},
                {"name": "send", "cat": "weft_allreduce_ll", "ph": "X", "pid": 1, "tid": 36, "ts": 0.2, "dur": 0.5,
                 "args": {"call": 2, "sm": 5}},
                {"name": "exit", "cat": "weft_allreduce_ll", "ph": "X", "pid": 1, "tid": 34, "ts": 0.2, "dur": 0.8,
                 "args": {"call": 2, "sm": 5}},
                {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "block 0"}},
                {"name": "thread_name", "ph": "M", "pid": 1, "tid": 34, "args": {"name": "block 1"}},
                {"name": "thread_name", "ph": "M", "pid": 1, "tid": 36, "args": {"name": "block 1 warp 1"}},
            ],
        });
        assert_eq!(chrome_trace(&[trace]), expected);
    }

    #[test]
    fn an_empty_trace_is_a_valid_document() {
        let doc = chrome_trace(&[RankTrace::default()]);
        assert_eq!(doc["traceEvents"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn merging_moves_every_document_onto_the_earliest_origin() {
        let a = chrome_trace(&[RankTrace {
            rank: 0,
            records: vec![record(5_000, 0, 0, BLOCK_WARP, 0), record(6_000, 0, 0, BLOCK_WARP, 1)],
            ..Default::default()
        }]);
        let b = chrome_trace(&[RankTrace {
            rank: 1,
            records: vec![record(7_000, 0, 0, BLOCK_WARP, 0), record(9_000, 0, 0, BLOCK_WARP, 1)],
            ..Default::default()
        }]);
        let merged = merge(&[a, b]);
        let spans: Vec<(u64, f64)> = merged["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "exit")
            .map(|e| (e["pid"].as_u64().unwrap(), e["ts"].as_f64().unwrap()))
            .collect();
        assert_eq!(spans, [(0, 0.0), (1, 2.0)]);
        assert_eq!(merged["otherData"]["origin_ns"], 5000);
        assert_eq!(merged["otherData"]["lost"].as_object().map(|m| m.len()), Some(2));
    }
}
