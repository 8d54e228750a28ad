//! The three decode kernels on the device: seeded inputs and references.
use crate::hot::*;
use crate::num::*;
pub use npu::shape::*;
use npu::Dt;

fn put_bf16(out: &mut [u8], seed: u64, stream: u64, lo: f64, hi: f64) {
    for i in 0..out.len() / 2 {
        let v = lo + (hi - lo) * unit(rng(seed, stream, i as u64));
        out[2 * i..2 * i + 2].copy_from_slice(&f32_to_bf16(v as f32).to_le_bytes());
    }
}

/// rms of the fp8 weight code distribution used below (codes 0..=0x3F, random sign)
fn fp8_w_rms() -> f32 {
    let mut s = 0f64;
    for c in 0..64u8 {
        let v = fp8_to_f32(c) as f64;
        s += v * v;
    }
    (s / 64.0).sqrt() as f32
}

/// Generate the bytes of every tensor from the seed (stateless: depends on
/// (seed, kernel, tensor name, index) only). Outputs are left zero.
pub fn gen_inputs(kernel: &str, s: &Shape, seed: u64) -> Vec<Vec<u8>> {
    let sp = specs(kernel, s);
    sp.iter().enumerate().map(|(ti, t)| gen_tensor(kernel, s, seed, ti, t)).collect()
}

/// The bytes of one named tensor.
pub fn gen_inputs_one(kernel: &str, s: &Shape, seed: u64, name: &str) -> Vec<u8> {
    let sp = specs(kernel, s);
    let ti = sp.iter().position(|t| t.name == name).unwrap();
    gen_tensor(kernel, s, seed, ti, &sp[ti])
}

fn gen_tensor(kernel: &str, s: &Shape, seed: u64, ti: usize, t: &TensorSpec) -> Vec<u8> {
    let mut b = vec![0u8; t.bytes() as usize];
    gen_tensor_into(kernel, s, seed, ti, t, &mut b);
    b
}

/// Generate tensor `ti` into `b` (which must be zeroed and t.bytes() long).
pub fn gen_tensor_into(kernel: &str, s: &Shape, seed: u64, ti: usize, t: &TensorSpec, b: &mut [u8]) {
    {
        let stream = crate::hot::mix(ti as u64 + 1) ^ (kernel.len() as u64 * 7919) ^ t.name.bytes().fold(0u64, |a, b| a.wrapping_mul(131).wrapping_add(b as u64));
        let b = &mut *b;
        let k_dim = *t.dims.last().unwrap() as f64;
        match (t.name, t.dt) {
            (_, _) if t.role == Role::Output => {}
            ("pos", _) => {
                let p = (rng(seed, stream, 0) % 32768) as i32;
                b.copy_from_slice(&p.to_le_bytes());
            }
            ("x", _) => put_bf16(b, seed, stream, -2.0, 2.0),
            ("attn", _) | ("k_cache", _) | ("v_cache", _) => put_bf16(b, seed, stream, -1.0, 1.0),
            ("residual", _) => put_bf16(b, seed, stream, -2.0, 2.0),
            (n, Dt::Bf16) if n.ends_with("norm") => put_bf16(b, seed, stream, 0.5, 1.5),
            (n, Dt::Bf16) if n.ends_with("_scale") => {
                // per output channel scale; K = input dim of the matrix
                let kin = match kernel {
                    "attention_output" => (s.q_heads * s.head_dim) as f64,
                    _ => s.hidden as f64,
                };
                let base = 1.0 / (kin.sqrt() * fp8_w_rms() as f64);
                put_bf16(b, seed, stream, 0.5 * base, 1.5 * base)
            }
            (_, Dt::Fp8E4m3) if t.role == Role::Weight && !t.name.ends_with("_bs") => {
                fill_bytes(seed, stream, b);
                for x in b.iter_mut() {
                    *x &= 0xBF; // sign + codes 0..=0x3F (|w| < 2)
                }
            }
            (_, Dt::Fp8E4m3) => {
                // block scales: exponent field 6 or 7 → values in [0.5, 1.875]
                fill_bytes(seed, stream, b);
                for x in b.iter_mut() {
                    *x = (if *x & 0x80 != 0 { 7 << 3 } else { 6 << 3 }) | (*x & 7);
                }
            }
            (_, Dt::Fp4E2m1) => fill_bytes(seed, stream, b),
            (_, Dt::F32) => {
                // per-matrix scale; the matrix is the tensor before the _s suffix: K = its last dim
                let kin = if t.name == "w_down_s" { s.ffn } else { s.hidden } as f64;
                let _ = k_dim;
                let v = (0.8 + 0.4 * unit(rng(seed, stream, 0))) / (kin.sqrt() * 2.93 * 1.15);
                b.copy_from_slice(&(v as f32).to_le_bytes());
            }
            _ => fill_bytes(seed, stream, b),
        }
    }
}

pub fn bf16s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2).map(|c| bf16_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect()
}
fn to_bf16_bytes(v: &[f32]) -> Vec<u8> {
    let mut o = Vec::with_capacity(v.len() * 2);
    for x in v {
        o.extend_from_slice(&f32_to_bf16(*x).to_le_bytes());
    }
    o
}

pub fn rmsnorm(x: &[f32], gamma: &[f32]) -> Vec<f32> {
    let ss: f32 = x.iter().map(|v| v * v).sum();
    let r = 1.0 / (ss / x.len() as f32 + EPS).sqrt();
    x.iter().zip(gamma).map(|(v, g)| v * r * g).collect()
}

