//! The plan's operation DAG, drawn: every operation is a node (rank, thread block, step), and
//! the edges are what orders operations across thread blocks and ranks:
//!
//! - a signal to the wait it releases (the k-th signal on a link pairs with the k-th wait on
//!   it): the chunks crossing that link;
//! - a thread block waiting for another's step (`wait_tb`);
//! - the k-th barrier of a rank, which no thread block passes before all reach it.
//!
//! Operations are laid out by *depth*, the longest chain of such edges (and program order)
//! before them, so an operation sits below everything it waits for. Operations on a cycle
//! never run (the plan deadlocks); they get no depth and are drawn in red. Two renderings: a
//! Graphviz DOT graph, and a self-contained SVG laid out here (no Graphviz needed).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;

use super::{ExecutionPlan, Op};

/// One operation of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpNode {
    /// Rank.
    pub rank: u32,
    /// Thread block.
    pub tb: u32,
    /// Position in the thread block's operations.
    pub step: u32,
    /// The operation's name (`send`, `rrcs`, …).
    pub name: &'static str,
    /// Its operands, as in the listing.
    pub detail: String,
    /// Longest chain of edges before it; `None` when it lies on a cycle (never runs).
    pub depth: Option<u32>,
}

/// Why one operation waits for another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeKind {
    /// A signal and the wait it releases, on a link's channel.
    Link {
        /// The channel.
        channel: u32,
        /// A port channel.
        port: bool,
    },
    /// `wait_tb`: another thread block's step of the same rank.
    ThreadBlock,
}

/// An edge between two nodes (indices into [`OpGraph::nodes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpEdge {
    /// The operation waited for.
    pub from: usize,
    /// The waiting operation.
    pub to: usize,
    /// Why.
    pub kind: EdgeKind,
}

/// A connection: (from rank, to rank, channel, port).
type LinkKey = (u32, u32, u32, bool);
/// The signalling and the waiting nodes of a connection, in program order.
type Pairs = (Vec<usize>, Vec<usize>);

/// The operation DAG of a plan (see the module documentation).
#[derive(Clone, Debug)]
pub struct OpGraph {
    /// Title line: plan name, collective, ranks, protocol.
    pub title: String,
    /// Every operation, by rank, thread block and step.
    pub nodes: Vec<OpNode>,
    /// Cross-thread-block edges (program order is implicit: consecutive steps of a lane).
    pub edges: Vec<OpEdge>,
    /// Barrier groups: the nodes of a rank's k-th barrier, one per thread block.
    pub barriers: Vec<Vec<usize>>,
    /// `(rank, tb)` of every lane, and the range of `nodes` it holds.
    pub lanes: Vec<(u32, u32, std::ops::Range<usize>)>,
}

impl OpGraph {
    /// The DAG of `plan` (which [`ExecutionPlan::load`] has validated: links pair up).
    pub fn new(plan: &ExecutionPlan) -> Self {
        let mut nodes = Vec::new();
        let mut lanes = Vec::new();
        for rank in &plan.ranks {
            for tb in &rank.threadblocks {
                let first = nodes.len();
                for (step, op) in tb.ops.iter().enumerate() {
                    nodes.push(OpNode {
                        rank: rank.rank,
                        tb: tb.id,
                        step: step as u32,
                        name: op.name(),
                        detail: detail(op),
                        depth: None,
                    });
                }
                lanes.push((rank.rank, tb.id, first..nodes.len()));
            }
        }
        let index: BTreeMap<(u32, u32, u32), usize> =
            nodes.iter().enumerate().map(|(i, n)| ((n.rank, n.tb, n.step), i)).collect();
        let mut graph = Self { title: title(plan), nodes, edges: Vec::new(), barriers: Vec::new(), lanes };
        graph.link_edges(plan, &index);
        graph.barrier_groups(plan, &index);
        graph.assign_depths();
        graph
    }

