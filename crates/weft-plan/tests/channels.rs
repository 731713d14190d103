//! The channel-level DSL: hand-written thread blocks are verified as written, run correctly
//! through the CPU interpreter, and their mistakes are named.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use common::{Coll, check};
use weft_plan::ReduceOp;
use weft_plan::dsl::{Buffer, ChannelProgram, Collective};
use weft_plan::plan::{BufRef, Protocol};

fn input(i: u32) -> BufRef {
    BufRef::new(Buffer::Input, i, 1)
}

fn output(i: u32) -> BufRef {
    BufRef::new(Buffer::Output, i, 1)
}

/// One-shot all-pairs all-reduce by read-reduce (MSCCL++'s 1PA with `get`-style reads): every
/// rank folds every peer's input into its output. Inputs are never written, so no signal is
/// needed.
fn read_reduce_allreduce(n: u32) -> ChannelProgram {
    let mut p = ChannelProgram::new("read_reduce_allreduce", Collective::all_reduce(n, 1).unwrap());
    for r in 0..n {
        let channels: Vec<_> = (1..n).map(|k| p.memory_channel(r, (r + k) % n, 0).unwrap()).collect();
        let mut tb = p.threadblock(r, 0).unwrap();
        tb.read_reduce(&channels[0], input(0), input(0), output(0));
        for ch in &channels[1..] {
            tb.read_reduce(ch, output(0), input(0), output(0));
        }
    }
    p
}

/// Two ranks, LL: each sends its input as packets into the peer's scratch, then folds the
/// peer's packets into its own input.
fn packet_allreduce(protocol: Protocol) -> ChannelProgram {
    let mut p = ChannelProgram::new("packet_allreduce", Collective::all_reduce(2, 1).unwrap()).with_protocol(protocol);
    for r in 0..2 {
        let staged = p.scratch(r, &[0]).unwrap();
        let ch = p.memory_channel(r, 1 - r, 0).unwrap();
        let mut tb = p.threadblock(r, 0).unwrap();
        tb.put_packets(&ch, input(0), staged);
        tb.recv_reduce(&ch, input(0), staged, output(0));
    }
    p
}

#[test]
fn hand_written_plans_verify_and_compute_their_collective() {
    for n in 2..=5 {
        let plan = read_reduce_allreduce(n).compile().unwrap();
        for m in [0, 1, 5, 33] {
            check(&plan, Coll::AllReduce, m, u64::from(n) + m as u64, ReduceOp::Sum).unwrap();
            check(&plan, Coll::AllReduce, m, 7, ReduceOp::Max).unwrap();
        }
    }
    let plan = packet_allreduce(Protocol::Ll).compile().unwrap();
    assert_eq!(plan.protocol, Protocol::Ll);
    check(&plan, Coll::AllReduce, 17, 3, ReduceOp::Sum).unwrap();
}

/// Ring all-gather with receive and forward split over two thread blocks of every rank, each
/// with its own channel (a link belongs to one thread block), ordered by a semaphore between
/// them: tb 1 forwards what tb 0 received.
fn split_ring_allgather(n: u32) -> ChannelProgram {
    let mut p = ChannelProgram::new("split_ring_allgather", Collective::all_gather(n, 1).unwrap());
    for r in 0..n {
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        let (a, b) = (p.memory_channel(r, next, 0).unwrap(), p.memory_channel(r, next, 1).unwrap());
        let (from_a, from_b) = (p.memory_channel(r, prev, 0).unwrap(), p.memory_channel(r, prev, 1).unwrap());
        let received = {
            let mut tb0 = p.threadblock(r, 0).unwrap();
            tb0.copy(input(0), output(r));
            tb0.put_with_signal(&a, input(0), output(r));
            let step = tb0.next_step();
            tb0.wait(&from_a);
            step
        };
        let mut tb1 = p.threadblock(r, 1).unwrap();
        tb1.wait_tb(0, received);
        tb1.put_with_signal(&b, output(prev), output(prev));
        tb1.wait(&from_b);
    }
    p
}

#[test]
fn thread_blocks_wait_for_each_other() {
    let plan = split_ring_allgather(3).compile().unwrap();
    for m in [1, 4, 9] {
        check(&plan, Coll::AllGather, m, 11, ReduceOp::Sum).unwrap();
    }
}

