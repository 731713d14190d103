//! A discrete-event simulator of a [`Schedule`].
//!
//! Every GPU has an NVLink port and the node's NICs have a network port, each with a send and
//! a receive side of β bytes per µs ([`Params`]). A transfer within a node occupies its
//! sender's NVLink send side and its receiver's NVLink receive side; across nodes, the NICs'
//! (the GPU's NIC: GPU l of a node uses NIC ⌊l / gpus_per_nic⌋). Transfers sharing a side
//! split its β equally (a transfer moves at the smaller of its two sides' shares, recomputed
//! whenever a transfer starts or ends there), and arrive α after their last byte left.
//!
//! A rank starts a step's transfers once everything sent to it in earlier steps has arrived
//! (the schedule's rule). A transfer posted by a proxy ([`crate::Transfer::via_proxy`]) first
//! waits for its GPU's one proxy thread, which posts messages one after another, each taking
//! [`Params::proxy_us`] of CPU time.
//!
//! Without contention and without proxy cost, each step lasts α + bytes/β of its slowest
//! transfer, which is what the closed forms sum ([`crate::closed_form`]); the tests hold the
//! two equal there. Where the closed forms assume every rank in the same step, the simulator
//! lets ranks run ahead as their inputs arrive: a ring across nodes pays the slow edges' α only
//! where they lie on the path, and recursive doubling's non-folding nodes start before the
//! fold-in step ends (whose message then shares a NIC with theirs).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::params::{alpha_us, us_per_byte};
use crate::{Params, Schedule};

/// The simulated time, in µs, of `schedule` with `bytes_per_element` bytes per element.
pub fn time_us(schedule: &Schedule, params: &Params, bytes_per_element: f64) -> f64 {
    Simulation::new(schedule, params, bytes_per_element).run()
}

/// One transfer as the simulator sees it.
#[derive(Debug)]
struct Flow {
    src: usize,
    dst: usize,
    step: usize,
    bytes: f64,
    /// Send side, receive side.
    links: [usize; 2],
    alpha: f64,
    via_proxy: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The flow's bytes start to move.
    Start(usize),
    /// The flow's last byte leaves, if the flow's rate version still matches.
    Sent(usize, u32),
    /// The flow has arrived.
    Arrived(usize),
}

/// A point in time ordered totally (no NaN arises: times are sums of finite values).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Time(f64);

impl Eq for Time {}

impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Time {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Per rank: what it waits for and what it sends, by step.
#[derive(Debug, Default)]
struct RankQueue {
    /// (step, transfers still to arrive) for every step something arrives at this rank.
    incoming: Vec<(usize, usize)>,
    /// First entry of `incoming` not yet complete.
    frontier: usize,
    /// (step, flows) this rank sends, by step.
    outgoing: Vec<(usize, Vec<usize>)>,
    /// First entry of `outgoing` not yet released.
    released: usize,
}

#[derive(Debug)]
struct Simulation<'p> {
    params: &'p Params,
    flows: Vec<Flow>,
    ranks: Vec<RankQueue>,
    /// Bytes per µs of every link side (infinite: uncapped).
    bandwidth: Vec<f64>,
    /// Flows moving on every link side.
    on_link: Vec<Vec<usize>>,
    remaining: Vec<f64>,
    rate: Vec<f64>,
    since: Vec<f64>,
    version: Vec<u32>,
    /// When each GPU's proxy thread is free again.
    proxy_free: Vec<f64>,
    events: BinaryHeap<Reverse<(Time, u64, Event)>>,
    sequence: u64,
}

