//! The DSL context: memory spaces, DMA, tensor-unit passes, vector engine,
//! switch network, tokens; legality checks; functional execution; timing.
use crate::hot;
use crate::num::*;
use crate::profile::Profile;
use crate::refk::{self, Shape, TensorSpec};
use crate::timing::{Timing, NO_POOL};

pub use npu::types::{engine, lp, Dm, Dt, Engine, Hbm, HwInfo, Loc, Loop, Pass, Tile, Trf, Vrf};

/// Completion token of a command on the device.
#[derive(Debug, Clone, Copy)]
pub struct Token {
    pub id: usize,
}

#[derive(Clone, Debug)]
pub struct Span {
    pub file: String,
    pub line: u32,
    pub col: u32,
}
impl Span {
    pub fn new(file: &str, line: u32, col: u32) -> Span {
        Span { file: file.to_string(), line, col }
    }
}

#[derive(Clone, Debug)]
pub struct Diag {
    pub code: &'static str,
    pub level: &'static str,
    pub msg: String,
    pub span: Option<Span>,
    pub quantities: Vec<(String, f64, Option<f64>)>,
    pub notes: Vec<String>,
}
impl Diag {
    pub fn new(code: &'static str, msg: impl Into<String>, span: Option<Span>) -> Diag {
        Diag { code, level: "error", msg: msg.into(), span, quantities: vec![], notes: vec![] }
    }
    pub fn q(mut self, name: &str, v: f64, limit: Option<f64>) -> Diag {
        self.quantities.push((name.to_string(), v, limit));
        self
    }
    pub fn note(mut self, n: impl Into<String>) -> Diag {
        self.notes.push(n.into());
        self
    }
}

/// Panic payload used to stop a kernel at its first error in exec mode.
pub struct Abort;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Trace,
    Exec,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Space {
    Hbm,
    Dm(usize),
    Vrf(usize),
    Trf(usize),
}
#[derive(Clone, Copy, Debug)]
struct Reg {
    sp: Space,
    lo: u64,
    hi: u64,
    w: bool,
}
struct Outstanding {
    id: usize,
    eng: usize,
    regs: Vec<Reg>,
    span: Span,
}

#[derive(Clone, Debug, Default)]
pub struct Counts {
    pub dma_commands: u64,
    pub passes: u64,
    pub vector_ops: u64,
    pub switch_copies: u64,
    pub hbm_read_bytes: u64,
    pub hbm_write_bytes: u64,
    pub macs: u64,
    pub unaligned_writes: u64,
    pub bank_conflicts: u64,
    pub max_bank_run: u64,
}

pub struct TensorSlot {
    pub spec: TensorSpec,
    pub addr: u64,
}

/// The kernel's handle on the device.
pub struct Ctx {
    pub(crate) mode: Mode,
    pub(crate) p: Profile,
    kernel: String,
    shape: Shape,
    pos: u32,
    pub(crate) tensors: Vec<TensorSlot>,
    hbm_top: u64,
    pub(crate) hbm: Vec<u8>,
    dm: Vec<Vec<u8>>,
    vrf: Vec<Vec<f32>>,
    trf: Vec<Vec<f32>>,
    dm_top: Vec<u64>,
    vrf_top: Vec<u64>,
    trf_top: Vec<u64>,
    pub diags: Vec<Diag>,
    pub dev: Timing,
    pub est: Timing,
    out: Vec<Outstanding>,
    next_id: usize,
    pub counts: Counts,
    pub hang: Option<Span>,
    n_dma: usize,
    nslices: usize,
    /// dependencies for the next issued command (`Ctx::after`)
    pending: Vec<usize>,
    /// per command: the commands it is ordered after (its engine's previous
    /// command and its explicit dependencies)
    preds: Vec<Vec<usize>>,
    last_on_eng: Vec<Option<usize>>,
    used_deps: bool,
    stamp: Vec<u32>,
    stamp_n: u32,
}

const MAX_DIAGS: usize = 30;

/// The token position of a launch (project_qkv): a launch argument drawn from the seed.
pub fn launch_pos(kernel: &str, shape: &Shape, seed: u64) -> u32 {
    if kernel == "project_qkv" {
        let inp = refk::gen_inputs_one(kernel, shape, seed, "pos");
        i32::from_le_bytes(inp[0..4].try_into().unwrap()) as u32
    } else {
        0
    }
}

/// The public hardware facts of a profile (what a kernel's host code is told).
pub fn hw_of(p: &Profile) -> HwInfo {
    HwInfo {
        clusters: p.clusters as usize,
        slices_per_cluster: p.slices_per_cluster as usize,
        slices: p.slices(),
        lanes: p.lanes_per_slice as u32,
        dm_bytes: p.dm_bytes_per_slice as u32,
        dm_banks: p.dm_banks as u32,
        trf_bytes_per_lane: p.trf_bytes_per_lane as u32,
        vrf_bytes: p.vrf_bytes_per_slice as u32,
        dma_engines_per_cluster: p.engines_per_cluster(),
        max_packet_bytes: p.max_packet() as u32,
        max_seq_entries: 8,
        max_seq_iterations: 65536,
        hbm_align: p.hbm_align_bytes as u32,
    }
}

const HBM_ALIGN_TENSOR: u64 = 4096;