    /// Signal → wait edges (k-th with k-th on each link) and `wait_tb` edges.
    fn link_edges(&mut self, plan: &ExecutionPlan, index: &BTreeMap<(u32, u32, u32), usize>) {
        let mut links: BTreeMap<LinkKey, Pairs> = BTreeMap::new();
        for rank in &plan.ranks {
            for tb in &rank.threadblocks {
                for (step, op) in tb.ops.iter().enumerate() {
                    let node = index[&(rank.rank, tb.id, step as u32)];
                    let e = op.effects();
                    if let Some(l) = e.signal {
                        links.entry((rank.rank, l.peer, l.channel, l.port)).or_default().0.push(node);
                    }
                    if let Some(l) = e.wait {
                        links.entry((l.peer, rank.rank, l.channel, l.port)).or_default().1.push(node);
                    }
                    if let Some((t, s)) = e.wait_tb
                        && let Some(&from) = index.get(&(rank.rank, t, s))
                    {
                        self.edges.push(OpEdge { from, to: node, kind: EdgeKind::ThreadBlock });
                    }
                }
            }
        }
        for ((_, _, channel, port), (signals, waits)) in links {
            for (&from, &to) in signals.iter().zip(&waits) {
                self.edges.push(OpEdge { from, to, kind: EdgeKind::Link { channel, port } });
            }
        }
    }

    /// The k-th barrier of every thread block of a rank, grouped.
    fn barrier_groups(&mut self, plan: &ExecutionPlan, index: &BTreeMap<(u32, u32, u32), usize>) {
        for rank in &plan.ranks {
            let mut groups: Vec<Vec<usize>> = Vec::new();
            for tb in &rank.threadblocks {
                let steps = tb.ops.iter().enumerate().filter(|(_, op)| matches!(op, Op::Barrier));
                for (k, (step, _)) in steps.enumerate() {
                    if groups.len() <= k {
                        groups.push(Vec::new());
                    }
                    groups[k].push(index[&(rank.rank, tb.id, step as u32)]);
                }
            }
            self.barriers.extend(groups);
        }
    }

    /// Longest-path depths by Kahn's algorithm over program order, the edges and the barrier
    /// groups (each group meets at a hidden node after its members' previous operations);
    /// nodes left over lie on a cycle and keep `None`.
    fn assign_depths(&mut self) {
        let n = self.nodes.len();
        let meets = self.barriers.len();
        // Successors with a weight: 1 = "one deeper", 0 = "no shallower" (meet -> barrier).
        let mut next: Vec<Vec<(usize, u32)>> = vec![Vec::new(); n + meets];
        for (_, _, range) in &self.lanes {
            for i in range.start + 1..range.end {
                next[i - 1].push((i, 1));
            }
        }
        for e in &self.edges {
            next[e.from].push((e.to, 1));
        }
        for (g, members) in self.barriers.iter().enumerate() {
            let meet = n + g;
            for &m in members {
                // The operation before it in its thread block, if any, reaches the meeting.
                if self.nodes[m].step > 0 {
                    next[m - 1].push((meet, 1));
                }
                next[meet].push((m, 0));
            }
        }
        let mut incoming = vec![0usize; n + meets];
        for succ in &next {
            for &(s, _) in succ {
                incoming[s] += 1;
            }
        }
        let mut depth = vec![0u32; n + meets];
        let mut ready: VecDeque<usize> = (0..n + meets).filter(|&i| incoming[i] == 0).collect();
        let mut done = vec![false; n + meets];
        while let Some(i) = ready.pop_front() {
            done[i] = true;
            for &(s, w) in &next[i] {
                depth[s] = depth[s].max(depth[i] + w);
                incoming[s] -= 1;
                if incoming[s] == 0 {
                    ready.push_back(s);
                }
            }
        }
        for (i, node) in self.nodes.iter_mut().enumerate() {
            node.depth = done[i].then_some(depth[i]);
        }
    }

    /// Nodes on a cycle: operations that never run.
    pub fn deadlocked(&self) -> impl Iterator<Item = &OpNode> {
        self.nodes.iter().filter(|n| n.depth.is_none())
    }

