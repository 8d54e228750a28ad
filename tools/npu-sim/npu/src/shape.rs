//! The three decode kernels' public interface: shapes and tensor specs (names, formats, sizes).
use crate::types::Dt;

pub const EPS: f32 = 1e-6;
pub const ROPE_THETA: f32 = 10000.0;
pub const KERNELS: [&str; 3] = ["project_qkv", "attention_output", "feedforward"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub hidden: u32,
    pub ffn: u32,
    pub q_heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub cache_len: u32,
}

impl Default for Shape {
    fn default() -> Self {
        Shape { hidden: 3840, ffn: 15360, q_heads: 16, kv_heads: 8, head_dim: 256, cache_len: 1024 }
    }
}

/// Shape keys accepted per kernel (`npuc run --shape k=v,...`).
pub fn shape_keys(kernel: &str) -> &'static [&'static str] {
    match kernel {
        "project_qkv" => &["hidden", "q_heads", "kv_heads", "head_dim", "cache_len"],
        "attention_output" => &["hidden", "q_heads", "head_dim"],
        "feedforward" => &["hidden", "ffn"],
        _ => &[],
    }
}

impl Shape {
    pub fn set(&mut self, kernel: &str, k: &str, v: u32) -> Result<(), String> {
        if !shape_keys(kernel).contains(&k) {
            return Err(format!("unknown shape key `{}` for kernel {} (accepted: {})", k, kernel, shape_keys(kernel).join(", ")));
        }
        if v == 0 {
            return Err(format!("shape key `{}` must be > 0", k));
        }
        match k {
            "hidden" => self.hidden = v,
            "ffn" => self.ffn = v,
            "q_heads" => self.q_heads = v,
            "kv_heads" => self.kv_heads = v,
            "head_dim" => self.head_dim = v,
            "cache_len" => self.cache_len = v,
            _ => unreachable!(),
        }
        Ok(())
    }
    pub fn validate(&self, kernel: &str) -> Result<(), String> {
        let need16 = |n: &str, v: u32| if v % 64 != 0 { Err(format!("shape `{}` = {} must be a multiple of 64", n, v)) } else { Ok(()) };
        need16("hidden", self.hidden)?;
        match kernel {
            "feedforward" => need16("ffn", self.ffn)?,
            _ => {
                need16("head_dim", self.head_dim)?;
                if kernel == "project_qkv" && (self.kv_heads == 0 || self.q_heads % self.kv_heads != 0) {
                    return Err("q_heads must be a multiple of kv_heads".into());
                }
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Input,
    Weight,
    State,
    Output,
}
impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Input => "input",
            Role::Weight => "weight",
            Role::State => "state",
            Role::Output => "output",
        }
    }
    pub fn writable(self) -> bool {
        matches!(self, Role::State | Role::Output)
    }
}

#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub name: &'static str,
    pub role: Role,
    pub dt: Dt,
    pub dims: Vec<u64>,
    pub dims_sym: &'static str,
}
impl TensorSpec {
    pub fn elems(&self) -> u64 {
        self.dims.iter().product()
    }
    pub fn bytes(&self) -> u64 {
        (self.elems() * self.dt.bits() as u64 + 7) / 8
    }
}

fn t(name: &'static str, role: Role, dt: Dt, dims: Vec<u32>, sym: &'static str) -> TensorSpec {
    TensorSpec { name, role, dt, dims: dims.into_iter().map(|d| d as u64).collect(), dims_sym: sym }
}