impl Ctx {
    pub fn new(mode: Mode, p: Profile, kernel: &str, shape: Shape, seed: u64) -> Ctx {
        let specs = refk::specs(kernel, &shape);
        let mut addr = 0u64;
        let mut tensors = vec![];
        for s in specs {
            let b = s.bytes();
            tensors.push(TensorSlot { spec: s, addr });
            addr += (b + HBM_ALIGN_TENSOR - 1) / HBM_ALIGN_TENSOR * HBM_ALIGN_TENSOR;
        }
        let nslices = p.slices();
        let n_dma = p.clusters as usize * p.engines_per_cluster();
        let neng = n_dma + 3 * nslices;
        let mut dev = Timing::new(neng, vec![p.hbm_sustained_bytes_per_cycle, p.switch_bytes_per_cycle], p.host_issue_cycles);
        let mut est = Timing::new(neng, vec![], p.host_issue_cycles);
        // DMA engines prefetch queued descriptors (startup overlaps the
        // previous command's transfer); tensor units, vector engines and
        // switch ports do not (their fixed cost occupies the unit itself)
        for e in 0..n_dma {
            dev.set_prefetch(e, p.dma_prefetch_depth as usize);
            est.set_prefetch(e, p.dma_prefetch_depth as usize);
        }
        let exec = mode == Mode::Exec;
        // position: a launch argument, from the seed (same stream as the pos tensor)
        let pos = launch_pos(kernel, &shape, seed);
        Ctx {
            mode,
            kernel: kernel.to_string(),
            shape,
            pos,
            hbm_top: addr,
            hbm: if exec { vec![0u8; addr as usize] } else { vec![] },
            dm: if exec { vec![vec![0u8; p.dm_bytes_per_slice as usize]; nslices] } else { vec![] },
            vrf: if exec { vec![vec![0f32; (p.vrf_bytes_per_slice / 4.0) as usize]; nslices] } else { vec![] },
            trf: if exec { vec![vec![0f32; (p.trf_bytes_per_lane / 2.0) as usize]; nslices] } else { vec![] },
            dm_top: vec![0; nslices],
            vrf_top: vec![0; nslices],
            trf_top: vec![0; nslices],
            tensors,
            diags: vec![],
            dev,
            est,
            out: vec![],
            next_id: 0,
            counts: Counts::default(),
            hang: None,
            n_dma,
            nslices,
            pending: vec![],
            preds: vec![],
            last_on_eng: vec![None; neng],
            used_deps: false,
            stamp: vec![],
            stamp_n: 0,
            p,
        }
    }

    // ------------------------------------------------------------ info
    /// Problem sizes.
    pub fn shape(&self) -> Shape {
        self.shape
    }
    /// Token position (project_qkv): RoPE angle and ring-cache slot `pos % cache_len`.
    pub fn pos(&self) -> u32 {
        self.pos
    }
    pub fn kernel_name(&self) -> &str {
        &self.kernel
    }
    /// Public hardware facts.
    pub fn hw(&self) -> HwInfo {
        hw_of(&self.p)
    }
    /// The cluster a slice belongs to.
    pub fn cluster_of(&self, slice: usize) -> usize {
        slice / (self.p.slices_per_cluster as usize).max(1)
    }

    /// An HBM tensor of this kernel by name.
    pub fn tensor(&mut self, l: &Span, name: &str) -> Hbm {
        for t in &self.tensors {
            if t.spec.name == name {
                return Hbm { addr: t.addr, bytes: t.spec.bytes() };
            }
        }
        let names: Vec<&str> = self.tensors.iter().map(|t| t.spec.name).collect();
        self.diags.push(Diag::new("E0404", format!("kernel `{}` has no tensor named `{}`", self.kernel, name), Some(l.clone())).note(format!("tensors: {}", names.join(", "))));
        std::panic::panic_any(Abort);
    }

    // ------------------------------------------------------------ allocation
    /// Scratch HBM (256-byte aligned).
    pub fn hbm_alloc(&mut self, bytes: u64) -> Hbm {
        let a = (self.hbm_top + 4095) / 4096 * 4096;
        self.hbm_top = a + bytes;
        if self.mode == Mode::Exec {
            self.hbm.resize(self.hbm_top as usize, 0);
        }
        Hbm { addr: a, bytes }
    }

    /// Allocate `bytes` of DM on `slice` (256-byte aligned).
    pub fn dm_alloc(&mut self, l: &Span, slice: usize, bytes: u32) -> Dm {
        if !self.check_slice(slice, l) {
            return Dm { slice: 0, addr: 0, bytes };
        }
        let a = (self.dm_top[slice] + 255) / 256 * 256;
        let top = a + bytes as u64;
        if top > self.p.dm_bytes_per_slice as u64 {
            let _ = self.fail(Diag::new("E0201", format!("DM allocation exceeds slice capacity on slice {}", slice), Some(l.clone()))
                .q("dm_bytes", top as f64, Some(self.p.dm_bytes_per_slice))
                .note("help: use smaller tiles, or spread buffers over more slices"));
        }
        self.dm_top[slice] = top;
        Dm { slice, addr: a as u32, bytes }
    }

    /// Allocate `len` f32 elements of VRF on `slice`.
    pub fn vrf_alloc(&mut self, l: &Span, slice: usize, len: u32) -> Vrf {
        if !self.check_slice(slice, l) {
            return Vrf { slice: 0, off: 0, len };
        }
        let off = self.vrf_top[slice];
        let top = off + len as u64;
        if top * 4 > self.p.vrf_bytes_per_slice as u64 {
            let _ = self.fail(Diag::new("E0203", format!("VRF allocation exceeds capacity on slice {}", slice), Some(l.clone()))
                .q("vrf_bytes", (top * 4) as f64, Some(self.p.vrf_bytes_per_slice)));
        }
        self.vrf_top[slice] = top;
        Vrf { slice, off: off as u32, len }
    }

    /// Allocate `len` bf16 elements of TRF on `slice` (replicated per lane).
    pub fn trf_alloc(&mut self, l: &Span, slice: usize, len: u32) -> Trf {
        if !self.check_slice(slice, l) {
            return Trf { slice: 0, off: 0, len };
        }
        let off = self.trf_top[slice];
        let top = off + len as u64;
        if top * 2 > self.p.trf_bytes_per_lane as u64 {
            let _ = self.fail(Diag::new("E0202", format!("TRF allocation exceeds per-lane capacity on slice {}", slice), Some(l.clone()))
                .q("trf_bytes_per_lane", (top * 2) as f64, Some(self.p.trf_bytes_per_lane)));
        }
        self.trf_top[slice] = top;
        Trf { slice, off: off as u32, len }
    }

    // ------------------------------------------------------------ helpers
    fn check_slice(&mut self, slice: usize, l: &Span) -> bool {
        if slice >= self.nslices {
            let _ = self.fail(Diag::new("E0204", format!("slice {} does not exist", slice), Some(l.clone())).q("slice", slice as f64, Some(self.nslices as f64 - 1.0)));
            return false;
        }
        true
    }

