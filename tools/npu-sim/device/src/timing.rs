//! Event-driven timing model. Engines (DMA engines, tensor units, vector
//! engines, switch ports) run their commands in issue order; a command has a
//! fixed-latency phase and then optionally a fluid phase moving bytes through
//! a shared pool (HBM sustained bandwidth, switch network) with max-min fair
//! sharing. The host issues commands and blocks on waits.
//!
//! A command may name earlier commands it depends on (`deps`): its fixed
//! phase (DMA startup, pass issue, vector-op setup, switch startup) runs as
//! soon as its engine is free and the host has issued it, overlapping the
//! wait; only its data phase waits until every dependency has completed.
//!
//! Prefetch (per engine, `set_prefetch`): a DMA engine fetches and decodes
//! its next queued descriptor while the current command transfers, so the
//! next command's fixed phase (startup) may overlap the data phase of the
//! same engine's previous command, provided it was issued by then. Fixed
//! phases of one engine still run one at a time, data phases one at a time,
//! both in issue order; at most 1 + depth commands of an engine are in
//! flight. Engines without prefetch (depth 0) start a command only when the
//! previous one has completed.

use std::collections::VecDeque;

pub const NO_POOL: usize = usize::MAX;

#[derive(Clone, Debug)]
struct TCmd {
    #[allow(dead_code)]
    eng: usize,
    issue: f64,
    fixed: f64,
    pool: usize,
    bytes: f64,
    max_rate: f64,
    deps: Vec<usize>,
    start: f64,
    ready: f64,
    data: f64,
    done: f64,
}

#[derive(Clone, Debug, Default)]
struct Eng {
    /// issued commands whose fixed phase has not started yet
    queue: VecDeque<usize>,
    /// commands whose fixed phase has started and which have not completed,
    /// in issue order; the front one is the only one that may be in its data
    /// phase (or waiting for its dependencies)
    inflight: VecDeque<usize>,
    /// the front command of `inflight` is in its data phase
    fluid: bool,
    remaining: f64,
    /// prefetch depth: how many commands may start their fixed phase while
    /// an earlier command of this engine is still in flight (0: none)
    depth: usize,
    pub busy: f64,
}

#[derive(Clone, Debug)]
pub struct Timing {
    cmds: Vec<TCmd>,
    engs: Vec<Eng>,
    pools: Vec<f64>,
    pub now: f64,
    pub host: f64,
    host_issue: f64,
    active: usize,
}

impl Timing {
    pub fn new(n_engines: usize, pools: Vec<f64>, host_issue: f64) -> Timing {
        Timing { cmds: vec![], engs: vec![Eng::default(); n_engines], pools, now: 0.0, host: 0.0, host_issue, active: 0 }
    }

    /// Prefetch depth of engine `eng` (default 0): up to `depth` later
    /// commands of the engine may run their fixed phases (one at a time, in
    /// issue order) while an earlier command is still in flight, e.g. a DMA
    /// engine fetching and decoding the next queued descriptor while the
    /// current one transfers. A command only prefetches once it has been
    /// issued, so a command issued after a host wait on its predecessor pays
    /// its fixed phase serially.
    pub fn set_prefetch(&mut self, eng: usize, depth: usize) {
        self.engs[eng].depth = depth;
    }

    /// Issue a command at the current host time; returns its id.
    pub fn issue(&mut self, eng: usize, fixed: f64, pool: usize, bytes: f64, max_rate: f64) -> usize {
        self.issue_after(eng, fixed, pool, bytes, max_rate, vec![])
    }

    /// Issue a command whose data phase waits for the commands `deps`
    /// (ids of earlier commands); its fixed phase does not.
    pub fn issue_after(&mut self, eng: usize, fixed: f64, pool: usize, bytes: f64, max_rate: f64, deps: Vec<usize>) -> usize {
        let id = self.cmds.len();
        let deps: Vec<usize> = deps.into_iter().filter(|&d| d < id).collect();
        self.cmds.push(TCmd { eng, issue: self.host, fixed, pool, bytes, max_rate, deps, start: f64::NAN, ready: f64::NAN, data: f64::NAN, done: f64::NAN });
        self.engs[eng].queue.push_back(id);
        self.host += self.host_issue;
        self.active += 1;
        id
    }

    pub fn done_at(&self, id: usize) -> f64 {
        self.cmds[id].done
    }

    pub fn wait(&mut self, id: usize) {
        self.run(Some(id));
        let d = self.cmds[id].done;
        if d > self.host {
            self.host = d;
        }
    }

    pub fn finish(&mut self) -> f64 {
        self.run(None);
        self.now.max(self.host).max(self.cmds.iter().map(|c| c.done).fold(0.0, f64::max))
    }

    /// (engine, issue, start, done) of every command (diagnostics, bench).
    pub fn timeline(&self) -> Vec<(usize, f64, f64, f64)> {
        self.cmds.iter().map(|c| (c.eng, c.issue, c.start, c.done)).collect()
    }