pub fn specs(kernel: &str, s: &Shape) -> Vec<TensorSpec> {
    use Dt::*;
    use Role::*;
    let (h, l, q, kv, d, c) = (s.hidden, s.ffn, s.q_heads, s.kv_heads, s.head_dim, s.cache_len);
    match kernel {
        "project_qkv" => vec![
            t("x", Input, Bf16, vec![h], "[hidden]"),
            t("pos", Input, I32, vec![1], "[1]"),
            t("attn_norm", Weight, Bf16, vec![h], "[hidden]"),
            t("wq", Weight, Fp8E4m3, vec![q * d, h], "[q_heads*head_dim, hidden]"),
            t("wq_scale", Weight, Bf16, vec![q * d], "[q_heads*head_dim]"),
            t("wk", Weight, Fp8E4m3, vec![kv * d, h], "[kv_heads*head_dim, hidden]"),
            t("wk_scale", Weight, Bf16, vec![kv * d], "[kv_heads*head_dim]"),
            t("wv", Weight, Fp8E4m3, vec![kv * d, h], "[kv_heads*head_dim, hidden]"),
            t("wv_scale", Weight, Bf16, vec![kv * d], "[kv_heads*head_dim]"),
            t("q_norm", Weight, Bf16, vec![d], "[head_dim]"),
            t("k_norm", Weight, Bf16, vec![d], "[head_dim]"),
            t("q_out", Output, Bf16, vec![q * d], "[q_heads*head_dim]"),
            t("k_cache", State, Bf16, vec![kv, c, d], "[kv_heads, cache_len, head_dim]"),
            t("v_cache", State, Bf16, vec![kv, c, d], "[kv_heads, cache_len, head_dim]"),
        ],
        "attention_output" => vec![
            t("attn", Input, Bf16, vec![q * d], "[q_heads*head_dim]"),
            t("residual", Input, Bf16, vec![h], "[hidden]"),
            t("wo", Weight, Fp8E4m3, vec![h, q * d], "[hidden, q_heads*head_dim]"),
            t("wo_scale", Weight, Bf16, vec![h], "[hidden]"),
            t("post_norm", Weight, Bf16, vec![h], "[hidden]"),
            t("out", Output, Bf16, vec![h], "[hidden]"),
        ],
        "feedforward" => vec![
            t("x", Input, Bf16, vec![h], "[hidden]"),
            t("ffn_norm", Weight, Bf16, vec![h], "[hidden]"),
            t("w_gate", Weight, Fp4E2m1, vec![l, h], "[ffn, hidden]"),
            t("w_gate_bs", Weight, Fp8E4m3, vec![l, h / 16], "[ffn, hidden/16]"),
            t("w_gate_s", Weight, F32, vec![1], "[1]"),
            t("w_up", Weight, Fp4E2m1, vec![l, h], "[ffn, hidden]"),
            t("w_up_bs", Weight, Fp8E4m3, vec![l, h / 16], "[ffn, hidden/16]"),
            t("w_up_s", Weight, F32, vec![1], "[1]"),
            t("w_down", Weight, Fp4E2m1, vec![h, l], "[hidden, ffn]"),
            t("w_down_bs", Weight, Fp8E4m3, vec![h, l / 16], "[hidden, ffn/16]"),
            t("w_down_s", Weight, F32, vec![1], "[1]"),
            t("post_norm", Weight, Bf16, vec![h], "[hidden]"),
            t("out", Output, Bf16, vec![h], "[hidden]"),
        ],
        _ => vec![],
    }
}

pub fn tolerance(kernel: &str) -> f32 {
    match kernel {
        "project_qkv" => 0.04,
        "attention_output" => 0.05,
        _ => 0.01,
    }
}
pub const RTOL: f32 = 0.01;

/// Bytes of all weight tensors (incl. scales and norms).
pub fn weight_bytes(kernel: &str, s: &Shape) -> u64 {
    specs(kernel, s).iter().filter(|t| t.role == Role::Weight).map(|t| t.bytes()).sum()
}

/// Parse `k=v,k=v` shape overrides for a kernel.
pub fn parse_shape(kernel: &str, spec: &str) -> Result<Shape, String> {
    let mut s = Shape::default();
    for kv in spec.split(',').filter(|x| !x.trim().is_empty()) {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("bad --shape item `{}` (expected key=value)", kv))?;
        let v: u32 = v.trim().parse().map_err(|_| format!("bad --shape value `{}`", v))?;
        s.set(kernel, k.trim(), v)?;
    }
    s.validate(kernel)?;
    Ok(s)
}