/// Instances and pipelined tiles of hand-written programs: every thread block once per
/// instance, its operations once per tile, on sub-chunks of their own; each still computes its
/// collective (verified, and run through the interpreter at sizes that do not divide evenly).
#[test]
fn instances_and_tiles_replicate_the_program_as_written() {
    let programs: [(fn() -> ChannelProgram, Coll); 5] = [
        (|| read_reduce_allreduce(3), Coll::AllReduce),
        (|| packet_allreduce(Protocol::Ll), Coll::AllReduce),
        (|| split_ring_allgather(3), Coll::AllGather),
        (|| port_exchange(None), Coll::AllGather),
        (|| grouped_read_reduce_allreduce(3, 2), Coll::AllReduce),
    ];
    for (instances, tiles) in [(2, 1), (1, 3), (2, 2), (3, 2)] {
        for (program, coll) in programs {
            let written = program().compile().unwrap();
            let plan = program().with_instances(instances).unwrap().with_pipeline(tiles).unwrap().compile().unwrap();
            let split = instances * tiles;
            assert_eq!(plan.size_classes, written.size_classes * split, "{}", plan.name);
            assert_eq!(plan.input_chunks, written.input_chunks * split);
            for (replicated, rank) in plan.ranks.iter().zip(&written.ranks) {
                assert_eq!(replicated.threadblocks.len(), rank.threadblocks.len() * instances as usize);
                assert_eq!(replicated.scratch.len(), rank.scratch.len() * split as usize);
                for tb in &replicated.threadblocks {
                    let original = &rank.threadblocks[(tb.id / instances) as usize];
                    assert_eq!(tb.ops.len(), original.ops.len() * tiles as usize, "{}", plan.name);
                }
            }
            for m in [0, 1, 5, 37] {
                check(&plan, coll, m, u64::from(split) + m as u64, ReduceOp::Sum)
                    .unwrap_or_else(|e| panic!("{} x{instances} /{tiles} at {m}: {e}", plan.name));
            }
        }
    }
    // Instances times tiles is bounded, and a mistake is still named with instances.
    let e = read_reduce_allreduce(2).with_instances(0).unwrap_err().to_string();
    assert!(e.contains("instances"), "{e}");
    let e = read_reduce_allreduce(2).with_instances(8).unwrap().with_pipeline(16).unwrap_err().to_string();
    assert!(e.contains("pipeline tiles"), "{e}");
    let e = packet_allreduce(Protocol::Simple).with_instances(2).unwrap().compile().unwrap_err().to_string();
    assert!(e.contains("needs the LL protocol"), "{e}");
    // A range of two chunks used one chunk at a time elsewhere cannot be split by instances.
    let e = weft_plan::plans::port_allpairs_allreduce(2).unwrap().with_instances(2).unwrap().compile().unwrap_err();
    assert!(e.to_string().contains("input[0] and input[0..2] share chunks but are not the same range"), "{e}");
}