/// RoPE on one head vector (half-split convention).
pub fn rope(v: &mut [f32], pos: u32, theta: f32) {
    let d = v.len();
    let half = d / 2;
    for i in 0..half {
        let freq = (theta as f64).powf(-2.0 * i as f64 / d as f64);
        let ang = pos as f64 * freq;
        let (sn, cs) = (ang.sin() as f32, ang.cos() as f32);
        let (a, b) = (v[i], v[i + half]);
        v[i] = a * cs - b * sn;
        v[i + half] = b * cs + a * sn;
    }
}

fn gemv_fp8(w: &[u8], rows: usize, k: usize, x: &[f32], scale: &[f32]) -> Vec<f32> {
    (0..rows).map(|r| dot_fp8(&w[r * k..(r + 1) * k], x) * scale[r]).collect()
}
fn gemv_fp4(w: &[u8], bs: &[u8], rows: usize, k: usize, x: &[f32], s: f32) -> Vec<f32> {
    (0..rows).map(|r| dot_fp4_blocked(&w[r * k / 2..(r + 1) * k / 2], &bs[r * k / 16..(r + 1) * k / 16], x) * s).collect()
}

/// Reference outputs: (tensor index, bytes) for every output/state tensor.
pub fn reference<T: AsRef<[u8]>>(kernel: &str, s: &Shape, inp: &[T]) -> Vec<(usize, Vec<u8>)> {
    let v: Vec<&[u8]> = inp.iter().map(|x| x.as_ref()).collect();
    reference_impl(kernel, s, &v)
}

fn reference_impl(kernel: &str, s: &Shape, inp: &[&[u8]]) -> Vec<(usize, Vec<u8>)> {
    let sp = specs(kernel, s);
    let ix = |n: &str| sp.iter().position(|t| t.name == n).unwrap();
    let g = |n: &str| inp[ix(n)];
    let f32s = |n: &str| f32::from_le_bytes(g(n)[0..4].try_into().unwrap());
    let (h, l) = (s.hidden as usize, s.ffn as usize);
    match kernel {
        "feedforward" => {
            let x = bf16s(g("x"));
            let xn: Vec<f32> = rmsnorm(&x, &bf16s(g("ffn_norm"))).into_iter().map(round_bf16).collect();
            let gt = gemv_fp4(g("w_gate"), g("w_gate_bs"), l, h, &xn, f32s("w_gate_s"));
            let up = gemv_fp4(g("w_up"), g("w_up_bs"), l, h, &xn, f32s("w_up_s"));
            let hh: Vec<f32> = gt.iter().zip(&up).map(|(a, b)| round_bf16(gelu_tanh(*a) * b)).collect();
            let d = gemv_fp4(g("w_down"), g("w_down_bs"), h, l, &hh, f32s("w_down_s"));
            let dn = rmsnorm(&d, &bf16s(g("post_norm")));
            let out: Vec<f32> = x.iter().zip(&dn).map(|(a, b)| a + b).collect();
            vec![(ix("out"), to_bf16_bytes(&out))]
        }
        "attention_output" => {
            let a = bf16s(g("attn"));
            let k = a.len();
            let o = gemv_fp8(g("wo"), h, k, &a, &bf16s(g("wo_scale")));
            let on = rmsnorm(&o, &bf16s(g("post_norm")));
            let r = bf16s(g("residual"));
            let out: Vec<f32> = r.iter().zip(&on).map(|(a, b)| a + b).collect();
            vec![(ix("out"), to_bf16_bytes(&out))]
        }
        "project_qkv" => {
            let d = s.head_dim as usize;
            let c = s.cache_len as usize;
            let pos = i32::from_le_bytes(g("pos")[0..4].try_into().unwrap()) as u32;
            let slot = pos as usize % c;
            let x = bf16s(g("x"));
            let xn: Vec<f32> = rmsnorm(&x, &bf16s(g("attn_norm"))).into_iter().map(round_bf16).collect();
            let q = gemv_fp8(g("wq"), (s.q_heads as usize) * d, h, &xn, &bf16s(g("wq_scale")));
            let k = gemv_fp8(g("wk"), (s.kv_heads as usize) * d, h, &xn, &bf16s(g("wk_scale")));
            let v = gemv_fp8(g("wv"), (s.kv_heads as usize) * d, h, &xn, &bf16s(g("wv_scale")));
            let qn = bf16s(g("q_norm"));
            let kn = bf16s(g("k_norm"));
            let mut qo = vec![];
            for hd in q.chunks(d) {
                let mut y = rmsnorm(hd, &qn);
                rope(&mut y, pos, ROPE_THETA);
                qo.extend(y);
            }
            let mut kc = g("k_cache").to_vec();
            let mut vc = g("v_cache").to_vec();
            for (hi, hd) in k.chunks(d).enumerate() {
                let mut y = rmsnorm(hd, &kn);
                rope(&mut y, pos, ROPE_THETA);
                let off = (hi * c + slot) * d * 2;
                kc[off..off + 2 * d].copy_from_slice(&to_bf16_bytes(&y));
                let vv = &v[hi * d..(hi + 1) * d];
                vc[off..off + 2 * d].copy_from_slice(&to_bf16_bytes(vv));
            }
            vec![(ix("q_out"), to_bf16_bytes(&qo)), (ix("k_cache"), kc), (ix("v_cache"), vc)]
        }
        _ => vec![],
    }
}
