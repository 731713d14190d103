//! temporary sweep
#![allow(clippy::unwrap_used)]
mod common;
use common::{Coll, check};
use weft_plan::{ReduceOp, plans};
#[test]
fn sweep() {
    let mut runs = 0;
    for n in 2..=8u32 {
        for inst in 1..=4u32 {
            let mut progs = vec![
                (plans::ring_allreduce(n, inst).unwrap(), Coll::AllReduce),
                (plans::allpairs_allreduce(n, inst).unwrap(), Coll::AllReduce),
                (plans::ring_allgather(n, inst).unwrap(), Coll::AllGather),
                (plans::ring_reduce_scatter(n, inst).unwrap(), Coll::ReduceScatter),
                (plans::allpairs_reduce_scatter(n, inst).unwrap(), Coll::ReduceScatter),
                (plans::direct_broadcast(n, n - 1, inst).unwrap(), Coll::Broadcast(n as usize - 1)),
            ];
            for g in (1..=n).filter(|g| n % g == 0) {
                progs.push((plans::hierarchical_allreduce(n, g, inst).unwrap(), Coll::AllReduce));
                progs.push((plans::two_step_alltoall(n, g, inst).unwrap(), Coll::AllToAll));
                progs.push((plans::alltonext(n, g, inst).unwrap(), Coll::AllToNext));
            }
            for (p, c) in progs {
                let name = format!("{} n={n} inst={inst}", p.name());
                let plan = p.compile().unwrap_or_else(|e| panic!("{name}: {e}"));
                for m in [0usize, 1, 5, 13] {
                    check(&plan, c, m, u64::from(n) * 31 + m as u64, ReduceOp::Sum).unwrap_or_else(|e| panic!("{name} m={m}: {e}"));
                    runs += 1;
                }
            }
        }
    }
    println!("{runs} runs");
}