    fn fail(&mut self, d: Diag) -> Token {
        self.fail_all(vec![d])
    }
    fn fail_all(&mut self, ds: Vec<Diag>) -> Token {
        for d in ds {
            let dup = self.diags.iter().any(|e| e.code == d.code && e.span.as_ref().map(|s| (s.line, s.col)) == d.span.as_ref().map(|s| (s.line, s.col)));
            if !dup && self.diags.len() < MAX_DIAGS {
                self.diags.push(d);
            }
        }
        self.pending.clear();
        if self.mode == Mode::Exec {
            std::panic::panic_any(Abort);
        }
        Token { id: usize::MAX }
    }

    /// Is command `a` known to complete before command(s) `from` start their
    /// data phase (through engine order and explicit dependencies)?
    fn ordered_before(&mut self, a: usize, from: &[usize]) -> bool {
        self.stamp_n = self.stamp_n.wrapping_add(1);
        if self.stamp_n == 0 {
            self.stamp.iter_mut().for_each(|x| *x = 0);
            self.stamp_n = 1;
        }
        if self.stamp.len() < self.preds.len() {
            self.stamp.resize(self.preds.len(), 0);
        }
        let mut st: Vec<usize> = from.iter().cloned().filter(|&x| x >= a && x < self.preds.len()).collect();
        while let Some(x) = st.pop() {
            if x == a {
                return true;
            }
            if self.stamp[x] == self.stamp_n {
                continue;
            }
            self.stamp[x] = self.stamp_n;
            for &y in &self.preds[x] {
                if y >= a && self.stamp[y] != self.stamp_n {
                    st.push(y);
                }
            }
        }
        false
    }

    /// Stamp every command reachable from `from` through `preds` (ids >= lo).
    fn mark_from(&mut self, lo: usize, from: usize) {
        self.stamp_n = self.stamp_n.wrapping_add(1);
        if self.stamp_n == 0 {
            self.stamp.iter_mut().for_each(|x| *x = 0);
            self.stamp_n = 1;
        }
        if self.stamp.len() < self.preds.len() {
            self.stamp.resize(self.preds.len(), 0);
        }
        let mut st = vec![from];
        while let Some(x) = st.pop() {
            if x >= self.preds.len() || self.stamp[x] == self.stamp_n {
                continue;
            }
            self.stamp[x] = self.stamp_n;
            for &y in &self.preds[x] {
                if y >= lo && self.stamp[y] != self.stamp_n {
                    st.push(y);
                }
            }
        }
    }

    /// The next command issued (on any engine) waits on the device for the
    /// commands behind `deps` before its data phase; its fixed phase (DMA
    /// startup, pass issue, ...) runs as soon as its engine is free,
    /// overlapping the wait. Memory of those commands (and of everything
    /// ordered before them) may then be touched without a host `wait`.
    /// Returns the context: `k.after(&[&t]).copy(...)`.
    pub fn after(&mut self, deps: &[&Token]) -> &mut Ctx {
        for t in deps {
            if t.id != usize::MAX && !self.pending.contains(&t.id) {
                self.pending.push(t.id);
            }
        }
        self
    }

    fn space_limit(&self, sp: Space) -> u64 {
        match sp {
            Space::Hbm => self.hbm_top,
            Space::Dm(s) => self.dm_top[s],
            Space::Vrf(s) => self.vrf_top[s],
            Space::Trf(s) => self.trf_top[s],
        }
    }
    fn space_name(sp: Space) -> String {
        match sp {
            Space::Hbm => "HBM".into(),
            Space::Dm(s) => format!("DM of slice {}", s),
            Space::Vrf(s) => format!("VRF of slice {}", s),
            Space::Trf(s) => format!("TRF of slice {}", s),
        }
    }
    fn bounds(&self, r: &Reg, what: &str, l: &Span, errs: &mut Vec<Diag>) {
        let lim = self.space_limit(r.sp);
        if r.hi > lim {
            let unit = match r.sp {
                Space::Vrf(_) | Space::Trf(_) => "elements",
                _ => "bytes",
            };
            errs.push(
                Diag::new("E0105", format!("{} accesses {} beyond its allocation", what, Self::space_name(r.sp)), Some(l.clone()))
                    .q(&format!("end_{}", unit), r.hi as f64, Some(lim as f64)),
            );
        }
    }
    fn vreg(&self, v: &Vrf, w: bool) -> Reg {
        Reg { sp: Space::Vrf(v.slice), lo: v.off as u64, hi: v.off as u64 + v.len as u64, w }
    }

