//! The tuning-table file (`WEFT_TUNING_FILE`, written by `weft tune`): JSON a user may edit.

use weft_coll::{AcrossNodes, Collective, DataType, ReduceOp, Selector, TuningTable};

/// Message sizes the selector is asked about: the edges of every shipped switch point.
const SIZES: [u64; 6] = [0, 1, 64 << 10, (1 << 20) + 1, 256 << 20, u64::MAX];

/// A table that parses applies to the default selector or fails with an error; an applied
/// selector picks an algorithm of the right collective for every call (within a node and
/// across 2 and 3 nodes), and its own table
/// reproduces it. Returns whether the table applied.
pub fn check(data: &[u8]) -> bool {
    let Ok(table) = TuningTable::from_json(data) else { return false };
    let mut selector = Selector::default();
    if selector.apply(&table).is_err() {
        return false;
    }
    for collective in Collective::ALL {
        for dtype in [DataType::F32, DataType::Bf16] {
            for ranks in [1, 2, 8] {
                for bytes in SIZES {
                    let algorithm = selector.select(collective, dtype, bytes, ranks);
                    assert_eq!(algorithm.collective(), collective, "{algorithm} chosen for {collective}");
                    for (nodes, equal_nodes) in [(2, true), (3, false)] {
                        let call =
                            AcrossNodes { collective, bytes, dtype, op: ReduceOp::Sum, ranks, nodes, equal_nodes };
                        if let Ok(across) = selector.across_nodes(call) {
                            assert_eq!(
                                across.collective(),
                                collective,
                                "{across} chosen across nodes for {collective}"
                            );
                        }
                    }
                }
            }
        }
    }
    let own = selector.table();
    #[allow(clippy::expect_used)] // a table of the selector's own rules is plain data
    let json = serde_json::to_vec(&own).expect("a table serialises");
    match TuningTable::from_json(&json) {
        Ok(again) => assert_eq!(again, own, "a table changed through its JSON"),
        Err(e) => panic!("a selector's own table does not parse: {e}"),
    }
    let mut again = Selector::default();
    if let Err(e) = again.apply(&own) {
        panic!("a selector's own table does not apply: {e}");
    }
    // The same rules; whether a group is one of weft's built-in defaults (which a later
    // table may replace) is not part of a table.
    assert_eq!(again.table(), own, "a selector's own table does not reproduce it");
    for collective in Collective::ALL {
        for ranks in [1, 2, 8] {
            for bytes in SIZES {
                let pick = |s: &Selector| s.select(collective, DataType::Bf16, bytes, ranks);
                assert_eq!(pick(&again), pick(&selector), "{collective} at {bytes} bytes on {ranks} ranks");
            }
        }
    }
    true
}

/// The default table, one filtered by type and rank count, a small hand-written one, and one of
/// type-only groups.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let filtered = br#"{"machine": "2xH200", "ranks": 2, "hb_blocks": 16, "collectives": {
  "allreduce": [{"max_bytes": 65536, "algorithm": "ll"}, {"algorithm": "hb"},
                {"dtype": "bf16", "ranks": 2, "max_bytes": 1048576, "algorithm": "ll2"},
                {"dtype": "bf16", "ranks": 2, "algorithm": "ring"},
                {"nodes": 2, "max_bytes": 65536, "algorithm": "port_allpairs"},
                {"nodes": 2, "algorithm": "plan:nvrar_allreduce"}],
  "allgather": [{"ranks": 8, "algorithm": "hb"}]}}"#;
    let small = br#"{"collectives": {"broadcast": [{"algorithm": "ll"}]}}"#;
    // Type-only groups beside the built-in rank-count groups (a fuzzer's find: the selector's
    // own table must pick as the selector does, built-in groups and all).
    let type_only = br#"{"collectives": {"allreduce": [{"dtype": "bf16", "max_bytes": 1048576, "algorithm": "ll2"},
  {"dtype": "bf16", "algorithm": "ring"}]}}"#;
    #[allow(clippy::expect_used)] // the default selector's table is plain data
    let default = serde_json::to_vec_pretty(&Selector::default().table()).expect("a table serialises");
    vec![
        ("default", default),
        ("filtered", filtered.to_vec()),
        ("small", small.to_vec()),
        ("type_only", type_only.to_vec()),
    ]
}