impl<'p> Simulation<'p> {
    fn new(schedule: &Schedule, params: &'p Params, bytes_per_element: f64) -> Self {
        let shape = schedule.shape;
        let p = shape.ranks();
        let gpus_per_nic = params.gpus_per_nic.max(1);
        let nics_per_node = shape.gpus_per_node().div_ceil(gpus_per_nic);
        // Link sides: NVLink send/receive of every GPU, then network send/receive of every NIC.
        let nic = |rank: usize| 2 * p + 2 * (shape.node_of(rank) * nics_per_node + shape.local_of(rank) / gpus_per_nic);
        let per_us = |link: &weft_core::LinkModel| {
            let u = us_per_byte(link);
            if u == 0.0 { f64::INFINITY } else { 1.0 / u }
        };
        let mut bandwidth = vec![per_us(&params.nvlink); 2 * p];
        bandwidth.extend(std::iter::repeat_n(per_us(&params.net), 2 * shape.nodes() * nics_per_node));
        let flows: Vec<Flow> = schedule
            .transfers()
            .map(|(step, t)| {
                let across = shape.crosses_network(t.src, t.dst);
                let (links, alpha) = if across {
                    let alpha = if t.port_channel { alpha_us(&params.port_link()) } else { alpha_us(&params.net) };
                    ([nic(t.src), nic(t.dst) + 1], alpha)
                } else {
                    ([2 * t.src, 2 * t.dst + 1], alpha_us(&params.nvlink))
                };
                let bytes = t.range.len() as f64 * bytes_per_element * t.wire_factor;
                Flow { src: t.src, dst: t.dst, step, bytes, links, alpha, via_proxy: t.via_proxy }
            })
            .collect();
        let mut ranks: Vec<RankQueue> = (0..p).map(|_| RankQueue::default()).collect();
        // Flows are in step order, so each rank's lists come out sorted by step.
        for (id, f) in flows.iter().enumerate() {
            let incoming = &mut ranks[f.dst].incoming;
            match incoming.last_mut() {
                Some((step, count)) if *step == f.step => *count += 1,
                _ => incoming.push((f.step, 1)),
            }
            let outgoing = &mut ranks[f.src].outgoing;
            match outgoing.last_mut() {
                Some((step, ids)) if *step == f.step => ids.push(id),
                _ => outgoing.push((f.step, vec![id])),
            }
        }
        let n = flows.len();
        let links = bandwidth.len();
        Self {
            params,
            flows,
            ranks,
            bandwidth,
            on_link: vec![Vec::new(); links],
            remaining: vec![0.0; n],
            rate: vec![0.0; n],
            since: vec![0.0; n],
            version: vec![0; n],
            proxy_free: vec![0.0; p],
            events: BinaryHeap::new(),
            sequence: 0,
        }
    }

    fn push(&mut self, at: f64, event: Event) {
        self.sequence += 1;
        self.events.push(Reverse((Time(at), self.sequence, event)));
    }

    fn run(mut self) -> f64 {
        for rank in 0..self.ranks.len() {
            self.release(rank, 0.0);
        }
        let mut end = 0.0_f64;
        // Events of one instant are handled together and the rates of the links they touched
        // recomputed once: a step that starts k flows on a link costs k, not k².
        while let Some(Reverse((Time(now), _, first))) = self.events.pop() {
            let mut batch = vec![first];
            while let Some(Reverse((Time(t), _, _))) = self.events.peek()
                && *t == now
            {
                if let Some(Reverse((_, _, event))) = self.events.pop() {
                    batch.push(event);
                }
            }
            let mut touched = Vec::new();
            for event in batch {
                match event {
                    Event::Start(id) => {
                        self.start(id, now);
                        touched.extend(self.flows[id].links);
                    }
                    Event::Sent(id, version) if version == self.version[id] => {
                        self.sent(id, now);
                        touched.extend(self.flows[id].links);
                    }
                    Event::Sent(..) => {} // superseded by a later rate change
                    Event::Arrived(id) => {
                        end = end.max(now);
                        self.arrived(id, now);
                    }
                }
            }
            self.reschedule(touched, now);
        }
        end
    }

    /// Starts every step of `rank` whose inputs have all arrived.
    fn release(&mut self, rank: usize, now: f64) {
        loop {
            let queue = &self.ranks[rank];
            let Some((step, ids)) = queue.outgoing.get(queue.released) else { return };
            if queue.incoming.get(queue.frontier).is_some_and(|&(waiting, _)| waiting < *step) {
                return;
            }
            let ids = ids.clone();
            self.ranks[rank].released += 1;
            for id in ids {
                let at = if self.flows[id].via_proxy {
                    let posted = self.proxy_free[rank].max(now) + self.params.proxy_us;
                    self.proxy_free[rank] = posted;
                    posted
                } else {
                    now
                };
                self.push(at, Event::Start(id));
            }
        }
    }

