//! The DSL's plain-data types: what a kernel names when it builds a program.
/// Element formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dt {
    Fp8E4m3,
    Fp4E2m1,
    Bf16,
    F32,
    I32,
}
impl Dt {
    pub fn bits(self) -> u32 {
        match self {
            Dt::Fp8E4m3 => 8,
            Dt::Fp4E2m1 => 4,
            Dt::Bf16 => 16,
            Dt::F32 | Dt::I32 => 32,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Dt::Fp8E4m3 => "fp8_e4m3",
            Dt::Fp4E2m1 => "fp4_e2m1",
            Dt::Bf16 => "bf16",
            Dt::F32 => "f32",
            Dt::I32 => "i32",
        }
    }
    /// bytes for n elements (rounded up)
    pub fn bytes(self, n: u64) -> u64 {
        (n * self.bits() as u64 + 7) / 8
    }
}

/// A DMA / vector endpoint: an HBM byte address or a (slice, DM byte address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    Hbm(u64),
    Dm(usize, u32),
}

/// An HBM tensor or scratch buffer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hbm {
    pub addr: u64,
    pub bytes: u64,
}
impl Hbm {
    pub fn at(&self, off: u64) -> Loc {
        Loc::Hbm(self.addr + off)
    }
}
/// A DM buffer of one slice.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dm {
    pub slice: usize,
    pub addr: u32,
    pub bytes: u32,
}
impl Dm {
    pub fn at(&self, off: u32) -> Loc {
        Loc::Dm(self.slice, self.addr + off)
    }
}
/// A VRF region of one slice, in f32 elements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Vrf {
    pub slice: usize,
    pub off: u32,
    pub len: u32,
}
impl Vrf {
    pub fn sub(&self, off: u32, len: u32) -> Vrf {
        Vrf { slice: self.slice, off: self.off + off, len }
    }
}
/// A TRF region of one slice (replicated in every lane), in bf16 elements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trf {
    pub slice: usize,
    pub off: u32,
    pub len: u32,
}
impl Trf {
    pub fn sub(&self, off: u32, len: u32) -> Trf {
        Trf { slice: self.slice, off: self.off + off, len }
    }
}
/// A DMA engine: (cluster, index within the cluster).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Engine {
    pub cluster: usize,
    pub index: usize,
}
pub fn engine(cluster: usize, index: usize) -> Engine {
    Engine { cluster, index }
}
/// One sequencer entry: `count` iterations, byte strides on each side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Loop {
    pub count: u32,
    pub src_stride: i64,
    pub dst_stride: i64,
}
pub fn lp(count: u32, src_stride: i64, dst_stride: i64) -> Loop {
    Loop { count, src_stride, dst_stride }
}
/// A weight (or block-scale) tile in a slice's DM: `rows` rows of `cols`
/// elements of `dt`, row r starting at byte `addr + r*pitch`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tile {
    pub addr: u32,
    pub rows: u32,
    pub cols: u32,
    pub pitch: u32,
    pub dt: Dt,
}
/// A tensor-unit pass: acc[r] (+)= Σ_c w[r,c] · scale[r, c/16] · x[c].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pass {
    pub slice: usize,
    pub w: Tile,
    pub scales: Option<Tile>,
    pub x: Trf,
    pub acc: Vrf,
    pub accumulate: bool,
}
/// Completion token of an asynchronous command.
#[must_use = "a command's token must be waited on (or covered by a later wait on the same engine)"]
#[derive(Debug)]
pub struct Token {
    pub(crate) id: usize,
}

/// Public hardware facts (the only facts of the chip a kernel's host code sees).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HwInfo {
    pub clusters: usize,
    pub slices_per_cluster: usize,
    pub slices: usize,
    pub lanes: u32,
    pub dm_bytes: u32,
    pub dm_banks: u32,
    pub trf_bytes_per_lane: u32,
    pub vrf_bytes: u32,
    pub dma_engines_per_cluster: usize,
    pub max_packet_bytes: u32,
    pub max_seq_entries: usize,
    pub max_seq_iterations: u32,
    pub hbm_align: u32,
}