    fn hazards(&mut self, eng: usize, regs: &[Reg], l: &Span, errs: &mut Vec<Diag>) {
        let mut from: Option<Vec<usize>> = None;
        for i in 0..self.out.len() {
            if self.out[i].eng == eng {
                continue;
            }
            let mut hit: Option<bool> = None;
            'outer: for a in regs {
                for b in &self.out[i].regs {
                    if a.sp == b.sp && (a.w || b.w) && a.lo < b.hi && b.lo < a.hi {
                        hit = Some(a.w);
                        break 'outer;
                    }
                }
            }
            if let Some(w) = hit {
                if !self.pending.is_empty() {
                    let f = from.get_or_insert_with(|| {
                        let mut f = self.pending.clone();
                        if let Some(x) = self.last_on_eng[eng] {
                            f.push(x);
                        }
                        f
                    }).clone();
                    if self.ordered_before(self.out[i].id, &f) {
                        continue;
                    }
                }
                let o = &self.out[i];
                errs.push(
                    Diag::new("E0108", format!("{} hazard with a command that has not been waited on", if w { "write" } else { "read" }), Some(l.clone()))
                        .note(format!("the other command was issued at {}:{}:{}; wait on its token first (or order this command after it with `after`)", o.span.file, o.span.line, o.span.col)),
                );
                return;
            }
        }
    }

    /// `dev`: (fixed cycles, pool, data amount, max rate); `est`: (fixed,
    /// data amount, rate) for the static estimate (no pools).
    fn issue(&mut self, eng: usize, regs: Vec<Reg>, l: &Span, dev: (f64, usize, f64, f64), est: (f64, f64, f64)) -> Token {
        let id = self.next_id;
        self.next_id += 1;
        let deps = std::mem::take(&mut self.pending);
        if !deps.is_empty() {
            self.used_deps = true;
        }
        let mut pr = deps.clone();
        if let Some(x) = self.last_on_eng[eng] {
            pr.push(x);
        }
        self.preds.push(pr);
        self.last_on_eng[eng] = Some(id);
        let a = self.dev.issue_after(eng, dev.0, dev.1, dev.2, dev.3, deps.clone());
        let b = self.est.issue_after(eng, est.0, NO_POOL, est.1, est.2, deps);
        debug_assert!(a == id && b == id);
        self.out.push(Outstanding { id, eng, regs, span: l.clone() });
        Token { id }
    }

    /// Block until the command behind `t` has completed. Also retires every
    /// earlier command of the same engine (engines run in issue order).
    pub fn wait(&mut self, t: Token) {
        if t.id == usize::MAX {
            return;
        }
        let eng = self.out.iter().find(|o| o.id == t.id).map(|o| o.eng);
        if let Some(e) = eng {
            self.out.retain(|o| !(o.eng == e && o.id <= t.id));
            if self.used_deps {
                // everything the command was ordered after has completed too
                if let Some(lo) = self.out.iter().map(|o| o.id).min() {
                    if lo < t.id {
                        // mark everything reachable from t (ids >= lo)
                        self.mark_from(lo, t.id);
                        let (st, n) = (std::mem::take(&mut self.stamp), self.stamp_n);
                        self.out.retain(|o| !(o.id < t.id && st.get(o.id) == Some(&n)));
                        self.stamp = st;
                    }
                }
            }
        }
        self.dev.wait(t.id);
        self.est.wait(t.id);
    }
    /// Wait on several tokens.
    pub fn wait_all(&mut self, ts: Vec<Token>) {
        for t in ts {
            self.wait(t);
        }
    }

    /// Called by the runtime at kernel end.
    pub(crate) fn finish(&mut self) {
        if let Some(o) = self.out.first() {
            let n = self.out.len();
            let sp = o.span.clone();
            self.diags.push(Diag::new("E0109", format!("{} command(s) were never waited on before the kernel returned", n), Some(sp)).note("help: wait on the last token of every engine before returning"));
        }
        self.dev.finish();
        self.est.finish();
    }

    // ------------------------------------------------------------ DMA
    /// Convenience: move `bytes` contiguous bytes in packets of `packet`.
    pub fn copy(&mut self, l: &Span, eng: Engine, src: Loc, dst: Loc, bytes: u32, packet: u32) -> Token {
        if packet == 0 || bytes % packet != 0 || bytes == 0 {
            return self.fail(Diag::new("E0112", "copy: bytes must be a non-zero multiple of the packet size", Some(l.clone())).q("bytes", bytes as f64, None).q("packet_bytes", packet as f64, None));
        }
        self.dma_at(eng, src, dst, packet, &[lp(bytes / packet, packet as i64, packet as i64)], l)
    }

    /// A DMA command on engine `eng`: a sequencer program of nested loops
    /// (entry 0 outermost); each innermost iteration moves one packet of
    /// `packet` contiguous bytes from src+Σ i·src_stride to dst+Σ i·dst_stride.
    pub fn dma(&mut self, l: &Span, eng: Engine, src: Loc, dst: Loc, packet: u32, seq: &[Loop]) -> Token {
        self.dma_at(eng, src, dst, packet, seq, l)
    }

    fn dma_at(&mut self, eng: Engine, src: Loc, dst: Loc, packet: u32, seq: &[Loop], l: &Span) -> Token {
        let mut errs = vec![];
        let sp = Some(l.clone());
        let epc = self.p.engines_per_cluster();
        if eng.cluster >= self.p.clusters as usize || eng.index >= epc {
            return self.fail(Diag::new("E0106", format!("no DMA engine ({}, {})", eng.cluster, eng.index), sp).q("engine_index", eng.index as f64, Some(epc as f64 - 1.0)).q("cluster", eng.cluster as f64, Some(self.p.clusters - 1.0)));
        }
        let maxp = self.p.max_packet();
        if packet == 0 || packet as u64 > maxp {
            errs.push(Diag::new("E0101", "DMA packet size out of range", sp.clone()).q("packet_bytes", packet as f64, Some(maxp as f64)));
        }
        if seq.is_empty() || seq.len() > 8 {
            errs.push(Diag::new("E0102", "sequencer program must have 1 to 8 entries", sp.clone()).q("seq_entries", seq.len() as f64, Some(8.0)));
        }
        let mut total: u64 = 1;
        for e in seq {
            if e.count == 0 || e.count > 65536 {
                errs.push(Diag::new("E0103", "sequencer entry iteration count out of range (1..=65536)", sp.clone()).q("iterations", e.count as f64, Some(65536.0)));
            }
            total = total.saturating_mul(e.count.max(1) as u64);
        }
        if total > (1 << 24) {
            errs.push(Diag::new("E0103", "sequencer program too long", sp.clone()).q("packets", total as f64, Some((1u64 << 24) as f64)));
        }
        let (sspace, sbase) = match src {
            Loc::Hbm(a) => (Space::Hbm, a),
            Loc::Dm(s, a) => (Space::Dm(s), a as u64),
        };
        let (dspace, dbase) = match dst {
            Loc::Hbm(a) => (Space::Hbm, a),
            Loc::Dm(s, a) => (Space::Dm(s), a as u64),
        };
        if (sspace == Space::Hbm) == (dspace == Space::Hbm) {
            errs.push(Diag::new("E0111", "a DMA command moves data between HBM and DM (use switch_copy between slices)", sp.clone()));
        }
        for s in [sspace, dspace] {
            if let Space::Dm(sl) = s {
                if sl >= self.nslices {
                    errs.push(Diag::new("E0204", format!("slice {} does not exist", sl), sp.clone()));
                } else if self.cluster_of(sl) != eng.cluster {
                    errs.push(Diag::new("E0107", format!("DMA engine ({}, {}) cannot reach the DM of slice {} (cluster {})", eng.cluster, eng.index, sl, self.cluster_of(sl)), sp.clone()));
                }
            }
        }
        if !errs.is_empty() {
            return self.fail_all(errs);
        }
        // footprint
        let (mut smin, mut smax, mut dmin, mut dmax) = (0i64, 0i64, 0i64, 0i64);
        for e in seq {
            let n = e.count as i64 - 1;
            if e.src_stride >= 0 { smax += e.src_stride * n } else { smin += e.src_stride * n }
            if e.dst_stride >= 0 { dmax += e.dst_stride * n } else { dmin += e.dst_stride * n }
        }
        if sbase as i64 + smin < 0 || dbase as i64 + dmin < 0 {
            errs.push(Diag::new("E0105", "DMA address below zero", sp.clone()));
            return self.fail_all(errs);
        }
        let sreg = Reg { sp: sspace, lo: (sbase as i64 + smin) as u64, hi: (sbase as i64 + smax) as u64 + packet as u64, w: false };
        let dreg = Reg { sp: dspace, lo: (dbase as i64 + dmin) as u64, hi: (dbase as i64 + dmax) as u64 + packet as u64, w: true };
        self.bounds(&sreg, "DMA source", l, &mut errs);
        self.bounds(&dreg, "DMA destination", l, &mut errs);
        // HBM read alignment
        let align = self.p.hbm_align_bytes as i64;
        if sspace == Space::Hbm {
            let mut bad = sbase as i64 % align != 0;
            for e in seq {
                if e.count > 1 && e.src_stride % align != 0 {
                    bad = true;
                }
            }
            if bad {
                errs.push(Diag::new("E0104", format!("HBM reads must be {}-byte aligned (every packet's source address)", align), sp.clone()).q("hbm_address", sbase as f64, None).q("alignment", align as f64, None));
            }
        }
        // write permission in HBM
        if dspace == Space::Hbm {
            for t in &self.tensors {
                let (lo, hi) = (t.addr, t.addr + t.spec.bytes());
                if !t.spec.role.writable() && dreg.lo < hi && lo < dreg.hi {
                    errs.push(Diag::new("E0110", format!("DMA writes into read-only tensor `{}` ({})", t.spec.name, t.spec.role.name()), sp.clone()));
                    break;
                }
            }
        }
        self.hazards(eng.cluster * epc + eng.index, &[sreg, dreg], l, &mut errs);
        if !errs.is_empty() {
            return self.fail_all(errs);
        }
        // walk packets: bank analysis, alignment of writes, functional copy
        let banks = self.p.dm_banks as u64;
        let bank_bytes = self.p.dm_bank_bytes as u64;
        let dm_base_side: Option<(u64, bool)> = match (sspace, dspace) {
            (Space::Dm(_), _) => Some((sbase, true)),
            (_, Space::Dm(_)) => Some((dbase, false)),
            _ => None,
        };
        let small = (packet as u64) < banks * bank_bytes;
        let mut prev_bank = u64::MAX;
        let mut run = 0u64;
        let mut conflicts = 0u64;
        let mut max_run = 0u64;
        let mut unaligned = false;
        let exec = self.mode == Mode::Exec;
        let mut idx = vec![0u32; seq.len()];
        let (mut so, mut dof) = (0i64, 0i64);
        let mut buf = vec![0u8; packet as usize];
        let n = seq.len();
        loop {
            let sa = (sbase as i64 + so) as u64;
            let da = (dbase as i64 + dof) as u64;
            if let Some((_, is_src)) = dm_base_side {
                let a = if is_src { sa } else { da };
                let bank = (a / bank_bytes) % banks;
                if small && bank == prev_bank {
                    conflicts += 1;
                    run += 1;
                    max_run = max_run.max(run + 1);
                } else {
                    run = 0;
                }
                prev_bank = bank;
            }
            if dspace == Space::Hbm && (da % align as u64 != 0 || packet as u64 % align as u64 != 0) {
                unaligned = true;
            }
            if exec {
                let p = packet as usize;
                match sspace {
                    Space::Hbm => buf.copy_from_slice(&self.hbm[sa as usize..sa as usize + p]),
                    Space::Dm(s) => buf.copy_from_slice(&self.dm[s][sa as usize..sa as usize + p]),
                    _ => {}
                }
                match dspace {
                    Space::Hbm => self.hbm[da as usize..da as usize + p].copy_from_slice(&buf),
                    Space::Dm(s) => self.dm[s][da as usize..da as usize + p].copy_from_slice(&buf),
                    _ => {}
                }
            }
            // odometer
            let mut k = n;
            loop {
                if k == 0 {
                    break;
                }
                k -= 1;
                idx[k] += 1;
                so += seq[k].src_stride;
                dof += seq[k].dst_stride;
                if idx[k] < seq[k].count {
                    break;
                }
                so -= seq[k].src_stride * idx[k] as i64;
                dof -= seq[k].dst_stride * idx[k] as i64;
                idx[k] = 0;
                if k == 0 {
                    k = usize::MAX;
                    break;
                }
            }
            if k == usize::MAX {
                break;
            }
        }
        let bytes = total * packet as u64;
        self.counts.dma_commands += 1;
        if sspace == Space::Hbm {
            self.counts.hbm_read_bytes += bytes;
        } else {
            self.counts.hbm_write_bytes += bytes;
        }
        self.counts.bank_conflicts += conflicts;
        self.counts.max_bank_run = self.counts.max_bank_run.max(max_run);
        if max_run >= self.p.bank_hang_run as u64 && self.hang.is_none() {
            self.hang = Some(l.clone());
        }
        // device cost
        let ebw = self.p.dma_engine_bytes_per_cycle;
        let per_packet = packet as f64 / ebw + self.p.dma_packet_overhead_cycles;
        let mut tt = total as f64 * per_packet + conflicts as f64 * per_packet * (self.p.bank_conflict_penalty - 1.0);
        if unaligned {
            tt *= self.p.unaligned_write_penalty;
            self.counts.unaligned_writes += 1;
        }
        let rate = bytes as f64 / tt.max(1e-9);
        let eid = eng.cluster * epc + eng.index;
        self.issue(eid, vec![sreg, dreg], l, (self.p.dma_startup_cycles, 0, bytes as f64, rate), (self.p.dma_startup_cycles, bytes as f64, ebw))
    }

    // ------------------------------------------------------------ switch
    /// Copy `bytes` from one slice's DM to another's over the switch network.
    pub fn switch_copy(&mut self, l: &Span, src: Loc, dst: Loc, bytes: u32) -> Token {
        let sp = Some(l.clone());
        let (s, sa, d, da) = match (src, dst) {
            (Loc::Dm(s, sa), Loc::Dm(d, da)) => (s, sa as u64, d, da as u64),
            _ => return self.fail(Diag::new("E0111", "switch_copy moves data between DM buffers only", sp)),
        };
        if s >= self.nslices || d >= self.nslices {
            return self.fail(Diag::new("E0204", "slice does not exist", sp));
        }
        let mut errs = vec![];
        let r1 = Reg { sp: Space::Dm(s), lo: sa, hi: sa + bytes as u64, w: false };
        let r2 = Reg { sp: Space::Dm(d), lo: da, hi: da + bytes as u64, w: true };
        self.bounds(&r1, "switch source", l, &mut errs);
        self.bounds(&r2, "switch destination", l, &mut errs);
        let eid = self.n_dma + 2 * self.nslices + s;
        self.hazards(eid, &[r1, r2], l, &mut errs);
        if !errs.is_empty() {
            return self.fail_all(errs);
        }
        if self.mode == Mode::Exec {
            let tmp = self.dm[s][sa as usize..(sa + bytes as u64) as usize].to_vec();
            self.dm[d][da as usize..(da + bytes as u64) as usize].copy_from_slice(&tmp);
        }
        self.counts.switch_copies += 1;
        let bw = self.p.switch_bytes_per_cycle;
        let st = self.p.switch_startup_cycles;
        self.issue(eid, vec![r1, r2], l, (st, 1, bytes as f64, bw), (st, bytes as f64, bw))
    }

    // ------------------------------------------------------------ tensor unit
    /// Issue a tensor-unit pass on `p.slice`.
    pub fn pass(&mut self, l: &Span, p: &Pass) -> Token {
        let sp = Some(l.clone());
        let s = p.slice;
        if !self.check_slice(s, l) {
            return Token { id: usize::MAX };
        }
        let mut errs = vec![];
        let lanes = self.p.lanes_per_slice as u32;
        let w = p.w;
        if !matches!(w.dt, Dt::Fp8E4m3 | Dt::Fp4E2m1 | Dt::Bf16) {
            errs.push(Diag::new("E0303", format!("tensor unit multiplies fp8_e4m3, fp4_e2m1 or bf16 weights, not {}", w.dt.name()), sp.clone()));
        }
        if w.rows == 0 || w.rows % lanes != 0 {
            errs.push(Diag::new("E0301", format!("pass rows must be a non-zero multiple of the {} lanes", lanes), sp.clone()).q("rows", w.rows as f64, None).q("multiple_of", lanes as f64, None));
        }
        if w.cols == 0 || w.cols % 64 != 0 {
            errs.push(Diag::new("E0302", "pass columns must be a non-zero multiple of 64", sp.clone()).q("cols", w.cols as f64, None).q("multiple_of", 64.0, None));
        }
        if w.addr % 64 != 0 {
            errs.push(Diag::new("E0306", "tensor-unit fetch: weight tile must start on a 64-byte boundary", sp.clone()).q("dm_address", w.addr as f64, None));
        }
        let rowb = w.dt.bytes(w.cols as u64);
        if (w.pitch as u64) < rowb {
            errs.push(Diag::new("E0303", "tile pitch smaller than a row", sp.clone()).q("pitch", w.pitch as f64, Some(rowb as f64)));
        }
        match (w.dt, p.scales) {
            (Dt::Fp4E2m1, None) => errs.push(Diag::new("E0303", "fp4_e2m1 weights need block scales (fp8_e4m3, one per 16 elements)", sp.clone())),
            (Dt::Fp4E2m1, Some(sc)) => {
                if sc.dt != Dt::Fp8E4m3 || sc.rows != w.rows || sc.cols * 16 != w.cols || sc.pitch < sc.cols {
                    errs.push(Diag::new("E0303", "block-scale tile must be fp8_e4m3 with the weight tile's rows and cols/16 columns", sp.clone()));
                }
            }
            (_, Some(_)) => errs.push(Diag::new("E0303", "block scales are only used with fp4_e2m1 weights", sp.clone())),
            _ => {}
        }
        if p.x.slice != s || p.acc.slice != s {
            errs.push(Diag::new("E0304", "pass operands must live on the pass's slice", sp.clone()));
        }
        if p.x.len != w.cols {
            errs.push(Diag::new("E0304", "operand length must equal the tile's columns", sp.clone()).q("x_len", p.x.len as f64, Some(w.cols as f64)));
        }
        if p.acc.len != w.rows {
            errs.push(Diag::new("E0304", "accumulator length must equal the tile's rows", sp.clone()).q("acc_len", p.acc.len as f64, Some(w.rows as f64)));
        }
        if !errs.is_empty() {
            return self.fail_all(errs);
        }
        let wreg = Reg { sp: Space::Dm(s), lo: w.addr as u64, hi: w.addr as u64 + (w.rows as u64 - 1) * w.pitch as u64 + rowb, w: false };
        let mut regs = vec![wreg];
        if let Some(sc) = p.scales {
            regs.push(Reg { sp: Space::Dm(s), lo: sc.addr as u64, hi: sc.addr as u64 + (sc.rows as u64 - 1) * sc.pitch as u64 + sc.cols as u64, w: false });
        }
        regs.push(Reg { sp: Space::Trf(s), lo: p.x.off as u64, hi: (p.x.off + p.x.len) as u64, w: false });
        regs.push(self.vreg(&p.acc, true));
        for r in &regs {
            self.bounds(r, "pass operand", l, &mut errs);
        }
        let eid = self.n_dma + s;
        self.hazards(eid, &regs, l, &mut errs);
        if !errs.is_empty() {
            return self.fail_all(errs);
        }
        if self.mode == Mode::Exec {
            let x: Vec<f32> = self.trf[s][p.x.off as usize..(p.x.off + p.x.len) as usize].to_vec();
            let dm = &self.dm[s];
            let acc = &mut self.vrf[s][p.acc.off as usize..(p.acc.off + p.acc.len) as usize];
            for r in 0..w.rows as usize {
                let wa = w.addr as usize + r * w.pitch as usize;
                let row = &dm[wa..wa + rowb as usize];
                let v = match w.dt {
                    Dt::Fp8E4m3 => hot::dot_fp8(row, &x),
                    Dt::Bf16 => hot::dot_bf16(row, &x),
                    _ => {
                        let sc = p.scales.unwrap();
                        let sa = sc.addr as usize + r * sc.pitch as usize;
                        hot::dot_fp4_blocked(row, &dm[sa..sa + sc.cols as usize], &x)
                    }
                };
                acc[r] = if p.accumulate { acc[r] + v } else { v };
            }
        }
        let macs = w.rows as u64 * w.cols as u64;
        self.counts.passes += 1;
        self.counts.macs += macs;
        let comp = (macs as f64 / (self.p.lanes_per_slice * self.p.tensor_macs_per_lane_cycle)).ceil();
        let iss = self.p.pass_issue();
        self.issue(eid, regs, l, (iss, NO_POOL, comp, 1.0), (iss, comp, 1.0))
    }

    // ------------------------------------------------------------ vector engine
    fn vop(&mut self, l: &Span, reads: &[Vrf], writes: &[Vrf], extra: Vec<Reg>, len: u32) -> Result<usize, Token> {
        let sp = Some(l.clone());
        let s = writes.first().or(reads.first()).map(|v| v.slice).unwrap_or(0);
        if s >= self.nslices {
            return Err(self.fail(Diag::new("E0204", format!("slice {} does not exist", s), sp)));
        }
        let mut errs = vec![];
        for v in reads.iter().chain(writes) {
            if v.slice != s {
                errs.push(Diag::new("E0305", "vector operands must all be on one slice", sp.clone()));
                break;
            }
        }
        let mut regs: Vec<Reg> = reads.iter().map(|v| self.vreg(v, false)).collect();
        regs.extend(writes.iter().map(|v| self.vreg(v, true)));
        regs.extend(extra);
        if errs.is_empty() {
            for r in &regs {
                self.bounds(r, "vector operand", l, &mut errs);
            }
        }
        let eid = self.n_dma + self.nslices + s;
        if errs.is_empty() {
            self.hazards(eid, &regs, l, &mut errs);
        }
        if !errs.is_empty() {
            return Err(self.fail_all(errs));
        }
        self.counts.vector_ops += 1;
        let work = (len as f64 / self.p.vector_elems_per_cycle).ceil();
        let fx = self.p.vector_op_cycles;
        Ok(self.issue(eid, regs, l, (fx, NO_POOL, work, 1.0), (fx, work, 1.0)).id)
    }
    fn lens(&mut self, l: &Span, ok: bool, what: &str) -> bool {
        if !ok {
            let _ = self.fail(Diag::new("E0305", format!("vector operand lengths do not match: {}", what), Some(l.clone())));
        }
        ok
    }
    fn vs(&mut self, v: &Vrf) -> &mut [f32] {
        &mut self.vrf[v.slice][v.off as usize..(v.off + v.len) as usize]
    }
    fn vget(&self, v: &Vrf) -> Vec<f32> {
        self.vrf[v.slice][v.off as usize..(v.off + v.len) as usize].to_vec()
    }

    /// DM → VRF, converting `dt` (fp8_e4m3, bf16, f32, i32) to f32.
    pub fn vload(&mut self, l: &Span, src: Loc, dt: Dt, dst: Vrf) -> Token {
        let (s, a) = match src {
            Loc::Dm(s, a) => (s, a),
            _ => return self.fail(Diag::new("E0305", "vload reads the DM of the destination's slice", Some(l.clone()))),
        };
        if s != dst.slice || dt == Dt::Fp4E2m1 {
            return self.fail(Diag::new("E0305", "vload: source must be the DM of the destination's slice; fp4 cannot be loaded", Some(l.clone())));
        }
        let nb = dt.bytes(dst.len as u64);
        let reg = Reg { sp: Space::Dm(s), lo: a as u64, hi: a as u64 + nb, w: false };
        let id = match self.vop(l, &[], &[dst], vec![reg], dst.len) {
            Ok(i) => i,
            Err(t) => return t,
        };
        if self.mode == Mode::Exec {
            let b = self.dm[s][a as usize..(a as u64 + nb) as usize].to_vec();
            let o = self.vs(&dst);
            for (i, x) in o.iter_mut().enumerate() {
                *x = match dt {
                    Dt::Fp8E4m3 => fp8_to_f32(b[i]),
                    Dt::Bf16 => bf16_to_f32(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])),
                    Dt::F32 => f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap()),
                    _ => i32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap()) as f32,
                };
            }
        }
        Token { id }
    }

    /// VRF → DM, converting f32 to `dt` (fp8_e4m3, bf16, f32; round to nearest even).
    pub fn vstore(&mut self, l: &Span, src: Vrf, dst: Loc, dt: Dt) -> Token {
        let (s, a) = match dst {
            Loc::Dm(s, a) => (s, a),
            _ => return self.fail(Diag::new("E0305", "vstore writes the DM of the source's slice", Some(l.clone()))),
        };
        if s != src.slice || matches!(dt, Dt::Fp4E2m1 | Dt::I32) {
            return self.fail(Diag::new("E0305", "vstore: destination must be the DM of the source's slice; dt must be fp8_e4m3, bf16 or f32", Some(l.clone())));
        }
        let nb = dt.bytes(src.len as u64);
        let reg = Reg { sp: Space::Dm(s), lo: a as u64, hi: a as u64 + nb, w: true };
        let id = match self.vop(l, &[src], &[], vec![reg], src.len) {
            Ok(i) => i,
            Err(t) => return t,
        };
        if self.mode == Mode::Exec {
            let v = self.vget(&src);
            let o = &mut self.dm[s][a as usize..(a as u64 + nb) as usize];
            for (i, x) in v.iter().enumerate() {
                match dt {
                    Dt::Fp8E4m3 => o[i] = f32_to_fp8(*x),
                    Dt::Bf16 => o[2 * i..2 * i + 2].copy_from_slice(&f32_to_bf16(*x).to_le_bytes()),
                    _ => o[4 * i..4 * i + 4].copy_from_slice(&x.to_le_bytes()),
                }
            }
        }
        Token { id }
    }

    fn to_trf_impl(&mut self, src: Vrf, dst: Trf, l: &Span) -> Token {
        if src.len != dst.len || src.slice != dst.slice {
            return self.fail(Diag::new("E0305", "TRF cast: source and destination must have the same slice and length", Some(l.clone())));
        }
        let reg = Reg { sp: Space::Trf(dst.slice), lo: dst.off as u64, hi: (dst.off + dst.len) as u64, w: true };
        let id = match self.vop(l, &[src], &[], vec![reg], src.len) {
            Ok(i) => i,
            Err(t) => return t,
        };
        if self.mode == Mode::Exec {
            let v = self.vget(&src);
            let o = &mut self.trf[dst.slice][dst.off as usize..(dst.off + dst.len) as usize];
            for (i, x) in v.iter().enumerate() {
                o[i] = round_bf16(*x);
            }
        }
        Token { id }
    }

    /// VRF → TRF: cast f32 to bf16 multiplier operands (the DSL's `vtrf`, `to_trf` from 1.1).
    pub fn to_trf(&mut self, l: &Span, src: Vrf, dst: Trf) -> Token {
        self.to_trf_impl(src, dst, l)
    }

    /// dst[0] (+)= Σ src².
    pub fn vsumsq(&mut self, l: &Span, src: Vrf, dst: Vrf, accumulate: bool) -> Token {
        if !self.lens(l, dst.len == 1, "vsumsq destination must have length 1") {
            return Token { id: usize::MAX };
        }
        let id = match self.vop(l, &[src], &[dst], vec![], src.len) {
            Ok(i) => i,
            Err(t) => return t,
        };
        if self.mode == Mode::Exec {
            let v = self.vget(&src);
            let ss: f32 = v.iter().map(|x| x * x).sum();
            let o = self.vs(&dst);
            o[0] = if accumulate { o[0] + ss } else { ss };
        }
        Token { id }
    }

    /// dst = src · 1/sqrt(sumsq[0]/n + eps).
    pub fn vrms(&mut self, l: &Span, src: Vrf, sumsq: Vrf, n: u32, eps: f32, dst: Vrf) -> Token {
        if !self.lens(l, sumsq.len == 1 && src.len == dst.len && n > 0, "vrms: sumsq has length 1, src and dst equal lengths, n > 0") {
            return Token { id: usize::MAX };
        }
        let id = match self.vop(l, &[src, sumsq], &[dst], vec![], src.len) {
            Ok(i) => i,
            Err(t) => return t,
        };
        if self.mode == Mode::Exec {
            let v = self.vget(&src);
            let ss = self.vget(&sumsq)[0];
            let r = 1.0 / (ss / n as f32 + eps).sqrt();
            let o = self.vs(&dst);
            for i in 0..v.len() {
                o[i] = v[i] * r;
            }
        }
        Token { id }
    }

    fn binop(&mut self, a: Vrf, b: Vrf, dst: Vrf, l: &Span, f: fn(f32, f32) -> f32, bcast: bool) -> Token {
        let ok = a.len == dst.len && (if bcast { b.len == 1 } else { b.len == a.len });
        if !self.lens(l, ok, if bcast { "a and dst equal lengths, scalar operand of length 1" } else { "a, b and dst equal lengths" }) {
            return Token { id: usize::MAX };
        }
        let id = match self.vop(l, &[a, b], &[dst], vec![], a.len) {
            Ok(i) => i,
            Err(t) => return t,
        };
        if self.mode == Mode::Exec {
            let x = self.vget(&a);
            let y = self.vget(&b);
            let o = self.vs(&dst);
            for i in 0..x.len() {
                o[i] = f(x[i], if bcast { y[0] } else { y[i] });
            }
        }
        Token { id }
    }
    /// dst = a · b (elementwise).
    pub fn vmul(&mut self, l: &Span, a: Vrf, b: Vrf, dst: Vrf) -> Token {
        self.binop(a, b, dst, l, |x, y| x * y, false)
    }
    /// dst = a + b (elementwise).
    pub fn vadd(&mut self, l: &Span, a: Vrf, b: Vrf, dst: Vrf) -> Token {
        self.binop(a, b, dst, l, |x, y| x + y, false)
    }
    /// dst = a · s[0] (s has length 1).
    pub fn vmuls(&mut self, l: &Span, a: Vrf, s: Vrf, dst: Vrf) -> Token {
        self.binop(a, s, dst, l, |x, y| x * y, true)
    }
    /// dst = gelu_tanh(gate) · up.
    pub fn vgeglu(&mut self, l: &Span, gate: Vrf, up: Vrf, dst: Vrf) -> Token {
        self.binop(gate, up, dst, l, |x, y| gelu_tanh(x) * y, false)
    }
    /// dst = src (copy within one slice's VRF).
    pub fn vcopy(&mut self, l: &Span, src: Vrf, dst: Vrf) -> Token {
        if !self.lens(l, src.len == dst.len, "src and dst equal lengths") {
            return Token { id: usize::MAX };
        }
        let id = match self.vop(l, &[src], &[dst], vec![], src.len) {
            Ok(i) => i,
            Err(t) => return t,
        };
        if self.mode == Mode::Exec {
            let v = self.vget(&src);
            self.vs(&dst).copy_from_slice(&v);
        }
        Token { id }
    }
    /// dst[i] = value.
    pub fn vfill(&mut self, l: &Span, dst: Vrf, value: f32) -> Token {
        let id = match self.vop(l, &[], &[dst], vec![], dst.len) {
            Ok(i) => i,
            Err(t) => return t,
        };
        if self.mode == Mode::Exec {
            self.vs(&dst).iter_mut().for_each(|x| *x = value);
        }
        Token { id }
    }
    /// Rotary embedding of whole heads (half-split pairs (i, i+head_dim/2)),
    /// angle pos·theta^(-2i/head_dim).
    pub fn vrope(&mut self, l: &Span, src: Vrf, dst: Vrf, pos: u32, head_dim: u32, theta: f32) -> Token {
        if !self.lens(l, src.len == dst.len && head_dim > 0 && head_dim % 2 == 0 && src.len % head_dim == 0, "src and dst equal lengths, a whole number of even-sized heads") {
            return Token { id: usize::MAX };
        }
        let id = match self.vop(l, &[src], &[dst], vec![], src.len) {
            Ok(i) => i,
            Err(t) => return t,
        };
        if self.mode == Mode::Exec {
            let mut v = self.vget(&src);
            for h in v.chunks_mut(head_dim as usize) {
                refk::rope(h, pos, theta);
            }
            self.vs(&dst).copy_from_slice(&v);
        }
        Token { id }
    }
}