#[test]
fn mistakes_are_named() {
    let mut text = Vec::new();
    // A signal the receiver never waits for, and a read of data not yet there.
    let mut p = ChannelProgram::new("no_wait", Collective::all_gather(2, 1).unwrap());
    for r in 0..2 {
        let ch = p.memory_channel(r, 1 - r, 0).unwrap();
        let mut tb = p.threadblock(r, 0).unwrap();
        tb.copy(input(0), output(r));
        tb.put(&ch, input(0), output(r));
        tb.signal(&ch);
    }
    text.push(format!("unpaired: {}", p.compile().unwrap_err()));
    // Both ranks wait before signalling.
    let mut p = ChannelProgram::new("deadlock", Collective::all_gather(2, 1).unwrap());
    for r in 0..2 {
        let ch = p.memory_channel(r, 1 - r, 0).unwrap();
        let mut tb = p.threadblock(r, 0).unwrap();
        tb.copy(input(0), output(r));
        tb.wait(&ch);
        tb.put_with_signal(&ch, input(0), output(r));
    }
    text.push(format!("deadlock: {}", p.compile().unwrap_err()));
    // A put whose signal comes before it: the peer may read before the data lands.
    let mut p = ChannelProgram::new("early_signal", Collective::all_gather(2, 1).unwrap());
    for r in 0..2 {
        let ch = p.memory_channel(r, 1 - r, 0).unwrap();
        let mut tb = p.threadblock(r, 0).unwrap();
        tb.signal(&ch);
        tb.copy(input(0), output(r));
        tb.put(&ch, input(0), output(r));
        tb.wait(&ch);
        tb.copy(output(1 - r), output(1 - r));
    }
    text.push(format!("early signal: {}", p.compile().unwrap_err()));
    text.push(format!("packets without LL: {}", packet_allreduce(Protocol::Simple).compile().unwrap_err()));
    // The protocol is the one the program has when it compiles, whenever it was set.
    let back_to_simple = packet_allreduce(Protocol::Ll).with_protocol(Protocol::Simple);
    text.push(format!("packets, then the simple protocol: {}", back_to_simple.compile().unwrap_err()));
    let plan = packet_allreduce(Protocol::Simple).with_protocol(Protocol::Ll).compile().unwrap();
    check(&plan, Coll::AllReduce, 17, 3, ReduceOp::Sum).unwrap();
    // Asking for thread block 1 first makes thread block 0 too; left empty, it is named.
    let mut p = ChannelProgram::new("gap", Collective::all_gather(2, 1).unwrap());
    for r in 0..2 {
        p.threadblock(r, 1).unwrap().copy(input(0), output(r));
    }
    text.push(format!("an empty thread block: {}", p.compile().unwrap_err()));
    let mut p = ChannelProgram::new("foreign", Collective::all_gather(2, 1).unwrap());
    let theirs = p.memory_channel(1, 0, 0).unwrap();
    p.threadblock(0, 0).unwrap().wait(&theirs);
    text.push(format!("another rank's channel: {}", p.compile().unwrap_err()));
    text.push(format!(
        "rank out of range: {}",
        ChannelProgram::new("x", Collective::all_gather(2, 1).unwrap()).memory_channel(0, 2, 0).unwrap_err()
    ));
    insta::assert_snapshot!(text.join("\n"));
}

fn scratch(i: u32) -> BufRef {
    BufRef::new(Buffer::Scratch, i, 1)
}

/// Two ranks exchange their input through port channels: stage it in scratch, put it into the
/// peer's scratch with a signal, wait, copy what the peer put into the output, flush. `mistake`
/// breaks it in one of the ways the verifier must catch.
fn port_exchange(mistake: Option<&str>) -> ChannelProgram {
    let mut p = ChannelProgram::new("port_exchange", Collective::all_gather(2, 1).unwrap());
    for r in 0..2 {
        let s = p.scratch(r, &[0, 0]).unwrap().index;
        let port = p.port_channel(r, 1 - r, 0).unwrap();
        let mem = p.memory_channel(r, 1 - r, 0).unwrap();
        let mut tb = p.threadblock(r, 0).unwrap();
        tb.copy(input(0), scratch(s));
        tb.copy(input(0), output(r));
        match mistake {
            // The staged source is written again while the copy engine may still read it.
            Some("source reused") => {
                tb.put_with_signal(&port, scratch(s), scratch(s + 1));
                tb.copy(input(0), scratch(s));
                tb.wait(&port);
            }
            // The put is announced on another channel, whose signal does not cover it.
            Some("memory signal") => {
                tb.put(&port, scratch(s), scratch(s + 1));
                tb.signal(&mem);
                tb.wait(&mem);
            }
            _ => {
                tb.put_with_signal(&port, scratch(s), scratch(s + 1));
                tb.wait(&port);
            }
        }
        tb.copy(scratch(s + 1), output(1 - r));
        if mistake != Some("unflushed") {
            tb.flush(&port);
        }
    }
    p
}

#[test]
fn port_channel_plans_verify_and_compute_their_collective() {
    let plan = port_exchange(None).compile().unwrap();
    let json = plan.to_json().unwrap();
    assert!(json.contains("\"port\": true"), "{json}");
    assert_eq!(weft_plan::ExecutionPlan::load(&json).unwrap(), plan);
    for m in [1, 4, 9] {
        check(&plan, Coll::AllGather, m, 5, ReduceOp::Sum).unwrap();
    }
    for n in 2..=6 {
        let plan = weft_plan::plans::port_allpairs_allreduce(n).unwrap().compile().unwrap();
        for m in [0, 1, 3] {
            check(&plan, Coll::AllReduce, m, u64::from(n) * 3 + m as u64, ReduceOp::Sum).unwrap();
            check(&plan, Coll::AllReduce, m, 9, ReduceOp::Min).unwrap();
        }
    }
}