    /// Brings the flows on `link` up to `now` at their current rates.
    fn settle(&mut self, link: usize, now: f64) {
        for &id in &self.on_link[link] {
            // A flow started this instant has no rate yet and has moved nothing.
            if now > self.since[id] {
                self.remaining[id] = (self.remaining[id] - self.rate[id] * (now - self.since[id])).max(0.0);
                self.since[id] = now;
            }
        }
    }

    /// New rates for the flows on `links` (after flows started or ended there), and their ends.
    fn reschedule(&mut self, mut links: Vec<usize>, now: f64) {
        links.sort_unstable();
        links.dedup();
        let mut affected: Vec<usize> = links.iter().flat_map(|&l| self.on_link[l].iter().copied()).collect();
        affected.sort_unstable();
        affected.dedup();
        for id in affected {
            let rate = self.flows[id]
                .links
                .iter()
                .map(|&l| self.bandwidth[l] / self.on_link[l].len() as f64)
                .fold(f64::INFINITY, f64::min);
            if rate == self.rate[id] {
                continue; // its end event stands
            }
            self.rate[id] = rate;
            self.version[id] += 1;
            let left = if rate.is_infinite() { 0.0 } else { self.remaining[id] / rate };
            self.push(now + left, Event::Sent(id, self.version[id]));
        }
    }

    fn start(&mut self, id: usize, now: f64) {
        let links = self.flows[id].links;
        for l in links {
            self.settle(l, now);
        }
        self.remaining[id] = self.flows[id].bytes;
        self.since[id] = now;
        // No rate yet: the next reschedule gives it one and its end event.
        self.rate[id] = f64::NAN;
        for l in links {
            self.on_link[l].push(id);
        }
    }

    fn sent(&mut self, id: usize, now: f64) {
        let links = self.flows[id].links;
        for l in links {
            self.settle(l, now);
            self.on_link[l].retain(|&other| other != id);
        }
        self.version[id] += 1;
        self.push(now + self.flows[id].alpha, Event::Arrived(id));
    }

