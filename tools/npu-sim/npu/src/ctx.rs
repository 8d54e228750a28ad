//! The kernel's handle: a program builder. Every DSL call appends one op to the program that
//! the device (npuc's own process) executes, times and checks. The host code sees the kernel's
//! name, its shape, the launch position and the public hardware facts — nothing else.
use crate::program::{encode_op, esc_field, Op, Program, SpanRef, HEADER};
use crate::shape::{specs, Shape};
use crate::types::*;
use std::io::Write;
use std::panic::Location;

/// What the device tells the host code about a launch.
#[derive(Clone, Debug)]
pub struct Launch {
    pub kernel: String,
    pub shape: Shape,
    pub pos: u32,
    pub hw: HwInfo,
}

/// Panic payload that ends the host code early (the device reports the reason).
pub struct Stop;

const HBM_ALIGN_TENSOR: u64 = 4096;

/// The kernel's handle on the device.
pub struct Ctx {
    launch: Launch,
    tensors: Vec<(&'static str, u64, u64)>,
    hbm_top: u64,
    dm_top: Vec<u64>,
    vrf_top: Vec<u64>,
    trf_top: Vec<u64>,
    next_token: usize,
    files: Vec<String>,
    ops: Vec<(Op, SpanRef)>,
    out: Option<std::io::BufWriter<Box<dyn Write>>>,
    sent: usize,
}

impl Ctx {
    /// A builder that keeps the program in memory (see `into_program`).
    pub fn new(launch: Launch) -> Ctx {
        let mut addr = 0u64;
        let mut tensors = vec![];
        for s in specs(&launch.kernel, &launch.shape) {
            let b = s.bytes();
            tensors.push((s.name, addr, b));
            addr += (b + HBM_ALIGN_TENSOR - 1) / HBM_ALIGN_TENSOR * HBM_ALIGN_TENSOR;
        }
        let n = launch.hw.slices;
        Ctx { launch, tensors, hbm_top: addr, dm_top: vec![0; n], vrf_top: vec![0; n], trf_top: vec![0; n], next_token: 0, files: vec![], ops: vec![], out: None, sent: 0 }
    }

    /// A builder that streams the program to `sink` as it is built (the kernel binary's mode).
    pub(crate) fn streaming(launch: Launch, sink: Box<dyn Write>) -> Ctx {
        let mut c = Ctx::new(launch);
        let mut w = std::io::BufWriter::with_capacity(1 << 16, sink);
        let _ = writeln!(w, "{}", HEADER);
        c.out = Some(w);
        c
    }

    /// The program built so far; `complete`: the host code returned.
    pub fn into_program(self, complete: bool) -> Program {
        Program { files: self.files, ops: self.ops, complete }
    }

    /// End a streamed program (`complete`: the host code returned).
    pub(crate) fn finish_stream(&mut self, complete: bool) {
        if let Some(w) = self.out.as_mut() {
            if complete {
                let _ = writeln!(w, "end {}", self.sent);
            }
            let _ = w.flush();
        }
    }

    fn span(&mut self, f: &str, line: u32, col: u32) -> SpanRef {
        let idx = match self.files.iter().position(|x| x == f) {
            Some(i) => i,
            None => {
                self.files.push(f.to_string());
                if let Some(w) = self.out.as_mut() {
                    let _ = writeln!(w, "f {} {}", self.files.len() - 1, esc_field(f));
                }
                self.files.len() - 1
            }
        };
        SpanRef { file: idx as u32, line, col }
    }

    pub(crate) fn push(&mut self, op: Op, l: &Location) {
        self.push_at(op, l.file(), l.line(), l.column())
    }

    pub(crate) fn push_at(&mut self, op: Op, file: &str, line: u32, col: u32) {
        let sp = self.span(file, line, col);
        if let Some(w) = self.out.as_mut() {
            let _ = writeln!(w, "{}", encode_op(&op, sp));
            self.sent += 1;
        } else {
            self.ops.push((op, sp));
        }
    }

    fn command(&mut self, op: Op, l: &Location) -> Token {
        self.push(op, l);
        let id = self.next_token;
        self.next_token += 1;
        Token { id }
    }