    /// (fixed phase end, data phase start) of a command: they differ when the
    /// command waited for its dependencies.
    pub fn phases(&self, id: usize) -> (f64, f64) {
        (self.cmds[id].ready, self.cmds[id].data)
    }

    /// Bytes moved by a command's data phase (0 for commands without one).
    pub fn bytes(&self, id: usize) -> f64 {
        self.cmds[id].bytes
    }

    fn deps_done(&self, c: usize) -> bool {
        self.cmds[c].deps.iter().all(|&d| !self.cmds[d].done.is_nan())
    }

    pub fn busy(&self, eng: usize) -> f64 {
        self.engs[eng].busy
    }

    fn complete(&mut self, e: usize) {
        let c = self.engs[e].inflight.pop_front().unwrap();
        self.cmds[c].done = self.now;
        self.engs[e].busy += self.cmds[c].fixed + (self.now - self.cmds[c].data);
        self.engs[e].fluid = false;
        self.active -= 1;
    }

    /// The engine's queue front may start its fixed phase now: issued, the
    /// previous command's fixed phase has ended, and fewer than 1 + depth
    /// commands are in flight.
    fn can_start(&self, e: usize) -> bool {
        let g = &self.engs[e];
        let c = match g.queue.front() {
            Some(&c) => c,
            None => return false,
        };
        if self.cmds[c].issue > self.now + 1e-9 || g.inflight.len() > g.depth {
            return false;
        }
        match g.inflight.back() {
            Some(&p) => self.cmds[p].ready <= self.now + 1e-9,
            None => true,
        }
    }

    fn run(&mut self, target: Option<usize>) {
        let mut rates: Vec<f64> = vec![0.0; self.engs.len()];
        loop {
            // settle state at `now`
            let mut progress = true;
            while progress {
                progress = false;
                for e in 0..self.engs.len() {
                    while self.can_start(e) {
                        let c = self.engs[e].queue.pop_front().unwrap();
                        self.engs[e].inflight.push_back(c);
                        self.cmds[c].start = self.now;
                        self.cmds[c].ready = self.now + self.cmds[c].fixed;
                        progress = true;
                    }
                    if let Some(&c) = self.engs[e].inflight.front() {
                        if !self.engs[e].fluid && self.cmds[c].ready <= self.now + 1e-9 {
                            if !self.deps_done(c) {
                                continue;
                            }
                            self.cmds[c].data = self.now;
                            if self.cmds[c].bytes > 0.0 {
                                self.engs[e].fluid = true;
                                self.engs[e].remaining = self.cmds[c].bytes;
                            } else {
                                self.complete(e);
                                progress = true;
                                continue;
                            }
                        }
                        if self.engs[e].fluid && self.engs[e].remaining <= 1e-6 {
                            self.complete(e);
                            progress = true;
                        }
                    }
                }
            }
            if let Some(t) = target {
                if !self.cmds[t].done.is_nan() {
                    return;
                }
            }
            if self.active == 0 {
                return;
            }
            // rates: max-min fair sharing per pool
            for p in 0..self.pools.len() {
                let mut flows: Vec<(f64, usize)> = vec![];
                for e in 0..self.engs.len() {
                    if self.engs[e].fluid {
                        let c = self.engs[e].inflight[0];
                        if self.cmds[c].pool == p {
                            flows.push((self.cmds[c].max_rate, e));
                        }
                    }
                }
                if flows.is_empty() {
                    continue;
                }
                flows.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
                let mut cap = self.pools[p];
                let mut n = flows.len();
                for (mr, e) in flows {
                    let r = mr.min(cap / n as f64);
                    rates[e] = r;
                    cap -= r;
                    n -= 1;
                }
            }
            let mut next = f64::INFINITY;
            for e in 0..self.engs.len() {
                let g = &self.engs[e];
                if g.fluid {
                    let c = g.inflight[0];
                    if self.cmds[c].pool == NO_POOL || self.cmds[c].pool >= self.pools.len() {
                        rates[e] = self.cmds[c].max_rate;
                    }
                    next = next.min(self.now + g.remaining / rates[e].max(1e-12));
                }
                // fixed phases ending (a command waiting for its dependencies
                // moves on at their completion, itself an event)
                for &c in g.inflight.iter() {
                    if self.cmds[c].ready > self.now + 1e-9 {
                        next = next.min(self.cmds[c].ready);
                    }
                }
                if let Some(&c) = g.queue.front() {
                    if self.cmds[c].issue > self.now + 1e-9 {
                        next = next.min(self.cmds[c].issue);
                    }
                }
            }
            if !next.is_finite() {
                // nothing can progress (should not happen)
                return;
            }
            let dt = (next - self.now).max(0.0);
            for e in 0..self.engs.len() {
                if self.engs[e].fluid {
                    self.engs[e].remaining -= rates[e] * dt;
                    let c = self.engs[e].inflight[0];
                    if self.engs[e].remaining <= 1e-9 * self.cmds[c].bytes.max(1.0) {
                        self.engs[e].remaining = 0.0;
                    }
                }
            }
            self.now = next;
        }
    }
}
