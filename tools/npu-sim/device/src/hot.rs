//! Hot arithmetic, precompiled with optimisations in the `npu` rlib
//! (non-generic, so kernel crates built without -O stay fast).
use crate::num::luts;

/// One row dot product: weights `w` (fp8 e4m3 bytes, `cols` elements) · x.
#[inline(never)]
pub fn dot_fp8(w: &[u8], x: &[f32]) -> f32 {
    let l = &luts().fp8;
    let mut acc = [0f32; 8];
    let n = x.len();
    let chunks = n / 8;
    for c in 0..chunks {
        let wb = &w[c * 8..c * 8 + 8];
        let xb = &x[c * 8..c * 8 + 8];
        for j in 0..8 {
            acc[j] += l[wb[j] as usize] * xb[j];
        }
    }
    let mut s = 0f32;
    for j in chunks * 8..n {
        s += l[w[j] as usize] * x[j];
    }
    acc.iter().sum::<f32>() + s
}

/// One row dot product for fp4 e2m1 (2 per byte, low nibble first) with an
/// fp8 e4m3 scale per 16 elements: Σ_blocks scale_b · Σ_{16} w·x.
#[inline(never)]
pub fn dot_fp4_blocked(w: &[u8], scales: &[u8], x: &[f32]) -> f32 {
    let l4 = &luts().fp4pair;
    let l8 = &luts().fp8;
    let nb = x.len() / 16;
    let mut total = 0f32;
    for b in 0..nb {
        let wb = &w[b * 8..b * 8 + 8];
        let xb = &x[b * 16..b * 16 + 16];
        let mut a = [0f32; 4];
        for j in 0..4 {
            let p0 = l4[wb[2 * j] as usize];
            let p1 = l4[wb[2 * j + 1] as usize];
            a[j] += p0[0] * xb[4 * j] + p0[1] * xb[4 * j + 1] + p1[0] * xb[4 * j + 2] + p1[1] * xb[4 * j + 3];
        }
        total += l8[scales[b] as usize] * ((a[0] + a[1]) + (a[2] + a[3]));
    }
    total
}

/// bf16 weights row dot.
#[inline(never)]
pub fn dot_bf16(w: &[u8], x: &[f32]) -> f32 {
    let mut s = 0f32;
    for (i, xv) in x.iter().enumerate() {
        let h = u16::from_le_bytes([w[2 * i], w[2 * i + 1]]);
        s += crate::num::bf16_to_f32(h) * xv;
    }
    s
}

/// splitmix64
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Stateless PRNG: a u64 for (seed, stream, index).
#[inline]
pub fn rng(seed: u64, stream: u64, i: u64) -> u64 {
    mix(mix(seed ^ stream.wrapping_mul(0xD6E8_FEB8_6659_FD93)) ^ i)
}

/// Uniform in [0,1) from a u64.
#[inline]
pub fn unit(u: u64) -> f64 {
    (u >> 11) as f64 / (1u64 << 53) as f64
}

/// Fill `out` with random bytes for (seed, stream).
#[inline(never)]
pub fn fill_bytes(seed: u64, stream: u64, out: &mut [u8]) {
    let base = mix(seed ^ stream.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    let mut chunks = out.chunks_exact_mut(8);
    let mut i = 0u64;
    for c in &mut chunks {
        c.copy_from_slice(&mix(base ^ i).to_le_bytes());
        i += 1;
    }
    let rem = chunks.into_remainder();
    let v = mix(base ^ i).to_le_bytes();
    let n = rem.len();
    rem.copy_from_slice(&v[..n]);
}

/// FNV-1a 64 of bytes, hex.
pub fn fingerprint(b: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    format!("{:016x}", h)
}