    /// Graphviz DOT: a cluster per rank, one per thread block inside it, program order in grey,
    /// links coloured by channel (port links dashed), `wait_tb` dotted, barrier groups joined
    /// without arrows; deadlocked operations red.
    pub fn to_dot(&self) -> String {
        let mut out = String::new();
        let id = |i: usize| {
            let n = &self.nodes[i];
            format!("r{}t{}s{}", n.rank, n.tb, n.step)
        };
        // Writing to a String cannot fail; the results are ignored deliberately.
        let _ = writeln!(out, "digraph plan {{");
        let _ = writeln!(out, "  label=\"{}\"; labelloc=t; rankdir=TB; newrank=true;", dot_escape(&self.title));
        let _ = writeln!(out, "  node [shape=box, fontname=\"monospace\", fontsize=10];");
        let mut open_rank = None;
        for (rank, tb, range) in &self.lanes {
            if open_rank != Some(*rank) {
                if open_rank.is_some() {
                    let _ = writeln!(out, "  }}");
                }
                let _ = writeln!(out, "  subgraph cluster_r{rank} {{\n    label=\"rank {rank}\";");
                open_rank = Some(*rank);
            }
            let _ = writeln!(out, "    subgraph cluster_r{rank}_t{tb} {{\n      label=\"tb {tb}\";");
            for i in range.clone() {
                let n = &self.nodes[i];
                let label = dot_escape(&format!("{} {}\n{}", n.step, n.name, n.detail));
                let colour = if n.depth.is_none() { ", color=red, fontcolor=red" } else { "" };
                let _ = writeln!(out, "      {} [label=\"{label}\"{colour}];", id(i));
            }
            for i in range.start + 1..range.end {
                let _ = writeln!(out, "      {} -> {} [color=gray];", id(i - 1), id(i));
            }
            let _ = writeln!(out, "    }}");
        }
        if open_rank.is_some() {
            let _ = writeln!(out, "  }}");
        }
        for e in &self.edges {
            let style = match e.kind {
                EdgeKind::Link { channel, port: false } => {
                    format!("color=\"{}\", label=\"ch{channel}\"", colour(channel))
                }
                EdgeKind::Link { channel, port: true } => {
                    format!("color=\"{}\", style=dashed, label=\"port{channel}\"", colour(channel))
                }
                EdgeKind::ThreadBlock => "color=darkgreen, style=dotted, label=\"wait_tb\"".to_string(),
            };
            let _ = writeln!(out, "  {} -> {} [{style}];", id(e.from), id(e.to));
        }
        for group in &self.barriers {
            for pair in group.windows(2) {
                let _ = writeln!(out, "  {} -> {} [dir=none, style=dashed, color=gray40];", id(pair[0]), id(pair[1]));
            }
        }
        let _ = writeln!(out, "}}");
        out
    }