    fn arrived(&mut self, id: usize, now: f64) {
        let (dst, step) = (self.flows[id].dst, self.flows[id].step);
        let queue = &mut self.ranks[dst];
        if let Ok(entry) = queue.incoming.binary_search_by_key(&step, |&(s, _)| s) {
            queue.incoming[entry].1 -= 1;
        }
        while queue.incoming.get(queue.frontier).is_some_and(|&(_, left)| left == 0) {
            queue.frontier += 1;
        }
        self.release(dst, now);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;
    use crate::params::message_us;
    use crate::{Algorithm, Shape, closed_form};
    use weft_core::LinkModel;

    fn params() -> Params {
        Params::new(LinkModel::new(0.7, Some(400.0)), LinkModel::new(2.0, Some(50.0)))
    }

    fn simulated(algorithm: Algorithm, shape: Shape, bytes: usize, params: &Params) -> f64 {
        time_us(&Schedule::build(algorithm, shape, bytes, params.ll_factor), params, 1.0)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
    }

    /// Sizes every rank count here divides, so every piece is whole.
    const SIZES: [usize; 3] = [0, 2 * 3 * 5 * 7 * 64, 2 * 3 * 5 * 7 * 64 * 512];

    #[test]
    fn without_contention_the_simulator_equals_the_closed_form() {
        let p = params();
        let hierarchical = [Algorithm::Nvrar, Algorithm::TwoPhase, Algorithm::TwoPhaseRing, Algorithm::AllPairs];
        for (nodes, gpus) in [(1, 4), (2, 1), (2, 4), (3, 2), (5, 4), (8, 4), (6, 1)] {
            let shape = Shape::new(nodes, gpus).unwrap();
            for bytes in SIZES {
                for algorithm in hierarchical {
                    let (sim, closed) = (
                        simulated(algorithm, shape, bytes, &p),
                        closed_form::time_us(algorithm, shape, bytes as f64, &p),
                    );
                    let what =
                        format!("{} on {nodes} x {gpus}, {bytes} B: sim {sim} closed {closed}", algorithm.name());
                    if algorithm == Algorithm::Nvrar && !nodes.is_power_of_two() {
                        // The fix-up: nodes that fold nothing in send their first exchange
                        // without waiting for the fold-in step, which hides up to one step's
                        // latency; but that message then shares its receiver's NIC with the
                        // fold-in, so with bytes to move the closed form is no upper bound.
                        let step = message_us(&p.net, p.ll_factor * bytes as f64 / gpus as f64);
                        assert!(sim >= closed - step - 1e-9, "{what}");
                        assert!(bytes > 0 || sim <= closed + 1e-9, "{what}");
                    } else {
                        assert!(close(sim, closed), "{what}");
                    }
                }
            }
        }
        // The ring on one kind of link (one GPU per node, or one node).
        for (nodes, gpus) in [(5, 1), (8, 1), (1, 6)] {
            let shape = Shape::new(nodes, gpus).unwrap();
            for algorithm in [Algorithm::Ring, Algorithm::NcclRing] {
                for bytes in SIZES {
                    let (sim, closed) = (
                        simulated(algorithm, shape, bytes, &p),
                        closed_form::time_us(algorithm, shape, bytes as f64, &p),
                    );
                    assert!(close(sim, closed), "{} on {nodes} x {gpus}: sim {sim} closed {closed}", algorithm.name());
                }
            }
        }
    }

    #[test]
    fn a_ring_across_nodes_pipelines_past_the_bulk_synchronous_closed_form() {
        // Without a barrier per step, only the crossing edges' latency is on every lap.
        let shape = Shape::new(4, 4).unwrap();
        let sim = simulated(Algorithm::NcclRing, shape, 64 * 1024, &params());
        let closed = closed_form::time_us(Algorithm::NcclRing, shape, 64.0 * 1024.0, &params());
        assert!(sim < closed, "sim {sim} closed {closed}");
    }

    #[test]
    fn a_shared_nic_or_a_proxy_cost_makes_it_slower() {
        let shape = Shape::new(8, 4).unwrap();
        let bytes = SIZES[2];
        for algorithm in [Algorithm::Nvrar, Algorithm::TwoPhase, Algorithm::TwoPhaseRing, Algorithm::AllPairs] {
            let free = simulated(algorithm, shape, bytes, &params());
            let shared = simulated(algorithm, shape, bytes, &Params { gpus_per_nic: 4, ..params() });
            let proxied = simulated(algorithm, shape, bytes, &Params { proxy_us: 1.5, ..params() });
            assert!(shared > free * 1.5, "{}: shared NIC {shared} vs {free}", algorithm.name());
            assert!(proxied > free, "{}: proxy {proxied} vs {free}", algorithm.name());
        }
        // All-pairs posts a message to each of the p − 1 = 31 other ranks through one proxy
        // thread (PortChannels within the node too): at least that many proxy costs.
        let posted = simulated(Algorithm::AllPairs, shape, 0, &Params { proxy_us: 1.0, ..params() });
        assert!(posted >= 31.0 * 1.0, "{posted}");
    }

    #[test]
    fn simulated_times_grow_with_the_size() {
        let p = Params { proxy_us: 0.5, gpus_per_nic: 2, ..params() };
        for algorithm in
            [Algorithm::Nvrar, Algorithm::TwoPhase, Algorithm::TwoPhaseRing, Algorithm::Ring, Algorithm::AllPairs]
        {
            let shape = Shape::new(6, 4).unwrap();
            let times: Vec<f64> = (8..22).map(|e| simulated(algorithm, shape, 1 << e, &p)).collect();
            assert!(times.windows(2).all(|w| w[1] >= w[0] - 1e-9), "{}: {times:?}", algorithm.name());
        }
    }
}
