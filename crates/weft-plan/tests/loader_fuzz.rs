//! The plan loader against hostile input, structure-aware (the libFuzzer target `plan_loader`
//! in `fuzz/` mutates bytes, guided by coverage; this test corrupts the JSON tree of shipped
//! plans, which byte mutation seldom keeps parseable, and runs what loads on the interpreter):
//! arbitrary text and shipped plans with numbers, keys and arrays corrupted must load or be
//! rejected with an error, never panic; whatever loads must give a chunk geometry or an
//! error, list and draw (the operation DAG, as DOT and SVG), and run on the CPU interpreter or
//! fail with an error. The corpus covers both protocols, port links,
//! thread-block groups, fused operations (`rcs`, `rrcs`, `rrs`, `reduce_send`) and replicated
//! channel-level programs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::time::Duration;

use proptest::prelude::*;
use serde_json::Value;
use weft_plan::dsl::{ChannelProgram, Collective};
use weft_plan::interp::{Interpreter, RankBuffers};
use weft_plan::plan::{BufRef, Buffer, ExecutionPlan, Geometry};
use weft_plan::{AnyProgram, plans};

fn shipped_json() -> Vec<String> {
    let programs: Vec<AnyProgram> = vec![
        plans::ring_allreduce(3, 1).unwrap().into(),
        plans::allpairs_allreduce(4, 1).unwrap().into(),
        plans::ring_allgather(2, 2).unwrap().into(),
        plans::two_step_alltoall(4, 2, 1).unwrap().into(),
        plans::direct_broadcast(3, 1, 1).unwrap().into(),
        plans::ring_allreduce_ll(3, 1).unwrap().into(),
        plans::reduce_broadcast_allreduce(3, 1).unwrap().into(),
        plans::port_allpairs_allreduce(2).unwrap().into(),
        grouped_copy().into(),
        grouped_copy().with_instances(2).unwrap().with_pipeline(2).unwrap().into(),
    ];
    programs.iter().map(|p| p.compile().unwrap().to_json().unwrap()).collect()
}

/// Two ranks exchange their input, each through a thread-block group of two members.
fn grouped_copy() -> ChannelProgram {
    let mut p = ChannelProgram::new("grouped_copy", Collective::all_gather(2, 1).unwrap());
    for r in 0..2 {
        let channels = [p.memory_channel(r, 1 - r, 0).unwrap(), p.memory_channel(r, 1 - r, 1).unwrap()];
        let (input, mine) = (BufRef::new(Buffer::Input, 0, 1), BufRef::new(Buffer::Output, r, 1));
        p.threadblock_group(r, &[0, 1]).unwrap().copy(input, mine).put_with_signal(&channels, input, mine);
        for (tb, ch) in channels.iter().enumerate() {
            p.threadblock(r, tb as u32).unwrap().wait(ch);
        }
    }
    p
}

/// Every number and every array of a JSON value, as paths (object keys and array indices).
fn leaves(v: &Value, path: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    match v {
        Value::Number(_) | Value::Array(_) | Value::String(_) => out.push(path.clone()),
        _ => {}
    }
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                path.push(Value::String(k.clone()));
                leaves(child, path, out);
                path.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                path.push(Value::from(i));
                leaves(child, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[Value]) -> &'a mut Value {
    path.iter().fold(v, |v, key| match key {
        Value::String(k) => &mut v[k.as_str()],
        _ => &mut v[key.as_u64().unwrap() as usize],
    })
}

/// A loaded plan must be usable or refuse clearly: listing and drawing, geometry, then a short
/// interpreter run.
fn exercise(plan: &ExecutionPlan) {
    let _ = plan.listing();
    let graph = plan.graph();
    let _ = (graph.to_dot(), graph.to_svg());
    for count in [1usize, 7, 64] {
        if Geometry::new(plan, count).is_err() {
            continue;
        }
        let ranks = plan.ranks.len();
        let mut buffers: Vec<RankBuffers<i64>> = (0..ranks)
            .map(|r| {
                let g = Geometry::new(plan, count).unwrap();
                let input = g.buffer_len(r as u32, Buffer::Input).unwrap_or(count);
                let output = g.buffer_len(r as u32, Buffer::Output).unwrap_or(count);
                RankBuffers::new(vec![r as i64; input], vec![0; output])
            })
            .collect();
        let _ = Interpreter::new(plan).timeout(Duration::from_millis(50)).run(&mut buffers, count);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        let _ = ExecutionPlan::load(&text);
    }

    #[test]
    fn corrupted_shipped_plans_load_or_fail_cleanly(
        which in 0usize..10,
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..6, any::<u64>()), 1..4),
    ) {
        let mut value: Value = serde_json::from_str(&shipped_json()[which]).unwrap();
        for (index, kind, n) in edits {
            let mut paths = Vec::new();
            leaves(&value, &mut Vec::new(), &mut paths);
            if paths.is_empty() {
                break;
            }
            let target = at(&mut value, &paths[index.index(paths.len())]);
            *target = match kind {
                0 => Value::from(n),
                1 => Value::from(n % 8),
                2 => Value::from(u64::from(u32::MAX) + n % 2),
                3 => match target.take() {
                    Value::Array(mut a) if !a.is_empty() => {
                        a.truncate(n as usize % a.len());
                        Value::Array(a)
                    }
                    other => other,
                },
                4 => Value::from(-(n as i64 % 5) - 1),
                _ => Value::String("x".into()),
            };
        }
        let text = serde_json::to_string(&value).unwrap();
        if let Ok(plan) = ExecutionPlan::load(&text) {
            exercise(&plan);
        }
        // Truncated text is an error, never a panic.
        let _ = ExecutionPlan::load(&text[..text.len() / 2]);
    }
}