/// The interpreter applies a port put as late as the channel allows (at its signal or flush),
/// so a plan that writes the source before the flush computes a wrong result there as well:
/// the verifier's race is a real one.
#[test]
fn a_port_source_written_before_its_flush_is_a_race_the_interpreter_shows() {
    use weft_plan::plan::Op;
    let mut plan = port_exchange(None).compile().unwrap();
    // After the put (a bare one now) and before its signal, the stage is doubled in place.
    for rank in &mut plan.ranks {
        let ops = &mut rank.threadblocks[0].ops;
        let Op::Send { src, dst, to } = ops[2] else { panic!("unexpected {}", ops[2]) };
        ops[2] = Op::Put { src, dst, to };
        ops.insert(3, Op::Reduce { srcs: vec![src, src], dst: src });
        ops.insert(4, Op::Signal { to });
    }
    plan.validate().unwrap();
    let collective = Collective::from_plan(&plan).unwrap();
    let err = weft_plan::passes::verify(&plan, &collective).unwrap_err();
    assert!(err.to_string().contains("data race"), "{err}");
    // Each rank's output[peer] gets twice the peer's input.
    assert!(check(&plan, Coll::AllGather, 3, 5, ReduceOp::Sum).is_err());
}

#[test]
fn port_channel_mistakes_are_named() {
    let mut text = Vec::new();
    for mistake in ["source reused", "memory signal", "unflushed"] {
        text.push(format!("{mistake}: {}", port_exchange(Some(mistake)).compile().unwrap_err()));
    }
    // A port put from the user's input: the proxy registers scratch only.
    let mut p = ChannelProgram::new("port_from_input", Collective::all_gather(2, 1).unwrap());
    for r in 0..2 {
        let s = p.scratch(r, &[0]).unwrap().index;
        let port = p.port_channel(r, 1 - r, 0).unwrap();
        let mut tb = p.threadblock(r, 0).unwrap();
        tb.copy(input(0), output(r));
        tb.put_with_signal_and_flush(&port, input(0), scratch(s));
        tb.recv(&port, scratch(s), output(1 - r));
    }
    text.push(format!("put from input: {}", p.compile().unwrap_err()));
    // Port channels under LL.
    let mut p = ChannelProgram::new("port_ll", Collective::all_gather(2, 1).unwrap()).with_protocol(Protocol::Ll);
    let port = p.port_channel(0, 1, 0).unwrap();
    p.threadblock(0, 0).unwrap().signal(&port);
    text.push(format!("under LL: {}", p.compile().unwrap_err()));
    // Flushing a memory channel, and reading over a port channel (as a loaded plan could).
    let mut plan = port_exchange(None).compile().unwrap();
    let mut flush_memory = plan.clone();
    let ops = &mut flush_memory.ranks[1].threadblocks[0].ops;
    let last = ops.len() - 1;
    ops[last] = weft_plan::plan::Op::Flush { to: weft_plan::plan::Link::new(0, 0) };
    text.push(format!("flush a memory channel: {}", flush_memory.validate().unwrap_err()));
    let ops = &mut plan.ranks[0].threadblocks[0].ops;
    ops.push(weft_plan::plan::Op::Get { src: input(0), dst: output(1), from: weft_plan::plan::Link::port(1, 1) });
    text.push(format!("get over a port: {}", plan.validate().unwrap_err()));
    insta::assert_snapshot!(text.join("\n"));
}

/// One-shot all-reduce by read-reduce, every rank's fold split over a group of `members`
/// thread blocks, each folding its part of the chunk.
fn grouped_read_reduce_allreduce(n: u32, members: u32) -> ChannelProgram {
    let mut p = ChannelProgram::new("grouped_read_reduce", Collective::all_reduce(n, 1).unwrap());
    for r in 0..n {
        let tbs: Vec<u32> = (0..members).collect();
        let mut channels = Vec::new();
        for k in 1..n {
            let peer = (r + k) % n;
            channels.push((0..members).map(|c| p.memory_channel(r, peer, c).unwrap()).collect::<Vec<_>>());
        }
        let mut group = p.threadblock_group(r, &tbs).unwrap();
        for (k, per_member) in channels.iter().enumerate() {
            let local = if k == 0 { input(0) } else { output(0) };
            group.read_reduce(per_member, local, input(0), output(0));
        }
    }
    p
}