    /// A self-contained SVG: a column per thread block (grouped by rank), a row per depth.
    pub fn to_svg(&self) -> String {
        const ROW: f64 = 54.0;
        const BOX_H: f64 = 34.0;
        const LANE_GAP: f64 = 14.0;
        const RANK_GAP: f64 = 30.0;
        const TOP: f64 = 56.0;
        const LEFT: f64 = 16.0;
        let chars = self.nodes.iter().map(|n| n.detail.chars().count().max(n.name.len() + 4)).max().unwrap_or(8);
        let box_w = (chars.min(MAX_DETAIL) as f64 * 6.1 + 14.0).max(90.0);
        // x of each lane, with a wider gap where the rank changes.
        let mut lane_x = Vec::with_capacity(self.lanes.len());
        let mut x = LEFT;
        for (k, (rank, _, _)) in self.lanes.iter().enumerate() {
            if k > 0 {
                x += box_w + if self.lanes[k - 1].0 != *rank { RANK_GAP } else { LANE_GAP };
            }
            lane_x.push(x);
        }
        let deepest = self.nodes.iter().filter_map(|n| n.depth).max().map_or(0, |d| d + 1);
        // Node positions: lane x; y by depth, deadlocked nodes below the rest in step order.
        let mut pos = vec![(0.0, 0.0); self.nodes.len()];
        for (k, (_, _, range)) in self.lanes.iter().enumerate() {
            let mut stuck = 0;
            for i in range.clone() {
                let row = self.nodes[i].depth.unwrap_or_else(|| {
                    stuck += 1;
                    deepest + stuck
                });
                pos[i] = (lane_x[k], TOP + f64::from(row) * ROW);
            }
        }
        let rows = pos.iter().map(|p| p.1).fold(TOP, f64::max);
        let width = lane_x.last().map_or(LEFT, |x| x + box_w) + LEFT;
        let height = rows + BOX_H + 44.0;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
             font-family=\"monospace\" font-size=\"10\">"
        );
        let _ = writeln!(
            out,
            "<defs><marker id=\"arrow\" viewBox=\"0 0 8 8\" refX=\"8\" refY=\"4\" markerWidth=\"7\" \
             markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 z\" fill=\"context-stroke\"/></marker></defs>"
        );
        let _ = writeln!(out, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
        let _ = writeln!(out, "<text x=\"{LEFT}\" y=\"18\" font-size=\"13\">{}</text>", xml_escape(&self.title));
        for (k, (rank, tb, _)) in self.lanes.iter().enumerate() {
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"40\" text-anchor=\"middle\" font-weight=\"bold\">rank {rank} · tb {tb}</text>",
                lane_x[k] + box_w / 2.0
            );
        }
        // Program order, then barriers, then edges, then the boxes on top.
        for (_, _, range) in &self.lanes {
            for i in range.start + 1..range.end {
                let ((x, y0), (_, y1)) = (pos[i - 1], pos[i]);
                let cx = x + box_w / 2.0;
                let _ = writeln!(
                    out,
                    "<line x1=\"{cx:.1}\" y1=\"{:.1}\" x2=\"{cx:.1}\" y2=\"{y1:.1}\" stroke=\"#bbb\"/>",
                    y0 + BOX_H
                );
            }
        }
        for group in &self.barriers {
            for pair in group.windows(2) {
                let ((x0, y0), (x1, y1)) = (pos[pair[0]], pos[pair[1]]);
                let _ = writeln!(
                    out,
                    "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{x1:.1}\" y2=\"{:.1}\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>",
                    x0 + box_w,
                    y0 + BOX_H / 2.0,
                    y1 + BOX_H / 2.0
                );
            }
        }
        for e in &self.edges {
            let ((x0, y0), (x1, y1)) = (pos[e.from], pos[e.to]);
            let (stroke, dash) = match e.kind {
                EdgeKind::Link { channel, port } => {
                    (colour(channel), if port { " stroke-dasharray=\"6 3\"" } else { "" })
                }
                EdgeKind::ThreadBlock => ("darkgreen", " stroke-dasharray=\"2 2\""),
            };
            let (sx, sy, ex, ey) = (x0 + box_w / 2.0, y0 + BOX_H, x1 + box_w / 2.0, y1);
            let bend = (ey - sy).abs().max(ROW) / 2.0;
            let _ = writeln!(
                out,
                "<path d=\"M{sx:.1},{sy:.1} C{sx:.1},{:.1} {ex:.1},{:.1} {ex:.1},{ey:.1}\" fill=\"none\" \
                 stroke=\"{stroke}\"{dash} marker-end=\"url(#arrow)\"/>",
                sy + bend,
                ey - bend
            );
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let (x, y) = pos[i];
            let (fill, stroke) = if n.depth.is_none() { ("#fdd", "#c00") } else { ("#f4f6fb", "#456") };
            let _ = writeln!(
                out,
                "<g><title>rank {} tb {} op {}: {} {}</title><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{box_w:.1}\" \
                 height=\"{BOX_H}\" rx=\"4\" fill=\"{fill}\" stroke=\"{stroke}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-weight=\"bold\">{} {}</text>\
                 <text x=\"{:.1}\" y=\"{:.1}\">{}</text></g>",
                n.rank,
                n.tb,
                n.step,
                n.name,
                xml_escape(&n.detail),
                x + 6.0,
                y + 13.0,
                n.step,
                n.name,
                x + 6.0,
                y + 27.0,
                xml_escape(&shorten(&n.detail))
            );
        }
        let legend_y = height - 14.0;
        let _ = writeln!(
            out,
            "<text x=\"{LEFT}\" y=\"{legend_y:.1}\" fill=\"#444\">rows: depth (longest chain of waits before an \
             operation) · coloured: signal → wait per channel (dashed: port) · green dotted: wait_tb · grey dashed: \
             barrier · red: never runs (cycle)</text>"
        );
        let _ = writeln!(out, "</svg>");
        out
    }
}

/// Longest operand text a box shows (the full text is in the node's tooltip).
const MAX_DETAIL: usize = 56;

fn shorten(detail: &str) -> String {
    if detail.chars().count() <= MAX_DETAIL {
        return detail.to_string();
    }
    let mut s: String = detail.chars().take(MAX_DETAIL - 1).collect();
    s.push('…');
    s
}

/// The operation's operands, as the listing prints them after its name.
fn detail(op: &Op) -> String {
    let text = op.to_string();
    text.strip_prefix(op.name()).unwrap_or(&text).trim().to_string()
}

fn title(plan: &ExecutionPlan) -> String {
    format!(
        "plan {}: {}, {} ranks, {} protocol, {} ops",
        plan.name,
        super::listing::collective_label(plan.collective),
        plan.nranks,
        plan.protocol.name(),
        plan.op_count()
    )
}

/// A colour per channel (cycling through eight).
fn colour(channel: u32) -> &'static str {
    const PALETTE: [&str; 8] = ["#1f77b4", "#d62728", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#2ca02c"];
    PALETTE[channel as usize % PALETTE.len()]
}

fn dot_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