    // ------------------------------------------------------------ info
    /// Problem sizes.
    pub fn shape(&self) -> Shape {
        self.launch.shape
    }
    /// Token position (project_qkv): RoPE angle and ring-cache slot `pos % cache_len`.
    pub fn pos(&self) -> u32 {
        self.launch.pos
    }
    pub fn kernel_name(&self) -> &str {
        &self.launch.kernel
    }
    /// Public hardware facts.
    pub fn hw(&self) -> HwInfo {
        self.launch.hw
    }
    /// The cluster a slice belongs to.
    pub fn cluster_of(&self, slice: usize) -> usize {
        slice / self.launch.hw.slices_per_cluster.max(1)
    }

    /// An HBM tensor of this kernel by name.
    #[track_caller]
    pub fn tensor(&mut self, name: &str) -> Hbm {
        if let Some(&(_, addr, bytes)) = self.tensors.iter().find(|t| t.0 == name) {
            return Hbm { addr, bytes };
        }
        self.push(Op::BadTensor { name: name.to_string() }, Location::caller());
        std::panic::panic_any(Stop);
    }

    // ------------------------------------------------------------ allocation
    /// Scratch HBM (4096-byte aligned).
    #[track_caller]
    pub fn hbm_alloc(&mut self, bytes: u64) -> Hbm {
        self.push(Op::HbmAlloc { bytes }, Location::caller());
        let a = (self.hbm_top + 4095) / 4096 * 4096;
        self.hbm_top = a + bytes;
        Hbm { addr: a, bytes }
    }

    /// Allocate `bytes` of DM on `slice` (256-byte aligned).
    #[track_caller]
    pub fn dm_alloc(&mut self, slice: usize, bytes: u32) -> Dm {
        self.push(Op::DmAlloc { slice, bytes }, Location::caller());
        if slice >= self.dm_top.len() {
            return Dm { slice: 0, addr: 0, bytes };
        }
        let a = (self.dm_top[slice] + 255) / 256 * 256;
        self.dm_top[slice] = a + bytes as u64;
        Dm { slice, addr: a as u32, bytes }
    }

    /// Allocate `len` f32 elements of VRF on `slice`.
    #[track_caller]
    pub fn vrf_alloc(&mut self, slice: usize, len: u32) -> Vrf {
        self.push(Op::VrfAlloc { slice, len }, Location::caller());
        if slice >= self.vrf_top.len() {
            return Vrf { slice: 0, off: 0, len };
        }
        let off = self.vrf_top[slice];
        self.vrf_top[slice] = off + len as u64;
        Vrf { slice, off: off as u32, len }
    }

    /// Allocate `len` bf16 elements of TRF on `slice` (replicated per lane).
    #[track_caller]
    pub fn trf_alloc(&mut self, slice: usize, len: u32) -> Trf {
        self.push(Op::TrfAlloc { slice, len }, Location::caller());
        if slice >= self.trf_top.len() {
            return Trf { slice: 0, off: 0, len };
        }
        let off = self.trf_top[slice];
        self.trf_top[slice] = off + len as u64;
        Trf { slice, off: off as u32, len }
    }

    // ------------------------------------------------------------ ordering
    /// The next command issued (on any engine) waits on the device for the commands behind
    /// `deps` before its data phase; its fixed phase overlaps the wait.
    /// Returns the context: `k.after(&[&t]).copy(...)`.
    #[track_caller]
    pub fn after(&mut self, deps: &[&Token]) -> &mut Ctx {
        let deps: Vec<usize> = deps.iter().map(|t| t.id).collect();
        self.push(Op::After { deps }, Location::caller());
        self
    }

    /// Block until the command behind `t` has completed (and every earlier command of its engine).
    #[track_caller]
    pub fn wait(&mut self, t: Token) {
        self.push(Op::Wait { token: t.id }, Location::caller());
    }
    /// Wait on several tokens.
    #[track_caller]
    pub fn wait_all(&mut self, ts: Vec<Token>) {
        let l = Location::caller();
        for t in ts {
            self.push(Op::Wait { token: t.id }, l);
        }
    }

    // ------------------------------------------------------------ DMA
    /// Move `bytes` contiguous bytes in packets of `packet`.
    #[track_caller]
    pub fn copy(&mut self, eng: Engine, src: Loc, dst: Loc, bytes: u32, packet: u32) -> Token {
        self.command(Op::Copy { eng, src, dst, bytes, packet }, Location::caller())
    }
    /// A DMA command on engine `eng`: a sequencer program of nested loops (entry 0 outermost).
    #[track_caller]
    pub fn dma(&mut self, eng: Engine, src: Loc, dst: Loc, packet: u32, seq: &[Loop]) -> Token {
        self.command(Op::Dma { eng, src, dst, packet, seq: seq.to_vec() }, Location::caller())
    }