/// Two ranks exchange their input, each half moved by one member of a two-block group on its own
/// channel; `whole_put` instead puts the whole output chunk from member 0 alone, after waiting
/// (`wait`) or not for member 1's copy.
fn grouped_exchange(whole_put: Option<bool>) -> ChannelProgram {
    let mut p = ChannelProgram::new("grouped_exchange", Collective::all_gather(2, 1).unwrap());
    for r in 0..2 {
        let chans: Vec<_> = (0..2).map(|c| p.memory_channel(r, 1 - r, c).unwrap()).collect();
        p.threadblock_group(r, &[0, 1]).unwrap().copy(input(0), output(r));
        match whole_put {
            None => {
                p.threadblock_group(r, &[0, 1]).unwrap().put_with_signal(&chans, input(0), output(r));
                for (tb, ch) in chans.iter().enumerate() {
                    p.threadblock(r, tb as u32).unwrap().wait(ch);
                }
            }
            Some(wait) => {
                if wait {
                    p.threadblock(r, 0).unwrap().wait_tb(1, 0);
                }
                let mut tb = p.threadblock(r, 0).unwrap();
                tb.put_with_signal(&chans[0], output(r), output(r));
                tb.wait(&chans[0]);
            }
        }
    }
    p
}

#[test]
fn thread_block_groups_split_chunks_and_compute_their_collective() {
    for (n, members) in [(2, 2), (3, 3), (4, 4), (2, 7)] {
        let plan = grouped_read_reduce_allreduce(n, members).compile().unwrap();
        assert!(plan.ranks[0].threadblocks.iter().all(|t| matches!(t.ops[0], weft_plan::plan::Op::Part { .. })));
        for m in [0, 1, 5, 33] {
            check(&plan, Coll::AllReduce, m, u64::from(n * members) + m as u64, ReduceOp::Sum).unwrap();
        }
    }
    let plan = grouped_exchange(None).compile().unwrap();
    assert_eq!(weft_plan::ExecutionPlan::load(&plan.to_json().unwrap()).unwrap(), plan);
    for m in [1, 2, 9] {
        check(&plan, Coll::AllGather, m, 3, ReduceOp::Sum).unwrap();
    }
    // Member 0 may put the whole chunk once member 1's part is there.
    let plan = grouped_exchange(Some(true)).compile().unwrap();
    check(&plan, Coll::AllGather, 5, 3, ReduceOp::Sum).unwrap();
}

#[test]
fn thread_block_group_mistakes_are_named() {
    use weft_plan::plan::{Op, Part};
    let mut text = Vec::new();
    text.push(format!(
        "whole chunk read before the other member wrote it: {}",
        grouped_exchange(Some(false)).compile().unwrap_err()
    ));
    let mut p = ChannelProgram::new("g", Collective::all_gather(2, 1).unwrap());
    text.push(format!("a group of one: {}", p.threadblock_group(0, &[0]).unwrap_err()));
    let chans = [p.memory_channel(0, 1, 0).unwrap()];
    p.threadblock_group(0, &[0, 1]).unwrap().put(&chans, input(0), output(0));
    text.push(format!("a channel short: {}", p.compile().unwrap_err()));
    let mut plan = grouped_exchange(None).compile().unwrap();
    let ops = &mut plan.ranks[0].threadblocks[0].ops;
    let wait = ops.pop().unwrap();
    ops.push(Op::Part { part: Part::new(0, 2), of: Box::new(wait) });
    text.push(format!("a part of a wait: {}", plan.validate().unwrap_err()));
    let mut plan = grouped_exchange(None).compile().unwrap();
    let Op::Part { of, .. } = plan.ranks[1].threadblocks[1].ops[0].clone() else { panic!() };
    plan.ranks[1].threadblocks[1].ops[0] = Op::Part { part: Part::new(3, 13), of: of.clone() };
    plan.ranks[1].threadblocks[0].ops[0] = Op::Part { part: Part::new(0, 5), of };
    text.push(format!("parts too fine: {}", plan.validate().unwrap_err()));
    insta::assert_snapshot!(text.join("\n"));
}
