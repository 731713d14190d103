//! Specialized executor kernels: one rank's lowered operations compiled into the interpreter
//! kernel as constants (`WEFT_STATIC_OPS`, `WEFT_STATIC_STARTS`), so each operation becomes
//! straight-line code for exactly what it does. The interpreter spends most of a small
//! operation's time on instruction fetch and on tests of flags that the plan fixes (Nsight
//! Compute: 55% of stall cycles waiting for an instruction fetch); a specialized kernel has
//! only the code its operations use.
//!
//! The kernel is the same source with two more defines, so it is compiled per (plan, rank,
//! element type, operator) and cached like every other kernel. The operations it uploads stay
//! the same (the kernel still resolves chunk addresses from them).

use std::fmt::Write;

use weft_types::{ExecLoc, ExecOp};

use crate::lower::DevicePlan;

/// Most operations a rank may have for its kernel to be specialized: each operation becomes
/// code of its own, and compiling grows with them (ranks sharing one H200, 4 ranks compiling at
/// once: 7 operations compile in under 10 s, 15–16 in 20–35 s, 24–60 take over 40 s). Ranks
/// with more run the interpreter.
pub const SPECIALIZE_MAX_OPS: usize = 16;

/// Whether `rank` of `plan` gets a specialized kernel when asked for one: it has operations
/// (else its grid only stages and fences), at most [`SPECIALIZE_MAX_OPS`].
pub fn specializable(plan: &DevicePlan, rank: usize) -> bool {
    plan.ranks.get(rank).is_some_and(|r| !r.ops.is_empty() && r.ops.len() <= SPECIALIZE_MAX_OPS)
}

/// The preprocessor defines that compile `rank`'s operations (and the plan's protocol) into the
/// executor kernel.
pub fn static_ops_defines(plan: &DevicePlan, rank: usize) -> Vec<String> {
    let rank = &plan.ranks[rank];
    let mut ops = String::from("WEFT_STATIC_OPS={");
    for (i, op) in rank.ops.iter().enumerate() {
        if i != 0 {
            ops.push(',');
        }
        write_op(&mut ops, op);
    }
    ops.push('}');
    let starts: Vec<String> = rank.tb_starts.iter().map(u32::to_string).collect();
    vec![
        ops,
        format!("WEFT_STATIC_STARTS={{{}}}", starts.join(",")),
        format!("WEFT_STATIC_PACKETS={}", u8::from(plan.packets)),
    ]
}

/// `op` as a C++ aggregate initializer, fields in the struct's declaration order (a test holds
/// the order to the generated CUDA header).
fn write_op(out: &mut String, op: &ExecOp) {
    // Writing into a String cannot fail.
    let _ = write!(
        out,
        "{{{}u,{}u,{}u,{},{},{},{},{},{},{},{{",
        op.flags,
        op.wait_tb,
        op.wait_step,
        op.wait_peer,
        op.wait_channel,
        op.signal_peer,
        op.signal_channel,
        op.n_inputs,
        op.n_outputs,
        op.packets
    );
    write_locs(out, &op.inputs);
    out.push_str("},{");
    write_locs(out, &op.outputs);
    out.push_str("}}");
}

/// `locs` as initializers, fields in declaration order.
fn write_locs(out: &mut String, locs: &[ExecLoc]) {
    for (i, l) in locs.iter().enumerate() {
        if i != 0 {
            out.push(',');
        }
        let _ = write!(out, "{{{}u,{}u,{},{},{}}}", l.chunk, l.count, l.peer, l.buffer, l.flags);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::lower;

    /// The fields of [`ExecOp`] and [`ExecLoc`] in the order `write_op` and `write_locs` write them.
    const OP_FIELDS: [&str; 12] = [
        "flags",
        "wait_tb",
        "wait_step",
        "wait_peer",
        "wait_channel",
        "signal_peer",
        "signal_channel",
        "n_inputs",
        "n_outputs",
        "packets",
        "inputs",
        "outputs",
    ];
    const LOC_FIELDS: [&str; 5] = ["chunk", "count", "peer", "buffer", "flags"];

    #[test]
    fn every_operation_of_every_thread_block_is_written_in_order() {
        let plan = weft_plan::plans::allpairs_allreduce_ll(2, 1).unwrap().compile().unwrap();
        let lowered = lower(&plan).unwrap();
        let rank = &lowered.ranks[1];
        let defines = static_ops_defines(&lowered, 1);
        assert_eq!(defines.len(), 3);
        assert_eq!(defines[2], "WEFT_STATIC_PACKETS=1");
        let ops = &defines[0];
        assert!(ops.starts_with("WEFT_STATIC_OPS={{"), "{ops}");
        // Each op opens 1 + 2 brace pairs for itself and its arrays, and one per location.
        assert_eq!(ops.matches('{').count(), 1 + rank.ops.len() * (3 + 6));
        let starts: Vec<String> = rank.tb_starts.iter().map(u32::to_string).collect();
        assert_eq!(defines[1], format!("WEFT_STATIC_STARTS={{{}}}", starts.join(",")));
        // The first operation's fields, in the order the struct declares them.
        let first = &rank.ops[0];
        let head = format!("{{{{{}u,{}u,{}u,", first.flags, first.wait_tb, first.wait_step);
        assert!(ops.contains(&head), "{ops}");
        assert!(!ops.contains(' '), "a define's value without spaces");
    }

    /// The member names of `name`'s struct in the generated CUDA header, in declaration order.
    fn declared_fields(name: &str) -> Vec<String> {
        let header = weft_types::cuda::generated_header();
        let body = header.split(&format!("struct alignas(4) {name} {{")).nth(1).expect("the struct is declared");
        let body = &body[..body.find("};").expect("the struct ends")];
        body.lines()
            .filter_map(|line| line.split(';').next()?.split_whitespace().last())
            .map(|field| field.split('[').next().unwrap_or(field).to_string())
            .collect()
    }

    #[test]
    fn initializers_follow_the_declaration_order_of_the_cuda_structs() {
        assert_eq!(declared_fields("ExecOp"), OP_FIELDS);
        assert_eq!(declared_fields("ExecLoc"), LOC_FIELDS);
    }

    #[test]
    fn only_ranks_with_a_few_operations_are_specialized() {
        let small = lower(&weft_plan::plans::ring_allreduce_ll(4, 1).unwrap().compile().unwrap()).unwrap();
        assert!((0..4).all(|r| specializable(&small, r)));
        let large = lower(&weft_plan::plans::allpairs_allreduce(4, 4).unwrap().compile().unwrap()).unwrap();
        assert!(large.ranks[0].ops.len() > SPECIALIZE_MAX_OPS);
        assert!(!specializable(&large, 0));
        assert!(!specializable(&small, 4), "no such rank");
    }

    #[test]
    fn ranks_with_different_operations_get_different_kernels() {
        let plan = weft_plan::plans::ring_allreduce(3, 1).unwrap().compile().unwrap();
        let lowered = lower(&plan).unwrap();
        let all: Vec<Vec<String>> = (0..3).map(|r| static_ops_defines(&lowered, r)).collect();
        assert_eq!(all[0][2], "WEFT_STATIC_PACKETS=0");
        assert_ne!(all[0], all[1]);
        assert_ne!(all[1], all[2]);
    }
}