    /// Copy `bytes` from one slice's DM to another's over the switch network.
    #[track_caller]
    pub fn switch_copy(&mut self, src: Loc, dst: Loc, bytes: u32) -> Token {
        self.command(Op::Switch { src, dst, bytes }, Location::caller())
    }

    /// Issue a tensor-unit pass on `p.slice`.
    #[track_caller]
    pub fn pass(&mut self, p: &Pass) -> Token {
        self.command(Op::Pass(*p), Location::caller())
    }

    // ------------------------------------------------------------ vector engine
    /// DM → VRF, converting `dt` (fp8_e4m3, bf16, f32, i32) to f32.
    #[track_caller]
    pub fn vload(&mut self, src: Loc, dt: Dt, dst: Vrf) -> Token {
        self.command(Op::Vload { src, dt, dst }, Location::caller())
    }
    /// VRF → DM, converting f32 to `dt` (fp8_e4m3, bf16, f32; round to nearest even).
    #[track_caller]
    pub fn vstore(&mut self, src: Vrf, dst: Loc, dt: Dt) -> Token {
        self.command(Op::Vstore { src, dst, dt }, Location::caller())
    }
    /// VRF → TRF: cast f32 to bf16 multiplier operands.
    #[cfg(not(feature = "v1_1"))]
    #[track_caller]
    pub fn vtrf(&mut self, src: Vrf, dst: Trf) -> Token {
        self.command(Op::ToTrf { src, dst }, Location::caller())
    }
    /// VRF → TRF: cast f32 to bf16 multiplier operands (called `vtrf` before 1.1).
    #[cfg(feature = "v1_1")]
    #[track_caller]
    pub fn to_trf(&mut self, src: Vrf, dst: Trf) -> Token {
        self.command(Op::ToTrf { src, dst }, Location::caller())
    }
    /// dst[0] (+)= Σ src².
    #[track_caller]
    pub fn vsumsq(&mut self, src: Vrf, dst: Vrf, accumulate: bool) -> Token {
        self.command(Op::Vsumsq { src, dst, accumulate }, Location::caller())
    }
    /// dst = src / sqrt(sumsq[0]/n + eps).
    #[track_caller]
    pub fn vrms(&mut self, src: Vrf, sumsq: Vrf, n: u32, eps: f32, dst: Vrf) -> Token {
        self.command(Op::Vrms { src, sumsq, n, eps, dst }, Location::caller())
    }
    /// dst = a · b (elementwise).
    #[track_caller]
    pub fn vmul(&mut self, a: Vrf, b: Vrf, dst: Vrf) -> Token {
        self.command(Op::Vbin { kind: 0, a, b, dst }, Location::caller())
    }
    /// dst = a + b (elementwise).
    #[track_caller]
    pub fn vadd(&mut self, a: Vrf, b: Vrf, dst: Vrf) -> Token {
        self.command(Op::Vbin { kind: 1, a, b, dst }, Location::caller())
    }
    /// dst = a · s[0].
    #[track_caller]
    pub fn vmuls(&mut self, a: Vrf, s: Vrf, dst: Vrf) -> Token {
        self.command(Op::Vbin { kind: 2, a, b: s, dst }, Location::caller())
    }
    /// dst = gelu_tanh(gate) · up.
    #[track_caller]
    pub fn vgeglu(&mut self, gate: Vrf, up: Vrf, dst: Vrf) -> Token {
        self.command(Op::Vbin { kind: 3, a: gate, b: up, dst }, Location::caller())
    }
    /// dst = src.
    #[track_caller]
    pub fn vcopy(&mut self, src: Vrf, dst: Vrf) -> Token {
        self.command(Op::Vcopy { src, dst }, Location::caller())
    }
    /// dst = value.
    #[track_caller]
    pub fn vfill(&mut self, dst: Vrf, value: f32) -> Token {
        self.command(Op::Vfill { dst, value }, Location::caller())
    }
    /// Rotary embedding of whole heads (pairs (i, i + head_dim/2)), angle pos·theta^(-2i/head_dim).
    #[track_caller]
    pub fn vrope(&mut self, src: Vrf, dst: Vrf, pos: u32, head_dim: u32, theta: f32) -> Token {
        self.command(Op::Vrope { src, dst, pos, head_dim, theta }, Location::caller())
    }
}
